"""VirtualMedia (the Cd slot) with InsertMedia/EjectMedia, under both Systems/{id} and Managers/{id}.

The blueprint is registered twice (see ``app.create_app``); the registered name tells which parent
the request came through, so every @odata.id and action target stays under that parent.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging

from flask import Blueprint, request

from app import dispatch
from app.context import (
    celery,
    events,
    not_found,
    reads_system,
    settings,
    store,
    visible_system,
    visible_system_with,
)
from app.errors import RedfishError
from app.image_url import ImageURL, parse, redact
from app.protocol import collection, finalize, if_match_ok, json_body, no_content, resource
from app.resources.task_service import accepted
from app.validate import Param, action_params, patch_object, raise_if
from fleetfish import wire
from fleetfish.image_policy import refusal
from fleetfish.store import DEVICES, PENDING_STATES, InsertWrites

log = logging.getLogger("fleetfish.api")
bp = Blueprint("virtual_media", __name__)

PARENTS = {"system_media": "/redfish/v1/Systems", "manager_media": "/redfish/v1/Managers"}
PROTOCOLS = ("HTTP", "HTTPS")
MEDIA_ALLOW = ("GET", "HEAD", "PATCH")
METHODS = ("Stream", "Upload")
INSERT = "VirtualMedia.InsertMedia"
EJECT = "VirtualMedia.EjectMedia"
INSERT_PARAMS = {
    "Image": Param(str, required=True),
    "Inserted": Param(bool),
    "WriteProtected": Param(bool),
    "TransferProtocolType": Param(str, allowed=PROTOCOLS, nullable=True),
    "TransferMethod": Param(str, allowed=METHODS, nullable=True),
    "UserName": Param(str, nullable=True),
    "Password": Param(str, nullable=True),
    "MediaType": Param(str, allowed=("CD", "DVD"), nullable=True),
}


def _base(system_id: str) -> str:
    return f"{PARENTS.get(request.blueprint or '', '/redfish/v1/Systems')}/{system_id}/VirtualMedia"


def _device(device: str) -> str:
    if device not in DEVICES:
        raise not_found("VirtualMedia", device)
    return device


def render_media(system_id: str, device: str, media: dict[str, str]) -> dict:
    uri = f"{_base(system_id)}/{device}"
    inserted = media.get("inserted") == "1"
    image = redact(media.get("image") or "")
    health = media.get("health") or "OK"
    status: dict = {"State": media.get("state") or "Enabled", "Health": health}
    if health != "OK" and media.get("message"):
        status["Conditions"] = [{"Message": media["message"], "Severity": health}]
    protocol = media.get("transfer_protocol") or image.partition("://")[0].upper()
    return {
        "@odata.id": uri,
        "@odata.type": "#VirtualMedia.v1_6_5.VirtualMedia",
        "Id": device,
        "Name": "Virtual CD",
        "MediaTypes": ["CD", "DVD"],
        "Image": image or None,
        "ImageName": media.get("image_name") or None,
        "Inserted": inserted,
        "WriteProtected": media.get("write_protected", "1") != "0",
        "ConnectedVia": "URI" if inserted else "NotConnected",
        "TransferProtocolType": protocol or None,
        "TransferMethod": media.get("transfer_method") or ("Stream" if image else None),
        "Status": status,
        "VerifyCertificate": media.get("verify_certificate") != "0",
        "Certificates": {"@odata.id": f"{uri}/Certificates"},
        "Actions": {
            f"#{INSERT}": {
                "target": f"{uri}/Actions/{INSERT}",
                "TransferProtocolType@Redfish.AllowableValues": list(PROTOCOLS),
                "TransferMethod@Redfish.AllowableValues": list(METHODS),
            },
            f"#{EJECT}": {"target": f"{uri}/Actions/{EJECT}"},
        },
    }


@bp.get("/<system_id>/VirtualMedia")
@reads_system()
def media_collection(system_id: str):
    visible_system(system_id)
    base = _base(system_id)
    members = [f"{base}/{d}" for d in DEVICES]
    body = collection(
        base, "#VirtualMediaCollection.VirtualMediaCollection", "Virtual Media", members
    )
    return resource(body)


@bp.get("/<system_id>/VirtualMedia/<device>")
@reads_system("media")
def media(system_id: str, device: str):
    if device not in DEVICES:
        visible_system(system_id)  # an unknown system is the 404 to report first
        _device(device)
    _, media = visible_system_with(system_id, "media")
    return resource(render_media(system_id, device, media), allow=MEDIA_ALLOW)


@bp.patch("/<system_id>/VirtualMedia/<device>")
def patch_media(system_id: str, device: str):
    """``VerifyCertificate`` only: false needs FLEETFISH_MEDIA_ALLOW_UNVERIFIED (the imports
    then trust whatever certificate the image server presents)."""
    if device not in DEVICES:
        visible_system(system_id)
        _device(device)
    _, media = visible_system_with(system_id, "media")
    current = finalize(render_media(system_id, device, media))
    body = json_body(allow_empty=False)
    readonly = {k for k in current if k != "VerifyCertificate"}
    changes, errors = patch_object(body, {"VerifyCertificate": Param(bool)}, readonly)
    raise_if(errors)
    if changes.get("VerifyCertificate") is False and not settings().media_allow_unverified:
        error = RedfishError(
            400, "PropertyValueNotInList", ["false", "VerifyCertificate"], ["#/VerifyCertificate"]
        )
        error.messages[0]["Resolution"] = (
            "Add the image server's CA to this VirtualMedia's Certificates instead; the "
            "operator allows unverified imports with FLEETFISH_MEDIA_ALLOW_UNVERIFIED."
        )
        raise error
    if not if_match_ok(current["@odata.etag"]):
        raise RedfishError(412, "PreconditionFailed")
    if "VerifyCertificate" in changes:
        store().set_media_verify(system_id, device, changes["VerifyCertificate"])
        log.info(
            "VerifyCertificate %s on %s system=%s", changes["VerifyCertificate"], device, system_id
        )
    _, media = visible_system_with(system_id, "media")
    return resource(render_media(system_id, device, media), allow=MEDIA_ALLOW)


def check_image(image: str) -> ImageURL:
    """The parsed image URL; 400 when it is not http(s) or its host is refused (SSRF guard)."""
    checked = parse(image)
    if checked is None:
        raise RedfishError(
            400, "ActionParameterValueFormatError", [redact(image), "Image", INSERT], ["#/Image"]
        )
    why = refusal(checked.host, settings())
    if why:
        log.info("image host %s refused: %s", checked.host, why)
        error = RedfishError(400, "ActionParameterValueError", ["Image", INSERT], ["#/Image"])
        # The registry's message cannot name the host; the resolution says which and why.
        error.messages[0]["Resolution"] = (
            f"The image host {checked.host} is refused ({why}). "
            "Use another host, or list this one in FLEETFISH_IMAGE_ALLOWLIST."
        )
        raise error
    return checked


@bp.post(f"/<system_id>/VirtualMedia/<device>/Actions/{INSERT}")
@reads_system("media", "media_credentials")
def insert_media(system_id: str, device: str):
    # The system, its medium and the medium's credentials in one round trip.
    _, media, credentials = visible_system_with(system_id, "media", "media_credentials")
    device = _device(device)
    params = action_params(INSERT, json_body(), INSERT_PARAMS)
    checked = check_image(params["Image"])
    # Credentials in the URL are handled like UserName/Password (explicit ones win), so the URL
    # that is stored, queued and shown carries none.
    image = checked.url
    username = params.get("UserName") or checked.username
    password = params.get("Password") or checked.password
    task = start_insert(
        system_id,
        device,
        image,
        username=username,
        password=password,
        write_protected=params.get("WriteProtected", True),
        inserted=params.get("Inserted", True),
        transfer_protocol=params.get("TransferProtocolType", ""),
        transfer_method=params.get("TransferMethod", ""),
        known=(media, credentials),
    )
    return accepted(task["id"], task) if task else no_content()


def start_insert(
    system_id: str,
    device: str,
    image: str,
    username: str = "",
    password: str = "",
    known: tuple[dict[str, str], dict[str, str]] | None = None,
    **options,
) -> dict[str, str] | None:
    """Record an insert and send its chord; the task's fields, or None when that very image
    is already attached (nothing to do). Also the medium of a UEFI HTTP boot (systems.py).
    ``known``: the medium and its credentials when the caller read them already."""
    st = store()
    current, credentials = known or st.media_and_credentials(system_id, device)
    same_credentials = _same_credentials(
        credentials, {"username": username, "password": password} if username or password else {}
    )
    if current.get("image") == image and current.get("inserted") == "1" and same_credentials:
        if current.get("state") in PENDING_STATES:
            if current.get("task"):
                return st.get_task(current["task"]) or {"id": current["task"]}
        elif current.get("health") == "OK":
            return None
    if settings().legacy_sequential:
        began = _insert_sequential(system_id, device, image, username, password, options)
    else:
        known_gen = int(current.get("gen") or 0)
        began = _insert_and_send(system_id, device, image, username, password, known_gen, options)
    return began["fields"]


def _insert_and_send(
    system_id: str,
    device: str,
    image: str,
    username: str,
    password: str,
    known_gen: int,
    options: dict,
) -> dict:
    """The insert, its event and its chord's message: one step, one round trip."""
    composed: list[InsertWrites] = []

    def compose(gen: int, task_id: str, celery_id: str) -> InsertWrites:
        chord = wire.insert_media_chord_message(
            celery(), system_id, device, gen, image, task_id, body_id=celery_id
        )
        keys, args = events().inserted_args(system_id, device, redact(image), gen)
        composed.append(InsertWrites(chord, keys, args))
        return composed[-1]

    began = store().insert_and_send(
        system_id,
        device,
        image,
        compose,
        known_gen=known_gen,
        username=username,
        password=password,
        **options,
    )
    # One line names both Celery ids: the import's, and the chord's release, under the id the
    # Store recorded (the reaper resends it under that id).
    log.info(
        "InsertMedia %s gen=%s task=%s system=%s sent media.import celery_id=%s release=%s",
        image,
        began["gen"],
        began["task"],
        system_id,
        composed[-1].message.task_id,
        began["celery_id"],
    )
    return began


def _insert_sequential(
    system_id: str, device: str, image: str, username: str, password: str, options: dict
) -> dict:
    """The sequential mode's insert: record it, then send the media chain on its own."""
    st = store()
    began = st.begin_insert(
        system_id, device, image, username=username, password=password, **options
    )
    gen, task_id = began["gen"], began["task"]
    pipe = st.r.pipeline(transaction=False)
    events().inserted(system_id, device, redact(image), gen, pipe=pipe)
    try:
        pipe.execute()
        dispatch.send(
            wire.legacy_media_chain(celery(), system_id, device, gen, image, task_id),
            system_id,
            began["celery_id"],
        )
    except Exception:
        _abandon(system_id, device, gen, task_id)
        raise
    log.info("InsertMedia %s gen=%s task=%s system=%s sequential", image, gen, task_id, system_id)
    return began


def _same_credentials(stored: dict[str, str], given: dict[str, str]) -> bool:
    """Constant-time comparison: the stored credentials are secrets too."""
    encode = functools.partial(json.dumps, sort_keys=True)
    return hmac.compare_digest(encode(stored).encode(), encode(given).encode())


def _abandon(system_id: str, device: str, gen: int, task_id: str) -> None:
    """The media work could not be queued: show the failure rather than a slot stuck in Starting."""
    st = store()
    try:
        reason = "the media work could not be queued (broker unavailable)"
        st.fail_media(system_id, device, gen, reason, task_id)
        events().media_failed(system_id, device, gen, reason)
    except Exception:  # Redis is likely down too; the 503 already tells the client to retry.
        log.warning("could not record the failed InsertMedia system=%s", system_id)


@bp.post(f"/<system_id>/VirtualMedia/<device>/Actions/{EJECT}")
@reads_system("media")
def eject_media(system_id: str, device: str):
    _, current = visible_system_with(system_id, "media")
    device = _device(device)
    action_params(EJECT, json_body(), {})
    # Nothing inserted, nothing importing, no volume: an eject has nothing to undo.
    if (
        current.get("inserted") != "1"
        and current.get("state") not in PENDING_STATES
        and not current.get("dv")
    ):
        return no_content()
    st = store()
    began = st.begin_eject(system_id, device)
    task_id = began["task"]
    # The event, the deferred Reset the eject releases and the eject's work: one round trip.
    pipe = st.r.pipeline(transaction=False)
    events().ejected(system_id, device, pipe=pipe)
    work = []
    if began["released_action"]:
        work.append(_released_reset(system_id, began))
    eject = bool(began["previous_dv"] or began["unfinished"])
    if eject:
        gen, celery_id = began["gen"], began["celery_id"]
        work.append(wire.eject_media(celery(), system_id, device, gen, task_id, celery_id))
    dispatch.publish(pipe, system_id, *work)
    if not eject:
        return no_content()  # the task ended with the eject: nothing was attached
    log.info("EjectMedia gen=%s task=%s system=%s", began["gen"], task_id, system_id)
    return accepted(task_id, began["fields"])


def _released_reset(system_id: str, began: dict) -> wire.Publication:
    """The eject ended the media wait of a deferred Reset: it runs now, without media."""
    action, task_id = began["released_action"], began["released_task"]
    log.info(
        "deferred Reset %s released by eject system=%s task=%s",
        action,
        system_id,
        task_id,
    )
    return wire.power_reset(celery(), system_id, action, task_id, began["released_celery_id"])
