"""A multi-host lab on one machine: API, Redis and each worker in its own network namespace.

Each namespace has one veth to a bridge in the root namespace and a private 10.x address; the
simulator and the ISO server listen on the bridge's address in the root namespace. Processes
run under ``ip netns exec`` with the same command lines as ``lab/stack.py``. ``close()``
removes every process, namespace and the bridge (call it in a finally block).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

from lab.redis_embedded import EmbeddedRedis
from lab.stack import (
    LAB_NAMESPACE,
    REPO,
    LabConfig,
    LabStack,
    api_command,
    isoserver_command,
    kubesim_command,
    watcher_command,
    worker_command,
    write_kubeconfig,
)

REDIS_PORT = 6379
API_PORT = 8000


class NetnsUnavailable(RuntimeError):
    """Not root, or the kernel/container does not allow network namespaces."""


def _ip(*args: str, ns: str = "") -> None:
    cmd = ["ip", "netns", "exec", ns, "ip", *args] if ns else ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=10)


class NetLab:
    """Namespaces ``<tag>-redis``, ``<tag>-api``, ``<tag>-w0``... on bridge ``<tag>br``."""

    def __init__(self, var_dir: Path, vms: int, workers: int, import_seconds: float, vt: int):
        self.var_dir = Path(var_dir)
        self.tag = f"ff{os.getpid() % 100000}"
        self.net = f"10.{random.randint(160, 250)}.{random.randint(1, 250)}"
        self.bridge = f"{self.tag}br"
        self.hosts = {"redis": 2, "api": 3} | {f"w{i}": 10 + i for i in range(workers)}
        self.namespaces: list[str] = []
        self.procs: dict[str, subprocess.Popen] = {}
        self.vms, self.workers, self.import_seconds, self.vt = vms, workers, import_seconds, vt
        self.kube_port, self.iso_port = (
            18000 + random.randint(0, 999),
            19000 + random.randint(0, 999),
        )
        # Reuses the lab's credential files; this LabStack is never started.
        self._stack = LabStack(LabConfig(var_dir=self.var_dir))
        self.password = ""

    # -- addresses ---------------------------------------------------------------------------

    def addr(self, host: str) -> str:
        return f"{self.net}.{self.hosts[host]}" if host != "root" else f"{self.net}.1"

    @property
    def redis_url(self) -> str:
        return f"redis://{self.addr('redis')}:{REDIS_PORT}/0"

    @property
    def redfish_url(self) -> str:
        return f"http://{self.addr('api')}:{API_PORT}"

    @property
    def kube_url(self) -> str:
        return f"http://{self.addr('root')}:{self.kube_port}"

    @property
    def iso_url(self) -> str:
        return f"http://{self.addr('root')}:{self.iso_port}"

    @property
    def credentials(self) -> tuple[str, str]:
        return self._stack.credentials

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    # -- network -----------------------------------------------------------------------------

    def build_network(self) -> None:
        if os.geteuid() != 0:
            raise NetnsUnavailable("needs root for ip netns")
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
        except (subprocess.CalledProcessError, FileNotFoundError) as exc:
            raise NetnsUnavailable(f"cannot create a bridge: {exc}") from exc
        _ip("addr", "add", f"{self.addr('root')}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for host in self.hosts:
            ns = self.ns(host)
            try:
                subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
            except subprocess.CalledProcessError as exc:
                raise NetnsUnavailable(f"ip netns add failed: {exc.stderr!r}") from exc
            self.namespaces.append(ns)
            outside, inside = f"{self.tag}{host}", f"{self.tag}{host}i"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", ns)
            _ip("link", "set", outside, "master", self.bridge)
            _ip("link", "set", outside, "up")
            _ip("link", "set", "lo", "up", ns=ns)
            _ip("link", "set", inside, "name", "eth0", ns=ns)
            _ip("addr", "add", f"{self.addr(host)}/24", "dev", "eth0", ns=ns)
            _ip("link", "set", "eth0", "up", ns=ns)

    def cut(self, host: str) -> None:
        """The host loses its network, as if its cable was pulled (its processes live on)."""
        _ip("link", "set", "eth0", "down", ns=self.ns(host))

    # -- processes ---------------------------------------------------------------------------

    def env(self, host: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "REDIS_URL": self.redis_url,
                "FLEETFISH_BIND": self.addr(host),
                "FLEETFISH_PORT": str(API_PORT),
                "FLEETFISH_USERS_FILE": str(self.var_dir / "users.json"),
                "FLEETFISH_VISIBILITY_TIMEOUT": str(self.vt),
                "FLEETFISH_API_WORKERS": "2",
                "FLEETFISH_KUBECONFIG": str(self.var_dir / "kubeconfig"),
                "FLEETFISH_NAMESPACES": LAB_NAMESPACE,
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.pop("KUBECONFIG", None)
        return env

    def spawn(self, name: str, host: str, cmd: list[str]) -> None:
        logs = self.var_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        prefix = ["ip", "netns", "exec", self.ns(host)] if host != "root" else []
        with open(logs / f"{name}.log", "ab") as out:
            self.procs[name] = subprocess.Popen(
                prefix + cmd,
                cwd=REPO,
                env=self.env(host),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start(self, timeout: float = 90.0) -> NetLab:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        self.build_network()
        self._stack._write_users_file()
        write_kubeconfig(self.var_dir / "kubeconfig", self.kube_url)
        root = self.addr("root")
        self.spawn("isoserver", "root", isoserver_command(root, self.iso_port, 1))
        self.spawn(
            "kubesim",
            "root",
            kubesim_command(root, self.kube_port, self.vms, self.import_seconds, self.iso_url),
        )
        redis_dir = self.var_dir / "redis"
        redis_dir.mkdir(parents=True, exist_ok=True)
        redis_cmd = EmbeddedRedis(redis_dir, REDIS_PORT).command()
        redis_cmd[redis_cmd.index("--bind") + 1] = self.addr("redis")
        redis_cmd[redis_cmd.index("--protected-mode") + 1] = "no"
        self.spawn("redis", "redis", redis_cmd)
        deadline = time.monotonic() + timeout
        self._await(lambda: self._get(f"{self.kube_url}/lab/healthz"), deadline, "kubesim")
        self._await(self._redis_ok, deadline, "redis")
        for i in range(self.workers):
            self.spawn(f"worker{i}", f"w{i}", worker_command(i, 8))
        self.spawn("watcher", "api", watcher_command())
        self.spawn("api", "api", api_command())
        self._await(lambda: self._get(f"{self.redfish_url}/redfish/v1/"), deadline, "API")
        self._await(self._mirrored, deadline, "mirror")
        self._await(lambda: self.ping() >= self.workers, deadline, "workers")
        return self

    def _await(self, check, deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    tail = (self.var_dir / "logs" / f"{name}.log").read_text(errors="replace")
                    raise RuntimeError(f"{name} exited ({proc.returncode}):\n{tail[-2000:]}")
            try:
                if check():
                    return
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(0.3)
        raise TimeoutError(f"{what} did not come up")

    @staticmethod
    def _get(url: str) -> bool:
        return requests.get(url, timeout=1).status_code == 200

    def _redis(self):
        import redis

        return redis.Redis.from_url(self.redis_url, decode_responses=True, socket_timeout=2)

    def _redis_ok(self) -> bool:
        client = self._redis()
        try:
            return bool(client.ping())
        finally:
            client.close()

    def _mirrored(self) -> bool:
        client = self._redis()
        try:
            return client.scard("ff:systems") >= self.vms
        finally:
            client.close()

    def ping(self) -> int:
        from celery import Celery

        from fleetfish.celery_config import celery_config
        from fleetfish.settings import Settings

        app = Celery("fleetfish-netlab")
        app.conf.update(celery_config(Settings(redis_url=self.redis_url)))
        try:
            return len(app.control.ping(timeout=1.0) or [])
        finally:
            app.close()

    def consume(self, worker: str, on: bool) -> None:
        """Start or stop ``worker`` (e.g. "worker0") taking tasks from the fleet's queues, by
        Celery remote control; raises when the worker does not confirm."""
        from celery import Celery

        from fleetfish.celery_config import MEDIA_QUEUE, POWER_QUEUE, celery_config
        from fleetfish.settings import Settings

        app = Celery("fleetfish-netlab")
        app.conf.update(celery_config(Settings(redis_url=self.redis_url)))
        try:
            nodes = [n for r in app.control.ping(timeout=1.0) or [] for n in r]
            node = next(n for n in nodes if n.split("@", 1)[0] == worker)
            for queue in (MEDIA_QUEUE, POWER_QUEUE):
                call = app.control.add_consumer if on else app.control.cancel_consumer
                replies = call(queue, destination=[node], reply=True, timeout=2.0) or []
                if not replies:
                    raise RuntimeError(f"{worker} did not confirm consuming={on} on {queue}")
        finally:
            app.close()

    def active(self) -> dict[str, list[dict]]:
        from celery import Celery

        from fleetfish.celery_config import celery_config
        from fleetfish.settings import Settings

        app = Celery("fleetfish-netlab")
        app.conf.update(celery_config(Settings(redis_url=self.redis_url)))
        try:
            replies = app.control.inspect(timeout=1.0).active() or {}
        finally:
            app.close()
        return {node.split("@", 1)[0]: tasks for node, tasks in replies.items()}

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=10)
        self.namespaces.clear()


def main() -> int:
    """Start a NetLab for a manual look: ``python -m tests.reliability.netlab``; Ctrl-C ends."""
    lab = NetLab(REPO / "var" / "netlab", vms=3, workers=2, import_seconds=3, vt=8)
    try:
        lab.start()
        print(f"netlab ready: redfish={lab.redfish_url} kube={lab.kube_url}", flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        lab.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
