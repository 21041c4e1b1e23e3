"""The watcher: keeps the Redis mirror (``ff:sys:*``) equal to the cluster's VMs and VMIs,
and the DataVolume mirror (``ff:dv:*``, workers/dvmirror.py) equal to fleetfish's DataVolumes.

Any number may run; the one holding the Redis lease ``ff:lease:watcher`` lists VMs and VMIs,
writes every mirror document, then follows watches from the list's resourceVersion and writes
each change as it arrives. A standby takes over within ``LEASE_MS`` of the holder dying. On 410
it relists; on errors it reconnects with backoff. SIGTERM stops it and frees the lease.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid

from fleetfish.eventlog import EventLog
from fleetfish.mirror import claim_names, claim_size, mirror_doc, shown_part, system_id
from fleetfish.settings import Settings
from fleetfish.store import KEY_MIRROR, Store
from workers import reaper
from workers.dvmirror import PROGRESS_SECONDS, DvMirror, wake_sender
from workers.dvstatus import import_ended, import_status, report_import_progress
from workers.kubevirt import DV_PLURAL, VM_PLURAL, VMI_PLURAL, Gone, KubeError, KubeVirt

log = logging.getLogger("fleetfish.watcher")

LEASE_KEY = "ff:lease:watcher"
LEASE_MS = 4000
RENEW_SECONDS = 1.0
STANDBY_POLL = 0.5
WATCH_SECONDS = 30
MAX_BACKOFF = 10.0
# Consecutive failed watch reconnects before the whole state is listed again.
RELIST_AFTER = 5
# Pending media untouched, an eject not done, or a Reset not taken by any worker, for this
# many visibility timeouts lost its message: send it again.
STALE_MEDIA_TIMEOUTS = 4
STALE_RESET_TIMEOUTS = 4

_RENEW = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
_RELEASE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


def _key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", "default"), meta.get("name", "")


class Watcher:
    """One watcher process: the lease loop plus, while holding it, a sync session."""

    def __init__(self, settings: Settings, store: Store, kube: KubeVirt, holder: str = ""):
        self.settings = settings
        self.store = store
        self.kube = kube
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.stop_event = threading.Event()
        self.holding = False
        self.dvs = DvMirror(store.r, settings.task_result_ttl)
        # Last import progress shown per DataVolume (from its watch events).
        self._progress: dict[tuple[str, str], tuple[float, float]] = {}
        self._renew = store.r.register_script(_RENEW)
        self._release = store.r.register_script(_RELEASE)
        self._lock = threading.Lock()
        self._vms: dict[tuple[str, str], dict] = {}
        self._vmis: dict[tuple[str, str], dict] = {}
        # The shown part of the mirror document last written per system: most VM and VMI
        # events (a new resourceVersion, conditions' times, hotplug phases) do not change it.
        self._written_docs: dict[str, dict] = {}
        # (namespace, PVC name) -> bytes: read at each relist, and once for a claim first seen
        # on a VM event. A resize shows at the next relist.
        self._claims: dict[tuple[str, str], int] = {}
        # (kind, namespace, name) -> instancetype spec, read once per relist.
        self._instancetypes: dict[tuple[str, str, str], dict] = {}
        self._session_stop = threading.Event()
        self._relist = threading.Event()
        self._handles: list = []
        self._threads: list[threading.Thread] = []
        self.send_chord: reaper.SendChord | None = None
        self.send_reset: reaper.SendReset | None = None
        self.send_start_check: reaper.SendStartCheck | None = None
        self.send_eject: reaper.SendEject | None = None
        self._next_reap = 0.0
        self.events = EventLog(store.r, settings.event_log_entries)
        # VMI uid whose boot this process already logged, per VM: skips the Redis call on the
        # VMI's later status updates (the log's own mark keeps it once across watchers).
        self._booted: dict[tuple[str, str], str] = {}

    # -- lease -------------------------------------------------------------------------------

    def try_acquire(self) -> bool:
        ok = bool(self.store.r.set(LEASE_KEY, self.holder, nx=True, px=LEASE_MS))
        # Still ours after a failed renewal (a Redis hiccup): take it back at once.
        ok = ok or self.renew()
        if ok:
            self.store.r.hset(KEY_MIRROR, "holder", self.holder)
            log.info("lease acquired by %s", self.holder)
        return ok

    def renew(self) -> bool:
        try:
            return bool(int(self._renew(keys=[LEASE_KEY], args=[self.holder, LEASE_MS])))
        except Exception as exc:  # Redis unreachable: assume the lease is lost, resync later
            log.warning("lease renewal failed: %s", exc)
            return False

    def release(self) -> None:
        try:
            self._release(keys=[LEASE_KEY], args=[self.holder])
        except Exception as exc:
            log.warning("lease release failed: %s", exc)

    def run(self) -> None:
        """Until stopped: stand by, or hold the lease and keep the mirror in sync."""
        next_renew = 0.0
        while not self.stop_event.is_set():
            if not self.holding:
                try:
                    self.holding = self.try_acquire()
                except Exception as exc:
                    log.warning("cannot reach Redis for the lease: %s", exc)
                if self.holding:
                    self._start_session()
                    next_renew = time.monotonic() + RENEW_SECONDS
                else:
                    self.stop_event.wait(STANDBY_POLL)
                continue
            if time.monotonic() >= next_renew:
                if not self.renew():
                    log.warning("lease lost: standing by")
                    self.holding = False
                    self._stop_session()
                    continue
                next_renew = time.monotonic() + RENEW_SECONDS
            if self._relist.is_set():
                self._stop_session()
                self._start_session()
            self._reap()
            self.stop_event.wait(0.1)
        self._stop_session()
        if self.holding:
            self.release()
            self.holding = False
        log.info("watcher %s stopped", self.holder)

    def stop(self) -> None:
        self.stop_event.set()

    def _reap(self) -> None:
        """Once per visibility timeout, while holding the lease: re-send lost media, eject and
        Reset work, and start checks."""
        if time.monotonic() < self._next_reap:
            return
        vt = self.settings.visibility_timeout
        self._next_reap = time.monotonic() + vt
        try:
            # Pending inserts and ejects are different media states: one read serves both.
            media = reaper.media_snapshot(self.store)
            if self.send_chord is not None:
                reaper.resend_stalled(self.store, self.send_chord, STALE_MEDIA_TIMEOUTS * vt, media)
            if self.send_eject is not None:
                reaper.resend_stalled_ejects(
                    self.store, self.send_eject, STALE_MEDIA_TIMEOUTS * vt, media
                )
            if self.send_reset is not None:
                reaper.resend_lost_resets(self.store, self.send_reset, STALE_RESET_TIMEOUTS * vt)
            if self.send_start_check is not None:
                reaper.resend_lost_start_checks(
                    self.store, self.send_start_check, STALE_RESET_TIMEOUTS * vt
                )
        except Exception as exc:  # Redis or broker away: the next round tries again
            log.warning("lost work check failed: %s", exc)

    def resend_lost_work(self) -> None:
        """The reaper's senders over a client-only Celery app (the legacy chain holds its lock
        for a whole import: its media work is never sent twice)."""
        send_chord, self.send_reset, self.send_eject, self.send_start_check = reaper.celery_senders(
            self.settings
        )
        if not self.settings.legacy_sequential:
            self.send_chord = send_chord
            self.dvs.send_wake = wake_sender(self.settings)

    # -- sync session ------------------------------------------------------------------------

    def _start_session(self) -> None:
        """List everything, write the whole mirror, then watch from the list's versions."""
        self._relist.clear()
        self._session_stop = threading.Event()
        try:
            vm_rvs, vmi_rvs = self.relist()
            dv_rvs = self.relist_dvs()
        except KubeError as exc:
            log.warning("list failed, retrying: %s", exc)
            self.stop_event.wait(1.0)
            self._relist.set()
            return
        for plural, versions in ((VM_PLURAL, vm_rvs), (VMI_PLURAL, vmi_rvs), (DV_PLURAL, dv_rvs)):
            for ns, rv in versions.items():
                thread = threading.Thread(
                    target=self._watch_loop,
                    args=(plural, ns, rv, self._session_stop),
                    name=f"watch-{plural}-{ns or 'all'}",
                    daemon=True,
                )
                thread.start()
                self._threads.append(thread)

    def _stop_session(self) -> None:
        self._session_stop.set()
        for handle in list(self._handles):
            handle.stop()
        for thread in self._threads:
            thread.join(timeout=2.0)
        self._threads = [t for t in self._threads if t.is_alive()]

    def relist(self) -> tuple[dict[str, str], dict[str, str]]:
        vms, vm_rvs = self.kube.list_vms()
        vmis, vmi_rvs = self.kube.list_vmis()
        claims = {}
        try:
            pvcs = self.kube.list_pvcs()
        except KubeError as exc:  # sizes are inventory only: never hold the mirror back for them
            log.warning("cannot list PVCs for disk sizes: %s", exc)
            pvcs = []
        for pvc in pvcs:
            size = claim_size(pvc)
            if size:
                claims[_key(pvc)] = size
        with self._lock:
            self._vms = {_key(vm): vm for vm in vms}
            self._vmis = {_key(vmi): vmi for vmi in vmis}
            self._claims = claims
            self._instancetypes = {}
            docs = [self._doc(key, vm) for key, vm in self._vms.items()]
            # Another holder may have written meanwhile: the list's documents are what is stored.
            self._written_docs = {}
            if self.holding:
                self.store.replace_systems(docs)
                self._written_docs = {doc["id"]: shown_part(doc) for doc in docs}
                for key, vmi in self._vmis.items():
                    if key in self._vms:
                        self._log_boot(key, vmi)
        log.info("listed %d VMs and %d VMIs", len(vms), len(vmis))
        return vm_rvs, vmi_rvs

    def relist_dvs(self) -> dict[str, str]:
        """List fleetfish's DataVolumes and write their mirror (one marked deleted when it
        went while nothing watched)."""
        dvs, versions = self.kube.list_managed_dvs()
        if self.holding:
            for ns in versions:
                in_ns = [
                    d for d in dvs if not ns or (d.get("metadata") or {}).get("namespace") == ns
                ]
                self.dvs.replace(ns, in_ns)
            for dv in dvs:
                if import_ended(dv):  # ended while nothing watched: its import looks now
                    self._wake(*_key(dv))
        log.info("listed %d DataVolumes", len(dvs))
        return versions

    def _watch_loop(self, plural: str, ns: str, rv: str, session: threading.Event) -> None:
        failures = 0
        while not session.is_set() and not self.stop_event.is_set():
            try:
                for event in self.kube.watch(plural, ns, rv, WATCH_SECONDS, self._handles):
                    if session.is_set():
                        return
                    obj = event["object"]
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self.apply(plural, event["type"], obj)
                    if plural == DV_PLURAL and self.holding:
                        # Events and bookmarks: the stream is live (a stamp a second will do).
                        self.dvs.alive(ns, every=1.0)
                    # Only after the write: a failed write is replayed by the next watch.
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    failures = 0
                if plural == DV_PLURAL and self.holding and not session.is_set():
                    self.dvs.alive(ns)  # a stream that ran to its end saw everything until now
                failures = 0
            except Gone:
                log.info("%s watch expired (410): relisting", plural)
                self._relist.set()
                return
            except (KubeError, Exception) as exc:  # keep the thread alive on any surprise
                failures += 1
                if session.is_set():
                    return
                log.warning("%s watch failed (%d): %s", plural, failures, exc)
                if failures >= RELIST_AFTER:
                    self._relist.set()
                    return
                session.wait(min(MAX_BACKOFF, 0.5 * 2**failures))

    def apply(self, plural: str, kind: str, obj: dict) -> None:
        """One watch event -> the mirror document of the affected VM (or the DataVolume's
        hash), written at once."""
        key = _key(obj)
        if plural == DV_PLURAL:
            if self.holding:
                if kind == "DELETED":
                    self.dvs.deleted(*key)
                else:
                    self.dvs.put(obj)
                if kind == "DELETED" or import_ended(obj):
                    self._wake(*key)
                else:
                    self._show_progress(key, obj)
            return
        with self._lock:
            if plural == VM_PLURAL:
                if kind == "DELETED":
                    self._vms.pop(key, None)
                else:
                    self._vms[key] = obj
            elif kind == "DELETED":
                # A late event of a replaced VMI must not hide the new one.
                current = self._vmis.get(key)
                if current is None or _uid(current) == _uid(obj):
                    self._vmis.pop(key, None)
            else:
                self._vmis[key] = obj
            if not self.holding:
                return
            vm = self._vms.get(key)
            if vm is not None:
                doc = self._doc(key, vm)
                shown = shown_part(doc)  # compared as dicts: no JSON unless it is written
                if self._written_docs.get(doc["id"]) != shown:
                    self.store.put_system(doc)
                    self._written_docs[doc["id"]] = shown
                if plural == VMI_PLURAL and kind != "DELETED":
                    self._log_boot(key, obj)
            elif plural == VM_PLURAL and kind == "DELETED":
                gone = system_id(*key)
                self._written_docs.pop(gone, None)
                self.store.delete_system(gone)

    def _show_progress(self, key: tuple[str, str], dv: dict) -> None:
        """The progress of an import waiting for its wake-up, shown as its own looks would."""
        pct = import_status(dv).progress
        shown, at = self._progress.get(key, (None, 0.0))
        if pct is None or pct == shown or time.monotonic() - at < PROGRESS_SECONDS:
            return
        self._progress[key] = (pct, time.monotonic())
        try:
            waiting = self.dvs.waiting_import(*key)
            if waiting:
                report_import_progress(self.store, self.events, shown=pct, **waiting)
        except Exception as exc:  # noqa: BLE001 - progress is cosmetic, the import goes on
            log.warning("could not show the progress of %s/%s: %s", *key, exc)

    def _wake(self, ns: str, name: str) -> None:
        """The import waiting on this DataVolume looks now, not at its next scheduled look."""
        if self.dvs.send_wake is None:
            return
        try:
            self._progress.pop((ns, name), None)
            payload = self.dvs.wake_payload(ns, name)
            if payload:
                self.dvs.send_wake(payload)
                # Forgotten only once sent: if this send fails, the look's due time sends it.
                self.dvs.forget_wake(ns, name, payload)
        except Exception as exc:  # noqa: BLE001 - the workers send the look when it falls due
            log.warning("could not wake the import of %s/%s: %s", ns, name, exc)

    def _doc(self, key: tuple[str, str], vm: dict) -> dict:
        """The mirror document of a VM, with the sizes of the claims behind its disks (a claim
        not known yet is read once; one that does not exist yet is asked again next event)."""
        ns = key[0]
        for name in claim_names(vm):
            if (ns, name) in self._claims:
                continue
            try:
                pvc = self.kube.get_pvc(ns, name)
            except KubeError as exc:
                log.warning("cannot read PVC %s/%s for its size: %s", ns, name, exc)
                continue
            size = claim_size(pvc) if pvc else None
            if size:
                self._claims[(ns, name)] = size
        sizes = {n: self._claims[(ns, n)] for n in claim_names(vm) if (ns, n) in self._claims}
        return mirror_doc(vm, self._vmis.get(key), sizes, self._instancetype(ns, vm))

    def _instancetype(self, ns: str, vm: dict) -> dict | None:
        """The spec of the instancetype the VM names (None without one, or not readable yet)."""
        ref = (vm.get("spec") or {}).get("instancetype") or {}
        if not ref.get("name"):
            return None
        kind = (ref.get("kind") or "VirtualMachineClusterInstancetype").lower()
        key = (kind, ns if kind == "virtualmachineinstancetype" else "", ref["name"])
        if key not in self._instancetypes:
            try:
                found = self.kube.get_instancetype(ns, ref)
            except KubeError as exc:
                log.warning("cannot read instancetype %s: %s", key, exc)
                return None
            if found is None:
                return None
            self._instancetypes[key] = found.get("spec") or {}
        return self._instancetypes[key]

    def _log_boot(self, key: tuple[str, str], vmi: dict) -> None:
        """A VMI that reached Running booted: log from what, once per VMI."""
        uid = _uid(vmi)
        if (vmi.get("status") or {}).get("phase") != "Running" or self._booted.get(key) == uid:
            return
        device, volume = boot_device(vmi)
        sid = system_id(*key)
        image = ""
        if device == "Cd":
            media = self.store.get_media(sid, "Cd")
            image = media.get("image", "") if media.get("dv") == volume else ""
        try:
            self.events.booted(sid, uid, device, image)
        except Exception as exc:  # noqa: BLE001 - the mirror matters more than the log line
            log.warning("could not log the boot of %s: %s", sid, exc)
            return
        self._booted[key] = uid


def boot_device(vmi: dict) -> tuple[str, str]:
    """(Redfish boot source, volume name) the firmware of this VMI started from: the first disk
    in boot order with media present (a hot-plugged one only once attached); ("None", "")
    when no disk has any. Network boot is not judged (KubeVirt tells nothing of it)."""
    spec = vmi.get("spec") or {}
    disks = ((spec.get("domain") or {}).get("devices") or {}).get("disks") or []
    if any(d.get("bootOrder") is not None for d in disks):
        disks = sorted((d for d in disks if d.get("bootOrder") is not None), key=_boot_order)
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    not_ready = {
        s.get("name")
        for s in (vmi.get("status") or {}).get("volumeStatus") or []
        if s.get("hotplugVolume") is not None and s.get("phase") != "Ready"
    }
    for disk in disks:
        name = disk.get("name")
        volume = volumes.get(name)
        if volume is None or name in not_ready:
            continue
        source = volume.get("dataVolume") or volume.get("persistentVolumeClaim") or {}
        claim = source.get("name") or source.get("claimName") or ""
        return ("Cd" if "cdrom" in disk else "Hdd"), claim
    return "None", ""


def _boot_order(disk: dict) -> int:
    return int(disk["bootOrder"])


def _uid(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("uid", "")


def main(argv: list[str] | None = None) -> int:
    settings = Settings.from_env()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=settings.log_level, handlers=[handler])
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    store = Store.from_url(settings.redis_url)
    watcher = Watcher(settings, store, KubeVirt.from_settings(settings))
    watcher.resend_lost_work()

    def _terminate(signum, _frame):
        log.info("signal %s: stopping", signum)
        watcher.stop()

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    log.info("watcher %s standing by for the lease", watcher.holder)
    watcher.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
