"""SecureBoot of a ComputerSystem: UEFI secure boot of the VM's firmware, applied at its next start.

``SecureBootEnable`` is the setting for the next boot (what Ironic reads back right after its
PATCH); ``SecureBootCurrentBoot`` is what the running VMI booted with. KubeVirt manages no keys,
so there is no ResetKeys action and no key databases.
"""

from __future__ import annotations

import logging

from flask import Blueprint

from app import dispatch
from app.context import celery, store, visible_system_with
from app.errors import RedfishError
from app.protocol import finalize, if_match_ok, json_body, resource
from app.validate import Param, patch_object, raise_if
from fleetfish import wire

log = logging.getLogger("fleetfish.api")
bp = Blueprint("secure_boot", __name__)

SECURE_BOOT = "/redfish/v1/Systems/<system_id>/SecureBoot"
ALLOW = ("GET", "HEAD", "PATCH")
WRITABLE = {"SecureBootEnable": Param(bool)}


def secure_boot_wanted(doc: dict, boot: dict[str, str]) -> bool:
    """The setting the next start applies: the last PATCH, else what the VM spec says."""
    stored = boot.get("secure_boot")
    if stored in ("true", "false"):
        return stored == "true"
    return bool(doc.get("secureBoot"))


def boot_mode_wanted(doc: dict, boot: dict[str, str]) -> str:
    """The firmware mode the next start applies: the override's mode, else the VM's own."""
    return boot.get("mode") or doc.get("bootMode") or "UEFI"


def render_secure_boot(doc: dict, boot: dict[str, str]) -> dict:
    vmi = doc.get("vmi") or {}
    running = vmi.get("phase") == "Running"
    current = "Enabled" if running and vmi.get("secureBoot") else "Disabled"
    return {
        "@odata.id": f"/redfish/v1/Systems/{doc['id']}/SecureBoot",
        "@odata.type": "#SecureBoot.v1_1_2.SecureBoot",
        "Id": "SecureBoot",
        "Name": "UEFI Secure Boot",
        "Description": "KubeVirt EFI secure boot (with SMM); takes effect at the next start",
        "SecureBootEnable": secure_boot_wanted(doc, boot),
        "SecureBootCurrentBoot": current,
        # KubeVirt's OVMF ships its vendor keys enrolled and offers no key management.
        "SecureBootMode": "DeployedMode",
    }


def _current(system_id: str) -> tuple[dict, dict]:
    doc, boot = visible_system_with(system_id, "boot")
    return doc, finalize(render_secure_boot(doc, boot))


@bp.get(SECURE_BOOT)
def secure_boot(system_id: str):
    doc, boot = visible_system_with(system_id, "boot")
    return resource(render_secure_boot(doc, boot), allow=ALLOW)


@bp.patch(SECURE_BOOT)
def patch_secure_boot(system_id: str):
    doc, current = _current(system_id)
    body = json_body(allow_empty=False)
    readonly = {k for k in current if k not in WRITABLE}
    changes, errors = patch_object(body, WRITABLE, readonly)
    raise_if(errors)
    if not if_match_ok(current["@odata.etag"]):
        raise RedfishError(412, "PreconditionFailed")
    if "SecureBootEnable" not in changes:
        return resource(render_secure_boot(*visible_system_with(system_id, "boot")), allow=ALLOW)
    enable = changes["SecureBootEnable"]

    def unchanged(stored: dict | None, power: dict, boot: dict) -> bool:
        if stored is None or not if_match_ok(
            finalize(render_secure_boot(stored, boot))["@odata.etag"]
        ):
            return False
        if enable and boot_mode_wanted(stored, boot) == "Legacy":
            # Checked on what is stored at the instant of the write, like the If-Match.
            raise RedfishError(
                409,  # the request is fine; the stored boot mode refuses it
                "PropertyValueConflict",
                ["SecureBootEnable", "Boot/BootSourceOverrideMode"],
                ["#/SecureBootEnable"],
            )
        return True

    gen = store().set_boot_if(system_id, unchanged, secure_boot="true" if enable else "false")
    if gen is None:
        raise RedfishError(412, "PreconditionFailed")
    log.info("secure boot %s gen=%s system=%s", "on" if enable else "off", gen, system_id)
    dispatch.publish(
        store().r.pipeline(transaction=False), system_id, wire.boot_apply(celery(), system_id, gen)
    )
    doc, boot = visible_system_with(system_id, "boot")
    return resource(render_secure_boot(doc, boot), allow=ALLOW)
