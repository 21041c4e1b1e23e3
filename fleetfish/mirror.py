"""The mirror document: what the API needs to know about one VM, derived from VM and VMI objects.

The watcher builds these from the cluster and stores them in Redis; the API renders Redfish
resources from them without ever calling Kubernetes. Format (all keys always present)::

    {"id": "ns.name", "namespace", "name", "uid", "resourceVersion", "firmwareUUID",
     "runStrategy": "Always|Halted|Manual|RerunOnFailure|Once|WaitAsReceiver",
     "printableStatus", "ready": bool, "paused": bool, "restartRequired": bool,
     "vmi": {"uid", "phase", "created", "secureBoot": bool} | None,
     "bootMode": "UEFI" | "Legacy", "secureBoot": bool, "cpus": int, "memoryMiB": int,
     "cpu": {"sockets", "cores", "threads"}, "maxSockets": int (0: unset),
     "instancetype": bool (the VM takes its CPU and memory from an instancetype),
     "disks": [{"name", "kind": "disk|cdrom|lun", "bus", "bootOrder": int | None,
                "serial": str | None, "sizeBytes": int | None (unknown: containerDisk, or a
                claim not read yet),
                "volume": {"kind": "dataVolume|persistentVolumeClaim|containerDisk|...",
                           "name", "hotpluggable": bool} | None}],
     "interfaces": [{"name", "macAddress", "model", "state": "up|down"}],
     "labels": {...}, "updated": epoch}

The watcher writes a document only when something other than ``resourceVersion`` and
``updated`` changed (``shown_part``): those two then say when it last changed, not the VM's
latest event.
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


def claim_size(pvc: dict) -> int | None:
    """Bytes of a PersistentVolumeClaim: its bound capacity, else its request."""
    spec, status = pvc.get("spec") or {}, pvc.get("status") or {}
    quantity = (status.get("capacity") or {}).get("storage") or (
        (spec.get("resources") or {}).get("requests") or {}
    ).get("storage")
    return quantity_to_bytes(quantity) or None


def _template_sizes(vm: dict) -> dict[str, int]:
    """DataVolume name -> requested bytes, from the VM's own dataVolumeTemplates."""
    sizes = {}
    for template in vm.get("spec", {}).get("dataVolumeTemplates") or []:
        spec = template.get("spec") or {}
        storage = spec.get("storage") or spec.get("pvc") or {}
        size = claim_size({"spec": storage})
        name = (template.get("metadata") or {}).get("name")
        if name and size:
            sizes[name] = size
    return sizes


def claim_names(vm: dict) -> list[str]:
    """PVC names behind the VM's disks and luns (a DataVolume's PVC has its name); CD-ROM media
    are left out: they are no storage of the machine."""
    template = vm.get("spec", {}).get("template", {}).get("spec", {})
    volumes = {v.get("name"): v for v in template.get("volumes", []) or []}
    names = []
    for disk in template.get("domain", {}).get("devices", {}).get("disks", []) or []:
        if "cdrom" in disk:
            continue
        summary = _volume_summary(volumes.get(disk.get("name")))
        if summary and summary["kind"] in ("dataVolume", "persistentVolumeClaim"):
            names.append(summary["name"])
    return names


def _cpu_topology(cpu: dict | None) -> dict:
    """The topology part of a domain's cpu ({} when it sets none, e.g. only a model)."""
    return {k: v for k, v in (cpu or {}).items() if k in ("sockets", "cores", "threads") and v}


def _topology(cpu: dict) -> dict[str, int]:
    return {k: int(cpu.get(k, 1) or 1) for k in ("sockets", "cores", "threads")}


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


def mirror_doc(
    vm: dict,
    vmi: dict | None,
    claims: dict[str, int] | None = None,
    instancetype: dict | None = None,
) -> dict[str, Any]:
    """``claims``: PVC name -> bytes in the VM's namespace, as the watcher last read them;
    ``instancetype``: the spec of the instancetype the VM names, if any."""
    meta = vm.get("metadata", {})
    template = vm.get("spec", {}).get("template", {}).get("spec", {})
    domain = template.get("domain", {})
    devices = domain.get("devices", {})
    volumes = {v.get("name"): v for v in template.get("volumes", []) or []}
    firmware = domain.get("firmware", {}) or {}
    bootloader = firmware.get("bootloader", {}) or {}
    efi = bootloader.get("efi")
    # A VM built from an instancetype has no cpu or memory of its own: its VMI carries what
    # KubeVirt expanded from the instancetype; while it is off, the instancetype says (its
    # vCPUs as sockets, KubeVirt's topology without a preference).
    vmi_domain = ((vmi or {}).get("spec") or {}).get("domain") or {}
    itype = instancetype or {}
    guest_cpus = int((itype.get("cpu") or {}).get("guest") or 0)
    cpu = (
        _cpu_topology(domain.get("cpu"))
        or _cpu_topology(vmi_domain.get("cpu"))
        or ({"sockets": guest_cpus} if guest_cpus else {})
    )
    topology = _topology(cpu)
    memory = (
        (domain.get("memory") or {}).get("guest")
        or ((domain.get("resources") or {}).get("requests") or {}).get("memory")
        or (vmi_domain.get("memory") or {}).get("guest")
        or ((vmi_domain.get("resources") or {}).get("requests") or {}).get("memory")
        or (itype.get("memory") or {}).get("guest")
    )
    sizes = {**_template_sizes(vm), **(claims or {})}
    disks = []
    for disk in devices.get("disks", []) or []:
        kind = next((k for k in ("cdrom", "lun", "disk") if k in disk), "disk")
        volume = _volume_summary(volumes.get(disk.get("name")))
        size = None
        if kind != "cdrom" and volume and volume["kind"] in ("dataVolume", "persistentVolumeClaim"):
            size = sizes.get(volume["name"])
        disks.append(
            {
                "name": disk.get("name", ""),
                "kind": kind,
                "bus": (disk.get(kind) or {}).get("bus", ""),
                "bootOrder": disk.get("bootOrder"),
                "serial": disk.get("serial") or None,
                "sizeBytes": size,
                "volume": volume,
            }
        )
    interfaces = [
        {
            "name": iface.get("name", ""),
            "macAddress": iface.get("macAddress", ""),
            "model": iface.get("model", "virtio"),
            "state": "down" if iface.get("state") == "down" else "up",
        }
        for iface in devices.get("interfaces", []) or []
        # A hot-unplugged interface ("absent") is no longer part of the machine.
        if iface.get("state") != "absent"
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
        "cpus": topology["sockets"] * topology["cores"] * topology["threads"],
        "cpu": topology,
        "maxSockets": int((domain.get("cpu") or {}).get("maxSockets") or 0),
        "instancetype": bool(vm.get("spec", {}).get("instancetype")),
        "memoryMiB": quantity_to_bytes(memory) // 2**20,
        "disks": disks,
        "interfaces": interfaces,
        "labels": meta.get("labels", {}) or {},
        "updated": time.time(),
    }


def storage_disks(doc: dict) -> list[dict]:
    """The disks and luns of a mirror document (no CD-ROMs), the root disk first: the one with
    the lowest bootOrder, else the first listed (what the firmware would boot)."""
    disks = [d for d in doc.get("disks") or [] if d.get("kind") in ("disk", "lun")]
    ordered = sorted((d for d in disks if d.get("bootOrder")), key=lambda d: int(d["bootOrder"]))
    root = ordered[0] if ordered else (disks[0] if disks else None)
    return [root, *(d for d in disks if d is not root)] if root else []


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


# Fields that change with every event of the VM (or with the clock) and that nothing renders.
VOLATILE_FIELDS = ("resourceVersion", "updated")


def shown_part(doc: dict) -> dict:
    """The document without its volatile fields: what a change must touch to be written."""
    return {k: v for k, v in doc.items() if k not in VOLATILE_FIELDS}
