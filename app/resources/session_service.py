"""SessionService and Sessions: log in (POST, open), list, read and log out (DELETE)."""

from __future__ import annotations

import logging

from flask import Blueprint, current_app, g

from app.auth import ACCOUNTS_URI, check_password, unauthorized
from app.errors import RedfishError, message
from app.protocol import collection, json_body, no_content, resource
from app.resources.task_service import iso
from app.sessions import Sessions
from app.validate import pointer, show

log = logging.getLogger("fleetfish.api")
bp = Blueprint("session_service", __name__)

SERVICE = "/redfish/v1/SessionService"
SESSIONS = f"{SERVICE}/Sessions"


def _sessions() -> Sessions:
    return current_app.extensions["fleetfish.sessions"]


def render_session(session: dict[str, str]) -> dict:
    return {
        "@odata.id": f"{SESSIONS}/{session['id']}",
        "@odata.type": "#Session.v1_8_0.Session",
        "Id": session["id"],
        "Name": f"Session of {session['user']}",
        "UserName": session["user"],
        "SessionType": "Redfish",
        "CreatedTime": iso(session.get("created", "")),
        "Password": None,
    }


def _may_see(session: dict[str, str]) -> bool:
    return g.user.admin or session.get("user") == g.user.name


@bp.get(SERVICE)
def session_service():
    body = {
        "@odata.id": SERVICE,
        "@odata.type": "#SessionService.v1_2_0.SessionService",
        "Id": "SessionService",
        "Name": "Session Service",
        "ServiceEnabled": True,
        "SessionTimeout": _sessions().timeout,
        "Status": {"State": "Enabled", "Health": "OK"},
        "Sessions": {"@odata.id": SESSIONS},
    }
    return resource(body)


@bp.get(SESSIONS)
def sessions():
    members = [f"{SESSIONS}/{s['id']}" for s in _sessions().list() if _may_see(s)]
    body = collection(SESSIONS, "#SessionCollection.SessionCollection", "Sessions", members)
    return resource(body, allow=("GET", "HEAD", "POST"), etag=False)


@bp.post(SESSIONS)
@bp.post(f"{SESSIONS}/Members")
def login():
    body = json_body()
    errors = []
    for name in ("UserName", "Password"):
        if name not in body:
            errors.append(message("PropertyMissing", [name], [pointer(name)]))
        elif not isinstance(body[name], str):
            errors.append(
                message("PropertyValueTypeError", [show(body[name]), name], [pointer(name)])
            )
    if errors:
        raise RedfishError(
            400,
            errors[0]["MessageId"].rsplit(".", 1)[-1],
            errors[0]["MessageArgs"],
            errors[0]["RelatedProperties"],
            more=errors[1:],
        )
    user = check_password(body["UserName"], body["Password"])
    if user is None:
        raise unauthorized()
    token, session = _sessions().create(user.name, user.epoch)
    log.info("session %s created for %r", session["id"], user.name)
    uri = f"{SESSIONS}/{session['id']}"
    body = render_session(session)
    if user.password_change_required:
        # DSP0266: the session is made, limited to changing the password, and says so.
        account = f"{ACCOUNTS_URI}/{user.name}"
        body["@Message.ExtendedInfo"] = [message("PasswordChangeRequired", [account])]
    return resource(
        body,
        status=201,
        allow=("GET", "HEAD", "DELETE"),
        headers={"X-Auth-Token": token, "Location": uri},
    )


def _visible(session_id: str) -> dict[str, str]:
    session = _sessions().get(session_id)
    if session is None or not _may_see(session):
        raise RedfishError(404, "ResourceNotFound", ["Session", session_id])
    return session


@bp.get(f"{SESSIONS}/<session_id>")
def session(session_id: str):
    return resource(render_session(_visible(session_id)), allow=("GET", "HEAD", "DELETE"))


@bp.delete(f"{SESSIONS}/<session_id>")
def logout(session_id: str):
    _visible(session_id)
    _sessions().delete(session_id)
    log.info("session %s deleted by %r", session_id, g.user.name)
    return no_content(allow=("GET", "HEAD", "DELETE"))
