"""The worker side under one parent (``python -m workers.host``, LabConfig.worker_parent): the
fleet provisions as with separate processes, a killed worker comes back, a stop ends them all."""

from __future__ import annotations

import os
import re
import signal

import psutil
import pytest
from celery import Celery

from fleetfish.celery_config import celery_config
from fleetfish.settings import Settings
from tests.e2e.conftest import wait_for
from tests.e2e.test_fleet_provisioning import run_fleet

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _started(stack) -> dict[str, int]:
    """Role -> PID of its latest process, from the parent's log."""
    text = (stack.logs_dir / "workers.log").read_text(errors="replace")
    return {name: int(pid) for name, pid in re.findall(r"started (\S+) pid=(\d+)", text)}


def _answering(stack) -> set[str]:
    app = Celery("test-ping")
    app.conf.update(celery_config(Settings(redis_url=stack.redis_url)))
    try:
        return {name.split("@")[0] for reply in app.control.ping(timeout=1.0) for name in reply}
    finally:
        app.close()


def test_one_parent_runs_the_fleet_restarts_a_killed_worker_and_stops_cleanly(lab_factory):
    stack = lab_factory(vms=3, import_seconds=8, workers=2, worker_parent=True)
    parent = psutil.Process(stack.procs["workers"].pid)
    first = wait_for(lambda: len(_started(stack)) == 3 and _started(stack), 30, "three roles")
    assert set(first) == {"worker0", "worker1", "watcher"}
    assert {child.pid for child in parent.children()} == set(first.values())

    os.kill(first["worker0"], signal.SIGKILL)
    again = wait_for(
        lambda: _started(stack)["worker0"] != first["worker0"] and _started(stack), 30, "restart"
    )
    assert psutil.pid_exists(again["worker0"])
    wait_for(lambda: _answering(stack) >= {"worker0", "worker1"}, 60, "both workers answering")

    names, images, runs, by_vm, _, _ = run_fleet(stack, 3, 8)
    assert [r.error for r in runs] == ["", "", ""]
    assert {n: by_vm.get(n, {}).get("kind") for n in names} == {n: "cdrom" for n in names}

    children = parent.children()
    parent.send_signal(signal.SIGTERM)
    assert stack.procs["workers"].wait(60) == 0
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, alive
    log = (stack.logs_dir / "workers.log").read_text(errors="replace")
    assert re.search(r"worker0 pid=\d+ exited \(0\)", log), log[-2000:]
    # Each line names the process it came from: Celery's workers and the watcher's own lines.
    for role in ("worker0", "worker1"):
        assert re.search(rf"INFO {role} \[-\] celery\.apps\.worker: {role}@\S+ ready", log), role
    assert re.search(r" INFO watcher fleetfish\.", log), "no watcher line names its role"
