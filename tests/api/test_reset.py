"""ComputerSystem.Reset: deferred while media is pending, run now otherwise; tasks and monitors."""

from __future__ import annotations

import json

from app import create_app
from fleetfish.settings import Settings
from tests.api.api_helpers import (
    ADMIN,
    EJECT_URI,
    INSERT_URI,
    ISO,
    RESET_URI,
    SYS,
    SYS_URI,
    error_ids,
    related,
)


def celery_ids(queues, queue: str) -> list[str]:
    return [json.loads(raw)["headers"]["id"] for raw in reversed(queues.r.lrange(queue, 0, -1))]


def task_of(client, resp) -> dict:
    return client.get(resp.headers["Location"], headers=ADMIN).get_json()


def test_reset_on_runs_now_without_pending_media(client, store, systems, queues):
    resp = client.post(RESET_URI, json={"ResetType": "On"}, headers=ADMIN)
    assert resp.status_code == 202
    assert resp.headers["Location"].startswith("/redfish/v1/TaskService/TaskMonitors/")
    task_id = resp.get_json()["Id"]
    messages = queues.messages("fleetfish.power")
    assert messages == [{"task": "power.reset", "args": [SYS, "On", task_id]}]
    # Sent under the Celery id recorded with the task, the one the reaper would send it again
    # under; it stays a candidate for that until a worker takes it.
    assert store.get_task(task_id)["celery_id"] == celery_ids(queues, "fleetfish.power")[0]
    assert store.stale_resets(float("inf")) == [task_id]


def test_reset_on_is_deferred_while_media_is_pending(client, store, systems, queues):
    assert client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN).status_code == 202
    resp = client.post(RESET_URI, json={"ResetType": "On"}, headers=ADMIN)
    assert resp.status_code == 202
    task = task_of(client, resp)
    assert task["TaskState"] == "Pending"
    assert "waiting for virtual media" in task["Messages"][0]["Message"]
    assert client.get(SYS_URI, headers=ADMIN).get_json()["PowerState"] == "PoweringOn"
    assert queues.names("fleetfish.power") == []
    monitor = client.get(resp.headers["Location"], headers=ADMIN)
    assert monitor.status_code == 202 and monitor.headers["Retry-After"]
    metrics = client.get("/metrics").get_data(as_text=True)
    assert "fleetfish_api_deferred_power_ons_total 1.0" in metrics


def test_force_off_cancels_the_deferred_on(client, store, systems, queues):
    client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    on = client.post(RESET_URI, json={"ResetType": "On"}, headers=ADMIN)
    off = client.post(RESET_URI, json={"ResetType": "ForceOff"}, headers=ADMIN)
    assert off.status_code == 202
    cancelled = task_of(client, on)
    assert cancelled["TaskState"] == "Cancelled"
    assert cancelled["EndTime"]
    assert "ForceOff" in cancelled["Messages"][0]["Message"]
    # A finished task's monitor answers 200 with the final status.
    assert client.get(on.headers["Location"], headers=ADMIN).status_code == 200
    assert queues.names("fleetfish.power") == ["power.reset"]
    assert queues.messages("fleetfish.power")[0]["args"][1] == "ForceOff"
    assert client.get(SYS_URI, headers=ADMIN).get_json()["PowerState"] == "Off"


def test_eject_releases_a_deferred_reset(client, store, systems, queues):
    client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    on = client.post(RESET_URI, json={"ResetType": "On"}, headers=ADMIN)
    assert client.post(EJECT_URI, headers=ADMIN).status_code == 202
    assert queues.messages("fleetfish.power") == [
        {"task": "power.reset", "args": [SYS, "On", on.get_json()["Id"]]}
    ]
    assert task_of(client, on)["TaskState"] == "Running"
    recorded = store.get_task(on.get_json()["Id"])["celery_id"]
    assert recorded == celery_ids(queues, "fleetfish.power")[0]


def test_reset_validation(client, systems, queues):
    resp = client.post(RESET_URI, json={"ResetType": "Nmi"}, headers=ADMIN)
    assert resp.status_code == 400
    assert error_ids(resp) == ["ActionParameterValueNotInList"]
    assert related(resp) == ["#/ResetType"]
    resp = client.post(RESET_URI, json={}, headers=ADMIN)
    assert error_ids(resp) == ["ActionParameterMissing"]
    resp = client.post(RESET_URI, json={"ResetType": 1}, headers=ADMIN)
    assert error_ids(resp) == ["ActionParameterValueTypeError"]
    assert queues.names("fleetfish.power") == []
    assert client.get("/redfish/v1/TaskService/Tasks", headers=ADMIN).get_json()["Members"] == []


def test_pause_and_resume_are_sent_as_actions(client, systems, queues):
    for action in ("Pause", "Resume"):
        assert client.post(RESET_URI, json={"ResetType": action}, headers=ADMIN).status_code == 202
    assert [m["args"][1] for m in queues.messages("fleetfish.power")] == ["Pause", "Resume"]


def test_legacy_mode_never_defers(redis_url, users_file, systems, queues):
    client = create_app(
        Settings(redis_url=redis_url, users_file=users_file, legacy_sequential=True)
    ).test_client()
    client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    assert client.post(RESET_URI, json={"ResetType": "On"}, headers=ADMIN).status_code == 202
    assert queues.names("fleetfish.power") == ["power.reset"]


def test_task_resource_fields(client, store, systems):
    resp = client.post(RESET_URI, json={"ResetType": "On"}, headers=ADMIN)
    task_id = resp.get_json()["Id"]
    store.update_task(
        task_id, state="Completed", message="powered on", message_id="TaskEvent.1.0.TaskCompletedOK"
    )
    task = client.get(f"/redfish/v1/TaskService/Tasks/{task_id}", headers=ADMIN).get_json()
    assert task["TaskState"] == "Completed"
    assert task["TaskStatus"] == "OK"
    assert task["PercentComplete"] == 100
    assert task["StartTime"].endswith("Z") and task["EndTime"].endswith("Z")
    assert task["Messages"][0]["MessageId"] == "TaskEvent.1.0.TaskCompletedOK"
    monitor = client.get(f"/redfish/v1/TaskService/TaskMonitors/{task_id}", headers=ADMIN)
    assert monitor.status_code == 200 and monitor.get_json()["TaskState"] == "Completed"
    service = client.get("/redfish/v1/TaskService", headers=ADMIN).get_json()
    assert service["Tasks"]["@odata.id"] == "/redfish/v1/TaskService/Tasks"
    assert client.get("/redfish/v1/TaskService/Tasks/nope", headers=ADMIN).status_code == 404


def test_offered_reset_types_are_the_supported_ones(client, systems):
    action = client.get(SYS_URI, headers=ADMIN).get_json()["Actions"]["#ComputerSystem.Reset"]
    assert action["ResetType@Redfish.AllowableValues"] == [
        "On",
        "ForceOn",
        "ForceOff",
        "GracefulShutdown",
        "GracefulRestart",
        "ForceRestart",
        "PowerCycle",
        "PushPowerButton",
        "Pause",
        "Resume",
    ]


def test_force_on_and_power_cycle_wait_for_pending_media_like_on(client, store, systems, queues):
    client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    for kind in ("ForceOn", "PowerCycle"):
        resp = client.post(RESET_URI, json={"ResetType": kind}, headers=ADMIN)
        assert resp.status_code == 202
        assert task_of(client, resp)["TaskState"] == "Pending"
        assert client.get(SYS_URI, headers=ADMIN).get_json()["PowerState"] == "PoweringOn"
    assert store.get_power(SYS)["deferred"] == "PowerCycle"
    assert queues.names("fleetfish.power") == []


def running(store, system_id: str) -> None:
    """Mirror the system as a running VM, as the watcher would."""
    doc = store.get_system(system_id)
    store.put_system({**doc, "runStrategy": "Always", "printableStatus": "Running"})


def test_power_button_of_an_off_system_powers_on_after_the_media(client, store, systems, queues):
    client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    resp = client.post(RESET_URI, json={"ResetType": "PushPowerButton"}, headers=ADMIN)
    task = task_of(client, resp)
    assert (task["Name"], task["TaskState"]) == ("Reset PushPowerButton", "Pending")
    assert store.get_power(SYS)["deferred"] == "On"
    assert client.get(SYS_URI, headers=ADMIN).get_json()["PowerState"] == "PoweringOn"
    # Pressed again while it is coming on: the press turns it off, so the power-on is cancelled.
    again = client.post(RESET_URI, json={"ResetType": "PushPowerButton"}, headers=ADMIN)
    assert task_of(client, resp)["TaskState"] == "Cancelled"
    assert queues.messages("fleetfish.power") == [
        {"task": "power.reset", "args": [SYS, "GracefulShutdown", again.get_json()["Id"]]}
    ]


def test_power_button_of_a_running_system_shuts_it_down_now(client, store, systems, queues):
    running(store, SYS)
    resp = client.post(RESET_URI, json={"ResetType": "PushPowerButton"}, headers=ADMIN)
    assert resp.status_code == 202
    assert queues.messages("fleetfish.power") == [
        {"task": "power.reset", "args": [SYS, "GracefulShutdown", resp.get_json()["Id"]]}
    ]
    assert store.get_task(resp.get_json()["Id"])["name"] == "Reset PushPowerButton"
