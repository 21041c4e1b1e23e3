"""Process fixtures for the worker wiring tests: simulator, ISO server, workers, watchers.

Everything runs as a real process on 127.0.0.1 with free ports; the tests play the API's part by
calling ``Store`` and sending the canvas, as ``app/`` does.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from celery import Celery

from fleetfish import wire
from fleetfish.celery_config import celery_config
from fleetfish.settings import Settings
from fleetfish.store import Store
from lab.ports import free_port, wait_for_port
from lab.stack import write_kubeconfig
from tests.polling import wait_for  # noqa: F401 - re-exported for the tests here
from workers.host import worker_argv

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "fleetfish-lab"
ISO_BYTES = 3 * 2**20


class Procs:
    """Child processes of one test, each in its own session; stopped by PID at teardown."""

    def __init__(self, logs: Path):
        self.logs = logs
        self.procs: dict[str, subprocess.Popen] = {}

    def spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
        out = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.kill(proc.pid, sig)
        proc.wait(timeout=20)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
            del name


class Lab:
    """Simulator + ISO server + N workers (+ watchers) against the test's Redis."""

    def __init__(self, tmp: Path, redis_url: str, procs: Procs):
        self.tmp = tmp
        self.redis_url = redis_url
        self.procs = procs
        self.store = Store.from_url(redis_url)
        self.client = Celery("fleetfish-test-client")
        self.client.config_from_object(celery_config(Settings(redis_url=redis_url)))
        self.kube_url = ""
        self.iso_url = ""

    # -- processes -----------------------------------------------------------------------------

    def start_isoserver(self) -> None:
        isos = self.tmp / "isos"
        isos.mkdir()
        for name in ("boot-a.iso", "boot-b.iso", "boot-c.iso"):
            (isos / name).write_bytes(os.urandom(ISO_BYTES))
        port = free_port()
        self.procs.spawn(
            "isoserver",
            [
                sys.executable,
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                "--directory",
                str(isos),
                str(port),
            ],
            dict(os.environ),
        )
        assert wait_for_port("127.0.0.1", port, 20), "ISO server did not start"
        self.iso_url = f"http://127.0.0.1:{port}"

    def start_kubesim(
        self,
        vms: int = 3,
        import_seconds: float = 2.0,
        start_seconds: float = 0.5,
        stop_seconds: float = 0.3,
    ) -> None:
        port = free_port()
        self.procs.spawn(
            "kubesim",
            [
                sys.executable, "-m", "lab.kubesim", "--bind", "127.0.0.1", "--port", str(port),
                "--vms", str(vms), "--import-seconds", str(import_seconds),
                "--start-seconds", str(start_seconds), "--stop-seconds", str(stop_seconds),
            ],
            dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip
        wait_for(lambda: "kubesim ready" in self.procs.log("kubesim"), 30, "kubesim ready")
        self.kube_url = f"http://127.0.0.1:{port}"
        write_kubeconfig(self.tmp / "kubeconfig", self.kube_url)

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        env.update(
            {
                "REDIS_URL": self.redis_url,
                "FLEETFISH_KUBECONFIG": str(self.tmp / "kubeconfig"),
                "FLEETFISH_NAMESPACES": NAMESPACE,
                "FLEETFISH_VISIBILITY_TIMEOUT": "10",
                "FLEETFISH_IMPORT_POLL_SECONDS": "0.5",
                # Most of these tests run no watcher: imports read their DataVolume directly.
                "FLEETFISH_DV_FALLBACK_SECONDS": "0.5",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(extra)
        return env

    def start_worker(self, name: str, concurrency: int = 8, **env: str) -> subprocess.Popen:
        argv = worker_argv(0, concurrency, name=name)
        cmd = [sys.executable, "-m", "celery", "-A", "workers.celery_app", *argv]
        proc = self.procs.spawn(name, cmd, self.env(**env))
        wait_for(lambda: "worker ready" in self.procs.log(name), 60, f"{name} ready")
        return proc

    def start_watcher(self, name: str = "watcher") -> subprocess.Popen:
        return self.procs.spawn(name, [sys.executable, "-m", "workers.watcher"], self.env())

    # -- the API's part ------------------------------------------------------------------------

    def iso(self, name: str = "boot-a.iso") -> str:
        return f"{self.iso_url}/{name}"

    def insert(self, system: str, image: str) -> str:
        ins = self.store.begin_insert(system, "Cd", image)
        task = ins["task"]
        # As the API sends it: the chord as one message, written with the Store's client.
        chord = wire.insert_media_chord_message(self.client, system, "Cd", ins["gen"], image, task)
        wire.publish(self.store.r, chord)
        return task

    def eject(self, system: str) -> str:
        ej = self.store.begin_eject(system, "Cd")
        wire.publish(
            self.store.r, wire.eject_media(self.client, system, "Cd", ej["gen"], ej["task"])
        )
        if ej["released_action"]:
            released = wire.power_reset(
                self.client,
                system,
                ej["released_action"],
                ej["released_task"],
                ej["released_celery_id"],
            )
            wire.publish(self.store.r, released)
        return ej["task"]

    def boot_once_cd(self, system: str) -> None:
        gen = self.store.set_boot(system, enabled="Once", target="Cd", mode="UEFI")
        wire.publish(self.store.r, wire.boot_apply(self.client, system, gen))

    def reset(self, system: str, action: str = "On") -> tuple[str, str]:
        verdict = self.store.request_power(system, action)
        task = verdict["task"]
        if verdict["verdict"] == "run":
            reset = wire.power_reset(self.client, system, action, task, verdict["celery_id"])
            wire.publish(self.store.r, reset)
        return task, verdict["verdict"]

    def task(self, task_id: str) -> dict:
        return self.store.get_task(task_id) or {}

    def task_done(self, task_id: str) -> dict | None:
        task = self.task(task_id)
        return task if task.get("state") in ("Completed", "Exception", "Cancelled") else None

    # -- the simulator -------------------------------------------------------------------------

    def boots(self, vm: str | None = None) -> list[dict]:
        params = {"vm": vm} if vm else {}
        return requests.get(f"{self.kube_url}/lab/boots", params=params, timeout=5).json()["boots"]

    def kube(self, path: str) -> dict:
        response = requests.get(f"{self.kube_url}{path}", timeout=5)
        response.raise_for_status()
        return response.json()

    def dvs(self) -> list[str]:
        data = self.kube(f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{NAMESPACE}/datavolumes")
        return sorted(d["metadata"]["name"] for d in data["items"])

    def vm(self, name: str) -> dict:
        return self.kube(f"/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/virtualmachines/{name}")

    def put_subresource(self, vm: str, verb: str, body: dict | None = None) -> int:
        url = (
            f"{self.kube_url}/apis/subresources.kubevirt.io/v1/namespaces/{NAMESPACE}"
            f"/virtualmachines/{vm}/{verb}"
        )
        return requests.put(url, json=body or {}, timeout=5).status_code


def system(vm: str) -> str:
    return f"{NAMESPACE}.{vm}"


@pytest.fixture
def procs(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    p = Procs(logs)
    try:
        yield p
    finally:
        p.stop_all()


@pytest.fixture
def lab(tmp_path, redis_url, procs):
    """A Lab with the ISO server running; the test starts kubesim/workers it needs."""
    lab = Lab(tmp_path, redis_url, procs)
    lab.start_isoserver()
    yield lab
    # Sent canvases left AsyncResults subscribed to the result backend: drop them while Redis
    # still runs, or their __del__ fails at session end.
    gc.collect()
    lab.client.close()
