"""CDI in the lab: each DataVolume gets a PVC and an importer thread that really downloads its URL."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests

from lab.kubesim import boot, finalizers
from lab.kubesim.kinds import CONFIGMAP, DV, PVC, SECRET, VMI, Kind
from lab.kubesim.store import ObjectStore, now_iso

log = logging.getLogger(__name__)

IMMEDIATE = "cdi.kubevirt.io/storage.bind.immediate.requested"
SHA256_ANNOTATION = "lab.fleetfish.io/sha256"  # what the import really downloaded
FILESYSTEM_OVERHEAD = 0.055  # CDI's default: this share of a Filesystem PVC is not usable
CHUNK = 64 * 1024
_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def parse_quantity(text: str | int | None) -> int | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kMGT]i?|)\s*", str(text))
    return int(float(m.group(1)) * _UNITS[m.group(2)]) if m else None


class TransientError(Exception):
    """An importer pod failure CDI retries (the pod restarts, restartCount grows)."""


class FatalError(Exception):
    """An import error CDI gives up on: the DataVolume goes Failed."""


class Cancelled(Exception):
    pass


@dataclass
class CdiTimings:
    import_seconds: float = 5.0  # the whole download takes about this long
    schedule: float = 0.2  # PVC bound -> importer pod running
    retry: float = 2.0  # importer pod restart delay after a transient error
    # How often status.progress is refreshed: CDI's controller copies the importer's progress
    # into the DataVolume about every 2 s, and every refresh is a watch event for its clients.
    progress: float = 2.0
    max_attempts: int = 1000
    delete_seconds: float = 1.0  # a deleted DataVolume's finalizer work (then it is gone)


def _conditions(
    bound: bool, ready: bool, running: bool, reason: str = "", message: str = ""
) -> list[dict]:
    now = now_iso()
    return [
        {
            "type": "Bound",
            "status": str(bound),
            "reason": "Bound" if bound else "Pending",
            "message": "PVC Bound" if bound else "PVC Pending",
            "lastTransitionTime": now,
            "lastHeartbeatTime": now,
        },
        {
            "type": "Ready",
            "status": str(ready),
            "reason": "" if ready else (reason or "TransferRunning"),
            "message": "",
            "lastTransitionTime": now,
            "lastHeartbeatTime": now,
        },
        {
            "type": "Running",
            "status": str(running),
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
            "lastHeartbeatTime": now,
        },
    ]


class Cdi:
    """Starts an import per DataVolume created; deleting a DataVolume stops its import, and it
    goes ``delete_seconds`` later (its finalizer); the garbage collector then deletes its PVC."""

    def __init__(
        self, store: ObjectStore, timings: CdiTimings | None = None, immediate_binding: bool = False
    ):
        self.store = store
        self.timings = timings or CdiTimings()
        self.immediate_binding = immediate_binding
        self._jobs: dict[str, threading.Event] = {}  # DV uid -> cancel
        self._lock = threading.Lock()
        self._deleting: dict[str, float] = {}  # DV uid -> when its deletion was seen
        self._digests: dict[str, str] = {}  # PVC uid -> sha256 of the imported bytes
        self._ca_dir = tempfile.mkdtemp(prefix="kubesim-ca-")  # certConfigMap contents, as files

    def ca_file(self, ns: str, name: str, pem: str) -> str:
        """A file holding this ConfigMap's PEM text (requests verifies against a path)."""
        digest = hashlib.sha256(pem.encode()).hexdigest()[:16]
        path = os.path.join(self._ca_dir, f"{ns}-{name}-{digest}.pem")
        if not os.path.exists(path):
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(pem)
        return path

    def digest(self, pvc_uid: str) -> str | None:
        with self._lock:
            return self._digests.get(pvc_uid)

    def record_digest(self, pvc_uid: str, sha256: str) -> None:
        with self._lock:
            self._digests[pvc_uid] = sha256

    def on_created(self, kind: Kind, obj: dict) -> None:
        if kind is not DV:
            return
        cancel = threading.Event()
        with self._lock:
            self._jobs[obj["metadata"]["uid"]] = cancel
        thread = threading.Thread(
            target=self._run,
            args=(obj, cancel),
            name=f"import-{obj['metadata']['name']}",
            daemon=True,
        )
        thread.start()

    def on_deleted(self, kind: Kind, obj: dict) -> None:
        if kind is not DV:
            return
        self._cancel(obj["metadata"]["uid"])
        if "deletionTimestamp" in obj["metadata"]:
            with self._lock:
                self._deleting.setdefault(obj["metadata"]["uid"], time.monotonic())

    def _cancel(self, dv_uid: str) -> None:
        with self._lock:
            cancel = self._jobs.pop(dv_uid, None)
        if cancel:
            cancel.set()

    def reconcile(self, now: float) -> None:
        """Finish the DataVolume deletions whose time has come. Hold ``store.cond``."""
        t = self.timings
        uids = set()
        for dv in list(self.store.peek_all(DV)):
            meta = dv["metadata"]
            uids.add(meta["uid"])
            if "deletionTimestamp" not in meta:
                continue
            with self._lock:
                since = self._deleting.setdefault(meta["uid"], now)
            if now - since >= t.delete_seconds:
                self._cancel(meta["uid"])
                self.store.remove_finalizer(
                    DV, meta["namespace"], meta["name"], finalizers.DV_FINALIZER
                )
        with self._lock:
            for uid in [u for u in self._deleting if u not in uids]:
                del self._deleting[uid]

    def stop(self) -> None:
        with self._lock:
            jobs = list(self._jobs.values())
            self._jobs.clear()
        for cancel in jobs:
            cancel.set()
        shutil.rmtree(self._ca_dir, ignore_errors=True)

    # -- one import ----------------------------------------------------------------------------

    def _run(self, dv: dict, cancel: threading.Event) -> None:
        meta = dv["metadata"]
        try:
            _Import(self, dv, cancel).run()
        except Cancelled:
            pass
        except Exception:
            log.exception("import of %s/%s crashed", meta["namespace"], meta["name"])
        finally:
            with self._lock:
                if self._jobs.get(meta["uid"]) is cancel:
                    del self._jobs[meta["uid"]]


class _Import:
    def __init__(self, cdi: Cdi, dv: dict, cancel: threading.Event):
        self.cdi = cdi
        self.store = cdi.store
        self.t = cdi.timings
        self.cancel = cancel
        self.ns = dv["metadata"]["namespace"]
        self.name = dv["metadata"]["name"]
        self.uid = dv["metadata"]["uid"]
        self.dv = dv
        spec = dv.get("spec") or {}
        self.storage = spec.get("storage") or spec.get("pvc") or {}
        self.source = spec.get("source") or {}
        self.restarts = 0

    # -- status writes (only while the DataVolume is still the one this import is for) --------

    def _update(self, **status) -> None:
        def edit(obj):
            if obj["metadata"]["uid"] != self.uid:
                return
            st = obj.setdefault("status", {})
            st.update(status)
            st["restartCount"] = self.restarts
            st["claimName"] = self.name

        if self.cancel.is_set():
            raise Cancelled()
        if self.store.mutate(DV, self.ns, self.name, edit) is None:
            raise Cancelled()

    def _sleep(self, seconds: float) -> None:
        if self.cancel.wait(max(0.0, seconds)):
            raise Cancelled()

    def run(self) -> None:
        self._update(phase="Pending", progress="N/A", conditions=_conditions(False, False, False))
        if not self._create_pvc():
            return
        if not self._wait_for_binding():
            return
        self._bind_pvc()
        self._update(phase="PVCBound", conditions=_conditions(True, False, False))
        if "http" not in self.source:
            if "blank" in self.source:
                self._succeed()
            else:
                self._update(
                    phase="Failed",
                    conditions=_conditions(
                        True,
                        False,
                        False,
                        "Error",
                        "the lab simulator imports only http and blank sources",
                    ),
                )
            return
        self._update(
            phase="ImportScheduled",
            conditions=_conditions(True, False, False, "Pending", "Import pod scheduled"),
        )
        self._sleep(self.t.schedule)
        self._wait_for_pod_volumes()
        for _attempt in range(self.t.max_attempts):
            self._update(
                phase="ImportInProgress", conditions=_conditions(True, False, True, "Pod", "")
            )
            try:
                sha256 = self._download()
            except TransientError as exc:
                self.restarts += 1
                self._update(conditions=_conditions(True, False, False, "Error", str(exc)))
                self._sleep(self.t.retry)
                continue
            except FatalError as exc:
                self._update(
                    phase="Failed", conditions=_conditions(True, False, False, "Error", str(exc))
                )
                return
            self._succeed(sha256)
            return

    def _succeed(self, sha256: str | None = None) -> None:
        self._update(
            phase="Succeeded",
            progress="100.0%",
            conditions=_conditions(True, True, False, "Completed", "Import Complete"),
        )
        annotations = {
            "cdi.kubevirt.io/storage.pod.phase": "Succeeded",
            "cdi.kubevirt.io/storage.condition.running": "false",
        }
        if sha256:
            annotations[SHA256_ANNOTATION] = sha256
        with self.store.cond:
            pvc = self.store.peek(PVC, self.ns, self.name)
            if pvc is None or not self._owns(pvc):
                return
            if sha256:
                # boot records take the digest from here, not from the annotation anyone can edit
                self.cdi.record_digest(pvc["metadata"]["uid"], sha256)
            self.store.mutate(
                PVC,
                self.ns,
                self.name,
                lambda o: o["metadata"].setdefault("annotations", {}).update(annotations),
            )

    def _owns(self, pvc: dict) -> bool:
        return any(o.get("uid") == self.uid for o in pvc["metadata"].get("ownerReferences") or [])

    # -- PVC ----------------------------------------------------------------------------------

    def _create_pvc(self) -> bool:
        """Create the PVC, once an older PVC of that name (still Terminating) is gone."""
        url = (self.source.get("http") or {}).get("url", "")
        pvc = {
            "metadata": {
                "name": self.name,
                "namespace": self.ns,
                "labels": {
                    "app": "containerized-data-importer",
                    "app.kubernetes.io/component": "storage",
                },
                "annotations": {
                    "cdi.kubevirt.io/storage.import.endpoint": url,
                    "cdi.kubevirt.io/storage.contentType": "kubevirt",
                },
                "finalizers": [finalizers.PVC_PROTECTION],
                "ownerReferences": [
                    {
                        "apiVersion": DV.api_version,
                        "kind": DV.kind,
                        "name": self.name,
                        "uid": self.uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "accessModes": self.storage.get("accessModes") or ["ReadWriteOnce"],
                "resources": self.storage.get("resources") or {"requests": {"storage": "1Gi"}},
                "volumeMode": self.storage.get("volumeMode") or "Filesystem",
                "storageClassName": self.storage.get("storageClassName") or "lab-local",
            },
            "status": {"phase": "Pending"},
        }
        deadline = time.monotonic() + 7 * 86400  # a week: a lab never waits that long
        while time.monotonic() < deadline:
            with self.store.cond:
                current = self.store.peek(PVC, self.ns, self.name)
                if current is None:
                    self.store.create(PVC, pvc)
                    return True
                if self._owns(current):
                    return True
            self._sleep(0.1)  # CDI retries: the name is still held by a Terminating PVC
        return False

    def _wait_for_binding(self) -> bool:
        immediate = self.cdi.immediate_binding or (
            (self.dv["metadata"].get("annotations") or {}).get(IMMEDIATE) == "true"
        )
        waiting = False
        deadline = time.monotonic() + 7 * 86400  # a week: a lab never waits that long
        while not immediate and not self._has_consumer():
            if time.monotonic() > deadline:
                return False
            if not waiting:
                self._update(
                    phase="WaitForFirstConsumer", conditions=_conditions(False, False, False)
                )
                waiting = True
            self._sleep(0.2)
        return True

    def _has_consumer(self) -> bool:
        with self.store.cond:
            return any(
                boot.volume_claim(v) == self.name
                for vmi in self.store.peek_all(VMI)
                if vmi["metadata"]["namespace"] == self.ns
                for v in (vmi.get("spec") or {}).get("volumes") or []
            )

    def _bind_pvc(self) -> None:
        request = ((self.storage.get("resources") or {}).get("requests") or {}).get(
            "storage", "1Gi"
        )

        def edit(obj):
            obj["spec"]["volumeName"] = f"pvc-{obj['metadata']['uid']}"
            obj["status"] = {
                "phase": "Bound",
                "accessModes": obj["spec"]["accessModes"],
                "capacity": {"storage": request},
            }

        self.store.mutate(PVC, self.ns, self.name, edit)

    # -- the download ---------------------------------------------------------------------------

    def _wait_for_pod_volumes(self) -> None:
        """The importer pod mounts the http source's Secret and CA ConfigMap: while one is
        missing it cannot start (ContainerCreating: no restarts, no progress), as in a cluster."""
        http = self.source.get("http") or {}
        refs = [(SECRET, http.get("secretRef")), (CONFIGMAP, http.get("certConfigMap"))]
        while True:
            missing = [
                f'{kind.singular} "{name}" not found'
                for kind, name in refs
                if name and self.store.peek(kind, self.ns, name) is None
            ]
            if not missing:
                return
            self._update(
                conditions=_conditions(
                    True, False, False, "Pending", f"MountVolume.SetUp failed: {missing[0]}"
                )
            )
            self._sleep(self.t.retry)

    def _ca_bundle(self, http: dict) -> str | bool:
        """What the importer verifies an https server with: the certConfigMap's certificates
        (written to a file for requests), else the system roots."""
        name = http.get("certConfigMap")
        if not name:
            return True
        config_map = self.store.peek(CONFIGMAP, self.ns, name) or {}
        pem = "\n".join(str(v) for v in (config_map.get("data") or {}).values())
        path = self.cdi.ca_file(self.ns, name, pem)
        return path

    def _download(self) -> str:
        """The sha256 hex digest of the bytes downloaded."""
        http = self.source["http"]
        url = http["url"]
        headers = {}
        for line in http.get("extraHeaders") or []:
            key, _, value = line.partition(":")
            headers[key.strip()] = value.strip()
        try:
            resp = requests.get(
                url, stream=True, timeout=(5, 30), headers=headers, verify=self._ca_bundle(http)
            )
        except requests.exceptions.SSLError as exc:
            why = (
                "x509: certificate signed by unknown authority"
                if "CERTIFICATE_VERIFY_FAILED" in str(exc)
                else str(exc)
            )
            raise TransientError(
                f'Unable to connect to http data source: Get "{url}": tls: failed to verify '
                f"certificate: {why}"
            ) from None
        except requests.ConnectionError:
            parts = urlsplit(url)
            raise TransientError(
                f'Unable to connect to http data source: Get "{url}": dial tcp {parts.hostname}:{parts.port or 80}: '
                "connect: connection refused"
            ) from None
        except requests.RequestException as exc:
            raise TransientError(f"Unable to connect to http data source: {exc}") from None
        with resp:
            if resp.status_code != 200:
                raise TransientError(
                    "Unable to connect to http data source: expected status code 200, got "
                    f"{resp.status_code}. Status: {resp.status_code} {resp.reason}"
                )
            length = int(resp.headers.get("Content-Length") or 0) or None
            self._check_size(length)
            digest = hashlib.sha256()
            done = 0
            start = time.monotonic()
            next_progress = start + self.t.progress
            rate = length / self.t.import_seconds if length and self.t.import_seconds > 0 else None
            try:
                for chunk in resp.iter_content(CHUNK):
                    digest.update(chunk)
                    done += len(chunk)
                    if rate:
                        self._sleep(done / rate - (time.monotonic() - start))
                    else:
                        self._sleep(self.t.import_seconds / 256)
                    if time.monotonic() >= next_progress:
                        next_progress = time.monotonic() + self.t.progress
                        progress = f"{min(99.99, 100.0 * done / length):.2f}%" if length else "N/A"
                        self._update(progress=progress)
            except requests.RequestException as exc:
                raise TransientError(
                    f"Unable to transfer source data to scratch space: {exc}"
                ) from None
            if length and done != length:
                raise TransientError(
                    f"Unable to transfer source data: unexpected EOF after {done} of {length} bytes"
                )
        self._check_checksum(http.get("checksum"), digest.hexdigest())
        return digest.hexdigest()

    def _check_size(self, length: int | None) -> None:
        requested = parse_quantity(
            ((self.storage.get("resources") or {}).get("requests") or {}).get("storage")
        )
        if not length or not requested:
            return
        usable = (
            requested
            if self.storage.get("volumeMode") == "Block"
            else int(requested * (1 - FILESYSTEM_OVERHEAD))
        )
        if length > usable:
            raise TransientError(
                f"Unable to process data: Virtual image size {length} is larger than the reported available "
                f"storage {usable}. A larger PVC is required."
            )

    @staticmethod
    def _check_checksum(expected: str | None, actual_hex: str) -> None:
        if not expected:
            return
        algo, _, value = expected.partition(":")
        if algo.lower() != "sha256":
            raise FatalError(f"unsupported checksum algorithm {algo!r}")
        if value.lower() != actual_hex:
            raise FatalError(
                f"Unable to process data: checksum mismatch: expected sha256:{value}, got sha256:{actual_hex}"
            )
