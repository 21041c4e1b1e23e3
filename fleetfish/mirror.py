"""The mirror document: what the API needs to know about one VM, derived from VM and VMI objects.

The watcher builds these from the cluster and stores them in Redis; the API renders Redfish
resources from them without ever calling Kubernetes. Format (all keys always present)::

    {"id": "ns.name", "namespace", "name", "uid", "resourceVersion", "firmwareUUID",
     "runStrategy": "Always|Halted|Manual|RerunOnFailure|Once|WaitAsReceiver",
     "printableStatus", "ready": bool, "paused": bool, "restartRequired": bool,
     "vmi": {"uid", "phase", "created", "secureBoot": bool} | None,
     "bootMode": "UEFI" | "Legacy", "secureBoot": bool, "cpus": int, "memoryMiB": int,
     "disks": [{"name", "kind": "disk|cdrom|lun", "bus", "bootOrder": int | None,
                "volume": {"kind": "dataVolume|persistentVolumeClaim|containerDisk|...",
                           "name", "hotpluggable": bool} | None}],
     "interfaces": [{"name", "macAddress", "model"}],
     "labels": {...}, "updated": epoch}
"""

from __future__ import annotations

import re
import time
from typing import Any

from fleetfish.store import ON_ACTIONS

_QUANTITY = re.compile(r"^([0-9.]+)([A-Za-z]*)$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def system_id(namespace: str, name: str) -> str:
    """Redfish Id of a VM. Namespaces cannot contain dots, so the first dot splits it back."""
    return f"{namespace}.{name}"


def split_system_id(value: str) -> tuple[str, str]:
    namespace, _, name = value.partition(".")
    return namespace, name


def quantity_to_bytes(quantity: str | int | None) -> int:
    if quantity is None:
        return 0
    if isinstance(quantity, int):
        return quantity
    match = _QUANTITY.match(str(quantity).strip())
    if not match:
        return 0
    number, unit = float(match.group(1)), match.group(2)
    factor = _BINARY.get(unit) or _DECIMAL.get(unit)
    return int(number * factor) if factor else 0


def run_strategy(vm: dict) -> str:
    spec = vm.get("spec", {})
    if spec.get("runStrategy"):
        return spec["runStrategy"]
    if "running" in spec:
        return "Always" if spec["running"] else "Halted"
    return "Halted"


def _volume_summary(volume: dict | None) -> dict | None:
    if not volume:
        return None
    for kind in ("dataVolume", "persistentVolumeClaim", "containerDisk", "cloudInitNoCloud"):
        if kind in volume:
            src = volume[kind] or {}
            return {
                "kind": kind,
                "name": src.get("name") or src.get("claimName") or src.get("image") or "",
                "hotpluggable": bool(src.get("hotpluggable")),
            }
    return {"kind": "other", "name": volume.get("name", ""), "hotpluggable": False}


def _condition(obj: dict, kind: str) -> bool:
    for cond in obj.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == kind:
            return str(cond.get("status")) == "True"
    return False


def secure_boot_of(spec: dict) -> bool:
    """EFI secure boot of a VMI spec; KubeVirt's default for ``efi: {}`` is on."""
    bootloader = ((spec.get("domain") or {}).get("firmware") or {}).get("bootloader") or {}
    if "efi" not in bootloader:
        return False
    return bool((bootloader["efi"] or {}).get("secureBoot", True))


def mirror_doc(vm: dict, vmi: dict | None) -> dict[str, Any]:
    meta = vm.get("metadata", {})
    template = vm.get("spec", {}).get("template", {}).get("spec", {})
    domain = template.get("domain", {})
    devices = domain.get("devices", {})
    volumes = {v.get("name"): v for v in template.get("volumes", []) or []}
    firmware = domain.get("firmware", {}) or {}
    bootloader = firmware.get("bootloader", {}) or {}
    efi = bootloader.get("efi")
    cpu = domain.get("cpu", {}) or {}
    cpus = (
        int(cpu.get("cores", 1) or 1)
        * int(cpu.get("sockets", 1) or 1)
        * int(cpu.get("threads", 1) or 1)
    )
    memory = (domain.get("memory", {}) or {}).get("guest") or (
        (domain.get("resources", {}) or {}).get("requests", {}) or {}
    ).get("memory")
    disks = []
    for disk in devices.get("disks", []) or []:
        kind = next((k for k in ("cdrom", "lun", "disk") if k in disk), "disk")
        disks.append(
            {
                "name": disk.get("name", ""),
                "kind": kind,
                "bus": (disk.get(kind) or {}).get("bus", ""),
                "bootOrder": disk.get("bootOrder"),
                "volume": _volume_summary(volumes.get(disk.get("name"))),
            }
        )
    interfaces = [
        {
            "name": iface.get("name", ""),
            "macAddress": iface.get("macAddress", ""),
            "model": iface.get("model", "virtio"),
        }
        for iface in devices.get("interfaces", []) or []
    ]
    status = vm.get("status", {}) or {}
    vmi_summary = None
    if vmi:
        vmi_summary = {
            "uid": vmi.get("metadata", {}).get("uid", ""),
            "phase": vmi.get("status", {}).get("phase", ""),
            "created": vmi.get("metadata", {}).get("creationTimestamp", ""),
            # What the running firmware booted with (the VM spec may have changed since).
            "secureBoot": secure_boot_of(vmi.get("spec", {})),
        }
    return {
        "id": system_id(meta.get("namespace", "default"), meta.get("name", "")),
        "namespace": meta.get("namespace", "default"),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
        "firmwareUUID": firmware.get("uuid") or meta.get("uid", ""),
        "runStrategy": run_strategy(vm),
        "printableStatus": status.get("printableStatus", "Stopped"),
        "ready": bool(status.get("ready")),
        "paused": _condition(vm, "Paused"),
        "restartRequired": _condition(vm, "RestartRequired"),
        "vmi": vmi_summary,
        "bootMode": "UEFI" if efi is not None else "Legacy",
        "secureBoot": secure_boot_of(template),
        "cpus": cpus,
        "memoryMiB": quantity_to_bytes(memory) // 2**20,
        "disks": disks,
        "interfaces": interfaces,
        "labels": meta.get("labels", {}) or {},
        "updated": time.time(),
    }


def power_state(doc: dict, power: dict[str, str]) -> str:
    """Redfish PowerState from the mirror and the deferred/in-flight power hash."""
    if power.get("deferred") in ON_ACTIONS or power.get("inflight") in ON_ACTIONS:
        return "PoweringOn"
    status = doc.get("printableStatus", "")
    strategy = doc.get("runStrategy", "")
    if doc.get("paused") or status == "Paused":
        return "Paused"
    if status in ("Running", "Migrating"):
        # stop sets Halted before the VMI goes: the VM is already on its way down.
        return "PoweringOff" if strategy == "Halted" else "On"
    if status in ("Stopping", "Terminating"):
        return "PoweringOff"
    if status in (
        "Starting",
        "Provisioning",
        "WaitingForVolumeBinding",
        "ErrorUnschedulable",
        "ErrImagePull",
        "ImagePullBackOff",
        "CrashLoopBackOff",
    ):
        return "PoweringOn"
    if strategy == "Always" and status in ("Stopped", ""):
        # start sets Always before KubeVirt creates the VMI and updates the status: a client
        # told Off here would skip the power-off of a VM that is already starting.
        return "PoweringOn"
    return "Off"
