"""The watcher processes: mirror written from list + watch, lease failover to a standby."""

from __future__ import annotations

import signal
import time

import requests

from fleetfish.store import KEY_MIRROR
from tests.workers.conftest import system, wait_for
from workers.watcher import LEASE_KEY

VM0 = "ostest-master-0"


def status(lab, vm: str) -> str:
    doc = lab.store.get_system(system(vm)) or {}
    return doc.get("printableStatus", "")


def test_mirror_follows_the_cluster_within_a_second(lab):
    lab.start_kubesim(vms=3, import_seconds=1)
    lab.start_watcher("watcher-a")
    wait_for(lambda: len(lab.store.system_ids()) == 3, 20, "the initial list in the mirror")
    assert status(lab, VM0) == "Stopped"
    assert lab.put_subresource(VM0, "start") == 202
    wait_for(lambda: status(lab, VM0) == "Running", 10, "Running in the mirror")
    assert lab.store.get_system(system(VM0))["vmi"]["uid"]
    stopped_at = time.monotonic()
    assert lab.put_subresource(VM0, "stop", {"gracePeriod": 0}) == 202
    # Let the simulator finish the stop, then the mirror must follow within 1 s.
    wait_for(lambda: lab.vm(VM0)["status"].get("printableStatus") == "Stopped", 10, "VM stopped")
    seen = time.monotonic()
    wait_for(lambda: status(lab, VM0) == "Stopped", 1.0, "Stopped in the mirror", interval=0.05)
    assert lab.store.get_system(system(VM0))["vmi"] is None
    assert seen - stopped_at < 10


def test_watch_expiry_relists(lab):
    lab.start_kubesim(vms=1, import_seconds=1)
    lab.start_watcher("watcher-a")
    wait_for(lambda: status(lab, VM0) == "Stopped", 20, "the initial list")
    # Writes the watches do not see move the resourceVersion past the watcher's one...
    for n in range(3):
        dv = {
            "apiVersion": "cdi.kubevirt.io/v1beta1",
            "kind": "DataVolume",
            "metadata": {"name": f"other-{n}"},
            "spec": {
                "source": {"blank": {}},
                "storage": {"resources": {"requests": {"storage": "1Mi"}}},
            },
        }
        url = f"{lab.kube_url}/apis/cdi.kubevirt.io/v1beta1/namespaces/fleetfish-lab/datavolumes"
        requests.post(url, json=dv, timeout=5).raise_for_status()
    # ...then compaction makes it expire: the reconnect after the drop answers 410.
    requests.post(f"{lab.kube_url}/lab/compact", timeout=5).raise_for_status()
    requests.post(f"{lab.kube_url}/lab/watches/drop", timeout=5).raise_for_status()
    assert lab.put_subresource(VM0, "start") == 202
    wait_for(lambda: status(lab, VM0) == "Running", 15, "Running after the relist")
    assert "relisting" in lab.procs.log("watcher-a")


def test_standby_takes_over_when_the_holder_dies(lab):
    lab.start_kubesim(vms=1, import_seconds=1)
    lab.start_watcher("watcher-a")
    holder = wait_for(lambda: lab.store.r.get(LEASE_KEY), 20, "a lease holder")
    wait_for(lambda: status(lab, VM0) == "Stopped", 20, "the initial list")
    lab.start_watcher("watcher-b")
    wait_for(lambda: "standing by" in lab.procs.log("watcher-b"), 20, "the standby to start")
    assert lab.store.r.get(LEASE_KEY) == holder
    lab.procs.kill("watcher-a", signal.SIGKILL)
    killed = time.monotonic()
    new = wait_for(
        lambda: (lab.store.r.get(LEASE_KEY) or holder) != holder and lab.store.r.get(LEASE_KEY),
        8,
        "the standby to take the lease",
    )
    assert time.monotonic() - killed < 6
    assert lab.store.r.hget(KEY_MIRROR, "holder") == new
    assert lab.put_subresource(VM0, "start") == 202
    wait_for(lambda: status(lab, VM0) == "Running", 10, "the new holder to follow changes")


def test_sigterm_frees_the_lease(lab):
    lab.start_kubesim(vms=1, import_seconds=1)
    lab.start_watcher("watcher-a")
    wait_for(lambda: lab.store.r.get(LEASE_KEY), 20, "a lease holder")
    lab.procs.kill("watcher-a", signal.SIGTERM)
    assert lab.procs.procs["watcher-a"].returncode == 0
    assert lab.store.r.get(LEASE_KEY) is None
