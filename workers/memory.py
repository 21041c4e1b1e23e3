"""Prompt collection of the reference cycles that every retried task leaves behind."""

from __future__ import annotations

import gc
import threading
import time


class CycleCollector:
    """A full garbage collection after a task, at most once every ``interval`` seconds.

    Each ``self.retry()`` (an import poll) leaves a reference cycle: Celery's ExceptionInfo
    holds the Retry exception, whose traceback holds the frames that hold the ExceptionInfo,
    and billiard copies the code positions of every frame into lists, tens of KiB per retry.
    Python starts a full collection after a number of surviving *objects*; these are few
    objects holding many bytes, so without help they piled up: a worker's peak RSS in the
    200-node benchmark was 146 MiB without this collector and 107 MiB with it every 5 s. What
    piles up between collections grows with the polls per second: every 0.5 s took the 50-node
    peak from 105 to 93 MiB for no measurable CPU (docs/scaling.md). After the startup freeze a
    collection scans only what tasks made, a few milliseconds.
    """

    def __init__(self, interval: float = 0.5, clock=time.monotonic):
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
