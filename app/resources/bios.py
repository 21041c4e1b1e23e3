"""Bios of a ComputerSystem: current attributes, the pending Settings object and ResetBios.

Settings take effect at the next power-on or restart (``OnReset``): a PATCH records them in the
boot hash and the worker writes them onto the VM just before it starts the VM, never onto a
running VM (app/bios_attributes.py says which VM setting each attribute is).
"""

from __future__ import annotations

import logging

from flask import Blueprint

from app import bios_attributes as attrs
from app.context import reads_system, store, visible_system_with
from app.errors import RedfishError, message
from app.protocol import finalize, if_match_ok, json_body, no_content, resource
from app.validate import Param, action_params, patch_object, pointer, raise_if, show

log = logging.getLogger("fleetfish.api")
bp = Blueprint("bios", __name__)

BIOS = "/redfish/v1/Systems/<system_id>/Bios"
APPLY_TIMES = ("OnReset",)
BIOS_ALLOW = ("GET", "HEAD")
SETTINGS_ALLOW = ("GET", "HEAD", "PATCH")


def bios_uri(system_id: str) -> str:
    return f"/redfish/v1/Systems/{system_id}/Bios"


def render_bios(doc: dict) -> dict:
    uri = bios_uri(doc["id"])
    return {
        "@odata.id": uri,
        "@odata.type": "#Bios.v1_2_3.Bios",
        "Id": "Bios",
        "Name": "BIOS Configuration Current Settings",
        "Description": "Firmware settings of the KubeVirt VM, as its spec holds them now",
        "AttributeRegistry": attrs.REGISTRY_ID,
        "Attributes": attrs.current(doc),
        "@Redfish.Settings": {
            "@odata.type": "#Settings.v1_4_0.Settings",
            "SettingsObject": {"@odata.id": f"{uri}/Settings"},
            "SupportedApplyTimes": list(APPLY_TIMES),
        },
        # No ChangePassword: KubeVirt's firmware has no setup password.
        "Actions": {"#Bios.ResetBios": {"target": f"{uri}/Actions/Bios.ResetBios"}},
    }


def render_settings(doc: dict, boot: dict[str, str]) -> dict:
    return {
        "@odata.id": f"{bios_uri(doc['id'])}/Settings",
        "@odata.type": "#Bios.v1_2_3.Bios",
        "Id": "Settings",
        "Name": "BIOS Configuration Pending Settings",
        "Description": "Settings written to the VM at its next power-on or restart",
        "AttributeRegistry": attrs.REGISTRY_ID,
        "Attributes": attrs.pending(doc, boot),
        "@Redfish.SettingsApplyTime": {
            "@odata.type": "#Settings.v1_4_0.PreferredApplyTime",
            "ApplyTime": "OnReset",
            "ApplyTime@Redfish.AllowableValues": list(APPLY_TIMES),
        },
    }


@bp.get(BIOS)
@reads_system()
def bios(system_id: str):
    (doc,) = visible_system_with(system_id)
    return resource(render_bios(doc), allow=BIOS_ALLOW)


@bp.get(f"{BIOS}/Settings")
@reads_system("boot")
def bios_settings(system_id: str):
    doc, boot = visible_system_with(system_id, "boot")
    return resource(render_settings(doc, boot), allow=SETTINGS_ALLOW)


def _apply_time_errors(value: object) -> list[dict]:
    name = "@Redfish.SettingsApplyTime"
    if not isinstance(value, dict):
        return [message("PropertyValueTypeError", [show(value), name], [pointer(name)])]
    errors = []
    for key, item in value.items():
        path = pointer(name, key)
        if key == "ApplyTime":
            if not isinstance(item, str):
                errors.append(message("PropertyValueTypeError", [show(item), key], [path]))
            elif item not in APPLY_TIMES:
                errors.append(message("PropertyValueNotInList", [item, key], [path]))
        elif key == "@odata.type":
            if not isinstance(item, str):
                errors.append(message("PropertyValueTypeError", [show(item), key], [path]))
        else:
            errors.append(message("PropertyUnknown", [f"{name}/{key}"], [path]))
    return errors


def _requested(body: dict, current: dict) -> dict:
    """The attributes a Settings PATCH asks for; 400 listing every problem, nothing kept."""
    errors = []
    if "@Redfish.SettingsApplyTime" in body:
        errors += _apply_time_errors(body["@Redfish.SettingsApplyTime"])
    rest = {k: v for k, v in body.items() if k != "@Redfish.SettingsApplyTime"}
    readonly = {k for k in current if k != "Attributes"}
    top, top_errors = patch_object(rest, {"Attributes": Param(dict)}, readonly)
    errors += top_errors
    changes: dict = {}
    if "Attributes" in top:
        changes, attr_errors = patch_object(
            top["Attributes"], attrs.WRITABLE, attrs.READ_ONLY, prefix="Attributes/"
        )
        errors += attr_errors
        for name, value in changes.items():
            spec = attrs.BY_NAME[name]
            low, high = spec.lower, spec.upper
            if spec.kind == "Integer" and (
                (low is not None and value < low) or (high is not None and value > high)
            ):
                errors.append(
                    message(
                        "PropertyValueOutOfRange",
                        [value, f"Attributes/{name}"],
                        [pointer("Attributes", name)],
                    )
                )
    raise_if(errors)
    return changes


def _conflict(attribute: str, other: str) -> RedfishError:
    # 409: each value is fine on its own; together with what is stored the VM would refuse it.
    return RedfishError(
        409,
        "PropertyValueConflict",
        [f"Attributes/{attribute}", other],
        [pointer("Attributes", attribute)],
    )


def check_conflicts(doc: dict, boot: dict[str, str], changes: dict) -> None:
    """The settings the next boot would write, with ``changes`` in, must be ones KubeVirt takes."""
    after = {**attrs.wanted(doc, boot), **changes}
    if after["SecureBoot"] == "Enabled" and after["BootMode"] == "Legacy":
        if "SecureBoot" in changes:
            raise _conflict("SecureBoot", "Attributes/BootMode")
        raise _conflict("BootMode", "Attributes/SecureBoot")
    if "CpuMaxSockets" in changes:
        if doc.get("instancetype"):
            raise _conflict("CpuMaxSockets", "spec.instancetype")
        most = changes["CpuMaxSockets"]
        if most and most < after["ProcessorSockets"]:
            raise _conflict("CpuMaxSockets", "Attributes/ProcessorSockets")


@bp.patch(f"{BIOS}/Settings")
def patch_bios_settings(system_id: str):
    doc, boot = visible_system_with(system_id, "boot")
    current = finalize(render_settings(doc, boot))
    changes = _requested(json_body(allow_empty=False), current)
    if not if_match_ok(current["@odata.etag"]):
        raise RedfishError(412, "PreconditionFailed")
    if changes:

        def unchanged(stored: dict | None, power: dict, stored_boot: dict) -> bool:
            # The If-Match and the conflicts again, on what is stored at the instant of the write.
            if stored is None or not if_match_ok(
                finalize(render_settings(stored, stored_boot))["@odata.etag"]
            ):
                return False
            check_conflicts(stored, stored_boot, changes)
            return True

        gen = store().set_boot_if(system_id, unchanged, **attrs.boot_fields(changes))
        if gen is None:
            raise RedfishError(412, "PreconditionFailed")
        log.info("bios settings %s gen=%s system=%s", changes, gen, system_id)
    doc, boot = visible_system_with(system_id, "boot")
    return resource(render_settings(doc, boot), allow=SETTINGS_ALLOW)


@bp.post(f"{BIOS}/Actions/Bios.ResetBios")
def reset_bios(system_id: str):
    """Every writable attribute back to its default at the next power-on or restart."""
    visible_system_with(system_id)
    action_params("Bios.ResetBios", json_body(), {})  # sushy posts no body, or {}
    gen = store().set_boot_if(
        system_id,
        lambda stored, power, boot: stored is not None,
        **attrs.boot_fields(attrs.DEFAULTS),
    )
    if gen is None:
        raise RedfishError(404, "ResourceNotFound", ["ComputerSystem", system_id])
    log.info("bios reset to defaults gen=%s system=%s", gen, system_id)
    return no_content()


@bp.post(f"{BIOS}/Actions/Bios.ChangePassword")
def change_password(system_id: str):
    visible_system_with(system_id)
    # KubeVirt's firmware has no setup or power-on password to change.
    raise RedfishError(400, "ActionNotSupported", ["Bios.ChangePassword"])
