"""The work: one package per feature (media, power, boot), each holding its Celery tasks beside their logic."""
