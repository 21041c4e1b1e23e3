"""Helpers for the simulator tests: the real kubernetes client aimed at a simulator, and polling."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

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
