"""The broker transport fleetfish selects for redis:// URLs: messages flow, one client publishes."""

from __future__ import annotations

import redis
from celery import Celery

from fleetfish.celery_config import celery_config
from fleetfish.redis_transport import TRANSPORT, Channel
from fleetfish.settings import Settings


def _app(redis_url: str) -> Celery:
    app = Celery("transport-test", set_as_current=False)
    app.conf.update(celery_config(Settings(redis_url=redis_url)))
    return app


def test_plain_redis_urls_use_it_and_tls_urls_keep_kombus_own():
    assert celery_config(Settings(redis_url="redis://h:6379/0"))["broker_transport"] == TRANSPORT
    assert "broker_transport" not in celery_config(Settings(redis_url="rediss://h:6380/0"))


def test_sent_tasks_reach_the_queue_through_one_publishing_client(redis_url):
    app = _app(redis_url)
    queue = "fleetfish.transport-test"
    client = redis.Redis.from_url(redis_url)
    client.delete(queue)
    with app.producer_or_acquire() as producer:
        channel = producer.channel
        assert isinstance(channel, Channel)
        for i in range(20):
            app.send_task("media.import", args=(f"ns.vm-{i}",), queue=queue, producer=producer)
        first = channel._publisher
        app.send_task("media.import", args=("ns.vm-last",), queue=queue, producer=producer)
        assert channel._publisher is first is not None
    assert client.llen(queue) == 21
    client.delete(queue)
