"""The API's gunicorn stopped with SIGTERM and SIGKILLed while a client hammers it.

Every request must either succeed or fail cleanly (a refused or reset connection, or a
Redfish error body), and no state may be half-written: every InsertMedia or Reset answered
202 has a task that ends, every media slot it touched ends consistent and not pending, no
Reset is left waiting for a message that was lost (the reaper sends it again or cancels it),
and a clean Ironic cycle afterwards boots every node's ISO exactly once.
"""

from __future__ import annotations

import itertools
import signal
import threading
import time
from collections import Counter

import pytest
import redis
import requests

from fleetfish.celery_config import MEDIA_QUEUE, POWER_QUEUE
from fleetfish.store import KEY_RESETS, key_media, key_power, key_task
from lab.ironic import IronicLike
from tests.e2e.conftest import lab_vm_names
from tests.helpers import Redfish, boots, system_id, vm_datavolumes, wait_for
from workers.watcher import STALE_RESET_TIMEOUTS

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

VMS = 3
VISIBILITY = 8
FINAL_TASK_STATES = ("Completed", "Exception", "Cancelled")
CONNECTION_FAILURES = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
)


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(
        vms=VMS, import_seconds=2, workers=2, visibility_timeout=VISIBILITY, api_workers=2
    )


class Hammer(threading.Thread):
    """One client calling InsertMedia, Reset and GET in a loop until stopped (bounded)."""

    def __init__(self, stack, vms: list[str], max_requests: int = 20000):
        super().__init__(daemon=True)
        self.rf = Redfish(stack, timeout=10)
        self.vms = vms
        self.iso = stack.iso_url
        self.max_requests = max_requests
        self.stop_event = threading.Event()
        self.outcomes: Counter = Counter()
        self.unclean: list[str] = []
        self.accepted: list[tuple[str, str, str]] = []  # (vm, op, task monitor)

    def _call(self, op: str, vm: str, n: int) -> requests.Response:
        if op == "insert":
            return self.rf.insert(vm, f"{self.iso}/images/hammer-{vm}-{n % 7}.iso")
        if op == "on":
            return self.rf.reset(vm, "On")
        if op == "off":
            return self.rf.reset(vm, "ForceOff")
        return self.rf.raw_get(f"/redfish/v1/Systems/{system_id(vm)}")

    def run(self) -> None:
        ops = itertools.cycle(["insert", "get", "on", "get", "off", "insert", "get"])
        for n in range(self.max_requests):
            if self.stop_event.is_set():
                return
            op, vm = next(ops), self.vms[n % len(self.vms)]
            try:
                reply = self._call(op, vm, n)
            except CONNECTION_FAILURES as exc:
                self.outcomes[f"{op} {type(exc).__name__}"] += 1
                time.sleep(0.05)  # the API is restarting: do not spin on a closed port
                continue
            self.outcomes[f"{op} {reply.status_code}"] += 1
            self._check(op, vm, reply)

    def _check(self, op: str, vm: str, reply: requests.Response) -> None:
        code = reply.status_code
        if code == 202 and op != "get":
            self.accepted.append((vm, op, reply.headers["Location"]))
        if code >= 400:
            try:
                ok = bool(reply.json()["error"]["@Message.ExtendedInfo"][0]["MessageId"])
            except (ValueError, KeyError, IndexError, TypeError):
                ok = False
            if not ok or code == 500:
                self.unclean.append(f"{op} {vm}: {code} {reply.text[:200]}")
        elif code == 200 and op == "get" and "PowerState" not in reply.json():
            self.unclean.append(f"{op} {vm}: 200 without PowerState")


def api_up(stack) -> bool:
    try:
        return requests.get(f"{stack.redfish_url}/redfish/v1/", timeout=1).status_code == 200
    except requests.RequestException:
        return False


def power_work_left(r: redis.Redis, vms: list[str]) -> list[str]:
    """Power work still to happen: a Reset deferred or running, a Reset sent and not yet taken
    by a worker (a lost one waits for the reaper), a message queued or held by a worker."""
    left = []
    for vm in vms:
        power = r.hgetall(key_power(system_id(vm)))
        if power.get("deferred") or power.get("inflight"):
            left.append(f"{vm}: {power}")
    if r.zcard(KEY_RESETS):
        left.append(f"Resets not taken: {r.zrange(KEY_RESETS, 0, -1)}")
    for queue in (MEDIA_QUEUE, POWER_QUEUE):
        if r.llen(queue):
            left.append(f"{queue}: {r.llen(queue)} queued")
    if r.hlen("unacked"):
        left.append(f"{r.hlen('unacked')} held by workers")
    return left


def cluster_power(stack, vm: str) -> str:
    """On or Off for a VM at rest in the cluster (what it was asked and what it is agree);
    anything else while a start or stop is still under way."""
    reply = requests.get(
        f"{stack.kube_url}/apis/kubevirt.io/v1/namespaces/fleetfish-lab/virtualmachines/{vm}",
        timeout=5,
    )
    obj = reply.json()
    at_rest = {("Always", "Running"): "On", ("Halted", "Stopped"): "Off"}
    state = (obj["spec"].get("runStrategy"), obj["status"].get("printableStatus"))
    return at_rest.get(state, "moving")


def test_api_restarted_under_load_answers_cleanly_and_writes_whole_state(stack):
    vms = lab_vm_names(VMS)
    hammer = Hammer(stack, vms)
    hammer.start()
    restarts = 0
    try:
        for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGKILL):
            served = sum(hammer.outcomes.values())
            wait_for(lambda s=served: sum(hammer.outcomes.values()) > s + 40, 30, what="load")
            stack.kill("api", sig)
            stack.restart("api")
            restarts += 1
            wait_for(lambda: api_up(stack), 30, what="API back")
        served = sum(hammer.outcomes.values())
        wait_for(lambda: sum(hammer.outcomes.values()) > served + 40, 30, what="load after")
    finally:
        hammer.stop_event.set()
        hammer.join(30)
    assert restarts == 3
    assert hammer.unclean == []
    assert hammer.accepted, hammer.outcomes
    failures = sum(v for k, v in hammer.outcomes.items() if "Error" in k or "Timeout" in k)
    print(f"api restarts: {restarts}; outcomes: {dict(hammer.outcomes)}; failed: {failures}")

    rf = Redfish(stack)
    # Every 202 names a task that exists and ends: nothing was left half-way.
    for _vm, op, monitor in hammer.accepted:
        task = "/redfish/v1/TaskService/Tasks/" + monitor.rstrip("/").rsplit("/", 1)[-1]
        wait_for(
            lambda t=task: rf.get(t)["TaskState"] in FINAL_TASK_STATES,
            60,
            what=f"{op} task {monitor} to end",
        )
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    try:
        for vm in vms:
            sid = system_id(vm)
            media = wait_for(
                lambda s=sid: (
                    (m := r.hgetall(key_media(s))).get("state") not in ("Starting", "Updating")
                    and m
                ),
                60,
                what=f"{vm} media settled",
            )
            assert media["gen"] and media["task"] and r.exists(key_task(media["task"]))
            if media["inserted"] == "1":
                assert media["image"].startswith(f"{stack.iso_url}/images/hammer-{vm}-")
                assert media["state"] == "Enabled" and media["health"] == "OK", media
        # The hammer's last Resets end too (a deferred On released by its media just now, a
        # Reset whose message died with the API), then Redfish shows what the cluster has:
        # the Ironic cycle below must start from a node at rest, as it would in production.
        try:
            wait_for(
                lambda: not power_work_left(r, vms),
                STALE_RESET_TIMEOUTS * VISIBILITY + 2 * VISIBILITY + 30,
                what="no power work left",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {power_work_left(r, vms)}") from None
        wait_for(
            lambda: all(rf.system(vm)["PowerState"] == cluster_power(stack, vm) for vm in vms),
            30,
            what="PowerState as in the cluster",
        )
    finally:
        r.close()

    # A clean Ironic cycle over the same nodes boots each one's ISO exactly once.
    since = time.time()
    images = {system_id(vm): f"{stack.iso_url}/images/after-restarts-{vm}.iso" for vm in vms}
    user, password = stack.credentials
    with IronicLike(stack.redfish_url, user, password) as node:
        runs = node.provision_all(images, power_timeout=60)
    assert [run.error for run in runs] == [""] * len(vms)
    wait_for(
        lambda: {b["vm"] for b in boots(stack, since)} >= set(vms), 60, what="every node boots"
    )
    records = [b for b in boots(stack, since) if b["vm"] in vms]
    assert sorted(b["vm"] for b in records) == sorted(vms)
    assert {b["image_url"] for b in records} == set(images.values())
    for vm in vms:
        wait_for(
            lambda v=vm: len(vm_datavolumes(stack, v)) == 1, 15, what=f"one DataVolume of {vm}"
        )
