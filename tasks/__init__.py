"""Celery task bodies (media, power, boot) and the canvas the API sends by name."""
