"""The broker transport fleetfish selects for redis:// URLs: messages flow, one client publishes."""

from __future__ import annotations

import logging

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


def test_an_ack_after_the_broker_connection_was_dropped_is_logged_not_fatal(redis_url, caplog):
    """A task that ends while Redis is away is acknowledged once the worker has reconnected,
    on the channel of the connection Celery dropped: that ack must fail as a connection error
    (logged; the message comes back through the visibility timeout, and its duplicate run is
    dropped), not as an AttributeError that stops the worker."""
    app = _app(redis_url)
    queue = "fleetfish.transport-ack-test"
    app.send_task("media.import", args=("ns.vm-0",), queue=queue)
    connection = app.connection_for_read()
    channel = connection.default_channel
    message = channel.basic_get(queue, no_ack=False)
    assert message is not None
    errors = connection.connection_errors + connection.channel_errors
    # What Celery does when it loses the broker: it collects the connection (its transport
    # forgets the broker's address) and the channel's close drops the channel's pools.
    connection.collect()
    channel._disconnect_pools()
    message.ack_log_error(logging.getLogger("ack-test"), errors)
    assert "Couldn't ack" in caplog.text and "ConnectionError" in caplog.text
