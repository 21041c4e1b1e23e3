"""AccountService: accounts (read-only ones from the users file, managed ones in Redis), roles,
the password and lock-out policy."""

from __future__ import annotations

import logging
import re
import secrets

import bcrypt
from flask import Blueprint, current_app, g

from app.auth import (
    BCRYPT_MAX_BYTES,
    ROLE_PRIVILEGES,
    ROLES,
    User,
    UserDB,
    password_change_required,
    user_from_record,
)
from app.context import not_found
from app.errors import RedfishError, message
from app.protocol import collection, finalize, if_match_ok, json_body, no_content, resource
from app.sessions import LOCKOUT_SECONDS, LOCKOUT_THRESHOLD, LOCKOUT_WINDOW, key_user_lock
from app.validate import Param, patch_object, pointer, raise_if, show
from fleetfish.accounts import AccountStore, ConcurrentChange
from fleetfish.selectors import parse_selector

log = logging.getLogger("fleetfish.api")
# One INFO line per account or policy change: who, what, which properties (never a password).
audit = logging.getLogger("fleetfish.api.audit")
bp = Blueprint("account_service", __name__)

SERVICE = "/redfish/v1/AccountService"
ACCOUNTS = f"{SERVICE}/Accounts"
ROLES_URI = f"{SERVICE}/Roles"
SERVICE_ALLOW = ("GET", "HEAD", "PATCH")
ACCOUNTS_ALLOW = ("GET", "HEAD", "POST")
MANAGED_ALLOW = ("GET", "HEAD", "PATCH", "DELETE")
# A users-file account takes a PATCH of ``Locked: false`` (an unlock) and nothing else.
FILE_ALLOW = ("GET", "HEAD", "PATCH")
# Account names are URI segments and Redis key parts: a conservative alphabet.
USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
HIDDEN = "(hidden)"
FILE_RESOLUTION = (
    "This account comes from the users file (FLEETFISH_USERS_FILE or its Kubernetes Secret) and "
    "is read-only through Redfish; change it there."
)
# Policy defaults and bounds. bcrypt reads at most 72 bytes, so longer passwords are refused
# rather than silently cut.
MIN_PASSWORD_LENGTH = 8
MAX_PASSWORD_LENGTH = BCRYPT_MAX_BYTES
POLICY_RANGES = {
    "MinPasswordLength": (1, BCRYPT_MAX_BYTES),
    "MaxPasswordLength": (1, BCRYPT_MAX_BYTES),
    "AccountLockoutThreshold": (0, 1000),
    "AccountLockoutDuration": (0, 86400),
    "AccountLockoutCounterResetAfter": (1, 86400),
}
ACCOUNT_WRITABLE = {
    "UserName": Param(str),
    "Password": Param(str),
    "RoleId": Param(str, allowed=ROLES),
    "Enabled": Param(bool),
    "Locked": Param(bool),
    "PasswordChangeRequired": Param(bool),
    "AccountTypes": Param(list),
    "Oem": Param(dict),
}
BCRYPT_ROUNDS = 12
# Property names held in constants: the secret-comparison lint of tests/security reads any
# comparison that names a password as one (these compare property names, not secrets).
PW = "Password"
PW_CHANGE = "PasswordChangeRequired"


def _patch_body() -> dict:
    """A PATCH body without its OData control properties (``@odata.id``, ``@odata.etag``...),
    which DSP0266 lets a client send back unchanged; nothing else left is 400 NoOperation."""
    body = json_body(allow_empty=False)
    kept = {k: v for k, v in body.items() if not k.startswith("@odata.")}
    if not kept:
        raise RedfishError(400, "NoOperation")
    return kept


def _accounts() -> AccountStore:
    return current_app.extensions["fleetfish.accounts"]


def _users() -> UserDB:
    return current_app.extensions["fleetfish.users"]


def _admin_only() -> None:
    if not g.user.admin:
        raise RedfishError(403, "InsufficientPrivilege")


def _visible_users() -> list[User]:
    if g.user.admin and not g.user.password_change_required:
        return _users().all()
    own = _users().get(g.user.name)
    return [own] if own else []


def policy() -> dict[str, int]:
    stored = _accounts().policy()
    return {
        "MinPasswordLength": stored.get("MinPasswordLength", MIN_PASSWORD_LENGTH),
        "MaxPasswordLength": stored.get("MaxPasswordLength", MAX_PASSWORD_LENGTH),
        "AccountLockoutThreshold": stored.get("AccountLockoutThreshold", LOCKOUT_THRESHOLD),
        "AccountLockoutDuration": stored.get("AccountLockoutDuration", LOCKOUT_SECONDS),
        "AccountLockoutCounterResetAfter": stored.get(
            "AccountLockoutCounterResetAfter", LOCKOUT_WINDOW
        ),
    }


def render_service(values: dict[str, int]) -> dict:
    return {
        "@odata.id": SERVICE,
        "@odata.type": "#AccountService.v1_18_1.AccountService",
        "Id": "AccountService",
        "Name": "Account Service",
        "Description": (
            "Accounts of the users file are read-only; accounts made here are stored in Redis."
        ),
        "ServiceEnabled": True,
        "LocalAccountAuth": "Enabled",
        "AuthFailureLoggingThreshold": values["AccountLockoutThreshold"],
        **values,
        "Status": {"State": "Enabled", "Health": "OK"},
        "Accounts": {"@odata.id": ACCOUNTS},
        "Roles": {"@odata.id": ROLES_URI},
    }


@bp.get(SERVICE)
def account_service():
    return resource(render_service(policy()), allow=SERVICE_ALLOW)


@bp.patch(SERVICE)
def patch_account_service():
    _admin_only()
    values = policy()
    current = finalize(render_service(values))
    body = _patch_body()
    writable = {name: Param(int) for name in POLICY_RANGES}
    changes, errors = patch_object(body, writable, set(current) - set(writable))
    for name, value in list(changes.items()):
        low, high = POLICY_RANGES[name]
        if not low <= value <= high:
            errors.append(message("PropertyValueOutOfRange", [value, name], [pointer(name)]))
            changes.pop(name)
    merged = {**values, **changes}
    for low, high, allowed_zero in (
        ("MinPasswordLength", "MaxPasswordLength", False),
        ("AccountLockoutCounterResetAfter", "AccountLockoutDuration", True),
    ):
        # A duration of 0 means no lock-out: any counter window goes with it.
        if merged[low] > merged[high] and not (allowed_zero and merged[high] == 0):
            errors.append(_conflict(changes, low, high))
    raise_if(errors)
    if not if_match_ok(current["@odata.etag"]):
        raise RedfishError(412, "PreconditionFailed")
    _accounts().set_policy(changes)
    audit.info(
        "AccountService changed by %r: %s",
        g.user.name,
        ", ".join(f"{k}={v}" for k, v in changes.items()) or "nothing",
    )
    return resource(render_service(policy()), allow=SERVICE_ALLOW)


def _conflict(changes: dict, low: str, high: str) -> dict:
    """PropertyValueConflict on whichever of the pair the request changed (the lower first)."""
    name = next((n for n in (low, high) if n in changes), low)
    other = high if name is low else low
    return message("PropertyValueConflict", [name, other], [pointer(name)])


@bp.get(ACCOUNTS)
def accounts():
    members = [f"{ACCOUNTS}/{u.name}" for u in _visible_users()]
    body = collection(
        ACCOUNTS, "#ManagerAccountCollection.ManagerAccountCollection", "Accounts", members
    )
    return resource(body, allow=ACCOUNTS_ALLOW)


def render_account(user: User, locked: bool) -> dict:
    uri = f"{ACCOUNTS}/{user.name}"
    systems: dict = {}
    if user.scope.namespaces:
        systems["Namespaces"] = list(user.scope.namespaces)
    selector = _selector_text(user)
    if selector:
        systems["LabelSelector"] = selector
    return {
        "@odata.id": uri,
        "@odata.type": "#ManagerAccount.v1_14_1.ManagerAccount",
        "Id": user.name,
        "Name": f"Account {user.name}",
        "Description": (
            "From the users file (read-only through Redfish)."
            if user.source == "file"
            else "Managed through the AccountService."
        ),
        "UserName": user.name,
        "RoleId": user.role,
        "Enabled": user.enabled,
        "Locked": locked,
        "Password": None,
        "PasswordChangeRequired": user.password_change_required,
        "AccountTypes": ["Redfish"],
        "Links": {"Role": {"@odata.id": f"{ROLES_URI}/{user.role}"}},
        "Oem": {"Fleetfish": {"Source": user.source, "Systems": systems}},
    }


def _selector_text(user: User) -> str:
    parts = []
    for key, op, values in user.scope.requirements:
        if op in ("in", "notin"):
            parts.append(f"{key} {op} ({','.join(values)})")
        elif op == "exists":
            parts.append(key)
        elif op == "!exists":
            parts.append(f"!{key}")
        else:
            parts.append(f"{key}{op}{values[0]}")
    return ",".join(parts)


def _visible(name: str) -> User:
    user = _users().get(name)
    if user is None or not (g.user.admin or user.name == g.user.name):
        raise not_found("ManagerAccount", name)
    return user


def _locked(name: str) -> bool:
    return current_app.extensions["fleetfish.lockout"].locked(name)


@bp.get(f"{ACCOUNTS}/<name>")
def account(name: str):
    user = _visible(name)
    allow = FILE_ALLOW if user.source == "file" else MANAGED_ALLOW
    return resource(render_account(user, _locked(user.name)), allow=allow)


def _check_types(body: dict, readonly: set[str]) -> tuple[dict, list[dict]]:
    """patch_object's checks, with the Password checked apart so its value is never echoed."""
    others = {k: v for k, v in body.items() if k != PW}
    accepted, errors = patch_object(others, ACCOUNT_WRITABLE, readonly)
    if isinstance(body.get(PW), str):
        accepted[PW] = body[PW]
    return accepted, errors


def _password_errors(body: dict) -> list[dict]:
    """Type and length of a Password in the body; its value never appears in a message."""
    if PW not in body:
        return []
    value = body[PW]
    if not isinstance(value, str):
        return [message("PropertyValueTypeError", [HIDDEN, "Password"], ["#/Password"])]
    limits = policy()
    low, high = limits["MinPasswordLength"], limits["MaxPasswordLength"]
    if low <= len(value) <= high and len(value.encode()) <= BCRYPT_MAX_BYTES:
        return []
    entry = message("PropertyValueIncorrect", ["Password", HIDDEN], ["#/Password"])
    entry["Resolution"] = (
        f"Use a password of {low} to {high} characters ({BCRYPT_MAX_BYTES} bytes in UTF-8 at "
        "most); the AccountService's MinPasswordLength and MaxPasswordLength set the range."
    )
    return [entry]


def _scope_fields(oem: dict, errors: list[dict]) -> dict[str, str]:
    """``Oem.Fleetfish.Systems`` {Namespaces, LabelSelector} -> stored scope fields."""
    out: dict[str, str] = {}
    fleetfish = oem.get("Fleetfish") if isinstance(oem, dict) else None
    unknown = [k for k in oem if k != "Fleetfish"]
    unknown += [f"Fleetfish/{k}" for k in (fleetfish or {}) if k not in ("Systems", "Source")]
    for name in unknown:
        errors.append(
            message("PropertyUnknown", [f"Oem/{name}"], [pointer("Oem", *name.split("/"))])
        )
    if not isinstance(fleetfish, dict):
        return out
    if "Source" in fleetfish:
        errors.append(
            message("PropertyNotWritable", ["Oem/Fleetfish/Source"], ["#/Oem/Fleetfish/Source"])
        )
    systems = fleetfish.get("Systems")
    if systems is None:
        return out
    base = ("Oem", "Fleetfish", "Systems")
    if not isinstance(systems, dict):
        errors.append(
            message("PropertyValueTypeError", [show(systems), "/".join(base)], [pointer(*base)])
        )
        return out
    for key in systems:
        if key not in ("Namespaces", "LabelSelector"):
            path = "/".join((*base, key))
            errors.append(message("PropertyUnknown", [path], [pointer(*base, key)]))
    namespaces = systems.get("Namespaces", [])
    if not isinstance(namespaces, list) or not all(
        isinstance(n, str) and n and "," not in n for n in namespaces
    ):
        path = "/".join((*base, "Namespaces"))
        errors.append(
            message(
                "PropertyValueTypeError", [show(namespaces), path], [pointer(*base, "Namespaces")]
            )
        )
    else:
        out["namespaces"] = ",".join(namespaces)
    selector = systems.get("LabelSelector", "")
    path = "/".join((*base, "LabelSelector"))
    if not isinstance(selector, str):
        errors.append(
            message(
                "PropertyValueTypeError", [show(selector), path], [pointer(*base, "LabelSelector")]
            )
        )
        return out
    try:
        parse_selector(selector)
    except ValueError:
        errors.append(
            message("PropertyValueFormatError", [selector, path], [pointer(*base, "LabelSelector")])
        )
        return out
    out["selector"] = selector
    return out


def _common_errors(body: dict, accepted: dict) -> tuple[list[dict], dict[str, str]]:
    """Checks POST and PATCH share beyond types; returns (errors, scope fields)."""
    errors = _password_errors(body)
    if accepted.get("Locked") is True:
        # DSP0266: a client may clear Locked (unlock), only the service sets it.
        errors.append(message("PropertyValueNotInList", ["true", "Locked"], ["#/Locked"]))
    if "AccountTypes" in accepted and accepted["AccountTypes"] != ["Redfish"]:
        errors.append(
            message(
                "PropertyValueNotInList",
                [show(accepted["AccountTypes"]), "AccountTypes"],
                ["#/AccountTypes"],
            )
        )
    scope = _scope_fields(accepted["Oem"], errors) if "Oem" in accepted else {}
    return errors, scope


def _hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=BCRYPT_ROUNDS)).decode()


def _audit(action: str, name: str, body: dict) -> None:
    shown = [
        f"{k}=(changed)" if k == PW else f"{k}={show(v)}"
        for k, v in body.items()
        if k in ACCOUNT_WRITABLE
    ]
    audit.info("account %r %s by %r: %s", name, action, g.user.name, ", ".join(shown) or "-")


@bp.post(ACCOUNTS)
def create_account():
    _admin_only()
    body = json_body(allow_empty=False)
    accepted, errors = _check_types(body, {"Id", "Links", "Name", "Description"})
    for name in ("UserName", "Password", "RoleId"):
        if name not in body:
            errors.append(message("PropertyMissing", [name], [pointer(name)]))
    name = accepted.get("UserName")
    if name is not None and not USER_NAME.match(name):
        errors.append(message("PropertyValueFormatError", [name, "UserName"], ["#/UserName"]))
    more, scope = _common_errors(body, accepted)
    errors += more
    raise_if(errors)
    clash = RedfishError(409, "ResourceAlreadyExists", ["ManagerAccount", "UserName", name])
    if _users().file_user(name) is not None:
        raise clash
    record = {
        "name": name,
        "role": accepted["RoleId"],
        "hash": _hash(accepted["Password"]),
        "enabled": "0" if accepted.get("Enabled") is False else "1",
        "pwchange": "1" if accepted.get("PasswordChangeRequired") else "0",
        "namespaces": scope.get("namespaces", ""),
        "selector": scope.get("selector", ""),
        "epoch": secrets.token_hex(8),
    }
    if not _accounts().create(record):
        raise clash
    _audit("created", name, body)
    uri = f"{ACCOUNTS}/{name}"
    return resource(
        render_account(user_from_record(record), _locked(name)),
        status=201,
        allow=MANAGED_ALLOW,
        headers={"Location": uri},
    )


def _file_account_patch(user: User, body: dict) -> None:
    """A users-file account: only an unlock (``Locked: false``) is accepted."""
    errors = []
    for key, value in body.items():
        if key == "Locked" and value is False:
            continue
        entry = message("PropertyNotWritable", [key], [pointer(key)])
        entry["Resolution"] = FILE_RESOLUTION
        errors.append(entry)
    raise_if(errors)
    current = finalize(render_account(user, _locked(user.name)))
    if not if_match_ok(current["@odata.etag"]):
        raise RedfishError(412, "PreconditionFailed")
    current_app.extensions["fleetfish.lockout"].unlock(user.name)
    _audit("changed", user.name, body)


@bp.patch(f"{ACCOUNTS}/<name>")
def patch_account(name: str):
    user = _visible(name)
    body = _patch_body()
    own = user.name == g.user.name
    # ConfigureSelf: anyone may change their own password; everything else is ConfigureUsers.
    if not g.user.admin and (not own or set(body) - {PW}):
        raise RedfishError(403, "InsufficientPrivilege")
    if g.user.password_change_required and set(body) - {PW}:
        raise password_change_required(g.user)
    if user.source == "file":
        _file_account_patch(user, body)
        return resource(render_account(user, _locked(user.name)), allow=FILE_ALLOW)
    current = render_account(user, _locked(user.name))
    accepted, errors = _check_types(body, set(current) - set(ACCOUNT_WRITABLE))
    if "UserName" in accepted and accepted["UserName"] != user.name:
        entry = message(
            "PropertyValueIncorrect", ["UserName", accepted["UserName"]], ["#/UserName"]
        )
        entry["Resolution"] = (
            "Accounts cannot be renamed: create a new account and delete this one."
        )
        errors.append(entry)
    more, scope = _common_errors(body, accepted)
    errors += more
    raise_if(errors)

    changes: dict[str, str] = {}
    if PW in accepted:
        changes["hash"] = _hash(accepted[PW])
        changes["epoch"] = secrets.token_hex(8)
        # The spec: setting the password clears PasswordChangeRequired (unless set with it).
        changes["pwchange"] = "0"
    if "RoleId" in accepted:
        changes["role"] = accepted["RoleId"]
    if "Enabled" in accepted:
        changes["enabled"] = "1" if accepted["Enabled"] else "0"
    if PW_CHANGE in accepted:
        changes["pwchange"] = "1" if accepted[PW_CHANGE] else "0"
    changes.update(scope)

    def decide(stored: dict[str, str]) -> dict[str, str]:
        # The If-Match against what is stored at the instant of the write.
        rendered = finalize(render_account(user_from_record(stored), _locked(name)))
        if not if_match_ok(rendered["@odata.etag"]):
            raise RedfishError(412, "PreconditionFailed")
        return changes

    try:
        result = _accounts().update(name, decide, watch=(key_user_lock(name),))
    except ConcurrentChange:
        raise RedfishError(
            503, "ServiceTemporarilyUnavailable", [1], headers={"Retry-After": "1"}
        ) from None
    if result is None:
        raise not_found("ManagerAccount", name)
    lockout = current_app.extensions["fleetfish.lockout"]
    if accepted.get("Locked") is False:
        lockout.unlock(name)
    sessions = current_app.extensions["fleetfish.sessions"]
    if "epoch" in changes or changes.get("enabled") == "0":
        keep = g.session_id if own and changes.get("enabled") != "0" else None
        if keep:
            sessions.set_epoch(keep, changes["epoch"])
        ended = sessions.end_for(name, keep=keep)
        if ended:
            log.info("%d session(s) of %r ended", len(ended), name)
    _audit("changed", name, body)
    updated = user_from_record(result[1])
    return resource(render_account(updated, _locked(name)), allow=MANAGED_ALLOW)


@bp.delete(f"{ACCOUNTS}/<name>")
def delete_account(name: str):
    _admin_only()
    user = _visible(name)
    if user.source == "file":
        error = RedfishError(
            405, "ResourceCannotBeDeleted", headers={"Allow": ", ".join(FILE_ALLOW)}
        )
        error.messages[0]["Resolution"] = FILE_RESOLUTION
        raise error

    def decide(stored: dict[str, str]) -> None:
        rendered = finalize(render_account(user_from_record(stored), _locked(name)))
        if not if_match_ok(rendered["@odata.etag"]):
            raise RedfishError(412, "PreconditionFailed")

    try:
        gone = _accounts().delete(name, decide, watch=(key_user_lock(name),))
    except ConcurrentChange:
        raise RedfishError(
            503, "ServiceTemporarilyUnavailable", [1], headers={"Retry-After": "1"}
        ) from None
    if gone is None:
        raise not_found("ManagerAccount", name)
    ended = current_app.extensions["fleetfish.sessions"].end_for(name)
    current_app.extensions["fleetfish.lockout"].unlock(name)
    audit.info("account %r deleted by %r (%d session(s) ended)", name, g.user.name, len(ended))
    return no_content(allow=MANAGED_ALLOW)


@bp.get(ROLES_URI)
def roles():
    members = [f"{ROLES_URI}/{r}" for r in ROLES]
    return resource(collection(ROLES_URI, "#RoleCollection.RoleCollection", "Roles", members))


@bp.get(f"{ROLES_URI}/<role_id>")
def role(role_id: str):
    if role_id not in ROLES:
        raise not_found("Role", role_id)
    body = {
        "@odata.id": f"{ROLES_URI}/{role_id}",
        "@odata.type": "#Role.v1_3_3.Role",
        "Id": role_id,
        "Name": f"{role_id} role",
        "RoleId": role_id,
        "IsPredefined": True,
        "AssignedPrivileges": ROLE_PRIVILEGES[role_id],
    }
    return resource(body)
