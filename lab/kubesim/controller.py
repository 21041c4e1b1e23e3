"""virt-controller and virt-handler in one loop: VMIs from run strategies, phases, hotplug, status."""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from lab.kubesim import boot
from lab.kubesim.kinds import CLUSTER_INSTANCETYPE, DV, INSTANCETYPE, PVC, VM, VMI
from lab.kubesim.store import ObjectStore, now_iso

log = logging.getLogger(__name__)

NODE = "lab-node-0"


@dataclass
class Timings:
    """Seconds each step takes. A VMI reaches Running about pending+scheduling+scheduled after creation."""

    pending: float = 0.1
    scheduling: float = 0.15
    scheduled: float = 0.25  # Scheduled -> Running, once every hotplug volume is Ready
    stop: float = 0.3  # graceful shutdown; a zero grace period takes 0.05 s
    hotplug: float = 0.5  # volume added to the VMI -> volumeStatus Ready (if its storage is ready)
    tick: float = 0.1

    @classmethod
    def scaled(cls, start_seconds: float, **kw) -> Timings:
        """Timings whose VMI start takes ``start_seconds`` in total (split 20/30/50)."""
        return cls(
            pending=0.2 * start_seconds,
            scheduling=0.3 * start_seconds,
            scheduled=0.5 * start_seconds,
            **kw,
        )


def run_strategy(vm: dict) -> str:
    spec = vm.get("spec") or {}
    if spec.get("runStrategy"):
        return spec["runStrategy"]
    if spec.get("running") is not None:
        return "Always" if spec["running"] else "Halted"
    return "Halted"


def _condition(type_: str, status: bool, reason: str = "", message: str = "") -> dict:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": None,
    }


def _carry_times(new: list[dict], old: list[dict]) -> list[dict]:
    """Keep lastTransitionTime of conditions whose status did not change."""
    before = {c.get("type"): c for c in old or []}
    for cond in new:
        prev = before.get(cond["type"])
        if prev and prev.get("status") == cond["status"]:
            cond["lastTransitionTime"] = prev.get("lastTransitionTime")
        else:
            cond["lastTransitionTime"] = now_iso()
    return new


def _target(disks: list[dict], name: str) -> str:
    """Guest device name (vda, sda...) the way libvirt assigns them per bus."""
    counts = {"vd": 0, "sd": 0}
    for disk in disks:
        dev = disk.get("cdrom") or disk.get("disk") or disk.get("lun") or {}
        prefix = (
            "vd"
            if dev.get("bus", "virtio" if "cdrom" not in disk else "sata") == "virtio"
            else "sd"
        )
        if disk.get("name") == name:
            return prefix + chr(ord("a") + counts[prefix])
        counts[prefix] += 1
    return ""


class Controller:
    """Ticks every ``timings.tick`` seconds under the store lock, so each tick sees one instant."""

    def __init__(self, store: ObjectStore, boots: boot.BootLog, timings: Timings | None = None):
        self.store = store
        self.boots = boots
        self.timings = timings or Timings()
        self._since: dict[str, float] = {}  # VMI uid -> when it entered its current phase
        self._stop_at: dict[str, float] = {}  # VMI uid -> when it is gone
        self._plugged: dict[tuple[str, str], float] = {}  # (VMI uid, volume) -> when it was plugged
        # (VMI uid, volume) an attachment pod mounts: from its first Bound until it is unplugged
        self._attached: set[tuple[str, str]] = set()
        self._restart_required: set[str] = set()  # VMI uids whose VM changed a cold field
        self._paused: set[str] = set()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        # other controllers (CDI, garbage collection) run in the same tick, same instant
        self.reconcilers: list[Callable[[float], None]] = []
        self.digests: Callable[[str], str | None] | None = None  # PVC uid -> imported sha256

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kubesim-controller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        if self._thread:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._halt.wait(self.timings.tick):
            try:
                self.tick()
            except Exception:  # a bad object must not kill the cluster
                log.exception("controller tick failed")

    def tick(self) -> None:
        now = time.monotonic()
        with self.store.cond:
            for vm in list(self.store.peek_all(VM)):
                self._sync_vm(vm, now)
            for vmi in list(self.store.peek_all(VMI)):
                self._sync_vmi(vmi, now)
            for vm in list(self.store.peek_all(VM)):
                self._write_vm_status(vm)
            for reconcile in self.reconcilers:
                reconcile(now)

    # -- called by subresource handlers, with the store lock held ----------------------------------

    def is_paused(self, vmi: dict) -> bool:
        return vmi["metadata"]["uid"] in self._paused

    def set_paused(self, vmi: dict, paused: bool) -> None:
        with self.store.cond:
            uid = vmi["metadata"]["uid"]
            (self._paused.add if paused else self._paused.discard)(uid)
            self._write_vmi_status(vmi, time.monotonic())
            vm = self.store.peek(VM, vmi["metadata"]["namespace"], vmi["metadata"]["name"])
            if vm is not None:
                self._write_vm_status(vm)

    def reboot(self, vmi: dict, reason: str) -> dict:
        """A guest reset or soft reboot: same VMI, firmware chooses the boot device again."""
        with self.store.cond:
            self._paused.discard(vmi["metadata"]["uid"])
            return self.boots.record(
                vmi, boot.choose_boot_device(self.store, vmi, self.digests), reason
            )

    # -- VirtualMachine -> VMI ----------------------------------------------------------------

    def _sync_vm(self, vm: dict, now: float) -> None:
        meta = vm["metadata"]
        ns, name = meta["namespace"], meta["name"]
        strategy = run_strategy(vm)
        status = vm.get("status") or {}
        requests = list(status.get("stateChangeRequests") or [])
        vmi = self.store.peek(VMI, ns, name)
        stopping = vmi is not None and "deletionTimestamp" in vmi["metadata"]
        if requests:
            req = requests[0]
            if req.get("action") == "Stop":
                uid = req.get("uid")
                if vmi is not None and (not uid or uid == vmi["metadata"]["uid"]):
                    if not stopping:
                        self._begin_stop(vmi, now)
                else:
                    requests.pop(0)  # that VMI is gone
            elif req.get("action") == "Start":
                if vmi is None:
                    vmi = self._create_vmi(vm, now)
                    requests.pop(0)
                elif not stopping:
                    requests.pop(0)  # already running
            else:
                requests.pop(0)
        elif strategy == "Always" and vmi is None:
            vmi = self._create_vmi(vm, now)
        elif strategy == "Halted" and vmi is not None and not stopping:
            self._begin_stop(vmi, now)
        elif (
            strategy in ("Once", "RerunOnFailure")
            and vmi is None
            and status.get("runStrategy") != strategy
        ):
            vmi = self._create_vmi(vm, now)

        def edit(obj):
            st = obj.setdefault("status", {})
            if requests:
                st["stateChangeRequests"] = requests
            else:
                st.pop("stateChangeRequests", None)
            st["runStrategy"] = strategy

        if (
            requests != (status.get("stateChangeRequests") or [])
            or status.get("runStrategy") != strategy
        ):
            self.store.mutate(VM, ns, name, edit)
        if vmi is not None and "deletionTimestamp" not in vmi["metadata"]:
            self._sync_hotplug(vm, vmi, now)
            self._check_restart_required(vm, vmi)

    def _create_vmi(self, vm: dict, now: float) -> dict:
        template = copy.deepcopy((vm.get("spec") or {}).get("template") or {})
        tmeta = template.get("metadata") or {}
        meta = vm["metadata"]
        labels = dict(tmeta.get("labels") or {})
        labels["kubevirt.io/nodeName"] = NODE
        vmi = {
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": dict(tmeta.get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "kubevirt.io/v1",
                        "kind": "VirtualMachine",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
                "finalizers": [
                    "kubevirt.io/virtualMachineControllerFinalize",
                    "foregroundDeleteVirtualMachine",
                ],
            },
            "spec": self._expand_instancetype(vm, template.get("spec") or {}),
            "status": {
                "phase": "Pending",
                "phaseTransitionTimestamps": [
                    {"phase": "Pending", "phaseTransitionTimestamp": now_iso()}
                ],
            },
        }
        created = self.store.create(VMI, vmi)
        uid = created["metadata"]["uid"]
        self._since[uid] = now
        for vol in created["spec"].get("volumes") or []:
            if boot.is_hotpluggable(vol):
                self._plugged[(uid, vol["name"])] = now
        return self.store.peek(VMI, meta["namespace"], meta["name"])

    def _expand_instancetype(self, vm: dict, spec: dict) -> dict:
        """What KubeVirt writes into the VMI of a VM that names an instancetype: its vCPUs
        (as sockets, the topology without a preference) and its guest memory."""
        ref = (vm.get("spec") or {}).get("instancetype") or {}
        if not ref.get("name"):
            return spec
        if (ref.get("kind") or "").lower() == "virtualmachineinstancetype":
            found = self.store.peek(INSTANCETYPE, vm["metadata"]["namespace"], ref["name"])
        else:
            found = self.store.peek(CLUSTER_INSTANCETYPE, "", ref["name"])
        itype = copy.deepcopy((found or {}).get("spec") or {})
        domain = spec.setdefault("domain", {})
        if (itype.get("cpu") or {}).get("guest"):
            domain["cpu"] = {"sockets": int(itype["cpu"]["guest"]), "cores": 1, "threads": 1}
        if (itype.get("memory") or {}).get("guest"):
            domain["memory"] = {"guest": itype["memory"]["guest"]}
        return spec

    def _begin_stop(self, vmi: dict, now: float) -> None:
        meta = vmi["metadata"]
        grace = (vmi.get("spec") or {}).get("terminationGracePeriodSeconds")
        self._stop_at[meta["uid"]] = now + (0.05 if grace == 0 else self.timings.stop)
        self.store.mutate(
            VMI,
            meta["namespace"],
            meta["name"],
            lambda o: o["metadata"].setdefault("deletionTimestamp", now_iso()),
        )

    def _sync_hotplug(self, vm: dict, vmi: dict, now: float) -> None:
        """Declarative hotplug: the VMI's hotpluggable volumes follow the VM template, live."""
        tspec = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
        wanted = {v["name"]: v for v in tspec.get("volumes") or [] if boot.is_hotpluggable(v)}
        spec = vmi.get("spec") or {}
        current = spec.get("volumes") or []
        uid = vmi["metadata"]["uid"]
        kept = [v for v in current if not boot.is_hotpluggable(v) or wanted.get(v["name"]) == v]
        removed = {v["name"] for v in current if v not in kept}
        added = [copy.deepcopy(v) for n, v in wanted.items() if n not in {k["name"] for k in kept}]
        if not removed and not added:
            return
        tdisks = {
            d.get("name"): d
            for d in ((tspec.get("domain") or {}).get("devices") or {}).get("disks") or []
        }

        def edit(obj):
            ospec = obj.setdefault("spec", {})
            disks = ospec.setdefault("domain", {}).setdefault("devices", {}).setdefault("disks", [])
            # an unplugged cdrom keeps its (now empty) drive; other unplugged disks go away
            disks[:] = [
                d
                for d in disks
                if d.get("name") not in removed or "cdrom" in d or d.get("name") in tdisks
            ]
            names = {d.get("name") for d in disks}
            for vol in added:
                if vol["name"] not in names and vol["name"] in tdisks:
                    disks.append(copy.deepcopy(tdisks[vol["name"]]))
            ospec["volumes"] = kept + added

        for name in removed:
            self._plugged.pop((uid, name), None)
            self._attached.discard((uid, name))
        for vol in added:
            self._plugged[(uid, vol["name"])] = now
        self.store.mutate(VMI, vmi["metadata"]["namespace"], vmi["metadata"]["name"], edit)

    def _check_restart_required(self, vm: dict, vmi: dict) -> None:
        """A bootOrder change on a cold disk (root disk, empty cdrom) needs a new VMI."""
        uid = vmi["metadata"]["uid"]
        if uid in self._restart_required:
            return
        tspec = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
        tvols = {v.get("name"): v for v in tspec.get("volumes") or []}
        vdisks = {
            d.get("name"): d
            for d in (((vmi.get("spec") or {}).get("domain") or {}).get("devices") or {}).get(
                "disks"
            )
            or []
        }
        for disk in ((tspec.get("domain") or {}).get("devices") or {}).get("disks") or []:
            running = vdisks.get(disk.get("name"))
            if running is None or running.get("bootOrder") == disk.get("bootOrder"):
                continue
            volume = tvols.get(disk.get("name"))
            if volume is None or not boot.is_hotpluggable(volume):
                self._restart_required.add(uid)
                return

    # -- VMI phases (virt-handler) --------------------------------------------------------------

    def _sync_vmi(self, vmi: dict, now: float) -> None:
        meta = vmi["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
        if "deletionTimestamp" in meta:
            grace = (vmi.get("spec") or {}).get("terminationGracePeriodSeconds")
            stop_at = self._stop_at.setdefault(uid, now + self.timings.stop)
            if grace == 0:
                stop_at = self._stop_at[uid] = min(stop_at, now + 0.05)
            if now >= stop_at:
                self.store.delete(VMI, ns, name)
                self._forget(uid)
            return
        owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "VirtualMachine"]
        if owners:
            vm = self.store.peek(VM, ns, owners[0]["name"])
            if vm is None or vm["metadata"]["uid"] != owners[0]["uid"]:
                self._begin_stop(vmi, now)  # garbage collection of an orphan
                return
        phase = (vmi.get("status") or {}).get("phase", "Pending")
        elapsed = now - self._since.setdefault(uid, now)
        t = self.timings
        new_phase = None
        if phase == "Pending" and elapsed >= t.pending and self._cold_storage_ready(vmi):
            new_phase = "Scheduling"
        elif phase == "Scheduling" and elapsed >= t.scheduling:
            new_phase = "Scheduled"
        elif phase == "Scheduled" and elapsed >= t.scheduled and self._hotplug_ready(vmi, now):
            new_phase = "Running"
        if new_phase:
            self._since[uid] = now
            if new_phase == "Running":
                # virt-handler reports the hotplug volumes Ready before it starts the domain: no
                # event may show Running beside a volume still shown Bound.
                self._write_vmi_status(vmi, now)
                vmi = self.store.peek(VMI, ns, name)
            self._set_phase(vmi, new_phase)
            vmi = self.store.peek(VMI, ns, name)
        self._write_vmi_status(vmi, now)
        if new_phase == "Running":
            # the domain starts now: firmware picks the boot device from what is there now
            vmi = self.store.peek(VMI, ns, name)
            self.boots.record(vmi, boot.choose_boot_device(self.store, vmi, self.digests), "start")

    def _forget(self, uid: str) -> None:
        self._since.pop(uid, None)
        self._stop_at.pop(uid, None)
        self._paused.discard(uid)
        self._restart_required.discard(uid)
        for key in [k for k in self._plugged if k[0] == uid]:
            del self._plugged[key]
        self._attached -= {k for k in self._attached if k[0] == uid}

    def claims_in_use(self, namespace: str) -> set[str]:
        """PVCs pods use (pvc-protection): a VMI's cold volumes, from creation until it is gone,
        and its attached hotplug volumes (attachment pods), until unplugged. Hold the lock."""
        used = set()
        for vmi in self.store.peek_all(VMI):
            meta = vmi["metadata"]
            if meta["namespace"] != namespace:
                continue
            for vol in (vmi.get("spec") or {}).get("volumes") or []:
                claim = boot.volume_claim(vol)
                attached = (meta["uid"], vol["name"]) in self._attached
                if claim and (attached or not boot.is_hotpluggable(vol)):
                    used.add(claim)
        return used

    def _set_phase(self, vmi: dict, phase: str) -> None:
        def edit(obj):
            st = obj.setdefault("status", {})
            st["phase"] = phase
            st.setdefault("phaseTransitionTimestamps", []).append(
                {"phase": phase, "phaseTransitionTimestamp": now_iso()}
            )
            if phase in ("Scheduled", "Running"):
                st["nodeName"] = NODE

        self.store.mutate(VMI, vmi["metadata"]["namespace"], vmi["metadata"]["name"], edit)

    def _cold_storage_ready(self, vmi: dict) -> bool:
        ns = vmi["metadata"]["namespace"]
        return all(
            boot.storage_ready(self.store, ns, v) or boot.volume_claim(v) is None
            for v in (vmi.get("spec") or {}).get("volumes") or []
            if not boot.is_hotpluggable(v)
        )

    def _hotplug_ready(self, vmi: dict, now: float) -> bool:
        return all(
            self._hotplug_phase(vmi, v, now)[0] == "Ready"
            for v in (vmi.get("spec") or {}).get("volumes") or []
            if boot.is_hotpluggable(v)
        )

    def _hotplug_phase(self, vmi: dict, volume: dict, now: float) -> tuple[str, str, str]:
        ns = vmi["metadata"]["namespace"]
        claim = boot.volume_claim(volume) or ""
        key = (vmi["metadata"]["uid"], volume["name"])
        plugged = self._plugged.setdefault(key, now)
        if not boot.storage_ready(self.store, ns, volume):
            # attaching starts over once the storage is there (a new attachment pod)
            self._plugged[key] = now
            if boot.claim_missing(self.store, ns, volume):
                # virt-handler waits for it forever; a running guest loses the media (an
                # attached PVC stays Terminating until the volume is unplugged)
                return "Pending", "FailedPvcNotFound", f"PVC {claim} not found"
            dv = self.store.peek(DV, ns, claim)
            if dv is not None:
                dv_phase = (dv.get("status") or {}).get("phase") or "Pending"
                return (
                    "Pending",
                    "PVCNotReady",
                    f"DataVolume {claim} is not ready: phase {dv_phase}",
                )
            return "Pending", "PVCNotReady", f"PVC {claim} is not bound"
        self._attached.add(key)  # an attachment pod mounts it from now on
        if now - plugged < self.timings.hotplug:
            return "Bound", "VolumeBound", "PVC is in phase Bound"
        return (
            "Ready",
            "VolumeReady",
            f"Successfully attach hotplugged volume {volume['name']} to VM",
        )

    def _write_vmi_status(self, vmi: dict, now: float) -> None:
        meta = vmi["metadata"]
        uid = meta["uid"]
        spec = vmi.get("spec") or {}
        old = vmi.get("status") or {}
        phase = old.get("phase", "Pending")
        disks = ((spec.get("domain") or {}).get("devices") or {}).get("disks") or []
        volume_status = []
        for vol in spec.get("volumes") or []:
            entry = {"name": vol["name"], "target": _target(disks, vol["name"])}
            if boot.is_hotpluggable(vol):
                vphase, reason, message = self._hotplug_phase(vmi, vol, now)
                entry.update(
                    phase=vphase,
                    reason=reason,
                    message=message,
                    hotplugVolume={"attachPodName": f"hp-volume-{uid[:5]}", "attachPodUID": uid},
                )
            claim = boot.volume_claim(vol)
            if claim:
                entry["persistentVolumeClaimInfo"] = {"claimName": claim}
            volume_status.append(entry)
        paused = uid in self._paused
        running = phase == "Running"
        conditions = [
            _condition(
                "Ready",
                running and not paused,
                "" if running and not paused else ("PausedByUser" if paused else "GuestNotRunning"),
            )
        ]
        if paused:
            conditions.append(_condition("Paused", True, "PausedByUser", "VMI was paused by user"))
        ifaces = ((spec.get("domain") or {}).get("devices") or {}).get("interfaces") or []
        status = dict(old)
        status.update(
            volumeStatus=volume_status,
            conditions=_carry_times(conditions, old.get("conditions")),
            interfaces=[
                {"name": i.get("name"), "mac": i.get("macAddress", ""), "infoSource": "domain"}
                for i in ifaces
            ]
            if running
            else [],
            qosClass="Burstable",
            guestOSInfo={},
        )
        if _same(status, old):
            return
        self.store.mutate(
            VMI, meta["namespace"], meta["name"], lambda o: o.__setitem__("status", status)
        )

    # -- VirtualMachine status -----------------------------------------------------------------

    def _write_vm_status(self, vm: dict) -> None:
        meta = vm["metadata"]
        ns, name = meta["namespace"], meta["name"]
        vmi = self.store.peek(VMI, ns, name)
        old = vm.get("status") or {}
        strategy = run_strategy(vm)
        created = vmi is not None
        stopping = created and "deletionTimestamp" in vmi["metadata"]
        running = created and not stopping and (vmi.get("status") or {}).get("phase") == "Running"
        paused = created and vmi["metadata"]["uid"] in self._paused
        wants_start = created or strategy == "Always" or bool(old.get("stateChangeRequests"))
        if "deletionTimestamp" in meta:
            printable = "Terminating"
        elif stopping:
            printable = "Stopping"
        elif running and paused:
            printable = "Paused"
        elif running:
            printable = "Running"
        elif wants_start:
            printable = self._storage_problem(vm) or ("Starting" if created else "Stopped")
        else:
            printable = "Stopped"
        ready = running and not paused
        if not created:
            ready_cond = _condition("Ready", False, "VMINotExists", "VMI does not exist")
        else:
            vmi_ready = next(
                (
                    c
                    for c in (vmi.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Ready"
                ),
                None,
            )
            ready_cond = _condition(
                "Ready", ready, "" if ready else (vmi_ready or {}).get("reason", "GuestNotRunning")
            )
        conditions = [ready_cond]
        if paused:
            conditions.append(_condition("Paused", True, "PausedByUser", "VMI was paused by user"))
        if created and vmi["metadata"]["uid"] in self._restart_required:
            conditions.append(
                _condition(
                    "RestartRequired",
                    True,
                    "",
                    "a non-live-updatable field was changed in the template spec",
                )
            )
        status = {
            k: v
            for k, v in old.items()
            if k in ("stateChangeRequests", "volumeSnapshotStatuses", "startFailure")
        }
        status.update(
            printableStatus=printable,
            created=created,
            ready=ready,
            conditions=_carry_times(conditions, old.get("conditions")),
            runStrategy=strategy,
            observedGeneration=meta.get("generation", 1),
            desiredGeneration=meta.get("generation", 1),
        )
        if _same(status, old):
            return
        self.store.mutate(VM, ns, name, lambda o: o.__setitem__("status", status))

    def _storage_problem(self, vm: dict) -> str | None:
        """printableStatus for cold volumes whose storage is not there yet."""
        ns = vm["metadata"]["namespace"]
        tspec = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
        for vol in tspec.get("volumes") or []:
            claim = boot.volume_claim(vol)
            if claim is None or boot.is_hotpluggable(vol):
                continue
            if boot.claim_missing(self.store, ns, vol):
                return "ErrorPvcNotFound"  # absent, or its DataVolume/PVC is being deleted
            dv = self.store.peek(DV, ns, claim)
            pvc = self.store.peek(PVC, ns, claim)
            if dv is not None:
                dv_phase = (dv.get("status") or {}).get("phase")
                if dv_phase == "Failed":
                    return "DataVolumeError"
                if dv_phase == "WaitForFirstConsumer":
                    return "WaitingForVolumeBinding"
                if dv_phase != "Succeeded":
                    return "Provisioning"
            elif pvc is None:
                return "ErrorPvcNotFound"
            elif (pvc.get("status") or {}).get("phase") != "Bound":
                return "WaitingForVolumeBinding"
        return None


def _same(new: dict, old: dict) -> bool:
    """Equal apart from condition timestamps (carried over, so equal when nothing changed)."""
    return new == old
