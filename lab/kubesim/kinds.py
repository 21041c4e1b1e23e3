"""The resource kinds the simulator serves, with the names Kubernetes uses for them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    group: str  # "" for the core group
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool = True
    custom: bool = True  # CRD rules: PUT needs a resourceVersion, no strategic merge patch
    short_names: tuple[str, ...] = ()
    has_status: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``virtualmachines.kubevirt.io``: how apiserver error messages name a resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else "/api/v1"


VM = Kind(
    "kubevirt.io",
    "v1",
    "virtualmachines",
    "virtualmachine",
    "VirtualMachine",
    short_names=("vm", "vms"),
)
VMI = Kind(
    "kubevirt.io",
    "v1",
    "virtualmachineinstances",
    "virtualmachineinstance",
    "VirtualMachineInstance",
    short_names=("vmi", "vmis"),
)
DV = Kind(
    "cdi.kubevirt.io",
    "v1beta1",
    "datavolumes",
    "datavolume",
    "DataVolume",
    short_names=("dv", "dvs"),
)
PVC = Kind(
    "",
    "v1",
    "persistentvolumeclaims",
    "persistentvolumeclaim",
    "PersistentVolumeClaim",
    custom=False,
    short_names=("pvc",),
)
# Instancetypes: KubeVirt expands one into the VMI it starts (CPU, memory).
INSTANCETYPE = Kind(
    "instancetype.kubevirt.io",
    "v1beta1",
    "virtualmachineinstancetypes",
    "virtualmachineinstancetype",
    "VirtualMachineInstancetype",
    short_names=("vminstancetype", "vminstancetypes", "vmf", "vmfs"),
    has_status=False,
)
CLUSTER_INSTANCETYPE = Kind(
    "instancetype.kubevirt.io",
    "v1beta1",
    "virtualmachineclusterinstancetypes",
    "virtualmachineclusterinstancetype",
    "VirtualMachineClusterInstancetype",
    namespaced=False,
    short_names=("vmclusterinstancetype", "vmclusterinstancetypes", "vmcf", "vmcfs"),
    has_status=False,
)
NAMESPACE = Kind(
    "",
    "v1",
    "namespaces",
    "namespace",
    "Namespace",
    namespaced=False,
    custom=False,
    short_names=("ns",),
    has_status=False,
)

CONFIGMAP = Kind(
    "",
    "v1",
    "configmaps",
    "configmap",
    "ConfigMap",
    custom=False,
    short_names=("cm",),
    has_status=False,
)
SECRET = Kind("", "v1", "secrets", "secret", "Secret", custom=False, has_status=False)

ALL: tuple[Kind, ...] = (
    VM,
    VMI,
    DV,
    PVC,
    INSTANCETYPE,
    CLUSTER_INSTANCETYPE,
    NAMESPACE,
    CONFIGMAP,
    SECRET,
)
BY_PATH: dict[tuple[str, str, str], Kind] = {(k.group, k.version, k.plural): k for k in ALL}

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

# virt-api's aggregated subresources, by parent plural
SUBRESOURCES = {
    "virtualmachines": ("start", "stop", "restart", "addvolume", "removevolume"),
    "virtualmachineinstances": (
        "pause",
        "unpause",
        "softreboot",
        "reset",
        "addvolume",
        "removevolume",
    ),
}
