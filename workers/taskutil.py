"""Helpers shared by the task bodies: bounded backoff on Transient errors, short Redis locks."""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Any

import redis
from celery import Task

from workers.kubevirt import Transient

# Transient Kubernetes errors are retried this many times (2, 4, 8, ... s, capped) per step.
MAX_TRANSIENT = 6
BACKOFF_CAP = 30.0
LOCK_TTL = 60
LOCK_WAIT = 20


def backoff(attempt: int) -> float:
    """Exponential backoff with jitter, capped (keeps countdowns far below the visibility
    timeout so an ETA message is never redelivered while it waits)."""
    return min(BACKOFF_CAP, 2.0**attempt) * (0.75 + random.random() / 2)


def retry_transient(task: Task, exc: Exception, kwargs: dict[str, Any]) -> Exception:
    """``raise retry_transient(self, exc, kwargs)``: retry with backoff, counting Transient
    failures in the ``transient`` kwarg (polling retries do not count), or give up with exc."""
    attempt = int(kwargs.get("transient", 0)) + 1
    if attempt > MAX_TRANSIENT or not task.request.id or task.request.called_directly:
        return exc
    return task.retry(exc=exc, countdown=backoff(attempt), kwargs={**kwargs, "transient": attempt})


class Busy(Transient):
    """A short per-device lock was held too long by another task."""


@contextmanager
def device_lock(client: redis.Redis, system_id: str, device: str):
    """Serialises the VM/DataVolume writes of one media device across workers (insert, attach,
    eject, failure cleanup), so a stale task can never write after a newer one."""
    lock = client.lock(
        f"ff:lock:media:{system_id}:{device}", timeout=LOCK_TTL, blocking_timeout=LOCK_WAIT
    )
    if not lock.acquire():
        raise Busy(f"media of {system_id} {device} is busy")
    try:
        yield
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:
            pass
