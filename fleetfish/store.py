"""The Redis state store shared by the API and the workers: key layout and atomic hand-offs.

Key layout (all under the ``ff:`` prefix):

``ff:systems``              SET of system ids the watcher currently mirrors
``ff:sys:{id}``             STRING, JSON mirror document of one VM (see ``fleetfish.mirror``)
``ff:mirror``               HASH, watcher bookkeeping (``holder``, ``synced_at``)
``ff:media:{id}:{dev}``     HASH, requested virtual media of one device (see ``MEDIA_FIELDS``)
``ff:mediacred:{id}:{dev}`` HASH, image fetch credentials; never rendered by the API
``ff:power:{id}``           HASH, deferred and in-flight power actions
``ff:boot:{id}``            HASH, requested boot override (``enabled``, ``target``, ``mode``)
``ff:task:{tid}``           HASH, one Redfish Task (see ``TASK_FIELDS``), expiring
``ff:tasks``                ZSET of task ids by start time

Keys other modules own, listed here so the whole layout is in one place:

``ff:lease:watcher``        STRING, holder of the watcher lease (workers/watcher.py)
``ff:lock:media:{id}:{dev}`` STRING, short per-device lock of the media tasks (workers/taskutil.py)
``ff:lock:legacy-media``    STRING, fleet-wide lock of the sequential mode (workers/taskutil.py)
``ff:run:{celery id}:*``    STRING, marks a finished run so a duplicate delivery is dropped
``ff:sess:*``, ``ff:sessid:*``, ``ff:sessions``  Redfish sessions, tokens stored hashed (app/sessions.py)
``ff:authfail:*``, ``ff:authlock:*``             failed-login counting and lock-out (app/sessions.py)

Media ``gen`` grows on every insert and eject; tasks carry the generation they were sent for and
stop doing anything once it is stale. The Lua scripts below are the only writers of the
media/power hand-off, so "media finished" and "Reset arrived" can never interleave.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from typing import Any

import redis

PREFIX = "ff:"
DEVICES = ("Cd",)
PENDING_STATES = ("Starting", "Updating")
ON_ACTIONS = ("On", "ForceOn", "ForceRestart", "GracefulRestart", "PowerCycle")
OFF_ACTIONS = ("ForceOff", "GracefulShutdown", "PushPowerButton")

MEDIA_FIELDS = (
    "image",  # URL as requested ("" when nothing is inserted)
    "image_name",  # last path segment of the URL
    "inserted",  # "1" / "0", what Redfish shows as Inserted
    "write_protected",  # "1" / "0"
    "transfer_protocol",  # TransferProtocolType as given, or ""
    "transfer_method",  # TransferMethod as given, or ""
    "state",  # Redfish Status.State: Enabled, Starting (importing), Updating (attaching)
    "health",  # OK, Warning, Critical
    "message",  # human reason for the health (import error, ...)
    "gen",  # generation counter
    "task",  # Redfish task id of the current media work
    "dv",  # DataVolume name the current generation uses
    "progress",  # import percentage, float as string
    "attached",  # "1" once the volume is attached to the VM
    "updated",  # epoch seconds
)

TASK_FIELDS = (
    "id",
    "name",  # e.g. "InsertMedia Cd", "Reset On"
    "system",
    "state",  # Redfish TaskState: New, Pending, Running, Completed, Exception, Cancelled
    "status",  # Redfish Health: OK, Warning, Critical
    "percent",  # PercentComplete
    "message",
    "message_id",  # registry MessageId for the final message
    "start",
    "end",
    "celery_id",
)


def key_system(system_id: str) -> str:
    return f"{PREFIX}sys:{system_id}"


def key_media(system_id: str, device: str = "Cd") -> str:
    return f"{PREFIX}media:{system_id}:{device}"


def key_media_cred(system_id: str, device: str = "Cd") -> str:
    return f"{PREFIX}mediacred:{system_id}:{device}"


def key_power(system_id: str) -> str:
    return f"{PREFIX}power:{system_id}"


def key_boot(system_id: str) -> str:
    return f"{PREFIX}boot:{system_id}"


def key_task(task_id: str) -> str:
    return f"{PREFIX}task:{task_id}"


KEY_SYSTEMS = f"{PREFIX}systems"
KEY_MIRROR = f"{PREFIX}mirror"
KEY_TASKS = f"{PREFIX}tasks"

# KEYS: media, power. ARGV: image, image_name, write_protected, inserted, protocol, method,
# task id, now. Returns {gen, previous image, previous dv, previous state}.
_INSERT = """
local prev_image = redis.call('HGET', KEYS[1], 'image') or ''
local prev_dv = redis.call('HGET', KEYS[1], 'dv') or ''
local prev_state = redis.call('HGET', KEYS[1], 'state') or ''
local gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
redis.call('HSET', KEYS[1], 'image', ARGV[1], 'image_name', ARGV[2], 'write_protected', ARGV[3],
  'inserted', ARGV[4], 'transfer_protocol', ARGV[5], 'transfer_method', ARGV[6],
  'state', 'Starting', 'health', 'OK', 'message', '', 'task', ARGV[7], 'dv', '',
  'progress', '0', 'attached', '0', 'updated', ARGV[8])
return {gen, prev_image, prev_dv, prev_state}
"""

# KEYS: media, power. ARGV: task id, now.
# Returns {gen, previous dv, was_pending, released action or '', released task or ''}.
# A deferred power action waits only for media; once nothing is pending it is released to the
# caller, which dispatches it.
_EJECT = """
local prev_dv = redis.call('HGET', KEYS[1], 'dv') or ''
local prev_state = redis.call('HGET', KEYS[1], 'state') or ''
local was_pending = (prev_state == 'Starting' or prev_state == 'Updating') and 1 or 0
local gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
redis.call('HSET', KEYS[1], 'image', '', 'image_name', '', 'inserted', '0', 'state', 'Enabled',
  'health', 'OK', 'message', '', 'task', ARGV[1], 'dv', '', 'progress', '0', 'attached', '0',
  'updated', ARGV[2])
local action = redis.call('HGET', KEYS[2], 'deferred') or ''
local dtask = redis.call('HGET', KEYS[2], 'deferred_task') or ''
if action ~= '' then
  redis.call('HDEL', KEYS[2], 'deferred', 'deferred_task', 'deferred_at')
end
return {gen, prev_dv, was_pending, action, dtask}
"""

# KEYS: media, power. ARGV: action, task id, now, on-actions csv, off-actions csv.
# Returns {verdict, cancelled task or ''} where verdict is 'deferred' or 'run'.
_RESET = """
local function member(csv, x)
  for item in string.gmatch(csv, '([^,]+)') do if item == x then return true end end
  return false
end
local state = redis.call('HGET', KEYS[1], 'state') or ''
local pending = (state == 'Starting' or state == 'Updating')
local deferred = redis.call('HGET', KEYS[2], 'deferred') or ''
local dtask = redis.call('HGET', KEYS[2], 'deferred_task') or ''
if member(ARGV[4], ARGV[1]) then
  if pending or deferred ~= '' then
    redis.call('HSET', KEYS[2], 'deferred', ARGV[1], 'deferred_task', ARGV[2], 'deferred_at', ARGV[3])
    if dtask ~= '' and dtask ~= ARGV[2] then return {'deferred', dtask} end
    return {'deferred', ''}
  end
  return {'run', ''}
end
if member(ARGV[5], ARGV[1]) and deferred ~= '' then
  redis.call('HDEL', KEYS[2], 'deferred', 'deferred_task', 'deferred_at')
  return {'run', dtask}
end
return {'run', ''}
"""

# KEYS: media, power. ARGV: gen, celery id of the chord body, now.
# Marks the media ready and hands the deferred action to this body exactly once; a redelivered
# body (same celery id) gets the same action back. Returns {verdict, action, task}.
_RELEASE = """
local gen = redis.call('HGET', KEYS[1], 'gen') or '0'
if gen ~= ARGV[1] then return {'stale', '', ''} end
local state = redis.call('HGET', KEYS[1], 'state') or ''
if state == 'Starting' or state == 'Updating' then
  redis.call('HSET', KEYS[1], 'state', 'Enabled', 'health', 'OK', 'progress', '100',
    'updated', ARGV[3])
end
if redis.call('HGET', KEYS[2], 'inflight_by') == ARGV[2] then
  return {'inflight', redis.call('HGET', KEYS[2], 'inflight') or '',
          redis.call('HGET', KEYS[2], 'inflight_task') or ''}
end
local action = redis.call('HGET', KEYS[2], 'deferred') or ''
if action == '' then return {'none', '', ''} end
local dtask = redis.call('HGET', KEYS[2], 'deferred_task') or ''
redis.call('HDEL', KEYS[2], 'deferred', 'deferred_task', 'deferred_at')
redis.call('HSET', KEYS[2], 'inflight', action, 'inflight_task', dtask, 'inflight_by', ARGV[2],
  'inflight_at', ARGV[3])
return {'released', action, dtask}
"""

# KEYS: media, power. ARGV: gen, reason, now.
# Returns {verdict, cancelled deferred task or ''}; the deferred power-on is dropped on purpose.
_FAIL = """
local gen = redis.call('HGET', KEYS[1], 'gen') or '0'
if gen ~= ARGV[1] then return {'stale', ''} end
redis.call('HSET', KEYS[1], 'inserted', '0', 'state', 'Enabled', 'health', 'Critical',
  'message', ARGV[2], 'attached', '0', 'updated', ARGV[3])
local dtask = redis.call('HGET', KEYS[2], 'deferred_task') or ''
redis.call('HDEL', KEYS[2], 'deferred', 'deferred_task', 'deferred_at')
return {'failed', dtask}
"""

# KEYS: media. ARGV: gen, then field/value pairs. Updates only the current generation.
_UPDATE_IF_GEN = """
if (redis.call('HGET', KEYS[1], 'gen') or '0') ~= ARGV[1] then return 0 end
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""


def _s(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


def _decode(mapping: dict) -> dict[str, str]:
    return {_s(k): _s(v) for k, v in mapping.items()}


class Store:
    """Typed access to the keys above. One instance per process; it holds no state of its own."""

    def __init__(self, client: redis.Redis, task_ttl: int = 86400):
        self.r = client
        self.task_ttl = task_ttl
        self._insert = client.register_script(_INSERT)
        self._eject = client.register_script(_EJECT)
        self._reset = client.register_script(_RESET)
        self._release = client.register_script(_RELEASE)
        self._fail = client.register_script(_FAIL)
        self._update_if_gen = client.register_script(_UPDATE_IF_GEN)

    @classmethod
    def from_url(cls, url: str, task_ttl: int = 86400, **kwargs: Any) -> Store:
        kwargs.setdefault("socket_timeout", 5)
        kwargs.setdefault("socket_connect_timeout", 2)
        kwargs.setdefault("health_check_interval", 30)
        return cls(redis.Redis.from_url(url, decode_responses=True, **kwargs), task_ttl)

    # -- mirror (written by the watcher only) ------------------------------------------------

    def system_ids(self) -> list[str]:
        return sorted(_s(x) for x in self.r.smembers(KEY_SYSTEMS))

    def get_system(self, system_id: str) -> dict | None:
        raw = self.r.get(key_system(system_id))
        return json.loads(raw) if raw else None

    def get_systems(self, system_ids: Iterable[str]) -> list[dict]:
        ids = list(system_ids)
        if not ids:
            return []
        return [json.loads(raw) for raw in self.r.mget([key_system(i) for i in ids]) if raw]

    def put_system(self, doc: dict) -> None:
        pipe = self.r.pipeline()
        pipe.set(key_system(doc["id"]), json.dumps(doc, sort_keys=True))
        pipe.sadd(KEY_SYSTEMS, doc["id"])
        pipe.execute()

    def delete_system(self, system_id: str) -> None:
        pipe = self.r.pipeline()
        pipe.delete(key_system(system_id))
        pipe.srem(KEY_SYSTEMS, system_id)
        pipe.execute()

    def replace_systems(self, docs: list[dict]) -> None:
        """Relist: store every document and forget systems that are no longer there."""
        keep = {d["id"] for d in docs}
        gone = set(self.system_ids()) - keep
        pipe = self.r.pipeline()
        for doc in docs:
            pipe.set(key_system(doc["id"]), json.dumps(doc, sort_keys=True))
        if keep:
            pipe.sadd(KEY_SYSTEMS, *keep)
        for system_id in gone:
            pipe.delete(key_system(system_id))
            pipe.srem(KEY_SYSTEMS, system_id)
        pipe.hset(KEY_MIRROR, "synced_at", str(time.time()))
        pipe.execute()

    # -- media -------------------------------------------------------------------------------

    def get_media(self, system_id: str, device: str = "Cd") -> dict[str, str]:
        data = _decode(self.r.hgetall(key_media(system_id, device)))
        data.setdefault("inserted", "0")
        data.setdefault("state", "Enabled")
        data.setdefault("health", "OK")
        data.setdefault("gen", "0")
        return data

    def begin_insert(
        self,
        system_id: str,
        device: str,
        image: str,
        task_id: str,
        *,
        write_protected: bool = True,
        inserted: bool = True,
        transfer_protocol: str = "",
        transfer_method: str = "",
        username: str = "",
        password: str = "",
    ) -> dict[str, Any]:
        image_name = image.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]
        gen, prev_image, prev_dv, prev_state = self._insert(
            keys=[key_media(system_id, device), key_power(system_id)],
            args=[
                image,
                image_name,
                "1" if write_protected else "0",
                "1" if inserted else "0",
                transfer_protocol,
                transfer_method,
                task_id,
                str(time.time()),
            ],
        )
        cred_key = key_media_cred(system_id, device)
        if username or password:
            self.r.hset(cred_key, mapping={"username": username, "password": password})
        else:
            self.r.delete(cred_key)
        return {
            "gen": int(gen),
            "previous_image": _s(prev_image),
            "previous_dv": _s(prev_dv),
            "previous_state": _s(prev_state),
        }

    def begin_eject(self, system_id: str, device: str, task_id: str) -> dict[str, Any]:
        gen, prev_dv, was_pending, action, dtask = self._eject(
            keys=[key_media(system_id, device), key_power(system_id)],
            args=[task_id, str(time.time())],
        )
        self.r.delete(key_media_cred(system_id, device))
        return {
            "gen": int(gen),
            "previous_dv": _s(prev_dv),
            "was_pending": bool(int(was_pending)),
            "released_action": _s(action),
            "released_task": _s(dtask),
        }

    def media_credentials(self, system_id: str, device: str = "Cd") -> dict[str, str]:
        return _decode(self.r.hgetall(key_media_cred(system_id, device)))

    def update_media(self, system_id: str, device: str, gen: int, **fields: Any) -> bool:
        """Write fields only while ``gen`` is still current; False means the work is stale."""
        args: list[str] = [str(gen)]
        fields.setdefault("updated", time.time())
        for name, value in fields.items():
            if name not in MEDIA_FIELDS:
                raise KeyError(name)
            if isinstance(value, bool):
                value = "1" if value else "0"
            args += [name, _s(value)]
        return bool(self._update_if_gen(keys=[key_media(system_id, device)], args=args))

    def fail_media(self, system_id: str, device: str, gen: int, reason: str) -> dict[str, str]:
        verdict, dtask = self._fail(
            keys=[key_media(system_id, device), key_power(system_id)],
            args=[str(gen), reason, str(time.time())],
        )
        return {"verdict": _s(verdict), "cancelled_task": _s(dtask)}

    # -- power -------------------------------------------------------------------------------

    def get_power(self, system_id: str) -> dict[str, str]:
        return _decode(self.r.hgetall(key_power(system_id)))

    def request_power(self, system_id: str, action: str, task_id: str) -> dict[str, str]:
        """Decide atomically whether a Reset runs now or waits for pending media.

        Returns ``verdict`` ("run" or "deferred") and ``cancelled_task``: the Redfish task of a
        deferred action this request superseded or cancelled (an Off cancels a deferred On).
        """
        verdict, cancelled = self._reset(
            keys=[key_media(system_id, "Cd"), key_power(system_id)],
            args=[action, task_id, str(time.time()), ",".join(ON_ACTIONS), ",".join(OFF_ACTIONS)],
        )
        return {"verdict": _s(verdict), "cancelled_task": _s(cancelled)}

    def release_deferred(self, system_id: str, device: str, gen: int, body_id: str) -> dict:
        verdict, action, dtask = self._release(
            keys=[key_media(system_id, device), key_power(system_id)],
            args=[str(gen), body_id, str(time.time())],
        )
        return {"verdict": _s(verdict), "action": _s(action), "task": _s(dtask)}

    def finish_inflight(self, system_id: str, body_id: str) -> None:
        key = key_power(system_id)
        with self.r.pipeline() as pipe:
            try:
                pipe.watch(key)
                if _s(pipe.hget(key, "inflight_by")) != body_id:
                    return
                pipe.multi()
                pipe.hdel(key, "inflight", "inflight_task", "inflight_by", "inflight_at")
                pipe.execute()
            except redis.WatchError:
                # Someone else changed the hash meanwhile: their write wins, ours is moot.
                return

    # -- boot override -----------------------------------------------------------------------

    def get_boot(self, system_id: str) -> dict[str, str]:
        return _decode(self.r.hgetall(key_boot(system_id)))

    def set_boot(self, system_id: str, **fields: str) -> int:
        """Record a requested boot override; returns its new generation."""
        pipe = self.r.pipeline()
        if fields:
            pipe.hset(key_boot(system_id), mapping={k: _s(v) for k, v in fields.items()})
        pipe.hincrby(key_boot(system_id), "gen", 1)
        return int(pipe.execute()[-1])

    # -- Redfish tasks -----------------------------------------------------------------------

    def new_task(self, name: str, system_id: str, state: str = "New", message: str = "") -> str:
        task_id = uuid.uuid4().hex[:16]
        now = str(time.time())
        pipe = self.r.pipeline()
        pipe.hset(
            key_task(task_id),
            mapping={
                "id": task_id,
                "name": name,
                "system": system_id,
                "state": state,
                "status": "OK",
                "percent": "0",
                "message": message,
                "message_id": "",
                "start": now,
                "end": "",
                "celery_id": "",
            },
        )
        pipe.expire(key_task(task_id), self.task_ttl)
        pipe.zadd(KEY_TASKS, {task_id: float(now)})
        pipe.zremrangebyscore(KEY_TASKS, 0, time.time() - self.task_ttl)
        pipe.execute()
        return task_id

    def get_task(self, task_id: str) -> dict[str, str] | None:
        data = _decode(self.r.hgetall(key_task(task_id)))
        return data or None

    def task_ids(self, limit: int = 1000) -> list[str]:
        return [_s(x) for x in self.r.zrevrange(KEY_TASKS, 0, limit - 1)]

    def update_task(self, task_id: str, **fields: Any) -> None:
        """Update a task unless it already ended (a late writer never resurrects a task)."""
        if not task_id:
            return
        key = key_task(task_id)
        state = _s(self.r.hget(key, "state"))
        if not state or state in ("Completed", "Exception", "Cancelled", "Killed"):
            return
        if fields.get("state") in ("Completed", "Exception", "Cancelled", "Killed"):
            fields.setdefault("end", time.time())
            if fields.get("state") == "Completed":
                fields.setdefault("percent", 100)
        self.r.hset(key, mapping={k: _s(v) for k, v in fields.items()})
