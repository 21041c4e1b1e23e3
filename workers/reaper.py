"""Re-sends InsertMedia work that stalled because its message was lost (run by the watcher).

Redis hands a queued message to a worker's blocking pop before the worker records it as
unacked; a worker host cut off from the network at that moment takes the message with it, and
no visibility timeout brings it back. An API process killed between recording an InsertMedia
and sending its chord leaves the same state. Either way the media stays Starting/Updating and
a deferred Reset waits for ever. Media work left untouched for ``stale_after`` seconds is sent
again for its generation: every step is idempotent per generation and the deferred Reset is
handed over exactly once (``Store.release_deferred``), so a duplicate of slow-but-alive work
only polls twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from fleetfish.store import DEVICES, PENDING_STATES, Store

log = logging.getLogger("fleetfish.watcher")

SendChord = Callable[[str, str, int, str, str], None]


def stale_media(store: Store, now: float, stale_after: float) -> list[tuple[str, str, dict]]:
    """(system, device, media) of pending media not updated for ``stale_after`` seconds."""
    found = []
    for system_id in store.system_ids():
        for device in DEVICES:
            media = store.get_media(system_id, device)
            if media.get("state") not in PENDING_STATES or not media.get("gen"):
                continue
            if now - float(media.get("updated") or 0) >= stale_after:
                found.append((system_id, device, media))
    return found


def resend_stalled(store: Store, send: SendChord, stale_after: float) -> list[str]:
    """Send the chord again for each stalled media; the system ids it was sent for."""
    sent = []
    for system_id, device, media in stale_media(store, time.time(), stale_after):
        gen = int(media["gen"])
        # Touch first: a failure to send is retried after another stale period, not at once.
        if not store.update_media(system_id, device, gen):
            continue  # superseded meanwhile
        log.warning(
            "media of %s %s gen %s stalled for %.0f s: sending its work again",
            system_id,
            device,
            gen,
            stale_after,
        )
        send(system_id, device, gen, media.get("image", ""), media.get("task", ""))
        sent.append(system_id)
    return sent


def celery_sender(settings) -> SendChord:
    """A SendChord over a client-only Celery app (the watcher imports no task bodies)."""
    from celery import Celery

    from fleetfish.celery_config import celery_config
    from tasks.canvas import insert_media_chord

    app = Celery("fleetfish-reaper")
    app.conf.update(celery_config(settings))

    def send(system_id: str, device: str, gen: int, image: str, task_id: str) -> None:
        insert_media_chord(app, system_id, device, gen, image, task_id).apply_async()

    return send
