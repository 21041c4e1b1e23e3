"""The InsertMedia chord sent as plain data publishes what Celery's canvas publishes."""

from __future__ import annotations

import base64
import json
import re

import redis

from app.dispatch import make_celery
from fleetfish import wire
from fleetfish.celery_config import MEDIA_QUEUE
from fleetfish.settings import Settings

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ARGS = ("ns.node-1", "Cd", 4, "http://192.0.2.10/boot-1.iso", "task-9")


def _published(redis_url: str, send) -> str:
    """What one send leaves in Redis (the queued message, the chord's keys with their values),
    with every id replaced by its order of first appearance, so two sends compare equal when
    they differ only in the ids they drew."""
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    send()
    [raw] = client.lrange(MEDIA_QUEUE, 0, -1)
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
    by_canvas = _published(
        redis_url, lambda: wire.insert_media_chord(app, *ARGS).apply_async(task_id="release-1")
    )
    direct = _published(
        redis_url, lambda: wire.send_insert_media_chord(app, *ARGS, body_id="release-1")
    )
    assert direct == by_canvas
    # The comparison saw the chord: the attach carries the body, which carries the errback.
    assert '"task": "media.release"' in direct and '"task": "media.failed"' in direct
    assert '"release-1"' in direct


def test_the_direct_chord_returns_the_import_id_it_queued(redis_url):
    app = make_celery(Settings(redis_url=redis_url))
    import_id = wire.send_insert_media_chord(app, *ARGS)
    client = redis.Redis.from_url(redis_url)
    [raw] = client.lrange(MEDIA_QUEUE, 0, -1)
    client.close()
    assert json.loads(raw)["headers"]["id"] == import_id
