"""Reset actions through the real adapter against the simulator, including redelivery and a
copy sent again by the reaper."""

from __future__ import annotations

import pytest
import requests

from fleetfish import wire
from fleetfish.eventlog import EventLog
from fleetfish.settings import Settings
from tasks.power.reset import PowerError, run_power
from tests.workers.conftest import NAMESPACE, system, wait_for
from workers.errors import Transient
from workers.kubevirt import KubeVirt

VM0 = "ostest-master-0"


@pytest.fixture
def power(lab):
    lab.start_kubesim(vms=1, import_seconds=1)
    settings = Settings(
        redis_url=lab.redis_url,
        kubeconfig=str(lab.tmp / "kubeconfig"),
        namespaces=(NAMESPACE,),
    )
    kv = KubeVirt.from_settings(settings)
    yield lambda action, task: run_power(kv, lab.store, settings, system(VM0), action, task)
    kv.close()


def printable(lab) -> str:
    return lab.vm(VM0)["status"].get("printableStatus", "")


def test_power_cycle_of_the_lab_vm(lab, power):
    assert power("On", lab.store.new_task("Reset On", system(VM0))) == "Powered on"
    wait_for(lambda: printable(lab) == "Running", 10, "Running")
    assert power("On", lab.store.new_task("Reset On", system(VM0))) == "Already on"
    assert power("Pause", lab.store.new_task("Reset Pause", system(VM0))) == "Paused"
    wait_for(lambda: printable(lab) == "Paused", 10, "Paused")
    assert power("Resume", lab.store.new_task("Reset Resume", system(VM0))) == "Resumed"
    wait_for(lambda: printable(lab) == "Running", 10, "Running again")
    assert power("ForceOff", lab.store.new_task("Reset ForceOff", system(VM0))) == "Powered off"
    wait_for(lambda: printable(lab) == "Stopped", 10, "Stopped")
    assert power("ForceOff", lab.store.new_task("Reset ForceOff", system(VM0))) == "Already off"
    with pytest.raises(PowerError, match="off"):
        power("Pause", lab.store.new_task("Reset Pause", system(VM0)))


def test_redelivered_restart_does_not_restart_twice(lab, power):
    power("On", lab.store.new_task("Reset On", system(VM0)))
    wait_for(lambda: printable(lab) == "Running", 10, "Running")
    wait_for(lambda: len(lab.boots(VM0)) == 1, 10, "the first boot")
    task = lab.store.new_task("Reset ForceRestart", system(VM0))
    assert power("ForceRestart", task) == "Restarted"
    wait_for(lambda: len(lab.boots(VM0)) == 2, 10, "the restart's boot")
    # The same message delivered again (worker died before acking) must not act again.
    assert "already done" in power("ForceRestart", task)
    # Even if the first delivery died before recording that it acted.
    lab.store.r.hdel(f"ff:task:{task}", "acted")
    assert "VMI replaced" in power("ForceRestart", task)
    restarts = [
        r
        for r in lab.kube("/lab/requests")["requests"]
        if r["method"] == "PUT" and r["path"].endswith("/restart")
    ]
    assert len(restarts) == 1, restarts


def test_transient_errors_are_retried_with_backoff(lab):
    lab.start_kubesim(vms=1, import_seconds=1)
    lab.start_worker("w1")
    fault = {"method": "PUT", "path_regex": "/start$", "status": 500, "count": 1}
    requests.post(f"{lab.kube_url}/lab/faults", json=fault, timeout=5).raise_for_status()
    task, verdict = lab.reset(system(VM0), "On")
    assert verdict == "run"
    done = wait_for(lambda: lab.task_done(task), 30, "Reset On to end")
    assert done["state"] == "Completed", done
    wait_for(lambda: printable(lab) == "Running", 10, "Running")
    starts = [r for r in lab.kube("/lab/requests")["requests"] if r["path"].endswith("/start")]
    assert [r["status"] for r in starts] == [500, 202]


def stop_requests(lab) -> list[dict]:
    return [
        r
        for r in lab.kube("/lab/requests")["requests"]
        if r["method"] == "PUT" and r["path"].endswith(f"/{VM0}/stop")
    ]


def test_redelivered_force_off_leaves_a_vm_started_since_alone(lab, power):
    power("On", lab.store.new_task("Reset On", system(VM0)))
    wait_for(lambda: printable(lab) == "Running", 10, "Running")
    task = lab.store.new_task("Reset ForceOff", system(VM0))
    assert power("ForceOff", task) == "Powered off"
    wait_for(lambda: printable(lab) == "Stopped", 10, "Stopped")
    # The worker died after the stop, before recording it; meanwhile the next Ironic cycle
    # powered the node on again.
    lab.store.r.hdel(f"ff:task:{task}", "acted")
    power("On", lab.store.new_task("Reset On", system(VM0)))
    wait_for(lambda: printable(lab) == "Running", 10, "Running again")
    # The ForceOff's message comes back after the visibility timeout: it must not stop the
    # new VMI.
    assert "already done" in power("ForceOff", task)
    assert len(stop_requests(lab)) == 1
    assert printable(lab) == "Running"
    assert len(lab.boots(VM0)) == 2


def unacked(lab) -> int:
    """Messages workers hold: running, or waiting for a retry countdown."""
    return lab.store.r.hlen("unacked")


def test_a_reset_sent_again_while_its_first_copy_runs_acts_once(lab):
    lab.start_kubesim(vms=1, import_seconds=1)
    lab.start_worker("w1")
    # The first copy is held inside `start` while the reaper's copy (same Redfish task, same
    # Celery id) arrives.
    fault = {"method": "PUT", "path_regex": "/start$", "delay_seconds": 5, "count": 1}
    requests.post(f"{lab.kube_url}/lab/faults", json=fault, timeout=5).raise_for_status()
    task, verdict = lab.reset(system(VM0), "On")
    assert verdict == "run"
    wait_for(lambda: lab.task(task).get("picked"), 20, "the first copy taken")
    recorded = lab.task(task)
    copy = wire.power_reset(lab.client, system(VM0), "On", task, recorded["celery_id"])
    wire.publish(lab.store.r, copy)
    done = wait_for(lambda: lab.task_done(task), 60, "Reset On to end")
    assert done["state"] == "Completed", done
    wait_for(lambda: len(lab.boots(VM0)) == 1, 20, "the boot")
    # The copy has run (or been dropped) once the queue and the reserved tasks are empty.
    wait_for(lambda: not lab.store.r.llen("fleetfish.power") and not unacked(lab), 30, "idle")
    starts = [r for r in lab.kube("/lab/requests")["requests"] if r["path"].endswith("/start")]
    assert len(starts) == 1, starts
    assert len(lab.boots(VM0)) == 1


def test_a_start_that_never_runs_is_stopped_and_reported_after_the_bound(lab):
    # The cluster takes a minute to run a VMI (no node has room, an image pull stalls) and
    # says nothing about why; the bound is 3 s.
    lab.start_kubesim(vms=1, import_seconds=1, start_seconds=60)
    lab.start_worker("w1", FLEETFISH_POWER_ON_TIMEOUT="3")
    task, verdict = lab.reset(system(VM0), "On")
    assert verdict == "run"
    wait_for(lambda: printable(lab) == "Starting", 10, "Starting")
    done = wait_for(lambda: lab.task_done(task), 30, "Reset On to end")
    assert done["state"] == "Exception", done
    assert "did not run within 3 s" in done["message"]
    # Stopped, so it cannot boot later from whatever is there then; the system says why.
    wait_for(lambda: printable(lab) == "Stopped", 30, "Stopped")
    assert "did not run within 3 s" in lab.store.get_power(system(VM0))["error"]
    assert lab.boots(VM0) == []
    # ...and so does its event log, once, as the operator reads it after a failed install.
    failures = [
        e for e in EventLog(lab.store.r).entries(system(VM0)) if e["kind"] == "power_failed"
    ]
    assert len(failures) == 1, failures
    assert failures[0]["severity"] == "Critical"
    assert failures[0]["message"].startswith("Power-on failed: the VM did not run within 3 s")


def test_power_on_while_the_last_shutdown_still_runs_starts_the_vm_once_it_ended(lab):
    """Off then On back to back (Ironic's power cycle by two Resets, a quick client): the
    stopping VMI is not "already on". The On waits for it to end, then starts the VM."""
    lab.start_kubesim(vms=1, import_seconds=1, stop_seconds=3.0)
    settings = Settings(
        redis_url=lab.redis_url, kubeconfig=str(lab.tmp / "kubeconfig"), namespaces=(NAMESPACE,)
    )
    kv = KubeVirt.from_settings(settings)
    try:

        def power(action, task):
            return run_power(kv, lab.store, settings, system(VM0), action, task)

        power("On", lab.store.new_task("Reset On", system(VM0)))
        wait_for(lambda: printable(lab) == "Running", 10, "Running")
        assert power("GracefulShutdown", lab.store.new_task("Reset Off", system(VM0))) == (
            "Shutting down"
        )
        task = lab.store.new_task("Reset On", system(VM0))
        with pytest.raises(Transient, match="shutting down"):
            power("On", task)  # a worker retries it shortly
        wait_for(lambda: printable(lab) == "Stopped", 15, "the shutdown to end")
        assert power("On", task) == "Powered on"
        wait_for(lambda: printable(lab) == "Running", 10, "Running again")
    finally:
        kv.close()


def test_a_worker_holds_a_power_on_until_the_last_shutdown_ended_then_boots_once(lab):
    """The same back-to-back Off and On through the worker fleet: the On's task looks again
    until the old run ended (not counted as a failure), then starts a new VMI."""
    lab.start_kubesim(vms=1, import_seconds=1, stop_seconds=4.0)
    lab.start_worker("w1")
    task, _ = lab.reset(system(VM0), "On")
    assert wait_for(lambda: lab.task_done(task), 30, "first On")["state"] == "Completed"
    wait_for(lambda: printable(lab) == "Running", 10, "Running")
    boots_before = len(lab.boots(VM0))
    off, _ = lab.reset(system(VM0), "GracefulShutdown")
    wait_for(lambda: lab.task_done(off), 30, "GracefulShutdown to end")
    on, verdict = lab.reset(system(VM0), "On")
    assert verdict == "run"
    done = wait_for(lambda: lab.task_done(on), 60, "the second On to end")
    assert done["state"] == "Completed" and done["message"] == "Powered on", done
    wait_for(lambda: printable(lab) == "Running", 10, "Running again")
    assert len(lab.boots(VM0)) == boots_before + 1
