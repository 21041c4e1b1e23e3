"""Messages built as plain data (fleetfish.wire) publish what Celery itself publishes."""

from __future__ import annotations

import base64
import json
import re

import pytest
import redis
from celery.utils.saferepr import saferepr

from app.dispatch import make_celery
from fleetfish import wire
from fleetfish.celery_config import MEDIA_QUEUE, POWER_QUEUE
from fleetfish.settings import Settings

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ARGS = ("ns.node-1", "Cd", 4, "http://192.0.2.10/boot-1.iso", "task-9")


def _published(redis_url: str, send, queue: str = MEDIA_QUEUE) -> str:
    """What one send leaves in Redis (the queued message, the chord's keys with their values),
    with every id replaced by its order of first appearance, so two sends compare equal when
    they differ only in the ids they drew."""
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    send()
    other_queue = POWER_QUEUE if queue == MEDIA_QUEUE else MEDIA_QUEUE
    assert client.llen(other_queue) == 0, "the message went to the other queue"
    [raw] = client.lrange(queue, 0, -1)
    message = json.loads(raw)
    message["body"] = json.loads(base64.b64decode(message["body"]))
    # The canvas copies a task's ignore_result into the header only where the task's body is
    # imported (other tests here import them; the API never does); the worker reads the
    # task's own option either way.
    message["headers"].pop("ignore_result")
    chord_keys = {
        key.decode(): [client.get(key).decode(), client.ttl(key) > 0]
        for key in client.scan_iter("celery-taskset-meta-*")
    }
    client.close()
    text = json.dumps({"message": message, "chord keys": chord_keys}, sort_keys=True, indent=1)
    ids: dict[str, str] = {}
    return _UUID.sub(lambda m: ids.setdefault(m.group(0), f"<id {len(ids)}>"), text)


def test_the_direct_chord_message_is_the_canvas_message(redis_url):
    app = make_celery(Settings(redis_url=redis_url))
    client = redis.Redis.from_url(redis_url)
    by_canvas = _published(
        redis_url, lambda: wire.insert_media_chord(app, *ARGS).apply_async(task_id="release-1")
    )
    direct = _published(
        redis_url,
        lambda: wire.publish(
            client, wire.insert_media_chord_message(app, *ARGS, body_id="release-1")
        ),
    )
    client.close()
    assert direct == by_canvas
    # The comparison saw the chord: the attach carries the body, which carries the errback.
    assert '"task": "media.release"' in direct and '"task": "media.failed"' in direct
    assert '"release-1"' in direct


@pytest.mark.parametrize(
    "queue, name, options",
    [
        (POWER_QUEUE, "power.reset", {"task_id": "reset-1"}),
        (MEDIA_QUEUE, "media.eject", {}),
        (POWER_QUEUE, "power.verify", {"kwargs": {"since": 1234.5}}),
    ],
)
def test_a_task_message_is_what_send_task_publishes(redis_url, queue, name, options):
    app = make_celery(Settings(redis_url=redis_url))
    client = redis.Redis.from_url(redis_url)
    args = ("ns.node-1", "On", "task-9")
    by_celery = _published(redis_url, lambda: app.send_task(name, args=args, **options), queue)
    direct = _published(
        redis_url,
        lambda: wire.publish(client, wire.task_message(app, name, args, **options)),
        queue,
    )
    client.close()
    assert direct == by_celery
    assert f'"task": "{name}"' in direct


def test_the_direct_chord_names_the_import_it_queued(redis_url):
    app = make_celery(Settings(redis_url=redis_url))
    client = redis.Redis.from_url(redis_url)
    publication = wire.insert_media_chord_message(app, *ARGS)
    wire.publish(client, publication)
    [raw] = client.lrange(MEDIA_QUEUE, 0, -1)
    client.close()
    assert json.loads(raw)["headers"]["id"] == publication.task_id


@pytest.mark.parametrize(
    "args",
    [
        (),
        {},
        ARGS,
        ("ns.node-1", "On", "task-9"),
        ("ns.node-1", 7),
        ('http://[2001:db8::1]:8080/boot-ü.iso?token=a%20b&x="y"',),
        ("it's",),
        ("back\\slash",),
        ("line\nbreak", 1),
        ("tab\there",),
        ("x" * 510,),
        ("x" * 2000, 3),
        (True, None, 1.5),
        (("nested", 1),),
        ({"since": 1.5},),
        {"since": 12.25},
    ],
    ids=lambda args: repr(args)[:24],
)
def test_the_arguments_are_shown_as_celery_shows_them(args):
    app = make_celery(Settings(redis_url="redis://127.0.0.1:1/0"))
    maxlevels = app.conf.task_repr_maxlevels
    assert wire.args_repr(args, maxlevels) == saferepr(args, 1024, maxlevels=maxlevels)
