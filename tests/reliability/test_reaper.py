"""The lost-work checks of the watcher's reaper.

Against a real Redis: only pending media untouched for the stale period is sent again, once
per period, for its current generation; only ejects whose task never ended are sent again;
only Resets that no worker took within the stale period are sent again, under their own
Celery id, and a superseded one is cancelled instead. Against the lab: a Reset whose message
never reached a worker powers the node on, once; an eject whose message was lost still empties
the drive and deletes the DataVolume.
"""

from __future__ import annotations

import time

import pytest
import requests

from fleetfish.store import KEY_RESETS, KEY_STARTS, Store, key_media
from tests.e2e.conftest import lab_vm_names
from tests.helpers import (
    Redfish,
    boots,
    datavolumes,
    kube_requests,
    system_id,
    wait_boot,
    wait_for,
)
from workers.reaper import (
    resend_lost_resets,
    resend_lost_start_checks,
    resend_stalled,
    resend_stalled_ejects,
)
from workers.watcher import STALE_MEDIA_TIMEOUTS, STALE_RESET_TIMEOUTS

SID = "fleetfish-lab.ostest-master-0"
OTHER = "fleetfish-lab.ostest-master-1"
THIRD = "fleetfish-lab.ostest-master-2"


def _system(store, sid):
    store.put_system({"id": sid, "name": sid})


def test_a_stalled_media_is_found_among_many_systems_read_in_chunks(store):
    # 1,200 systems: the sweep reads their media 500 at a time; the stalled one is in the last.
    ids = [f"fleetfish-lab.node-{n:04d}" for n in range(1200)]
    for sid in ids:
        _system(store, sid)
    began = store.begin_insert(ids[-1], "Cd", "http://iso/late.iso")
    store.begin_insert(ids[0], "Cd", "http://iso/fresh.iso")
    store.r.hset(key_media(ids[-1]), "updated", str(time.time() - 100))
    reads = []
    pipeline = store.r.pipeline

    def counted_pipeline(*args, **kwargs):
        reads.append(1)
        return pipeline(*args, **kwargs)

    store.r.pipeline = counted_pipeline
    try:
        media = store.every_media("Cd", chunk=500)
    finally:
        store.r.pipeline = pipeline
    assert len(reads) == 3  # 500 + 500 + 200 systems, one round trip each
    assert media[ids[-1]]["image"] == "http://iso/late.iso" and media[ids[1]]["gen"] == "0"
    assert resend_stalled(store, lambda *a: None, stale_after=60) == [ids[-1]]
    assert store.get_media(ids[-1])["gen"] == str(began["gen"])


def test_only_stalled_pending_media_is_sent_again_once(store):
    for sid in (SID, OTHER):
        _system(store, sid)
    began = store.begin_insert(SID, "Cd", "http://iso/a.iso")
    store.begin_insert(OTHER, "Cd", "http://iso/b.iso")
    store.r.hset(key_media(SID), "updated", str(time.time() - 100))
    sent = []

    def send(*args):
        sent.append(args)

    assert resend_stalled(store, send, stale_after=60) == [SID]
    assert sent == [(SID, "Cd", int(began["gen"]), "http://iso/a.iso", began["task"])]
    # Touched when sent: not sent again before another stale period.
    assert resend_stalled(store, send, stale_after=60) == []
    assert len(sent) == 1


def test_finished_media_is_left_alone(store):
    _system(store, SID)
    gen = int(store.begin_insert(SID, "Cd", "http://iso/a.iso")["gen"])
    store.update_media(SID, "Cd", gen, state="Enabled")
    store.r.hset(key_media(SID), "updated", str(time.time() - 1000))
    assert resend_stalled(store, lambda *a: None, stale_after=60) == []


def test_only_ejects_whose_task_never_ended_are_sent_again_once(store):
    for sid in (SID, OTHER, THIRD):
        _system(store, sid)
        store.begin_insert(sid, "Cd", "http://iso/a.iso")
    lost = store.begin_eject(SID, "Cd")
    done = store.begin_eject(OTHER, "Cd")
    store.update_task(done["task"], state="Completed")
    store.begin_insert(THIRD, "Cd", "http://iso/b.iso")  # inserting again: the chord's work
    for sid in (SID, OTHER, THIRD):
        store.r.hset(key_media(sid), "updated", str(time.time() - 100))
    sent = []

    def send(*args):
        sent.append(args)

    assert resend_stalled_ejects(store, send, stale_after=60) == [SID]
    assert sent == [(SID, "Cd", int(lost["gen"]), lost["task"])]
    # Touched when sent: not sent again before another stale period.
    assert resend_stalled_ejects(store, send, stale_after=60) == []
    assert len(sent) == 1


def _sent_long_ago(store, task_id):
    store.r.zadd(KEY_RESETS, {task_id: time.time() - 100})


def test_only_resets_no_worker_took_are_sent_again_once(store):
    lost = store.request_power(SID, "On")
    taken = store.request_power(OTHER, "ForceOff")
    store.begin_insert(THIRD, "Cd", "http://iso/c.iso")
    deferred = store.request_power(THIRD, "On")
    assert deferred["verdict"] == "deferred"
    recent = store.request_power(THIRD, "ForceOff")
    for reset in (lost, taken):
        _sent_long_ago(store, reset["task"])
    store.take_reset(taken["task"])  # a worker has it: its own message comes back if it dies
    sent = []

    def send(*args):
        sent.append(args)

    assert resend_lost_resets(store, send, stale_after=60) == [lost["task"]]
    assert sent == [(SID, "On", lost["task"], lost["celery_id"])]
    # Touched when sent: not sent again before another stale period.
    assert resend_lost_resets(store, send, stale_after=60) == []
    assert len(sent) == 1
    # The ForceOff just sent is not due yet; the deferred On waits for its media chord.
    assert set(store.stale_resets(float("inf"))) == {lost["task"], recent["task"]}


def _later_request(store, later: str) -> str:
    if later == "reset":
        return store.request_power(SID, "On", defer=False)["task"]
    if later == "insert":
        return store.begin_insert(SID, "Cd", "http://iso/a.iso")["task"]
    store.r.hset(key_media(SID), mapping={"inserted": "1", "dv": "ff-dv"})
    return store.begin_eject(SID, "Cd")["task"]


@pytest.mark.parametrize("later", ["reset", "insert", "eject"])
def test_a_lost_power_on_followed_by_another_request_is_cancelled_not_sent(store, later):
    on = store.request_power(SID, "On", defer=False)
    _sent_long_ago(store, on["task"])
    # The client moved on (its retry, or the next step of its sequence): the old power-on
    # would now land out of order (before the next ISO is attached, say).
    after = _later_request(store, later)
    sent = []
    assert resend_lost_resets(store, lambda *a: sent.append(a), stale_after=60) == []
    assert sent == []
    task = store.get_task(on["task"])
    assert task["state"] == "Cancelled" and after in task["message"]
    assert on["task"] not in store.stale_resets(float("inf"))


@pytest.mark.parametrize(
    ("later", "cancelled"), [("reset", True), ("insert", False), ("eject", False)]
)
def test_a_lost_power_off_is_cancelled_only_by_a_later_reset(store, later, cancelled):
    off = store.request_power(SID, "ForceOff")
    _sent_long_ago(store, off["task"])
    # Ironic sends EjectMedia and InsertMedia right after its ForceOff: they change no power
    # state, so the node must still go off. Only the client's next Reset supersedes it.
    _later_request(store, later)
    sent = []
    resent = resend_lost_resets(store, lambda *a: sent.append(a), stale_after=60)
    assert (resent == []) is cancelled
    assert (store.get_task(off["task"])["state"] == "Cancelled") is cancelled
    assert [a[1] for a in sent] == ([] if cancelled else ["ForceOff"])


def test_a_reset_released_by_an_eject_is_the_latest_request(store):
    store.begin_insert(SID, "Cd", "http://iso/a.iso")
    on = store.request_power(SID, "On")
    released = store.begin_eject(SID, "Cd")
    assert released["released_task"] == on["task"]
    _sent_long_ago(store, on["task"])
    sent = []
    assert resend_lost_resets(store, lambda *a: sent.append(a), stale_after=60) == [on["task"]]
    assert sent == [(SID, "On", on["task"], released["released_celery_id"])]


VISIBILITY = 3


@pytest.mark.e2e
@pytest.mark.slow
def test_a_reset_whose_message_was_lost_powers_the_node_on_once(lab_factory):
    stack = lab_factory(vms=1, import_seconds=1, workers=1, visibility_timeout=VISIBILITY)
    vm = lab_vm_names(1)[0]
    sid = system_id(vm)
    rf = Redfish(stack)
    assert rf.system(vm)["PowerState"] == "Off"
    store = Store.from_url(stack.redis_url)
    since = time.time()
    # What the API records for a Reset On; the power.reset message itself never reaches a
    # worker (API killed before sending it, or popped by a host that was cut off).
    reset = store.request_power(sid, "On")
    assert reset["verdict"] == "run"
    stale = STALE_RESET_TIMEOUTS * VISIBILITY
    record = wait_boot(stack, vm, since, stale + 30)
    assert record["kind"] == "disk"
    task_uri = f"/redfish/v1/TaskService/Tasks/{reset['task']}"
    wait_for(lambda: rf.get(task_uri)["TaskState"] == "Completed", 30, what="Reset task done")
    wait_for(lambda: rf.system(vm)["PowerState"] == "On", 30, what="PowerState On")
    recorded = store.get_task(reset["task"])
    assert float(recorded["sent"]) - float(recorded["start"]) >= stale  # the reaper's send
    assert recorded["picked"]
    # Taken by a worker: nothing is left to send again, and the node started once.
    assert store.stale_resets(float("inf")) == []
    assert [b["vmi_uid"] for b in boots(stack, since) if b["vm"] == vm] == [record["vmi_uid"]]
    starts = [
        r
        for r in kube_requests(stack, since)
        if r["method"] == "PUT" and r["path"].endswith(f"/virtualmachines/{vm}/start")
    ]
    assert len(starts) == 1, starts
    store.r.close()


@pytest.mark.e2e
@pytest.mark.slow
def test_an_eject_whose_message_was_lost_still_empties_the_drive(lab_factory):
    stack = lab_factory(vms=1, import_seconds=1, workers=1, visibility_timeout=VISIBILITY)
    vm = lab_vm_names(1)[0]
    sid = system_id(vm)
    rf = Redfish(stack)
    insert = rf.insert(vm, f"{stack.iso_url}/images/lost-eject.iso")
    assert insert.status_code == 202
    wait_for(lambda: rf.task(insert)["TaskState"] == "Completed", 60, what="media inserted")
    assert [d["metadata"]["name"] for d in datavolumes(stack)]
    store = Store.from_url(stack.redis_url)
    # What the API records for an EjectMedia; the media.eject message itself never reaches a
    # worker (popped by a worker SIGKILLed at that instant, or the API killed before sending).
    eject = store.begin_eject(sid, "Cd")
    assert rf.media(vm)["Inserted"] is False
    stale = STALE_MEDIA_TIMEOUTS * VISIBILITY
    task_uri = f"/redfish/v1/TaskService/Tasks/{eject['task']}"
    wait_for(lambda: rf.get(task_uri)["TaskState"] == "Completed", stale + 30, what="eject done")
    wait_for(lambda: not datavolumes(stack), 10, what="the DataVolume deleted")
    volumes = requests.get(
        f"{stack.kube_url}/apis/kubevirt.io/v1/namespaces/fleetfish-lab/virtualmachines/{vm}",
        timeout=5,
    ).json()["spec"]["template"]["spec"]["volumes"]
    assert "cdrom" not in [v["name"] for v in volumes]
    store.r.close()


def test_only_a_start_whose_check_stopped_running_is_checked_again(store):
    _system(store, SID)
    on = store.request_power(SID, "On")
    store.r.hset(f"ff:task:{on['task']}", "vmi_before", "-")
    started = store.follow_start(on["task"])
    done = store.request_power(SID, "ForceOff")
    store.follow_start(done["task"])
    store.update_task(done["task"], state="Completed")
    sent = []

    def send(*args):
        sent.append(args)

    assert resend_lost_start_checks(store, send, stale_after=60) == []
    # No check of either start ran for 100 s: their messages were lost.
    store.r.zadd(KEY_STARTS, {on["task"]: started - 100, done["task"]: started - 100})
    assert resend_lost_start_checks(store, send, stale_after=60) == [on["task"]]
    # Sent with the start time, so the copy counts the bound from the start.
    assert sent == [(SID, on["task"], "", started)]
    # The ended task is forgotten; the other was touched: not sent again within a period.
    assert resend_lost_start_checks(store, send, stale_after=60) == []
    assert store.r.zscore(KEY_STARTS, done["task"]) is None


@pytest.mark.e2e
@pytest.mark.slow
def test_a_start_check_whose_message_was_lost_still_ends_the_reset(lab_factory):
    power_on_timeout = 5
    stack = lab_factory(
        vms=1,
        import_seconds=1,
        workers=1,
        visibility_timeout=VISIBILITY,
        extra_env={"FLEETFISH_POWER_ON_TIMEOUT": str(power_on_timeout)},
    )
    vm = lab_vm_names(1)[0]
    sid = system_id(vm)
    rf = Redfish(stack)
    store = Store.from_url(stack.redis_url)
    # A worker started the VM for this Reset and died; the power.verify it sent was lost
    # (popped by a worker that was cut off): the task would stay Running for ever.
    reset = store.request_power(sid, "On")
    store.take_reset(reset["task"])
    store.r.hset(f"ff:task:{reset['task']}", mapping={"vmi_before": "-", "state": "Running"})
    store.follow_start(reset["task"])
    requests.put(
        f"{stack.kube_url}/apis/subresources.kubevirt.io/v1/namespaces/fleetfish-lab"
        f"/virtualmachines/{vm}/start",
        json={},
        timeout=5,
    ).raise_for_status()
    stale = STALE_RESET_TIMEOUTS * VISIBILITY
    task_uri = f"/redfish/v1/TaskService/Tasks/{reset['task']}"
    wait_for(
        lambda: rf.get(task_uri)["TaskState"] == "Completed", stale + 30, what="Reset task done"
    )
    assert rf.system(vm)["PowerState"] == "On"
    assert store.unsettled_starts(float("inf")) == []
    store.r.close()
