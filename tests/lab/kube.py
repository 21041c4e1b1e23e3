"""Helpers for the simulator tests: the real kubernetes client aimed at a simulator, and polling."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import requests
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from lab.kubesim import Simulator, Timings

NS = "fleetfish-lab"
FAST = Timings(pending=0.05, scheduling=0.05, scheduled=0.1, stop=0.1, hotplug=0.3, tick=0.05)


def wait_until(
    predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.05, what: str = ""
):
    """The first truthy value of predicate(), polled until timeout (then the test fails)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what or predicate}: last={last!r}"
    )


def holds(predicate: Callable[[], object], seconds: float, interval: float = 0.05, what: str = ""):
    """Fail as soon as predicate() is falsy within ``seconds``: for states that must persist."""
    deadline = time.monotonic() + seconds
    polls = 0
    while time.monotonic() < deadline or polls == 0:
        polls += 1
        if not predicate():
            raise AssertionError(f"{what or predicate} stopped holding after {polls} polls")
        time.sleep(interval)


class Cluster:
    """The real kubernetes client pointed at a simulator, plus helpers the tests share."""

    def __init__(self, sim: Simulator):
        self.sim = sim
        cfg = client.Configuration()
        cfg.host = sim.url
        self.api_client = client.ApiClient(cfg)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.core = client.CoreV1Api(self.api_client)
        self._dynamic: DynamicClient | None = None

    @property
    def dynamic(self) -> DynamicClient:
        if self._dynamic is None:
            self._dynamic = DynamicClient(self.api_client)
        return self._dynamic

    def vm(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(
            "kubevirt.io", "v1", NS, "virtualmachines", name
        )

    def vmi(self, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(
                "kubevirt.io", "v1", NS, "virtualmachineinstances", name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def dv(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(
            "cdi.kubevirt.io", "v1beta1", NS, "datavolumes", name
        )

    def printable(self, name: str) -> str:
        return (self.vm(name).get("status") or {}).get("printableStatus")

    def patch_vm(self, name: str, body, content_type: str = "application/merge-patch+json") -> dict:
        return self.custom.patch_namespaced_custom_object(
            "kubevirt.io", "v1", NS, "virtualmachines", name, body, _content_type=content_type
        )

    def sub(self, plural: str, name: str, action: str, body: dict | None = None):
        path = f"/apis/subresources.kubevirt.io/v1/namespaces/{NS}/{plural}/{name}/{action}"
        return self.dynamic.request("PUT", path, body=body if body is not None else {})

    def sub_status(
        self, plural: str, name: str, action: str, body: dict | None = None
    ) -> tuple[int, dict]:
        """(HTTP status, decoded body or {}) of a subresource PUT, through the client's ApiClient."""
        path = f"/apis/subresources.kubevirt.io/v1/namespaces/{NS}/{plural}/{name}/{action}"
        request = self.api_client.param_serialize(
            "PUT",
            path,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=body if body is not None else {},
        )
        resp = self.api_client.call_api(*request)
        data = resp.read()
        return resp.status, json.loads(data) if data else {}

    def create_dv(
        self, name: str, url: str, immediate: bool = True, storage: str = "64Mi", **http
    ) -> dict:
        annotations = (
            {"cdi.kubevirt.io/storage.bind.immediate.requested": "true"} if immediate else {}
        )
        body = {
            "apiVersion": "cdi.kubevirt.io/v1beta1",
            "kind": "DataVolume",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {
                "source": {"http": {"url": url, **http}},
                "storage": {"resources": {"requests": {"storage": storage}}},
            },
        }
        return self.custom.create_namespaced_custom_object(
            "cdi.kubevirt.io", "v1beta1", NS, "datavolumes", body
        )

    def start_and_wait(self, name: str, timeout: float = 10.0) -> dict:
        self.sub("virtualmachines", name, "start")
        wait_until(lambda: self.printable(name) == "Running", timeout, what=f"{name} Running")
        return self.vmi(name)

    # -- cdrom media ----------------------------------------------------------------------------

    def boot_order(self, name: str, rootdisk: int | None, cdrom: int | None) -> None:
        """Set the template's bootOrder of both disks (None: no bootOrder)."""
        disks = self.vm(name)["spec"]["template"]["spec"]["domain"]["devices"]["disks"]
        for disk in disks:
            order = {"rootdisk": rootdisk, "cdrom": cdrom}[disk["name"]]
            disk.pop("bootOrder", None)
            if order is not None:
                disk["bootOrder"] = order
        self.patch_vm(
            name, {"spec": {"template": {"spec": {"domain": {"devices": {"disks": disks}}}}}}
        )

    def insert_cdrom(self, name: str, dv: str) -> None:
        """Declarative inject: a hotpluggable cdrom volume in the VM template."""
        volume = {"name": "cdrom", "dataVolume": {"name": dv, "hotpluggable": True}}
        self.patch_vm(
            name,
            [{"op": "add", "path": "/spec/template/spec/volumes/-", "value": volume}],
            "application/json-patch+json",
        )

    def eject_cdrom(self, name: str) -> None:
        volumes = self.vm(name)["spec"]["template"]["spec"]["volumes"]
        kept = [v for v in volumes if v["name"] != "cdrom"]
        self.patch_vm(name, {"spec": {"template": {"spec": {"volumes": kept}}}})

    def cdrom_status(self, name: str) -> dict | None:
        """The VMI's volumeStatus entry of the cdrom (None: no VMI, or no cdrom volume)."""
        vmi = self.vmi(name) or {}
        entries = (vmi.get("status") or {}).get("volumeStatus") or []
        return next((e for e in entries if e["name"] == "cdrom"), None)

    def boots(self, name: str) -> list[dict]:
        return requests.get(f"{self.sim.url}/lab/boots", params={"vm": name}, timeout=5).json()[
            "boots"
        ]
