"""What a CDI DataVolume's status says about its import (progress, done, failed for good), and
how that progress is shown: shared by the watcher, which sees the DataVolume's events, and the
media tasks, which wait on it."""

from __future__ import annotations

import re
from dataclasses import dataclass

# CDI retries a failing importer pod for ever; after this many restarts the error is real.
MAX_IMPORT_RESTARTS = 3
_PERCENT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*$")


def parse_progress(text: str | None) -> float | None:
    """CDI ``status.progress`` ("45.20%", "N/A", "") as a percentage, None when unknown."""
    match = _PERCENT.match(text or "")
    if not match:
        return None
    return max(0.0, min(100.0, float(match.group(1))))


@dataclass(frozen=True)
class ImportStatus:
    phase: str
    progress: float | None
    done: bool
    error: str  # non-empty: the import failed for good


def _condition_message(dv: dict) -> str:
    conditions = (dv.get("status") or {}).get("conditions") or []
    by_type = {c.get("type"): c for c in conditions}
    for kind in ("Running", "Ready", "Bound"):
        cond = by_type.get(kind) or {}
        if cond.get("message"):
            return str(cond["message"])
    return ""


def import_status(dv: dict) -> ImportStatus:
    status = dv.get("status") or {}
    phase = status.get("phase") or ""
    progress = parse_progress(status.get("progress"))
    if phase == "Succeeded":
        return ImportStatus(phase, 100.0, True, "")
    name = (dv.get("metadata") or {}).get("name", "")
    if phase == "Failed":
        reason = _condition_message(dv) or "import failed"
        return ImportStatus(phase, progress, False, f"DataVolume {name} failed: {reason}")
    restarts = int(status.get("restartCount") or 0)
    if restarts >= MAX_IMPORT_RESTARTS:
        reason = _condition_message(dv) or "importer keeps failing"
        return ImportStatus(
            phase, progress, False, f"import of DataVolume {name} failed {restarts} times: {reason}"
        )
    return ImportStatus(phase, progress, False, "")


def import_ended(dv: dict) -> bool:
    """The DataVolume's import is over, one way or another (succeeded, failed for good, being
    deleted): what an import waiting on it looks for."""
    status = import_status(dv)
    deleting = bool((dv.get("metadata") or {}).get("deletionTimestamp"))
    return status.done or bool(status.error) or deleting


# The import's share of the InsertMedia task's percentage (the attach is the rest).
IMPORT_PERCENT_SHARE = 90


def report_import_progress(
    store, events, system_id: str, device: str, gen, task_id: str, image: str, shown: float
) -> bool:
    """Import progress onto the media hash, the Redfish task and the event log (one Redis
    step); False when a newer media request superseded generation ``gen``."""
    name = image.rsplit("/", 1)[-1]
    task = {
        "state": "Running",
        "percent": int(shown * IMPORT_PERCENT_SHARE / 100),
        "message": f"Importing {name}: {shown:.1f}%",
    }
    event = events.import_progress_args(system_id, device, gen, name, shown)
    return store.import_progress(system_id, device, gen, f"{shown:.1f}", task_id, task, event)
