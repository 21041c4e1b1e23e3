"""Power: the power.* Celery tasks (tasks.py) and the Reset actions on KubeVirt (reset.py)."""
