"""Virtual media: the media.* Celery tasks (tasks.py) and the DataVolume and cdrom logic (volumes.py)."""
