"""Inventory below a ComputerSystem (Processors, Memory, SimpleStorage, Storage, EthernetInterfaces):
what Ironic's out-of-band inspection reads. The disks' own resources are in ``storage``."""

from __future__ import annotations

from flask import Blueprint

from app.context import not_found, reads_system, visible_system
from app.protocol import collection, resource
from app.resources.storage import STORAGE_ID, disk_model, storage_members
from fleetfish.mirror import storage_disks

bp = Blueprint("system_parts", __name__)

BASE = "/redfish/v1/Systems/<system_id>"
OK = {"State": "Enabled", "Health": "OK"}


def _uri(system_id: str, part: str) -> str:
    return f"/redfish/v1/Systems/{system_id}/{part}"


def _topology(doc: dict) -> dict[str, int]:
    cpu = doc.get("cpu") or {"sockets": 1, "cores": int(doc.get("cpus") or 1), "threads": 1}
    return {k: int(cpu.get(k) or 1) for k in ("sockets", "cores", "threads")}


def _processors(doc: dict) -> dict[str, dict]:
    """One Processor per virtual socket: sushy adds up TotalThreads into Ironic's ``cpus``."""
    topo = _topology(doc)
    return {
        f"CPU{n}": {
            "@odata.type": "#Processor.v1_22_0.Processor",
            "Id": f"CPU{n}",
            "Name": f"Virtual CPU socket {n}",
            "Socket": str(n - 1),
            "ProcessorType": "CPU",
            "ProcessorArchitecture": "x86",
            "InstructionSet": "x86-64",
            "Manufacturer": "KubeVirt",
            "TotalCores": topo["cores"],
            "TotalEnabledCores": topo["cores"],
            "TotalThreads": topo["cores"] * topo["threads"],
            "Status": OK,
        }
        for n in range(1, topo["sockets"] + 1)
    }


def processor_summary(doc: dict) -> dict:
    """ComputerSystem.ProcessorSummary; Count is the vCPU count, as sushy-tools reports it."""
    topo = _topology(doc)
    threads = topo["sockets"] * topo["cores"] * topo["threads"]
    return {
        "Count": threads,
        "CoreCount": topo["sockets"] * topo["cores"],
        "LogicalProcessorCount": threads,
        "ThreadingEnabled": topo["threads"] > 1,
        "Model": "KubeVirt vCPU",
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


def _simple_storage(doc: dict) -> dict[str, dict]:
    devices = []
    for disk in storage_disks(doc):
        device = {"Name": disk.get("name") or "disk", "Model": disk_model(disk), "Status": OK}
        if disk.get("sizeBytes"):
            device["CapacityBytes"] = int(disk["sizeBytes"])
        devices.append(device)
    return {
        STORAGE_ID: {
            "@odata.type": "#SimpleStorage.v1_3_2.SimpleStorage",
            "Id": "1",
            "Name": "Virtual disk controller",
            "Devices": devices,
            "Status": OK,
        }
    }


def _interfaces(doc: dict) -> dict[str, dict]:
    running = ((doc.get("vmi") or {}).get("phase")) == "Running"
    parts = {}
    for iface in doc.get("interfaces") or []:
        name = iface.get("name") or f"nic{len(parts)}"
        mac = (iface.get("macAddress") or "").lower() or None
        # A powered-off machine's NIC has no link; an interface set "down" in KubeVirt neither.
        up = running and iface.get("state", "up") == "up"
        parts[name] = {
            "@odata.type": "#EthernetInterface.v1_12_4.EthernetInterface",
            "Id": name,
            "Name": f"Interface {name}",
            "Description": f"KubeVirt interface {name} ({iface.get('model') or 'virtio'})",
            "MACAddress": mac,
            "PermanentMACAddress": mac,
            "InterfaceEnabled": True,
            "LinkStatus": "LinkUp" if up else "LinkDown",
            "Status": OK,
        }
    return parts


PARTS = {
    "Processors": (_processors, "#ProcessorCollection.ProcessorCollection", "Processors"),
    "Memory": (_memory, "#MemoryCollection.MemoryCollection", "Memory"),
    "SimpleStorage": (
        _simple_storage,
        "#SimpleStorageCollection.SimpleStorageCollection",
        "Simple Storage",
    ),
    "Storage": (storage_members, "#StorageCollection.StorageCollection", "Storage"),
    "EthernetInterfaces": (
        _interfaces,
        "#EthernetInterfaceCollection.EthernetInterfaceCollection",
        "Ethernet Interfaces",
    ),
}


def _members(system_id: str, part: str) -> dict[str, dict]:
    build = PARTS[part][0]
    return build(visible_system(system_id))


@reads_system()
def part_collection(system_id: str, part: str):
    uri = _uri(system_id, part)
    members = [f"{uri}/{m}" for m in _members(system_id, part)]
    return resource(collection(uri, PARTS[part][1], PARTS[part][2], members))


@reads_system()
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
