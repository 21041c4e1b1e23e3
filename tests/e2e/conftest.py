"""End-to-end fixtures: the whole stack in separate processes, plus what a test observes it with."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from lab.ironic import IronicLike
from lab.stack import LAB_NAMESPACE, LabConfig, LabStack
from tests.polling import wait_for  # noqa: F401 - re-exported for the tests here

# A lab starts in a few seconds on an idle machine; the budget is for a loaded CI machine, where
# one lab start once took longer than 90 s.
START_SECONDS = 180


# One Ironic-like client per lab, as Ironic keeps one session per BMC: its session is logged
# out when the lab stops, not by a garbage collection in the middle of a later test's calls.
_IRONIC_CLIENTS: dict[int, IronicLike] = {}


@pytest.fixture(scope="module")
def lab_factory(tmp_path_factory):
    """Start a lab with the given LabConfig overrides; every lab started is stopped at the end."""
    stacks: list[LabStack] = []

    def start(**overrides) -> LabStack:
        overrides.setdefault("flower", False)
        config = LabConfig.for_tests(tmp_path_factory.mktemp("lab"), **overrides)
        stack = LabStack(config).start(timeout=START_SECONDS)
        stacks.append(stack)
        return stack

    yield start
    for stack in stacks:
        client = _IRONIC_CLIENTS.pop(id(stack), None)
        if client is not None:
            client.close()
        stack.stop()


def system_id(vm: str) -> str:
    return f"{LAB_NAMESPACE}.{vm}"


def lab_vm_names(count: int) -> list[str]:
    masters = [f"ostest-master-{i}" for i in range(min(count, 3))]
    return masters + [f"ostest-worker-{i}" for i in range(max(0, count - 3))]


def ironic(stack: LabStack) -> IronicLike:
    """The lab's Ironic-like client (one sushy session per lab, as Ironic's conductor keeps)."""
    client = _IRONIC_CLIENTS.get(id(stack))
    if client is None:
        user, password = stack.credentials
        client = _IRONIC_CLIENTS[id(stack)] = IronicLike(stack.redfish_url, user, password)
    return client


def boots(stack: LabStack, since: float = 0.0) -> list[dict]:
    reply = requests.get(f"{stack.kube_url}/lab/boots", params={"since": since}, timeout=5)
    reply.raise_for_status()
    return reply.json()["boots"]


class VMTimeline:
    """Watches the lab's VMs over the Kubernetes API and records, per VM, when the CD-ROM volume
    first appeared in its spec (attach) and when it was first asked to run (power-on)."""

    def __init__(self, stack: LabStack, cdrom_disk: str = "cdrom"):
        from kubernetes import client, watch

        config = client.Configuration()
        config.host = stack.kube_url
        self.api = client.CustomObjectsApi(client.ApiClient(config))
        self.watch = watch.Watch()
        self.cdrom = cdrom_disk
        self.attached: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.seen: set[str] = set()  # VMs the watch has delivered: it is streaming
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self.watch.stream(
                self.api.list_namespaced_custom_object,
                "kubevirt.io",
                "v1",
                LAB_NAMESPACE,
                "virtualmachines",
                timeout_seconds=600,
            ):
                now = time.time()
                vm = event["object"]
                name = vm["metadata"]["name"]
                self.seen.add(name)
                spec = vm.get("spec", {})
                volumes = spec.get("template", {}).get("spec", {}).get("volumes", []) or []
                if any(v.get("name") == self.cdrom for v in volumes):
                    self.attached.setdefault(name, now)
                running = spec.get("runStrategy") in ("Always", "RerunOnFailure") or spec.get(
                    "running"
                )
                if running or (vm.get("status") or {}).get("created"):
                    self.started.setdefault(name, now)
        except Exception:  # noqa: BLE001 - the watch ends when the lab stops
            return

    def watching(self, vm: str, timeout: float = 30.0) -> None:
        """Return once the watch has delivered ``vm`` (its initial ADDED event): from then on
        every change of it is seen."""
        wait_for(lambda: vm in self.seen, timeout, what=f"watch of {vm} streaming")

    def recorded(self, vm: str, timeout: float = 30.0) -> None:
        """Return once the watch has delivered both the attach and the power-on of ``vm``: its
        thread may still be behind the cluster when the test has already seen the boot."""
        wait_for(
            lambda: vm in self.attached and vm in self.started,
            timeout,
            what=f"the watch to record {vm}'s attach and power-on",
        )

    def stop(self) -> None:
        self.watch.stop()
