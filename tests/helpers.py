"""Helpers shared by the end-to-end and reliability tests: Redfish calls and lab observations."""

from __future__ import annotations

import time
from pathlib import Path

import redis
import requests

from lab.stack import LAB_NAMESPACE, LabStack
from tests.e2e.conftest import boots, system_id
from tests.polling import wait_for

__all__ = [
    "Redfish",
    "active_tasks",
    "add_fault",
    "boots",
    "clear_faults",
    "datavolumes",
    "kube_requests",
    "persistentvolumeclaims",
    "process_gone",
    "vm_datavolumes",
    "system_id",
    "wait_for",
]


class Redfish:
    """Plain HTTP against the API, as an operator's script would call it."""

    def __init__(self, stack: LabStack, timeout: float = 5.0):
        self.base = stack.redfish_url
        self.session = requests.Session()
        self.session.auth = stack.credentials
        self.timeout = timeout

    def get(self, path: str) -> dict:
        reply = self.session.get(self.base + path, timeout=self.timeout)
        assert reply.status_code == 200, reply.text
        return reply.json()

    def raw_get(self, path: str) -> requests.Response:
        return self.session.get(self.base + path, timeout=self.timeout)

    def post(self, path: str, body=None) -> requests.Response:
        return self.session.post(self.base + path, json=body, timeout=self.timeout)

    def system(self, vm: str) -> dict:
        return self.get(f"/redfish/v1/Systems/{system_id(vm)}")

    def media(self, vm: str) -> dict:
        return self.get(f"/redfish/v1/Systems/{system_id(vm)}/VirtualMedia/Cd")

    def insert(self, vm: str, image: str) -> requests.Response:
        return self.post(
            f"/redfish/v1/Systems/{system_id(vm)}/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia",
            {"Image": image},
        )

    def eject(self, vm: str) -> requests.Response:
        return self.session.post(
            f"{self.base}/redfish/v1/Systems/{system_id(vm)}/VirtualMedia/Cd/Actions/"
            "VirtualMedia.EjectMedia",
            timeout=self.timeout,
        )

    def reset(self, vm: str, kind: str) -> requests.Response:
        return self.post(
            f"/redfish/v1/Systems/{system_id(vm)}/Actions/ComputerSystem.Reset", {"ResetType": kind}
        )

    def power_off_and_eject(self, vm: str) -> None:
        """ForceOff and EjectMedia back to back, as Ironic sends them; returns once it is Off."""
        self.reset(vm, "ForceOff")
        self.eject(vm)
        wait_for(lambda: self.system(vm)["PowerState"] == "Off", 30, what=f"{vm} off")

    def boot_cd_once(self, vm: str) -> None:
        reply = self.session.patch(
            f"{self.base}/redfish/v1/Systems/{system_id(vm)}",
            json={"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}},
            timeout=self.timeout,
        )
        assert reply.status_code in (200, 204), reply.text

    def boot_hdd_continuous(self, vm: str) -> None:
        reply = self.session.patch(
            f"{self.base}/redfish/v1/Systems/{system_id(vm)}",
            json={
                "Boot": {
                    "BootSourceOverrideTarget": "Hdd",
                    "BootSourceOverrideEnabled": "Continuous",
                }
            },
            timeout=self.timeout,
        )
        assert reply.status_code in (200, 204), reply.text

    def task(self, reply: requests.Response) -> dict:
        location = reply.headers["Location"]
        task_id = location.rstrip("/").rsplit("/", 1)[-1]
        return self.get(f"/redfish/v1/TaskService/Tasks/{task_id}")


def datavolumes(stack: LabStack) -> list[dict]:
    reply = requests.get(
        f"{stack.kube_url}/apis/cdi.kubevirt.io/v1beta1/namespaces/{LAB_NAMESPACE}/datavolumes",
        timeout=5,
    )
    return reply.json()["items"]


def vm_datavolumes(stack: LabStack, vm: str) -> list[str]:
    """Names of the VM's fleetfish DataVolumes that are not being deleted (CDI's finalizer
    keeps a deleted one readable for a moment)."""
    return [
        d["metadata"]["name"]
        for d in datavolumes(stack)
        if d["metadata"]["name"].startswith(f"ff-{vm}-")
        and not d["metadata"].get("deletionTimestamp")
    ]


def persistentvolumeclaims(stack: LabStack) -> list[dict]:
    reply = requests.get(
        f"{stack.kube_url}/api/v1/namespaces/{LAB_NAMESPACE}/persistentvolumeclaims", timeout=5
    )
    return reply.json()["items"]


def add_fault(stack: LabStack, **spec) -> None:
    """POST /lab/faults: the next ``count`` matching requests are delayed and/or fail."""
    reply = requests.post(f"{stack.kube_url}/lab/faults", json=spec, timeout=5)
    assert reply.status_code in (200, 201), reply.text


def drop_watches(stack: LabStack, abrupt: bool = False) -> None:
    """POST /lab/watches/drop: every open watch ends (``abrupt``: cut without a final event)."""
    reply = requests.post(f"{stack.kube_url}/lab/watches/drop", json={"abrupt": abrupt}, timeout=5)
    assert reply.status_code == 200, reply.text


def clear_faults(stack: LabStack) -> None:
    requests.delete(f"{stack.kube_url}/lab/faults", timeout=5)


def kube_requests(stack: LabStack, since: float) -> list[dict]:
    """What clients asked the simulator since ``since`` (logged when each answer was sent)."""
    reply = requests.get(f"{stack.kube_url}/lab/requests", params={"since": since}, timeout=5)
    return reply.json()["requests"]


def active_tasks(stack: LabStack, timeout: float = 1.0) -> dict[str, list[dict]]:
    """Celery tasks running now, by lab process name (``worker0``...), from worker inspect."""
    from celery import Celery

    from fleetfish.celery_config import celery_config
    from fleetfish.settings import Settings

    app = Celery("fleetfish-reliability")
    app.conf.update(celery_config(Settings(redis_url=stack.redis_url)))
    try:
        replies = app.control.inspect(timeout=timeout).active() or {}
    except redis.exceptions.ConnectionError:
        return {}  # a broker that has just come back; the caller polls again
    finally:
        app.close()
    return {node.split("@", 1)[0]: tasks for node, tasks in replies.items()}


def worker_running(stack: LabStack, task_name: str, system: str) -> str | None:
    """The lab name of the worker running ``task_name`` for ``system``, if one is."""
    for worker, tasks in active_tasks(stack).items():
        for task in tasks:
            args = task.get("args") or []
            if task.get("name") == task_name and args and args[0] == system:
                return worker
    return None


def wait_boot(stack: LabStack, vm: str, since: float, timeout: float) -> dict:
    return wait_for(
        lambda: next((b for b in boots(stack, since) if b["vm"] == vm), None),
        timeout,
        what=f"{vm} boot",
    )


def settle(seconds: float) -> None:
    """Wait a fixed time on purpose: only to show that something does NOT happen later."""
    time.sleep(seconds)


def process_gone(pid: int) -> bool:
    """Exited: no such process, or a zombie waiting for whoever inherited it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
