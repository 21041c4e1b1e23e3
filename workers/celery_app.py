"""The worker fleet's Celery app: ``celery -A workers.celery_app worker --pool threads ...``.

Logs go to stderr as ``fleetfish.worker`` lines carrying the system id of the task that wrote
them (a logging filter fed by task_prerun/postrun; each pool thread runs one task at a time).
"""

from __future__ import annotations

import logging
import sys
import threading

from celery import Celery, signals

from fleetfish.celery_config import celery_config
from fleetfish.settings import Settings
from workers import runtime

app = Celery("fleetfish", include=["tasks.media", "tasks.power", "tasks.boot"])
app.config_from_object(celery_config(Settings.from_env()))
# Survives a Redis restart; see workers/consumer.py.
app.conf.worker_consumer = "workers.consumer:Consumer"

log = logging.getLogger("fleetfish.worker")
_context = threading.local()
LOG_FORMAT = "%(asctime)s %(levelname)s fleetfish.worker [%(system)s] %(name)s: %(message)s"


class SystemFilter(logging.Filter):
    """Adds ``record.system``: the system id of the task running in this thread, or '-'."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.system = getattr(_context, "system", "-")
        return True


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(SystemFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The kubernetes client logs every request body at DEBUG; keep it quiet.
    logging.getLogger("urllib3").setLevel(logging.WARNING)


@signals.setup_logging.connect
def _setup_logging(loglevel=None, **_kwargs) -> None:
    # Connecting this signal stops Celery from configuring logging itself.
    configure_logging(runtime.settings().log_level)


@signals.task_prerun.connect
def _task_prerun(task=None, args=None, kwargs=None, **_kwargs) -> None:
    system = (args[0] if args else None) or (kwargs or {}).get("system_id") or "-"
    _context.system = str(system)


@signals.task_postrun.connect
def _task_postrun(**_kwargs) -> None:
    _context.system = "-"


@signals.worker_ready.connect
def _worker_ready(sender=None, **_kwargs) -> None:
    conf = runtime.settings()
    log.info(
        "worker ready: namespaces=%s legacy_sequential=%s",
        ",".join(conf.namespaces) or "(all)",
        conf.legacy_sequential,
    )


@signals.worker_shutdown.connect
def _worker_shutdown(**_kwargs) -> None:
    # Warm shutdown already requeued or finished the tasks; only the clients are left.
    log.info("worker shutting down")
    runtime.close()
