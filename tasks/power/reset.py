"""Redfish ComputerSystem.Reset mapped onto KubeVirt subresources, idempotent under redelivery.

Used by ``power.reset`` and by ``media.release`` (a deferred Reset), so both run the same code.
Before acting, the VMI uid is recorded in the Redfish task's Redis hash; a redelivered task that
finds the VMI already replaced (or the action marked done) does not act a second time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fleetfish.mirror import split_system_id
from fleetfish.settings import Settings
from fleetfish.store import OFF_ACTIONS, POWER_ACTIONS, Store
from tasks.boot.override import boot_mutator
from workers.errors import RequestError, Waiting
from workers.kubevirt import Conflict, KubeVirt, NotFound

log = logging.getLogger("fleetfish.worker")

# VMI phases after which the VM counts as off (KubeVirt deletes such a VMI or replaces it).
FINAL_PHASES = ("Succeeded", "Failed")


# KubeVirt's reasons for a hotplug volume that cannot be plugged (virt-handler waits for it).
BLOCKING_VOLUME_REASONS = ("FailedPvcNotFound", "PVCNotReady", "VolumeFailed", "MountFailed")


class PowerError(RequestError):
    """The action cannot be done; the message is what the Redfish task shows."""


def vmi_active(vmi: dict | None) -> bool:
    return bool(vmi) and (vmi.get("status") or {}).get("phase") not in FINAL_PHASES


def shutting_down(vm: dict, vmi: dict | None) -> bool:
    """The VM's last run is still ending: its VMI is deleted or the VM was told to stop, but
    the VMI has not finished. KubeVirt refuses a start until then ("VM is already running"),
    and it is not "on" either: a power-on has to wait for it."""
    if not vmi_active(vmi):
        return False
    if ((vmi or {}).get("metadata") or {}).get("deletionTimestamp"):
        return True
    spec = vm.get("spec") or {}
    strategy = spec.get("runStrategy") or ("Always" if spec.get("running") else "Halted")
    requests = (vm.get("status") or {}).get("stateChangeRequests") or []
    return strategy == "Halted" or any(r.get("action") == "Stop" for r in requests)


def vm_has_no_vmi(vm: dict) -> bool:
    """The VM's own status says it has no VMI and none is on its way: stopped, asked to stay
    halted, no start request pending. Then a GET of the VMI can only answer 404."""
    status = vm.get("status") or {}
    strategy = (vm.get("spec") or {}).get("runStrategy") or status.get("runStrategy") or ""
    return (
        not status.get("created")  # KubeVirt leaves it out when false
        and status.get("printableStatus") == "Stopped"
        and strategy in ("Halted", "Manual")
        and not status.get("stateChangeRequests")
    )


def vmi_uid(vmi: dict | None) -> str:
    return ((vmi or {}).get("metadata") or {}).get("uid", "") if vmi_active(vmi) else ""


def vmi_running(vmi: dict | None, uid_before: str) -> bool:
    """A VMI other than ``uid_before`` (the one a power-on found) reached Running."""
    uid = vmi_uid(vmi)
    return (
        bool(uid) and uid != uid_before and (vmi or {}).get("status", {}).get("phase") == "Running"
    )


def start_blocker(vmi: dict | None) -> tuple[str, str]:
    """(volume name, reason) of a volume the cluster says the VMI cannot get, ('', '') if none.

    A hotplug volume whose claim is gone stays Pending for ever: the VMI never runs, and
    nothing on the VM's power state says so.
    """
    for volume in ((vmi or {}).get("status") or {}).get("volumeStatus") or []:
        if volume.get("phase") == "Ready":
            continue
        if volume.get("reason") in BLOCKING_VOLUME_REASONS:
            detail = volume.get("message") or volume.get("reason")
            return volume.get("name", ""), f"volume {volume.get('name')}: {detail}"
    return "", ""


def _mark_done(store: Store, task_id: str) -> None:
    store.remember_task_field(task_id, "acted", "1")


def _tolerate(call: Callable[[], None], *phrases: str) -> bool:
    """Run a subresource call; a 409 saying the VM is already in the wanted state is success.
    Returns False when it was tolerated."""
    try:
        call()
        return True
    except Conflict as exc:
        text = exc.message.lower()
        if any(p in text for p in phrases):
            log.info("%s", exc.message)
            return False
        raise


def apply_boot_override(
    kv: KubeVirt, store: Store, settings: Settings, system_id: str, vm: dict | None = None
) -> dict:
    """Write the requested boot override onto the VM (before a start, so the new VMI takes it).
    ``vm``: the VM as just read (its resourceVersion guards the write)."""
    ns, name = split_system_id(system_id)
    override = store.get_boot(system_id)
    kv.update_vm(ns, name, boot_mutator(override, settings.cdrom_disk), current=vm)
    return override


def run_power(
    kv: KubeVirt,
    store: Store,
    settings: Settings,
    system_id: str,
    action: str,
    task_id: str,
    watch_start: Callable[[str], None] | None = None,
) -> str:
    """Perform one Reset action; returns the message for the Redfish task.

    Raises PowerError (unsupported, no such VM), or a KubeError (Transient: retry).
    ``watch_start(vmi_uid_before)`` is called just before the VM is started or restarted, so
    that something follows the start until a new VMI runs even if this worker dies next; that
    follow-up also ends the Once boot override the start used (its generation is recorded in
    the task as ``boot_gen``), never a newer one requested meanwhile.
    """
    if action not in POWER_ACTIONS:
        raise PowerError(f"ResetType {action} is not supported")
    ns, name = split_system_id(system_id)
    try:
        vm = kv.get_vm(ns, name)
    except NotFound as exc:
        raise PowerError(f"no VirtualMachine {ns}/{name}") from exc
    vmi = None if vm_has_no_vmi(vm) else kv.get_vmi(ns, name)
    before = store.remember_task_field(task_id, "vmi_before", vmi_uid(vmi) or "-")
    now = vmi_uid(vmi) or "-"
    if store.task_field(task_id, "acted") == "1":
        return f"{action} already done"

    def write_boot_override() -> None:
        # The generation the first delivery started the VM with is the one its power-on
        # consumes, whatever a redelivery finds stored by then.
        override = apply_boot_override(kv, store, settings, system_id, vm)
        store.remember_task_field(task_id, "boot_gen", str(override.get("gen", "")))

    # An earlier delivery that started the VM and died before saying so had already sent the
    # start's follow-up (before starting): it ends the Once override, nothing to redo here.
    if before != now and action in ("ForceRestart", "GracefulRestart", "PowerCycle"):
        _mark_done(store, task_id)
        return f"{action} done (VMI replaced)"
    if before != now and now != "-" and action in OFF_ACTIONS:
        # An earlier delivery found another VMI (or none) and acted, then died before saying
        # so; the VMI running now was started later, by someone else (the next Ironic cycle):
        # stopping it would undo their power-on.
        _mark_done(store, task_id)
        log.info("%s %s: a later VMI runs (%s, was %s): left alone", system_id, action, now, before)
        return f"{action} already done (a VMI started since runs)"
    store.update_task(task_id, state="Running", message=f"{action} in progress")

    def follow_start() -> None:
        if watch_start:
            watch_start(before if before != "-" else "")

    def power_on() -> str:
        if shutting_down(vm, vmi):
            # Before the boot override is written: the start that follows writes it then.
            raise Waiting(f"{action}: the VM is still shutting down; it starts once that ended")
        write_boot_override()
        follow_start()
        started = _tolerate(
            lambda: kv.start_vm(ns, name), "already running", "does not support manual start"
        )
        return "Powered on" if started else "Already on"

    def restart(force: bool) -> str:
        if not vmi_active(vmi) or shutting_down(vm, vmi):
            return power_on()
        write_boot_override()
        follow_start()
        try:
            kv.restart_vm(ns, name, force=force)
        except Conflict as exc:
            if "not running" not in exc.message.lower():
                raise
            kv.start_vm(ns, name)
        return "Restarted"

    if action in ("On", "ForceOn"):
        message = power_on() if not vmi_active(vmi) or shutting_down(vm, vmi) else "Already on"
    elif action == "ForceOff":
        done = _tolerate(lambda: kv.stop_vm(ns, name, grace_period=0), "not running", "halted")
        message = "Powered off" if done else "Already off"
    elif action == "GracefulShutdown":
        done = _tolerate(lambda: kv.stop_vm(ns, name), "not running", "halted")
        message = "Shutting down" if done else "Already off"
    elif action in ("ForceRestart", "PowerCycle"):
        message = restart(force=True)
    elif action == "GracefulRestart":
        message = restart(force=False)
    elif action == "Pause":
        if not vmi_active(vmi):
            raise PowerError("cannot pause: the system is off")
        done = _tolerate(lambda: kv.pause_vmi(ns, name), "already paused")
        message = "Paused" if done else "Already paused"
    else:  # Resume
        if not vmi_active(vmi):
            raise PowerError("cannot resume: the system is off")
        done = _tolerate(lambda: kv.unpause_vmi(ns, name), "not paused")
        message = "Resumed" if done else "Not paused"
    _mark_done(store, task_id)
    log.info("%s %s: %s", system_id, action, message)
    return message
