"""The workers' sweep of parked imports: sends each parked look that fell due unwoken.

A parked import (tasks/media/tasks.py ``_await_wake``) is normally woken by the watcher when
its DataVolume's import ends. Its look also has a due time, and every worker runs this sweep
in a thread, so that an import still moves on when no wake-up comes: no watcher holds the lease,
the watcher died between the event and its send, or it missed the event. The sweep lives in the
workers because they are the processes an import cannot do without anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from workers.dvmirror import DvMirror

log = logging.getLogger("fleetfish.worker")

# How often each worker looks for due parked imports (one Redis script call per sweep).
SWEEP_SECONDS = 1.0
# Looks sent per sweep at most; the rest wait for the next sweep.
SWEEP_LIMIT = 200


class WakeSweeper:
    def __init__(self, mirror: DvMirror, send: Callable[[str], None]):
        self.mirror = mirror
        self.send = send
        self.stop_event = threading.Event()

    def sweep(self, now: float | None = None) -> int:
        """Send the looks due by ``now``; how many were sent."""
        sent = 0
        for ns, name, look in self.mirror.due_wakes(now or time.time(), SWEEP_LIMIT):
            try:
                self.send(look)
            except Exception as exc:  # noqa: BLE001 - due again in RESEND_SECONDS
                log.warning("could not send the parked import of %s/%s: %s", ns, name, exc)
                continue
            # Read before the look is forgotten with it; only for the rare look that fell due.
            waiting = self.mirror.waiting_import(ns, name) or {}
            self.mirror.forget_wake(ns, name, look)
            log.info(
                "parked import of %s/%s fell due without a wake-up: looking now system=%s",
                ns,
                name,
                waiting.get("system_id", "-"),
            )
            sent += 1
        return sent

    def run(self) -> None:
        failing = False
        while not self.stop_event.wait(SWEEP_SECONDS):
            try:
                self.sweep()
            except Exception as exc:  # noqa: BLE001 - Redis away: the next sweep tries again
                if not failing:  # once per outage, not every second
                    log.warning("sweep of parked imports failed: %s", exc)
                failing = True
                continue
            if failing:
                log.info("sweep of parked imports works again")
            failing = False

    def stop(self) -> None:
        self.stop_event.set()
