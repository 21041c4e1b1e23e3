"""Managers: one virtual BMC per system, with the same Id, linking to the system's VirtualMedia."""

from __future__ import annotations

import uuid

from flask import Blueprint

from app.context import visible_system, visible_systems
from app.protocol import collection, resource

bp = Blueprint("managers", __name__)

MANAGERS = "/redfish/v1/Managers"
FIRMWARE_VERSION = "fleetfish-0.1.0"


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
        "VirtualMedia": {"@odata.id": f"{uri}/VirtualMedia"},
        "LogServices": {"@odata.id": f"{uri}/LogServices"},
        "Links": {
            "ManagerForServers": [{"@odata.id": f"/redfish/v1/Systems/{sid}"}],
            "ManagerForChassis": [{"@odata.id": f"/redfish/v1/Chassis/{sid}"}],
        },
    }


@bp.get(MANAGERS)
def managers():
    ids = [f"{MANAGERS}/{d['id']}" for d in visible_systems()]
    return resource(collection(MANAGERS, "#ManagerCollection.ManagerCollection", "Managers", ids))


@bp.get(f"{MANAGERS}/<system_id>")
def manager(system_id: str):
    return resource(render_manager(visible_system(system_id)))
