"""CRUD through the real kubernetes client: seed, lists, conflicts, patches, admission."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.rest import ApiException

from tests.lab.kube import NS

G, V, P = "kubevirt.io", "v1", "virtualmachines"


def _error(exc_info) -> dict:
    return json.loads(exc_info.value.body)


def _vm(name: str, **spec) -> dict:
    body = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "domain": {"devices": {"disks": [{"name": "cdrom", "cdrom": {"bus": "sata"}}]}},
                }
            },
        },
    }
    body["spec"].update(spec)
    return body


def test_seeded_vms_look_like_a_stopped_ipi_cluster(k8s):
    items = k8s.custom.list_namespaced_custom_object(G, V, NS, P)["items"]
    assert [vm["metadata"]["name"] for vm in items] == [
        "ostest-master-0",
        "ostest-master-1",
        "ostest-master-2",
        "ostest-worker-0",
    ]
    vm = items[0]
    assert vm["spec"]["runStrategy"] == "Halted"
    assert vm["metadata"]["labels"]["app.kubernetes.io/part-of"] == "fleetfish-lab"
    domain = vm["spec"]["template"]["spec"]["domain"]
    assert domain["firmware"]["bootloader"] == {"efi": {"secureBoot": False}}
    assert domain["firmware"]["uuid"]
    disks = {d["name"]: d for d in domain["devices"]["disks"]}
    assert disks["rootdisk"]["bootOrder"] == 1
    assert disks["cdrom"] == {"name": "cdrom", "cdrom": {"bus": "sata", "readonly": True}}
    assert [v["name"] for v in vm["spec"]["template"]["spec"]["volumes"]] == ["rootdisk"]
    assert domain["devices"]["interfaces"][0]["macAddress"].startswith("02:")
    status = vm["status"]
    assert (status["printableStatus"], status["created"], status["ready"]) == (
        "Stopped",
        False,
        False,
    )
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "VMINotExists")
    assert (
        k8s.core.read_namespaced_persistent_volume_claim("ostest-master-0-root", NS).status.phase
        == "Bound"
    )


def test_label_selectors_and_paging(k8s):
    k8s.patch_vm("ostest-worker-0", {"metadata": {"labels": {"role": "worker"}}})
    for name in ("ostest-master-0", "ostest-master-1"):
        k8s.patch_vm(name, {"metadata": {"labels": {"role": "master"}}})

    def names(selector: str) -> list[str]:
        items = k8s.custom.list_namespaced_custom_object(G, V, NS, P, label_selector=selector)[
            "items"
        ]
        return [i["metadata"]["name"] for i in items]

    assert names("role=worker") == ["ostest-worker-0"]
    assert names("role!=master") == ["ostest-master-2", "ostest-worker-0"]
    assert names("role in (master,worker)") == [
        "ostest-master-0",
        "ostest-master-1",
        "ostest-worker-0",
    ]
    assert names("role") == ["ostest-master-0", "ostest-master-1", "ostest-worker-0"]
    assert names("!role") == ["ostest-master-2"]
    assert names("app.kubernetes.io/part-of=fleetfish-lab,role=master") == [
        "ostest-master-0",
        "ostest-master-1",
    ]

    page1 = k8s.custom.list_namespaced_custom_object(G, V, NS, P, limit=3)
    assert len(page1["items"]) == 3 and page1["metadata"]["continue"]
    page2 = k8s.custom.list_namespaced_custom_object(
        G, V, NS, P, limit=3, _continue=page1["metadata"]["continue"]
    )
    assert [i["metadata"]["name"] for i in page2["items"]] == ["ostest-worker-0"]
    assert not page2["metadata"].get("continue")
    everywhere = k8s.custom.list_cluster_custom_object(G, V, P)
    assert len(everywhere["items"]) == 4


def test_get_missing_is_a_kubernetes_not_found(k8s):
    with pytest.raises(ApiException) as exc:
        k8s.vm("nope")
    assert exc.value.status == 404
    body = _error(exc)
    assert body["kind"] == "Status" and body["reason"] == "NotFound"
    assert body["message"] == 'virtualmachines.kubevirt.io "nope" not found'
    assert body["details"] == {"name": "nope", "group": "kubevirt.io", "kind": "virtualmachines"}


def test_create_conflicts_and_replace(k8s):
    created = k8s.custom.create_namespaced_custom_object(
        G, V, NS, P, _vm("vm1", runStrategy="Halted")
    )
    meta = created["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and meta["generation"] == 1
    with pytest.raises(ApiException) as exc:
        k8s.custom.create_namespaced_custom_object(G, V, NS, P, _vm("vm1", runStrategy="Halted"))
    assert exc.value.status == 409 and _error(exc)["reason"] == "AlreadyExists"

    generated = _vm("", runStrategy="Halted")
    generated["metadata"] = {"generateName": "gen-"}
    assert k8s.custom.create_namespaced_custom_object(G, V, NS, P, generated)["metadata"][
        "name"
    ].startswith("gen-")

    stale = dict(created)
    fresh = k8s.patch_vm("vm1", {"metadata": {"labels": {"a": "b"}}})
    assert int(fresh["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    with pytest.raises(ApiException) as exc:
        k8s.custom.replace_namespaced_custom_object(G, V, NS, P, "vm1", stale)
    assert exc.value.status == 409 and _error(exc)["reason"] == "Conflict"
    assert "the object has been modified" in _error(exc)["message"]

    no_rv = json.loads(json.dumps(fresh))
    del no_rv["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as exc:
        k8s.custom.replace_namespaced_custom_object(G, V, NS, P, "vm1", no_rv)
    assert exc.value.status == 422 and "must be specified for an update" in _error(exc)["message"]

    fresh["spec"]["runStrategy"] = "Manual"
    replaced = k8s.custom.replace_namespaced_custom_object(G, V, NS, P, "vm1", fresh)
    assert replaced["spec"]["runStrategy"] == "Manual"
    assert replaced["metadata"]["generation"] == 2


def test_patches(k8s):
    before = k8s.vm("ostest-master-2")
    merged = k8s.patch_vm("ostest-master-2", {"metadata": {"annotations": {"x": "1"}}})
    assert merged["metadata"]["generation"] == before["metadata"]["generation"]  # metadata only
    ops = [
        {"op": "test", "path": "/spec/runStrategy", "value": "Halted"},
        {
            "op": "replace",
            "path": "/spec/template/spec/domain/devices/disks/0/bootOrder",
            "value": 2,
        },
    ]
    patched = k8s.patch_vm("ostest-master-2", ops, "application/json-patch+json")
    assert patched["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]["bootOrder"] == 2
    assert patched["metadata"]["generation"] == before["metadata"]["generation"] + 1

    with pytest.raises(ApiException) as exc:
        k8s.patch_vm(
            "ostest-master-2",
            [{"op": "test", "path": "/spec/runStrategy", "value": "Always"}],
            "application/json-patch+json",
        )
    assert exc.value.status == 422
    with pytest.raises(ApiException) as exc:
        k8s.patch_vm("ostest-master-2", {"spec": {}}, "application/strategic-merge-patch+json")
    assert exc.value.status == 415 and _error(exc)["reason"] == "UnsupportedMediaType"

    stale = {
        "metadata": {"resourceVersion": before["metadata"]["resourceVersion"]},
        "spec": {"runStrategy": "Manual"},
    }
    with pytest.raises(ApiException) as exc:
        k8s.patch_vm("ostest-master-2", stale)
    assert exc.value.status == 409


def test_status_subresource_and_delete(k8s):
    status = k8s.custom.get_namespaced_custom_object_status(G, V, NS, P, "ostest-worker-0")
    assert status["status"]["printableStatus"] == "Stopped"
    patched = k8s.custom.patch_namespaced_custom_object_status(
        G,
        V,
        NS,
        P,
        "ostest-worker-0",
        {"status": {"stateChangeRequests": [{"action": "Start"}]}, "spec": {"x": 1}},
    )
    assert "x" not in patched["spec"]  # /status ignores everything but status
    deleted = k8s.custom.delete_namespaced_custom_object(G, V, NS, P, "ostest-worker-0")
    assert deleted["metadata"]["name"] == "ostest-worker-0"
    with pytest.raises(ApiException) as exc:
        k8s.vm("ostest-worker-0")
    assert exc.value.status == 404


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"runStrategy": "Halted", "running": False},
            "Running and RunStrategy are mutually exclusive",
        ),
        ({}, "RunStrategy must be specified"),
    ],
)
def test_run_strategy_admission(k8s, spec, message):
    with pytest.raises(ApiException) as exc:
        k8s.custom.create_namespaced_custom_object(G, V, NS, P, _vm("bad", **spec))
    assert exc.value.status == 422
    body = _error(exc)
    assert body["reason"] == "Invalid" and message in body["message"]
    assert body["message"].startswith(
        'admission webhook "virtualmachine-validator.kubevirt.io" denied the request'
    )


def test_device_admission(k8s):
    disks = "/spec/template/spec/domain/devices/disks"

    def rejected(ops) -> str:
        with pytest.raises(ApiException) as exc:
            k8s.patch_vm("ostest-master-0", ops, "application/json-patch+json")
        assert exc.value.status == 422
        return _error(exc)["message"]

    assert "Bus type virtio is invalid for CD-ROM device" in rejected(
        [{"op": "replace", "path": f"{disks}/1/cdrom/bus", "value": "virtio"}]
    )
    assert (
        "Boot order for spec.template.spec.domain.devices.disks[1].bootOrder already set for a different device."
        in rejected([{"op": "add", "path": f"{disks}/1/bootOrder", "value": 1}])
    )
    assert "'extra' not found" in rejected(
        [{"op": "add", "path": f"{disks}/-", "value": {"name": "extra", "disk": {"bus": "virtio"}}}]
    )
    # the empty cdrom with no volume is fine, and so is a distinct bootOrder
    ok = k8s.patch_vm(
        "ostest-master-0",
        [{"op": "add", "path": f"{disks}/1/bootOrder", "value": 2}],
        "application/json-patch+json",
    )
    assert ok["spec"]["template"]["spec"]["domain"]["devices"]["disks"][1]["bootOrder"] == 2


def test_namespace_must_exist(k8s):
    with pytest.raises(ApiException) as exc:
        k8s.custom.create_namespaced_custom_object(
            G, V, "elsewhere", P, _vm("x", runStrategy="Halted")
        )
    assert exc.value.status == 404 and _error(exc)["message"] == 'namespaces "elsewhere" not found'


def test_secure_boot_needs_smm(k8s):
    firmware = "/spec/template/spec/domain/firmware/bootloader"

    def patch(ops):
        return k8s.patch_vm("ostest-master-1", ops, "application/json-patch+json")

    for efi in ({"secureBoot": True}, {}):  # efi: {} means secure boot on to KubeVirt
        with pytest.raises(ApiException) as exc:
            patch([{"op": "replace", "path": firmware, "value": {"efi": efi}}])
        assert exc.value.status == 422
        assert "SecureBoot requires SMM, which is currently disabled" in _error(exc)["message"]
    with pytest.raises(ApiException):
        patch(
            [
                {"op": "replace", "path": firmware, "value": {"efi": {"secureBoot": True}}},
                {
                    "op": "add",
                    "path": "/spec/template/spec/domain/features",
                    "value": {"smm": {"enabled": False}},
                },
            ]
        )
    ok = patch(
        [
            {"op": "replace", "path": firmware, "value": {"efi": {"secureBoot": True}}},
            {"op": "add", "path": "/spec/template/spec/domain/features", "value": {"smm": {}}},
        ]
    )
    assert ok["spec"]["template"]["spec"]["domain"]["firmware"]["bootloader"]["efi"] == {
        "secureBoot": True
    }


def test_sockets_above_max_sockets_and_cpu_beside_an_instancetype_are_refused(k8s):
    def patch(ops):
        return k8s.patch_vm("ostest-master-2", ops, "application/json-patch+json")

    cpu = "/spec/template/spec/domain/cpu"
    with pytest.raises(ApiException) as exc:
        patch([{"op": "add", "path": cpu, "value": {"sockets": 4, "maxSockets": 2}}])
    assert exc.value.status == 422
    assert "greater than the maximum sockets allowed" in _error(exc)["message"]
    ok = patch([{"op": "add", "path": cpu, "value": {"sockets": 2, "maxSockets": 4}}])
    assert ok["spec"]["template"]["spec"]["domain"]["cpu"]["maxSockets"] == 4
    with pytest.raises(ApiException) as exc:
        patch([{"op": "add", "path": "/spec/instancetype", "value": {"name": "u1.large"}}])
    assert exc.value.status == 422
    assert "conflicts with selected instance type" in _error(exc)["message"]


def test_a_label_selector_kubernetes_refuses_is_a_bad_request(k8s):
    for selector in ("role=a/b", "role in ()", "role=master,"):
        with pytest.raises(ApiException) as exc:
            k8s.custom.list_namespaced_custom_object(G, V, NS, P, label_selector=selector)
        assert exc.value.status == 400, selector
        assert _error(exc)["reason"] == "BadRequest"
