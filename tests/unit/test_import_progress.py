"""An import's progress (workers.dvstatus.report_import_progress) on the media, its Redfish
task and the event log, written in one step against a real Redis."""

from __future__ import annotations

from fleetfish.eventlog import EventLog
from workers.dvstatus import report_import_progress

SYSTEM, DEVICE, IMAGE = "ns.vm", "Cd", "http://192.0.2.10/boot-7.iso"


def _report(store, log, began, shown: float) -> bool:
    return report_import_progress(
        store, log, SYSTEM, DEVICE, began["gen"], began["task"], IMAGE, shown
    )


def test_progress_shows_on_the_media_the_task_and_once_per_milestone_in_the_log(store):
    log = EventLog(store.r)
    began = store.begin_insert(SYSTEM, DEVICE, IMAGE)
    assert _report(store, log, began, 10.0)
    assert _report(store, log, began, 20.0)  # the same milestone: no second entry
    assert _report(store, log, began, 55.5)
    assert store.get_media(SYSTEM)["progress"] == "55.5"
    task = store.get_task(began["task"])
    assert task["state"] == "Running" and task["percent"] == "49"
    assert task["message"] == "Importing boot-7.iso: 55.5%"
    messages = [entry["message"] for entry in log.entries(SYSTEM)]
    assert messages == ["Import of boot-7.iso: 50%", "Import of boot-7.iso started"]


def test_progress_of_a_superseded_insert_writes_nothing(store):
    log = EventLog(store.r)
    old = store.begin_insert(SYSTEM, DEVICE, IMAGE)
    new = store.begin_insert(SYSTEM, DEVICE, "http://192.0.2.10/boot-8.iso")
    assert not _report(store, log, old, 30.0)
    assert store.get_media(SYSTEM)["progress"] == "0"
    assert store.get_task(old["task"])["message"] != "Importing boot-7.iso: 30.0%"
    assert store.get_task(new["task"])["percent"] == "0"
    assert log.entries(SYSTEM) == []


def test_progress_never_reopens_an_ended_task(store):
    log = EventLog(store.r)
    began = store.begin_insert(SYSTEM, DEVICE, IMAGE)
    store.update_task(began["task"], state="Cancelled", message="cancelled by the operator")
    assert _report(store, log, began, 80.0)
    task = store.get_task(began["task"])
    assert task["state"] == "Cancelled" and task["message"] == "cancelled by the operator"
    assert store.get_media(SYSTEM)["progress"] == "80.0"
