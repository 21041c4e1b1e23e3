"""Authentication (HTTP Basic and X-Auth-Token sessions), roles and per-user system scope.

Users come from ``FLEETFISH_USERS_FILE`` (YAML or JSON, format in docs/redfish.md), re-read when
the file changes (a Kubernetes Secret update). bcrypt is slow on purpose; since Ironic opens a new
connection and sends Basic credentials on every request, one successful verification is cached
in-process for CACHE_TTL seconds as an HMAC under a per-process random key.
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
from app.errors import RedfishError
from app.scope import Scope

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
# Endpoints a ReadOnly user may write to: logging out of its own session (checked by the handler).
SELF_SERVICE_ENDPOINTS = frozenset({"session_service.logout"})
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


class UserDB:
    """The users file, reloaded on change, with the verification cache."""

    def __init__(self, path: str):
        self.path = path
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

    def get(self, name: str) -> User | None:
        self._reload()
        return self._users.get(name)

    def all(self) -> list[User]:
        self._reload()
        return sorted(self._users.values(), key=lambda u: u.name)

    def _digest(self, name: str, password: str, user: User) -> bytes:
        material = b"\0".join([name.encode(), password.encode(), user.password_hash])
        return hmac.new(self._key, material, hashlib.sha256).digest()

    def cached(self, name: str, password: str) -> User | None:
        """The user when these exact credentials were verified less than CACHE_TTL ago."""
        user = self.get(name)
        cached = self._cache.get(name)
        if user is None or not cached or cached[1] <= time.monotonic():
            return None
        return user if hmac.compare_digest(cached[0], self._digest(name, password, user)) else None

    def verified_before(self, name: str, password: str) -> bool:
        """These exact credentials were verified in this process since the users file last
        changed, however long ago (the cache entry outlives CACHE_TTL for this purpose)."""
        user = self.get(name)
        cached = self._cache.get(name)
        if user is None or not cached:
            return False
        return hmac.compare_digest(cached[0], self._digest(name, password, user))

    def verify(self, name: str, password: str) -> User | None:
        hit = self.cached(name, password)
        if hit is not None:
            return hit
        user = self.get(name)
        if user is None:
            bcrypt.checkpw(password.encode(), _DUMMY_HASH)
            return None
        if user.password_hash:
            try:
                ok = bcrypt.checkpw(password.encode(), user.password_hash)
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
            return user
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


def current_user() -> User:
    return g.user


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
            session = current_app.extensions["fleetfish.sessions"].touch(token)
            user = users.get(session["user"]) if session else None
            if user is None:
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
        if (
            user.read_only
            and request.method in WRITE_METHODS
            and request.endpoint not in SELF_SERVICE_ENDPOINTS
        ):
            raise RedfishError(403, "InsufficientPrivilege")
