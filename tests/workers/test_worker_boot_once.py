"""A one-time boot override ends once, for its own power-on only, and never marks the VM
RestartRequired, with real workers."""

from __future__ import annotations

import requests

from tests.workers.conftest import system, wait_for

VM0 = "ostest-master-0"


def disk_orders(lab) -> dict:
    disks = lab.vm(VM0)["spec"]["template"]["spec"]["domain"]["devices"]["disks"]
    return {d["name"]: d.get("bootOrder") for d in disks}


def restart_required(lab) -> bool:
    conditions = lab.vm(VM0).get("status", {}).get("conditions") or []
    return any(c["type"] == "RestartRequired" and c["status"] == "True" for c in conditions)


def power_cycle(lab, sid: str) -> list[dict]:
    """ForceOff, then On; the boot records of that On."""
    before = len(lab.boots(VM0))
    off, _ = lab.reset(sid, "ForceOff")
    assert wait_for(lambda: lab.task_done(off), 30, "ForceOff")["state"] == "Completed"
    wait_for(lambda: lab.vm(VM0)["status"].get("printableStatus") == "Stopped", 10, "Stopped")
    on, _ = lab.reset(sid, "On")
    assert wait_for(lambda: lab.task_done(on), 30, "Reset On")["state"] == "Completed"
    return wait_for(lambda: lab.boots(VM0)[before:], 10, "the boot")


def test_a_one_time_boot_ends_for_its_own_power_on_only_and_needs_no_restart(lab):
    lab.start_kubesim(vms=1, import_seconds=1)
    lab.start_worker("w1")
    sid = system(VM0)
    insert = lab.insert(sid, lab.iso())
    assert wait_for(lambda: lab.task_done(insert), 30, "media inserted")["state"] == "Completed"
    # Every VMI read of this power-on and of the check that follows its start takes 3 s, as
    # under load or after a redelivery: the next cycle's one-time Cd request arrives meanwhile.
    fault = {
        "method": "GET",
        "path_regex": f"/virtualmachineinstances/{VM0}$",
        "delay_seconds": 3,
        "count": 3,
    }
    requests.post(f"{lab.kube_url}/lab/faults", json=fault, timeout=5).raise_for_status()
    lab.boot_once_cd(sid)
    first, verdict = lab.reset(sid, "On")
    assert verdict == "run"
    boots = wait_for(lambda: lab.boots(VM0), 30, "the first boot")
    lab.boot_once_cd(sid)
    assert wait_for(lambda: lab.task_done(first), 30, "Reset On")["state"] == "Completed"
    assert [b["kind"] for b in boots] == ["cdrom"]
    # What Ironic set last is still what the system reports and what the next power-on uses.
    boot = lab.store.get_boot(sid)
    assert (boot["enabled"], boot["target"]) == ("Once", "Cd"), boot
    # The running VM's order is the one it started with, and nothing asks for a restart.
    assert disk_orders(lab)["cdrom"] == 1
    assert not restart_required(lab)
    boots = power_cycle(lab, sid)
    assert [(b["kind"], b["image_url"]) for b in boots] == [("cdrom", lab.iso())]
    # This power-on consumed the second request: the next one boots the disk.
    wait_for(lambda: lab.store.get_boot(sid).get("enabled") == "Disabled", 10, "Once ended")
    assert not restart_required(lab)
    assert [b["kind"] for b in power_cycle(lab, sid)] == ["disk"]
    assert disk_orders(lab) == {"rootdisk": 1, "cdrom": None}
    assert not restart_required(lab)


def test_a_boot_override_set_while_running_waits_for_the_next_power_on(lab):
    lab.start_kubesim(vms=1, import_seconds=1)
    lab.start_worker("w1")
    sid = system(VM0)
    on, _ = lab.reset(sid, "On")
    assert wait_for(lambda: lab.task_done(on), 30, "Reset On")["state"] == "Completed"
    gen = lab.store.set_boot(sid, enabled="Continuous", target="Pxe", mode="UEFI")
    from fleetfish import wire

    sent = wire.boot_apply(lab.client, sid, gen)
    wire.publish(lab.store.r, sent)
    # Tasks outside the media chord store no Celery result; a run that ended leaves its marker.
    wait_for(lambda: lab.store.r.get(f"ff:run:{sent.task_id}:final"), 30, "boot.apply ran")
    assert disk_orders(lab) == {"rootdisk": 1, "cdrom": None}
    assert not restart_required(lab)
    power_cycle(lab, sid)
    interfaces = lab.vm(VM0)["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"]
    assert interfaces[0].get("bootOrder") == 1
