"""LogServices/Log: the system's event log (fleetfish/eventlog.py), under Systems/{id} and Managers/{id}.

Both parents show the same log: the manager is that one system's BMC. The blueprint is registered
twice (see ``app.create_app``), like VirtualMedia, so every @odata.id stays under the parent the
request came through. Entries are listed oldest first, as a log reads.
"""

from __future__ import annotations

import datetime as dt
import logging

from flask import Blueprint, g, request

from app.context import events, not_found, reads_system, visible_system
from app.errors import RedfishError
from app.protocol import collection, json_body, no_content, resource
from app.resources.task_service import iso
from app.validate import action_params

log = logging.getLogger("fleetfish.api")
bp = Blueprint("log_service", __name__)

PARENTS = {"system_logs": "/redfish/v1/Systems", "manager_logs": "/redfish/v1/Managers"}
LOG_ID = "Log"
CLEAR = "LogService.ClearLog"


def _base(system_id: str) -> str:
    return f"{PARENTS.get(request.blueprint or '', '/redfish/v1/Systems')}/{system_id}/LogServices"


def _log(log_id: str) -> str:
    if log_id != LOG_ID:
        raise not_found("LogService", log_id)
    return log_id


def render_entry(uri: str, entry: dict) -> dict:
    body = {
        "@odata.id": f"{uri}/{entry['id']}",
        "@odata.type": "#LogEntry.v1_21_0.LogEntry",
        "Id": str(entry["id"]),
        "Name": f"Log entry {entry['id']}",
        "EntryType": "Event",
        "Severity": entry.get("severity") or "OK",
        "Created": iso(str(entry.get("created") or 0)),
        "Message": entry.get("message") or "",
    }
    if entry.get("message_id"):
        body["MessageId"] = entry["message_id"]
    return body


@bp.get("/<system_id>/LogServices")
@reads_system()
def log_services(system_id: str):
    visible_system(system_id)
    base = _base(system_id)
    body = collection(
        base, "#LogServiceCollection.LogServiceCollection", "Log Services", [f"{base}/{LOG_ID}"]
    )
    return resource(body)


@bp.get("/<system_id>/LogServices/<log_id>")
@reads_system()
def log_service(system_id: str, log_id: str):
    visible_system(system_id)
    uri = f"{_base(system_id)}/{_log(log_id)}"
    body = {
        "@odata.id": uri,
        "@odata.type": "#LogService.v1_9_0.LogService",
        "Id": LOG_ID,
        "Name": "Event log",
        "Description": "What happened to this node: virtual media, power, boots, failures",
        "ServiceEnabled": True,
        "MaxNumberOfRecords": events().max_entries,
        "OverWritePolicy": "WrapsWhenFull",
        "LogEntryType": "Event",
        "DateTime": iso(str(dt.datetime.now(tz=dt.UTC).timestamp())),
        "Status": {"State": "Enabled", "Health": "OK"},
        "Entries": {"@odata.id": f"{uri}/Entries"},
        "Actions": {f"#{CLEAR}": {"target": f"{uri}/Actions/{CLEAR}"}},
    }
    return resource(body, etag=False)


@bp.get("/<system_id>/LogServices/<log_id>/Entries")
@reads_system()
def log_entries(system_id: str, log_id: str):
    visible_system(system_id)
    uri = f"{_base(system_id)}/{_log(log_id)}/Entries"
    entries = list(reversed(events().entries(system_id)))
    body = collection(uri, "#LogEntryCollection.LogEntryCollection", "Log Entries", [])
    body["Members"] = [render_entry(uri, e) for e in entries]
    return resource(body, etag=False)


@bp.get("/<system_id>/LogServices/<log_id>/Entries/<entry_id>")
@reads_system()
def log_entry(system_id: str, log_id: str, entry_id: str):
    visible_system(system_id)
    uri = f"{_base(system_id)}/{_log(log_id)}/Entries"
    for entry in events().entries(system_id):
        if str(entry["id"]) == entry_id:
            return resource(render_entry(uri, entry))
    raise not_found("LogEntry", entry_id)


@bp.post(f"/<system_id>/LogServices/<log_id>/Actions/{CLEAR}")
def clear_log(system_id: str, log_id: str):
    visible_system(system_id)
    _log(log_id)
    action_params(CLEAR, json_body(), {})
    # Clearing loses what an operator reads after a failed install: administrators only.
    if not g.user.admin:
        raise RedfishError(403, "InsufficientPrivilege")
    events().clear(system_id)
    log.info("event log cleared by %s system=%s", g.user.name, system_id)
    return no_content()
