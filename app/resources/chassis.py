"""Chassis: one virtual enclosure per system, same Id, linking the system and its manager."""

from __future__ import annotations

from flask import Blueprint

from app.context import reads_system, visible_system_with, visible_systems
from app.protocol import collection, resource
from fleetfish.mirror import power_state

bp = Blueprint("chassis", __name__)

CHASSIS = "/redfish/v1/Chassis"


def render_chassis(doc: dict, power: dict[str, str]) -> dict:
    sid = doc["id"]
    return {
        "@odata.id": f"{CHASSIS}/{sid}",
        "@odata.type": "#Chassis.v1_28_0.Chassis",
        "Id": sid,
        "Name": f"Chassis of {doc.get('name') or sid}",
        # No enum value for a virtual enclosure exists; "Other" is the honest choice.
        "ChassisType": "Other",
        "Manufacturer": "KubeVirt",
        "UUID": doc.get("firmwareUUID") or None,
        "PowerState": power_state(doc, power),
        "Status": {"State": "Enabled", "Health": "OK"},
        "Drives": {"@odata.id": f"{CHASSIS}/{sid}/Drives"},
        "Links": {
            "ComputerSystems": [{"@odata.id": f"/redfish/v1/Systems/{sid}"}],
            "ManagedBy": [{"@odata.id": f"/redfish/v1/Managers/{sid}"}],
        },
    }


@bp.get(CHASSIS)
def chassis_collection():
    ids = [f"{CHASSIS}/{d['id']}" for d in visible_systems()]
    return resource(collection(CHASSIS, "#ChassisCollection.ChassisCollection", "Chassis", ids))


@bp.get(f"{CHASSIS}/<system_id>")
@reads_system("power")
def chassis(system_id: str):
    doc, power = visible_system_with(system_id, "power")
    return resource(render_chassis(doc, power))
