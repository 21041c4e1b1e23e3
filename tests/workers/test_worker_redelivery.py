"""A killed worker's task comes back within the visibility timeout, whatever else died with it."""

from __future__ import annotations

import requests

from tests.workers.conftest import system, wait_for

VM0 = "ostest-master-0"
VISIBILITY = 10  # FLEETFISH_VISIBILITY_TIMEOUT of the workers (tests/workers/conftest.py)


def test_a_worker_killed_mid_sweep_does_not_hold_back_redelivery(lab):
    lab.start_kubesim(vms=1, import_seconds=1)
    lab.start_worker("w1")
    # w1 is held in its first call to the cluster when it is SIGKILLed with the Reset in hand.
    fault = {"method": "GET", "path_regex": f"/virtualmachines/{VM0}$", "delay_seconds": 20}
    requests.post(f"{lab.kube_url}/lab/faults", json=fault, timeout=5).raise_for_status()
    task, verdict = lab.reset(system(VM0), "On")
    assert verdict == "run"
    wait_for(lambda: lab.task(task).get("picked"), 20, "w1 to take the Reset")
    # A worker that died in the middle of its sweep of the unacked messages leaves the sweep's
    # lock behind, with the expiry the workers' broker settings give it.
    with lab.client.connection_for_write() as conn:
        channel = conn.default_channel
        lock = channel.client.lock(channel.unacked_mutex_key, timeout=channel.unacked_mutex_expire)
        assert lock.acquire(blocking=False)
    lab.procs.kill("w1")
    lab.start_worker("w2")
    done = wait_for(lambda: lab.task_done(task), 3 * VISIBILITY + 15, "w2 to run the Reset")
    assert done["state"] == "Completed", done
    wait_for(lambda: lab.boots(VM0), 20, "the boot")
    assert len(lab.boots(VM0)) == 1
