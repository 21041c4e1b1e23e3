"""Prompt collection of the reference cycles that every retried task leaves behind."""

from __future__ import annotations

import gc
import threading
import time


class CycleCollector:
    """A full garbage collection after a task, at most once every ``interval`` seconds.

    Each ``self.retry()`` leaves a reference cycle: Celery's ExceptionInfo holds the Retry
    exception, whose traceback holds the frames that hold the ExceptionInfo, tens of KiB each.
    Python starts a full collection after a number of surviving *objects*; these are few
    objects holding many bytes, so without help they piled up (a worker's peak RSS in the
    200-node benchmark was 146 MiB with no collector when every import poll retried).
    Imports no longer retry to wait (they park and return), so cycles are rare and one
    collection every 5 s is enough: at N = 200 the workers peaked at 87 MiB with 0.5 s and with
    5 s, and spent 12% less CPU with 5 s (``python -m bench.fleet --sizes 200
    --import-seconds 30 --modes fleetfish``, docs/scaling.md). After the startup freeze a
    collection scans only what tasks made.
    """

    def __init__(self, interval: float = 5.0, clock=time.monotonic):
        self.interval = interval
        self._clock = clock
        self._last = clock()
        self._lock = threading.Lock()

    def after_task(self) -> bool:
        """Collect when the interval has passed; True when this call collected."""
        if self._clock() - self._last < self.interval:
            return False
        if not self._lock.acquire(blocking=False):
            return False  # another pool thread is collecting right now
        try:
            self._last = self._clock()
            gc.collect()
            return True
        finally:
            self._lock.release()


def freeze_startup_objects() -> None:
    """Move everything imported so far out of the collector's sight: each full collection then
    scans only the objects made since, not every imported module's objects again."""
    gc.collect()
    gc.freeze()
