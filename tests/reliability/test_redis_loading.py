"""Redis restarted with a dataset that takes seconds to load: while it answers LOADING the API
answers 503 Redfish errors with Retry-After, the workers wait, and nothing stored is lost."""

from __future__ import annotations

import threading

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


def redis_loading(probe: redis.Redis) -> int | None:
    """1 while Redis loads its dataset, 0 once it serves, None when nothing answers."""
    try:
        return int(probe.info("persistence")["loading"])
    except redis.exceptions.BusyLoadingError:  # the connection's set-up met LOADING
        return 1
    except redis.exceptions.ConnectionError:
        return None


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
    samples: list[tuple[int | None, object]] = []  # (Redis loading when the call began, reply)
    stop = threading.Event()

    def call(path: str) -> None:
        caller = Redfish(stack)
        probe = redis.Redis.from_url(stack.redis_url, socket_timeout=1, retry=None)
        try:
            while not stop.is_set():
                loading = redis_loading(probe)
                samples.append((loading, caller.raw_get(path)))
                stop.wait(0.05)
        finally:
            probe.close()

    callers = [threading.Thread(target=call, args=(path,)) for path in paths]
    restarter = threading.Thread(target=restart)
    restarter.start()
    for thread in callers:
        thread.start()
    try:
        restarter.join(RESTART_SECONDS)
        assert not failures, failures
        # Served again: a call that began after the load answers 200.
        wait_for(
            lambda: any(loading == 0 and r.status_code == 200 for loading, r in samples),
            RECOVERY_SECONDS,
            what="a 200 after the load",
        )
    finally:
        stop.set()
        for thread in [restarter, *callers]:
            thread.join(RESTART_SECONDS)
    assert redis_dataset.last_load_seconds(stack.redis.data_dir) >= 0.5  # it did load for long
    statuses = sorted({reply.status_code for _, reply in samples})
    assert set(statuses) <= {200, 503}, statuses  # never a 500, never a hang (5 s timeout)
    during = [reply for loading, reply in samples if loading == 1]
    assert any(reply.status_code == 503 for reply in during), (statuses, len(during))
    for reply in (reply for _, reply in samples if reply.status_code == 503):
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
