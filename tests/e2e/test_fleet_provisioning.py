"""The original bug report, end to end: Ironic's sequence on every node at once, each node must
boot its own ISO, in about the import time T rather than N x T.

Real processes throughout: gunicorn, embedded Redis, Celery workers, the watcher, and the KubeVirt
simulator, which records what every VM booted from.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import VMTimeline, boots, ironic, lab_vm_names, system_id

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Generous bound for tests on a shared 2-core machine: it still catches any call that waits for
# the import (T is 30 s). The 100 ms target itself is checked by the benchmark (bench/).
FAST_ANSWER_S = 2.0


def run_fleet(stack, count: int, import_seconds: float):
    names = lab_vm_names(count)
    images = {system_id(n): f"{stack.iso_url}/images/boot-{n}.iso" for n in names}
    timeline = VMTimeline(stack)
    started = time.time()
    runs = ironic(stack).provision_all(images, power_timeout=120)
    deadline = started + import_seconds * 3 + 60
    by_vm: dict[str, dict] = {}
    while time.time() < deadline and len(by_vm) < count:
        by_vm = {b["vm"]: b for b in boots(stack, since=started)}
        time.sleep(0.5)
    for name in by_vm:
        timeline.recorded(name)
    timeline.stop()
    return names, images, runs, by_vm, timeline, started


def test_three_nodes_boot_their_own_iso_with_a_30s_import(lab_factory):
    stack = lab_factory(vms=3, import_seconds=30, workers=2)
    names, images, runs, by_vm, timeline, _ = run_fleet(stack, 3, 30)

    assert [r.error for r in runs] == ["", "", ""]
    for name in names:
        record = by_vm.get(name)
        assert record, f"{name} never booted"
        assert record["kind"] == "cdrom", f"{name} booted {record}"
        assert record["image_url"] == images[system_id(name)]
        # Powered on only after the ISO was attached, and promptly after it.
        gap = timeline.started[name] - timeline.attached[name]
        assert 0 <= gap < 2.0, f"{name}: power-on {gap:.2f}s after attach"
    for run in runs:
        assert run.insert_answered - run.insert_requested < FAST_ANSWER_S
        assert run.reset_answered - run.reset_requested < FAST_ANSWER_S
        assert run.power_state in ("On", "PoweringOn")


def test_twenty_nodes_two_workers_finish_in_about_one_import_time(lab_factory):
    import_seconds = 30
    stack = lab_factory(vms=20, import_seconds=import_seconds, workers=2)
    names, images, runs, by_vm, _, started = run_fleet(stack, 20, import_seconds)

    cdrom_boots = [n for n in names if by_vm.get(n, {}).get("kind") == "cdrom"]
    assert len(cdrom_boots) == 20, {n: by_vm.get(n) for n in names if n not in cdrom_boots}
    assert all(by_vm[n]["image_url"] == images[system_id(n)] for n in names)
    makespan = max(b["time"] for b in by_vm.values()) - started
    assert makespan < 1.5 * import_seconds, f"makespan {makespan:.1f}s"


def test_sequential_mode_reproduces_the_bug(lab_factory):
    """The documented legacy switch: one worker, media serialised, Reset not deferred.

    Nodes whose ISO is still waiting behind another node's import boot the empty disk: this is
    what fleetfish fixes, measured rather than assumed.
    """
    stack = lab_factory(vms=3, import_seconds=8, workers=1, legacy_sequential=True)
    names, _, runs, by_vm, _, _ = run_fleet(stack, 3, 8)

    assert all(n in by_vm for n in names), by_vm
    disk_boots = [n for n in names if by_vm[n]["kind"] != "cdrom"]
    assert len(disk_boots) >= 2, by_vm
