"""The wire contract: every message the system sends, built by Celery task name.

The API, the tasks and the reaper all build their messages here: the InsertMedia chord, a Reset,
the check that follows a start, an eject, a boot override. Only celery is imported (no task
bodies, no kubernetes), so the API tier builds them with a client-only Celery app. The names are
what messages in Redis carry: they never change (tests/unit/test_layout.py).
"""

from __future__ import annotations

from celery import Celery, chain, chord, uuid


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


def send_insert_media_chord(
    app: Celery,
    system_id: str,
    device: str,
    gen: int,
    image: str,
    task_id: str,
    body_id: str | None = None,
) -> str:
    """Send ``insert_media_chord`` as the one message its ``apply_async`` publishes; the import's
    Celery id.

    Celery's canvas clones and deep-copies every signature of the chord to produce that message
    and the chord's size key: about 1 ms of the API's CPU per InsertMedia against 0.3 ms for a
    single task (``python -m bench.api_memory``). Here the same message is built as plain data:
    the import carries the attach as its chain, and the attach carries the chord's body (with
    the errback) and its group. ``body_id``: the release's Celery id, chosen by the Store.
    tests/unit/test_wire_messages.py holds this message equal to the canvas's, so a Celery upgrade that
    changes the chord's message fails there, not in production.
    """
    group_id, attach_id, import_id = uuid(), uuid(), uuid()
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
    # The chord's body runs when as many members reported as this size says: one, the attach.
    app.backend.set_chord_size(group_id, 1)
    app.send_task(
        "media.import",
        args=(system_id, device, gen, image, task_id),
        task_id=import_id,
        root_id=import_id,
        reply_to=reply_to,
        chain=[attach],
    )
    return import_id


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


def eject_media(app: Celery, system_id: str, device: str, gen: int, task_id: str):
    return app.signature("media.eject", args=(system_id, device, gen, task_id), immutable=True)


def power_reset(app: Celery, system_id: str, action: str, task_id: str, celery_id: str = ""):
    """``celery_id``: the id the Store recorded for this Reset, so that a copy sent again by
    the reaper is the same Celery task (one run per delivery drops the spare)."""
    options = {"task_id": celery_id} if celery_id else {}
    return app.signature(
        "power.reset", args=(system_id, action, task_id), immutable=True, **options
    )


def power_verify(
    app: Celery, system_id: str, task_id: str, vmi_uid_before: str, since: float | None = None
):
    """The check that follows a start; ``since``: when the start was made (the bound counts
    from there, also for a copy sent again)."""
    return app.signature(
        "power.verify", args=(system_id, task_id, vmi_uid_before), kwargs={"since": since}
    )


def boot_apply(app: Celery, system_id: str, boot_gen: int):
    return app.signature("boot.apply", args=(system_id, boot_gen), immutable=True)
