"""Authentication (HTTP Basic and X-Auth-Token sessions), roles and per-user system scope.

Users come from ``FLEETFISH_USERS_FILE`` (YAML or JSON, format in docs/redfish.md), re-read when
the file changes (a Kubernetes Secret update), and from the accounts made through the
AccountService (Redis, ``fleetfish.accounts``); the file wins on a name clash. bcrypt is slow on
purpose; since Ironic opens a new connection and sends Basic credentials on every request, one
successful verification is cached in-process for CACHE_TTL seconds as an HMAC under a
per-process random key.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass

import bcrypt
import yaml
from flask import Flask, current_app, g, request

from app.bcrypt_budget import BcryptBudget
from app.context import prefetch_system, system_reads
from app.errors import RedfishError
from app.scope import Scope
from fleetfish.accounts import AccountStore

log = logging.getLogger("fleetfish.api")

ROLES = ("Administrator", "Operator", "ReadOnly")
# Redfish standard role privileges, shown under AccountService/Roles.
ROLE_PRIVILEGES = {
    "Administrator": [
        "Login",
        "ConfigureManager",
        "ConfigureUsers",
        "ConfigureSelf",
        "ConfigureComponents",
    ],
    "Operator": ["Login", "ConfigureSelf", "ConfigureComponents"],
    "ReadOnly": ["Login", "ConfigureSelf"],
}
OPEN_PATHS = frozenset(
    {"/redfish", "/redfish/v1", "/redfish/v1/odata", "/redfish/v1/$metadata", "/metrics"}
)
SESSIONS_PATH = "/redfish/v1/SessionService/Sessions"
# DSP0266: a POST to a collection's Members property is the same as a POST to the collection.
LOGIN_PATHS = frozenset({SESSIONS_PATH, f"{SESSIONS_PATH}/Members"})
WRITE_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})
# Endpoints a ReadOnly user may write to: logging out of its own session and changing its own
# password (both checked by the handler).
SELF_SERVICE_ENDPOINTS = frozenset({"session_service.logout", "account_service.patch_account"})
# What a user whose PasswordChangeRequired is set may still do (DSP0266, "Password change
# required handling"): read and PATCH its own account, read and end its own session, and read
# the way there (AccountService, the Accounts collection, which then lists its own account only).
PASSWORD_CHANGE_ENDPOINTS = {
    "account_service.account_service": "",
    "account_service.accounts": "",
    "account_service.account": "name",
    "account_service.patch_account": "name",
    "session_service.session": "session_id",
    "session_service.logout": "session_id",
}
ACCOUNTS_URI = "/redfish/v1/AccountService/Accounts"
# bcrypt reads at most 72 bytes of a password; bcrypt 5 raises past that instead of ignoring them.
BCRYPT_MAX_BYTES = 72
CACHE_TTL = 30.0
RELOAD_CHECK_SECONDS = 2.0
# Checked for unknown user names so their timing matches a real (cost 12) user; the password
# behind it was random and thrown away.
_DUMMY_HASH = b"$2b$12$KJVjusdAtVqSUm7OqDbS5.CrGynHuSZbxahIvlalFyFVCXrWRGUTK"


@dataclass(frozen=True)
class User:
    name: str
    role: str
    scope: Scope
    password_hash: bytes = b""
    password_plain: str = ""
    # "file" (users file or Secret: read-only through Redfish) or "redfish" (AccountService).
    source: str = "file"
    enabled: bool = True
    password_change_required: bool = False
    # Renewed with each password set through Redfish: a session opened under another is dead.
    epoch: str = ""

    @property
    def read_only(self) -> bool:
        return self.role == "ReadOnly"

    @property
    def admin(self) -> bool:
        return self.role == "Administrator"


def parse_users(text: str, source: str = "users file") -> dict[str, User]:
    data = yaml.safe_load(text) or {}
    users: dict[str, User] = {}
    for entry in data.get("users") or []:
        name = str(entry.get("name") or "")
        role = entry.get("role", "ReadOnly")
        if not name or role not in ROLES:
            log.error("%s: skipping user %r with role %r", source, name, role)
            continue
        hashed = entry.get("password_hash")
        plain = entry.get("password")
        if not hashed and plain is None:
            log.error("%s: user %r has no password_hash, skipped", source, name)
            continue
        if not hashed:
            log.warning(
                "SECURITY WARNING: %s gives user %r a plain-text password; "
                "use password_hash (bcrypt) outside of labs",
                source,
                name,
            )
        users[name] = User(
            name=name,
            role=role,
            scope=Scope.from_config(entry.get("systems")),
            password_hash=str(hashed).encode() if hashed else b"",
            password_plain="" if hashed else str(plain),
        )
    return users


def user_from_record(record: dict[str, str]) -> User:
    """A User from an AccountService account as ``fleetfish.accounts`` stores it."""
    namespaces = [n for n in record.get("namespaces", "").split(",") if n]
    return User(
        name=record["name"],
        role=record.get("role", "ReadOnly"),
        scope=Scope.from_config(
            {"namespaces": namespaces, "labelSelector": record.get("selector", "")}
        ),
        password_hash=record.get("hash", "").encode(),
        source="redfish",
        enabled=record.get("enabled") == "1",
        password_change_required=record.get("pwchange") == "1",
        epoch=record.get("epoch", ""),
    )


def checkpw(password: str, hashed: bytes) -> bool:
    return bcrypt.checkpw(password.encode()[:BCRYPT_MAX_BYTES], hashed)


class UserDB:
    """The users file, reloaded on change, and the AccountService accounts, with the
    verification cache (keyed on the password hash too, so a new password voids it)."""

    def __init__(self, path: str, accounts: AccountStore | None = None):
        self.path = path
        self.accounts = accounts
        self._users: dict[str, User] = {}
        self._mtime: float | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        self._key = secrets.token_bytes(32)
        self._cache: dict[str, tuple[bytes, float]] = {}
        if not path:
            log.warning("FLEETFISH_USERS_FILE is not set: every request needing auth gets 401")
        self._reload(force=True)

    def _reload(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.path or (not force and now - self._checked < RELOAD_CHECK_SECONDS):
            return
        self._checked = now
        try:
            mtime = os.stat(self.path).st_mtime
            if mtime == self._mtime:
                return
            with open(self.path, encoding="utf-8") as fh:
                users = parse_users(fh.read(), self.path)
        except (OSError, yaml.YAMLError, ValueError, AttributeError):
            log.exception(
                "cannot load users file %s; keeping %d users",
                self.path,
                len(self._users),
            )
            return
        with self._lock:
            self._users, self._mtime = users, mtime
            self._cache.clear()
        log.info("loaded %d users from %s", len(users), self.path)

    def file_user(self, name: str) -> User | None:
        self._reload()
        return self._users.get(name)

    def get(self, name: str) -> User | None:
        """The user of that name: the file's, else the AccountService's (one Redis read)."""
        user = self.file_user(name)
        if user is not None or self.accounts is None or not name:
            return user
        record = self.accounts.get(name)
        return user_from_record(record) if record else None

    def all(self) -> list[User]:
        self._reload()
        users = dict(self._users)
        for record in self.accounts.all() if self.accounts is not None else []:
            users.setdefault(record["name"], user_from_record(record))
        return sorted(users.values(), key=lambda u: u.name)

    def _digest(self, name: str, password: str, user: User) -> bytes:
        material = b"\0".join([name.encode(), password.encode(), user.password_hash])
        return hmac.new(self._key, material, hashlib.sha256).digest()

    def cached(self, name: str, password: str) -> User | None:
        """The user when these exact credentials were verified less than CACHE_TTL ago."""
        self._reload()  # a changed users file empties the cache first
        cached = self._cache.get(name)
        if not cached or cached[1] <= time.monotonic():
            return None
        user = self.get(name)
        if user is None:
            return None
        return user if hmac.compare_digest(cached[0], self._digest(name, password, user)) else None

    def verified_before(self, name: str, password: str) -> bool:
        """These exact credentials were verified in this process since the users file last
        changed, however long ago (the cache entry outlives CACHE_TTL for this purpose)."""
        self._reload()
        cached = self._cache.get(name)
        user = self.get(name) if cached else None
        if user is None or not cached:
            return False
        return hmac.compare_digest(cached[0], self._digest(name, password, user))

    def verify(self, name: str, password: str) -> User | None:
        hit = self.cached(name, password)
        if hit is not None:
            return hit
        user = self.get(name)
        if user is None:
            checkpw(password, _DUMMY_HASH)
            return None
        if user.password_hash:
            try:
                ok = checkpw(password, user.password_hash)
            except ValueError:
                log.error("user %r has an invalid bcrypt hash", name)
                ok = False
        else:
            ok = hmac.compare_digest(password.encode(), user.password_plain.encode())
        if not ok:
            return None
        with self._lock:
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[name] = (self._digest(name, password, user), time.monotonic() + CACHE_TTL)
        return user


def unauthorized() -> RedfishError:
    return RedfishError(
        401, "NoValidSession", headers={"WWW-Authenticate": 'Basic realm="fleetfish"'}
    )


def check_password(name: str, password: str) -> User | None:
    """Verify credentials through the lock-out: a locked user is refused even with the right password.

    Fast path (Ironic sends Basic credentials on every request): credentials verified recently
    in this process, for a user this process saw unlocked within the last second, cost no bcrypt
    and no Redis round trip.
    """
    ext = current_app.extensions
    lockout = ext["fleetfish.lockout"]
    users: UserDB = ext["fleetfish.users"]
    if lockout.recently_clear(name):
        user = users.cached(name, password)
        if user is not None:
            return user if user.enabled else None
    # The peer address as gunicorn saw it: behind a proxy, every client shares the proxy's.
    address = request.remote_addr or ""
    if lockout.locked(name, address):
        lockout.forget(name)
        log.info("login refused for locked-out user %r or address %s", name, address)
        return None
    budget: BcryptBudget = ext["fleetfish.bcrypt_budget"]
    # Over budget, only credentials this process verified before are checked: a flood of
    # guesses (known names or not) waits, the users who logged in before do not.
    if not budget.available() and not users.verified_before(name, password):
        retry = budget.retry_after()
        log.info("password checks over budget: login for %r from %s deferred", name, address)
        # 429: a limit on password checks, not an outage; the Base message says when to retry.
        raise RedfishError(
            429, "ServiceTemporarilyUnavailable", [retry], headers={"Retry-After": str(retry)}
        )
    with budget.spending():
        user = users.verify(name, password)
    if user is None:
        for locked in lockout.failed(name, address):
            log.warning("%s locked out after repeated failed logins", locked)
        return None
    if not user.enabled:
        # The right password of a disabled account: refused, not counted as a guess.
        log.info("login refused for disabled account %r", name)
        return None
    lockout.remember_clear(name)
    return user


def plain_http_refused() -> RedfishError:
    """FLEETFISH_REQUIRE_TLS is set and credentials came (or would come) over plain HTTP."""
    error = RedfishError(403, "AccessDenied", [request.base_url])
    error.messages[0]["Resolution"] = (
        "This service accepts credentials over HTTPS only (FLEETFISH_REQUIRE_TLS). "
        "Use an https:// URL."
    )
    return error


def password_change_required(user: User) -> RedfishError:
    return RedfishError(403, "PasswordChangeRequired", [f"{ACCOUNTS_URI}/{user.name}"])


def password_change_allowed(user: User) -> bool:
    """The request is one a user who must change its password may still make."""
    arg = PASSWORD_CHANGE_ENDPOINTS.get(request.endpoint or "")
    if arg is None or (not arg and request.method not in ("GET", "HEAD")):
        return False
    if not arg:
        return True
    own = user.name if arg == "name" else g.session_id
    return own is not None and (request.view_args or {}).get(arg) == own


def install(app: Flask) -> None:
    @app.before_request
    def _authenticate():
        g.user = None
        g.session_id = None
        if request.path in OPEN_PATHS:
            return
        # request.is_secure: TLS in gunicorn, or X-Forwarded-Proto from a proxy gunicorn trusts
        # (FORWARDED_ALLOW_IPS); the app itself trusts no forwarded header.
        if current_app.extensions["fleetfish.settings"].require_tls and not request.is_secure:
            raise plain_http_refused()
        if request.path in LOGIN_PATHS and request.method == "POST":
            return
        users: UserDB = current_app.extensions["fleetfish.users"]
        token = request.headers.get("X-Auth-Token")
        if token:
            sessions = current_app.extensions["fleetfish.sessions"]
            # The system the view reads first comes in the session's round trip.
            reads = system_reads()
            session, _ = sessions.touch(
                token, also=(lambda pipe: prefetch_system(pipe, reads)) if reads else None
            )
            user = users.get(session["user"]) if session else None
            if user is None or not user.enabled or session.get("epoch", "") != user.epoch:
                # The account is gone, disabled or has a new password: the session ends now.
                if session:
                    sessions.delete(session["id"])
                raise unauthorized()
            g.session_id = session["id"]
        else:
            auth = request.authorization
            if auth is None or auth.type != "basic" or auth.username is None:
                raise unauthorized()
            user = check_password(auth.username, auth.password or "")
            if user is None:
                raise unauthorized()
        g.user = user
        if user.password_change_required and not password_change_allowed(user):
            raise password_change_required(user)
        if (
            user.read_only
            and request.method in WRITE_METHODS
            and request.endpoint not in SELF_SERVICE_ENDPOINTS
        ):
            raise RedfishError(403, "InsufficientPrivilege")
