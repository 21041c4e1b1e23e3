"""Managers: one virtual BMC per system, with the same Id: its clock, its Reset, its VirtualMedia."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

from flask import Blueprint, current_app, g

from app import query
from app.context import reads_system, settings, store, visible_system, visible_systems
from app.errors import message
from app.protocol import collection, finalize, json_body, no_content, resource
from app.validate import Param, action_params, patch_object, pointer, raise_if

log = logging.getLogger("fleetfish.api")
bp = Blueprint("managers", __name__)

MANAGERS = "/redfish/v1/Managers"
FIRMWARE_VERSION = "fleetfish-0.1.0"
MANAGER_ALLOW = ("GET", "HEAD", "PATCH")
# Both end the BMC's sessions (see ``reset``); there is no firmware to restart.
MANAGER_RESET_TYPES = ("GracefulRestart", "ForceRestart")
# The service clock is UTC; these spell a zero offset.
UTC_OFFSETS = ("+00:00", "-00:00")
CLOCK_WRITABLE = {"DateTime": Param(str), "DateTimeLocalOffset": Param(str)}


def clock_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def render_manager(doc: dict) -> dict:
    sid = doc["id"]
    uri = f"{MANAGERS}/{sid}"
    base_uuid = doc.get("firmwareUUID") or doc.get("uid") or sid
    return {
        "@odata.id": uri,
        "@odata.type": "#Manager.v1_24_0.Manager",
        "Id": sid,
        "Name": f"fleetfish BMC for {doc.get('name') or sid}",
        "ManagerType": "BMC",
        "UUID": str(uuid.uuid5(uuid.NAMESPACE_URL, f"fleetfish-manager:{base_uuid}")),
        "Model": "fleetfish",
        "FirmwareVersion": FIRMWARE_VERSION,
        "PowerState": "On",
        "Status": {"State": "Enabled", "Health": "OK"},
        "DateTime": clock_now().isoformat(),
        "DateTimeLocalOffset": "+00:00",
        "EthernetInterfaces": {"@odata.id": f"{uri}/EthernetInterfaces"},
        "NetworkProtocol": {"@odata.id": f"{uri}/NetworkProtocol"},
        "VirtualMedia": {"@odata.id": f"{uri}/VirtualMedia"},
        "LogServices": {"@odata.id": f"{uri}/LogServices"},
        "Links": {
            "ManagerForServers": [{"@odata.id": f"/redfish/v1/Systems/{sid}"}],
            "ManagerForChassis": [{"@odata.id": f"/redfish/v1/Chassis/{sid}"}],
        },
        "Actions": {
            "#Manager.Reset": {
                "target": f"{uri}/Actions/Manager.Reset",
                "ResetType@Redfish.AllowableValues": list(MANAGER_RESET_TYPES),
            }
        },
    }


@query.batch(rf"^{MANAGERS}/[^/]+$")
def render_managers(paths: list[str]) -> dict[str, dict]:
    """Managers as their GET renders them, from one read of the mirror (an expanded collection)."""
    wanted = {path.rsplit("/", 1)[-1] for path in paths}
    user = g.user
    docs = store().get_systems([i for i in wanted if user is None or user.scope.allows_id(i)])
    return {
        f"{MANAGERS}/{doc['id']}": finalize(render_manager(doc))
        for doc in docs
        if doc and (user is None or user.scope.allows(doc))
    }


@bp.get(MANAGERS)
def managers():
    ids = [f"{MANAGERS}/{d['id']}" for d in visible_systems()]
    return resource(collection(MANAGERS, "#ManagerCollection.ManagerCollection", "Managers", ids))


@bp.get(f"{MANAGERS}/<system_id>")
@reads_system()
def manager(system_id: str):
    return resource(render_manager(visible_system(system_id)), allow=MANAGER_ALLOW)


def clock_errors(changes: dict) -> list[dict]:
    """The clock is the service's own (UTC, kept by its host): a PATCH that agrees with it
    within the tolerance is accepted and changes nothing; anything else is refused."""
    errors = []
    if "DateTime" in changes:
        value = changes["DateTime"]
        try:
            given = datetime.fromisoformat(value)
        except ValueError:
            given = None
        if given is None or given.tzinfo is None:
            errors.append(
                message("PropertyValueFormatError", [value, "DateTime"], [pointer("DateTime")])
            )
        elif abs((given - clock_now()).total_seconds()) > settings().clock_tolerance:
            errors.append(
                message("PropertyValueOutOfRange", [value, "DateTime"], [pointer("DateTime")])
            )
    offset = changes.get("DateTimeLocalOffset")
    if offset is not None and offset not in UTC_OFFSETS:
        errors.append(
            message(
                "PropertyValueNotInList",
                [offset, "DateTimeLocalOffset"],
                [pointer("DateTimeLocalOffset")],
            )
        )
    return errors


@bp.patch(f"{MANAGERS}/<system_id>")
def patch_manager(system_id: str):
    # No If-Match: nothing here is stored, and DateTime changes the ETag every second.
    doc = visible_system(system_id)
    current = finalize(render_manager(doc))
    body = json_body(allow_empty=False)
    readonly = {k for k in current if k not in CLOCK_WRITABLE}
    changes, errors = patch_object(body, CLOCK_WRITABLE, readonly)
    raise_if(errors + clock_errors(changes))
    return resource(render_manager(doc), allow=MANAGER_ALLOW)


def users_of_only(doc: dict) -> set[str]:
    """Users whose scope is this system alone (among the systems mirrored now)."""
    candidates = [
        u for u in current_app.extensions["fleetfish.users"].all() if not u.scope.unrestricted
    ]
    candidates = [u for u in candidates if u.scope.allows(doc)]
    if not candidates:
        return set()
    others = [d for d in store().get_systems(store().system_ids()) if d and d["id"] != doc["id"]]
    return {u.name for u in candidates if not any(u.scope.allows(d) for d in others)}


@bp.post(f"{MANAGERS}/<system_id>/Actions/Manager.Reset")
def reset(system_id: str):
    """A BMC reset drops the BMC's sessions. The service is shared by every system, so the
    sessions of this BMC are those of users whose scope is this system alone; sessions that
    also serve other systems' BMCs, media and power stay as they are."""
    doc = visible_system(system_id)
    action_params(
        "Manager.Reset",
        json_body(),
        {"ResetType": Param(str, allowed=MANAGER_RESET_TYPES)},
    )
    ended = current_app.extensions["fleetfish.sessions"].delete_of_users(users_of_only(doc))
    log.info("manager reset: %d sessions ended system=%s", len(ended), system_id)
    return no_content(allow=("POST",))
