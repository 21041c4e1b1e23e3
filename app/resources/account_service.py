"""AccountService (read-only): accounts from the users file, the three roles, the lock-out policy."""

from __future__ import annotations

from flask import Blueprint, current_app, g

from app.auth import ROLE_PRIVILEGES, ROLES, User
from app.context import not_found
from app.protocol import collection, resource
from app.sessions import LOCKOUT_SECONDS, LOCKOUT_THRESHOLD, LOCKOUT_WINDOW

bp = Blueprint("account_service", __name__)

SERVICE = "/redfish/v1/AccountService"
ACCOUNTS = f"{SERVICE}/Accounts"
ROLES_URI = f"{SERVICE}/Roles"


def _visible_users() -> list[User]:
    users = current_app.extensions["fleetfish.users"].all()
    return users if g.user.admin else [u for u in users if u.name == g.user.name]


@bp.get(SERVICE)
def account_service():
    body = {
        "@odata.id": SERVICE,
        "@odata.type": "#AccountService.v1_18_1.AccountService",
        "Id": "AccountService",
        "Name": "Account Service",
        "Description": "Accounts come from the users file; they cannot be changed through Redfish.",
        "ServiceEnabled": True,
        "LocalAccountAuth": "Enabled",
        "AuthFailureLoggingThreshold": LOCKOUT_THRESHOLD,
        "AccountLockoutThreshold": LOCKOUT_THRESHOLD,
        "AccountLockoutDuration": LOCKOUT_SECONDS,
        "AccountLockoutCounterResetAfter": LOCKOUT_WINDOW,
        "Status": {"State": "Enabled", "Health": "OK"},
        "Accounts": {"@odata.id": ACCOUNTS},
        "Roles": {"@odata.id": ROLES_URI},
    }
    return resource(body)


@bp.get(ACCOUNTS)
def accounts():
    members = [f"{ACCOUNTS}/{u.name}" for u in _visible_users()]
    body = collection(
        ACCOUNTS, "#ManagerAccountCollection.ManagerAccountCollection", "Accounts", members
    )
    return resource(body)


@bp.get(f"{ACCOUNTS}/<name>")
def account(name: str):
    user = next((u for u in _visible_users() if u.name == name), None)
    if user is None:
        raise not_found("ManagerAccount", name)
    locked = current_app.extensions["fleetfish.lockout"].locked(user.name)
    body = {
        "@odata.id": f"{ACCOUNTS}/{user.name}",
        "@odata.type": "#ManagerAccount.v1_14_1.ManagerAccount",
        "Id": user.name,
        "Name": f"Account {user.name}",
        "UserName": user.name,
        "RoleId": user.role,
        "Enabled": True,
        "Locked": locked,
        "Password": None,
        "AccountTypes": ["Redfish"],
        "Links": {"Role": {"@odata.id": f"{ROLES_URI}/{user.role}"}},
    }
    return resource(body)


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
