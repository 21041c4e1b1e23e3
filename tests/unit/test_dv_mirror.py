"""A DataVolume read back from the watcher's mirror tells an import what the DataVolume does,
and a VM's status tells when no VMI can exist (no GET needed)."""

from __future__ import annotations

from tasks.power.reset import vm_has_no_vmi
from workers.dvmirror import as_dv, mirror_fields
from workers.dvstatus import import_status

NOT_FOUND = "Unable to connect to http data source: expected status code 200, got 404"


def datavolume(**status) -> dict:
    return {
        "metadata": {"namespace": "ns", "name": "ff-vm-g1-0a1b2c3d", "resourceVersion": "9"},
        "spec": {"source": {"http": {"url": "http://x/a.iso", "secretRef": "ff-vm-g1-auth"}}},
        "status": status,
    }


def through_mirror(dv: dict) -> dict:
    return as_dv("ns", "ff-vm-g1-0a1b2c3d", mirror_fields(dv))


def test_the_mirror_keeps_what_the_import_judges_by():
    running = datavolume(phase="ImportInProgress", progress="42.50%")
    assert import_status(through_mirror(running)) == import_status(running)
    assert import_status(through_mirror(running)).progress == 42.5
    done = datavolume(phase="Succeeded", progress="100.0%")
    assert import_status(through_mirror(done)).done
    failing = datavolume(
        phase="ImportInProgress",
        restartCount=3,
        conditions=[
            {"type": "Running", "status": "False", "reason": "Error", "message": NOT_FOUND}
        ],
    )
    assert "got 404" in import_status(through_mirror(failing)).error
    failed = datavolume(phase="Failed", conditions=[{"type": "Running", "message": NOT_FOUND}])
    assert import_status(through_mirror(failed)) == import_status(failed)


def test_the_mirror_keeps_deletion_and_the_credentials_secret():
    going = datavolume(phase="ImportInProgress")
    going["metadata"]["deletionTimestamp"] = "2026-12-04T05:00:00Z"
    assert through_mirror(going)["metadata"].get("deletionTimestamp")
    assert not through_mirror(datavolume())["metadata"].get("deletionTimestamp")
    # Deleting a failed one from its mirror deletes its Secret too.
    assert through_mirror(going)["spec"]["source"]["http"]["secretRef"] == "ff-vm-g1-auth"


def vm(strategy: str = "Halted", **status) -> dict:
    base = {"created": False, "printableStatus": "Stopped"}
    return {"spec": {"runStrategy": strategy}, "status": {**base, **status}}


def test_only_a_stopped_halted_vm_with_nothing_pending_has_no_vmi():
    assert vm_has_no_vmi(vm())
    assert vm_has_no_vmi(vm("Manual"))
    assert vm_has_no_vmi(
        {"spec": {"runStrategy": "Halted"}, "status": {"printableStatus": "Stopped"}}
    )
    assert not vm_has_no_vmi(vm("Always"))  # asked to run: a VMI may be on its way
    assert not vm_has_no_vmi(vm(created=True, printableStatus="Stopping"))
    assert not vm_has_no_vmi(vm(printableStatus="Starting"))
    assert not vm_has_no_vmi(vm("Manual", stateChangeRequests=[{"action": "Start"}]))
    assert not vm_has_no_vmi({"spec": {"runStrategy": "Halted"}})  # no status yet: unknown
