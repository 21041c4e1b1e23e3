"""The API's client-only Celery app: sends tasks by name, never imports task bodies."""

from __future__ import annotations

import logging

import redis
from celery import Celery
from celery.backends.redis import RedisBackend
from celery.canvas import Signature
from celery.result import AsyncResult

from fleetfish import wire
from fleetfish.celery_config import celery_config
from fleetfish.settings import Settings

log = logging.getLogger("fleetfish.api")

# A broker outage must turn into a quick 503, not a request hanging on publish retries.
_CLIENT_OVERRIDES = {
    "task_publish_retry": True,
    "task_publish_retry_policy": {
        "max_retries": 2,
        "interval_start": 0.1,
        "interval_step": 0.2,
        "interval_max": 0.5,
    },
    "broker_connection_timeout": 2,
    "broker_connection_retry": False,
    "redis_socket_connect_timeout": 2,
    "redis_socket_timeout": 5,
}


class _NoResultConsumer(RedisBackend.ResultConsumer):
    def consume_from(self, task_id):
        return None

    def cancel_for(self, task_id):
        return None


class SendOnlyRedisBackend(RedisBackend):
    """The Redis result backend minus result subscriptions.

    The stock backend subscribes to the result channel of every task it sends (and of a chord's
    header), expecting the sender to wait; the API never waits, so that would only pile up
    pub/sub subscriptions and waiters. Chords still need the backend for their counters, which
    stay.
    """

    ResultConsumer = _NoResultConsumer

    def add_pending_result(self, result, weak=False, start_drainer=True):
        # A chord files its header's results as waiters in a process-wide map, emptied only
        # when someone receives them; nobody here ever does, so each InsertMedia left ~4 KiB
        # behind for the life of the API process.
        return result


def make_celery(settings: Settings) -> Celery:
    app = Celery("fleetfish-api", set_as_current=False)
    app.conf.update(celery_config(settings))
    app.conf.update(_CLIENT_OVERRIDES)
    if settings.redis_url.startswith(("redis://", "rediss://", "unix://")):
        app.conf.result_backend = f"app.dispatch:SendOnlyRedisBackend+{settings.redis_url}"
    return app


def send(signature: Signature, system_id: str, celery_id: str | None = None) -> AsyncResult:
    """Queue a signature (or canvas), under ``celery_id`` when the Store chose it beforehand;
    broker failures propagate and become a 503."""
    result = signature.apply_async(task_id=celery_id) if celery_id else signature.apply_async()
    log.info("sent %s system=%s celery_id=%s", _name(signature), system_id, result.id)
    return result


def publish(pipe: redis.client.Pipeline, system_id: str, *publications: wire.Publication) -> None:
    """Queue messages built by ``fleetfish.wire`` by running ``pipe`` (the Store's: the broker
    is the same Redis) with their writes after what the caller queued on it, so a request's
    event and its work reach Redis in one round trip; Redis failures propagate and become a
    503."""
    for publication in publications:
        publication.write(pipe)
    pipe.execute()
    for publication in publications:
        log.info("sent %s system=%s celery_id=%s", publication.name, system_id, publication.task_id)


def _name(signature: Signature) -> str:
    return getattr(signature, "task", None) or type(signature).__name__
