"""kombu's Redis transport, publishing through one reusable client per channel.

kombu builds a new ``redis.Redis`` for every message it publishes (``conn_or_acquire``), and
redis-py 8 fills about 170 response callbacks in each constructor: about 0.8 ms of CPU per
publish, more than the publish itself. The API publishes a task and an event per InsertMedia or
Reset, and a worker several messages per import poll, so that cost showed in both tiers.
A ``redis.Redis`` over a connection pool is thread-safe, so one per channel serves every thread.

It also keeps a worker alive when a task's acknowledgement reaches a channel whose broker
connection was dropped during a Redis outage (see ``Channel.conn_or_acquire``).
"""

from __future__ import annotations

from contextlib import contextmanager

import redis
from kombu.transport import redis as kombu_redis

# Selected with the broker_transport setting (fleetfish.celery_config) for redis:// URLs.
TRANSPORT = "fleetfish.redis_transport:Transport"


class Channel(kombu_redis.Channel):
    _publisher = None

    @contextmanager
    def conn_or_acquire(self, client=None):
        if client:
            yield client
            return
        if self._pool is None and (self.connection is None or self.connection.client is None):
            # A channel of a broker connection Celery dropped (Redis went away): a task that
            # ended meanwhile is acked on it after the reconnect. kombu would fail to rebuild
            # the pool with an AttributeError, which stops the worker; a connection error is
            # what Celery expects here (it logs it, and the unacked message comes back).
            raise redis.exceptions.ConnectionError("the broker connection of this channel is gone")
        publisher = self._publisher
        # A new pool (the channel reconnected) gets a new client; the old one is dropped.
        if publisher is None or publisher.connection_pool is not self.pool:
            publisher = self._publisher = self._create_client()
        yield publisher


class Transport(kombu_redis.Transport):
    Channel = Channel
