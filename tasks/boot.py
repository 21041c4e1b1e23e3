"""boot.* tasks: write a requested boot override to the VM, and end a Once override."""

from __future__ import annotations

import logging
import time

from celery import shared_task

from fleetfish.mirror import split_system_id
from workers import runtime
from workers.boot import restore_mutator
from workers.kubevirt import Transient
from workers.power import apply_boot_override, vmi_uid
from workers.taskutil import retry_transient, single_delivery

log = logging.getLogger("fleetfish.worker")

# A Once override waits at most this long for the power-on to create a new VMI.
REVERT_WAIT = 600.0
REVERT_POLL = 1.0


@shared_task(bind=True, name="boot.apply", max_retries=None, acks_late=True)
@single_delivery
def boot_apply(self, system_id, boot_gen, transient=0):
    """Apply the stored override (``Store.get_boot``) unless a newer one superseded it."""
    store = runtime.store()
    if str(store.get_boot(system_id).get("gen", "0")) != str(boot_gen):
        log.info("boot override gen %s superseded", boot_gen)
        return {"stale": True}
    try:
        override = apply_boot_override(runtime.kube(), store, runtime.settings(), system_id)
    except Transient as exc:
        raise retry_transient(self, exc, {"transient": transient}) from None
    log.info("boot override applied: %s", override)
    return {"applied": override}


@shared_task(bind=True, name="boot.revert_once", max_retries=None, acks_late=True)
@single_delivery
def boot_revert_once(self, system_id, vmi_uid_before, boot_gen=None, since=None, transient=0):
    """Once a VMI other than ``vmi_uid_before`` exists, restore the VM's own boot order and set
    the override back to Disabled/None (the one-time boot has been consumed).

    Only for the override generation ``boot_gen`` the power-on started the VM with: a late or
    repeated copy finding a newer override (the next Ironic cycle's Once) stops without
    touching it. ``None``: a message sent before generations were carried; ends any Once.
    """
    kv, store, conf = runtime.kube(), runtime.store(), runtime.settings()
    ns, name = split_system_id(system_id)
    since = since or time.time()
    if boot_gen is not None and store.get_boot(system_id).get("gen") != str(boot_gen):
        log.info("boot override gen %s superseded: nothing to revert", boot_gen)
        return {"reverted": False, "stale": True}
    try:
        current = vmi_uid(kv.get_vmi(ns, name))
        if not current or current == vmi_uid_before:
            if time.time() - since > REVERT_WAIT:
                log.warning("no new VMI after %s s: boot order left as overridden", REVERT_WAIT)
                return {"reverted": False}
            raise self.retry(countdown=REVERT_POLL, kwargs={"since": since, "transient": 0})
        if boot_gen is not None and store.get_boot(system_id).get("gen") != str(boot_gen):
            # Superseded while we looked at the VMI: the newer override owns the VM's order.
            log.info("boot override gen %s superseded: nothing to revert", boot_gen)
            return {"reverted": False, "stale": True}
        # The VM records which override it holds: a newer one written after the check above
        # makes this PUT conflict, and the retried read leaves it alone.
        kv.update_vm(ns, name, restore_mutator(conf.cdrom_disk, boot_gen))
    except Transient as exc:
        raise retry_transient(self, exc, {"since": since, "transient": transient}) from None
    if boot_gen is None:
        if store.get_boot(system_id).get("enabled") == "Once":
            store.set_boot(system_id, enabled="Disabled", target="None")
    elif not store.end_boot_once(system_id, boot_gen):
        log.info("boot override gen %s superseded: left as requested", boot_gen)
        return {"reverted": False, "stale": True}
    log.info("one-time boot consumed by VMI %s, boot order restored", current)
    return {"reverted": True, "vmi": current}
