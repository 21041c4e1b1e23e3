"""virt-api's subresources (start, stop, restart, pause, ...) with its status codes and messages."""

from __future__ import annotations

import copy

from lab.kubesim import boot, errors
from lab.kubesim.controller import Controller, run_strategy
from lab.kubesim.kinds import VM, VMI
from lab.kubesim.store import ObjectStore

VM_NOT_RUNNING = "VM is not running"
VMI_NOT_RUNNING = "VMI is not running"


class Subresources:
    """Each handler returns the HTTP status of a success (202 or 200); errors are raised."""

    def __init__(self, store: ObjectStore, controller: Controller):
        self.store = store
        self.controller = controller

    def handle(self, plural: str, ns: str, name: str, action: str, body: dict) -> int:
        body = body if isinstance(body, dict) else {}
        handler = getattr(self, f"{'vm' if plural == 'virtualmachines' else 'vmi'}_{action}", None)
        if handler is None:
            raise errors.ApiError(
                404, "the server could not find the requested resource", "NotFound"
            )
        with self.store.cond:
            return handler(ns, name, body)

    # -- VirtualMachine --------------------------------------------------------------------

    def _vm(self, ns: str, name: str) -> dict:
        vm = self.store.get(VM, ns, name)
        if vm is None:
            raise errors.subresource_not_found("virtualmachine", name)
        return vm

    def _vmi(self, ns: str, name: str) -> dict | None:
        return self.store.peek(VMI, ns, name)

    @staticmethod
    def _dry_run(body: dict) -> bool:
        return "All" in (body.get("dryRun") or [])

    def _append_requests(self, vm: dict, *changes: dict) -> None:
        """getChangeRequestJson: a start/stop already queued makes a second one fail with 500."""
        current = (vm.get("status") or {}).get("stateChangeRequests") or []
        if current and not (len(changes) == 1 and changes[0]["action"] == "Stop"):
            raise errors.internal("unable to complete request: stop/start already underway")
        new = list(changes)

        def edit(obj):
            obj.setdefault("status", {})["stateChangeRequests"] = new

        self.store.mutate(VM, vm["metadata"]["namespace"], vm["metadata"]["name"], edit)

    def _set_strategy(self, vm: dict, strategy: str) -> None:
        def edit(obj):
            spec = obj.setdefault("spec", {})
            if spec.get("runStrategy") is not None or spec.get("running") is None:
                spec["runStrategy"] = strategy
                spec.pop("running", None)
            else:
                spec["running"] = strategy == "Always"

        self.store.mutate(VM, vm["metadata"]["namespace"], vm["metadata"]["name"], edit)

    def vm_start(self, ns: str, name: str, body: dict) -> int:
        vm = self._vm(ns, name)
        vmi = self._vmi(ns, name)
        if vmi is not None and (vmi.get("status") or {}).get("phase") not in (
            None,
            "",
            "Unknown",
            "Succeeded",
            "Failed",
        ):
            raise errors.subresource_conflict("virtualmachine", name, "VM is already running")
        strategy = run_strategy(vm)
        if strategy in ("Always", "Once"):
            raise errors.subresource_conflict(
                "virtualmachine", name, f"{strategy} does not support manual start requests"
            )
        if self._dry_run(body):
            return 202
        if strategy == "Halted":
            self._set_strategy(vm, "Always")
        elif strategy in ("Manual", "RerunOnFailure"):
            self._append_requests(vm, {"action": "Start"})
        return 202

    def vm_stop(self, ns: str, name: str, body: dict) -> int:
        vm = self._vm(ns, name)
        vmi = self._vmi(ns, name)
        grace = body.get("gracePeriod")
        has_vmi = vmi is not None
        strategy = run_strategy(vm)
        old_grace = (
            (vmi.get("spec") or {}).get("terminationGracePeriodSeconds") if has_vmi else None
        )
        if self._dry_run(body):
            dry = True
        else:
            dry = False
            if has_vmi and grace is not None:
                # virt-api shortens the VMI's grace period first: gracePeriod 0 is a force-off
                self.store.mutate(
                    VMI,
                    ns,
                    name,
                    lambda o: o.setdefault("spec", {}).__setitem__(
                        "terminationGracePeriodSeconds", grace
                    ),
                )
        if strategy == "Halted":
            if not has_vmi:
                raise errors.subresource_conflict("virtualmachine", name, VM_NOT_RUNNING)
            if grace is None or (old_grace is not None and grace >= old_grace):
                raise errors.subresource_conflict(
                    "virtualmachine",
                    name,
                    "Halted only supports manual stop requests with a shorter graceperiod",
                )
            if not dry:
                self._append_requests(vm, {"action": "Stop", "uid": vmi["metadata"]["uid"]})
        elif strategy in ("Manual", "RerunOnFailure"):
            if not has_vmi:
                raise errors.subresource_conflict("virtualmachine", name, VM_NOT_RUNNING)
            if not dry:
                self._append_requests(vm, {"action": "Stop", "uid": vmi["metadata"]["uid"]})
        elif not dry:
            self._set_strategy(vm, "Halted")
        return 202

    def vm_restart(self, ns: str, name: str, body: dict) -> int:
        grace = body.get("gracePeriodSeconds")
        if grace is not None and grace > 0:
            raise errors.bad_request("For force restart, only gracePeriod=0 is supported for now")
        if grace is not None and grace < 0:
            raise errors.bad_request("gracePeriod has to be greater or equal to 0")
        vm = self._vm(ns, name)
        strategy = run_strategy(vm)
        if strategy in ("Halted", "Once"):
            raise errors.subresource_conflict(
                "virtualmachine",
                name,
                f"RunStategy {strategy} does not support manual restart requests",
            )
        vmi = self._vmi(ns, name)
        if vmi is None:
            raise errors.subresource_conflict("virtualmachine", name, "VM is not running: Halted")
        if self._dry_run(body):
            return 202
        self._append_requests(
            vm, {"action": "Stop", "uid": vmi["metadata"]["uid"]}, {"action": "Start"}
        )
        if grace == 0:
            self.store.mutate(
                VMI,
                ns,
                name,
                lambda o: o.setdefault("spec", {}).__setitem__("terminationGracePeriodSeconds", 0),
            )
        return 202

    def vm_addvolume(self, ns: str, name: str, body: dict) -> int:
        vm = self._vm(ns, name)
        vname = body.get("name")
        source = body.get("volumeSource") or {}
        disk = body.get("disk")
        if not vname or not source or not isinstance(disk, dict):
            raise errors.bad_request(
                "AddVolumeOptions requires name, disk and volumeSource to be set"
            )
        if "cdrom" in disk:
            raise errors.bad_request(
                "Unable to add volume: cdrom devices can not be hot plugged, use declarative hotplug"
            )
        if not ("dataVolume" in source or "persistentVolumeClaim" in source):
            raise errors.bad_request(
                "AddVolumeOptions requires a dataVolume or persistentVolumeClaim volumeSource"
            )
        tspec = vm["spec"]["template"]["spec"]
        if any(v.get("name") == vname for v in tspec.get("volumes") or []):
            raise errors.subresource_conflict(
                "virtualmachine",
                name,
                f"Unable to add volume [{vname}] because volume with that name already exists",
            )
        if self._dry_run(body):
            return 202
        volume = {"name": vname}
        for key in ("dataVolume", "persistentVolumeClaim"):
            if key in source:
                volume[key] = dict(source[key], hotpluggable=True)
        new_disk = copy.deepcopy(disk)
        new_disk["name"] = vname
        if not any(k in new_disk for k in ("disk", "lun")):
            new_disk["disk"] = {"bus": "scsi"}

        def edit(obj):
            spec = obj["spec"]["template"]["spec"]
            spec.setdefault("volumes", []).append(volume)
            spec.setdefault("domain", {}).setdefault("devices", {}).setdefault("disks", []).append(
                new_disk
            )

        self.store.mutate(VM, ns, name, edit)
        return 202

    def vm_removevolume(self, ns: str, name: str, body: dict) -> int:
        vm = self._vm(ns, name)
        vname = body.get("name")
        if not vname:
            raise errors.bad_request("RemoveVolumeOptions requires name to be set")
        volumes = vm["spec"]["template"]["spec"].get("volumes") or []
        volume = next((v for v in volumes if v.get("name") == vname), None)
        if volume is None:
            raise errors.subresource_conflict(
                "virtualmachine",
                name,
                f"Unable to remove volume [{vname}] because it does not exist",
            )
        if not boot.is_hotpluggable(volume):
            raise errors.subresource_conflict(
                "virtualmachine",
                name,
                f"Unable to remove volume [{vname}] because it is not hotpluggable",
            )
        if self._dry_run(body):
            return 202

        def edit(obj):
            spec = obj["spec"]["template"]["spec"]
            spec["volumes"] = [v for v in spec.get("volumes") or [] if v.get("name") != vname]
            disks = spec.get("domain", {}).get("devices", {}).get("disks") or []
            # a cdrom drive stays (ejected); an added disk goes with its volume
            spec["domain"]["devices"]["disks"] = [
                d for d in disks if d.get("name") != vname or "cdrom" in d
            ]

        self.store.mutate(VM, ns, name, edit)
        return 202

    # -- VirtualMachineInstance ------------------------------------------------------------

    def _running_vmi(self, ns: str, name: str, message: str = VM_NOT_RUNNING) -> dict:
        vmi = self.store.get(VMI, ns, name)
        if vmi is None:
            raise errors.subresource_not_found("virtualmachineinstance", name)
        if (vmi.get("status") or {}).get("phase") != "Running" or "deletionTimestamp" in vmi[
            "metadata"
        ]:
            raise errors.subresource_conflict("virtualmachineinstance", name, message)
        return vmi

    def vmi_pause(self, ns: str, name: str, body: dict) -> int:
        vmi = self._running_vmi(ns, name)
        if self.controller.is_paused(vmi):
            raise errors.subresource_conflict(
                "virtualmachineinstance", name, "VMI is already paused"
            )
        if not self._dry_run(body):
            self.controller.set_paused(vmi, True)
        return 200

    def vmi_unpause(self, ns: str, name: str, body: dict) -> int:
        vmi = self._running_vmi(ns, name, VMI_NOT_RUNNING)
        if not self.controller.is_paused(vmi):
            raise errors.subresource_conflict("virtualmachineinstance", name, "VMI is not paused")
        if not self._dry_run(body):
            self.controller.set_paused(vmi, False)
        return 200

    def vmi_softreboot(self, ns: str, name: str, body: dict) -> int:
        vmi = self._running_vmi(ns, name)
        if self.controller.is_paused(vmi):
            raise errors.subresource_conflict("virtualmachineinstance", name, "VMI is paused")
        self.controller.reboot(vmi, "softreboot")
        return 200

    def vmi_reset(self, ns: str, name: str, body: dict) -> int:
        vmi = self.store.get(VMI, ns, name)
        if vmi is None:
            raise errors.subresource_not_found("virtualmachineinstance", name)
        phase = (vmi.get("status") or {}).get("phase", "Pending")
        if phase != "Running":
            raise errors.bad_request(
                f"Failed to reset non-running VMI with phase {phase}: "
                f"Unable to connect to VirtualMachineInstance because phase is {phase} instead of Running"
            )
        self.controller.reboot(vmi, "reset")
        return 200

    def vmi_addvolume(self, ns: str, name: str, body: dict) -> int:
        raise errors.bad_request("the lab simulator implements addvolume on virtualmachines only")

    def vmi_removevolume(self, ns: str, name: str, body: dict) -> int:
        raise errors.bad_request(
            "the lab simulator implements removevolume on virtualmachines only"
        )
