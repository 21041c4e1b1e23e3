"""A per-process cap on the share of time spent in bcrypt checks of new credentials.

A sync API process checking a password does nothing else for ~0.25 s (cost 12): a flood of
guesses with fresh user names and addresses would take every process. The budget is a bucket of
seconds that refills at ``share`` seconds per second, up to ``burst`` seconds; a check may start
while the bucket is not empty and its measured duration is taken out afterwards. Credentials
this process verified before (since the users file last changed) never wait for it.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator

# At most a fifth of each process's time goes to bcrypt under a flood, the rest serves requests
# with verified credentials and sessions: in `python -m bench.auth_flood` a share of 0.5 left
# authenticated GETs a p99 of 490 ms, 0.2 about 90 ms (docs/security.md).
SHARE = 0.2
# A few logins at once (Ironic conductors starting) pass without waiting; more cost-12 checks in
# a row would hold a sync process for seconds.
BURST_SECONDS = 1.0


class BcryptBudget:
    """Thread-safe token bucket measured in seconds of bcrypt."""

    def __init__(
        self,
        share: float = SHARE,
        burst: float = BURST_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.share = share
        self.burst = burst
        self._clock = clock
        self._level = burst
        self._at = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self.burst, self._level + (now - self._at) * self.share)
        self._at = now

    def available(self) -> bool:
        """True when a check may start now (always, with a share of 0: no cap)."""
        if self.share <= 0:
            return True
        with self._lock:
            self._refill()
            return self._level > 0

    @contextlib.contextmanager
    def spending(self) -> Iterator[None]:
        """Time the check inside and take its duration out of the bucket (it may go below 0)."""
        started = self._clock()
        try:
            yield
        finally:
            with self._lock:
                self._refill()
                self._level -= self._clock() - started

    def retry_after(self) -> int:
        """Whole seconds after which a check may start again (at least 1)."""
        with self._lock:
            self._refill()
            # The first whole second at which the level is above zero again.
            return math.floor(max(0.0, -self._level) / max(self.share, 1e-9)) + 1
