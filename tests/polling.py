"""Polling for a condition with a deadline: what every test layer uses instead of sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(
    predicate: Callable[[], object], timeout: float, what: str = "condition", interval: float = 0.1
):
    """Poll until ``predicate()`` is truthy and return its value; AssertionError after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
