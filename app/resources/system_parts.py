"""Inventory below a ComputerSystem (Processors, Memory, SimpleStorage, EthernetInterfaces) for inspection."""

from __future__ import annotations

from flask import Blueprint

from app.context import not_found, visible_system
from app.protocol import collection, resource

bp = Blueprint("system_parts", __name__)

BASE = "/redfish/v1/Systems/<system_id>"
OK = {"State": "Enabled", "Health": "OK"}


def _uri(system_id: str, part: str) -> str:
    return f"/redfish/v1/Systems/{system_id}/{part}"


def _processors(doc: dict) -> dict[str, dict]:
    cpus = int(doc.get("cpus") or 0)
    return {
        "CPU1": {
            "@odata.type": "#Processor.v1_22_0.Processor",
            "Id": "CPU1",
            "Name": "Virtual CPU",
            "ProcessorType": "CPU",
            "ProcessorArchitecture": "x86",
            "InstructionSet": "x86-64",
            "Manufacturer": "KubeVirt",
            "TotalCores": cpus,
            "TotalThreads": cpus,
            "Status": OK,
        }
    }


def _memory(doc: dict) -> dict[str, dict]:
    return {
        "DIMM1": {
            "@odata.type": "#Memory.v1_23_0.Memory",
            "Id": "DIMM1",
            "Name": "Guest memory",
            "MemoryType": "DRAM",
            "CapacityMiB": int(doc.get("memoryMiB") or 0),
            "Status": OK,
        }
    }


def _storage(doc: dict) -> dict[str, dict]:
    devices = [
        {"Name": disk.get("name") or "disk", "Status": OK}
        for disk in doc.get("disks") or []
        if disk.get("kind") in ("disk", "lun")
    ]
    return {
        "1": {
            "@odata.type": "#SimpleStorage.v1_3_2.SimpleStorage",
            "Id": "1",
            "Name": "Virtual disk controller",
            "Devices": devices,
            "Status": OK,
        }
    }


def _interfaces(doc: dict) -> dict[str, dict]:
    parts = {}
    for iface in doc.get("interfaces") or []:
        name = iface.get("name") or f"nic{len(parts)}"
        mac = (iface.get("macAddress") or "").lower() or None
        parts[name] = {
            "@odata.type": "#EthernetInterface.v1_12_4.EthernetInterface",
            "Id": name,
            "Name": f"Interface {name}",
            "MACAddress": mac,
            "PermanentMACAddress": mac,
            "InterfaceEnabled": True,
            "Status": OK,
        }
    return parts


PARTS = {
    "Processors": (_processors, "#ProcessorCollection.ProcessorCollection", "Processors"),
    "Memory": (_memory, "#MemoryCollection.MemoryCollection", "Memory"),
    "SimpleStorage": (
        _storage,
        "#SimpleStorageCollection.SimpleStorageCollection",
        "Simple Storage",
    ),
    "EthernetInterfaces": (
        _interfaces,
        "#EthernetInterfaceCollection.EthernetInterfaceCollection",
        "Ethernet Interfaces",
    ),
}


def _members(system_id: str, part: str) -> dict[str, dict]:
    build = PARTS[part][0]
    return build(visible_system(system_id))


def part_collection(system_id: str, part: str):
    uri = _uri(system_id, part)
    members = [f"{uri}/{m}" for m in _members(system_id, part)]
    return resource(collection(uri, PARTS[part][1], PARTS[part][2], members))


def part_member(system_id: str, part: str, member_id: str):
    members = _members(system_id, part)
    if member_id not in members:
        raise not_found(part, member_id)
    return resource({"@odata.id": f"{_uri(system_id, part)}/{member_id}", **members[member_id]})


for _part in PARTS:
    bp.add_url_rule(
        f"{BASE}/{_part}",
        f"{_part}_collection",
        part_collection,
        defaults={"part": _part},
        methods=["GET"],
    )
    bp.add_url_rule(
        f"{BASE}/{_part}/<member_id>",
        f"{_part}_member",
        part_member,
        defaults={"part": _part},
        methods=["GET"],
    )
