"""A node's whole life under Ironic, on every node at once, driven with sushy: inspection,
cleaning, deployment and rebuild boots from the same URL whose bytes change each time, eject
and insert back to back. Every boot must come from the right medium with the latest bytes, and
no node may hang, also with a worker SIGKILLed at a random point."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
import requests

from fleetfish.store import key_media
from tests.e2e.conftest import boots, ironic, lab_vm_names, system_id, wait_for
from tests.helpers import Redfish, vm_datavolumes

pytestmark = pytest.mark.e2e

NODES = 6
IMPORT_SECONDS = 2
POWER_ON_TIMEOUT = 30
# A phase: Ironic's calls, the import, the attach, the start; a killed worker's task comes back
# after the visibility timeout (8 s).
PHASE_TIMEOUT = 90


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(
        vms=NODES,
        import_seconds=IMPORT_SECONDS,
        workers=2,
        visibility_timeout=8,
        extra_env={"FLEETFISH_POWER_ON_TIMEOUT": str(POWER_ON_TIMEOUT)},
    )


def boot_url(stack, vm: str) -> str:
    """One URL per node for every phase, as Metal3 serves ``boot-<node uuid>.iso``."""
    return f"{stack.iso_url}/images/boot-{vm}.iso"


def regenerate(stack, vm: str) -> str:
    """New bytes behind the node's URL (a new ramdisk for the next phase); their sha256."""
    reply = requests.post(f"{stack.iso_url}/lab/regenerate/images/boot-{vm}.iso", timeout=5)
    reply.raise_for_status()
    return reply.json()["sha256"]


def served_sha256(stack, path: str) -> str:
    reply = requests.get(f"{stack.iso_url}/lab/images{path}", timeout=5)
    reply.raise_for_status()
    return reply.json()["sha256"]


def boots_since(stack, vms: list[str], since: float) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {vm: [] for vm in vms}
    for record in boots(stack, since):
        if record["vm"] in found:
            found[record["vm"]].append(record)
    return found


def media_datavolume(stack, vm: str) -> str:
    """The DataVolume the node's current media generation uses, as the workers recorded it."""
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    try:
        return client.hget(key_media(system_id(vm)), "dv") or ""
    finally:
        client.close()


def assert_settled(stack, rf: Redfish, vms: list[str], *, inserted: bool) -> None:
    """Nothing left pending: each node On, its media settled, one DataVolume at most."""
    for vm in vms:
        system = wait_for(
            lambda v=vm: (s := rf.system(v))["PowerState"] == "On" and s, 30, what=f"{vm} On"
        )
        assert system["Status"]["Health"] == "OK", system["Status"]
        media = rf.media(vm)
        assert media["Status"]["State"] == "Enabled" and media["Inserted"] is inserted, media
        expected = [media_datavolume(stack, vm)] if inserted else []
        wait_for(
            lambda v=vm, e=expected: vm_datavolumes(stack, v) == e,
            30,
            what=f"only the current DataVolume of {vm}",
        )


class WorkerKiller:
    """SIGKILLs one worker at a random instant of a phase and starts it again afterwards."""

    def __init__(self, stack, seed: int):
        self.stack = stack
        self.random = random.Random(seed)
        self.killed: list[tuple[str, float]] = []
        self._thread: threading.Thread | None = None

    def arm(self, within: float) -> None:
        name = f"worker{self.random.randrange(2)}"
        delay = self.random.uniform(0.0, within)

        def kill() -> None:
            time.sleep(delay)  # the random point of the phase at which the worker dies
            self.stack.kill(name)
            self.killed.append((name, delay))

        self._thread = threading.Thread(target=kill, daemon=True)
        self._thread.start()

    def revive(self) -> None:
        if self._thread:
            self._thread.join(timeout=30)
            name, _ = self.killed[-1]
            self.stack.restart(name)
            self._thread = None


def media_boot_phase(stack, vms: list[str], killer: WorkerKiller | None = None) -> None:
    """One boot from virtual media of every node at once, each with new bytes at its URL."""
    expected = {vm: regenerate(stack, vm) for vm in vms}
    since = time.time()
    if killer:
        killer.arm(within=IMPORT_SECONDS + 2)
    runs = ironic(stack).provision_all(
        {system_id(vm): boot_url(stack, vm) for vm in vms}, power_timeout=60
    )
    if killer:
        killer.revive()
    assert [(r.system_id, r.error) for r in runs if r.error] == []
    found = wait_for(
        lambda: (b := boots_since(stack, vms, since)) and all(b.values()) and b,
        PHASE_TIMEOUT,
        what="every node's boot",
    )
    for vm in vms:
        assert len(found[vm]) == 1, found[vm]
        record = found[vm][0]
        assert (record["kind"], record["image_url"]) == ("cdrom", boot_url(stack, vm)), record
        assert record["sha256"] == expected[vm], f"{vm} booted stale bytes"


def disk_boot_phase(stack, vms: list[str]) -> None:
    since = time.time()
    runs = ironic(stack).boot_all_from_disk([system_id(vm) for vm in vms], power_timeout=60)
    assert [(r.system_id, r.error) for r in runs if r.error] == []
    found = wait_for(
        lambda: (b := boots_since(stack, vms, since)) and all(b.values()) and b,
        PHASE_TIMEOUT,
        what="every node's disk boot",
    )
    for vm in vms:
        assert [r["kind"] for r in found[vm]] == ["disk"], found[vm]


@pytest.fixture
def rf(stack):
    return Redfish(stack)


def test_metal3_lifecycle_boots_every_phase_from_the_latest_bytes(stack, rf):
    vms = lab_vm_names(NODES)
    for _phase in ("inspection", "cleaning", "deployment"):
        media_boot_phase(stack, vms)
        assert_settled(stack, rf, vms, inserted=True)
    disk_boot_phase(stack, vms)
    assert_settled(stack, rf, vms, inserted=False)
    # Rebuild: the same URL again, new bytes, then the disk.
    media_boot_phase(stack, vms)
    disk_boot_phase(stack, vms)
    assert_settled(stack, rf, vms, inserted=False)


def test_lifecycle_with_a_worker_killed_at_a_random_point_of_each_phase(stack, rf):
    seed = int(time.time())
    print(f"worker kill seed: {seed}")
    killer = WorkerKiller(stack, seed)
    vms = lab_vm_names(NODES)
    for _phase in ("inspection", "cleaning", "deployment"):
        media_boot_phase(stack, vms, killer)
        assert_settled(stack, rf, vms, inserted=True)
    disk_boot_phase(stack, vms)
    assert_settled(stack, rf, vms, inserted=False)
    assert len(killer.killed) == 3


def boot_and_check(stack, rf: Redfish, vm: str, url: str, sha256: str) -> None:
    since = time.time()
    rf.boot_cd_once(vm)
    rf.reset(vm, "On")
    record = wait_for(
        lambda: next((b for b in boots(stack, since) if b["vm"] == vm), None),
        PHASE_TIMEOUT,
        what=f"{vm} boot",
    )
    assert (record["kind"], record["image_url"], record["sha256"]) == ("cdrom", url, sha256)


def test_insert_while_inserted_same_url_is_a_no_op_other_url_replaces(stack, rf):
    vm = lab_vm_names(NODES)[0]
    rf.power_off_and_eject(vm)
    url = boot_url(stack, vm)
    assert rf.insert(vm, url).status_code == 202
    wait_for(lambda: rf.media(vm)["Status"]["State"] == "Enabled", PHASE_TIMEOUT, what="media")
    # Documented answer: the same URL while it is inserted changes nothing.
    assert rf.insert(vm, url).status_code == 204
    other = f"{stack.iso_url}/images/other-{vm}.iso"
    assert rf.insert(vm, other).status_code == 202
    boot_and_check(stack, rf, vm, other, served_sha256(stack, f"/images/other-{vm}.iso"))
    assert_settled(stack, rf, [vm], inserted=True)


def test_eject_during_import_then_the_same_url_again_boots_the_new_bytes(stack, rf):
    vm = lab_vm_names(NODES)[1]
    rf.power_off_and_eject(vm)
    url = boot_url(stack, vm)
    regenerate(stack, vm)
    assert rf.insert(vm, url).status_code == 202
    assert rf.eject(vm).status_code in (202, 204)
    sha = regenerate(stack, vm)
    assert rf.insert(vm, url).status_code == 202
    boot_and_check(stack, rf, vm, url, sha)
    assert_settled(stack, rf, [vm], inserted=True)


def test_two_identical_inserts_at_the_same_instant_boot_once(stack, rf):
    vm = lab_vm_names(NODES)[2]
    rf.power_off_and_eject(vm)
    url = boot_url(stack, vm)
    sha = regenerate(stack, vm)
    barrier = threading.Barrier(2)

    def insert() -> int:
        barrier.wait(timeout=10)
        return Redfish(stack).insert(vm, url).status_code

    with ThreadPoolExecutor(max_workers=2) as pool:
        codes = sorted(pool.map(lambda _: insert(), range(2)))
    assert codes in ([202, 202], [202, 204]), codes
    boot_and_check(stack, rf, vm, url, sha)
    assert_settled(stack, rf, [vm], inserted=True)


def test_a_power_on_whose_medium_was_deleted_is_reported_not_left_powering_on(stack, rf):
    vm = lab_vm_names(NODES)[3]
    rf.power_off_and_eject(vm)
    url = boot_url(stack, vm)
    assert rf.insert(vm, url).status_code == 202
    wait_for(lambda: rf.media(vm)["Status"]["State"] == "Enabled", PHASE_TIMEOUT, what="media")
    # Someone deletes the attached DataVolume behind fleetfish's back (a cleanup script, a
    # namespace policy): KubeVirt would hold the VMI Scheduled for ever.
    dv = media_datavolume(stack, vm)
    requests.delete(
        f"{stack.kube_url}/apis/cdi.kubevirt.io/v1beta1/namespaces/fleetfish-lab/datavolumes/{dv}",
        timeout=5,
    ).raise_for_status()
    since = time.time()
    rf.boot_cd_once(vm)
    reset = rf.reset(vm, "On")
    task = wait_for(
        lambda: (t := rf.task(reset))["TaskState"] in ("Completed", "Exception") and t,
        POWER_ON_TIMEOUT,
        what="the power-on's task to end",
    )
    assert task["TaskState"] == "Exception", task
    assert dv in str(task["Messages"]), task
    system = wait_for(
        lambda: (s := rf.system(vm))["PowerState"] == "Off" and s, 30, what=f"{vm} off"
    )
    assert system["Status"]["Health"] == "Critical"
    assert dv in system["Status"]["Conditions"][0]["Message"]
    assert rf.media(vm)["Status"]["Health"] == "Critical"
    assert [b for b in boots(stack, since) if b["vm"] == vm] == []
    # The operator's next cycle works and clears the error.
    sha = regenerate(stack, vm)
    assert rf.insert(vm, url).status_code == 202
    boot_and_check(stack, rf, vm, url, sha)
    assert_settled(stack, rf, [vm], inserted=True)
