"""Media edge cases end to end, each checked in the Redfish state and in the boot records."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import boots, wait_for
from tests.helpers import Redfish, datavolumes, vm_datavolumes

pytestmark = pytest.mark.e2e

IMPORT_SECONDS = 6


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(vms=3, import_seconds=IMPORT_SECONDS, workers=2, visibility_timeout=8)


@pytest.fixture
def rf(stack):
    return Redfish(stack)


def stack_task_running(rf: Redfish, vm: str) -> bool:
    return rf.media(vm)["Status"]["State"] == "Starting"


def test_media_failure_leaves_the_node_off_and_says_why(stack, rf):
    vm = "ostest-master-0"
    rf.power_off_and_eject(vm)
    since = time.time()
    insert = rf.insert(vm, f"{stack.iso_url}/missing/boot-{vm}.iso")
    assert insert.status_code == 202
    rf.boot_cd_once(vm)
    reset = rf.reset(vm, "On")
    assert reset.status_code in (202, 204)
    assert rf.system(vm)["PowerState"] == "PoweringOn"

    media = wait_for(
        lambda: (m := rf.media(vm))["Inserted"] is False and m, 90, what="media failure"
    )
    assert media["Status"]["Health"] == "Critical"
    assert "404" in str(media["Status"])
    assert rf.task(insert)["TaskState"] == "Exception"
    wait_for(lambda: rf.system(vm)["PowerState"] == "Off", 10, what="deferred On dropped")
    assert rf.task(reset)["TaskState"] in ("Cancelled", "Exception")
    assert [b for b in boots(stack, since) if b["vm"] == vm] == []


def test_force_off_cancels_a_deferred_power_on(stack, rf):
    vm = "ostest-master-1"
    rf.power_off_and_eject(vm)
    since = time.time()
    rf.insert(vm, f"{stack.iso_url}/images/forceoff-{vm}.iso")
    on = rf.reset(vm, "On")
    assert rf.system(vm)["PowerState"] == "PoweringOn"
    off = rf.reset(vm, "ForceOff")
    assert off.status_code in (202, 204)
    assert rf.task(on)["TaskState"] == "Cancelled"
    # The media still arrives; the node stays off because the On was cancelled.
    wait_for(lambda: rf.media(vm)["Status"]["State"] == "Enabled", 60, what="media ready")
    assert rf.system(vm)["PowerState"] == "Off"
    assert [b for b in boots(stack, since) if b["vm"] == vm] == []


def test_eject_while_pending_leaves_no_datavolume(stack, rf):
    vm = "ostest-master-2"
    rf.power_off_and_eject(vm)
    rf.insert(vm, f"{stack.iso_url}/images/ejected-{vm}.iso")
    assert rf.eject(vm).status_code in (202, 204)
    assert rf.media(vm)["Inserted"] is False
    wait_for(
        lambda: not [d for d in datavolumes(stack) if vm in d["metadata"]["name"]],
        IMPORT_SECONDS * 4,
        what="DataVolume deleted",
    )


def test_double_insert_of_the_same_image_reuses_one_datavolume(stack, rf):
    vm = "ostest-master-0"
    rf.power_off_and_eject(vm)
    image = f"{stack.iso_url}/images/double-{vm}.iso"
    first = rf.insert(vm, image)
    second = rf.insert(vm, image)
    assert first.status_code == 202 and second.status_code in (202, 204)
    since = time.time()
    rf.boot_cd_once(vm)
    rf.reset(vm, "On")
    record = wait_for(
        lambda: next((b for b in boots(stack, since) if b["vm"] == vm), None), 60, what="boot"
    )
    assert record["kind"] == "cdrom" and record["image_url"] == image
    assert len(vm_datavolumes(stack, vm)) == 1


def test_worker_killed_mid_import_another_finishes_and_the_node_boots_once(stack, rf):
    vm = "ostest-master-1"
    rf.power_off_and_eject(vm)
    image = f"{stack.iso_url}/images/killed-{vm}.iso"
    since = time.time()
    rf.insert(vm, image)
    rf.boot_cd_once(vm)
    rf.reset(vm, "On")
    # Kill one of the two workers while the import is running. Whichever of them held the
    # task, the node must boot its ISO exactly once: redelivery or the survivor finishes it.
    wait_for(lambda: stack_task_running(rf, vm), 10, what="import running")
    stack.kill("worker0")
    try:
        record = wait_for(
            lambda: next((b for b in boots(stack, since) if b["vm"] == vm), None),
            IMPORT_SECONDS + 60,
            what="boot after worker kill",
        )
        assert record["kind"] == "cdrom" and record["image_url"] == image
        wait_for(lambda: rf.system(vm)["PowerState"] == "On", 20, what="On")
        assert len([b for b in boots(stack, since) if b["vm"] == vm]) == 1
        wait_for(lambda: len(vm_datavolumes(stack, vm)) == 1, 15, what="one DataVolume")
    finally:
        stack.restart("worker0")
