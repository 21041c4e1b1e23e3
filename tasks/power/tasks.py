"""power.* tasks: one Redfish Reset action against the VM, and the watch that follows a start
until the VM runs (or reports why it cannot)."""

from __future__ import annotations

import logging
import time

from celery import current_app, shared_task

from fleetfish import wire
from fleetfish.mirror import split_system_id
from fleetfish.store import ENDED_TASK_STATES, Store
from tasks.power.reset import run_power, start_blocker, vmi_running
from workers import runtime
from workers.errors import FAILURES, Transient, WorkError, task_failure
from workers.kubevirt import Conflict, NotFound
from workers.taskutil import reset_lock, retry_transient, single_delivery

log = logging.getLogger("fleetfish.worker")

# The first look at a start (a VMI runs in seconds), then looks space out to this.
START_CHECK_FIRST = 1.0
START_CHECK_MAX = 5.0


def watch_start(system_id: str, task_id: str, vmi_uid_before: str) -> None:
    """Mark the Reset task as followed by ``power.verify`` and send that task: before the
    start itself, so a worker dying right after the start still has it followed."""
    store = runtime.store()
    if not store.task_exists(task_id):
        return  # no Redfish task to report on (expired)
    store.follow_start(task_id)
    wire.power_verify(current_app, system_id, task_id, vmi_uid_before).apply_async(
        countdown=START_CHECK_FIRST
    )


def run_reset(system_id: str, action: str, task_id: str) -> str:
    """Do one Reset action (``power.reset``, or a deferred one the media chord released) and
    end its task, or leave it to ``power.verify`` when a start is followed; the message."""
    store = runtime.store()
    message = run_power(
        runtime.kube(),
        store,
        runtime.settings(),
        system_id,
        action,
        task_id,
        lambda before: watch_start(system_id, task_id, before),
    )
    end_power_task(store, task_id, message)
    return message


def fail_reset(system_id: str, action: str, task_id: str, exc: BaseException) -> None:
    """A Reset that cannot be done: its task ends (``task_failure``) and the event log says why."""
    log.error("Reset %s of %s failed: %s", action, system_id, exc)
    runtime.store().update_task(task_id, **task_failure(exc))
    runtime.events().power_failed(system_id, task_id, str(exc), action)


def end_power_task(store: Store, task_id: str, message: str) -> None:
    """Completed, unless a start is being followed: then it ends when the VM runs."""
    if store.task_field(task_id, "verifying") == "1":
        store.update_task(task_id, state="Running", percent=50, message=f"{message}: starting")
    else:
        store.update_task(task_id, state="Completed", status="OK", message=message)


@shared_task(bind=True, name="power.reset", max_retries=None, acks_late=True, ignore_result=True)
@single_delivery
def power_reset(self, system_id, action, task_id, transient=0, waiting_since=None):
    """Run the action now (the API decided it need not wait for media)."""
    store = runtime.store()
    try:
        with reset_lock(store.r, task_id):
            state = store.take_reset(task_id)
            if state in ENDED_TASK_STATES:
                # Done by an earlier delivery, or cancelled (superseded) before any worker
                # took it.
                log.info("Reset %s task %s already %s: nothing to do", action, task_id, state)
                return {"action": action, "skipped": state}
            message = run_reset(system_id, action, task_id)
    except Transient as exc:
        log.warning("%s: %s", action, exc)
        err = retry_transient(self, exc, {"transient": transient, "waiting_since": waiting_since})
        store.update_task(task_id, **task_failure(err))
        raise err from None
    except FAILURES as exc:
        fail_reset(system_id, action, task_id, exc)
        raise
    return {"action": action, "message": message}


def _fail_start(system_id: str, task_id: str, reason: str, blocked_volume: str) -> None:
    """Stop the VM that cannot run (so it never boots late, from whatever is there then),
    end the task in Exception and show why on the system and, if it is the cdrom, the media."""
    kv, store, conf = runtime.kube(), runtime.store(), runtime.settings()
    ns, name = split_system_id(system_id)
    log.error("power-on failed, stopping the VM: %s", reason)
    try:
        # Before the task ends: a Transient error here retries the whole check.
        kv.stop_vm(ns, name, grace_period=0)
    except (Conflict, NotFound) as exc:  # already stopping, or the VM itself is gone
        log.info("stop after the failed power-on: %s", exc.message)
    store.end_inflight_task(system_id, task_id)
    store.start_followed(task_id)
    if not store.fail_power_on(system_id, task_id, reason):
        return
    runtime.events().power_failed(system_id, task_id, reason)
    if blocked_volume == conf.cdrom_disk:
        media = store.get_media(system_id, "Cd")
        store.update_media(system_id, "Cd", media["gen"], health="Critical", message=reason)


def _started(store: Store, system_id: str, task: dict) -> dict:
    """A new VMI runs: the power-on is done, and so is the Once boot override it started with.

    The VM's boot order is left as the start wrote it while this VMI runs (changing the root
    disk's order now would only mark the VM RestartRequired): the next power-on writes the
    order then requested.
    """
    boot_gen = task.get("boot_gen", "")
    if boot_gen and store.end_boot_once(system_id, boot_gen):
        log.info("one-time boot override gen %s consumed", boot_gen)
    store.end_inflight_task(system_id, task["id"])
    store.update_task(task["id"], state="Completed", status="OK", message="Powered on")
    store.start_followed(task["id"])
    return {"running": True}


def _cannot_follow(system_id: str, task_id: str, exc: Exception) -> None:
    reason = f"could not follow the start: {exc}"
    if runtime.store().fail_power_on(system_id, task_id, reason):
        runtime.events().power_failed(system_id, task_id, reason)
    runtime.store().start_followed(task_id)


@shared_task(bind=True, name="power.verify", max_retries=None, acks_late=True, ignore_result=True)
@single_delivery
def power_verify(self, system_id, task_id, vmi_uid_before, since=None, transient=0):
    """Follow a started VM until a new VMI runs; when the cluster says it cannot (a volume it
    needs is gone) or the bound passes, stop it and report why. Nothing stays PoweringOn."""
    store, conf = runtime.store(), runtime.settings()
    since = since or time.time()
    task = store.get_task(task_id) or {}
    if task.get("state") in ENDED_TASK_STATES or not task:
        store.start_followed(task_id)
        return {"ended": task.get("state", "expired")}
    doc = store.get_system(system_id) or {}
    mirrored = doc.get("vmi") or {}
    uid = mirrored.get("uid") or ""
    if mirrored.get("phase") == "Running" and uid and uid != vmi_uid_before:
        return _started(store, system_id, task)
    latest = store.get_power(system_id).get("last_request", "")
    if latest and latest != task_id:
        # The client moved on (a power-off, the next insert): that request owns the VM now.
        store.update_task(task_id, state="Completed", status="OK", message="Superseded")
        store.start_followed(task_id)
        return {"superseded_by": latest}
    ns, name = split_system_id(system_id)
    try:
        vmi = runtime.kube().get_vmi(ns, name)
        if vmi_running(vmi, vmi_uid_before):
            return _started(store, system_id, task)
        volume, blocker = start_blocker(vmi)
        waited = time.time() - since
        if blocker or waited > conf.power_on_timeout:
            phase = ((vmi or {}).get("status") or {}).get("phase") or "no VMI"
            reason = blocker or f"the VM did not run within {conf.power_on_timeout} s ({phase})"
            _fail_start(system_id, task_id, reason, volume)
            return {"failed": reason}
    except Transient as exc:
        err = retry_transient(self, exc, {"since": since, "transient": transient})
        if err is exc:  # out of retries: the cluster cannot tell, and the task must end
            _cannot_follow(system_id, task_id, exc)
        raise err from None
    except WorkError as exc:
        log.error("following the start failed: %s", exc)
        store.end_inflight_task(system_id, task_id)
        _cannot_follow(system_id, task_id, exc)
        return {"failed": str(exc)}
    store.touch_start(task_id)
    delay = min(START_CHECK_MAX, max(1.0, waited / 4))
    raise self.retry(countdown=delay, kwargs={"since": since, "transient": 0})
