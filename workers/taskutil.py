"""Helpers shared by the task bodies: bounded backoff on Transient errors, short Redis locks."""

from __future__ import annotations

import functools
import logging
import random
import time
from contextlib import contextmanager
from typing import Any

import redis
from celery import Task
from celery.exceptions import Ignore, Retry

from workers import runtime
from workers.errors import Transient, Waiting

log = logging.getLogger("fleetfish.worker")

# Transient errors are retried this many times (2, 4, 8, ... s, capped) per step.
MAX_TRANSIENT = 6
BACKOFF_CAP = 30.0
# The locked sections are a few API calls; a killed holder blocks others for LOCK_TTL at most.
LOCK_TTL = 10
# Never park a worker thread on the lock: a busy device is a short Transient retry instead.
LOCK_WAIT = 2
DONE_TTL = 3600

# How often a task waiting for the cluster to finish a change (Waiting) looks again.
WAIT_LOOK = 2.0


def backoff(attempt: int) -> float:
    """Exponential backoff with jitter, capped far below the visibility timeout: an ETA
    message waiting longer than that would be delivered again while it waits."""
    cap = min(BACKOFF_CAP, max(1.0, runtime.settings().visibility_timeout / 3))
    return min(cap, 2.0**attempt) * (0.75 + random.random() / 2)


def retry_transient(task: Task, exc: Exception, kwargs: dict[str, Any]) -> Exception:
    """``raise retry_transient(self, exc, kwargs)``: retry with backoff, counting Transient
    failures in the ``transient`` kwarg (polling retries do not count), or give up with exc.

    A ``Waiting`` error is looked at again every WAIT_LOOK seconds without counting, from the
    first time it was seen (the ``waiting_since`` kwarg) up to the power-on timeout."""
    if isinstance(exc, Waiting):
        since = float(kwargs.get("waiting_since") or 0) or time.time()
        waited = time.time() - since
        if waited >= runtime.settings().power_on_timeout or not task.request.id:
            return exc
        if task.request.called_directly:
            return exc
        return task.retry(exc=exc, countdown=WAIT_LOOK, kwargs={**kwargs, "waiting_since": since})
    attempt = int(kwargs.get("transient", 0)) + 1
    if attempt > MAX_TRANSIENT or not task.request.id or task.request.called_directly:
        return exc
    return task.retry(exc=exc, countdown=backoff(attempt), kwargs={**kwargs, "transient": attempt})


class Parked(dict):
    """What a run returns when its task's next run waits in Redis (a parked import): the
    message is acked, the chain does not go on from this run, and the run counts as done, not
    as the task's end. Flower shows the run succeeded with ``{'parked': True}``."""


def park(task: Task) -> Parked:
    """``return park(self)`` once the next look is registered (it carries the chain).

    A return, not an exception: Celery builds an ExceptionInfo (a walk of every frame) for an
    ``Ignore`` and its traceback keeps a reference cycle alive until the next full collection,
    once per import.
    """
    task.request.chain = None  # the look carries it; nothing follows this run
    task.request.callbacks = None
    return Parked(parked=True)


class Busy(Transient):
    """A short Redis lock was held too long by another task (not a Kubernetes error)."""


@contextmanager
def _short_lock(client: redis.Redis, name: str, ttl: float, busy: str):
    lock = client.lock(name, timeout=ttl, blocking_timeout=LOCK_WAIT)
    if not lock.acquire():
        raise Busy(busy)
    try:
        yield
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:
            pass


def device_lock(client: redis.Redis, system_id: str, device: str):
    """Serialises the VM/DataVolume writes of one media device across workers (insert, attach,
    eject, failure cleanup), so a stale task can never write after a newer one."""
    return _short_lock(
        client,
        f"ff:lock:media:{system_id}:{device}",
        LOCK_TTL,
        f"media of {system_id} {device} is busy",
    )


def reset_lock(client: redis.Redis, task_id: str):
    """One delivery at a time per Reset task: a copy of its message (the reaper's, racing a
    slow first delivery) waits, then finds the action done. A killed holder's lock expires
    after a visibility timeout, which is when its own message comes back anyway."""
    return _short_lock(
        client,
        f"ff:lock:reset:{task_id}",
        runtime.settings().visibility_timeout,
        f"Reset task {task_id} is running elsewhere",
    )


def single_delivery(fn):
    """Run each (task id, retry number) once even when Redis delivers its message twice.

    A run that outlives the visibility timeout is delivered again while the first copy still
    runs (celery/celery#6358), and both copies would keep re-scheduling themselves. Each run
    marks ``ff:run:{id}:{retries}`` ``running`` and then ``done``; a task that returned or
    failed also marks ``ff:run:{id}:final``. A second copy of a run that is ``done`` (or of a
    finished task) is dropped with ``Ignore`` (no state, no chain/chord callback). A copy
    finding the run still ``running`` cannot know whether the first copy is alive or was
    SIGKILLed, so it is never dropped: it tries again later as the next run, which either
    finds that run done by the first copy (dropped) or carries the work on.
    """

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        if not self.request.id or self.request.called_directly:
            return fn(self, *args, **kwargs)
        store = runtime.store()
        claim = store.claim_run(self.request.id, self.request.retries, DONE_TTL)
        if claim == "finished":
            log.warning("duplicate of finished %s dropped", self.name)
            raise Ignore()
        if claim == "done":
            log.warning("duplicate of %s run %s dropped", self.name, self.request.retries)
            raise Ignore()
        if claim == "running":
            log.warning(
                "%s run %s is running elsewhere: checking again later",
                self.name,
                self.request.retries,
            )
            raise self.retry(countdown=max(1.0, runtime.settings().visibility_timeout / 3))
        final = False
        try:
            result = fn(self, *args, **kwargs)
            final = not isinstance(result, Parked)
            return result
        except Retry:
            raise
        except Exception:
            final = True
            raise
        finally:
            store.end_run(self.request.id, self.request.retries, DONE_TTL, final)

    return wrapper
