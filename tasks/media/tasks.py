"""media.* tasks: the InsertMedia chord (import, attach, release, failed) and EjectMedia.

Every task carries the media ``gen`` it was sent for and does nothing once a newer request
superseded it. Waiting never holds a worker slot: an import waiting on the DataVolume watch is
parked in Redis until the watcher wakes it (``_await_wake``), other waits are a
``self.retry(countdown=...)``. See docs/media-pipeline.md.
"""

from __future__ import annotations

import copy
import logging
import time

from celery import shared_task
from kombu.utils.json import dumps as json_dumps

from fleetfish.mirror import split_system_id
from tasks.boot.override import boot_mutator
from tasks.media.volumes import (
    CertificateUnreadable,
    credentials_secret,
    delete_device_dvs,
    delete_dv,
    dv_body,
    dv_name,
    ensure_dv,
    head_content_length,
    import_poll_delay,
    remove_cdrom_volume,
    set_cdrom_volume,
    storage_size,
    trust_configmap,
    vmi_volume_ready,
)
from tasks.power.reset import vm_has_no_vmi
from tasks.power.tasks import fail_reset, run_reset
from workers import runtime
from workers.dvmirror import PARK_SECONDS, STALE_SECONDS, DvMirror
from workers.dvstatus import import_ended, import_status, report_import_progress
from workers.errors import FAILURES, Refused, Transient, WorkError, task_failure
from workers.kubevirt import NotFound
from workers.taskutil import device_lock, park, retry_transient, single_delivery

log = logging.getLogger("fleetfish.worker")

# How long a running VMI may take to show the hot-plugged cdrom Ready.
ATTACH_TIMEOUT = 300.0
# Legacy mode: one fleet-wide lock for the whole import + attach, as the old service did.
LEGACY_LOCK = "ff:lock:legacy-media"


class MediaError(Refused):
    """The media cannot be inserted; the message is shown on the media and the Redfish task."""


def _current(system_id: str, device: str, gen: int) -> dict | None:
    media = runtime.store().get_media(system_id, device)
    return media if media.get("gen") == str(gen) else None


def _record_reason(system_id: str, device: str, gen: int, exc: BaseException) -> None:
    # media.failed reads the reason from here: an errback gets no exception of its own.
    runtime.store().update_media(system_id, device, gen, message=str(exc) or type(exc).__name__)


def _report_progress(system_id, device, gen, task_id, image, pct: float | None) -> bool:
    """Progress shows on the media and its Redfish task; False when the request went stale.

    No Celery PROGRESS state: nothing reads one (Flower shows a task's state from the worker's
    events), and it cost a result write and a PUBLISH per look."""
    shown = 0.0 if pct is None else pct
    return report_import_progress(
        runtime.store(), runtime.events(), system_id, device, gen, task_id, image, shown
    )


def check_ca_configmap(kv, conf, system_id: str, image: str) -> None:
    """An importer pod whose CA ConfigMap is missing never starts (and never says so on the
    DataVolume): fail the media now, naming what to create."""
    name = conf.image_ca_configmap
    if not name or not image.lower().startswith("https://"):
        return
    ns, _ = split_system_id(system_id)
    if not kv.configmap_exists(ns, name):
        raise MediaError(
            f"the CA ConfigMap {ns}/{name} (FLEETFISH_IMAGE_CA_CONFIGMAP) does not exist: "
            "create it with the image server's CA certificate"
        )


def _create_dv(system_id: str, device: str, gen: int, image: str) -> dict | None:
    """Create (or find) this generation's DataVolume; None if the request went stale."""
    kv, store, conf = runtime.kube(), runtime.store(), runtime.settings()
    media = store.get_media(system_id, device)
    certificates = list(store.media_certificates(system_id, device).values())
    # VerifyCertificate false counts only while the operator allows it.
    verify = media.get("verify_certificate") != "0" or not conf.media_allow_unverified
    try:
        ca = trust_configmap(kv, system_id, device, image, gen, certificates, verify)
    except CertificateUnreadable as exc:
        raise MediaError(str(exc)) from None
    if not ca:
        check_ca_configmap(kv, conf, system_id, image)
    size = storage_size(head_content_length(image), conf)
    # Credentials never enter the task message: they stay in Redis until put in a Secret.
    creds = store.media_credentials(system_id, device)
    secret = credentials_secret(kv, system_id, device, image, gen, creds) if creds else ""
    body = dv_body(system_id, device, image, gen, size, conf, secret_name=secret, ca_configmap=ca)
    with device_lock(store.r, system_id, device):
        # Checked under the lock an eject also holds: a stale import never creates an orphan.
        if _current(system_id, device, gen) is None:
            return None
        dv, created = ensure_dv(kv, body)
    log.info(
        "%s DataVolume %s (%s) for %s system=%s",
        "created" if created else "found",
        body["metadata"]["name"],
        size,
        image,
        system_id,
    )
    return dv


def _watched_dv(ns: str, name: str, started: float, fallback: dict) -> dict | None:
    """The DataVolume as the watcher's DataVolume watch mirrors it; None once deleted.

    Read from the cluster instead (at most every ``FLEETFISH_DV_FALLBACK_SECONDS``) when the namespace's
    watch has shown no sign of life for ``STALE_SECONDS`` (no watcher, apiserver away), or
    when the watch has not shown this DataVolume that long after its creation. Until then a
    DataVolume the watch has not shown yet is pending: ``{}``.
    """
    mirrored, deleted, age = DvMirror(runtime.store().r).read(ns, name)
    if deleted:
        return None
    fresh = age is not None and age <= STALE_SECONDS
    if fresh and mirrored is not None:
        return mirrored
    if fresh and time.time() - started < STALE_SECONDS:
        return {}
    if time.time() - fallback.get("read_at", 0.0) < runtime.settings().dv_fallback_seconds:
        return mirrored or {}
    fallback["read_at"] = time.time()
    log.info(
        "DataVolume watch of %s %s: reading %s itself",
        ns,
        "never seen" if age is None else f"silent for {age:.0f} s",
        name,
    )
    try:
        return runtime.kube().get_dv(ns, name)
    except NotFound:
        return None


def import_step(
    system_id, device, gen, image, task_id, started, fallback: dict | None = None
) -> dict | None:
    """One look at the import. Returns the result when done, None when it must wait again.

    The first look creates the DataVolume; later ones read the watcher's mirror of it
    (``fallback`` keeps, across looks, when the DataVolume was last read from the cluster).
    """
    kv, store, conf = runtime.kube(), runtime.store(), runtime.settings()
    ns, _ = split_system_id(system_id)
    name = dv_name(system_id, device, image, gen)
    if not store.update_media(system_id, device, gen, dv=name):
        return {"stale": True}
    if started is None:
        # Created (or, on a redelivery, found) without a GET first: a create is one request.
        dv = _create_dv(system_id, device, gen, image)
        if dv is None:
            return {"stale": True}
    else:
        dv = _watched_dv(ns, name, started, fallback if fallback is not None else {})
        if dv is None:
            raise MediaError(f"DataVolume {name} disappeared while its import ran")
    if dv and (dv.get("metadata") or {}).get("deletionTimestamp"):
        # Nothing of fleetfish deletes the current generation's volume: someone else did.
        raise MediaError(f"DataVolume {name} was deleted while its import ran")
    status = import_status(dv) if dv else None
    if status is not None and status.error:
        delete_dv(kv, dv)
        raise MediaError(status.error)
    if status is not None:
        if not _report_progress(system_id, device, gen, task_id, image, status.progress):
            return {"stale": True}
        if status.done:
            log.info("DataVolume %s imported system=%s", name, system_id)
            return {"dv": name}
    if started is not None and time.time() - started > conf.import_timeout:
        delete_dv(kv, dv or {"metadata": {"namespace": ns, "name": name}})
        raise MediaError(f"import of {image} did not finish within {conf.import_timeout} s")
    return None


@shared_task(bind=True, name="media.import", max_retries=None, acks_late=True, ignore_result=True)
@single_delivery
def media_import(
    self, system_id, device, gen, image, task_id, started=None, transient=0, read_at=0.0
):
    """Create the DataVolume (or reuse it) and wait on its mirror until the import Succeeded."""
    if runtime.settings().legacy_sequential:
        return legacy_import(system_id, device, gen, image, task_id)
    if _current(system_id, device, gen) is None:
        log.info("insert gen %s superseded, not importing", gen)
        return {"stale": True}
    fallback = {"read_at": read_at or 0.0}
    kwargs = {"started": started, "transient": 0}
    try:
        result = import_step(system_id, device, gen, image, task_id, started, fallback)
    except Transient as exc:
        log.warning("import of %s: %s", image, exc)
        err = retry_transient(
            self, exc, {"started": started, "transient": transient, "read_at": fallback["read_at"]}
        )
        _record_reason(system_id, device, gen, err)
        raise err from None
    except FAILURES as exc:
        log.error("import of %s failed: %s", image, exc)
        _record_reason(system_id, device, gen, exc)
        raise
    if result is not None:
        return result
    conf = runtime.settings()
    kwargs["started"] = started = started or time.time()
    kwargs["read_at"] = fallback["read_at"]
    # The percentage this poll just recorded (import_step wrote it for this generation).
    progress = float(runtime.store().get_media(system_id, device).get("progress") or 0)
    delay = import_poll_delay(
        progress,
        time.time() - started,
        conf.import_poll_seconds,
        conf.import_poll_max_seconds,
        conf.visibility_timeout,
    )
    delay = _await_wake(self, (system_id, device, gen, image, task_id), kwargs, delay)
    if delay is None:
        return park(self)
    raise self.retry(countdown=delay, kwargs=kwargs)


def _await_wake(task, import_args: tuple, kwargs: dict, delay: float) -> float | None:
    """Park the import until its DataVolume's import ends (None), or the countdown of its next
    look when it must poll.

    While the namespace's DataVolume watch is live, the next look is registered in Redis (as a
    Celery signature) and the watcher sends it as soon as the import ends; no Celery message
    waits meanwhile. The look also falls due after at most ``PARK_SECONDS``, and before the
    watch would count as silent, so that an import whose wake-up never comes (no watcher left,
    a lost send) looks again and reads its DataVolume itself. A duplicate of a look already
    run is dropped by ``single_delivery``.
    """
    conf = runtime.settings()
    system_id, device, gen, image, task_id = import_args
    ns, _ = split_system_id(system_id)
    name = dv_name(system_id, device, image, gen)
    mirror = DvMirror(runtime.store().r)
    if not task.request.id or task.request.called_directly:
        return delay
    age = mirror.age(ns)
    if age is None or age > STALE_SECONDS:
        return delay
    # Below the reaper's stale-media bound (four visibility timeouts) too: a parked import is
    # alive, not lost.
    park = min(PARK_SECONDS, 2 * conf.visibility_timeout, STALE_SECONDS - age + 1.0)
    park = max(delay, park)
    look = task.signature_from_request(
        task.request, task.request.args, kwargs, retries=task.request.retries + 1
    )
    try:
        payload = json_dumps(dict(look))
    except (TypeError, ValueError) as exc:  # nothing to register: poll as without a watch
        log.info("import of %s polls: %s", name, exc)
        return delay
    # What the watcher needs to show the import's progress meanwhile (there are no looks).
    progress = {
        "system_id": system_id,
        "device": device,
        "gen": str(gen),
        "task_id": task_id,
        "image": image,
    }
    mirror.register_wake(ns, name, payload, progress, due_at=time.time() + park, ttl=park + 3600)
    dv, deleted, _ = mirror.read(ns, name)
    if (deleted or (dv is not None and import_ended(dv))) and mirror.take_wake(ns, name):
        return conf.import_poll_seconds  # it ended before the watcher could see the look
    return None


def attach_step(system_id, device, gen, task_id) -> tuple[bool, dict]:
    """Put the DataVolume on the cdrom; (done, result). Not done while the VMI hot-plugs."""
    kv, store, conf = runtime.kube(), runtime.store(), runtime.settings()
    ns, vm = split_system_id(system_id)
    media = _current(system_id, device, gen)
    if media is None:
        return True, {"stale": True}
    dv = media.get("dv") or dv_name(system_id, device, media.get("image", ""), gen)
    if media.get("attached") != "1":
        if not store.update_media(system_id, device, gen, state="Updating"):
            return True, {"stale": True}
        store.update_task(task_id, state="Running", percent=92, message="Attaching virtual media")
    override = store.get_boot(system_id)

    def attach(obj: dict) -> bool:
        changed = set_cdrom_volume(obj, conf.cdrom_disk, dv)
        if vm_has_no_vmi(obj):
            # One PUT for both: the boot order a stopped VM gets anyway (boot.apply, the next
            # power-on) goes with the cdrom. A bad override is left to the power-on to report.
            before = copy.deepcopy(obj)
            try:
                boot_mutator(override, conf.cdrom_disk)(obj)
            except ValueError:
                obj.clear()
                obj.update(before)
        return changed or None

    with device_lock(store.r, system_id, device):
        if _current(system_id, device, gen) is None:
            return True, {"stale": True}
        stored = kv.update_vm(ns, vm, attach)
    vmi = None if vm_has_no_vmi(stored) else kv.get_vmi(ns, vm)
    if vmi and (vmi.get("status") or {}).get("phase") == "Running":
        if not vmi_volume_ready(vmi, conf.cdrom_disk, dv):
            return False, {}
    if not store.update_media(system_id, device, gen, attached=True):
        return True, {"stale": True}
    with device_lock(store.r, system_id, device):
        if _current(system_id, device, gen) is not None:
            delete_device_dvs(kv, system_id, device, below_gen=gen, mirror=DvMirror(store.r))
    log.info("DataVolume %s attached to %s", dv, conf.cdrom_disk)
    return True, {"dv": dv, "attached": True}


@shared_task(bind=True, name="media.attach", max_retries=None, acks_late=True)
@single_delivery
def media_attach(self, system_id, device, gen, task_id, since=None, transient=0):
    """Hot-plug the imported DataVolume into the VM's cdrom and wait until it is attached."""
    try:
        done, result = attach_step(system_id, device, gen, task_id)
    except Transient as exc:
        log.warning("attach: %s", exc)
        err = retry_transient(self, exc, {"since": since, "transient": transient})
        _record_reason(system_id, device, gen, err)
        raise err from None
    except FAILURES as exc:
        log.error("attach failed: %s", exc)
        _record_reason(system_id, device, gen, exc)
        raise
    if done:
        return result
    since = since or time.time()
    if time.time() - since > ATTACH_TIMEOUT:
        exc = MediaError(f"virtual media not attached to the running VM after {ATTACH_TIMEOUT} s")
        _record_reason(system_id, device, gen, exc)
        raise exc
    raise self.retry(
        countdown=runtime.settings().import_poll_seconds,
        kwargs={"since": since, "transient": 0},
    )


@shared_task(bind=True, name="media.release", max_retries=None, acks_late=True, ignore_result=True)
@single_delivery
def media_release(self, system_id, device, gen, task_id, transient=0, waiting_since=None):
    """Chord body: media ready; run the Reset that was deferred meanwhile, exactly once."""
    store = runtime.store()
    body_id = self.request.id or f"direct-{task_id}"
    verdict = store.release_deferred(system_id, device, gen, body_id)
    if verdict["verdict"] == "stale":
        store.update_task(task_id, state="Cancelled", message="Superseded by a newer media request")
        return {"stale": True}
    store.update_task(task_id, state="Completed", status="OK", message="Virtual media inserted")
    action, power_task = verdict["action"], verdict["task"]
    if verdict["verdict"] not in ("released", "inflight") or not action:
        return {"released": None}
    runtime.events().released(system_id, action, power_task)
    try:
        run_reset(system_id, action, power_task)
    except Transient as exc:
        log.warning("deferred %s: %s", action, exc)
        err = retry_transient(self, exc, {"transient": transient, "waiting_since": waiting_since})
        store.update_task(power_task, **task_failure(err))
        store.finish_inflight(system_id, body_id)
        raise err from None
    except FAILURES as exc:
        fail_reset(system_id, action, power_task, exc)
    store.finish_inflight(system_id, body_id)
    return {"released": action, "task": power_task}


def _clear_device(system_id: str, device: str, gen: int) -> None:
    """Declarative eject plus deletion of the device's DataVolumes up to generation ``gen``,
    if ``gen`` is current (a newer insert's volume is never touched)."""
    kv, store, conf = runtime.kube(), runtime.store(), runtime.settings()
    ns, vm = split_system_id(system_id)
    with device_lock(store.r, system_id, device):
        if _current(system_id, device, gen) is None:
            return
        try:
            kv.update_vm(ns, vm, lambda obj: remove_cdrom_volume(obj, conf.cdrom_disk))
        except NotFound:
            # The VM was deleted meanwhile: nothing to eject, but its DataVolumes must go.
            log.info("VM %s is gone: only deleting its DataVolumes", system_id)
        delete_device_dvs(kv, system_id, device, below_gen=gen + 1)


@shared_task(bind=True, name="media.failed", acks_late=True, ignore_result=True)
def media_failed(self, system_id, device, gen, task_id):
    """Chord errback: media shows Inserted false + the reason; the deferred power-on is dropped
    on purpose (the node stays off so Ironic fails fast instead of booting an empty disk).

    Celery calls it in the worker that saw the failure, not through the broker, so it retries
    Kubernetes hiccups itself (bounded) instead of with ``self.retry``.
    """
    store = runtime.store()
    media = store.get_media(system_id, device)
    reason = media.get("message") or "virtual media could not be inserted"
    verdict = store.fail_media(system_id, device, gen, reason, task_id)
    if verdict["verdict"] == "stale":
        store.update_task(task_id, state="Cancelled", message="Superseded by a newer media request")
        return {"stale": True}
    log.error("virtual media failed: %s", reason)
    runtime.events().media_failed(system_id, device, gen, reason)
    for attempt in range(3):
        try:
            _clear_device(system_id, device, gen)
            break
        except WorkError as exc:
            log.warning("cleanup after failed media (attempt %d): %s", attempt + 1, exc)
            time.sleep(1.0 + attempt)
    return {"failed": reason, "cancelled": verdict["cancelled_task"]}


@shared_task(bind=True, name="media.eject", max_retries=None, acks_late=True, ignore_result=True)
@single_delivery
def media_eject(self, system_id, device, gen, task_id, transient=0):
    """Remove the cdrom volume (the drive stays, empty) and delete the device's DataVolumes."""
    store = runtime.store()
    if _current(system_id, device, gen) is None:
        store.update_task(task_id, state="Completed", message="Superseded by a newer media request")
        return {"stale": True}
    try:
        _clear_device(system_id, device, gen)
    except Transient as exc:
        raise retry_transient(self, exc, {"transient": transient}) from None
    except FAILURES as exc:
        store.update_task(task_id, **task_failure(exc))
        raise
    store.update_media(system_id, device, gen, attached=False)
    store.update_task(task_id, state="Completed", status="OK", message="Virtual media ejected")
    return {"ejected": True}


# -- legacy mode --------------------------------------------------------------------------------


def legacy_import(system_id, device, gen, image, task_id) -> dict:
    """The old single-worker service: one fleet-wide lock held for import + attach, blocking.

    Kept only to measure the difference (``FLEETFISH_LEGACY_SEQUENTIAL``): N nodes take N times
    the import time, and a worker slot sleeps through each import.
    """
    store, conf = runtime.store(), runtime.settings()
    deadline = time.time() + conf.import_timeout
    lock = store.r.lock(LEGACY_LOCK, timeout=conf.import_timeout + 600, blocking_timeout=None)
    store.update_task(task_id, state="Pending", message="Waiting for the media lock")
    if not lock.acquire(blocking=True, blocking_timeout=conf.import_timeout * 10):
        raise MediaError("timed out waiting for the legacy media lock")
    try:
        started = time.time()
        fallback: dict = {}
        for attempt in range(int(conf.import_timeout / max(conf.import_poll_seconds, 0.1)) + 1):
            since = started if attempt else None  # the first poll creates the DataVolume
            result = import_step(system_id, device, gen, image, task_id, since, fallback)
            if result is not None:
                break
            if time.time() > deadline + conf.import_timeout:
                raise MediaError("legacy import timed out")
            time.sleep(conf.import_poll_seconds)
        else:
            raise MediaError("legacy import timed out")
        if result.get("stale"):
            return result
        since = time.time()
        while True:
            done, attached = attach_step(system_id, device, gen, task_id)
            if done:
                return attached
            if time.time() - since > ATTACH_TIMEOUT:
                raise MediaError("legacy attach timed out")
            time.sleep(conf.import_poll_seconds)
    except Exception as exc:
        _record_reason(system_id, device, gen, exc)
        raise
    finally:
        try:
            lock.release()
        except Exception:  # expired meanwhile: nothing to release
            pass
