"""Re-sends InsertMedia, EjectMedia and Reset work whose message was lost (run by the watcher).

Redis hands a queued message to a worker's blocking pop before the worker records it as
unacked; a worker host cut off from the network at that moment takes the message with it, and
no visibility timeout brings it back. An API process killed between recording a request and
sending its message leaves the same state.

Media: the media stays Starting/Updating and a deferred Reset waits for ever. Media work left
untouched for ``stale_after`` seconds is sent again for its generation: every step is
idempotent per generation and the deferred Reset is handed over exactly once
(``Store.release_deferred``), so a duplicate of slow-but-alive work only polls twice.

Eject: the EjectMedia task stays Running, and the cdrom volume and the DataVolume stay. An
eject whose task has not ended ``stale_after`` seconds after it was recorded (or last sent) is
sent again for its generation: the eject is idempotent and runs under the device lock with its
generation checked, so a copy of a slow one only finds nothing left to do.

Reset: the Redfish task stays Running and the node never changes state. A Reset sent as
``power.reset`` stays in ``ff:resets`` until a worker takes its message; one still there after
``stale_after`` seconds is sent again under the same Celery id, so a copy racing a slow
original is dropped by the one-run-per-delivery guard, and a worker that took it (alive or
killed: its message is then unacked and comes back by itself) is never doubled. A Reset
followed meanwhile by another Reset of the same system, or a power-on followed by an
InsertMedia or EjectMedia, is cancelled instead: the client moved on, and the old action would
land out of order (an old ForceOff after the newer On, an old On while the next ISO is still
importing). A power-off followed only by media requests still runs: Ironic sends ForceOff and
EjectMedia back to back, and the eject changes no power state. A Reset deferred behind
media is not in ``ff:resets``: the media chord releases it.

Start check: the Reset task stays Running and the node may show PoweringOn. Each run of
``power.verify`` touches its start in ``ff:starts``; one untouched for ``stale_after`` seconds
(its check looks every few seconds) lost its message and is checked again: the copy counts the
power-on bound from the start, so it completes the task at once if the VM runs, and otherwise
waits out the rest of the bound.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from fleetfish.store import DEVICES, ENDED_TASK_STATES, PENDING_STATES, Store

log = logging.getLogger("fleetfish.watcher")

SendChord = Callable[[str, str, int, str, str], None]
# system id, ResetType, Redfish task id, Celery id
SendReset = Callable[[str, str, str, str], None]
# system id, device, media generation, Redfish task id
SendEject = Callable[[str, str, int, str], None]
# system id, Redfish task id, VMI uid before the start, start time
SendStartCheck = Callable[[str, str, str, float], None]


Snapshot = dict[str, dict[str, dict[str, str]]]  # device -> system id -> media


def media_snapshot(store: Store) -> Snapshot:
    """Every system's media, read once per sweep for both checks (one round trip per 500)."""
    return {device: store.every_media(device) for device in DEVICES}


def stale_media(
    store: Store, now: float, stale_after: float, snapshot: Snapshot | None = None
) -> list[tuple[str, str, dict]]:
    """(system, device, media) of pending media not updated for ``stale_after`` seconds."""
    found = []
    for device, by_system in (snapshot or media_snapshot(store)).items():
        for system_id, media in by_system.items():
            if media.get("state") not in PENDING_STATES or not media.get("gen"):
                continue
            if now - float(media.get("updated") or 0) >= stale_after:
                found.append((system_id, device, media))
    return found


def _touch_and_send(
    store: Store,
    found: list[tuple[str, str, dict]],
    what: str,
    send: Callable[[str, str, dict], None],
) -> list[str]:
    """Touch each found media's generation, then send its work again; the system ids sent for.

    Touched first: a failure to send is retried after another stale period, not at once."""
    sent = []
    for system_id, device, media in found:
        gen = int(media["gen"])
        if not store.update_media(system_id, device, gen):
            continue  # superseded meanwhile
        log.warning("%s of %s %s gen %s stalled: sending it again", what, system_id, device, gen)
        send(system_id, device, media)
        sent.append(system_id)
    return sent


def resend_stalled(
    store: Store, send: SendChord, stale_after: float, snapshot: Snapshot | None = None
) -> list[str]:
    """Send the chord again for each stalled media; the system ids it was sent for."""
    return _touch_and_send(
        store,
        stale_media(store, time.time(), stale_after, snapshot),
        "media work",
        lambda sid, dev, m: send(sid, dev, int(m["gen"]), m.get("image", ""), m.get("task", "")),
    )


def stalled_ejects(
    store: Store, now: float, stale_after: float, snapshot: Snapshot | None = None
) -> list[tuple[str, str, dict]]:
    """(system, device, media) of ejects whose task has not ended ``stale_after`` seconds
    after it was recorded or last sent."""
    found = []
    for device, by_system in (snapshot or media_snapshot(store)).items():
        for system_id, media in by_system.items():
            # An eject's generation has no image; an insert's (pending or failed) has one.
            if media.get("image") or media.get("state") in PENDING_STATES or not media.get("task"):
                continue
            if now - float(media.get("updated") or 0) < stale_after:
                continue
            task = store.get_task(media["task"])
            if task and task.get("state") not in ENDED_TASK_STATES:
                found.append((system_id, device, media))
    return found


def resend_stalled_ejects(
    store: Store, send: SendEject, stale_after: float, snapshot: Snapshot | None = None
) -> list[str]:
    """Send ``media.eject`` again for each stalled eject; the system ids it was sent for."""
    return _touch_and_send(
        store,
        stalled_ejects(store, time.time(), stale_after, snapshot),
        "eject",
        lambda sid, dev, m: send(sid, dev, int(m["gen"]), m["task"]),
    )


def resend_lost_resets(store: Store, send: SendReset, stale_after: float) -> list[str]:
    """Send ``power.reset`` again for each Reset no worker took within ``stale_after``
    seconds; the task ids it was sent for."""
    sent = []
    sent_before = time.time() - stale_after
    for task_id in store.stale_resets(sent_before):
        # Claimed and touched in one step: a failure to send is retried a stale period later.
        claim = store.resend_reset(task_id, sent_before)
        if claim["verdict"] == "superseded":
            log.warning(
                "Reset %s task %s of %s never reached a worker and task %s came after it:"
                " cancelled",
                claim["action"],
                task_id,
                claim["system"],
                claim["superseded_by"],
            )
        if claim["verdict"] != "resend":
            continue
        log.warning(
            "Reset %s task %s of %s not taken by a worker for %.0f s: sending it again",
            claim["action"],
            task_id,
            claim["system"],
            stale_after,
        )
        send(claim["system"], claim["action"], task_id, claim["celery_id"])
        sent.append(task_id)
    return sent


def resend_lost_start_checks(store: Store, send: SendStartCheck, stale_after: float) -> list[str]:
    """Send ``power.verify`` again for each followed start whose check has not run for
    ``stale_after`` seconds (a check looks every few seconds); the task ids it was sent for."""
    sent = []
    for task_id in store.unsettled_starts(time.time() - stale_after):
        task = store.get_task(task_id)
        if not task or task.get("state") in ENDED_TASK_STATES:
            store.start_followed(task_id)
            continue
        # Touched first: a failure to send is retried a stale period later, not at once.
        store.touch_start(task_id)
        before = task.get("vmi_before", "")
        started = float(task.get("followed_at") or time.time())
        log.warning(
            "start of %s (task %s) unchecked for %.0f s: checking it again",
            task.get("system", ""),
            task_id,
            stale_after,
        )
        send(task.get("system", ""), task_id, "" if before == "-" else before, started)
        sent.append(task_id)
    return sent


def celery_senders(settings) -> tuple[SendChord, SendReset, SendEject, SendStartCheck]:
    """The senders over one client-only Celery app (the watcher imports no task bodies)."""
    import redis
    from celery import Celery

    from fleetfish.celery_config import celery_config
    from fleetfish.wire import (
        eject_media,
        insert_media_chord_message,
        power_reset,
        power_verify,
        publish,
    )

    app = Celery("fleetfish-reaper")
    app.conf.update(celery_config(settings))
    broker = redis.Redis.from_url(settings.redis_url)

    def send_chord(system_id: str, device: str, gen: int, image: str, task_id: str) -> None:
        publish(broker, insert_media_chord_message(app, system_id, device, gen, image, task_id))

    def send_reset(system_id: str, action: str, task_id: str, celery_id: str) -> None:
        publish(broker, power_reset(app, system_id, action, task_id, celery_id))

    def send_eject(system_id: str, device: str, gen: int, task_id: str) -> None:
        publish(broker, eject_media(app, system_id, device, gen, task_id))

    def send_start_check(system_id: str, task_id: str, vmi_before: str, started: float) -> None:
        power_verify(app, system_id, task_id, vmi_before, started).apply_async()

    return send_chord, send_reset, send_eject, send_start_check
