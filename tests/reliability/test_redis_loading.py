"""Redis restarted with a dataset that takes seconds to load: while it answers LOADING the API
answers 503 Redfish errors with Retry-After, the workers wait, and nothing stored is lost."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from tests import redis_dataset
from tests.e2e.conftest import lab_vm_names
from tests.helpers import Redfish, system_id, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

VMS = 2
IMPORT_SECONDS = 3
# Bounds, far above what the test needs: the restart with ~2 s of loading, then recovery.
RESTART_SECONDS = 60
RECOVERY_SECONDS = 60


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(vms=VMS, import_seconds=IMPORT_SECONDS, workers=1, visibility_timeout=8)


def stored_state(rf, vm: str) -> dict:
    system, media = rf.system(vm), rf.media(vm)
    return {
        "power": system["PowerState"],
        "boot": system["Boot"],
        "image": media.get("Image"),
        "inserted": media.get("Inserted"),
        "state": media["Status"]["State"],
    }


def test_api_answers_503_while_redis_loads_and_nothing_is_lost(stack, rf):
    done_vm, busy_vm = lab_vm_names(VMS)
    done_image = f"{stack.iso_url}/images/loading-done.iso"
    busy_image = f"{stack.iso_url}/images/loading-busy.iso"
    inserted = rf.insert(done_vm, done_image)
    assert inserted.status_code == 202, inserted.text
    wait_for(lambda: rf.task(inserted)["TaskState"] == "Completed", 30, what="first insert")
    before = stored_state(rf, done_vm)
    assert before["image"] == done_image and before["inserted"] is True

    redis_dataset.fill(stack.redis_url)
    # Work in flight across the restart: the import takes longer than the queueing.
    in_flight = rf.insert(busy_vm, busy_image)
    assert in_flight.status_code == 202, in_flight.text

    stack.redis.stop()
    failures: list[BaseException] = []

    def restart():
        try:
            stack.redis.start(timeout=RESTART_SECONDS)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread below
            failures.append(exc)

    # Callers keep calling through the restart, several at once, as Ironic's conductors do.
    paths = [f"/redfish/v1/Systems/{system_id(vm)}" for vm in (done_vm, busy_vm)]
    paths += [f"{path}/VirtualMedia/Cd" for path in paths]
    samples: list[tuple[float, float, object]] = []  # (began, ended, reply), epoch seconds
    stop = threading.Event()

    def call(path: str) -> None:
        caller = Redfish(stack)
        while not stop.is_set():
            began = time.time()
            reply = caller.raw_get(path)
            samples.append((began, time.time(), reply))
            stop.wait(0.05)

    callers = [threading.Thread(target=call, args=(path,)) for path in paths]
    restarter = threading.Thread(target=restart)
    restarter.start()
    for thread in callers:
        thread.start()
    try:
        restarter.join(RESTART_SECONDS)
        assert not failures, failures
        # Served again: a call that began after the load answers 200.
        loaded = time.time()
        wait_for(
            lambda: any(began > loaded and r.status_code == 200 for began, _, r in samples),
            RECOVERY_SECONDS,
            what="a 200 after the load",
        )
    finally:
        stop.set()
        for thread in [restarter, *callers]:
            thread.join(RESTART_SECONDS)
    load_began, load_ended = redis_dataset.last_load_window(stack.redis.data_dir)
    assert load_ended - load_began >= 1.5, "Redis loaded too fast for the test to mean much"
    statuses = sorted({reply.status_code for _, _, reply in samples})
    assert set(statuses) <= {200, 503}, statuses  # never a 500, never a hang (5 s timeout)
    # Answered while Redis loaded. (A call still retrying when the load ends gets its 200.)
    during = [r for _, ended, r in samples if load_began <= ended <= load_ended]
    print(
        f"\nRedis loaded for {load_ended - load_began:.1f} s; {len(samples)} calls, "
        f"{len(during)} answered meanwhile in at most "
        f"{max((r.elapsed.total_seconds() for r in during), default=0):.2f} s; statuses {statuses}"
    )
    assert during, f"no call was answered while Redis loaded ({len(samples)} calls)"
    assert [r.status_code for r in during] == [503] * len(during)
    for reply in (reply for _, _, reply in samples if reply.status_code == 503):
        assert int(reply.headers["Retry-After"]) > 0
        assert reply.headers["Content-Type"].startswith("application/json")
        error = reply.json()["error"]
        assert error["code"].endswith("ServiceTemporarilyUnavailable")
        assert error["@Message.ExtendedInfo"][0]["Message"]

    # Nothing lost: the stored state, the filler data, and the work that was in flight.
    assert stored_state(rf, done_vm) == before
    client = redis.Redis.from_url(stack.redis_url)
    assert client.dbsize() >= redis_dataset.KEYS
    client.close()
    wait_for(
        lambda: rf.task(in_flight)["TaskState"] == "Completed",
        RECOVERY_SECONDS,
        what="the insert that was in flight during the restart",
    )
    after = stored_state(rf, busy_vm)
    assert after["image"] == busy_image and after["inserted"] is True, after
