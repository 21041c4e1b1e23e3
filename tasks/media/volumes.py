"""Virtual media logic behind the media.* tasks: DataVolume naming/sizing, import status, cdrom.

Pure functions first (unit-tested without a cluster), then the few helpers that call the
KubeVirt adapter. The tasks in ``tasks/media.py`` only sequence these and talk to Redis.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import ssl
from urllib.parse import urlsplit

import requests

from fleetfish.mirror import split_system_id
from fleetfish.settings import Settings
from workers.dvmirror import LABEL_DEVICE, LABEL_GEN, LABEL_SYSTEM, DvMirror
from workers.kubevirt import AlreadyExists, KubeVirt

log = logging.getLogger("fleetfish.worker")

LABEL_MANAGED = "app.kubernetes.io/managed-by"
ANN_BIND_IMMEDIATE = "cdi.kubevirt.io/storage.bind.immediate.requested"
ANN_IMAGE = "fleetfish.io/image"
# Used when the image server does not answer HEAD with a length (most ISOs are below this).
DEFAULT_SIZE_MIB = 2048
HEAD_TIMEOUT = (2.0, 3.0)
MIB = 2**20
_NON_DNS = re.compile(r"[^a-z0-9-]+")
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")


# -- pure -------------------------------------------------------------------------------------


def dv_name(system_id: str, device: str, image: str, gen: int | str) -> str:
    """``ff-<vm name>-g<gen>-<8 hex>``: one DataVolume per InsertMedia, a DNS-1123 label.

    Deterministic per (system, device, image, generation), so a redelivered task of the same
    insert finds its own DataVolume, while every new insert, even of the same URL, imports
    afresh into a volume nothing else shares: a BMC mounts what the URL serves at insert time,
    and an eject or an older insert can never delete the volume a newer one uses.
    """
    digest = hashlib.sha256(f"{system_id}\n{device}\n{image}\n{gen}".encode()).hexdigest()[:8]
    _, vm = split_system_id(system_id)
    tail = f"-g{gen}-{digest}"
    stem = _NON_DNS.sub("-", vm.lower()).strip("-")
    stem = stem[: 63 - len("ff-") - len(tail)].rstrip("-")
    return f"ff-{stem}{tail}" if stem else f"ff{tail}"


def dv_generation(dv: dict) -> int:
    """The media generation a DataVolume was created for (0: before generations were labelled)."""
    value = ((dv.get("metadata") or {}).get("labels") or {}).get(LABEL_GEN, "")
    return int(value) if str(value).isdigit() else 0


def system_label(system_id: str) -> str:
    """Label value naming the VM (the namespace is the DataVolume's own); hashed if too long."""
    _, vm = split_system_id(system_id)
    if _LABEL_VALUE.match(vm):
        return vm
    return "h-" + hashlib.sha256(system_id.encode()).hexdigest()[:20]


def media_labels(system_id: str, device: str, gen: int | str) -> dict[str, str]:
    """The labels of everything one media generation creates (DataVolume, Secret, ConfigMap):
    what cleanup and the DataVolume watch select on."""
    return {
        LABEL_SYSTEM: system_label(system_id),
        LABEL_DEVICE: device,
        LABEL_GEN: str(gen),
        LABEL_MANAGED: "fleetfish",
    }


def device_selector(system_id: str, device: str) -> str:
    return f"{LABEL_SYSTEM}={system_label(system_id)},{LABEL_DEVICE}={device}"


def storage_size(content_length: int | None, settings: Settings) -> str:
    """Requested PVC size: the image length times the margin (filesystem overhead), at least
    the configured minimum, rounded up to whole MiB."""
    if not content_length or content_length <= 0:
        return f"{max(DEFAULT_SIZE_MIB, settings.dv_min_size_mib)}Mi"
    mib = math.ceil(content_length * settings.dv_size_margin / MIB)
    return f"{max(mib, settings.dv_min_size_mib)}Mi"


def dv_body(
    system_id: str,
    device: str,
    image: str,
    gen: int,
    size: str,
    settings: Settings,
    secret_name: str = "",
    ca_configmap: str = "",
) -> dict:
    """``ca_configmap``: the system's own CA ConfigMap (``trust_configmap``), else the
    deployment's (FLEETFISH_IMAGE_CA_CONFIGMAP)."""
    ns, _ = split_system_id(system_id)
    http: dict = {"url": image}
    if secret_name:
        http["secretRef"] = secret_name
    ca = ca_configmap or settings.image_ca_configmap
    if ca and image.lower().startswith("https://"):
        # CDI's importer trusts only its system roots unless the DataVolume names a CA.
        http["certConfigMap"] = ca
    storage: dict = {"resources": {"requests": {"storage": size}}}
    if settings.dv_storage_class:
        storage["storageClassName"] = settings.dv_storage_class
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {
            "name": dv_name(system_id, device, image, gen),
            "namespace": ns,
            "labels": media_labels(system_id, device, gen),
            # A stopped VM is no "first consumer": without this the import would never start.
            "annotations": {ANN_BIND_IMMEDIATE: "true", ANN_IMAGE: image[:1024]},
        },
        "spec": {"source": {"http": http}, "storage": storage},
    }


def import_poll_delay(
    progress: float | None, elapsed: float, base: float, cap: float, visibility_timeout: float
) -> float:
    """Seconds until the next look at an import: half its estimated remaining time, at least
    ``base``, at most ``cap`` (and a third of the visibility timeout, beyond which Redis would
    deliver the waiting message again).

    The estimate extrapolates the progress seen after ``elapsed`` seconds; with no progress yet
    it polls every ``base`` seconds. A 30 s import is looked at about 8 times instead of 30, and
    polls come every ``base`` seconds again near its end, so the finish is seen as soon as before.
    """
    ceiling = max(base, min(cap, visibility_timeout / 3))
    if not progress or progress <= 0 or elapsed <= 0:
        return base
    remaining = elapsed * (100.0 - min(progress, 100.0)) / progress
    return max(base, min(ceiling, remaining / 2))


def _template_spec(vm: dict) -> dict:
    return vm.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})


def set_cdrom_volume(vm: dict, disk: str, dv: str) -> bool:
    """Mutator: the cdrom disk's volume becomes the hotpluggable DataVolume ``dv``.

    Replaces whatever volume the disk had; False when it already points at ``dv``.
    """
    spec = _template_spec(vm)
    disks = ((spec.get("domain") or {}).get("devices") or {}).get("disks") or []
    if not any(d.get("name") == disk for d in disks):
        raise ValueError(f"VM has no disk named {disk!r} for virtual media")
    wanted = {"name": disk, "dataVolume": {"name": dv, "hotpluggable": True}}
    volumes = spec.get("volumes") or []
    if any(v == wanted for v in volumes):
        return False
    spec["volumes"] = [v for v in volumes if v.get("name") != disk] + [wanted]
    return True


def remove_cdrom_volume(vm: dict, disk: str) -> bool:
    """Mutator: declarative eject, the disk stays as an empty drive. False if already empty."""
    spec = _template_spec(vm)
    volumes = spec.get("volumes") or []
    kept = [v for v in volumes if v.get("name") != disk]
    if len(kept) == len(volumes):
        return False
    spec["volumes"] = kept
    return True


def cdrom_volume_dv(vm_or_vmi: dict, disk: str) -> str:
    """Name of the DataVolume/PVC on ``disk`` in a VM template or a VMI spec ('' if none)."""
    spec = vm_or_vmi.get("spec") or {}
    if "template" in spec:
        spec = (spec.get("template") or {}).get("spec") or {}
    for volume in spec.get("volumes") or []:
        if volume.get("name") == disk:
            src = volume.get("dataVolume") or volume.get("persistentVolumeClaim") or {}
            return src.get("name") or src.get("claimName") or ""
    return ""


def vmi_volume_ready(vmi: dict, disk: str, dv: str) -> bool:
    """True once the running VMI shows ``dv`` hot-plugged on ``disk`` (volumeStatus Ready)."""
    if cdrom_volume_dv(vmi, disk) not in ("", dv):
        return False
    for vs in (vmi.get("status") or {}).get("volumeStatus") or []:
        if vs.get("name") != disk:
            continue
        claim = (vs.get("persistentVolumeClaimInfo") or {}).get("claimName")
        return vs.get("phase") == "Ready" and claim in (None, "", dv)
    return False


# -- cluster helpers ----------------------------------------------------------------------------


def head_content_length(url: str) -> int | None:
    """Content-Length from a short HEAD of the image; None when the server does not say.

    Redirects are not followed: the API checked this URL's host, not where an image server
    may send the worker (which holds the cluster credentials). CDI's importer fetches the
    image itself; only the size estimate falls back to the default.
    """
    try:
        response = requests.head(url, allow_redirects=False, timeout=HEAD_TIMEOUT)
    except requests.RequestException as exc:
        log.info("HEAD %s failed (%s): using the default size", url, exc)
        return None
    if 300 <= response.status_code < 400:
        log.info(
            "HEAD %s answered %s: not followed, using the default size", url, response.status_code
        )
        return None
    if response.status_code >= 400:
        log.info("HEAD %s answered %s: using the default size", url, response.status_code)
        return None
    try:
        return int(response.headers.get("Content-Length", ""))
    except ValueError:
        return None


def ensure_dv(kv: KubeVirt, body: dict) -> tuple[dict, bool]:
    """Create the DataVolume, or return the existing one of the same name. (dv, created)."""
    ns = body["metadata"]["namespace"]
    try:
        return kv.create_dv(ns, body), True
    except AlreadyExists:
        return kv.get_dv(ns, body["metadata"]["name"]), False


def credentials_secret(
    kv: KubeVirt, system_id: str, device: str, image: str, gen: int, creds: dict[str, str]
) -> str:
    """The Secret CDI's http source reads basic-auth credentials from ('' without creds)."""
    if not (creds.get("username") or creds.get("password")):
        return ""
    ns, _ = split_system_id(system_id)
    name = f"{dv_name(system_id, device, image, gen)}-auth"
    data = {"accessKeyId": creds.get("username", ""), "secretKey": creds.get("password", "")}
    kv.apply_secret(ns, name, data, media_labels(system_id, device, gen))
    return name


class CertificateUnreadable(Exception):
    """The image server's certificate could not be read (the message says why)."""


def presented_certificate(image: str, timeout: float = 10.0) -> str:
    """The PEM certificate the image's https server presents (not verified: that is the point)."""
    parts = urlsplit(image)
    try:
        return ssl.get_server_certificate((parts.hostname, parts.port or 443), timeout=timeout)
    except (OSError, ValueError) as exc:
        raise CertificateUnreadable(
            f"could not read the certificate of {parts.hostname}: {exc}"
        ) from None


def trust_configmap(
    kv: KubeVirt,
    system_id: str,
    device: str,
    image: str,
    gen: int,
    certificates: list[str],
    verify: bool,
) -> str:
    """The ConfigMap of what this import trusts when the VirtualMedia says so ('' otherwise:
    the deployment's CA applies): its Certificates, or with VerifyCertificate false (allowed
    by the operator) the certificate the server presents. Named after the DataVolume and
    deleted with it."""
    if not image.lower().startswith("https://") or (verify and not certificates):
        return ""
    pems = certificates if verify else [presented_certificate(image)]
    ns, _ = split_system_id(system_id)
    name = f"{dv_name(system_id, device, image, gen)}-ca"
    bundle = {"ca.pem": "\n".join(p.strip() for p in pems) + "\n"}
    kv.apply_configmap(ns, name, bundle, media_labels(system_id, device, gen))
    return name


def delete_dv(kv: KubeVirt, dv: dict) -> bool:
    """Delete one DataVolume and the credential Secret and CA ConfigMap made for it, if any."""
    ns, name = dv["metadata"]["namespace"], dv["metadata"]["name"]
    deleted = kv.delete_dv(ns, name)
    http = ((dv.get("spec") or {}).get("source") or {}).get("http") or {}
    if http.get("secretRef"):
        kv.delete_secret(ns, http["secretRef"])
    if http.get("certConfigMap") == f"{name}-ca":
        kv.delete_configmap(ns, http["certConfigMap"])
    return deleted


def delete_device_dvs(
    kv: KubeVirt, system_id: str, device: str, below_gen: int, mirror: DvMirror | None = None
) -> list[str]:
    """Delete the system's fleetfish DataVolumes of ``device`` created for a media generation
    older than ``below_gen`` (and their credential Secrets); their names.

    Never a newer generation's: whatever order the tasks of several inserts and ejects run in,
    the volume of the latest insert is left alone. With a ``mirror`` whose watch is live and
    shows no older generation of the device, nothing is listed (a DataVolume created before
    this generation's import began has been in the watch for seconds by now).
    """
    ns, _ = split_system_id(system_id)
    if mirror is not None and mirror.fresh(ns):
        mirrored = mirror.device_generations(ns, system_label(system_id), device)
        if all(gen >= below_gen for gen in mirrored.values()):
            return []
    deleted = []
    for dv in kv.list_dvs(ns, device_selector(system_id, device)):
        meta = dv.get("metadata") or {}
        name = meta.get("name", "")
        if not name or dv_generation(dv) >= below_gen:
            continue
        # Deleted again even when already going: its credential Secret may still be there.
        if delete_dv(kv, dv) and not meta.get("deletionTimestamp"):
            deleted.append(name)
    if deleted:
        log.info("deleted DataVolumes %s of %s %s", deleted, system_id, device)
    return deleted
