"""A worker SIGKILLed inside an attach or inside a deferred power-on: another worker finishes.

Each kill is timed with a simulator fault that holds the Kubernetes call open (a delayed VM PUT
for the attach, a delayed ``start`` subresource for the power-on), so the process dies with the
request in flight. The check is what Ironic and the firmware see: the Redfish tasks complete,
the node boots its ISO exactly once, and one DataVolume exists for it.
"""

from __future__ import annotations

import time

import pytest
import requests

from tests.helpers import (
    add_fault,
    boots,
    clear_faults,
    kube_requests,
    system_id,
    vm_datavolumes,
    wait_boot,
    wait_for,
    worker_running,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

IMPORT_SECONDS = 2
VISIBILITY = 8
HOLD_SECONDS = 10


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(
        vms=3, import_seconds=IMPORT_SECONDS, workers=2, visibility_timeout=VISIBILITY
    )


def cdrom_first(stack, vm: str) -> bool:
    reply = requests.get(
        f"{stack.kube_url}/apis/kubevirt.io/v1/namespaces/fleetfish-lab/virtualmachines/{vm}",
        timeout=5,
    )
    disks = reply.json()["spec"]["template"]["spec"]["domain"]["devices"]["disks"]
    return any(d["name"] == "cdrom" and d.get("bootOrder") == 1 for d in disks)


def prepare(stack, rf, vm: str) -> None:
    """Off, empty drive, boot override Cd/Once already written to the VM (so the only VM PUT
    left in the sequence is the attach's)."""
    rf.reset(vm, "ForceOff")
    rf.eject(vm)
    wait_for(lambda: rf.system(vm)["PowerState"] == "Off", 30, what=f"{vm} off")
    wait_for(lambda: not rf.media(vm)["Inserted"], 30, what=f"{vm} ejected")
    rf.boot_cd_once(vm)
    wait_for(lambda: cdrom_first(stack, vm), 30, what="boot override on the VM")


def check_one_iso_boot(stack, rf, vm: str, image: str, since: float, insert, reset) -> None:
    record = wait_boot(stack, vm, since, VISIBILITY * 4 + 30)
    assert record["kind"] == "cdrom" and record["image_url"] == image
    wait_for(lambda: rf.task(insert)["TaskState"] == "Completed", 30, what="InsertMedia done")
    wait_for(lambda: rf.task(reset)["TaskState"] == "Completed", 60, what="deferred Reset done")
    assert rf.system(vm)["PowerState"] == "On"
    # The one-time override is consumed even though the worker that started the VM died.
    wait_for(
        lambda: rf.system(vm)["Boot"]["BootSourceOverrideEnabled"] == "Disabled",
        30,
        what="Once override reverted",
    )
    assert [b["vmi_uid"] for b in boots(stack, since) if b["vm"] == vm] == [record["vmi_uid"]]
    wait_for(lambda: len(vm_datavolumes(stack, vm)) == 1, 15, what=f"one DataVolume of {vm}")


def held_put_answered_after(stack, path_end: str, killed_at: float) -> bool:
    return any(
        r["method"] == "PUT" and r["path"].split("?")[0].endswith(path_end)
        for r in kube_requests(stack, killed_at)
    )


def test_worker_killed_inside_the_attach(stack, rf):
    vm = "ostest-master-0"
    sid = system_id(vm)
    prepare(stack, rf, vm)
    image = f"{stack.iso_url}/images/attach-kill-{vm}.iso"
    add_fault(
        stack,
        method="PUT",
        path_regex=f"/virtualmachines/{vm}$",
        delay_seconds=HOLD_SECONDS,
        count=1,
    )
    victim = None
    try:
        since = time.time()
        insert = rf.insert(vm, image)
        reset = rf.reset(vm, "On")
        assert insert.status_code == 202 and reset.status_code == 202
        victim = wait_for(
            lambda: worker_running(stack, "media.attach", sid), 30, what="attach running"
        )
        assert rf.media(vm)["Status"]["State"] == "Updating"
        killed_at = time.time()
        stack.kill(victim)
        check_one_iso_boot(stack, rf, vm, image, since, insert, reset)
        # The kill really landed inside the held PUT: it was answered only after it.
        assert held_put_answered_after(stack, f"/virtualmachines/{vm}", killed_at)
    finally:
        clear_faults(stack)
        if victim:
            stack.restart(victim)


def test_worker_killed_inside_the_deferred_power_on(stack, rf):
    vm = "ostest-master-1"
    sid = system_id(vm)
    prepare(stack, rf, vm)
    image = f"{stack.iso_url}/images/start-kill-{vm}.iso"
    add_fault(
        stack,
        method="PUT",
        path_regex=f"/virtualmachines/{vm}/start$",
        delay_seconds=HOLD_SECONDS,
        count=1,
    )
    victim = None
    try:
        since = time.time()
        insert = rf.insert(vm, image)
        reset = rf.reset(vm, "On")
        assert insert.status_code == 202 and reset.status_code == 202
        assert rf.system(vm)["PowerState"] == "PoweringOn"
        victim = wait_for(
            lambda: worker_running(stack, "media.release", sid), 30, what="release running"
        )
        killed_at = time.time()
        stack.kill(victim)
        check_one_iso_boot(stack, rf, vm, image, since, insert, reset)
        assert held_put_answered_after(stack, f"/virtualmachines/{vm}/start", killed_at)
    finally:
        clear_faults(stack)
        if victim:
            stack.restart(victim)
