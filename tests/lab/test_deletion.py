"""Deletion as a cluster does it: finalizers, PVC protection, names held until objects are gone."""

from __future__ import annotations

import json

import pytest
from kubernetes import watch
from kubernetes.client.rest import ApiException

from tests.lab.kube import NS, holds, wait_until

CDI = ("cdi.kubevirt.io", "v1beta1", NS, "datavolumes")


def _imported(k8s, iso, name: str, image: str) -> dict:
    k8s.create_dv(name, iso.image_url(image))
    return wait_until(
        lambda: (dv := k8s.dv(name)).get("status", {}).get("phase") == "Succeeded" and dv,
        what=f"{name} imported",
    )


def _gone(read) -> bool:
    try:
        read()
        return False
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise


def _pvc(k8s, name: str):
    return k8s.core.read_namespaced_persistent_volume_claim(name, NS)


def test_a_deleted_datavolume_is_marked_first_and_gone_after_its_finalizer(k8s, iso):
    rv = _imported(k8s, iso, "going", "del/a.iso")["metadata"]["resourceVersion"]
    answer = k8s.custom.delete_namespaced_custom_object(*CDI, "going")
    assert answer["metadata"]["name"] == "going" and answer["metadata"].get("deletionTimestamp")
    marked = k8s.dv("going")  # still readable while CDI finalizes it
    assert marked["metadata"]["deletionTimestamp"] == answer["metadata"]["deletionTimestamp"]
    assert "cdi.kubevirt.io/dataVolumeFinalizer" in marked["metadata"]["finalizers"]
    again = k8s.custom.delete_namespaced_custom_object(*CDI, "going")  # a second DELETE is fine
    assert again["metadata"]["deletionTimestamp"] == answer["metadata"]["deletionTimestamp"]

    events = []
    for event in watch.Watch().stream(
        k8s.custom.list_namespaced_custom_object, *CDI, resource_version=rv, timeout_seconds=5
    ):
        meta = event["raw_object"]["metadata"]
        events.append((event["type"], "deletionTimestamp" in meta))
        if event["type"] == "DELETED":
            break
    assert events[0] == ("MODIFIED", True) and events[-1] == ("DELETED", True)
    assert _gone(lambda: k8s.dv("going"))
    # then the garbage collector deletes its PVC; nothing uses it, so it goes too
    wait_until(lambda: _gone(lambda: _pvc(k8s, "going")), what="the PVC gone")


def test_the_name_is_taken_until_the_old_datavolume_is_gone(k8s, iso):
    _imported(k8s, iso, "reused", "del/b.iso")
    k8s.custom.delete_namespaced_custom_object(*CDI, "reused")
    with pytest.raises(ApiException) as err:
        k8s.create_dv("reused", iso.image_url("del/b.iso"))
    status = json.loads(err.value.body)
    assert (err.value.status, status["reason"]) == (409, "AlreadyExists")
    assert status["message"] == (
        'object is being deleted: datavolumes.cdi.kubevirt.io "reused" already exists'
    )
    wait_until(lambda: _gone(lambda: k8s.dv("reused")), what="the old DataVolume gone")
    fresh = k8s.create_dv("reused", iso.image_url("del/b.iso"))
    assert "deletionTimestamp" not in fresh["metadata"]
    wait_until(
        lambda: k8s.dv("reused").get("status", {}).get("phase") == "Succeeded",
        what="the new import",
    )
    assert _pvc(k8s, "reused").metadata.owner_references[0].uid == fresh["metadata"]["uid"]


def test_a_pvc_in_use_by_a_vmi_stays_terminating_until_the_vmi_is_gone(k8s):
    name = "ostest-master-1"
    k8s.start_and_wait(name)
    answer = k8s.core.delete_namespaced_persistent_volume_claim(f"{name}-root", NS)
    assert answer.metadata.deletion_timestamp is not None

    def protected():
        pvc = _pvc(k8s, f"{name}-root")
        return pvc.metadata.deletion_timestamp and "kubernetes.io/pvc-protection" in (
            pvc.metadata.finalizers or []
        )

    # many controller ticks: protection holds it, not slowness
    holds(protected, 1.0, what="the PVC Terminating while the VMI runs")
    assert k8s.printable(name) == "Running"
    k8s.sub("virtualmachines", name, "stop")
    wait_until(lambda: _gone(lambda: _pvc(k8s, f"{name}-root")), what="the PVC gone")
    assert k8s.vmi(name) is None


def test_deleting_a_vmi_stops_it_before_it_goes(k8s):
    name = "ostest-master-2"
    first = k8s.start_and_wait(name)["metadata"]["uid"]
    answer = k8s.custom.delete_namespaced_custom_object(
        "kubevirt.io", "v1", NS, "virtualmachineinstances", name
    )
    assert answer["metadata"]["deletionTimestamp"]
    assert k8s.vmi(name)["metadata"]["uid"] == first  # still there, shutting down
    # runStrategy Always: once the old VMI is gone, the VM gets a new one
    wait_until(lambda: (v := k8s.vmi(name)) and v["metadata"]["uid"] != first, what="a new VMI")
