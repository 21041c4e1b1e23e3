"""The per-system event log: what happened to a node, in a capped Redis list the API renders.

Written by whichever tier sees the event (the API on a request, the workers on the work, the
watcher on a boot); read by the API (Redfish ``LogServices/Log``, ``/fleet``) and by
``fleetfish nodes``. Keys (listed with the rest in ``fleetfish.store``):

``ff:log:{id}``      LIST of JSON entries, newest first, trimmed to ``max_entries``
``ff:logmeta:{id}``  HASH: ``seq`` (last entry Id), the marks that keep a repeated event
                     (a redelivered task, a watcher relist) from being logged twice, and the
                     last boot (``boot_device``, ``boot_image``, ``boot_at``)

An entry is ``{"id", "created" (epoch), "severity" (OK|Warning|Critical), "kind", "message",
"message_id" ("" when no registry message fits)}``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from fleetfish.store import APPEND_EVENT_LUA, key_log, key_log_meta

# Kinds of entries (the fleet view keys on them).
INSERTED = "inserted"
IMPORT = "import"
DEFERRED = "deferred"
RELEASED = "released"
RESET = "reset"
BOOTED = "booted"
MEDIA_FAILED = "media_failed"
POWER_FAILED = "power_failed"
EJECTED = "ejected"
CLEARED = "cleared"

IMPORT_MILESTONES = (25, 50, 75, 100)

# KEYS: log, meta. ARGV: APPEND_EVENT_LUA's args (entry, bound, mark, meta pairs).
_APPEND = APPEND_EVENT_LUA + "return append_event(KEYS[1], KEYS[2], ARGV, 1, #ARGV)\n"


def _inserted(device: str, image: str, gen: int) -> dict[str, Any]:
    """An insert's entry, marked so that a generation is logged once."""
    return {
        "kind": INSERTED,
        "message": f"Virtual media {device} inserted: {image}",
        "mark": (f"insert:{device}", str(gen)),
    }


def _import_progress(device: str, gen: int, name: str, pct: float) -> dict[str, Any]:
    """An import's entry, marked so that each milestone of a generation is logged once."""
    milestone = import_milestone(pct)
    if milestone == 0:
        text = f"Import of {name} started"
    elif milestone == 100:
        text = f"Import of {name} finished (100%)"
    else:
        text = f"Import of {name}: {milestone}%"
    return {"kind": IMPORT, "message": text, "mark": (f"import:{device}", f"{gen}:{milestone}")}


def import_milestone(percent: float) -> int:
    """The highest milestone ``percent`` reached (0 below the first)."""
    reached = [m for m in IMPORT_MILESTONES if percent >= m]
    return reached[-1] if reached else 0


class EventLog:
    """Append and read the event logs; holds no state but the client and the bound."""

    def __init__(self, client: redis.Redis, max_entries: int = 200):
        self.r = client
        self.max_entries = max(1, int(max_entries))
        self._append = client.register_script(_APPEND)

    def add(
        self,
        system_id: str,
        kind: str,
        message: str,
        *,
        severity: str = "OK",
        message_id: str = "",
        mark: tuple[str, str] | None = None,
        meta: dict[str, Any] | None = None,
        pipe: redis.client.Pipeline | None = None,
    ) -> int:
        """Append one entry; with ``mark`` (field, value) only if that mark changed.

        With ``pipe`` the append is one more command of that pipeline (0 is returned; the
        entry's id comes with the pipeline's replies): the API writes an InsertMedia's entry
        in the round trip that queues its work.
        """
        keys, args = self.append_args(
            system_id,
            kind,
            message,
            severity=severity,
            message_id=message_id,
            mark=mark,
            meta=meta,
        )
        if pipe is not None:
            # EVAL, not EVALSHA: a pipeline cannot reload a script Redis lost (a restart)
            # without another round trip; Redis caches the script by its text.
            pipe.eval(_APPEND, len(keys), *keys, *args)
            return 0
        return int(self._append(keys=keys, args=args))

    def append_args(
        self,
        system_id: str,
        kind: str,
        message: str,
        *,
        severity: str = "OK",
        message_id: str = "",
        mark: tuple[str, str] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> tuple[list[str], list[str]]:
        """KEYS and ARGV of one append (``fleetfish.store.APPEND_EVENT_LUA``), for a script
        that writes an entry with its own work."""
        entry = {
            "created": round(time.time(), 3),
            "severity": severity,
            "kind": kind,
            "message": message,
            "message_id": message_id,
        }
        args: list[str] = [json.dumps(entry), str(self.max_entries)]
        args += [mark[0], mark[1]] if mark else ["", ""]
        for name, value in (meta or {}).items():
            args += [name, str(value)]
        return [key_log(system_id), key_log_meta(system_id)], args

    def entries(self, system_id: str, limit: int | None = None) -> list[dict]:
        """Newest first, at most ``limit``."""
        stop = -1 if limit is None else max(0, limit - 1)
        raws = self.r.lrange(key_log(system_id), 0, stop)
        return [json.loads(raw) for raw in raws]

    def meta(self, system_id: str) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.r.hgetall(key_log_meta(system_id)).items()}

    def clear(self, system_id: str) -> None:
        """Drop every entry; ids keep growing, so an old entry's id never names a new one."""
        self.r.delete(key_log(system_id))

    # -- the events of a node's life -----------------------------------------------------------

    def inserted(
        self,
        system_id: str,
        device: str,
        image: str,
        gen: int,
        pipe: redis.client.Pipeline | None = None,
    ) -> None:
        self.add(system_id, **_inserted(device, image, gen), pipe=pipe)

    def inserted_args(
        self, system_id: str, device: str, image: str, gen: int
    ) -> tuple[list[str], list[str]]:
        """``inserted``'s append as KEYS and ARGV (InsertMedia writes it with its insert)."""
        return self.append_args(system_id, **_inserted(device, image, gen))

    def import_progress_args(
        self, system_id: str, device: str, gen: int, name: str, pct: float
    ) -> tuple[list[str], list[str]]:
        """An import's entry as KEYS and ARGV of the append, written with the progress itself
        (``Store.import_progress``): started (below 25 %) and its 25/50/75/100 % milestones,
        once each per insert."""
        return self.append_args(system_id, **_import_progress(device, gen, name, pct))

    def deferred(self, system_id: str, action: str, task_id: str) -> None:
        self.add(
            system_id,
            DEFERRED,
            f"Reset {action} deferred until the virtual media is ready (task {task_id})",
        )

    def reset(
        self, system_id: str, action: str, task_id: str, pipe: redis.client.Pipeline | None = None
    ) -> None:
        self.add(system_id, RESET, f"Reset {action} requested (task {task_id})", pipe=pipe)

    def released(self, system_id: str, action: str, task_id: str) -> None:
        self.add(
            system_id,
            RELEASED,
            f"Reset {action} released: virtual media ready (task {task_id})",
            mark=("released", task_id),
        )

    def booted(self, system_id: str, vmi_uid: str, device: str, image: str = "") -> None:
        """A new VMI runs, booted from ``device`` (Cd, Hdd, Pxe or None)."""
        text = f"Booted from {device}" + (f": {image}" if image else "")
        self.add(
            system_id,
            BOOTED,
            text,
            mark=("boot", vmi_uid),
            meta={"boot_device": device, "boot_image": image, "boot_at": time.time()},
        )

    def media_failed(self, system_id: str, device: str, gen: int, reason: str) -> None:
        self.add(
            system_id,
            MEDIA_FAILED,
            f"Virtual media {device} failed: {reason}",
            severity="Critical",
            mark=(f"failed:{device}", str(gen)),
        )

    def power_failed(self, system_id: str, task_id: str, reason: str, action: str = "") -> None:
        what = f"Reset {action}" if action else "Power-on"
        self.add(
            system_id,
            POWER_FAILED,
            f"{what} failed: {reason} (task {task_id})",
            severity="Critical",
            mark=("power_failed", task_id),
        )

    def ejected(
        self, system_id: str, device: str, pipe: redis.client.Pipeline | None = None
    ) -> None:
        self.add(system_id, EJECTED, f"Virtual media {device} ejected", pipe=pipe)
