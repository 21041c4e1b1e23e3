"""A one-time boot override ends once, for its own power-on only, with real workers."""

from __future__ import annotations

import re

import requests

from tests.workers.conftest import system, wait_for

VM0 = "ostest-master-0"
REVERT_DONE = re.compile(r"boot\.revert_once\[[0-9a-f-]+\] succeeded")


def reverts_done(lab) -> int:
    return len(REVERT_DONE.findall(lab.procs.log("w1")))


def disk_orders(lab) -> dict:
    disks = lab.vm(VM0)["spec"]["template"]["spec"]["domain"]["devices"]["disks"]
    return {d["name"]: d.get("bootOrder") for d in disks}


def test_a_late_end_of_one_time_boot_leaves_the_next_request_alone(lab):
    lab.start_kubesim(vms=1, import_seconds=1)
    lab.start_worker("w1")
    sid = system(VM0)
    insert = lab.insert(sid, lab.iso())
    assert wait_for(lambda: lab.task_done(insert), 30, "media inserted")["state"] == "Completed"
    # The VMI reads of this power-on, of the check that follows its start and of the end of
    # its Once override take 3 s, as under load or after a redelivery: the next cycle's
    # one-time Cd request arrives meanwhile.
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
    assert wait_for(lambda: lab.task_done(first), 30, "Reset On")["state"] == "Completed"
    boots = wait_for(lambda: lab.boots(VM0), 10, "the first boot")
    assert [b["kind"] for b in boots] == ["cdrom"]
    lab.boot_once_cd(sid)
    wait_for(lambda: reverts_done(lab) == 1, 30, "the first power-on's revert to end")
    # What Ironic set last is still what the system reports and what the next power-on uses.
    boot = lab.store.get_boot(sid)
    assert (boot["enabled"], boot["target"]) == ("Once", "Cd"), boot
    assert disk_orders(lab)["cdrom"] == 1
    off, _ = lab.reset(sid, "ForceOff")
    assert wait_for(lambda: lab.task_done(off), 30, "ForceOff")["state"] == "Completed"
    wait_for(lambda: lab.vm(VM0)["status"].get("printableStatus") == "Stopped", 10, "Stopped")
    second, _ = lab.reset(sid, "On")
    assert wait_for(lambda: lab.task_done(second), 30, "Reset On")["state"] == "Completed"
    boots = wait_for(lambda: lab.boots(VM0)[1:], 10, "the second boot")
    assert [(b["kind"], b["image_url"]) for b in boots] == [("cdrom", lab.iso())]
    # This power-on consumed the second request: the VM's own order is back.
    wait_for(lambda: lab.store.get_boot(sid).get("enabled") == "Disabled", 30, "Once ended")
    wait_for(lambda: disk_orders(lab) == {"rootdisk": 1, "cdrom": None}, 10, "order restored")
