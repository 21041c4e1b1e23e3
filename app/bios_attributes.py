"""The BIOS attributes of a system: each one a KubeVirt VM setting, its registry entry and its store.

Current values are read from the VM spec (the mirror document); requested values live in the
boot hash (``ff:boot:{id}``) next to the boot override, in the very fields the Boot and
SecureBoot resources write, so each setting has one source of truth. The worker writes them onto
the VM just before each power-on or restart (workers/boot.py ``boot_mutator``); a value that
differs from the VM spec is pending until then.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.resources.secure_boot import boot_mode_wanted, secure_boot_wanted
from app.validate import Param

REGISTRY = "FleetfishBios"
REGISTRY_VERSION = "1.0.0"
REGISTRY_ID = f"{REGISTRY}.{REGISTRY_VERSION}"
# The most CPU sockets a VM may be given room for: fleetfish's cap, far above what a node
# of a bare-metal-like fleet uses.
MAX_SOCKETS_CAP = 64


@dataclass(frozen=True)
class Attribute:
    name: str
    kind: str  # AttributeRegistry Type: Enumeration or Integer
    display: str
    help: str
    default: str | int | None
    values: tuple[str, ...] = ()
    lower: int | None = None
    upper: int | None = None
    read_only: bool = False


ATTRIBUTES = (
    Attribute(
        "BootMode",
        "Enumeration",
        "Boot mode",
        "Firmware of the VM: UEFI (KubeVirt bootloader efi) or Legacy (bootloader bios). The same "
        "setting as Boot/BootSourceOverrideMode.",
        "UEFI",
        values=("UEFI", "Legacy"),
    ),
    Attribute(
        "SecureBoot",
        "Enumeration",
        "UEFI secure boot",
        "EFI secure boot of the VM (with the SMM feature); needs BootMode UEFI. The same setting "
        "as SecureBoot/SecureBootEnable.",
        "Disabled",
        values=("Enabled", "Disabled"),
    ),
    Attribute(
        "CpuMaxSockets",
        "Integer",
        "CPU hot-plug limit (sockets)",
        "spec.template.spec.domain.cpu.maxSockets: the most sockets CPU hot-plug may grow the "
        "VM to; 0 leaves it to the cluster's default. Not below ProcessorSockets; not settable "
        "on a VM that takes its CPU from an instancetype.",
        0,
        lower=0,
        upper=MAX_SOCKETS_CAP,
    ),
    Attribute(
        "ProcessorSockets",
        "Integer",
        "CPU sockets",
        "spec.template.spec.domain.cpu.sockets: the sockets the VM starts with.",
        None,
        lower=1,
        read_only=True,
    ),
)
BY_NAME = {a.name: a for a in ATTRIBUTES}
WRITABLE = {
    a.name: Param(str if a.kind == "Enumeration" else int, allowed=a.values)
    for a in ATTRIBUTES
    if not a.read_only
}
READ_ONLY = {a.name for a in ATTRIBUTES if a.read_only}
DEFAULTS = {a.name: a.default for a in ATTRIBUTES if not a.read_only}


def current(doc: dict) -> dict:
    """What the VM spec says now (what the next boot would use without pending settings)."""
    return {
        "BootMode": doc.get("bootMode") or "UEFI",
        "SecureBoot": "Enabled" if doc.get("secureBoot") else "Disabled",
        "CpuMaxSockets": int(doc.get("maxSockets") or 0),
        "ProcessorSockets": int((doc.get("cpu") or {}).get("sockets") or 1),
    }


def wanted(doc: dict, boot: dict[str, str]) -> dict:
    """The values the next power-on or restart writes: the requested ones over the current."""
    values = current(doc)
    values["BootMode"] = boot_mode_wanted(doc, boot)
    values["SecureBoot"] = "Enabled" if secure_boot_wanted(doc, boot) else "Disabled"
    if (boot.get("max_sockets") or "").isdigit():
        values["CpuMaxSockets"] = int(boot["max_sockets"])
    return values


def pending(doc: dict, boot: dict[str, str]) -> dict:
    now = current(doc)
    return {k: v for k, v in wanted(doc, boot).items() if v != now[k]}


def boot_fields(changes: dict) -> dict[str, str]:
    """Attribute values as the boot hash stores them (the fields the worker applies)."""
    fields = {}
    if "BootMode" in changes:
        fields["mode"] = changes["BootMode"]
    if "SecureBoot" in changes:
        fields["secure_boot"] = "true" if changes["SecureBoot"] == "Enabled" else "false"
    if "CpuMaxSockets" in changes:
        fields["max_sockets"] = str(changes["CpuMaxSockets"])
    return fields


def registry_entry(attribute: Attribute) -> dict:
    entry: dict = {
        "AttributeName": attribute.name,
        "DisplayName": attribute.display,
        "HelpText": attribute.help,
        "Type": attribute.kind,
        "ReadOnly": attribute.read_only,
        "ResetRequired": not attribute.read_only,
        "Immutable": False,
        "IsSystemUniqueProperty": False,
    }
    if attribute.default is not None:
        entry["DefaultValue"] = attribute.default
    if attribute.values:
        entry["Value"] = [{"ValueName": v, "ValueDisplayName": v} for v in attribute.values]
    if attribute.lower is not None:
        entry["LowerBound"] = attribute.lower
    if attribute.upper is not None:
        entry["UpperBound"] = attribute.upper
    if attribute.kind == "Integer":
        entry["ScalarIncrement"] = 1
    return entry


def attribute_registry(uri: str) -> dict:
    """The AttributeRegistry resource describing every attribute above."""
    return {
        "@odata.id": uri,
        "@odata.type": "#AttributeRegistry.v1_4_0.AttributeRegistry",
        "Id": REGISTRY_ID,
        "Name": "fleetfish BIOS Attribute Registry",
        "Description": "BIOS attributes of KubeVirt VirtualMachines served by fleetfish",
        "Language": "en",
        "OwningEntity": "fleetfish",
        "RegistryVersion": REGISTRY_VERSION,
        "SupportedSystems": [{"ProductName": "KubeVirt VirtualMachine", "SystemId": "KubeVirt"}],
        "RegistryEntries": {"Attributes": [registry_entry(a) for a in ATTRIBUTES]},
    }
