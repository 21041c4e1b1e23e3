"""The DataVolume mirror: what the watcher's DataVolume watch saw, in Redis, for the import.

The watcher writes one hash per fleetfish DataVolume (``ff:dv:{namespace}/{name}``: phase,
progress, restart count, conditions, deletion) and, per namespace, when its DataVolume watch
last showed a sign of life (``ff:dv:alive``). ``media.import`` reads the hash instead of GETting
the DataVolume; when the namespace's watch has been silent for longer than ``STALE_SECONDS`` (no
watcher holds the lease, the apiserver is away) the import falls back to a GET, at most every
``FLEETFISH_DV_FALLBACK_SECONDS`` (15 s).

A waiting import is parked, not re-queued: it registers its next look (``ff:dvwake:*``, a
Celery signature) with a due time (``ff:dvwake:due``) and its task ends. The watcher sends the
look as soon as the DataVolume's import ends; the workers' sweep (workers/wake_sweeper.py) sends
it when it falls due, in case no wake-up comes (watcher gone, event missed). A look is only
forgotten after it was sent, so a sender that dies in between leaves it for the next sweep.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from redis import Redis

from fleetfish.settings import Settings

KEY_PREFIX = "ff:dv:"
KEY_ALIVE = "ff:dv:alive"
# The next look of an import waiting on a DataVolume, as a Celery signature: the watcher sends
# it as soon as the DataVolume's import ends, instead of the import polling for the end.
KEY_WAKE = "ff:dvwake:"
# When each parked look falls due (sorted set of "namespace/name"): swept by the workers.
KEY_WAKE_DUE = "ff:dvwake:due"
# A look taken by a sweeper is due again after this long, in case that sweeper died unsent.
RESEND_SECONDS = 30.0
# Per VM and device, the mirrored DataVolumes' generations: lets a cleanup skip its LIST.
KEY_DEVICE = "ff:dvdev:"
LABEL_SYSTEM = "fleetfish.io/system"
LABEL_DEVICE = "fleetfish.io/device"
LABEL_GEN = "fleetfish.io/media-gen"
# Every healthy watch stream ends (and is opened again) within WATCH_SECONDS (30 s) and the
# apiserver sends bookmarks meanwhile; twice that without a sign of life: the mirror is stale.
STALE_SECONDS = 60.0
# A parked import looks again after this long at most, even with no wake-up (the watch being
# live, its wake-up should come first; this bounds the wait when it never does).
PARK_SECONDS = 60.0
# A change of progress alone is written at most this often per DataVolume (CDI updates it
# every few seconds; the import's progress shown to users does not need more).
PROGRESS_SECONDS = 5.0


# KEYS: wake hash, due set. ARGV: the look that was sent, the due set's member.
_FORGET = """
if redis.call('HGET', KEYS[1], 'look') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[2])
  return 1
end
return 0
"""
# KEYS: due set. ARGV: now, due again at, limit, wake hash prefix. A member whose hash expired
# has nothing left to send and leaves the set.
_TAKE_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, member in ipairs(due) do
  local look = redis.call('HGET', ARGV[4] .. member, 'look')
  if look then
    redis.call('ZADD', KEYS[1], ARGV[2], member)
    table.insert(out, member)
    table.insert(out, look)
  else
    redis.call('ZREM', KEYS[1], member)
  end
end
return out
"""


def wake_sender(settings) -> Callable[[str], None]:
    """Sends a registered look (a JSON Celery signature) over a client-only Celery app."""
    from celery import Celery
    from kombu.utils.json import loads

    from fleetfish.celery_config import celery_config

    app = Celery("fleetfish-dv-wake")
    app.conf.update(celery_config(settings))

    def send(payload: str) -> None:
        app.signature(loads(payload)).apply_async()

    return send


def _key(dv: dict) -> tuple[str, str]:
    meta = dv.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def key_dv(ns: str, name: str) -> str:
    return f"{KEY_PREFIX}{ns}/{name}"


def key_device(ns: str, system_label: str, device: str) -> str:
    return f"{KEY_DEVICE}{ns}/{system_label}/{device}"


def _device_key(dv: dict) -> str | None:
    meta = dv.get("metadata") or {}
    labels = meta.get("labels") or {}
    if not labels.get(LABEL_SYSTEM) or not labels.get(LABEL_DEVICE):
        return None
    return key_device(meta.get("namespace", ""), labels[LABEL_SYSTEM], labels[LABEL_DEVICE])


def _generation(dv: dict) -> str:
    value = str(((dv.get("metadata") or {}).get("labels") or {}).get(LABEL_GEN, ""))
    return value if value.isdigit() else "0"


def mirror_fields(dv: dict) -> dict[str, str]:
    """The fields of a DataVolume the import looks at, as a Redis hash."""
    meta = dv.get("metadata") or {}
    status = dv.get("status") or {}
    conditions = [
        {k: c[k] for k in ("type", "status", "reason", "message") if c.get(k)}
        for c in status.get("conditions") or []
    ]
    return {
        "phase": str(status.get("phase") or ""),
        "progress": str(status.get("progress") or ""),
        "restarts": str(int(status.get("restartCount") or 0)),
        "conditions": json.dumps(conditions, separators=(",", ":"), sort_keys=True),
        "deleting": "1" if meta.get("deletionTimestamp") else "",
        "deleted": "",
        "secret": str(
            (((dv.get("spec") or {}).get("source") or {}).get("http") or {}).get("secretRef") or ""
        ),
    }


def as_dv(ns: str, name: str, fields: dict[str, str]) -> dict:
    """A DataVolume-shaped dict from a mirror hash (what ``import_status`` and ``delete_dv``
    read)."""
    meta: dict = {"namespace": ns, "name": name}
    if fields.get("deleting"):
        meta["deletionTimestamp"] = "mirrored"
    try:
        conditions = json.loads(fields.get("conditions") or "[]")
    except ValueError:
        conditions = []
    dv = {
        "metadata": meta,
        "status": {
            "phase": fields.get("phase", ""),
            "progress": fields.get("progress", ""),
            "restartCount": int(fields.get("restarts") or 0),
            "conditions": conditions,
        },
    }
    if fields.get("secret"):
        dv["spec"] = {"source": {"http": {"secretRef": fields["secret"]}}}
    return dv


class DvMirror:
    """Reads and writes of the mirror; the watcher writes, ``media.import`` reads."""

    def __init__(self, r: Redis, deleted_ttl: int = Settings.task_result_ttl):
        self.r = r
        # A deleted DataVolume's hash stays as long as Redfish tasks do: an import waiting on
        # it (for FLEETFISH_IMPORT_TIMEOUT at most, which the task TTL exceeds) sees the deletion.
        self.deleted_ttl = deleted_ttl
        self.send_wake: Callable[[str], None] | None = None
        # The watcher's side: what it last wrote per DataVolume and when it last stamped each
        # namespace, so repeated events (bookmarks, unchanged status) cost no Redis call.
        self._written: dict[str, dict[str, str]] = {}
        self._written_at: dict[str, float] = {}
        self._stamped: dict[str, float] = {}
        self._forget = r.register_script(_FORGET)
        self._take_due = r.register_script(_TAKE_DUE)

    # -- the watcher -------------------------------------------------------------------------

    def put(self, dv: dict) -> None:
        ns, name = _key(dv)
        key = key_dv(ns, name)
        fields = mirror_fields(dv)
        device = _device_key(dv)
        if device:
            fields["device_key"] = device
        last = self._written.get(key)
        if last == fields:
            return
        now = time.time()
        if (
            last is not None
            and {**last, "progress": fields["progress"]} == fields
            and now - self._written_at.get(key, 0.0) < PROGRESS_SECONDS
        ):
            return
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(key, mapping=fields)
        pipe.persist(key)
        if device:
            pipe.hset(device, name, _generation(dv))
        pipe.execute()
        self._written[key] = fields
        self._written_at[key] = now

    def deleted(self, ns: str, name: str) -> None:
        key = key_dv(ns, name)
        self._written.pop(key, None)
        self._written_at.pop(key, None)
        device = self.r.hget(key, "device_key")
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(key, mapping={"deleted": "1", "deleting": "1"})
        pipe.expire(key, self.deleted_ttl)
        if device:
            pipe.hdel(device, name)
        pipe.execute()

    def replace(self, ns: str, dvs: list[dict]) -> None:
        """After a list of namespace ``ns`` ("" = all): every listed DataVolume written, every
        mirrored one not listed (it went while no watch ran) marked deleted."""
        listed = {_key(dv) for dv in dvs}
        self._written.clear()  # another holder may have written meanwhile: write all again
        for key in self.r.scan_iter(match=f"{KEY_PREFIX}{ns or '*'}/*", count=500):
            key = key.decode() if isinstance(key, bytes) else key
            found = tuple(key[len(KEY_PREFIX) :].split("/", 1))
            if found not in listed and not self.r.hget(key, "deleted"):
                self.deleted(*found)
        for dv in dvs:
            self.put(dv)
        self.alive(ns)

    def alive(self, ns: str, every: float = 0.0) -> None:
        """Stamp the namespace's watch as live (not again within ``every`` seconds)."""
        now = time.time()
        if now - self._stamped.get(ns, 0.0) < every:
            return
        self.r.hset(KEY_ALIVE, ns, f"{now:.3f}")
        self._stamped[ns] = now

    def take_wake(self, ns: str, name: str) -> str | None:
        """The waiting import's next look registered for this DataVolume, taken (whoever gets it
        sends it; nobody else will)."""
        pipe = self.r.pipeline()
        pipe.hget(f"{KEY_WAKE}{ns}/{name}", "look")
        pipe.delete(f"{KEY_WAKE}{ns}/{name}")
        pipe.zrem(KEY_WAKE_DUE, f"{ns}/{name}")
        payload, _, _ = pipe.execute()
        return payload.decode() if isinstance(payload, bytes) else payload

    def wake_payload(self, ns: str, name: str) -> str | None:
        """The registered look, left in place until ``forget_wake`` after it was sent."""
        payload = self.r.hget(f"{KEY_WAKE}{ns}/{name}", "look")
        return payload.decode() if isinstance(payload, bytes) else payload

    def forget_wake(self, ns: str, name: str, payload: str) -> None:
        """Drop a look that was sent, unless the import registered a newer one meanwhile."""
        self._forget(keys=[f"{KEY_WAKE}{ns}/{name}", KEY_WAKE_DUE], args=[payload, f"{ns}/{name}"])

    def due_wakes(self, now: float, limit: int = 100) -> list[tuple[str, str, str]]:
        """(namespace, name, look) of parked looks due by ``now``; each is due again after
        ``RESEND_SECONDS`` until forgotten, so a sweeper dying before its send loses nothing."""
        found = self._take_due(
            keys=[KEY_WAKE_DUE], args=[now, now + RESEND_SECONDS, limit, KEY_WAKE]
        )
        out = []
        for i in range(0, len(found), 2):
            member, look = (v.decode() if isinstance(v, bytes) else v for v in found[i : i + 2])
            ns, name = member.split("/", 1)
            out.append((ns, name, look))
        return out

    def waiting_import(self, ns: str, name: str) -> dict | None:
        """(system_id, device, gen, task_id, image) of the import waiting on this DataVolume."""
        raw = self.r.hget(f"{KEY_WAKE}{ns}/{name}", "progress")
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    # -- the workers -------------------------------------------------------------------------

    def register_wake(
        self, ns: str, name: str, payload: str, progress: dict[str, str], due_at: float, ttl: float
    ) -> None:
        """Park an import's next look: sent by the watcher's wake-up or at ``due_at``."""
        key = f"{KEY_WAKE}{ns}/{name}"
        pipe = self.r.pipeline()
        pipe.hset(key, mapping={"look": payload, "progress": json.dumps(progress)})
        pipe.expire(key, max(1, int(ttl)))
        pipe.zadd(KEY_WAKE_DUE, {f"{ns}/{name}": due_at})
        pipe.execute()

    def fresh(self, ns: str) -> bool:
        """The namespace's DataVolume watch showed a sign of life within ``STALE_SECONDS``."""
        age = self.age(ns)
        return age is not None and age <= STALE_SECONDS

    def age(self, ns: str) -> float | None:
        """Seconds since the namespace's DataVolume watch last showed a sign of life."""
        marks = self.r.hmget(KEY_ALIVE, [ns, ""])
        alive = max((float(m) for m in marks if m), default=None)
        return None if alive is None else max(0.0, time.time() - alive)

    def device_generations(self, ns: str, system_label: str, device: str) -> dict[str, int]:
        """{DataVolume name: media generation} of one VM's device, as mirrored."""
        found = self.r.hgetall(key_device(ns, system_label, device)) or {}
        return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in found.items()}

    def read(self, ns: str, name: str) -> tuple[dict | None, bool, float | None]:
        """(the DataVolume as mirrored or None, its deletion seen, seconds since the namespace's
        watch last showed a sign of life; None when it never did)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hgetall(key_dv(ns, name))
        # A watcher configured for all namespaces keeps its mark under "".
        pipe.hmget(KEY_ALIVE, [ns, ""])
        fields, marks = pipe.execute()
        alive = max((float(m) for m in marks if m), default=None)
        fields = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in (fields or {}).items()
        }
        age = None if alive is None else max(0.0, time.time() - alive)
        if not fields:
            return None, False, age
        return as_dv(ns, name, fields), bool(fields.get("deleted")), age
