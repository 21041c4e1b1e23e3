"""Accounts made through Redfish and the AccountService policy, kept in Redis.

Keys (next to the layout in ``fleetfish.store``):

``ff:account:{name}``  HASH, one account made through the AccountService (``ACCOUNT_FIELDS``)
``ff:accounts``        SET of those account names
``ff:accountpolicy``   HASH, AccountService settings an Administrator changed (``POLICY_FIELDS``);
                       a field that is absent has its built-in default

Accounts of the users file (or Kubernetes Secret) are not here: they are read-only and win on a
name clash. Only bcrypt digests are stored, never a password.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

PREFIX = "ff:"
KEY_ACCOUNTS = f"{PREFIX}accounts"
KEY_POLICY = f"{PREFIX}accountpolicy"

ACCOUNT_FIELDS = (
    "name",  # UserName, also the account's Id
    "role",  # Administrator | Operator | ReadOnly
    "hash",  # bcrypt digest of the password
    "enabled",  # "1" / "0"
    "pwchange",  # "1" when PasswordChangeRequired
    "namespaces",  # comma-separated scope namespaces ("" for all)
    "selector",  # scope label selector ("" for none)
    "epoch",  # random, renewed with each password; sessions opened under another one are dead
)
POLICY_FIELDS = (
    "MinPasswordLength",
    "MaxPasswordLength",
    "AccountLockoutThreshold",
    "AccountLockoutDuration",
    "AccountLockoutCounterResetAfter",
)
# A transaction that keeps meeting concurrent writes gives up after this many tries.
MAX_TRIES = 10

# Creates the account unless it exists: the hash and its name in the set, or neither.
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('SADD', KEYS[2], ARGV[1])
return 1
"""


class ConcurrentChange(Exception):
    """The account kept changing under a read-check-write; nothing was written."""


def key_account(name: str) -> str:
    return f"{PREFIX}account:{name}"


class AccountStore:
    """Reads and atomic writes of Redfish-made accounts and the policy."""

    def __init__(self, client: redis.Redis):
        self.r = client
        self._create = client.register_script(_CREATE)

    def get(self, name: str) -> dict[str, str] | None:
        return self.r.hgetall(key_account(name)) or None

    def all(self) -> list[dict[str, str]]:
        names = sorted(self.r.smembers(KEY_ACCOUNTS))
        if not names:
            return []
        pipe = self.r.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(key_account(name))
        return [record for record in pipe.execute() if record]

    def create(self, record: dict[str, str]) -> bool:
        """Store a new account; False (and nothing written) when the name is taken."""
        flat = [part for item in record.items() for part in item]
        return bool(
            self._create(
                keys=[key_account(record["name"]), KEY_ACCOUNTS], args=[record["name"], *flat]
            )
        )

    def update(
        self,
        name: str,
        decide: Callable[[dict[str, str]], dict[str, str]],
        watch: tuple[str, ...] = (),
    ) -> tuple[dict[str, str], dict[str, str]] | None:
        """Apply ``decide(current)``'s changes atomically; (before, after), or None when absent.

        ``decide`` sees the account as stored at the instant of the write (it may raise to
        refuse the change); other keys whose value it depends on are named in ``watch``.
        """

        def write(pipe, current: dict[str, str]):
            changes = decide(current)
            pipe.multi()
            if changes:
                pipe.hset(key_account(name), mapping=changes)
            return current, {**current, **changes}

        return self._write_checked(name, watch, write)

    def delete(
        self,
        name: str,
        decide: Callable[[dict[str, str]], None],
        watch: tuple[str, ...] = (),
    ) -> dict[str, str] | None:
        """Delete the account if ``decide(current)`` does not raise; what it was, or None."""

        def write(pipe, current: dict[str, str]):
            decide(current)
            pipe.multi()
            pipe.delete(key_account(name))
            pipe.srem(KEY_ACCOUNTS, name)
            return current

        return self._write_checked(name, watch, write)

    def _write_checked(self, name: str, watch: tuple[str, ...], write: Callable):
        """``write(pipe, current)`` queues its writes once the stored account is read under
        WATCH (with ``watch``), and they run only if none of those keys changed meanwhile;
        retried when another writer won. None when the account does not exist."""
        key = key_account(name)
        for _ in range(MAX_TRIES):
            with self.r.pipeline() as pipe:
                try:
                    pipe.watch(key, *watch)
                    current = pipe.hgetall(key)
                    if not current:
                        return None
                    result = write(pipe, current)
                    pipe.execute()
                    return result
                except redis.WatchError:
                    continue
        raise ConcurrentChange(name)

    def policy(self) -> dict[str, int]:
        """The policy values an Administrator set (absent ones keep their defaults)."""
        stored = self.r.hgetall(KEY_POLICY)
        return {k: int(v) for k, v in stored.items() if k in POLICY_FIELDS}

    def set_policy(self, values: dict[str, int]) -> None:
        if values:
            self.r.hset(KEY_POLICY, mapping={k: str(v) for k, v in values.items()})
