"""ComputerSystem: the Systems collection, one system per mirrored VM, PATCH Boot and Reset."""

from __future__ import annotations

import logging

from flask import Blueprint, current_app

from app import dispatch, http_boot, query
from app.context import (
    celery,
    events,
    reads_system,
    settings,
    store,
    visible_system,
    visible_system_with,
    visible_systems,
    visible_systems_with,
)
from app.errors import RedfishError, message
from app.image_url import redact
from app.protocol import collection, finalize, if_match_ok, json_body, resource
from app.resources.secure_boot import secure_boot_wanted
from app.resources.system_parts import processor_summary
from app.resources.task_service import accepted
from app.validate import Param, action_params, patch_object, raise_if, show
from fleetfish import wire
from fleetfish.mirror import power_state
from fleetfish.store import RESET_TYPES

log = logging.getLogger("fleetfish.api")
bp = Blueprint("systems", __name__)

SYSTEMS = "/redfish/v1/Systems"
BOOT_TARGETS = ("None", "Pxe", "Hdd", "Cd", "UefiHttp")
BOOT_ENABLED = ("Disabled", "Once", "Continuous")
BOOT_MODES = ("UEFI", "Legacy")
# Power states in which the power button shuts the system down; in the others it powers on.
BUTTON_TURNS_OFF = ("On", "PoweringOn", "Paused")
SYSTEM_ALLOW = ("GET", "HEAD", "PATCH")

BOOT_WRITABLE = {
    "BootSourceOverrideTarget": Param(str, allowed=BOOT_TARGETS),
    "BootSourceOverrideEnabled": Param(str, allowed=BOOT_ENABLED),
    "BootSourceOverrideMode": Param(str, allowed=BOOT_MODES),
    # With UefiHttp: the image to boot (app/http_boot.py). Ironic sends null alongside Cd.
    "HttpBootUri": Param(str, nullable=True),
}


def system_uri(system_id: str) -> str:
    return f"{SYSTEMS}/{system_id}"


def render_boot(doc: dict, boot: dict[str, str]) -> dict:
    return {
        "BootSourceOverrideEnabled": boot.get("enabled") or "Disabled",
        "BootSourceOverrideTarget": boot.get("target") or "None",
        "BootSourceOverrideMode": boot.get("mode") or doc.get("bootMode") or "UEFI",
        # Kept whatever the target, as on any BMC; booted only with UefiHttp.
        "HttpBootUri": redact(boot.get("http_boot_uri") or "") or None,
        "BootSourceOverrideEnabled@Redfish.AllowableValues": list(BOOT_ENABLED),
        "BootSourceOverrideTarget@Redfish.AllowableValues": list(BOOT_TARGETS),
        "BootSourceOverrideMode@Redfish.AllowableValues": list(BOOT_MODES),
    }


def render_system(doc: dict, power: dict[str, str], boot: dict[str, str]) -> dict:
    sid = doc["id"]
    uri = system_uri(sid)
    status: dict = {"State": "Enabled", "Health": "OK"}
    conditions = []
    if power.get("error"):
        # Why the last power-on never ran the VM; the next Reset clears it.
        conditions.append({"Message": power["error"], "Severity": "Critical"})
    if doc.get("restartRequired"):
        conditions.append(
            {
                "Message": "The VM spec changed and takes effect at the next restart.",
                "Severity": "Warning",
            }
        )
    if conditions:
        status["Conditions"] = conditions
        status["Health"] = conditions[0]["Severity"]
    return {
        "@odata.id": uri,
        "@odata.type": "#ComputerSystem.v1_27_0.ComputerSystem",
        "Id": sid,
        "Name": doc.get("name") or sid,
        "Description": f"KubeVirt VirtualMachine {doc.get('namespace')}/{doc.get('name')}",
        "UUID": doc.get("firmwareUUID") or None,
        "Manufacturer": "KubeVirt",
        "Model": "VirtualMachine",
        "SerialNumber": doc.get("uid") or None,
        "SystemType": "Virtual",
        "PowerState": power_state(doc, power),
        "Status": status,
        "Boot": render_boot(doc, boot),
        "ProcessorSummary": processor_summary(doc),
        "MemorySummary": {
            "TotalSystemMemoryGiB": round(int(doc.get("memoryMiB") or 0) / 1024, 3),
        },
        "Processors": {"@odata.id": f"{uri}/Processors"},
        "Memory": {"@odata.id": f"{uri}/Memory"},
        "SimpleStorage": {"@odata.id": f"{uri}/SimpleStorage"},
        "Storage": {"@odata.id": f"{uri}/Storage"},
        "EthernetInterfaces": {"@odata.id": f"{uri}/EthernetInterfaces"},
        "VirtualMedia": {"@odata.id": f"{uri}/VirtualMedia"},
        "SecureBoot": {"@odata.id": f"{uri}/SecureBoot"},
        "Bios": {"@odata.id": f"{uri}/Bios"},
        "LogServices": {"@odata.id": f"{uri}/LogServices"},
        "Links": {
            "ManagedBy": [{"@odata.id": f"/redfish/v1/Managers/{sid}"}],
            "Chassis": [{"@odata.id": f"/redfish/v1/Chassis/{sid}"}],
        },
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": f"{uri}/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": list(RESET_TYPES),
            }
        },
    }


def _current(system_id: str) -> dict:
    doc, power, boot = visible_system_with(system_id, "power", "boot")
    return render_system(doc, power, boot)


@query.batch(rf"^{SYSTEMS}/[^/]+$")
def render_systems(paths: list[str]) -> dict[str, dict]:
    """Systems as their GET renders them, read in one pipeline (an expanded collection)."""
    ids = [path.rsplit("/", 1)[-1] for path in paths]
    found = visible_systems_with(ids, "power", "boot")
    return {system_uri(sid): finalize(render_system(*found[sid])) for sid in found}


@bp.get(SYSTEMS)
def systems():
    ids = [system_uri(d["id"]) for d in visible_systems()]
    body = collection(
        SYSTEMS, "#ComputerSystemCollection.ComputerSystemCollection", "Computer Systems", ids
    )
    return resource(body)


@bp.get(f"{SYSTEMS}/<system_id>")
@reads_system("power", "boot")
def system(system_id: str):
    return resource(_current(system_id), allow=SYSTEM_ALLOW)


@bp.patch(f"{SYSTEMS}/<system_id>")
@reads_system("power", "boot")
def patch_system(system_id: str):
    doc, power, stored_boot = visible_system_with(system_id, "power", "boot")
    current = finalize(render_system(doc, power, stored_boot))
    body = json_body(allow_empty=False)
    readonly = {k for k in current if k != "Boot"}
    _, errors = patch_object({k: v for k, v in body.items() if k != "Boot"}, {}, readonly)
    changes: dict = {}
    if "Boot" in body:
        if not isinstance(body["Boot"], dict):
            errors.append(
                message("PropertyValueTypeError", [show(body["Boot"]), "Boot"], ["#/Boot"])
            )
        else:
            boot_readonly = {k for k in current["Boot"] if "@" in k}
            changes, boot_errors = patch_object(
                body["Boot"], BOOT_WRITABLE, boot_readonly, prefix="Boot/"
            )
            errors += boot_errors
            if not boot_errors and changes.get("HttpBootUri"):
                errors += http_boot.uri_errors(changes["HttpBootUri"])
    raise_if(errors)
    if not if_match_ok(current["@odata.etag"]):
        raise RedfishError(412, "PreconditionFailed")

    def unchanged(doc: dict | None, power: dict, boot: dict) -> bool:
        # The If-Match again, on what is stored at the instant of the write.
        if doc is None or not if_match_ok(finalize(render_system(doc, power, boot))["@odata.etag"]):
            return False
        conflict = http_boot.state_conflict(changes, boot)
        if conflict:
            raise conflict
        # UEFI secure boot cannot follow the VM into legacy BIOS: turn it off first (409: the
        # request is fine, the stored state refuses it).
        if changes.get("BootSourceOverrideMode") == "Legacy" and secure_boot_wanted(doc, boot):
            raise RedfishError(
                409,
                "PropertyValueConflict",
                ["Boot/BootSourceOverrideMode", "SecureBoot/SecureBootEnable"],
                ["#/Boot/BootSourceOverrideMode"],
            )
        return True

    fields = {
        name: changes[key]
        for key, name in (
            ("BootSourceOverrideEnabled", "enabled"),
            ("BootSourceOverrideTarget", "target"),
            ("BootSourceOverrideMode", "mode"),
        )
        if key in changes
    }
    http_uri = http_boot.uri_to_boot(changes, stored_boot)
    if "HttpBootUri" in changes:
        fields["http_boot_uri"] = http_boot.without_credentials(changes["HttpBootUri"] or "")
    if not fields:
        return resource(_current(system_id), allow=SYSTEM_ALLOW)
    written = store().write_boot_if(system_id, unchanged, seen=(doc, power, stored_boot), **fields)
    if written is None:
        raise RedfishError(412, "PreconditionFailed")
    boot_gen = int(written["gen"])
    log.info("boot override %s gen=%s system=%s", fields, boot_gen, system_id)
    if http_uri:
        # Begun before the answer: a Reset sent after this PATCH finds the medium pending.
        http_boot.start(system_id, http_uri)
    pipe = store().r.pipeline(transaction=False)
    dispatch.publish(pipe, system_id, wire.boot_apply(celery(), system_id, boot_gen))
    if http_uri:
        return resource(_current(system_id), allow=SYSTEM_ALLOW)  # the medium it began
    # The document and power state are the ones the write checked; the boot hash as written.
    return resource(render_system(doc, power, written), allow=SYSTEM_ALLOW)


def button_action(system_id: str) -> str:
    """What PushPowerButton does now: a graceful shutdown of a system that is (coming) on,
    a power-on otherwise, under the same deferral rules as On."""
    doc, power = visible_system_with(system_id, "power")
    return "GracefulShutdown" if power_state(doc, power) in BUTTON_TURNS_OFF else "On"


@bp.post(f"{SYSTEMS}/<system_id>/Actions/ComputerSystem.Reset")
@reads_system()
def reset(system_id: str):
    visible_system(system_id)
    params = action_params(
        "ComputerSystem.Reset",
        json_body(),
        {"ResetType": Param(str, required=True, allowed=RESET_TYPES)},
    )
    requested = params["ResetType"]
    action = button_action(system_id) if requested == "PushPowerButton" else requested
    st = store()
    # The task and the request are one Redis step: an API killed after it leaves work that the
    # reaper re-sends (workers/reaper.py), never a task that nothing ends.
    verdict = st.request_power(
        system_id, action, defer=not settings().legacy_sequential, requested=requested
    )
    task_id = verdict["task"]
    if verdict["verdict"] == "deferred":
        events().deferred(system_id, action, task_id)
        current_app.extensions["fleetfish.metrics"].deferred_power_ons.inc()
        log.info(
            "Reset %s deferred until media is ready system=%s task=%s",
            action,
            system_id,
            task_id,
        )
        return accepted(task_id, verdict["fields"])
    # The event and the work: one round trip.
    pipe = st.r.pipeline(transaction=False)
    events().reset(system_id, action, task_id, pipe=pipe)
    try:
        dispatch.publish(
            pipe,
            system_id,
            wire.power_reset(celery(), system_id, action, task_id, verdict["celery_id"]),
        )
    except Exception:
        st.update_task(
            task_id,
            state="Exception",
            status="Critical",
            message="could not queue the power action",
        )
        raise
    return accepted(task_id, verdict["fields"])
