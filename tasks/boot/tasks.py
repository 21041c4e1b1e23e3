"""boot.* tasks: write a requested boot override to a stopped VM; end a Once override left by
messages of earlier releases."""

from __future__ import annotations

import logging
import time

from celery import shared_task

from fleetfish.mirror import split_system_id
from tasks.power.reset import apply_boot_override, vm_has_no_vmi, vmi_active, vmi_uid
from workers import runtime
from workers.errors import Transient
from workers.taskutil import retry_transient, single_delivery

log = logging.getLogger("fleetfish.worker")

# A Once override waits at most this long for the power-on to create a new VMI.
REVERT_WAIT = 600.0
REVERT_POLL = 1.0


@shared_task(bind=True, name="boot.apply", max_retries=None, acks_late=True, ignore_result=True)
@single_delivery
def boot_apply(self, system_id, boot_gen, transient=0):
    """Apply the stored override (``Store.get_boot``) to a VM that is off, unless a newer one
    superseded it.

    A running VM is left alone: its firmware read the order when it started, a change now
    would only mark it RestartRequired, and every power-on and restart writes the stored
    override just before it starts the VM.
    """
    store = runtime.store()
    if str(store.get_boot(system_id).get("gen", "0")) != str(boot_gen):
        log.info("boot override gen %s superseded", boot_gen)
        return {"stale": True}
    ns, name = split_system_id(system_id)
    kv = runtime.kube()
    try:
        # The VM's status says whether a VMI can exist; its GET also guards the write.
        vm = kv.get_vm(ns, name)
        if not vm_has_no_vmi(vm) and vmi_active(kv.get_vmi(ns, name)):
            log.info("boot override gen %s: written at the next power-on", boot_gen)
            return {"deferred": True}
        override = apply_boot_override(kv, store, runtime.settings(), system_id, vm)
    except Transient as exc:
        raise retry_transient(self, exc, {"transient": transient}) from None
    log.info("boot override applied: %s", override)
    return {"applied": override}


@shared_task(
    bind=True, name="boot.revert_once", max_retries=None, acks_late=True, ignore_result=True
)
@single_delivery
def boot_revert_once(self, system_id, vmi_uid_before, boot_gen=None, since=None, transient=0):
    """End the Once override ``boot_gen`` once a VMI other than ``vmi_uid_before`` exists.

    Earlier releases sent this after a power-on; ``power.verify`` does it now. Kept so that
    such messages still queued across an upgrade are honoured. ``None``: ends any Once.
    """
    kv, store = runtime.kube(), runtime.store()
    ns, name = split_system_id(system_id)
    since = since or time.time()
    if boot_gen is not None and store.get_boot(system_id).get("gen") != str(boot_gen):
        log.info("boot override gen %s superseded: nothing to revert", boot_gen)
        return {"reverted": False, "stale": True}
    try:
        current = vmi_uid(kv.get_vmi(ns, name))
    except Transient as exc:
        raise retry_transient(self, exc, {"since": since, "transient": transient}) from None
    if not current or current == vmi_uid_before:
        if time.time() - since > REVERT_WAIT:
            log.warning("no new VMI after %s s: the Once override stays", REVERT_WAIT)
            return {"reverted": False}
        raise self.retry(countdown=REVERT_POLL, kwargs={"since": since, "transient": 0})
    if boot_gen is None:
        if store.get_boot(system_id).get("enabled") == "Once":
            store.set_boot(system_id, enabled="Disabled", target="None")
    elif not store.end_boot_once(system_id, boot_gen):
        return {"reverted": False, "stale": True}
    log.info("one-time boot consumed by VMI %s", current)
    return {"reverted": True, "vmi": current}
