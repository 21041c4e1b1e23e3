"""How a power-on's follow-up reads a VMI: running yet, or blocked by a volume for good."""

from __future__ import annotations

from tasks.power.reset import start_blocker, vmi_running


def vmi(uid: str, phase: str, volumes: list[dict] | None = None) -> dict:
    return {"metadata": {"uid": uid}, "status": {"phase": phase, "volumeStatus": volumes or []}}


def test_only_a_new_vmi_that_runs_counts_as_powered_on():
    assert vmi_running(vmi("b", "Running"), "a")
    assert vmi_running(vmi("b", "Running"), "")
    # The VMI the power-on found (a restart not done yet), or one still scheduling, is not.
    assert not vmi_running(vmi("a", "Running"), "a")
    assert not vmi_running(vmi("b", "Scheduled"), "a")
    assert not vmi_running(None, "")


def test_a_hotplug_volume_whose_claim_is_gone_blocks_the_start():
    pending = {
        "name": "cdrom",
        "phase": "Pending",
        "reason": "FailedPvcNotFound",
        "message": "PVC fleetfish-lab/ff-vm-g3-0a1b2c3d not found",
    }
    volume, reason = start_blocker(vmi("b", "Scheduled", [pending]))
    assert volume == "cdrom"
    assert "cdrom" in reason and "ff-vm-g3-0a1b2c3d not found" in reason


def test_a_volume_still_on_its_way_does_not_block():
    attaching = {"name": "cdrom", "phase": "Bound", "reason": "VolumeBound"}
    ready = {"name": "rootdisk", "phase": "Ready", "reason": "FailedPvcNotFound"}
    assert start_blocker(vmi("b", "Scheduled", [attaching, ready])) == ("", "")
    assert start_blocker(None) == ("", "")
