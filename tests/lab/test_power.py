"""virt-api power subresources: status codes, messages, run strategies, pause, reset."""

from __future__ import annotations

from tests.lab.kube import wait_until

VMS = "virtualmachines"
VMIS = "virtualmachineinstances"


def _msg(name: str, text: str, singular: str = "virtualmachine") -> str:
    return f'Operation cannot be fulfilled on {singular}.kubevirt.io "{name}": {text}'


def test_start_stop_cycle_with_the_dynamic_client(k8s):
    name = "ostest-master-0"
    k8s.sub(VMS, name, "start")  # through DynamicClient, as a service would
    assert k8s.vm(name)["spec"]["runStrategy"] == "Always"
    seen = set()
    wait_until(lambda: seen.add(k8s.printable(name)) or "Running" in seen, what="Running")
    assert "Starting" in seen
    vm = k8s.vm(name)
    assert vm["status"]["created"] and vm["status"]["ready"]
    vmi = k8s.vmi(name)
    assert vmi["status"]["phase"] == "Running"
    assert (
        vmi["spec"]["domain"]["devices"]["disks"]
        == vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"]
    )
    phases = [p["phase"] for p in vmi["status"]["phaseTransitionTimestamps"]]
    assert phases == ["Pending", "Scheduling", "Scheduled", "Running"]

    code, body = k8s.sub_status(VMS, name, "start")
    assert (code, body["message"], body["reason"]) == (
        409,
        _msg(name, "VM is already running"),
        "Conflict",
    )

    assert k8s.sub_status(VMS, name, "stop")[0] == 202
    assert k8s.vm(name)["spec"]["runStrategy"] == "Halted"
    wait_until(lambda: k8s.printable(name) == "Stopped", what="Stopped")
    assert k8s.vmi(name) is None
    ready = next(c for c in k8s.vm(name)["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "VMINotExists"

    code, body = k8s.sub_status(VMS, name, "stop")
    assert (code, body["message"]) == (409, _msg(name, "VM is not running"))
    code, body = k8s.sub_status(VMS, "missing", "start")
    assert (code, body["message"]) == (404, 'virtualmachine.kubevirt.io "missing" not found')


def test_restart_makes_a_new_vmi_and_is_refused_when_halted(k8s):
    name = "ostest-master-1"
    code, body = k8s.sub_status(VMS, name, "restart")
    assert (code, body["message"]) == (
        409,
        _msg(name, "RunStategy Halted does not support manual restart requests"),
    )
    first = k8s.start_and_wait(name)["metadata"]["uid"]
    code, body = k8s.sub_status(VMS, name, "restart", {"gracePeriodSeconds": 5})
    assert code == 400 and body["reason"] == "BadRequest"
    assert k8s.sub_status(VMS, name, "restart")[0] == 202
    second = wait_until(
        lambda: (
            (v := k8s.vmi(name))
            and v["metadata"]["uid"] != first
            and v["status"]["phase"] == "Running"
            and v["metadata"]["uid"]
        ),
        what="a new running VMI",
    )
    assert second != first
    assert k8s.vm(name)["spec"]["runStrategy"] == "Always"
    assert not k8s.vm(name)["status"].get("stateChangeRequests")


def test_manual_strategy_uses_state_change_requests(k8s):
    name = "ostest-master-2"
    k8s.patch_vm(name, {"spec": {"runStrategy": "Manual"}})
    assert k8s.sub_status(VMS, name, "start")[0] == 202
    assert k8s.vm(name)["spec"]["runStrategy"] == "Manual"
    wait_until(lambda: k8s.printable(name) == "Running", what="Running")
    assert k8s.sub_status(VMS, name, "stop", {"gracePeriod": 0})[0] == 202
    wait_until(lambda: k8s.printable(name) == "Stopped", what="Stopped")
    assert k8s.vm(name)["spec"]["runStrategy"] == "Manual"


def test_always_strategy_refuses_manual_start(k8s):
    name = "ostest-worker-0"
    k8s.patch_vm(name, {"spec": {"runStrategy": "Always"}})
    wait_until(lambda: k8s.vmi(name) is not None, what="a VMI")
    code, body = k8s.sub_status(VMS, name, "start")
    assert code == 409


def test_pause_unpause_and_reset(k8s, sim):
    name = "ostest-master-0"
    code, body = k8s.sub_status(VMIS, name, "pause")
    assert (code, body["message"]) == (
        404,
        f'virtualmachineinstance.kubevirt.io "{name}" not found',
    )
    k8s.start_and_wait(name)

    assert k8s.sub_status(VMIS, name, "pause") == (200, {})
    vm = k8s.vm(name)
    assert vm["status"]["printableStatus"] == "Paused" and vm["status"]["ready"] is False
    paused = next(c for c in vm["status"]["conditions"] if c["type"] == "Paused")
    assert (paused["status"], paused["reason"]) == ("True", "PausedByUser")
    code, body = k8s.sub_status(VMIS, name, "pause")
    assert (code, body["message"]) == (
        409,
        _msg(name, "VMI is already paused", "virtualmachineinstance"),
    )

    assert k8s.sub_status(VMIS, name, "unpause") == (200, {})
    assert k8s.printable(name) == "Running"
    code, body = k8s.sub_status(VMIS, name, "unpause")
    assert (code, body["message"]) == (
        409,
        _msg(name, "VMI is not paused", "virtualmachineinstance"),
    )

    before = len(sim.boots.query(vm=name))
    assert k8s.sub_status(VMIS, name, "reset")[0] == 200
    boots = sim.boots.query(vm=name)
    assert len(boots) == before + 1 and boots[-1]["reason"] == "reset"
    assert k8s.sub_status(VMIS, name, "softreboot")[0] == 200


def test_reset_is_refused_before_running(k8s, iso):
    name = "ostest-master-1"
    k8s.create_dv("pending-media", iso.image_url("reset.iso"))
    volume = {"name": "cdrom", "dataVolume": {"name": "pending-media", "hotpluggable": True}}
    k8s.patch_vm(
        name,
        [{"op": "add", "path": "/spec/template/spec/volumes/-", "value": volume}],
        "application/json-patch+json",
    )
    k8s.sub(VMS, name, "start")
    # the import holds the VMI in Scheduled (the domain is not started yet)
    wait_until(
        lambda: (v := k8s.vmi(name)) and v["status"]["phase"] == "Scheduled", what="Scheduled"
    )
    code, body = k8s.sub_status(VMIS, name, "reset")
    assert code == 400 and body["message"].startswith(
        "Failed to reset non-running VMI with phase Scheduled"
    )
    code, body = k8s.sub_status(VMIS, name, "pause")
    assert (code, body["message"]) == (
        409,
        _msg(name, "VM is not running", "virtualmachineinstance"),
    )


def test_deleting_a_running_vm_removes_its_vmi(k8s):
    name = "ostest-worker-0"
    k8s.start_and_wait(name)
    k8s.custom.delete_namespaced_custom_object("kubevirt.io", "v1", "fleetfish-lab", VMS, name)
    wait_until(lambda: k8s.vmi(name) is None, what="the orphan VMI to go")
