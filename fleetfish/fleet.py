"""Fleet status: one summary row per system from Redis only, for ``fleetfish nodes`` and ``/fleet``.

Everything comes from what the API already serves (mirror, media, power, event log), read in one
pipelined round trip whatever the number of systems; nothing here talks to the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fleetfish.mirror import power_state
from fleetfish.store import KEY_SYSTEMS, key_log, key_log_meta, key_media, key_power, key_system


def _media_summary(media: dict[str, str]) -> tuple[str, float | None]:
    """(state word, import percentage or None) of the Cd slot."""
    if media.get("health") == "Critical":
        return "failed", None
    state = media.get("state") or "Enabled"
    if state == "Starting":
        return "importing", float(media.get("progress") or 0)
    if state == "Updating":
        return "attaching", 100.0
    if media.get("inserted") == "1":
        return "inserted", None
    return "empty", None


def status_row(
    doc: dict,
    media: dict[str, str],
    power: dict[str, str],
    meta: dict[str, str],
    events: list[dict],
) -> dict[str, Any]:
    """The row of one system: what an operator scans a fleet for."""
    media_state, progress = _media_summary(media)
    error = power.get("error") or ""
    if not error and media.get("health") == "Critical":
        error = media.get("message") or "virtual media failed"
    return {
        "id": doc["id"],
        "namespace": doc.get("namespace", ""),
        "name": doc.get("name", ""),
        "power": power_state(doc, power),
        "media": media_state,
        "image": media.get("image_name") or "",
        "progress": progress,
        "deferred": power.get("deferred") or "",
        "boot_device": meta.get("boot_device") or "",
        "boot_at": float(meta["boot_at"]) if meta.get("boot_at") else None,
        "error": error,
        "events": [
            {
                "id": e.get("id"),
                "created": e.get("created"),
                "severity": e.get("severity"),
                "message": e.get("message"),
            }
            for e in events
        ],
    }


def fleet_status(
    client, allows: Callable[[dict], bool] | None = None, events: int = 5
) -> list[dict[str, Any]]:
    """Rows of every mirrored system ``allows(doc)`` accepts, in id order, each with its
    ``events`` newest log entries (newest first)."""
    ids = sorted(str(x) for x in client.smembers(KEY_SYSTEMS))
    if not ids:
        return []
    pipe = client.pipeline(transaction=False)
    for sid in ids:
        pipe.get(key_system(sid))
        pipe.hgetall(key_media(sid, "Cd"))
        pipe.hgetall(key_power(sid))
        pipe.hgetall(key_log_meta(sid))
        pipe.lrange(key_log(sid), 0, max(0, events - 1))
    replies = pipe.execute()
    rows = []
    for offset in range(0, len(replies), 5):
        raw, media, power, meta, log = replies[offset : offset + 5]
        if not raw:
            continue  # left the cluster between the two reads
        doc = json.loads(raw)
        if allows is not None and not allows(doc):
            continue
        entries = [json.loads(x) for x in log] if events > 0 else []
        rows.append(status_row(doc, _str(media), _str(power), _str(meta), entries))
    return rows


def _str(mapping: dict) -> dict[str, str]:
    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    return {text(k): text(v) for k, v in mapping.items()}
