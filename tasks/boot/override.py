"""Boot override logic: Redfish BootSourceOverride* mapped onto KubeVirt ``bootOrder``/firmware.

KubeVirt has no one-time boot device: the override rewrites the whole set of ``bootOrder``
values in one VM update (duplicates are rejected by the webhook) and remembers the VM's own order
in an annotation the first time. It is written just before each power-on or restart (and on a
VM that is off): a Once override is ended in Redis when the new VMI runs, and the next start
writes the VM's own order back. The order of a running VM is never changed, so fleetfish never
leaves a VM marked RestartRequired.
"""

from __future__ import annotations

import json
from collections.abc import Callable

ANN_ORIGINAL = "fleetfish.io/original-boot-order"


def _devices(vm: dict) -> dict:
    spec = vm.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
    return spec.setdefault("domain", {}).setdefault("devices", {})


def current_order(vm: dict) -> dict[str, dict[str, int]]:
    """``{"disks": {name: order}, "interfaces": {name: order}}`` of devices with a bootOrder."""
    devices = _devices(vm)
    return {
        kind: {
            d["name"]: int(d["bootOrder"]) for d in devices.get(kind) or [] if d.get("bootOrder")
        }
        for kind in ("disks", "interfaces")
    }


def original_order(vm: dict) -> dict[str, dict[str, int]]:
    """The VM's own order: from the annotation once fleetfish changed it, else the current one."""
    raw = ((vm.get("metadata") or {}).get("annotations") or {}).get(ANN_ORIGINAL)
    if raw:
        try:
            saved = json.loads(raw)
            return {
                k: {n: int(o) for n, o in (saved.get(k) or {}).items()}
                for k in ("disks", "interfaces")
            }
        except (ValueError, AttributeError, TypeError):
            pass
    return current_order(vm)


def _root_disk(vm: dict, original: dict) -> str:
    disks = _devices(vm).get("disks") or []
    plain = [d["name"] for d in disks if "cdrom" not in d]
    ranked = sorted((o, n) for n, o in original["disks"].items() if n in plain)
    if ranked:
        return ranked[0][1]
    if plain:
        return plain[0]
    raise ValueError("VM has no hard disk to boot from")


def plan_boot_order(vm: dict, target: str, cdrom_disk: str) -> dict[str, dict[str, int]]:
    """The complete bootOrder set for a Redfish target.

    ``None`` restores the original order. ``Cd`` (``UefiHttp`` too: its image is the CD-ROM),
    ``Hdd`` and ``Pxe`` put the cdrom disk, the root disk or the first interface at 1 and
    renumber the original order after it, so no two devices ever share a value. Devices absent from the result get no bootOrder.
    """
    original = original_order(vm)
    if target in ("", "None"):
        return original
    if target in ("Cd", "UefiHttp"):  # an HTTP boot image is attached as the CD-ROM
        names = {d.get("name") for d in _devices(vm).get("disks") or []}
        if cdrom_disk not in names:
            raise ValueError(f"VM has no disk named {cdrom_disk!r} to boot virtual media from")
        chosen = ("disks", cdrom_disk)
    elif target == "Hdd":
        chosen = ("disks", _root_disk(vm, original))
    elif target == "Pxe":
        interfaces = _devices(vm).get("interfaces") or []
        if not interfaces:
            raise ValueError("VM has no network interface to PXE boot from")
        chosen = ("interfaces", interfaces[0]["name"])
    else:
        raise ValueError(f"unsupported boot target {target!r}")
    ranked = sorted(
        (order, kind, name)
        for kind in ("disks", "interfaces")
        for name, order in original[kind].items()
        if (kind, name) != chosen
    )
    plan: dict[str, dict[str, int]] = {"disks": {}, "interfaces": {}}
    plan[chosen[0]][chosen[1]] = 1
    for index, (_, kind, name) in enumerate(ranked, start=2):
        plan[kind][name] = index
    return plan


def write_order(vm: dict, plan: dict[str, dict[str, int]]) -> None:
    """Set the whole plan on the VM, keeping the annotation consistent with it."""
    annotations = vm.setdefault("metadata", {}).setdefault("annotations", {})
    original = original_order(vm)
    if plan == original:
        annotations.pop(ANN_ORIGINAL, None)
    elif ANN_ORIGINAL not in annotations:
        annotations[ANN_ORIGINAL] = json.dumps(original, sort_keys=True)
    devices = _devices(vm)
    for kind in ("disks", "interfaces"):
        for device in devices.get(kind) or []:
            order = plan[kind].get(device.get("name"))
            if order:
                device["bootOrder"] = order
            else:
                device.pop("bootOrder", None)


def set_boot_mode(vm: dict, mode: str) -> None:
    """UEFI -> ``bootloader.efi`` (secure boot off: it needs SMM), Legacy -> ``bios``."""
    if mode not in ("UEFI", "Legacy"):
        return
    domain = vm["spec"]["template"]["spec"].setdefault("domain", {})
    firmware = domain.setdefault("firmware", {})
    bootloader = firmware.get("bootloader") or {}
    if mode == "UEFI" and "efi" not in bootloader:
        firmware["bootloader"] = {"efi": {"secureBoot": False}}
    elif mode == "Legacy" and "efi" in bootloader:
        firmware["bootloader"] = {"bios": {}}


def set_secure_boot(vm: dict, wanted: str) -> None:
    """``"true"``/``"false"`` (a SecureBoot PATCH) onto ``efi.secureBoot``; nothing otherwise.

    KubeVirt refuses secure boot without the SMM feature, so turning it on enables SMM too;
    turning it off leaves SMM as it is (other things may need it). Written explicitly either
    way: an ``efi: {}`` without the field means secure boot *on* to KubeVirt.
    """
    if wanted not in ("true", "false"):
        return
    domain = vm["spec"]["template"]["spec"].setdefault("domain", {})
    bootloader = domain.setdefault("firmware", {}).get("bootloader") or {}
    if "efi" not in bootloader:
        return  # legacy BIOS: the API refuses secure boot there, nothing to write
    efi = bootloader["efi"] if isinstance(bootloader["efi"], dict) else {}
    efi["secureBoot"] = wanted == "true"
    bootloader["efi"] = efi
    domain["firmware"]["bootloader"] = bootloader
    if wanted == "true":
        domain.setdefault("features", {})["smm"] = {"enabled": True}


def set_max_sockets(vm: dict, wanted: str) -> None:
    """A BIOS ``CpuMaxSockets`` onto ``domain.cpu.maxSockets`` ("0": unset, the cluster's
    default); nothing otherwise. A VM that takes its CPU from an instancetype has no
    ``domain.cpu`` of its own to write (the API refuses the setting there)."""
    if not wanted.isdigit() or (vm.get("spec") or {}).get("instancetype"):
        return
    domain = vm["spec"]["template"]["spec"].setdefault("domain", {})
    cpu = domain.setdefault("cpu", {})
    if int(wanted):
        cpu["maxSockets"] = int(wanted)
    else:
        cpu.pop("maxSockets", None)
        if not cpu:
            domain.pop("cpu")


def effective_target(override: dict[str, str]) -> str:
    """The target to apply now: None when the override is Disabled or absent."""
    if override.get("enabled", "Disabled") in ("", "Disabled"):
        return "None"
    return override.get("target") or "None"


def boot_mutator(override: dict[str, str], cdrom_disk: str) -> Callable[[dict], None]:
    """A ``KubeVirt.update_vm`` mutator applying a stored override (``Store.get_boot``)."""

    def mutate(vm: dict) -> None:
        write_order(vm, plan_boot_order(vm, effective_target(override), cdrom_disk))
        set_boot_mode(vm, override.get("mode", ""))
        set_secure_boot(vm, override.get("secure_boot", ""))
        set_max_sockets(vm, override.get("max_sockets", ""))

    return mutate
