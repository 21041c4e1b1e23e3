"""The lab's starting state: namespaces and N stopped VMs named like an IPI cluster's nodes."""

from __future__ import annotations

import hashlib
import uuid

from lab.kubesim.finalizers import PVC_PROTECTION
from lab.kubesim.kinds import NAMESPACE, PVC, VM
from lab.kubesim.store import ObjectStore

PART_OF = {"app.kubernetes.io/part-of": "fleetfish-lab"}
ROOT_DISK_SIZE = "40Gi"


def vm_names(count: int) -> list[str]:
    masters = [f"ostest-master-{i}" for i in range(min(3, count))]
    return masters + [f"ostest-worker-{i}" for i in range(max(0, count - 3))]


def mac_for(namespace: str, name: str) -> str:
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return "02:" + ":".join(f"{b:02x}" for b in digest[:5])  # locally administered, unicast


def root_serial(namespace: str, name: str) -> str:
    """The root disk's serial: 20 characters at most, letters and digits, as KubeVirt accepts."""
    return "FF" + hashlib.sha256(f"{namespace}/{name}/root".encode()).hexdigest()[:14].upper()


def firmware_uuid(namespace: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fleetfish-lab/{namespace}/{name}"))


def lab_vm(namespace: str, name: str) -> dict:
    master = "-master-" in name
    return {
        "apiVersion": VM.api_version,
        "kind": VM.kind,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(PART_OF)},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "metadata": {"labels": {**PART_OF, "kubevirt.io/domain": name}},
                "spec": {
                    "domain": {
                        "cpu": {"cores": 2 if master else 1},
                        "memory": {"guest": "8Gi" if master else "4Gi"},
                        "firmware": {
                            "uuid": firmware_uuid(namespace, name),
                            "bootloader": {"efi": {"secureBoot": False}},
                        },
                        "devices": {
                            "disks": [
                                {
                                    "name": "rootdisk",
                                    "bootOrder": 1,
                                    "disk": {"bus": "virtio"},
                                    "serial": root_serial(namespace, name),
                                },
                                {"name": "cdrom", "cdrom": {"bus": "sata", "readonly": True}},
                            ],
                            "interfaces": [
                                {
                                    "name": "default",
                                    "masquerade": {},
                                    "macAddress": mac_for(namespace, name),
                                }
                            ],
                        },
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "terminationGracePeriodSeconds": 30,
                    "volumes": [
                        {"name": "rootdisk", "persistentVolumeClaim": {"claimName": f"{name}-root"}}
                    ],
                },
            },
        },
    }


def root_pvc(namespace: str, vm: str) -> dict:
    return {
        "metadata": {
            "name": f"{vm}-root",
            "namespace": namespace,
            "labels": dict(PART_OF),
            "finalizers": [PVC_PROTECTION],
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": ROOT_DISK_SIZE}},
            "volumeMode": "Filesystem",
            "storageClassName": "lab-local",
            "volumeName": f"pv-{vm}-root",
        },
        "status": {
            "phase": "Bound",
            "accessModes": ["ReadWriteOnce"],
            "capacity": {"storage": ROOT_DISK_SIZE},
        },
    }


def namespace_obj(name: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def seed(store: ObjectStore, namespace: str, count: int) -> None:
    for ns in dict.fromkeys(("default", "kube-system", namespace)):
        if store.get(NAMESPACE, "", ns) is None:
            store.create(NAMESPACE, namespace_obj(ns))
    for name in vm_names(count):
        store.create(PVC, root_pvc(namespace, name))
        store.create(VM, lab_vm(namespace, name))
