"""The Kubernetes API misbehaving: 409 on a stale resourceVersion, 500s, answers slower than
the client timeout, dropped and expired watches, and a VM deleted while its media is pending.

Each fault is injected with the simulator's ``/lab/faults``; the test then checks that the
faults were really hit (none left), that Redfish converged, and what the firmware booted.
"""

from __future__ import annotations

import time

import pytest
import redis
import requests

from tests.helpers import (
    add_fault,
    boots,
    clear_faults,
    datavolumes,
    drop_watches,
    system_id,
    vm_datavolumes,
    wait_boot,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

IMPORT_SECONDS = 2
VISIBILITY = 8
NS_PATH = "/namespaces/fleetfish-lab"
# workers/kubevirt.py reads for at most 20 s: a 22 s answer is a client timeout.
SLOW_SECONDS = 22


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(
        vms=3, import_seconds=IMPORT_SECONDS, workers=2, visibility_timeout=VISIBILITY
    )


def faults_left(stack) -> list[dict]:
    return requests.get(f"{stack.kube_url}/lab/faults", timeout=5).json().get("faults", [])


def kube_put(stack, path: str) -> int:
    return requests.put(f"{stack.kube_url}{path}", json={}, timeout=5).status_code


def test_conflicts_errors_and_timeouts_are_retried_and_the_node_boots_once(stack, rf):
    vm = "ostest-master-0"
    vm_path = f"{NS_PATH}/virtualmachines/{vm}"
    image = f"{stack.iso_url}/images/kube-faults-{vm}.iso"
    since = time.time()
    try:
        add_fault(stack, method="POST", path_regex=f"{NS_PATH}/datavolumes$", status=500, count=2)
        # DataVolumes are read through the watcher's watch: it reconnects (dropped below) into
        # two failures before it follows the import again.
        add_fault(stack, method="GET", path_regex=f"{NS_PATH}/datavolumes$", status=500, count=2)
        add_fault(stack, method="GET", path_regex=f"{vm_path}$", delay_seconds=SLOW_SECONDS)
        add_fault(stack, method="PUT", path_regex=f"{vm_path}$", status=409, count=2)
        add_fault(stack, method="PUT", path_regex=f"{vm_path}/start$", status=500, count=2)
        drop_watches(stack, abrupt=True)
        rf.boot_cd_once(vm)
        insert = rf.insert(vm, image)
        reset = rf.reset(vm, "On")
        assert insert.status_code == 202 and reset.status_code == 202
        record = wait_boot(stack, vm, since, SLOW_SECONDS + 90)
        assert record["kind"] == "cdrom" and record["image_url"] == image
        wait_for(lambda: rf.task(reset)["TaskState"] == "Completed", 30, what="Reset done")
        assert rf.task(insert)["TaskState"] == "Completed"
        assert rf.media(vm)["Status"]["State"] == "Enabled"
        wait_for(lambda: rf.system(vm)["PowerState"] == "On", 20, what="On")
        assert faults_left(stack) == []
        assert len([b for b in boots(stack, since) if b["vm"] == vm]) == 1
        wait_for(lambda: len(vm_datavolumes(stack, vm)) == 1, 15, what=f"one DataVolume of {vm}")
    finally:
        clear_faults(stack)


def test_dropped_failing_and_expired_watches_relist_and_converge(stack, rf):
    vm = "ostest-master-1"
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    synced_before = float(r.hget("ff:mirror", "synced_at") or 0)
    assert rf.system(vm)["PowerState"] == "Off"
    try:
        # Reconnects fail for a while, and when they succeed their resourceVersion is gone.
        add_fault(
            stack, method="GET", path_regex=f"{NS_PATH}/virtualmachines$", status=500, count=3
        )
        drop_watches(stack, abrupt=True)
        # Changed behind fleetfish's back while its watches are down, then the history of
        # that change is forgotten: the reconnecting watches get 410 and must relist.
        start = f"/apis/subresources.kubevirt.io/v1{NS_PATH}/virtualmachines/{vm}/start"
        assert kube_put(stack, start) == 202
        requests.post(f"{stack.kube_url}/lab/compact", timeout=5)
        wait_for(lambda: rf.system(vm)["PowerState"] == "On", 60, what="mirror converged")
        wait_for(
            lambda: float(r.hget("ff:mirror", "synced_at") or 0) > synced_before,
            30,
            what="relist after 410",
        )
        assert faults_left(stack) == []
        # The new watches follow changes again.
        assert rf.reset(vm, "ForceOff").status_code in (202, 204)
        wait_for(lambda: rf.system(vm)["PowerState"] == "Off", 30, what="Off seen by the watch")
    finally:
        clear_faults(stack)
        r.close()


def test_vm_deleted_while_its_media_is_pending(stack, rf):
    vm = "ostest-master-2"
    sid = system_id(vm)
    image = f"{stack.iso_url}/images/deleted-{vm}.iso"
    since = time.time()
    rf.boot_cd_once(vm)
    # Hold the attach's VM read so the VM is certainly deleted before the attach reads it.
    add_fault(stack, method="GET", path_regex=f"{NS_PATH}/virtualmachines/{vm}$", delay_seconds=3)
    try:
        insert = rf.insert(vm, image)
        reset = rf.reset(vm, "On")
        assert insert.status_code == 202 and reset.status_code == 202
        gone = requests.delete(
            f"{stack.kube_url}/apis/kubevirt.io/v1{NS_PATH}/virtualmachines/{vm}", timeout=5
        )
        assert gone.status_code == 200
        # (a 404 Response is falsy: poll on the status, then read the body)
        wait_for(
            lambda: rf.raw_get(f"/redfish/v1/Systems/{sid}").status_code == 404,
            30,
            what="system 404",
        )
        error = rf.raw_get(f"/redfish/v1/Systems/{sid}").json()["error"]
        assert error["code"] and error["@Message.ExtendedInfo"][0]["MessageId"]
        assert sid in error["@Message.ExtendedInfo"][0]["Message"]
        insert_task = wait_for(
            lambda: (t := rf.task(insert))["TaskState"] == "Exception" and t, 60, what="insert"
        )
        reset_task = wait_for(
            lambda: (t := rf.task(reset))["TaskState"] == "Exception" and t, 30, what="reset"
        )
        for task in (insert_task, reset_task):
            text = " ".join(m.get("Message", "") for m in task.get("Messages", []))
            assert vm in text and "not found" in text.lower(), task
        wait_for(
            lambda: (
                not [d for d in datavolumes(stack) if d["metadata"]["name"].startswith(f"ff-{vm}-")]
            ),
            30,
            what="DataVolume of the deleted VM removed",
        )
        assert [b for b in boots(stack, since) if b["vm"] == vm] == []
    finally:
        clear_faults(stack)
