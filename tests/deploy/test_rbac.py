"""The ClusterRole grants what workers/kubevirt.py calls, and nothing beyond the documented set."""

from __future__ import annotations

import pytest
from deploy_support import K8S, ROOT, load_docs
from rbac_scan import derive_from_files, derive_rules, role_rules

KUBEVIRT_MODULE = ROOT / "workers" / "kubevirt.py"
# The least-privilege contract (docs/install-kubernetes.md): exactly these, no wildcard.
ALLOWED = {
    *(("kubevirt.io", "virtualmachines", v) for v in ("get", "list", "watch", "update", "patch")),
    *(("kubevirt.io", "virtualmachineinstances", v) for v in ("get", "list", "watch")),
    *(
        ("subresources.kubevirt.io", f"virtualmachines/{s}", "update")
        for s in ("start", "stop", "restart")
    ),
    *(
        ("subresources.kubevirt.io", f"virtualmachineinstances/{s}", "update")
        for s in ("pause", "unpause", "softreboot", "reset")
    ),
    *(("cdi.kubevirt.io", "datavolumes", v) for v in ("create", "get", "list", "watch", "delete")),
    *(("", "persistentvolumeclaims", v) for v in ("get", "list")),
    # InsertMedia with UserName/Password: the worker keeps them in a Secret next to the
    # DataVolume (CDI's secretRef) and deletes it with the DataVolume. No get/list: it never
    # reads a Secret back.
    *(("", "secrets", v) for v in ("create", "update", "delete")),
}


@pytest.fixture(scope="module")
def granted() -> set:
    (role,) = [d for d in load_docs(K8S / "base" / "rbac.yaml") if d["kind"] == "ClusterRole"]
    return role_rules(role)


def test_role_is_exactly_the_least_privilege_set(granted):
    assert granted == ALLOWED
    assert not any("*" in part for rule in granted for part in rule)


def test_role_covers_every_call_the_kubevirt_adapter_makes(granted):
    if not KUBEVIRT_MODULE.exists():
        pytest.skip("workers/kubevirt.py not written yet: cannot derive the RBAC it needs")
    callers = [p for p in (ROOT / "workers").glob("*.py") if p != KUBEVIRT_MODULE]
    callers += list((ROOT / "tasks").glob("*.py"))
    needed = derive_from_files(KUBEVIRT_MODULE, callers)
    # The scan must find the adapter's core calls, or it silently checks nothing.
    assert {
        ("kubevirt.io", "virtualmachines", "get"),
        ("cdi.kubevirt.io", "datavolumes", "create"),
        ("subresources.kubevirt.io", "virtualmachines/start", "update"),
    } <= needed, f"scanner found only {sorted(needed)}"
    missing = needed - granted
    assert not missing, f"k8s/base/rbac.yaml lacks {sorted(missing)}"


SAMPLE = """
from kubernetes import client, watch
KUBEVIRT = ("kubevirt.io", "v1")
CDI = ("cdi.kubevirt.io", "v1beta1")
SUBRESOURCES = "/apis/subresources.kubevirt.io/v1"
VM_PLURAL = "virtualmachines"
VMI_PLURAL = "virtualmachineinstances"
DV_PLURAL = "datavolumes"

class Adapter:
    def get_vm(self, ns, name):
        return self.custom.get_namespaced_custom_object(*KUBEVIRT, ns, VM_PLURAL, name)

    def patch_vm(self, ns, name, body):
        return self.custom.patch_namespaced_custom_object(*KUBEVIRT, ns, VM_PLURAL, name, body)

    def create_dv(self, ns, body):
        return self.custom.create_namespaced_custom_object(*CDI, ns, DV_PLURAL, body)

    def pvc(self, ns, name):
        return self.core.read_namespaced_persistent_volume_claim(name, ns)

    def list_vmis(self):
        return self._list(KUBEVIRT, VMI_PLURAL)

    def _list(self, gv, plural):
        return self.custom.list_cluster_custom_object(*gv, plural)

    def watch(self, plural, ns):
        w = watch.Watch()
        func, args = self.custom.list_namespaced_custom_object, (*KUBEVIRT, ns, plural)
        return w.stream(func, *args)

    def migrate(self, ns, name):
        self._sub(VMI_PLURAL, ns, name, "migrate")

    def _sub(self, plural, ns, name, verb):
        path = f"{SUBRESOURCES}/namespaces/{ns}/{plural}/{name}/{verb}"
        return self.api.call_api("PUT", path)
"""
CALLER = "from workers.kubevirt import VM_PLURAL\nkv.watch(VM_PLURAL, '')\n"


def test_scanner_reads_calls_through_helpers_and_callers():
    rules = derive_rules(SAMPLE, [CALLER])
    assert rules == {
        ("kubevirt.io", "virtualmachines", "get"),
        ("kubevirt.io", "virtualmachines", "patch"),
        ("cdi.kubevirt.io", "datavolumes", "create"),
        ("", "persistentvolumeclaims", "get"),
        ("kubevirt.io", "virtualmachineinstances", "list"),
        ("kubevirt.io", "virtualmachines", "list"),
        ("kubevirt.io", "virtualmachines", "watch"),
        ("subresources.kubevirt.io", "virtualmachineinstances/migrate", "update"),
    }
    # migrate is not granted: the Role check would fail for such an adapter.
    assert not rules <= ALLOWED


def test_scanner_assumes_every_plural_when_it_cannot_trace_one():
    rules = derive_rules(SAMPLE, [])
    assert {
        ("kubevirt.io", p, "watch") for p in ("virtualmachines", "virtualmachineinstances")
    } <= rules
    assert ("cdi.kubevirt.io", "datavolumes", "watch") in rules
