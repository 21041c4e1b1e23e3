"""power.reset: one Redfish Reset action against the VM, retried with backoff on Transient."""

from __future__ import annotations

import logging

from celery import shared_task

from fleetfish.store import ENDED_TASK_STATES
from tasks.media import _schedule_revert
from workers import runtime
from workers.kubevirt import KubeError, Transient
from workers.power import PowerError, run_power
from workers.taskutil import reset_lock, retry_transient, single_delivery

log = logging.getLogger("fleetfish.worker")


@shared_task(bind=True, name="power.reset", max_retries=None, acks_late=True)
@single_delivery
def power_reset(self, system_id, action, task_id, transient=0):
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
            message = run_power(
                runtime.kube(),
                store,
                runtime.settings(),
                system_id,
                action,
                task_id,
                _schedule_revert,
            )
            store.update_task(task_id, state="Completed", status="OK", message=message)
    except Transient as exc:
        log.warning("%s: %s", action, exc)
        err = retry_transient(self, exc, {"transient": transient})
        store.update_task(task_id, state="Exception", status="Critical", message=str(err))
        raise err from None
    except (PowerError, KubeError, ValueError) as exc:
        log.error("%s failed: %s", action, exc)
        store.update_task(task_id, state="Exception", status="Critical", message=str(exc))
        raise
    return {"action": action, "message": message}
