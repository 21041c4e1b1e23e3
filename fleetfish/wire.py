"""The wire contract: every message the system sends, built by Celery task name.

The API, the tasks and the reaper all build their messages here: the InsertMedia chord, a Reset,
the check that follows a start, an eject, a boot override. Most are built as data
(``Publication``: what Celery would write to Redis) and written with the other Redis writes of
the request that sends them; the check that follows a start, which a worker sends with a
countdown, stays a Celery signature. Only celery is imported (no task
bodies, no kubernetes), so the API tier builds them with a client-only Celery app. The names are
what messages in Redis carry: they never change (tests/unit/test_layout.py).
"""

from __future__ import annotations

import base64
import json
import weakref
from dataclasses import dataclass, replace

import redis
from celery import Celery, chain, chord, uuid
from celery.utils.nodenames import anon_nodename
from celery.utils.saferepr import saferepr

# Celery's limit on a message's argsrepr/kwargsrepr (celery.app.amqp.AMQP.argsrepr_maxsize).
_REPR_MAXSIZE = 1024
# Below it by a margin: saferepr's cut near the limit is its own business.
_PLAIN_REPR_MAXSIZE = _REPR_MAXSIZE // 2
# Task name -> queue, per Celery app (task_routes are fixed once the app is configured); weak, so
# an app that is gone neither stays alive nor lends its entries to a new one at the same id.
_QUEUES: weakref.WeakKeyDictionary[Celery, dict[str, str]] = weakref.WeakKeyDictionary()


def insert_media_chord(
    app: Celery, system_id: str, device: str, gen: int, image: str, task_id: str
) -> chord:
    """Media work as the chord header, the deferred-power release as its body.

    The body is immutable (``si``): it does not want the header's results, it asks Redis (through
    ``Store.release_deferred``) which power action, if any, was deferred meanwhile.
    """
    header = chain(
        app.signature(
            "media.import", args=(system_id, device, gen, image, task_id), immutable=True
        ),
        app.signature("media.attach", args=(system_id, device, gen, task_id), immutable=True),
    )
    body = app.signature("media.release", args=(system_id, device, gen, task_id), immutable=True)
    errback = app.signature("media.failed", args=(system_id, device, gen, task_id), immutable=True)
    return chord([header], body).on_error(errback)


@dataclass(frozen=True)
class Publication:
    """What sending one message writes to Redis: the message on its queue's list (as kombu's
    Redis transport LPUSHes it) and, for a chord, the key holding the chord's size."""

    name: str
    task_id: str
    queue: str
    message: str
    chord_size_key: str = ""
    chord_ttl: int | None = None

    def write(self, pipe: redis.client.Pipeline) -> None:
        """Queue the writes on ``pipe`` (the size key first: the body counts against it)."""
        if self.chord_size_key:
            pipe.set(self.chord_size_key, 1, ex=self.chord_ttl)
        pipe.lpush(self.queue, self.message)


def publish(client: redis.Redis, *publications: Publication) -> None:
    """Write ``publications`` in one round trip; errors propagate (the API answers 503)."""
    pipe = client.pipeline(transaction=False)
    for publication in publications:
        publication.write(pipe)
    pipe.execute()


def task_message(
    app: Celery,
    name: str,
    args: tuple,
    kwargs: dict | None = None,
    *,
    task_id: str | None = None,
    chain: list[dict] | None = None,
) -> Publication:
    """``app.send_task(name, args, kwargs, task_id=..., chain=...)``'s message, as data.

    Celery's send_task and kombu's publish cost several times what building the message does,
    and a round trip of their own; the API's calls publish this way in the pipeline of their
    other Redis writes (``python -m bench.api_memory``: EjectMedia 1.67 -> 0.94 ms of CPU). tests/unit/test_wire_messages.py holds the
    message equal to send_task's, so a Celery or kombu upgrade that changes it fails there.
    """
    task_id = task_id or uuid()
    kwargs = kwargs or {}
    args = tuple(args)
    reply_to = app.thread_oid
    headers = {
        "lang": "py",
        "task": name,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": args_repr(args, app.conf.task_repr_maxlevels),
        "kwargsrepr": args_repr(kwargs, app.conf.task_repr_maxlevels),
        "origin": anon_nodename(),
        "ignore_result": None,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }
    embed = {"callbacks": None, "errbacks": None, "chain": chain, "chord": None}
    body = json.dumps([list(args), kwargs, embed])
    queue = _queue_of(app, name)
    message = {
        "body": base64.b64encode(body.encode()).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {
            "correlation_id": task_id,
            "reply_to": reply_to,
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": uuid(),
        },
    }
    return Publication(name, task_id, queue, json.dumps(message))


def args_repr(args: tuple | dict, maxlevels: int) -> str:
    """Celery's ``saferepr`` of a message's arguments, at the cost of ``repr`` for what the
    messages carry (ids, names, URLs, numbers): for those the two print the same text, and
    saferepr's generic walk was a tenth of InsertMedia's CPU. Anything else (a quote, a
    backslash, a control character, a long text, a container) takes saferepr."""
    if not args:
        return "{}" if isinstance(args, dict) else "()"
    if isinstance(args, tuple) and all(map(_plain, args)):
        text = repr(args)
        if len(text) <= _PLAIN_REPR_MAXSIZE:
            return text
    return saferepr(args, _REPR_MAXSIZE, maxlevels=maxlevels)


def _plain(value: object) -> bool:
    """An argument whose ``repr`` is saferepr's: an int, or a printable text that repr quotes
    as is (no quote, no backslash)."""
    kind = type(value)
    if kind is int:
        return True
    return kind is str and value.isprintable() and "'" not in value and "\\" not in value


def insert_media_chord_message(
    app: Celery,
    system_id: str,
    device: str,
    gen: int,
    image: str,
    task_id: str,
    body_id: str | None = None,
) -> Publication:
    """``insert_media_chord``'s ``apply_async``, as data: its one message and its size key.

    Celery's canvas clones and deep-copies every signature of the chord to produce them (about
    1 ms of the API's CPU per InsertMedia). The import carries the attach as its chain, and
    the attach carries the chord's body (with the errback) and its group. ``body_id``: the
    release's Celery id, chosen by the Store. tests/unit/test_wire_messages.py holds both equal
    to the canvas's.
    """
    group_id, attach_id = uuid(), uuid()
    reply_to = app.thread_oid
    errback = _signature_data("media.failed", (system_id, device, gen, task_id), {})
    body = _signature_data(
        "media.release",
        (system_id, device, gen, task_id),
        {
            "link_error": [errback],
            "task_id": body_id or uuid(),
            "reply_to": reply_to,
            "group_id": group_id,
        },
    )
    attach = _signature_data(
        "media.attach",
        (system_id, device, gen, task_id),
        {
            "task_id": attach_id,
            "reply_to": reply_to,
            "group_id": group_id,
            "chord": body,
            "group_index": 0,
        },
    )
    message = task_message(
        app, "media.import", (system_id, device, gen, image, task_id), chain=[attach]
    )
    # The chord's body runs when as many members reported as this size says: one, the attach.
    # (Celery also deletes the group's counter key first; a new group id has none.)
    backend = app.backend
    return replace(
        message,
        chord_size_key=backend.get_key_for_group(group_id, ".s"),
        chord_ttl=backend.chord_expires or None,
    )


def _queue_of(app: Celery, name: str) -> str:
    """The queue Celery's router picks for task ``name`` (task_routes), looked up once."""
    cache = _QUEUES.setdefault(app, {})
    if name not in cache:
        cache[name] = app.amqp.router.route({}, name)["queue"].name
    return cache[name]


def _signature_data(name: str, args: tuple, options: dict) -> dict:
    """An immutable signature as a message carries it."""
    return {
        "task": name,
        "args": list(args),
        "kwargs": {},
        "options": options,
        "subtask_type": None,
        "immutable": True,
    }


def legacy_media_chain(
    app: Celery, system_id: str, device: str, gen: int, image: str, task_id: str
) -> chain:
    """The sequential mode: the same media work with no chord and nothing waiting on it."""
    return chain(
        app.signature(
            "media.import", args=(system_id, device, gen, image, task_id), immutable=True
        ),
        app.signature("media.attach", args=(system_id, device, gen, task_id), immutable=True),
        app.signature("media.release", args=(system_id, device, gen, task_id), immutable=True),
    ).on_error(
        app.signature("media.failed", args=(system_id, device, gen, task_id), immutable=True)
    )


def eject_media(
    app: Celery, system_id: str, device: str, gen: int, task_id: str, celery_id: str = ""
) -> Publication:
    """``celery_id``: the id the Store recorded for this eject (so the reaper's copy is the
    same Celery task)."""
    args = (system_id, device, gen, task_id)
    return task_message(app, "media.eject", args, task_id=celery_id or None)


def power_reset(
    app: Celery, system_id: str, action: str, task_id: str, celery_id: str = ""
) -> Publication:
    """``celery_id``: the id the Store recorded for this Reset, so that a copy sent again by
    the reaper is the same Celery task (one run per delivery drops the spare)."""
    return task_message(app, "power.reset", (system_id, action, task_id), task_id=celery_id or None)


def power_verify(
    app: Celery, system_id: str, task_id: str, vmi_uid_before: str, since: float | None = None
):
    """The check that follows a start; ``since``: when the start was made (the bound counts
    from there, also for a copy sent again)."""
    return app.signature(
        "power.verify", args=(system_id, task_id, vmi_uid_before), kwargs={"since": since}
    )


def boot_apply(app: Celery, system_id: str, boot_gen: int) -> Publication:
    return task_message(app, "boot.apply", (system_id, boot_gen))
