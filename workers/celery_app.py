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
from workers.memory import CycleCollector, freeze_startup_objects

app = Celery("fleetfish", include=["tasks.media.tasks", "tasks.power.tasks", "tasks.boot.tasks"])
app.config_from_object(celery_config(Settings.from_env()))
# Survives a Redis restart; see workers/consumer.py.
app.conf.worker_consumer = "workers.consumer:Consumer"

log = logging.getLogger("fleetfish.worker")
_context = threading.local()
LOG_FORMAT = "%(asctime)s %(levelname)s %(role)s [%(system)s] %(name)s: %(message)s"


class SystemFilter(logging.Filter):
    """Adds ``record.system``: the system id of the task running in this thread, or '-'; and
    ``record.role``: "fleetfish.worker", or the worker's role under ``workers.host`` (its
    process name there), so that the lines of a host's workers in one log tell them apart."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.system = getattr(_context, "system", "-")
        role = record.processName
        record.role = role if role and role != "MainProcess" else "fleetfish.worker"
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


_collector = CycleCollector()


@signals.task_postrun.connect
def _task_postrun(**_kwargs) -> None:
    _context.system = "-"
    _collector.after_task()


_watchers: list = []
_sweepers: list = []


def _start_wake_sweeper(conf: Settings) -> None:
    """Sends parked imports' looks that fell due with no wake-up (workers/wake_sweeper.py)."""
    from workers.dvmirror import DvMirror, wake_sender
    from workers.wake_sweeper import WakeSweeper

    sweeper = WakeSweeper(DvMirror(runtime.store().r), wake_sender(conf))
    thread = threading.Thread(target=sweeper.run, name="fleetfish-wake-sweeper", daemon=True)
    thread.start()
    _sweepers.append((sweeper, thread))


def _start_watcher(conf: Settings) -> None:
    """The watcher role inside this worker: a thread competing for the same Redis lease as
    every other watcher, so one process fewer per replica and a takeover whenever the holding
    worker dies."""
    from workers.watcher import Watcher

    watcher = Watcher(conf, runtime.store(), runtime.kube())
    watcher.resend_lost_work()
    thread = threading.Thread(target=watcher.run, name="fleetfish-watcher", daemon=True)
    thread.start()
    _watchers.append((watcher, thread))
    log.info("watcher %s runs in this worker, standing by for the lease", watcher.holder)


@signals.worker_ready.connect
def _worker_ready(sender=None, **_kwargs) -> None:
    conf = runtime.settings()
    log.info(
        "worker ready: namespaces=%s legacy_sequential=%s watcher_in_worker=%s",
        ",".join(conf.namespaces) or "(all)",
        conf.legacy_sequential,
        conf.worker_watch,
    )
    if conf.worker_watch:
        _start_watcher(conf)
    _start_wake_sweeper(conf)
    freeze_startup_objects()


@signals.worker_shutdown.connect
def _worker_shutdown(**_kwargs) -> None:
    # Warm shutdown already requeued or finished the tasks; the watcher frees its lease and
    # only the clients are left.
    log.info("worker shutting down")
    for watcher, thread in _watchers:
        watcher.stop()
        thread.join(10)
    _watchers.clear()
    for sweeper, thread in _sweepers:
        sweeper.stop()
        thread.join(5)
    _sweepers.clear()
    runtime.close()
