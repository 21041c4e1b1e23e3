"""Boot override: the boot.* Celery tasks (tasks.py) and the bootOrder/firmware logic (override.py)."""
