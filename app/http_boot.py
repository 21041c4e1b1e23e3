"""UEFI HTTP boot: the ``HttpBootUri`` of a Boot PATCH becomes the medium the VM boots from.

KubeVirt firmware cannot fetch an image over HTTP itself, so the URI is imported and attached
to the CD-ROM exactly as an InsertMedia of it would be (same SSRF guard, same chord, and a Reset
that arrives meanwhile waits for it); the ``UefiHttp`` target then boots that CD-ROM.
"""

from __future__ import annotations

import logging

from app.context import settings
from app.errors import RedfishError, message
from app.image_url import parse, redact
from app.resources.virtual_media import start_insert
from fleetfish.image_policy import refusal

log = logging.getLogger("fleetfish.api")

TARGET = "UefiHttp"
POINTER = "#/Boot/HttpBootUri"


def uri_errors(uri: str) -> list[dict]:
    """Why this HttpBootUri cannot be booted (the InsertMedia rules), as Base messages."""
    checked = parse(uri)
    if checked is None:
        return [message("PropertyValueFormatError", [redact(uri), "Boot/HttpBootUri"], [POINTER])]
    why = refusal(checked.host, settings())
    if not why:
        return []
    log.info("HTTP boot host %s refused: %s", checked.host, why)
    refused = message("PropertyValueIncorrect", ["Boot/HttpBootUri", redact(uri)], [POINTER])
    refused["Resolution"] = (
        f"The image host {checked.host} is refused ({why}). "
        "Use another host, or list this one in FLEETFISH_IMAGE_ALLOWLIST."
    )
    return [refused]


def state_conflict(changes: dict, stored: dict[str, str]) -> RedfishError | None:
    """UefiHttp with no URI given or kept (409: there is no DHCP here to supply one)."""
    if changes.get("BootSourceOverrideTarget") != TARGET:
        return None
    if changes.get("HttpBootUri") or ("HttpBootUri" not in changes and stored.get("http_boot_uri")):
        return None
    return RedfishError(
        409,
        "PropertyValueConflict",
        ["Boot/BootSourceOverrideTarget", "Boot/HttpBootUri"],
        ["#/Boot/BootSourceOverrideTarget"],
    )


def without_credentials(uri: str) -> str:
    """The URI as stored and shown: user info moves to the medium's credentials."""
    checked = parse(uri) if uri else None
    return checked.url if checked else uri


def uri_to_boot(changes: dict, stored: dict[str, str]) -> str:
    """The image a valid PATCH asks to attach now: the URI (given or kept) when the target
    becomes or stays UefiHttp; re-attached if it was ejected since (the InsertMedia rules
    skip an image that is still attached)."""
    target = changes.get("BootSourceOverrideTarget") or stored.get("target")
    if target != TARGET:
        return ""
    if "HttpBootUri" in changes:
        return changes["HttpBootUri"] or ""
    return stored.get("http_boot_uri", "") if "BootSourceOverrideTarget" in changes else ""


def start(system_id: str, uri: str) -> str | None:
    """Import and attach the URI as the CD medium; the InsertMedia task id (None: attached)."""
    checked = parse(uri)
    assert checked is not None  # request_errors() passed
    task = start_insert(
        system_id, "Cd", checked.url, username=checked.username, password=checked.password
    )
    task_id = task["id"] if task else None
    log.info("UEFI HTTP boot medium %s task=%s system=%s", redact(uri), task_id, system_id)
    return task_id
