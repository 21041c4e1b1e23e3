"""The media chord and the deferred Reset with real worker processes against the simulator."""

from __future__ import annotations

import signal
import time

from tests.workers.conftest import system, wait_for

VM0, VM1, VM2 = "ostest-master-0", "ostest-master-1", "ostest-master-2"


def cd_boots(lab, vm: str) -> list[dict]:
    return [b for b in lab.boots(vm) if b["kind"] == "cdrom"]


def test_reset_on_while_pending_is_deferred_and_boots_the_iso_after_attach(lab):
    lab.start_kubesim(vms=1, import_seconds=2)
    lab.start_worker("w1")
    sid = system(VM0)
    lab.boot_once_cd(sid)
    insert_task = lab.insert(sid, lab.iso())
    power_task, verdict = lab.reset(sid, "On")
    assert verdict == "deferred"
    # The import takes 2 s: nothing may boot before the media is attached.
    wait_for(lambda: float(lab.store.get_media(sid)["progress"] or 0) > 0, 10, "import progress")
    assert lab.boots(VM0) == []
    wait_for(lambda: lab.task_done(power_task), 30, "deferred Reset done")
    assert lab.task(insert_task)["state"] == "Completed", lab.task(insert_task)
    assert lab.task(power_task)["state"] == "Completed", lab.task(power_task)
    boots = wait_for(lambda: lab.boots(VM0), 10, "a boot record")
    assert len(boots) == 1
    assert boots[0]["kind"] == "cdrom" and boots[0]["image_url"] == lab.iso()
    media = lab.store.get_media(sid)
    assert media["attached"] == "1" and media["state"] == "Enabled" and media["inserted"] == "1"
    # Once: the override is consumed as soon as the VM runs (the VM keeps the order it started
    # with until the next power-on, which writes its own order back).
    assert lab.store.get_boot(sid).get("enabled") == "Disabled"


def test_three_vms_import_in_parallel(lab):
    lab.start_kubesim(vms=3, import_seconds=5)
    lab.start_worker("w1")
    vms = (VM0, VM1, VM2)
    start = time.monotonic()
    tasks = []
    for vm in vms:
        lab.boot_once_cd(system(vm))
        lab.insert(system(vm), lab.iso("boot-b.iso"))
        tasks.append(lab.reset(system(vm), "On")[0])
    for task in tasks:
        wait_for(lambda t=task: lab.task_done(t), 40, "deferred Reset done")
    elapsed = time.monotonic() - start
    for vm, task in zip(vms, tasks, strict=True):
        assert lab.task(task)["state"] == "Completed"
        boots = wait_for(lambda v=vm: lab.boots(v), 10, f"{vm} to boot")
        assert [b["kind"] for b in boots] == ["cdrom"], boots
    # Three sequential imports would take 15 s or more.
    assert elapsed < 11, f"took {elapsed:.1f} s"


def test_missing_image_fails_the_insert_and_leaves_the_vm_off(lab):
    lab.start_kubesim(vms=1, import_seconds=1)
    lab.start_worker("w1")
    sid = system(VM0)
    insert_task = lab.insert(sid, lab.iso("missing.iso"))
    power_task, verdict = lab.reset(sid, "On")
    assert verdict == "deferred"
    wait_for(lambda: lab.task_done(insert_task), 60, "insert task to end")
    task = lab.task(insert_task)
    assert task["state"] == "Exception" and "404" in task["message"], task
    power = wait_for(lambda: lab.task_done(power_task), 10, "power task to end")
    assert power["state"] == "Exception" and "not powered on" in power["message"]
    media = lab.store.get_media(sid)
    assert media["inserted"] == "0" and media["health"] == "Critical" and "404" in media["message"]
    assert lab.boots(VM0) == []
    assert lab.vm(VM0)["status"].get("printableStatus") == "Stopped"
    # The task ends first; the cleanup follows, and deletion goes through CDI's finalizers.
    wait_for(lambda: lab.dvs() == [], 10, "the failed DataVolume deleted")


def test_eject_while_pending_leaves_no_datavolume(lab):
    lab.start_kubesim(vms=1, import_seconds=3)
    lab.start_worker("w1")
    sid = system(VM0)
    insert_task = lab.insert(sid, lab.iso())
    wait_for(lambda: lab.dvs(), 10, "the DataVolume to exist")
    eject_task = lab.eject(sid)
    wait_for(lambda: lab.task_done(eject_task), 20, "eject done")
    assert lab.task(eject_task)["state"] == "Completed"
    wait_for(lambda: lab.task_done(insert_task), 20, "superseded insert to end")
    assert lab.task(insert_task)["state"] == "Cancelled"
    # Outlive the import time: a stale poll must not recreate or attach anything.
    wait_for(lambda: lab.dvs() == [], 10, "no DataVolume left")
    time.sleep(0)  # the checks below are the end state, not a wait
    volumes = lab.vm(VM0)["spec"]["template"]["spec"]["volumes"]
    assert [v["name"] for v in volumes] == ["rootdisk"]
    assert lab.store.get_media(sid)["inserted"] == "0"


def test_every_insert_of_the_same_image_imports_a_fresh_datavolume(lab):
    lab.start_kubesim(vms=1, import_seconds=1)
    lab.start_worker("w1")
    sid = system(VM0)
    first = lab.insert(sid, lab.iso())
    wait_for(lambda: lab.task_done(first), 20, "first insert")
    dvs = lab.dvs()
    assert len(dvs) == 1
    # A new insert of the same URL mounts what the URL serves now: its own DataVolume, and
    # the previous one goes once the new one is attached.
    second = lab.insert(sid, lab.iso())
    done = wait_for(lambda: lab.task_done(second), 20, "second insert")
    assert done["state"] == "Completed", done
    wait_for(lambda: len(lab.dvs()) == 1 and lab.dvs() != dvs, 20, "only the new DataVolume")
    assert lab.store.get_media(sid)["dv"] == lab.dvs()[0]
    volumes = lab.vm(VM0)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "cdrom", "dataVolume": {"name": lab.dvs()[0], "hotpluggable": True}} in volumes


def test_killed_worker_mid_import_is_finished_by_another_with_one_boot(lab):
    lab.start_kubesim(vms=1, import_seconds=4)
    lab.start_worker("w1")
    sid = system(VM0)
    lab.boot_once_cd(sid)
    lab.insert(sid, lab.iso())
    power_task, _ = lab.reset(sid, "On")
    # w1 alone holds the import poll (an ETA message) when it dies.
    wait_for(lambda: float(lab.store.get_media(sid)["progress"] or 0) > 0, 10, "import running")
    lab.procs.kill("w1", signal.SIGKILL)
    lab.start_worker("w2")
    # Visibility timeout 10 s: the unacked poll comes back to w2.
    wait_for(lambda: lab.task_done(power_task), 60, "deferred Reset done by w2")
    assert lab.task(power_task)["state"] == "Completed"
    wait_for(lambda: cd_boots(lab, VM0), 10, "the cdrom boot")
    assert len(lab.boots(VM0)) == 1
