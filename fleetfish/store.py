"""The Redis state store shared by the API and the workers: key layout and atomic hand-offs.

Key layout (all under the ``ff:`` prefix):

``ff:systems``              SET of system ids the watcher currently mirrors
``ff:sys:{id}``             STRING, JSON mirror document of one VM (see ``fleetfish.mirror``)
``ff:mirror``               HASH, watcher bookkeeping (``holder``, ``synced_at``)
``ff:media:{id}:{dev}``     HASH, requested virtual media of one device (see ``MEDIA_FIELDS``)
``ff:mediacred:{id}:{dev}`` HASH, image fetch credentials; never rendered by the API
``ff:mediacert:{id}:{dev}`` HASH, CA certificates (PEM) the device's https imports trust, by
                            id, and ``next``: the last id given
``ff:power:{id}``           HASH, deferred and in-flight power actions, ``last_request``: task
                            of the latest Reset, InsertMedia or EjectMedia of the system,
                            ``last_reset``: task of the latest Reset,
                            ``error``/``error_at``: why the last power-on never ran the VM
``ff:boot:{id}``            HASH, requested boot override (``enabled``, ``target``, ``mode``)
``ff:task:{tid}``           HASH, one Redfish Task (see ``TASK_FIELDS``), expiring
``ff:tasks``                ZSET of task ids by start time
``ff:resets``               ZSET of Reset task ids queued as ``power.reset`` that no worker has
                            taken yet, by the time they were (last) sent; the reaper re-sends
                            those left there too long (workers/reaper.py)
``ff:starts``               ZSET of Reset task ids whose start ``power.verify`` follows, by the
                            time a check last ran; the reaper re-sends a check lost there
``ff:log:{id}``             LIST, the system's event log, newest first, capped
                            (``FLEETFISH_EVENT_LOG_ENTRIES``; fleetfish/eventlog.py)
``ff:logmeta:{id}``         HASH, the log's last entry id, marks against logging an event twice,
                            the last boot (fleetfish/eventlog.py)

Keys other modules own, listed here so the whole layout is in one place:

``ff:lease:watcher``        STRING, holder of the watcher lease (workers/watcher.py)
``ff:dv:{ns}/{name}``       HASH, a fleetfish DataVolume as the watcher's watch saw it
``ff:dv:alive``             HASH, namespace -> last sign of life of its DataVolume watch
``ff:dvdev:{ns}/{vm}/{dev}`` HASH, mirrored DataVolume name -> media generation of one device
``ff:dvwake:{ns}/{name}``   HASH, the next look of the import waiting on that DataVolume
                            (all in workers/dvmirror.py)
``ff:lock:media:{id}:{dev}`` STRING, short per-device lock of the media tasks (workers/taskutil.py)
``ff:lock:reset:{tid}``     STRING, one delivery at a time of a Reset task (workers/taskutil.py)
``ff:lock:legacy-media``    STRING, fleet-wide lock of the sequential mode (tasks/media/tasks.py)
``ff:run:{celery id}:*``    STRING, marks a finished run so a duplicate delivery is dropped
                            (workers/taskutil.py)
``ff:sess:*``, ``ff:sessid:*``, ``ff:sessions``  Redfish sessions, tokens stored hashed (app/sessions.py)
``ff:authfail:*``, ``ff:authlock:*``             failed-login counting and lock-out (app/sessions.py)
``ff:account:*``, ``ff:accounts``, ``ff:accountpolicy``  AccountService accounts and policy
                                                 (fleetfish/accounts.py)

Media ``gen`` grows on every insert and eject; tasks carry the generation they were sent for and
stop doing anything once it is stale. The Lua scripts below are the only writers of the
media/power hand-off, so "media finished" and "Reset arrived" can never interleave.

InsertMedia, EjectMedia and Reset create their Redfish task in the same script that records the
request, so an API process killed at any point leaves either both or neither; a Reset to run
now is also put in ``ff:resets`` with the Celery id its message is sent under, so a message
lost before a worker took it is sent again under that same id, unless the system had another
request since (``Store.resend_reset``).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from fleetfish.settings import Settings

if TYPE_CHECKING:
    from fleetfish.wire import Publication

PREFIX = "ff:"
DEVICES = ("Cd",)
PENDING_STATES = ("Starting", "Updating")
# The ResetTypes ComputerSystem.Reset offers. KubeVirt has no NMI (no subresource delivers one),
# so Nmi is not offered. PowerCycle and ForceRestart are a restart (a start when off), ForceOn a
# start; Pause/Resume map to the VMI pause subresources. PushPowerButton is resolved by the API
# into On or GracefulShutdown (what the button does in the power state the caller sees) before
# anything is stored or sent: the workers get the other types only.
RESET_TYPES = (
    "On",
    "ForceOn",
    "ForceOff",
    "GracefulShutdown",
    "GracefulRestart",
    "ForceRestart",
    "PowerCycle",
    "PushPowerButton",
    "Pause",
    "Resume",
)
POWER_ACTIONS = tuple(t for t in RESET_TYPES if t != "PushPowerButton")
ON_ACTIONS = ("On", "ForceOn", "ForceRestart", "GracefulRestart", "PowerCycle")
OFF_ACTIONS = ("ForceOff", "GracefulShutdown")

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
    "verify_certificate",  # "0": VerifyCertificate false (kept across inserts), else verified
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
    "celery_id",  # Celery id of the task's message (a Reset's is chosen before it is sent)
    "action",  # Reset: the ResetType
    "sent",  # Reset: epoch seconds it was (last) sent as power.reset
    "picked",  # Reset: epoch seconds a worker first took it
    "vmi_before",  # Reset: VMI uid the first delivery found ("-": none), see workers/power.py
    "acted",  # Reset: "1" once the action was done
)


def key_system(system_id: str) -> str:
    return f"{PREFIX}sys:{system_id}"


def key_media(system_id: str, device: str = "Cd") -> str:
    return f"{PREFIX}media:{system_id}:{device}"


def key_media_cred(system_id: str, device: str = "Cd") -> str:
    return f"{PREFIX}mediacred:{system_id}:{device}"


def key_media_certs(system_id: str, device: str = "Cd") -> str:
    return f"{PREFIX}mediacert:{system_id}:{device}"


def key_power(system_id: str) -> str:
    return f"{PREFIX}power:{system_id}"


def key_boot(system_id: str) -> str:
    return f"{PREFIX}boot:{system_id}"


def key_task(task_id: str) -> str:
    return f"{PREFIX}task:{task_id}"


def key_log(system_id: str) -> str:
    return f"{PREFIX}log:{system_id}"


def key_log_meta(system_id: str) -> str:
    return f"{PREFIX}logmeta:{system_id}"


# Hashes read together with a system's mirror document (``Store.systems_with``).
SYSTEM_HASHES = {
    "power": key_power,
    "boot": key_boot,
    "media": key_media,
    "media_credentials": key_media_cred,
}
KEY_SYSTEMS = f"{PREFIX}systems"
KEY_MIRROR = f"{PREFIX}mirror"
KEY_TASKS = f"{PREFIX}tasks"
KEY_RESETS = f"{PREFIX}resets"
KEY_STARTS = f"{PREFIX}starts"

# Redfish TaskStates: a task monitor answers 202 while its task is in a running one.
ENDED_TASK_STATES = ("Completed", "Exception", "Cancelled", "Killed")
RUNNING_TASK_STATES = ("New", "Pending", "Running", "Starting", "Stopping", "Suspended", "Service")

# Shared by the scripts that create a task: KEYS[1], KEYS[2] are the new task's hash and
# ``ff:tasks``; ARGV[1..5] its id, name, system, now and TTL. Other tasks' keys are built here
# from their ids (one Redis, no cluster slots to declare). A script runs whole or not at all
# for every other client and for the AOF, but Redis does not undo the writes before a command
# that fails: each script writes its new task last, so a failed one leaves no task behind.
_LUA_TASKS = (
    f"local TASK_PREFIX = '{PREFIX}task:'\n"
    f"local POWER_PREFIX = '{PREFIX}power:'\n"
    f"local ENDED = {{{', '.join(f'{s} = true' for s in ENDED_TASK_STATES)}}}\n"
    """
local function new_task(state, message, celery_id)
  redis.call('HSET', KEYS[1], 'id', ARGV[1], 'name', ARGV[2], 'system', ARGV[3],
    'state', state, 'status', 'OK', 'percent', '0', 'message', message, 'message_id', '',
    'start', ARGV[4], 'end', '', 'celery_id', celery_id or '')
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(ARGV[4]) - tonumber(ARGV[5]))
end
-- Ends another task unless it already ended: a late writer never resurrects a task.
local function end_task(id, state, status, message, message_id, now)
  local key = TASK_PREFIX .. id
  local current = redis.call('HGET', key, 'state')
  if not current or ENDED[current] then return false end
  redis.call('HSET', key, 'state', state, 'status', status, 'message', message,
    'message_id', message_id, 'end', now)
  return true
end
-- A newer media request supersedes the previous one: its task ends here, whether or not its
-- work was ever sent (the API may die between recording a request and sending it, and the
-- reaper sends again only the current generation's work). True if that task was still open,
-- so its work may not have happened.
local function supersede_media_task(media_key, by, now)
  local previous = redis.call('HGET', media_key, 'task')
  if not previous or previous == '' then return false end
  return end_task(previous, 'Cancelled', 'Warning',
    'Superseded by a newer media request (task ' .. by .. ')', 'TaskEvent.1.0.TaskCancelled', now)
end
-- A Reset task about to be sent as power.reset under celery_id: recorded until a worker takes it.
local function queue_reset(id, celery_id, resets, now)
  redis.call('HSET', TASK_PREFIX .. id, 'celery_id', celery_id, 'sent', now)
  redis.call('ZADD', resets, now, id)
end
"""
)


def _with_task_lua(body: str) -> str:
    return _LUA_TASKS + body


_NEW_TASK = _with_task_lua("""
new_task(ARGV[6], ARGV[7])
return 1
""")

# KEYS: task, tasks, media, credentials, power. ARGV: task (1-5), image, image_name,
# write_protected, inserted, protocol, method, username, password, Celery id of the chord.
# Returns {gen, previous image, previous dv, previous state, the new task's fields}.
_INSERT_RECORD = """
local prev_image = redis.call('HGET', KEYS[3], 'image') or ''
local prev_dv = redis.call('HGET', KEYS[3], 'dv') or ''
local prev_state = redis.call('HGET', KEYS[3], 'state') or ''
supersede_media_task(KEYS[3], ARGV[1], ARGV[4])
local gen = redis.call('HINCRBY', KEYS[3], 'gen', 1)
redis.call('HSET', KEYS[3], 'image', ARGV[6], 'image_name', ARGV[7], 'write_protected', ARGV[8],
  'inserted', ARGV[9], 'transfer_protocol', ARGV[10], 'transfer_method', ARGV[11],
  'state', 'Starting', 'health', 'OK', 'message', '', 'task', ARGV[1], 'dv', '',
  'progress', '0', 'attached', '0', 'updated', ARGV[4])
redis.call('DEL', KEYS[4])
if ARGV[12] ~= '' or ARGV[13] ~= '' then
  redis.call('HSET', KEYS[4], 'username', ARGV[12], 'password', ARGV[13])
end
redis.call('HSET', KEYS[5], 'last_request', ARGV[1])
new_task('Running', '', ARGV[14])
"""
_INSERT = _with_task_lua(
    _INSERT_RECORD + "return {gen, prev_image, prev_dv, prev_state, redis.call('HGETALL', KEYS[1])}"
)

# An event log append (fleetfish.eventlog's script, and the insert that writes its own event).
# args[first]: the entry's JSON without its id; then the log's bound, a mark field ('' for
# none) and its value, then field/value pairs for the meta hash up to args[last]. An entry
# whose mark already holds that value was logged before: nothing is written. Returns the new
# entry's id, or 0.
APPEND_EVENT_LUA = """
local function append_event(log, meta, args, first, last)
  local mark, value = args[first + 2], args[first + 3]
  if mark ~= '' then
    if redis.call('HGET', meta, mark) == value then return 0 end
    redis.call('HSET', meta, mark, value)
  end
  for i = first + 4, last, 2 do redis.call('HSET', meta, args[i], args[i + 1]) end
  local id = redis.call('HINCRBY', meta, 'seq', 1)
  redis.call('LPUSH', log, '{"id": "' .. id .. '", ' .. string.sub(args[first], 2))
  redis.call('LTRIM', log, 0, tonumber(args[first + 1]) - 1)
  return id
end
"""

# _INSERT, its event and its chord's message in one step, when the media's generation is still
# the one the message was built for. KEYS: as _INSERT, then the event log, its meta, the
# queue, the chord's size key. ARGV: as _INSERT, then the expected generation, the size key's
# TTL ('' for none), the message, the event (APPEND_EVENT_LUA's args). Returns _INSERT's reply,
# or {0, the current generation} when another request moved it (nothing written).
_INSERT_AND_SEND = _with_task_lua(
    APPEND_EVENT_LUA
    + """
local current = tonumber(redis.call('HGET', KEYS[3], 'gen') or '0')
if current + 1 ~= tonumber(ARGV[15]) then return {0, current} end
"""
    + _INSERT_RECORD
    + """
append_event(KEYS[6], KEYS[7], ARGV, 18, #ARGV)
-- The chord's size first (its body counts against it), then the message, as Celery writes them.
if ARGV[16] ~= '' then
  redis.call('SET', KEYS[9], '1', 'EX', ARGV[16])
else
  redis.call('SET', KEYS[9], '1')
end
redis.call('LPUSH', KEYS[8], ARGV[17])
return {gen, prev_image, prev_dv, prev_state, redis.call('HGETALL', KEYS[1])}
"""
)

# KEYS: task, tasks, media, power, credentials, resets. ARGV: task (1-5), Celery id for a
# released Reset, Celery id of the eject's own work. Returns {gen, previous dv, unfinished,
# released action or '', released task or '', the new task's fields}. A deferred power action waits only for media; once nothing is pending it is released
# to the caller, which sends it under that Celery id. With nothing to undo the task ends here.
_EJECT = _with_task_lua("""
local prev_dv = redis.call('HGET', KEYS[3], 'dv') or ''
local prev_state = redis.call('HGET', KEYS[3], 'state') or ''
local unfinished = (prev_state == 'Starting' or prev_state == 'Updating') and 1 or 0
-- An eject whose own work never ran (its message lost) may have left a volume attached: this
-- one does the work instead of ending at once.
if supersede_media_task(KEYS[3], ARGV[1], ARGV[4]) then unfinished = 1 end
local gen = redis.call('HINCRBY', KEYS[3], 'gen', 1)
redis.call('HSET', KEYS[3], 'image', '', 'image_name', '', 'inserted', '0', 'state', 'Enabled',
  'health', 'OK', 'message', '', 'task', ARGV[1], 'dv', '', 'progress', '0', 'attached', '0',
  'updated', ARGV[4])
redis.call('DEL', KEYS[5])
local action = redis.call('HGET', KEYS[4], 'deferred') or ''
local dtask = redis.call('HGET', KEYS[4], 'deferred_task') or ''
redis.call('HSET', KEYS[4], 'last_request', ARGV[1])
if action ~= '' then
  redis.call('HDEL', KEYS[4], 'deferred', 'deferred_task', 'deferred_at')
  local dstate = dtask ~= '' and redis.call('HGET', TASK_PREFIX .. dtask, 'state')
  if dstate and not ENDED[dstate] then
    redis.call('HSET', TASK_PREFIX .. dtask, 'state', 'Running', 'message', '')
    queue_reset(dtask, ARGV[6], KEYS[6], ARGV[4])
    -- Sent on behalf of this eject: it is the system's latest request.
    redis.call('HSET', KEYS[4], 'last_request', dtask, 'last_reset', dtask)
  end
end
if prev_dv ~= '' or unfinished == 1 then
  new_task('Running', '', ARGV[7])
else
  new_task('Completed', 'nothing was attached')
  redis.call('HSET', KEYS[1], 'percent', '100', 'end', ARGV[4])
end
return {gen, prev_dv, unfinished, action, dtask, redis.call('HGETALL', KEYS[1])}
""")

# KEYS: task, tasks, media, power, resets. ARGV: task (1-5), action, on-actions csv,
# off-actions csv, Celery id, defer ("1": a power-on waits for pending media).
# Returns {verdict, cancelled task or '', the new task's fields} where verdict is 'deferred' or
# 'run'; a 'run' is recorded in ``ff:resets`` under the Celery id the caller sends it with.
_RESET = _with_task_lua("""
local function member(csv, x)
  for item in string.gmatch(csv, '([^,]+)') do if item == x then return true end end
  return false
end
local state = redis.call('HGET', KEYS[3], 'state') or ''
local pending = (state == 'Starting' or state == 'Updating')
local deferred = redis.call('HGET', KEYS[4], 'deferred') or ''
local dtask = redis.call('HGET', KEYS[4], 'deferred_task') or ''
local why = 'Cancelled by Reset ' .. ARGV[6] .. ' (task ' .. ARGV[1] .. ')'
local verdict, cancelled = 'run', ''
local defer = ARGV[10] == '1'
local is_on, is_off = member(ARGV[7], ARGV[6]), member(ARGV[8], ARGV[6])
redis.call('HSET', KEYS[4], 'last_request', ARGV[1], 'last_reset', ARGV[1])
-- A new Reset is the operator's answer to a failed power-on: the system's error ends here.
redis.call('HDEL', KEYS[4], 'error', 'error_at')
if defer and is_on and (pending or deferred ~= '') then
  verdict = 'deferred'
  redis.call('HSET', KEYS[4], 'deferred', ARGV[6], 'deferred_task', ARGV[1],
    'deferred_at', ARGV[4])
elseif defer and is_off and deferred ~= '' then
  redis.call('HDEL', KEYS[4], 'deferred', 'deferred_task', 'deferred_at')
end
-- A deferred action this one replaced (a later On) or cancelled (an Off) ends now.
if (verdict == 'deferred' or (defer and is_off)) and dtask ~= '' and dtask ~= ARGV[1] then
  end_task(dtask, 'Cancelled', 'Warning', why, 'TaskEvent.1.0.TaskCancelled', ARGV[4])
  cancelled = dtask
end
if verdict == 'deferred' then
  new_task('Pending', 'waiting for virtual media')
else
  new_task('New', '')
end
redis.call('HSET', KEYS[1], 'action', ARGV[6])
if verdict == 'run' then queue_reset(ARGV[1], ARGV[9], KEYS[5], ARGV[4]) end
return {verdict, cancelled, redis.call('HGETALL', KEYS[1])}
""")

# KEYS: task, resets. ARGV: task id, now. A worker took the Reset's message: it leaves
# ``ff:resets``, the first taking is recorded, and the task's state tells whether to act.
_TAKE_RESET = _with_task_lua("""
redis.call('ZREM', KEYS[2], ARGV[1])
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return '' end
if not ENDED[state] then redis.call('HSETNX', KEYS[1], 'picked', ARGV[2]) end
return state
""")

# KEYS: task, resets. ARGV: task id, now, sent before (epoch), off-actions csv. A Reset still
# in ``ff:resets`` since before "sent before" lost its message. Returns {verdict, system,
# action, celery id or superseding task}: 'resend' (touched now: the next try waits another
# period), 'superseded' (a later Reset of the system, or for a power-on any later request, was
# recorded: the client moved on, and the old action would land out of order, so it ends
# Cancelled), 'done' (taken or ended meanwhile) or 'fresh' (sent again since).
_RESEND_RESET = _with_task_lua("""
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) > tonumber(ARGV[3]) then return {'fresh', '', '', ''} end
local state = redis.call('HGET', KEYS[1], 'state')
if not state or ENDED[state] or redis.call('HEXISTS', KEYS[1], 'picked') == 1 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return {'done', '', '', ''}
end
local system = redis.call('HGET', KEYS[1], 'system') or ''
local action = redis.call('HGET', KEYS[1], 'action') or ''
-- A power-off is out of order only behind a later Reset: the EjectMedia and InsertMedia that
-- Ironic sends right after a ForceOff change no power state. A power-on is behind any later
-- request (it would start the node while the next ISO is still importing).
local is_off = false
for item in string.gmatch(ARGV[4], '([^,]+)') do if item == action then is_off = true end end
local field = is_off and 'last_reset' or 'last_request'
local latest = redis.call('HGET', POWER_PREFIX .. system, field) or ''
if latest ~= '' and latest ~= ARGV[1] then
  end_task(ARGV[1], 'Cancelled', 'Warning',
    'Superseded by task ' .. latest .. ' before any worker took it',
    'TaskEvent.1.0.TaskCancelled', ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[1])
  return {'superseded', system, action, latest}
end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[1], 'sent', ARGV[2])
return {'resend', system, action, redis.call('HGET', KEYS[1], 'celery_id') or ''}
""")

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

# KEYS: media, power. ARGV: gen, reason, now, media task id.
# Returns {verdict, cancelled deferred task or ''}; the deferred power-on is dropped on purpose.
# The media, its task and the dropped power-on's task change together: no reader ever sees the
# media failed while the Reset still waits for it.
_FAIL = _with_task_lua("""
local gen = redis.call('HGET', KEYS[1], 'gen') or '0'
if gen ~= ARGV[1] then return {'stale', ''} end
redis.call('HSET', KEYS[1], 'inserted', '0', 'state', 'Enabled', 'health', 'Critical',
  'message', ARGV[2], 'attached', '0', 'updated', ARGV[3])
local dtask = redis.call('HGET', KEYS[2], 'deferred_task') or ''
redis.call('HDEL', KEYS[2], 'deferred', 'deferred_task', 'deferred_at')
if ARGV[4] ~= '' then
  end_task(ARGV[4], 'Exception', 'Critical', ARGV[2], '', ARGV[3])
end
if dtask ~= '' then
  end_task(dtask, 'Exception', 'Critical', 'not powered on: virtual media failed: ' .. ARGV[2],
    '', ARGV[3])
end
return {'failed', dtask}
""")

# KEYS: task, power. ARGV: task id, reason, now. A power-on that never got its VM running ends
# in Exception and, while it is still the system's latest request, leaves the reason on the
# system. Returns 0 when the task had already ended (a later request or delivery settled it).
_FAIL_START = _with_task_lua("""
local message = 'not powered on: ' .. ARGV[2]
if not end_task(ARGV[1], 'Exception', 'Critical', message, 'Base.1.22.GeneralError', ARGV[3]) then
  return 0
end
if (redis.call('HGET', KEYS[2], 'last_request') or '') == ARGV[1] then
  redis.call('HSET', KEYS[2], 'error', ARGV[2], 'error_at', ARGV[3])
end
return 1
""")

# KEYS: power. ARGV: Redfish task id. Drops the in-flight record only if it is that task's.
_END_INFLIGHT = """
if redis.call('HGET', KEYS[1], 'inflight_task') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'inflight', 'inflight_task', 'inflight_by', 'inflight_at')
return 1
"""

# KEYS: boot. ARGV: gen. Ends a Once override (Disabled/None, new gen) only if ``gen`` is
# still the current one: a late end of an earlier Once must not cancel a newer request.
_END_BOOT_ONCE = """
if (redis.call('HGET', KEYS[1], 'gen') or '0') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'enabled') ~= 'Once' then return 0 end
redis.call('HSET', KEYS[1], 'enabled', 'Disabled', 'target', 'None')
return redis.call('HINCRBY', KEYS[1], 'gen', 1)
"""

# KEYS: system document, power, boot. ARGV[1..3]: SHA-1 of each as the caller last read it
# (``_doc_digest``, ``_hash_digest``), then the boot fields to set. The write of a checked
# PATCH in one round trip: it lands only if nothing changed since the check; returns the boot
# hash as written, false otherwise (the caller reads again and checks again).
_SET_BOOT_IF_SAME = """
local function hash_digest(key)
  local flat = redis.call('HGETALL', key)
  local fields = {}
  for i = 1, #flat, 2 do fields[#fields + 1] = {flat[i], flat[i + 1]} end
  table.sort(fields, function(a, b) return a[1] < b[1] end)
  local parts = {}
  for _, kv in ipairs(fields) do
    parts[#parts + 1] = #kv[1] .. ':' .. kv[1] .. #kv[2] .. ':' .. kv[2]
  end
  return redis.sha1hex(table.concat(parts))
end
if redis.sha1hex(redis.call('GET', KEYS[1]) or '') ~= ARGV[1]
    or hash_digest(KEYS[2]) ~= ARGV[2] or hash_digest(KEYS[3]) ~= ARGV[3] then
  return false
end
if #ARGV > 3 then redis.call('HSET', KEYS[3], unpack(ARGV, 4)) end
redis.call('HINCRBY', KEYS[3], 'gen', 1)
return redis.call('HGETALL', KEYS[3])
"""


def _doc_digest(raw: str | bytes | None) -> str:
    """SHA-1 of a stored document as ``_SET_BOOT_IF_SAME`` computes it (of "" when missing)."""
    data = raw.encode() if isinstance(raw, str) else (raw or b"")
    return hashlib.sha1(data).hexdigest()


def _hash_digest(fields: dict[str, str]) -> str:
    """SHA-1 of a hash as ``_SET_BOOT_IF_SAME`` computes it: fields in key order, each key and
    value prefixed with its length in bytes."""
    parts = []
    for key, value in sorted(fields.items()):
        k, v = key.encode(), value.encode()
        parts.append(b"%d:%s%d:%s" % (len(k), k, len(v), v))
    return hashlib.sha1(b"".join(parts)).hexdigest()


# KEYS: task. ARGV: field/value pairs. A late writer never resurrects an ended task.
_UPDATE_TASK = _with_task_lua("""
local state = redis.call('HGET', KEYS[1], 'state')
if not state or ENDED[state] then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
""")

# KEYS: media. ARGV: gen, then field/value pairs. Updates only the current generation.
_UPDATE_IF_GEN = """
if (redis.call('HGET', KEYS[1], 'gen') or '0') ~= ARGV[1] then return 0 end
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""


# An import's progress, while its generation is current: on the media, on its Redfish task
# (unless that ended) and, at a milestone, in the event log; one step. KEYS: media, task,
# event log, its meta. ARGV: gen, progress, updated, how many task field/value items follow,
# those items, then the event (APPEND_EVENT_LUA's args). Returns 0 when the work is stale.
_IMPORT_PROGRESS = _with_task_lua(
    APPEND_EVENT_LUA
    + """
if (redis.call('HGET', KEYS[1], 'gen') or '0') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'progress', ARGV[2], 'updated', ARGV[3])
local items = tonumber(ARGV[4])
local state = redis.call('HGET', KEYS[2], 'state')
if items > 0 and state and not ENDED[state] then
  redis.call('HSET', KEYS[2], unpack(ARGV, 5, 4 + items))
end
append_event(KEYS[3], KEYS[4], ARGV, 5 + items, #ARGV)
return 1
"""
)

# One delivery per run of a Celery task (workers.taskutil.single_delivery). KEYS: the run's
# marker, the task's final marker. ARGV: TTL. One round trip per claim:
# 'finished' (the task already returned or failed), 'done' (this run already ran), 'running'
# (another copy holds it) or 'claimed' (this copy runs it).
_CLAIM_RUN = """
if redis.call('GET', KEYS[2]) then return 'finished' end
if redis.call('SET', KEYS[1], 'running', 'NX', 'EX', ARGV[1]) then return 'claimed' end
if redis.call('GET', KEYS[1]) == 'done' then return 'done' end
return 'running'
"""
# KEYS: the run's marker, the task's final marker. ARGV: TTL, '1' when the task ended.
_END_RUN = """
redis.call('SET', KEYS[1], 'done', 'EX', ARGV[1])
if ARGV[2] == '1' then redis.call('SET', KEYS[2], '1', 'EX', ARGV[1]) end
return 1
"""


def _s(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


def _decode(mapping: dict) -> dict[str, str]:
    return {_s(k): _s(v) for k, v in mapping.items()}


def _media_defaults(data: dict[str, str]) -> dict[str, str]:
    """A slot never written to is an empty, healthy CD drive."""
    for field, value in (("inserted", "0"), ("state", "Enabled"), ("health", "OK"), ("gen", "0")):
        data.setdefault(field, value)
    return data


def _pairs(flat: list) -> dict[str, str]:
    """A hash as a script returns it (HGETALL inside Lua: a flat field, value list)."""
    return {_s(flat[i]): _s(flat[i + 1]) for i in range(0, len(flat), 2)}


# Attempts of ``Store.insert_and_send`` when concurrent inserts keep taking its generation.
INSERT_TRIES = 5


class GenerationRace(RuntimeError):
    """Concurrent requests on one drive took every generation an insert predicted."""

    def __init__(self, system_id: str, device: str):
        super().__init__(f"concurrent requests on {system_id} {device}: insert not recorded")


@dataclass(frozen=True)
class InsertWrites:
    """What an insert writes beside its own record: its chord's message and its event log
    entry (``EventLog.append_args``' keys and args)."""

    message: Publication
    event_keys: list[str]
    event_args: list[str]


def _began_insert(task_id: str, celery_id: str, reply: list) -> dict[str, Any]:
    """begin_insert's answer from _INSERT's reply."""
    gen, prev_image, prev_dv, prev_state, fields = reply
    return {
        "task": task_id,
        "gen": int(gen),
        "celery_id": celery_id,
        "fields": _pairs(fields),
        "previous_image": _s(prev_image),
        "previous_dv": _s(prev_dv),
        "previous_state": _s(prev_state),
    }


def _new_task_id() -> str:
    return uuid.uuid4().hex[:16]


def _new_celery_id() -> str:
    return str(uuid.uuid4())


def encode_doc(doc: dict) -> str:
    """A system's mirror document as stored: the same document always gives the same text."""
    return json.dumps(doc, sort_keys=True)


class Store:
    """Typed access to the keys above. One instance per process; it holds no state of its own."""

    def __init__(self, client: redis.Redis, task_ttl: int = Settings.task_result_ttl):
        self.r = client
        self.task_ttl = task_ttl
        self._new_task = client.register_script(_NEW_TASK)
        self._insert = client.register_script(_INSERT)
        self._insert_and_send = client.register_script(_INSERT_AND_SEND)
        self._eject = client.register_script(_EJECT)
        self._reset = client.register_script(_RESET)
        self._release = client.register_script(_RELEASE)
        self._fail = client.register_script(_FAIL)
        self._take_reset = client.register_script(_TAKE_RESET)
        self._resend_reset = client.register_script(_RESEND_RESET)
        self._update_if_gen = client.register_script(_UPDATE_IF_GEN)
        self._import_progress = client.register_script(_IMPORT_PROGRESS)
        self._update_task = client.register_script(_UPDATE_TASK)
        self._claim_run = client.register_script(_CLAIM_RUN)
        self._end_run = client.register_script(_END_RUN)
        self._end_boot_once = client.register_script(_END_BOOT_ONCE)
        self._set_boot_if_same = client.register_script(_SET_BOOT_IF_SAME)
        self._fail_start = client.register_script(_FAIL_START)
        self._end_inflight = client.register_script(_END_INFLIGHT)

    @classmethod
    def from_url(cls, url: str, task_ttl: int = Settings.task_result_ttl, **kwargs: Any) -> Store:
        kwargs.setdefault("socket_timeout", 5)
        kwargs.setdefault("socket_connect_timeout", 2)
        kwargs.setdefault("health_check_interval", 30)
        return cls(redis.Redis.from_url(url, decode_responses=True, **kwargs), task_ttl)

    def close(self) -> None:
        self.r.close()

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

    def systems_with(self, system_ids: list[str], *extra: str) -> list[tuple]:
        """Per system: its mirror document (None when gone) followed by the named hashes
        (``SYSTEM_HASHES``: "power", "boot", "media" and "media_credentials" of Cd), all in one
        pipelined round trip."""
        if not system_ids:
            return []
        pipe = self.r.pipeline(transaction=False)
        decode = self.queue_systems_with(pipe, system_ids, *extra)
        return decode(pipe.execute())

    def queue_systems_with(
        self, pipe: redis.client.Pipeline, system_ids: list[str], *extra: str
    ) -> Callable[[list], list[tuple]]:
        """``systems_with``'s reads queued on ``pipe`` (with whatever else it carries); returns
        what turns their replies into ``systems_with``'s answer."""
        for system_id in system_ids:
            pipe.get(key_system(system_id))
            for name in extra:
                pipe.hgetall(SYSTEM_HASHES[name](system_id))
        step = 1 + len(extra)

        def decode(replies: list) -> list[tuple]:
            found = []
            for index in range(len(system_ids)):
                raw, *hashes = replies[index * step : (index + 1) * step]
                found.append((json.loads(raw) if raw else None, *(_decode(h) for h in hashes)))
            return found

        return decode

    def mirror_synced(self) -> tuple[str, int]:
        """When the watcher last listed the cluster ('' never) and how many systems it found."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hget(KEY_MIRROR, "synced_at")
        pipe.scard(KEY_SYSTEMS)
        synced, count = pipe.execute()
        return _s(synced), int(count)

    def put_system(self, doc: dict) -> None:
        # No MULTI/EXEC: both writes are idempotent and nothing reads them as a pair (two
        # Redis commands less for each of the watcher's writes).
        pipe = self.r.pipeline(transaction=False)
        pipe.set(key_system(doc["id"]), encode_doc(doc))
        pipe.sadd(KEY_SYSTEMS, doc["id"])
        pipe.execute()

    def delete_system(self, system_id: str) -> None:
        pipe = self.r.pipeline()
        pipe.delete(key_system(system_id))
        # Its event log goes with it: the logs' memory is bounded by the systems that exist.
        pipe.delete(key_log(system_id), key_log_meta(system_id))
        pipe.srem(KEY_SYSTEMS, system_id)
        pipe.execute()

    def replace_systems(self, docs: list[dict]) -> None:
        """Relist: store every document and forget systems that are no longer there."""
        keep = {d["id"] for d in docs}
        gone = set(self.system_ids()) - keep
        pipe = self.r.pipeline()
        for doc in docs:
            pipe.set(key_system(doc["id"]), encode_doc(doc))
        if keep:
            pipe.sadd(KEY_SYSTEMS, *keep)
        for system_id in gone:
            pipe.delete(key_system(system_id), key_log(system_id), key_log_meta(system_id))
            pipe.srem(KEY_SYSTEMS, system_id)
        pipe.hset(KEY_MIRROR, "synced_at", str(time.time()))
        pipe.execute()

    # -- media -------------------------------------------------------------------------------

    def get_media(self, system_id: str, device: str = "Cd") -> dict[str, str]:
        return _media_defaults(_decode(self.r.hgetall(key_media(system_id, device))))

    def every_media(self, device: str = "Cd", chunk: int = 500) -> dict[str, dict[str, str]]:
        """Each system's media on ``device``, read in one round trip per ``chunk`` systems: the
        watcher's lost-work sweep reads them all every visibility timeout."""
        ids = self.system_ids()
        found: dict[str, dict[str, str]] = {}
        for start in range(0, len(ids), chunk):
            part = ids[start : start + chunk]
            pipe = self.r.pipeline(transaction=False)
            for system_id in part:
                pipe.hgetall(key_media(system_id, device))
            for system_id, raw in zip(part, pipe.execute(), strict=True):
                found[system_id] = _media_defaults(_decode(raw))
        return found

    def media_and_credentials(
        self, system_id: str, device: str = "Cd"
    ) -> tuple[dict[str, str], dict[str, str]]:
        """``get_media`` and ``media_credentials`` in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hgetall(key_media(system_id, device))
        pipe.hgetall(key_media_cred(system_id, device))
        media, credentials = pipe.execute()
        return _media_defaults(_decode(media)), _decode(credentials)

    def begin_insert(self, system_id: str, device: str, image: str, **request: Any) -> dict:
        """Create the InsertMedia task and record the request (a new generation) in one step;
        ``request``: the insert's options (``_insert_request``).

        Returns ``task``, ``gen``, ``celery_id`` (send the media work under it: it is recorded
        on the task), the new task's ``fields`` and the
        ``previous_image``/``previous_dv``/``previous_state``.
        """
        task_id, celery_id = _new_task_id(), _new_celery_id()
        keys, args = self._insert_request(system_id, device, image, task_id, celery_id, **request)
        return _began_insert(task_id, celery_id, self._insert(keys=keys, args=args))

    def insert_and_send(
        self,
        system_id: str,
        device: str,
        image: str,
        compose: Callable[[int, str, str], InsertWrites],
        *,
        known_gen: int,
        **request: Any,
    ) -> dict[str, Any]:
        """``begin_insert``, with the insert's event and its chord's message written in the same
        step (one round trip, all or nothing): ``compose(gen, task_id, celery_id)`` builds them
        for the generation the insert will take, predicted from ``known_gen`` (the one the
        caller read). When another request took that generation first nothing is written, the
        prediction moves on and the step is tried again, ``INSERT_TRIES`` times at most.
        """
        task_id, celery_id = _new_task_id(), _new_celery_id()
        keys, args = self._insert_request(system_id, device, image, task_id, celery_id, **request)
        gen = known_gen + 1
        for _ in range(INSERT_TRIES):
            writes = compose(gen, task_id, celery_id)
            message = writes.message
            reply = self._insert_and_send(
                keys=[*keys, *writes.event_keys, message.queue, message.chord_size_key],
                args=[
                    *args,
                    str(gen),
                    "" if message.chord_ttl is None else str(message.chord_ttl),
                    message.message,
                    *writes.event_args,
                ],
            )
            if int(reply[0]):
                return _began_insert(task_id, celery_id, reply)
            gen = int(reply[1]) + 1
        raise GenerationRace(system_id, device)

    def _insert_request(
        self,
        system_id: str,
        device: str,
        image: str,
        task_id: str,
        celery_id: str,
        *,
        write_protected: bool = True,
        inserted: bool = True,
        transfer_protocol: str = "",
        transfer_method: str = "",
        username: str = "",
        password: str = "",
    ) -> tuple[list[str], list[str]]:
        """KEYS and ARGV of _INSERT."""
        image_name = image.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]
        keys = [
            key_task(task_id),
            KEY_TASKS,
            key_media(system_id, device),
            key_media_cred(system_id, device),
            key_power(system_id),
        ]
        args = [
            *self._task_args(task_id, f"InsertMedia {device}", system_id),
            image,
            image_name,
            "1" if write_protected else "0",
            "1" if inserted else "0",
            transfer_protocol,
            transfer_method,
            username,
            password,
            celery_id,
        ]
        return keys, args

    def begin_eject(self, system_id: str, device: str) -> dict[str, Any]:
        """Create the EjectMedia task and record the eject (a new generation) in one step.

        A Reset deferred behind the media is handed back (``released_action``,
        ``released_task``), recorded as sent under ``released_celery_id``: send it with that
        id. With nothing attached, pending or left open by an earlier request (``previous_dv``
        empty, ``unfinished`` False) the task is already Completed; otherwise send the eject's
        work under ``celery_id``. ``fields``: the new task as recorded.
        """
        task_id, celery_id, own_celery_id = _new_task_id(), _new_celery_id(), _new_celery_id()
        gen, prev_dv, unfinished, action, dtask, fields = self._eject(
            keys=[
                key_task(task_id),
                KEY_TASKS,
                key_media(system_id, device),
                key_power(system_id),
                key_media_cred(system_id, device),
                KEY_RESETS,
            ],
            args=[
                *self._task_args(task_id, f"EjectMedia {device}", system_id),
                celery_id,
                own_celery_id,
            ],
        )
        return {
            "task": task_id,
            "gen": int(gen),
            "celery_id": own_celery_id,
            "fields": _pairs(fields),
            "previous_dv": _s(prev_dv),
            "unfinished": bool(int(unfinished)),
            "released_action": _s(action),
            "released_task": _s(dtask),
            "released_celery_id": celery_id if _s(action) else "",
        }

    def media_certificates(self, system_id: str, device: str = "Cd") -> dict[str, str]:
        """Certificate id -> PEM, in the order they were added."""
        found = _decode(self.r.hgetall(key_media_certs(system_id, device)))
        found.pop("next", None)
        return dict(sorted(found.items(), key=lambda item: int(item[0])))

    def add_media_certificate(self, system_id: str, device: str, pem: str) -> str:
        """Keep one more certificate; returns its id (never reused)."""
        key = key_media_certs(system_id, device)
        cert_id = str(self.r.hincrby(key, "next", 1))
        self.r.hset(key, cert_id, pem)
        return cert_id

    def delete_media_certificate(self, system_id: str, device: str, cert_id: str) -> bool:
        if not cert_id.isdigit():
            return False
        return bool(self.r.hdel(key_media_certs(system_id, device), cert_id))

    def set_media_verify(self, system_id: str, device: str, verify: bool) -> None:
        self.r.hset(key_media(system_id, device), "verify_certificate", "1" if verify else "0")

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

    def import_progress(
        self,
        system_id: str,
        device: str,
        gen: int,
        progress: str,
        task_id: str,
        task_fields: dict[str, Any],
        event: tuple[list[str], list[str]],
    ) -> bool:
        """An import's progress on the media (``progress``), its Redfish task (``task_fields``,
        unless the task ended) and the event log (``event``: ``EventLog``'s append keys and
        args, logged once per mark), in one step; False (nothing written) when ``gen`` is no
        longer current."""
        items = [part for name, value in task_fields.items() for part in (name, _s(value))]
        event_keys, event_args = event
        return bool(
            self._import_progress(
                keys=[key_media(system_id, device), key_task(task_id), *event_keys],
                args=[
                    str(gen),
                    progress,
                    str(time.time()),
                    str(len(items) if task_id else 0),
                    *(items if task_id else []),
                    *event_args,
                ],
            )
        )

    def fail_media(
        self, system_id: str, device: str, gen: int, reason: str, task_id: str = ""
    ) -> dict[str, str]:
        """Media ``gen`` failed: shown on the media, its task ``task_id`` and the power-on it
        held back end in Exception, in one step. ``stale`` when a newer request replaced it."""
        verdict, dtask = self._fail(
            keys=[key_media(system_id, device), key_power(system_id)],
            args=[str(gen), reason, str(time.time()), task_id],
        )
        return {"verdict": _s(verdict), "cancelled_task": _s(dtask)}

    # -- power -------------------------------------------------------------------------------

    def get_power(self, system_id: str) -> dict[str, str]:
        return _decode(self.r.hgetall(key_power(system_id)))

    def request_power(
        self, system_id: str, action: str, *, defer: bool = True, requested: str = ""
    ) -> dict[str, str]:
        """Create the Reset task and decide whether it runs now or waits for pending media,
        in one step. ``requested``: the ResetType the client sent when ``action`` is what it
        was resolved to (PushPowerButton); the task is named after it.

        Returns ``task``, ``verdict`` ("run" or "deferred"), ``celery_id`` (send a "run" under
        this id) and ``cancelled_task``: a deferred action this request superseded or
        cancelled (an Off cancels a deferred On), already marked Cancelled; ``fields``: the new
        task as recorded. ``defer=False`` (the sequential mode) always runs.
        """
        task_id, celery_id = _new_task_id(), _new_celery_id()
        verdict, cancelled, fields = self._reset(
            keys=[
                key_task(task_id),
                KEY_TASKS,
                key_media(system_id, "Cd"),
                key_power(system_id),
                KEY_RESETS,
            ],
            args=[
                *self._task_args(task_id, f"Reset {requested or action}", system_id),
                action,
                ",".join(ON_ACTIONS),
                ",".join(OFF_ACTIONS),
                celery_id,
                "1" if defer else "0",
            ],
        )
        verdict = _s(verdict)
        return {
            "task": task_id,
            "verdict": verdict,
            "celery_id": celery_id if verdict == "run" else "",
            "cancelled_task": _s(cancelled),
            "fields": _pairs(fields),
        }

    def take_reset(self, task_id: str) -> str:
        """A worker took this Reset's message: no longer a candidate for re-sending.

        Returns the task's state ("" when the task expired): a task that already ended
        (done by an earlier delivery, or cancelled before any worker took it) is not acted on.
        """
        return _s(
            self._take_reset(keys=[key_task(task_id), KEY_RESETS], args=[task_id, str(time.time())])
        )

    def stale_resets(self, sent_before: float, limit: int = 1000) -> list[str]:
        """Reset task ids sent before ``sent_before`` that no worker has taken yet."""
        found = self.r.zrangebyscore(KEY_RESETS, "-inf", sent_before, start=0, num=limit)
        return [_s(x) for x in found]

    def resend_reset(self, task_id: str, sent_before: float) -> dict[str, str]:
        """Claim a stale Reset for sending again (see ``_RESEND_RESET``); ``verdict`` "resend"
        comes with ``system``, ``action`` and the ``celery_id`` to send it under again."""
        verdict, system_id, action, extra = self._resend_reset(
            keys=[key_task(task_id), KEY_RESETS],
            args=[task_id, str(time.time()), str(sent_before), ",".join(OFF_ACTIONS)],
        )
        result = {"verdict": _s(verdict), "system": _s(system_id), "action": _s(action)}
        result["superseded_by" if result["verdict"] == "superseded" else "celery_id"] = _s(extra)
        return result

    def release_deferred(self, system_id: str, device: str, gen: int, body_id: str) -> dict:
        verdict, action, dtask = self._release(
            keys=[key_media(system_id, device), key_power(system_id)],
            args=[str(gen), body_id, str(time.time())],
        )
        return {"verdict": _s(verdict), "action": _s(action), "task": _s(dtask)}

    def fail_power_on(self, system_id: str, task_id: str, reason: str) -> bool:
        """End a power-on's task in Exception and show ``reason`` on the system (see
        ``_FAIL_START``); False when the task had already ended."""
        return bool(
            self._fail_start(
                keys=[key_task(task_id), key_power(system_id)],
                args=[task_id, reason, str(time.time())],
            )
        )

    def follow_start(self, task_id: str) -> float:
        """Record that ``power.verify`` follows this Reset's start (``followed_at`` in the
        task); returns the start time."""
        now = time.time()
        pipe = self.r.pipeline()
        if task_id:
            pipe.hset(key_task(task_id), mapping={"verifying": "1", "followed_at": str(now)})
            pipe.zadd(KEY_STARTS, {task_id: now})
        pipe.execute()
        return now

    def touch_start(self, task_id: str) -> None:
        """A check of this start ran and looks again later: its message is not lost."""
        self.r.zadd(KEY_STARTS, {task_id: time.time()}, xx=True)

    def start_followed(self, task_id: str) -> None:
        """The start of ``task_id`` settled: nothing to re-send for it."""
        self.r.zrem(KEY_STARTS, task_id)

    def unsettled_starts(self, touched_before: float, limit: int = 1000) -> list[str]:
        """Task ids of followed starts whose check has not run since ``touched_before``."""
        found = self.r.zrangebyscore(KEY_STARTS, "-inf", touched_before, start=0, num=limit)
        return [_s(task_id) for task_id in found]

    def end_inflight_task(self, system_id: str, task_id: str) -> None:
        """The power-on of ``task_id`` settled (its VM runs, or it failed): it no longer shows
        as PoweringOn, even while the chord body that ran it waits to be delivered again."""
        self._end_inflight(keys=[key_power(system_id)], args=[task_id])

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

    def set_boot_if(
        self,
        system_id: str,
        unchanged: Callable[[dict | None, dict[str, str], dict[str, str]], bool],
        **fields: str,
    ) -> int | None:
        """``write_boot_if`` returning only the new generation (None: the check failed)."""
        written = self.write_boot_if(system_id, unchanged, **fields)
        return None if written is None else int(written["gen"])

    def write_boot_if(
        self,
        system_id: str,
        unchanged: Callable[[dict | None, dict[str, str], dict[str, str]], bool],
        seen: tuple[dict | None, dict[str, str], dict[str, str]] | None = None,
        **fields: str,
    ) -> dict[str, str] | None:
        """``set_boot`` only while ``unchanged(mirror doc, power, boot)`` holds for what is
        stored, checked and written in one step: the If-Match of a PATCH. Returns the boot hash
        as written (its new "gen" included), or None when the check failed (the client's ETag
        is out of date).

        ``seen``: the document and hashes the caller read this request, to be checked first;
        while nothing changes in between the whole write is one round trip (a script that
        writes only if all three are still what was checked, by digest).
        """
        keys = [key_system(system_id), key_power(system_id), key_boot(system_id)]
        args = [part for k, v in fields.items() for part in (k, _s(v))]
        if seen is not None:
            doc, power, boot = seen
            raw: str | bytes | None = encode_doc(doc) if doc is not None else None
        for _ in range(10):  # each retry means another writer won meanwhile: it rarely repeats
            if seen is None:
                with self.r.pipeline(transaction=False) as pipe:
                    raw, power, boot = pipe.get(keys[0]).hgetall(keys[1]).hgetall(keys[2]).execute()
                power, boot = _decode(power), _decode(boot)
                doc = json.loads(raw) if raw else None
            if not unchanged(doc, power, boot):
                return None
            digests = [_doc_digest(raw), _hash_digest(power), _hash_digest(boot)]
            written = self._set_boot_if_same(keys=keys, args=[*digests, *args])
            if written:
                return _decode(dict(zip(written[::2], written[1::2], strict=True)))
            seen = None  # changed since it was read (or stored in another spelling): read again
        raise redis.exceptions.ConnectionError("boot override kept changing: try again")

    def end_boot_once(self, system_id: str, gen: int | str) -> bool:
        """Set a Once override back to Disabled/None if it is still generation ``gen``;
        False when a newer request (or an earlier end) changed it meanwhile."""
        return bool(self._end_boot_once(keys=[key_boot(system_id)], args=[str(gen)]))

    # -- Celery task runs --------------------------------------------------------------------

    def claim_run(self, celery_id: str, run: int, ttl: int) -> str:
        """'claimed' (this delivery runs it), 'done' (a copy already ran this run),
        'running' (a copy holds it now) or 'finished' (the task already returned or failed)."""
        keys = [f"{PREFIX}run:{celery_id}:{run}", f"{PREFIX}run:{celery_id}:final"]
        return _s(self._claim_run(keys=keys, args=[ttl]))

    def end_run(self, celery_id: str, run: int, ttl: int, final: bool) -> None:
        """This run is done; ``final``: the task returned or failed (no later run comes)."""
        keys = [f"{PREFIX}run:{celery_id}:{run}", f"{PREFIX}run:{celery_id}:final"]
        self._end_run(keys=keys, args=[ttl, "1" if final else "0"])

    # -- Redfish tasks -----------------------------------------------------------------------

    def _task_args(self, task_id: str, name: str, system_id: str) -> list[str]:
        """ARGV[1..5] of the scripts that create a task (see ``_LUA_TASKS``)."""
        return [task_id, name, system_id, str(time.time()), str(self.task_ttl)]

    def new_task(self, name: str, system_id: str, state: str = "New", message: str = "") -> str:
        """A Redfish task on its own (requests create theirs in the step that records them)."""
        task_id = _new_task_id()
        self._new_task(
            keys=[key_task(task_id), KEY_TASKS],
            args=[*self._task_args(task_id, name, system_id), state, message],
        )
        return task_id

    def get_task(self, task_id: str) -> dict[str, str] | None:
        data = _decode(self.r.hgetall(key_task(task_id)))
        return data or None

    def task_exists(self, task_id: str) -> bool:
        return bool(task_id) and bool(self.r.exists(key_task(task_id)))

    def task_field(self, task_id: str, field: str) -> str:
        return _s(self.r.hget(key_task(task_id), field)) if task_id else ""

    def remember_task_field(self, task_id: str, field: str, value: str) -> str:
        """First writer wins: the value the first delivery of a task recorded in ``field``
        (``value`` itself when there is no task to record into, e.g. it expired)."""
        if not self.task_exists(task_id):
            return value
        pipe = self.r.pipeline()
        pipe.hsetnx(key_task(task_id), field, value)
        pipe.hget(key_task(task_id), field)
        _, recorded = pipe.execute()
        return _s(recorded) if recorded is not None else value

    def task_systems(self, task_ids: list[str]) -> list[str | None]:
        """The system of each task (None for a task that expired), in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.hget(key_task(task_id), "system")
        return [None if s is None else _s(s) for s in pipe.execute()] if task_ids else []

    def task_ids(self, limit: int = 1000) -> list[str]:
        return [_s(x) for x in self.r.zrevrange(KEY_TASKS, 0, limit - 1)]

    def update_task(self, task_id: str, **fields: Any) -> None:
        """Update a task unless it already ended (a late writer never resurrects a task)."""
        if not task_id:
            return
        if fields.get("state") in ENDED_TASK_STATES:
            fields.setdefault("end", time.time())
            if fields.get("state") == "Completed":
                fields.setdefault("percent", 100)
        pairs = [part for name, value in fields.items() for part in (name, _s(value))]
        if pairs:
            self._update_task(keys=[key_task(task_id)], args=pairs)
