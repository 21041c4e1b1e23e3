"""Finalizers the lab's controllers own: CDI's on DataVolumes, pvc-protection on PVCs, VMIs'."""

from __future__ import annotations

from collections.abc import Callable

from lab.kubesim.kinds import DV, PVC, VMI, Kind
from lab.kubesim.store import ObjectStore

DV_FINALIZER = "cdi.kubevirt.io/dataVolumeFinalizer"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
VMI_FINALIZER = "kubevirt.io/virtualMachineControllerFinalize"  # the controller stops it first


def add_defaults(kind: Kind, obj: dict) -> None:
    """What admission and CDI put on new objects, so that deleting them is not instant."""
    finalizer = {DV: DV_FINALIZER, PVC: PVC_PROTECTION, VMI: VMI_FINALIZER}.get(kind)
    if finalizer is None:
        return
    finalizers = obj.setdefault("metadata", {}).setdefault("finalizers", [])
    if finalizer not in finalizers:
        finalizers.append(finalizer)


def collect_garbage(store: ObjectStore, claims_in_use: Callable[[str], set[str]]) -> None:
    """The garbage collector and the PVC protection controller, once. Hold ``store.cond``.

    A PVC whose owning DataVolume is gone is deleted (background propagation); a deleted PVC
    keeps ``kubernetes.io/pvc-protection`` while ``claims_in_use(namespace)`` names it (what
    pods mount, on a cluster), and goes once nothing does.
    """
    dv_uids = {dv["metadata"]["uid"] for dv in store.peek_all(DV)}
    in_use: dict[str, set[str]] = {}
    for pvc in list(store.peek_all(PVC)):
        meta = pvc["metadata"]
        ns, name = meta["namespace"], meta["name"]
        owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == DV.kind]
        if owners and "deletionTimestamp" not in meta:
            if all(o.get("uid") not in dv_uids for o in owners):
                store.request_delete(PVC, ns, name)
                meta = (store.peek(PVC, ns, name) or {}).get("metadata")
                if meta is None:
                    continue
        if "deletionTimestamp" not in meta or PVC_PROTECTION not in (meta.get("finalizers") or []):
            continue
        if ns not in in_use:
            in_use[ns] = claims_in_use(ns)
        if name not in in_use[ns]:
            store.remove_finalizer(PVC, ns, name, PVC_PROTECTION)
