"""TaskService, the Tasks collection, Task resources and task monitors, filtered by user scope."""

from __future__ import annotations

import datetime as dt
import time

from flask import Blueprint, Response, g

from app.context import not_found, store
from app.protocol import collection, resource
from fleetfish.store import RUNNING_TASK_STATES

bp = Blueprint("task_service", __name__)

TASKS = "/redfish/v1/TaskService/Tasks"
MONITORS = "/redfish/v1/TaskService/TaskMonitors"
RETRY_AFTER = "1"


def iso(epoch: str) -> str | None:
    if not epoch:
        return None
    # time.strftime: the same text as datetime's isoformat at half its cost (every 202 body).
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(epoch)))


def monitor_uri(task_id: str) -> str:
    return f"{MONITORS}/{task_id}"


def render_task(task: dict[str, str]) -> dict:
    task_id = task["id"]
    status = task.get("status") or "OK"
    messages = []
    if task.get("message") or task.get("message_id"):
        messages.append(
            {
                "MessageId": task.get("message_id") or "TaskEvent.1.0.TaskProgressChanged",
                "Message": task.get("message") or "",
                "Severity": status,
                "MessageSeverity": status,
            }
        )
    body = {
        "@odata.id": f"{TASKS}/{task_id}",
        "@odata.type": "#Task.v1_7_4.Task",
        "Id": task_id,
        "Name": task.get("name") or "Task",
        "Description": f"{task.get('name', '')} on system {task.get('system', '')}".strip(),
        "TaskState": task.get("state") or "New",
        "TaskStatus": status,
        "PercentComplete": int(float(task.get("percent") or 0)),
        "StartTime": iso(task.get("start", "")),
        "TaskMonitor": monitor_uri(task_id),
        "Messages": messages,
    }
    if task.get("end"):
        body["EndTime"] = iso(task["end"])
    return body


def accepted(task_id: str, task: dict[str, str] | None = None) -> Response:
    """202 for an action: Location names the task monitor, the body is the Task (``task``:
    its fields as the step that created it returned them, saving a read)."""
    task = task or store().get_task(task_id) or {"id": task_id}
    return resource(
        render_task(task),
        status=202,
        allow=("POST",),
        headers={"Location": monitor_uri(task_id), "Retry-After": RETRY_AFTER},
    )


def visible_task(task_id: str) -> dict[str, str]:
    task = store().get_task(task_id)
    if task is None:
        raise not_found("Task", task_id)
    user = g.user
    if user is not None and not user.scope.unrestricted:
        system_id = task.get("system", "")
        if not user.scope.allows_id(system_id) or not user.scope.allows(
            store().get_system(system_id)
        ):
            raise not_found("Task", task_id)
    return task


@bp.get("/redfish/v1/TaskService")
def task_service():
    body = {
        "@odata.id": "/redfish/v1/TaskService",
        "@odata.type": "#TaskService.v1_3_0.TaskService",
        "Id": "TaskService",
        "Name": "Task Service",
        "ServiceEnabled": True,
        "CompletedTaskOverWritePolicy": "Oldest",
        "LifeCycleEventOnTaskStateChange": False,
        "DateTime": iso(str(dt.datetime.now(tz=dt.UTC).timestamp())),
        "Status": {"State": "Enabled", "Health": "OK"},
        "Tasks": {"@odata.id": TASKS},
    }
    return resource(body, etag=False)


@bp.get("/redfish/v1/TaskService/Tasks")
def tasks():
    ids = store().task_ids()
    user = g.user
    systems = store().task_systems(ids)
    visible = []
    if user is None or user.scope.unrestricted:
        visible = [t for t, s in zip(ids, systems, strict=True) if s is not None]
    else:
        wanted = sorted({s for s in systems if s and user.scope.allows_id(s)})
        allowed = {d["id"] for d in store().get_systems(wanted) if user.scope.allows(d)}
        visible = [t for t, s in zip(ids, systems, strict=True) if s in allowed]
    body = collection(
        TASKS, "#TaskCollection.TaskCollection", "Tasks", [f"{TASKS}/{t}" for t in visible]
    )
    return resource(body, etag=False)


@bp.get("/redfish/v1/TaskService/Tasks/<task_id>")
def task(task_id: str):
    return resource(render_task(visible_task(task_id)), etag=False)


@bp.get("/redfish/v1/TaskService/TaskMonitors/<task_id>")
def task_monitor(task_id: str):
    task = visible_task(task_id)
    body = render_task(task)
    if task.get("state") in RUNNING_TASK_STATES:
        headers = {"Location": monitor_uri(task_id), "Retry-After": RETRY_AFTER}
        return resource(body, status=202, headers=headers, etag=False)
    return resource(body, etag=False)
