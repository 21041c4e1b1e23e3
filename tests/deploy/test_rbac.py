"""The ClusterRole grants exactly the Kubernetes calls the code makes: nothing missing, nothing extra."""

from __future__ import annotations

import re

import pytest
from deploy_support import K8S, ROOT, load_docs
from rbac_scan import derive_from_files, derive_rules, role_rules

# Every module that may talk to Kubernetes, and the modules that call them.
CODE_DIRS = ("app", "workers", "tasks", "fleetfish")
IMPORTS_KUBERNETES = re.compile(r"^\s*(?:from|import) kubernetes\b", re.M)


def client_modules() -> tuple[list, list]:
    files = sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py"))
    return [p for p in files if IMPORTS_KUBERNETES.search(p.read_text())], files


@pytest.fixture(scope="module")
def granted() -> set:
    (role,) = [d for d in load_docs(K8S / "base" / "rbac.yaml") if d["kind"] == "ClusterRole"]
    return role_rules(role)


@pytest.fixture(scope="module")
def needed() -> set:
    clients, files = client_modules()
    assert ROOT / "workers" / "kubevirt.py" in clients, "the Kubernetes adapter was not found"
    rules: set = set()
    for module in clients:
        rules |= derive_from_files(module, [p for p in files if p != module])
    # The scan must find the adapter's core calls, or it silently checks nothing.
    assert {
        ("kubevirt.io", "virtualmachines", "get"),
        ("kubevirt.io", "virtualmachines", "watch"),
        ("cdi.kubevirt.io", "datavolumes", "create"),
        ("subresources.kubevirt.io", "virtualmachines/start", "update"),
    } <= rules, f"scanner found only {sorted(rules)}"
    return rules


def test_role_covers_every_call_the_code_makes(granted, needed):
    missing = needed - granted
    assert not missing, f"k8s/base/rbac.yaml lacks {sorted(missing)}"


def test_role_grants_nothing_the_code_does_not_call(granted, needed):
    extra = granted - needed
    assert not extra, f"k8s/base/rbac.yaml grants {sorted(extra)}, which no code calls"
    assert not any("*" in part for rule in granted for part in rule)


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
    # migrate is not in the lab's role: the Role check would fail for such an adapter.
    assert ("subresources.kubevirt.io", "virtualmachineinstances/migrate", "update") in rules


def test_scanner_assumes_every_plural_of_the_named_group_when_it_cannot_trace_one():
    rules = derive_rules(SAMPLE, [])
    assert {
        ("kubevirt.io", p, "watch") for p in ("virtualmachines", "virtualmachineinstances")
    } <= rules
    # watch() passes *KUBEVIRT: no CDI plural can reach it.
    assert ("cdi.kubevirt.io", "datavolumes", "watch") not in rules


def test_scanner_reads_core_calls_a_new_caller_adds():
    source = SAMPLE + (
        "\n    def drop_pvc(self, ns, name):\n"
        "        return self.core.delete_namespaced_persistent_volume_claim(name, ns)\n"
    )
    assert ("", "persistentvolumeclaims", "delete") in derive_rules(source, [])
