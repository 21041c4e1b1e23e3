"""Firmware boot-device choice at domain start, and the record of every boot (/lab/boots)."""

from __future__ import annotations

import threading
import time
from collections import deque

from lab.kubesim.kinds import DV, PVC
from lab.kubesim.store import ObjectStore


def is_hotpluggable(volume: dict) -> bool:
    source = volume.get("dataVolume") or volume.get("persistentVolumeClaim") or {}
    return bool(source.get("hotpluggable"))


def volume_claim(volume: dict) -> str | None:
    """The PVC (same name as its DataVolume) behind a volume, or None for other sources."""
    if "dataVolume" in volume:
        return volume["dataVolume"].get("name")
    if "persistentVolumeClaim" in volume:
        return volume["persistentVolumeClaim"].get("claimName")
    return None


def is_going(obj: dict | None) -> bool:
    """Missing, or deleted and only waiting for its finalizers."""
    return obj is None or "deletionTimestamp" in obj["metadata"]


def claim_missing(store: ObjectStore, namespace: str, volume: dict) -> bool:
    """KubeVirt's FailedPvcNotFound: the volume's DataVolume/PVC is absent or being deleted."""
    claim = volume_claim(volume)
    if claim is None:
        return False
    dv = store.peek(DV, namespace, claim)
    if dv is not None:
        return is_going(dv)
    if "dataVolume" in volume:
        return True
    return is_going(store.peek(PVC, namespace, claim))


def storage_ready(store: ObjectStore, namespace: str, volume: dict) -> bool:
    """Is the media behind a volume present right now? Call with ``store.cond`` held.

    Media being deleted (a deletionTimestamp on its DataVolume or PVC) is no longer there.
    """
    if "containerDisk" in volume:
        return True
    claim = volume_claim(volume)
    if claim is None:
        return False  # cloud-init and friends hold no bootable media
    dv = store.peek(DV, namespace, claim)
    pvc = store.peek(PVC, namespace, claim)
    if dv is not None:
        succeeded = (dv.get("status") or {}).get("phase") == "Succeeded"
        return succeeded and not is_going(dv) and not is_going(pvc)
    if "dataVolume" in volume:
        return False
    return not is_going(pvc) and (pvc.get("status") or {}).get("phase") == "Bound"


def media_sha256(store: ObjectStore, namespace: str, volume: dict, digests) -> str | None:
    """sha256 of the bytes CDI imported into the volume's PVC (None: not an http import)."""
    claim = volume_claim(volume)
    pvc = store.peek(PVC, namespace, claim) if claim else None
    return digests(pvc["metadata"]["uid"]) if pvc is not None and digests else None


def image_url(store: ObjectStore, namespace: str, volume: dict) -> str | None:
    claim = volume_claim(volume)
    dv = store.peek(DV, namespace, claim) if claim else None
    if dv is None:
        return None
    return (((dv.get("spec") or {}).get("source") or {}).get("http") or {}).get("url")


def choose_boot_device(store: ObjectStore, vmi: dict, digests=None) -> dict:
    """The device firmware boots from, judged from the VMI as it is at this instant.

    Ordered by bootOrder (devices without one are never tried once any device has one; with
    none, disks in order); the first whose media is present and ready wins. Network devices
    take part in the ordering but never boot: the lab has no PXE server. ``digests`` maps a
    PVC uid to the sha256 CDI imported into it (kept by CDI, so no client can fake it).
    """
    spec = vmi.get("spec") or {}
    namespace = vmi["metadata"]["namespace"]
    devices = (spec.get("domain") or {}).get("devices") or {}
    disks = devices.get("disks") or []
    candidates = [("disk", d) for d in disks]
    candidates += [("interface", i) for i in devices.get("interfaces") or []]
    if any(dev.get("bootOrder") is not None for _, dev in candidates):
        ordered = sorted(
            (c for c in candidates if c[1].get("bootOrder") is not None),
            key=lambda c: c[1]["bootOrder"],
        )
    else:
        ordered = [("disk", d) for d in disks]
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    hotplug_status = {
        s.get("name"): s.get("phase") for s in (vmi.get("status") or {}).get("volumeStatus") or []
    }
    for what, dev in ordered:
        if what != "disk":
            continue
        volume = volumes.get(dev.get("name"))
        if volume is None:
            continue  # empty drive
        if is_hotpluggable(volume) and hotplug_status.get(volume["name"]) != "Ready":
            continue  # not attached yet
        if not storage_ready(store, namespace, volume):
            continue
        kind = "cdrom" if "cdrom" in dev else "disk"
        return {
            "device": dev["name"],
            "kind": kind,
            "image_url": image_url(store, namespace, volume),
            "sha256": media_sha256(store, namespace, volume, digests),
        }
    return {"device": None, "kind": "none", "image_url": None, "sha256": None}


def firmware_of(vmi: dict) -> dict:
    """The firmware the domain starts with: ``{"bootloader": "efi"|"bios", "secureBoot": bool}``."""
    domain = (vmi.get("spec") or {}).get("domain") or {}
    bootloader = (domain.get("firmware") or {}).get("bootloader") or {}
    if "efi" in bootloader:
        return {
            "bootloader": "efi",
            "secureBoot": bool((bootloader["efi"] or {}).get("secureBoot", True)),
        }
    return {"bootloader": "bios", "secureBoot": False}


class BootLog:
    """A bounded, thread-safe list of boot records."""

    def __init__(self, limit: int = 20000):
        self._lock = threading.Lock()
        self._boots: deque[dict] = deque(maxlen=limit)

    def record(self, vmi: dict, choice: dict, reason: str) -> dict:
        meta = vmi["metadata"]
        entry = {
            "time": time.time(),
            "namespace": meta["namespace"],
            "vm": meta["name"],
            "vmi_uid": meta["uid"],
            "device": choice["device"],
            "kind": choice["kind"],
            "image_url": choice["image_url"],
            "sha256": choice.get("sha256"),
            "firmware": firmware_of(vmi),
            # CPU hot-plug limit the domain started with (0: the cluster's default).
            "maxSockets": int(
                (((vmi.get("spec") or {}).get("domain") or {}).get("cpu") or {}).get("maxSockets")
                or 0
            ),
            "reason": reason,
        }
        with self._lock:
            self._boots.append(entry)
        return entry

    def query(self, vm: str | None = None, since: float | None = None) -> list[dict]:
        with self._lock:
            return [
                dict(b)
                for b in self._boots
                if (vm is None or b["vm"] == vm) and (since is None or b["time"] >= since)
            ]
