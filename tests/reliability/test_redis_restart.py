"""Redis SIGKILLed and restarted on its port with its AOF while media work and deferred
Resets are pending: the API answers 503 Redfish errors meanwhile, nothing is lost after."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import lab_vm_names
from tests.helpers import (
    active_tasks,
    boots,
    system_id,
    vm_datavolumes,
    wait_boot,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

VMS = 4
IMPORT_SECONDS = 4
VISIBILITY = 8
# How long Redis stays down: longer than a poll interval and a lease, so every client notices.
OUTAGE_SECONDS = 6


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(
        vms=VMS, import_seconds=IMPORT_SECONDS, workers=2, visibility_timeout=VISIBILITY
    )


def assert_redfish_503(reply) -> None:
    assert reply.status_code == 503, reply.text
    assert reply.headers["Content-Type"].startswith("application/json")
    assert reply.headers.get("Retry-After")
    error = reply.json()["error"]
    assert error["code"].endswith("ServiceTemporarilyUnavailable")
    assert error["@Message.ExtendedInfo"][0]["Message"]


def test_redis_killed_and_restarted_loses_nothing(stack, rf):
    vms = lab_vm_names(VMS)
    images = {vm: f"{stack.iso_url}/images/redis-{vm}.iso" for vm in vms}
    since = time.time()
    inserts, resets = {}, {}
    for vm in vms:
        rf.boot_cd_once(vm)
        inserts[vm] = rf.insert(vm, images[vm])
        resets[vm] = rf.reset(vm, "On")
        assert inserts[vm].status_code == 202 and resets[vm].status_code == 202
    wait_for(
        lambda: any(rf.media(vm)["Status"]["State"] == "Starting" for vm in vms),
        10,
        what="imports running",
    )
    assert all(rf.system(vm)["PowerState"] == "PoweringOn" for vm in vms)

    stack.redis.kill()
    down_at = time.monotonic()
    try:
        sid = system_id(vms[0])
        assert_redfish_503(rf.raw_get(f"/redfish/v1/Systems/{sid}"))
        assert_redfish_503(rf.raw_get(f"/redfish/v1/Systems/{sid}/VirtualMedia/Cd"))
        assert_redfish_503(rf.reset(vms[0], "ForceOff"))
        assert_redfish_503(rf.insert(vms[0], images[vms[0]] + "?other"))
        # Keep it down for the whole outage on purpose: workers' polls and the watcher's lease
        # renewals must fail and recover, not slip between two connections.
        time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - down_at)))
    finally:
        stack.redis.start()

    for vm in vms:
        record = wait_boot(stack, vm, since, VISIBILITY * 5 + 40)
        assert record["kind"] == "cdrom" and record["image_url"] == images[vm], record
    for vm in vms:
        wait_for(lambda vm=vm: rf.task(resets[vm])["TaskState"] == "Completed", 30, what="Reset")
        assert rf.task(inserts[vm])["TaskState"] == "Completed"
        # PowerState comes from the mirror: the watcher reconnected and follows the cluster.
        wait_for(lambda vm=vm: rf.system(vm)["PowerState"] == "On", 30, what=f"{vm} On")
    records = [b for b in boots(stack, since) if b["vm"] in vms]
    assert sorted(b["vm"] for b in records) == sorted(vms), records
    for vm in vms:
        wait_for(
            lambda v=vm: len(vm_datavolumes(stack, v)) == 1, 15, what=f"one DataVolume of {vm}"
        )
    # Both workers are back on the broker and take new work.
    # A worker that is re-running the work held back by the outage may answer after 1 s.
    wait_for(lambda: len(active_tasks(stack, timeout=3.0)) == 2, 60, what="both workers answer")
    assert rf.reset(vms[0], "ForceOff").status_code in (202, 204)
    wait_for(lambda: rf.system(vms[0])["PowerState"] == "Off", 30, what="Off after recovery")
    # No worker stopped on the outage (a task acknowledged on the dropped connection once
    # made both exit), and none failed to restart a part of itself.
    for name in ("worker0", "worker1"):
        log = (stack.logs_dir / f"{name}.log").read_text(errors="replace")
        assert "Unrecoverable error" not in log, name
        assert "Error on restarting" not in log, name
