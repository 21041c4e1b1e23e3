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
def boot_revert_once(self, system_id, vmi_uid_before, since=None, transient=0):
    """Once a VMI other than ``vmi_uid_before`` exists, restore the VM's own boot order and set
    the override back to Disabled/None (the one-time boot has been consumed)."""
    kv, store, conf = runtime.kube(), runtime.store(), runtime.settings()
    ns, name = split_system_id(system_id)
    since = since or time.time()
    try:
        current = vmi_uid(kv.get_vmi(ns, name))
        if not current or current == vmi_uid_before:
            if time.time() - since > REVERT_WAIT:
                log.warning("no new VMI after %s s: boot order left as overridden", REVERT_WAIT)
                return {"reverted": False}
            raise self.retry(countdown=REVERT_POLL, kwargs={"since": since, "transient": 0})
        kv.update_vm(ns, name, restore_mutator(conf.cdrom_disk))
    except Transient as exc:
        raise retry_transient(self, exc, {"since": since, "transient": transient}) from None
    if store.get_boot(system_id).get("enabled") == "Once":
        store.set_boot(system_id, enabled="Disabled", target="None")
    log.info("one-time boot consumed by VMI %s, boot order restored", current)
    return {"reverted": True, "vmi": current}
