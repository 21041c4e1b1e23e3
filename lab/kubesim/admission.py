"""The validating webhooks of KubeVirt and CDI, reduced to the rules the lab depends on."""

from __future__ import annotations

from lab.kubesim import errors
from lab.kubesim.kinds import DV, VM

VM_WEBHOOK = "virtualmachine-validator.kubevirt.io"
DV_WEBHOOK = "datavolume-validate.cdi.kubevirt.io"
RUN_STRATEGIES = ("Always", "Halted", "Manual", "RerunOnFailure", "Once", "WaitAsReceiver")
CDROM_BUSES = ("sata", "scsi")


def validate_vm(vm: dict, creating: bool) -> None:
    spec = vm.get("spec") or {}
    name = vm["metadata"].get("name", "")
    causes = []
    has_running = spec.get("running") is not None
    has_strategy = spec.get("runStrategy") is not None
    if has_running and has_strategy:
        causes.append(
            errors.cause("Running and RunStrategy are mutually exclusive", "spec.running")
        )
    elif creating and not has_running and not has_strategy:
        causes.append(errors.cause("RunStrategy must be specified", "spec.runStrategy"))
    if has_strategy and spec["runStrategy"] not in RUN_STRATEGIES:
        causes.append(
            errors.cause(f"Invalid RunStrategy ({spec['runStrategy']})", "spec.runStrategy")
        )
    template = (spec.get("template") or {}).get("spec")
    if template is None:
        causes.append(
            errors.cause("missing virtual machine template.", "spec.template", "FieldValueRequired")
        )
    else:
        causes += vmi_spec_causes(template, "spec.template.spec")
        cpu = ((template.get("domain") or {}).get("cpu")) or {}
        if spec.get("instancetype") and cpu:
            # The instancetype owns the CPU: a VM naming one may not set its own.
            causes.append(
                errors.cause(
                    "VM field(s) spec.template.spec.domain.cpu conflicts with selected "
                    "instance type",
                    "spec.template.spec.domain.cpu",
                )
            )
    if causes:
        raise errors.invalid(VM, name, causes, webhook=VM_WEBHOOK)


def vmi_spec_causes(spec: dict, field: str) -> list[dict]:
    devices = (spec.get("domain") or {}).get("devices") or {}
    disks = devices.get("disks") or []
    interfaces = devices.get("interfaces") or []
    volumes = {v.get("name") for v in spec.get("volumes") or []}
    causes: list[dict] = []
    seen_orders: set[int] = set()
    disks_field = f"{field}.domain.devices.disks"
    for idx, disk in enumerate(disks):
        dname = disk.get("name", "")
        cdrom = disk.get("cdrom")
        if cdrom is not None and cdrom.get("bus", "sata") not in CDROM_BUSES:
            causes.append(
                errors.cause(
                    f"Bus type {cdrom.get('bus')} is invalid for CD-ROM device",
                    f"{disks_field}[{idx}].cdrom.bus",
                )
            )
        # an empty ejectable CD-ROM is the one disk allowed to have no volume
        if dname not in volumes and cdrom is None:
            causes.append(
                errors.cause(
                    f"{disks_field}[{idx}].Name '{dname}' not found.", f"{disks_field}[{idx}].name"
                )
            )
        order = disk.get("bootOrder")
        if order is not None:
            if not isinstance(order, int) or order < 1:
                causes.append(
                    errors.cause(
                        f"{disks_field}[{idx}] must have a boot order > 0, if supplied",
                        f"{disks_field}[{idx}].bootOrder",
                    )
                )
            elif order in seen_orders:
                causes.append(
                    errors.cause(
                        f"Boot order for {disks_field}[{idx}].bootOrder already set for a different device.",
                        f"{disks_field}[{idx}].bootOrder",
                    )
                )
            seen_orders.add(order)
    ifaces_field = f"{field}.domain.devices.interfaces"
    for idx, iface in enumerate(interfaces):
        order = iface.get("bootOrder")
        if order is None:
            continue
        if order in seen_orders:
            causes.append(
                errors.cause(
                    f"Boot order for {ifaces_field}[{idx}].bootOrder already set for a different device.",
                    f"{ifaces_field}[{idx}].bootOrder",
                )
            )
        seen_orders.add(order)
    causes += firmware_causes(spec.get("domain") or {}, f"{field}.domain")
    causes += cpu_causes(spec.get("domain") or {}, f"{field}.domain")
    names = [v.get("name") for v in spec.get("volumes") or []]
    for idx, vname in enumerate(names):
        if names.index(vname) != idx:
            causes.append(
                errors.cause(
                    f"{field}.volumes[{idx}].name '{vname}' duplicate",
                    f"{field}.volumes[{idx}].name",
                )
            )
    return causes


def firmware_causes(domain: dict, field: str) -> list[dict]:
    """EFI secure boot needs the SMM feature (``efi: {}`` means secure boot on)."""
    bootloader = (domain.get("firmware") or {}).get("bootloader") or {}
    if "efi" not in bootloader or not (bootloader["efi"] or {}).get("secureBoot", True):
        return []
    smm = (domain.get("features") or {}).get("smm")
    if smm is not None and (smm or {}).get("enabled", True):
        return []
    efi_field = f"{field}.firmware.bootloader.efi.secureBoot"
    return [
        errors.cause(
            f"{efi_field} has EFI SecureBoot enabled. SecureBoot requires SMM, "
            "which is currently disabled.",
            efi_field,
        )
    ]


def cpu_causes(domain: dict, field: str) -> list[dict]:
    """CPU hot-plug: the sockets a VM starts with cannot exceed its ``maxSockets``."""
    cpu = domain.get("cpu") or {}
    sockets, most = cpu.get("sockets") or 0, cpu.get("maxSockets") or 0
    causes = []
    for name, value in (("sockets", sockets), ("maxSockets", most)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            causes.append(
                errors.cause(
                    f"{field}.cpu.{name} must be a non-negative integer", f"{field}.cpu.{name}"
                )
            )
    if not causes and sockets and most and sockets > most:
        causes.append(
            errors.cause(
                "Number of sockets in CPU topology is greater than the maximum sockets allowed",
                f"{field}.cpu.sockets",
            )
        )
    return causes


def validate_dv(dv: dict) -> None:
    spec = dv.get("spec") or {}
    name = dv["metadata"].get("name", "")
    source = spec.get("source")
    causes = []
    if not source and not spec.get("sourceRef"):
        causes.append(
            errors.cause(
                "Data volume should have either Source, SourceRef, or be externally populated",
                "spec",
            )
        )
    elif source and "http" in source and not (source["http"] or {}).get("url"):
        causes.append(
            errors.cause("source URL is empty", "spec.source.http.url", "FieldValueRequired")
        )
    if not spec.get("storage") and not spec.get("pvc"):
        causes.append(errors.cause("Missing Data volume PVC", "spec", "FieldValueRequired"))
    if causes:
        raise errors.invalid(DV, name, causes, webhook=DV_WEBHOOK)
