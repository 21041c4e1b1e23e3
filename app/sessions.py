"""Redfish sessions and the failed-login lock-out, kept in Redis so every API process shares them.

Keys (API-owned, next to the layout in ``fleetfish.store``):

``ff:sess:{sha256(token)}``   HASH {id, user, created}; expires after SessionTimeout of inactivity
``ff:sessid:{id}``            STRING sha256(token); same expiry, lets a session be found by its Id
``ff:sessions``               ZSET session ids by creation time (stale ids are dropped on listing)
``ff:authfail:{user}``        STRING failure counter, expires LOCKOUT_WINDOW after the first failure
``ff:authlock:{user}``        STRING set while the user is locked out, expires after LOCKOUT_SECONDS
``ff:authfail-addr:{addr}``   STRING failures from one client address (any user names), same window
``ff:authlock-addr:{addr}``   STRING set while that address is locked out (ADDRESS_THRESHOLD)

The per-user numbers are the AccountService policy: the defaults below unless an Administrator
changed them (``fleetfish.accounts``); the per-address ones are fixed.

Only the token's hash is stored: a Redis dump does not hand out live sessions. The session Id is
the first 16 hex digits of that hash, which tells nothing about the token itself.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from typing import Any

import redis

from fleetfish.accounts import AccountStore

PREFIX = "ff:"
KEY_SESSIONS = f"{PREFIX}sessions"
LOCKOUT_THRESHOLD = 5
LOCKOUT_WINDOW = 60
LOCKOUT_SECONDS = 60
# Failures from one client address, whatever the user names, before it is locked out too: a
# flood of guesses over many names from one address stops costing bcrypt. Higher than the
# per-name threshold, since an address may be a NAT or a proxy shared by several clients.
ADDRESS_THRESHOLD = 20
# After a successful login a process skips the lock-out lookup for that user this long; a lock-out
# set by another process reaches credentials this process already verified within this time.
CLEAR_MEMO_SECONDS = 1.0


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _key_session(token_hash: str) -> str:
    return f"{PREFIX}sess:{token_hash}"


def _key_session_id(session_id: str) -> str:
    return f"{PREFIX}sessid:{session_id}"


def key_user_lock(user: str) -> str:
    return f"{PREFIX}authlock:{user}"


class Sessions:
    """Session tokens with sliding expiry."""

    def __init__(self, client: redis.Redis, timeout: int):
        self.r = client
        self.timeout = timeout

    def create(self, user: str, epoch: str = "") -> tuple[str, dict[str, str]]:
        """A new session; ``epoch`` is the account's password epoch it is valid under."""
        token = secrets.token_urlsafe(32)
        token_hash = _hash(token)
        session = {"id": token_hash[:16], "user": user, "created": str(time.time())}
        if epoch:
            session["epoch"] = epoch
        pipe = self.r.pipeline()
        pipe.hset(_key_session(token_hash), mapping=session)
        pipe.expire(_key_session(token_hash), self.timeout)
        pipe.set(_key_session_id(session["id"]), token_hash, ex=self.timeout)
        pipe.zadd(KEY_SESSIONS, {session["id"]: time.time()})
        pipe.execute()
        return token, session

    def touch(
        self,
        token: str,
        also: Callable[[redis.client.Pipeline], Callable[[list], Any]] | None = None,
    ) -> tuple[dict[str, str] | None, Any]:
        """The session of a token, its inactivity timer restarted (None when unknown or expired),
        and what ``also`` read: ``also(pipe)`` queues reads of its own in the same round trip
        and returns what turns their replies into its answer (None without ``also``)."""
        token_hash = _hash(token)
        # Every call with a token comes here: one round trip, and no MULTI/EXEC around it
        # (nothing needs the three commands atomic: an EXPIRE of a session deleted meanwhile
        # does nothing), which saves Redis two commands per call.
        pipe = self.r.pipeline(transaction=False)
        pipe.hgetall(_key_session(token_hash))
        pipe.expire(_key_session(token_hash), self.timeout)
        pipe.expire(_key_session_id(token_hash[:16]), self.timeout)
        decode = also(pipe) if also is not None else None
        replies = pipe.execute()
        return replies[0] or None, decode(replies[3:]) if decode is not None else None

    def get(self, session_id: str) -> dict[str, str] | None:
        token_hash = self.r.get(_key_session_id(session_id))
        if not token_hash:
            return None
        return self.r.hgetall(_key_session(token_hash)) or None

    def delete(self, session_id: str) -> bool:
        token_hash = self.r.get(_key_session_id(session_id))
        pipe = self.r.pipeline()
        if token_hash:
            pipe.delete(_key_session(token_hash))
        pipe.delete(_key_session_id(session_id))
        pipe.zrem(KEY_SESSIONS, session_id)
        pipe.execute()
        return bool(token_hash)

    def delete_of_users(self, users: set[str]) -> list[str]:
        """End every session of these users; returns the ids ended."""
        ended = [s["id"] for s in self.list(limit=-1) if s.get("user") in users]
        for session_id in ended:
            self.delete(session_id)
        return ended

    def set_epoch(self, session_id: str, epoch: str) -> None:
        """Keep a session valid across its own user's password change."""
        token_hash = self.r.get(_key_session_id(session_id))
        if token_hash:
            self.r.hset(_key_session(token_hash), "epoch", epoch)

    def end_for(self, user: str, keep: str | None = None) -> list[str]:
        """Delete every session of ``user`` but ``keep``; their ids."""
        ended = [
            s["id"] for s in self.list(limit=-1) if s.get("user") == user and s.get("id") != keep
        ]
        for session_id in ended:
            self.delete(session_id)
        return ended

    def list(self, limit: int = 1000) -> list[dict[str, str]]:
        ids = list(self.r.zrange(KEY_SESSIONS, 0, limit - 1 if limit > 0 else -1))
        if not ids:
            return []
        hashes = self.r.mget([_key_session_id(i) for i in ids])
        gone = [i for i, h in zip(ids, hashes, strict=True) if not h]
        live = [h for h in hashes if h]
        pipe = self.r.pipeline()
        for token_hash in live:
            pipe.hgetall(_key_session(token_hash))
        if gone:
            pipe.zrem(KEY_SESSIONS, *gone)
        results = pipe.execute()
        return [s for s in results[: len(live)] if s]


def lockout_policy(stored: dict[str, int]) -> tuple[int, int, int]:
    """(threshold, counter window, lock duration) of the per-user lock-out, defaults filled in."""
    return (
        stored.get("AccountLockoutThreshold", LOCKOUT_THRESHOLD),
        stored.get("AccountLockoutCounterResetAfter", LOCKOUT_WINDOW),
        stored.get("AccountLockoutDuration", LOCKOUT_SECONDS),
    )


class Lockout:
    """After a threshold of failures within a window a user is refused for a duration.

    The three numbers are the AccountService policy (LOCKOUT_THRESHOLD, LOCKOUT_WINDOW and
    LOCKOUT_SECONDS unless changed); a threshold or a duration of 0 locks no user out. Client
    addresses are counted with ADDRESS_THRESHOLD, LOCKOUT_WINDOW and LOCKOUT_SECONDS always.
    """

    def __init__(self, client: redis.Redis, accounts: AccountStore | None = None):
        self.r = client
        self.accounts = accounts or AccountStore(client)
        self._clear_until: dict[str, float] = {}

    def locked(self, user: str, address: str = "") -> bool:
        """The user name is locked out, or the client address (when given) is."""
        keys = [key_user_lock(user)] + ([f"{PREFIX}authlock-addr:{address}"] if address else [])
        return bool(self.r.exists(*keys))

    def recently_clear(self, user: str) -> bool:
        """True when this process saw ``user`` log in unlocked less than CLEAR_MEMO_SECONDS ago."""
        return self._clear_until.get(user, 0.0) > time.monotonic()

    def remember_clear(self, user: str) -> None:
        if len(self._clear_until) > 4096:
            self._clear_until.clear()
        self._clear_until[user] = time.monotonic() + CLEAR_MEMO_SECONDS

    def forget(self, user: str) -> None:
        self._clear_until.pop(user, None)

    def failed(self, user: str, address: str = "") -> list[str]:
        """Count one failure for the name (and the address); what it locked out, if anything."""
        threshold, window, duration = lockout_policy(self.accounts.policy())
        counters = []
        if threshold > 0 and duration > 0:
            counters.append(
                (user, "authfail", "authlock", threshold, window, duration, f"user {user!r}")
            )
        if address:
            counters.append(
                (
                    address,
                    "authfail-addr",
                    "authlock-addr",
                    ADDRESS_THRESHOLD,
                    LOCKOUT_WINDOW,
                    LOCKOUT_SECONDS,
                    f"address {address}",
                )
            )
        self.forget(user)
        if not counters:
            return []
        pipe = self.r.pipeline()
        for name, fail, _, _, period, *_ in counters:
            # SET NX EX starts the window on the first failure (EXPIRE NX needs Redis 7).
            # A window of 0 (counter never reset) is kept a day: Redis needs an expiry > 0.
            pipe.set(f"{PREFIX}{fail}:{name}", 0, ex=period or 86400, nx=True)
            pipe.incr(f"{PREFIX}{fail}:{name}")
        counts = pipe.execute()[1::2]
        locked = []
        pipe = self.r.pipeline()
        for (name, fail, lock, limit, _, lasts, label), count in zip(counters, counts, strict=True):
            if count >= limit:
                pipe.set(f"{PREFIX}{lock}:{name}", "1", ex=lasts)
                pipe.delete(f"{PREFIX}{fail}:{name}")
                locked.append(label)
        if locked:
            pipe.execute()
        return locked

    def unlock(self, user: str) -> None:
        """An Administrator's reset: the lock and the failure count of a user name go."""
        self.r.delete(key_user_lock(user), f"{PREFIX}authfail:{user}")
