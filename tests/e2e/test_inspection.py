"""Out-of-band inspection as Ironic's ``redfish`` inspect interface does it (sushy reads, Ironic's
arithmetic) against the lab: disk sizes from the claims behind the VM's disks, MACs, memory, CPUs
and boot mode, equal to what the VM asks of the cluster."""

from __future__ import annotations

import pytest
import requests

from fleetfish.mirror import quantity_to_bytes
from lab.stack import LAB_NAMESPACE
from tests.e2e.conftest import ironic, lab_vm_names, system_id, wait_for
from tests.helpers import Redfish

pytestmark = pytest.mark.e2e

GiB = 2**30
VMS = 4


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(vms=VMS, import_seconds=1, workers=1)


def kube(stack, method: str, path: str, body: dict | None = None, **kwargs) -> dict:
    reply = requests.request(method, f"{stack.kube_url}{path}", json=body, timeout=5, **kwargs)
    assert reply.status_code < 300, reply.text
    return reply.json()


def vm_path(name: str = "") -> str:
    base = f"/apis/kubevirt.io/v1/namespaces/{LAB_NAMESPACE}/virtualmachines"
    return f"{base}/{name}" if name else base


def pvc_path(name: str = "") -> str:
    base = f"/api/v1/namespaces/{LAB_NAMESPACE}/persistentvolumeclaims"
    return f"{base}/{name}" if name else base


def pvc(name: str, size: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": LAB_NAMESPACE},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    }


def test_lab_nodes_inspect_as_their_vms(stack):
    node = ironic(stack)
    for vm in lab_vm_names(VMS):
        spec = kube(stack, "GET", vm_path(vm))["spec"]["template"]["spec"]
        claim = spec["volumes"][0]["persistentVolumeClaim"]["claimName"]
        request = kube(stack, "GET", pvc_path(claim))["spec"]["resources"]["requests"]["storage"]
        size = quantity_to_bytes(request)
        domain = spec["domain"]
        found = wait_for(
            lambda v=vm: (f := node.inspect(system_id(v)))["local_gb"] and f,
            30,
            what=f"{vm} disk size in the inventory",
        )
        assert size == 40 * GiB
        assert found == {
            "memory_mb": quantity_to_bytes(domain["memory"]["guest"]) // 2**20,
            "cpus": domain["cpu"]["cores"],
            "cpu_arch": "x86_64",
            "boot_mode": "uefi",
            "local_gb": size // GiB - 1,
            "macs": [i["macAddress"] for i in domain["devices"]["interfaces"]],
        }, vm
        system = node.system(system_id(vm))
        assert system.simple_storage.disks_sizes_bytes == [size]
        assert system.storage.drives_sizes_bytes == [size]
        (storage,) = system.storage.get_members()
        (root,) = storage.drives
        assert root.identity == "rootdisk"
        assert root.serial_number == domain["devices"]["disks"][0]["serial"]


def test_a_new_vm_shows_its_topology_its_claims_and_no_size_for_a_container_disk(stack):
    """A VM added while the service runs: sockets x cores x threads, memory from its resources
    request, a containerDisk root (no size known), a data disk whose claim is created after the
    VM (its size appears at the VM's next change) and one that existed before."""
    kube(stack, "POST", pvc_path(), pvc("multi-data", "100Gi"))
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "multi", "namespace": LAB_NAMESPACE},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "spec": {
                    "domain": {
                        "cpu": {"sockets": 2, "cores": 2, "threads": 2},
                        "resources": {"requests": {"memory": "6Gi"}},
                        "firmware": {"bootloader": {"bios": {}}},
                        "devices": {
                            "disks": [
                                {"name": "late", "disk": {"bus": "scsi"}},
                                {"name": "root", "disk": {"bus": "sata"}, "bootOrder": 1},
                                {"name": "data", "disk": {"bus": "virtio"}, "serial": "DATA01"},
                            ],
                            "interfaces": [
                                {"name": "a", "macAddress": "02:00:00:00:aa:01", "masquerade": {}},
                                {"name": "b", "macAddress": "02:00:00:00:aa:02", "bridge": {}},
                            ],
                        },
                    },
                    "volumes": [
                        {"name": "root", "containerDisk": {"image": "quay.io/example/os:1"}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "multi-data"}},
                        {"name": "late", "dataVolume": {"name": "multi-late"}},
                    ],
                }
            },
        },
    }
    kube(stack, "POST", vm_path(), vm)
    node, rf = ironic(stack), Redfish(stack)
    sid = f"{LAB_NAMESPACE}.multi"
    wait_for(
        lambda: rf.raw_get(f"/redfish/v1/Systems/{sid}").status_code == 200,
        30,
        what="the new VM in the mirror",
    )
    found = node.inspect(sid)
    assert found == {
        "memory_mb": 6144,
        "cpus": 8,
        "cpu_arch": "x86_64",
        "boot_mode": "bios",
        "local_gb": 99,
        "macs": ["02:00:00:00:aa:01", "02:00:00:00:aa:02"],
    }
    drives = rf.get(f"/redfish/v1/Systems/{sid}/Storage/1")["Drives"]
    names = [d["@odata.id"].rsplit("/", 1)[-1] for d in drives]
    assert names == ["root", "late", "data"]  # the boot disk first, then the VM's order
    root = rf.get(drives[0]["@odata.id"])
    assert "CapacityBytes" not in root and root["Protocol"] == "SATA"
    data = rf.get(drives[2]["@odata.id"])
    assert data["CapacityBytes"] == 100 * GiB and data["SerialNumber"] == "DATA01"
    assert "CapacityBytes" not in rf.get(drives[1]["@odata.id"])
    summary = rf.get(f"/redfish/v1/Systems/{sid}")["ProcessorSummary"]
    assert (summary["Count"], summary["CoreCount"], summary["ThreadingEnabled"]) == (8, 4, True)
    assert len(rf.get(f"/redfish/v1/Systems/{sid}/Processors")["Members"]) == 2

    kube(stack, "POST", pvc_path(), pvc("multi-late", "20Gi"))
    kube(
        stack,
        "PATCH",
        vm_path("multi"),
        {"metadata": {"labels": {"touched": "yes"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    late = wait_for(
        lambda: rf.get(drives[1]["@odata.id"]).get("CapacityBytes"),
        30,
        what="the late claim's size",
    )
    assert late == 20 * GiB
    # Ironic takes the smallest disk of at least 4 GiB.
    assert node.inspect(sid)["local_gb"] == 19


def test_an_instancetype_vm_shows_the_instancetype_off_and_on(stack):
    """A VM that names a cluster instancetype has no CPU or memory of its own: off, they come
    from the instancetype; on, from the VMI KubeVirt expanded it into. Both the same, and the
    NIC's link comes up with the VM."""
    kube(
        stack,
        "POST",
        "/apis/instancetype.kubevirt.io/v1beta1/virtualmachineclusterinstancetypes",
        {
            "apiVersion": "instancetype.kubevirt.io/v1beta1",
            "kind": "VirtualMachineClusterInstancetype",
            "metadata": {"name": "lab.large"},
            "spec": {"cpu": {"guest": 6}, "memory": {"guest": "12Gi"}},
        },
    )
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "typed", "namespace": LAB_NAMESPACE},
        "spec": {
            "runStrategy": "Halted",
            "instancetype": {"kind": "VirtualMachineClusterInstancetype", "name": "lab.large"},
            "template": {
                "spec": {
                    "domain": {
                        "firmware": {"bootloader": {"efi": {"secureBoot": False}}},
                        "devices": {
                            "disks": [{"name": "root", "disk": {"bus": "virtio"}, "bootOrder": 1}],
                            "interfaces": [
                                {"name": "a", "macAddress": "02:00:00:00:bb:01", "masquerade": {}}
                            ],
                        },
                    },
                    # The lab binds no claim it did not make: a container disk starts at once.
                    "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/x/os:1"}}],
                }
            },
        },
    }
    kube(stack, "POST", vm_path(), vm)
    node, rf = ironic(stack), Redfish(stack)
    sid = f"{LAB_NAMESPACE}.typed"
    wait_for(
        lambda: rf.raw_get(f"/redfish/v1/Systems/{sid}").status_code == 200,
        30,
        what="the instancetype VM in the mirror",
    )
    want = {
        "memory_mb": 12288,
        "cpus": 6,
        "cpu_arch": "x86_64",
        "boot_mode": "uefi",
        "local_gb": 0,  # a container disk has no size to report
        "macs": ["02:00:00:00:bb:01"],
    }
    assert node.inspect(sid) == want
    assert rf.get(f"/redfish/v1/Systems/{sid}/EthernetInterfaces/a")["LinkStatus"] == "LinkDown"
    assert rf.reset("typed", "On").status_code == 202
    wait_for(lambda: rf.system("typed")["PowerState"] == "On", 30, what="typed On")
    assert node.inspect(sid) == want
    nic = rf.get(f"/redfish/v1/Systems/{sid}/EthernetInterfaces/a")
    assert nic["LinkStatus"] == "LinkUp"
