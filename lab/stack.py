"""Starts and stops the whole fleetfish stack as separate processes: used by `make lab` and tests.

Redis (embedded unless REDIS_URL is set), the KubeVirt simulator (unless a KUBECONFIG selects
a real cluster), the ISO server, the API under gunicorn, LAB_WORKERS Celery workers, the
watcher and Flower. Every process gets its own session so a terminal's Ctrl-C reaches only the
lab, which then stops its children in order. The lab binds only ports that are free when it
starts, and records what it started in ``<var dir>/lab.pids``, so a lab killed with SIGKILL
leaves nothing the next start cannot stop.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from fleetfish.settings import env_number, env_switch
from lab.pidfile import LabPidFile
from lab.ports import ensure_free, free_port, listens, wait_for_port
from lab.redis_embedded import EmbeddedRedis
from workers.host import worker_argv

log = logging.getLogger("fleetfish.lab")

REPO = Path(__file__).resolve().parent.parent
LAB_NAMESPACE = "fleetfish-lab"
ISO_CA_CONFIGMAP = "fleetfish-image-ca"  # LAB_ISO_TLS: the CA every https import trusts
LAB_USER = "admin"


def _env_number(name: str, default, kind=int):
    return env_number(os.environ, name, default, kind)


def _env_switch(name: str) -> bool:
    """On/off as the services read it (fleetfish.settings), so both agree on every spelling."""
    return env_switch(os.environ, name, False)


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig naming one plain-HTTP cluster without credentials (the simulator)."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kubesim", "cluster": {"server": server}}],
                "users": [{"name": "lab", "user": {}}],
                "contexts": [{"name": "lab", "context": {"cluster": "kubesim", "user": "lab"}}],
                "current-context": "lab",
            }
        )
    )
    return path


@dataclass
class LabConfig:
    """What to start; ``from_env`` reads the documented LAB_* variables."""

    var_dir: Path = REPO / "var" / "lab"
    vms: int = 3
    import_seconds: float = 10.0
    workers: int = 2
    worker_concurrency: int = 16
    api_workers: int = 2
    api_port: int = 8000
    kube_port: int = 18080
    iso_port: int = 18081
    iso_bind: str = "127.0.0.1"  # 0.0.0.0 lets a real cluster's CDI importer fetch the images
    flower_port: int = 5555
    redis_port: int = 16379
    redis_url: str = ""  # external Redis; empty = embedded
    kubeconfig: str = ""  # real cluster; empty = simulator
    flower: bool = True
    legacy_sequential: bool = False
    visibility_timeout: int = 30
    iso_size_mib: int = 4
    tls: bool = False  # serve the API over HTTPS with a generated self-signed certificate
    iso_tls: bool = False  # serve images over HTTPS with a CA of the lab's own (LAB_ISO_TLS)
    watcher_in_workers: bool = False  # the watcher role as a thread of each worker process
    # the workers and the watcher forked from one parent that imported their code once
    # (python -m workers.host): they share those pages
    worker_parent: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls) -> LabConfig:
        return cls(
            var_dir=Path(os.environ.get("LAB_VAR_DIR", str(cls.var_dir))),
            vms=_env_number("LAB_VMS", cls.vms),
            import_seconds=_env_number("LAB_IMPORT_SECONDS", cls.import_seconds, float),
            workers=_env_number("LAB_WORKERS", cls.workers),
            worker_concurrency=_env_number("LAB_WORKER_CONCURRENCY", cls.worker_concurrency),
            api_workers=_env_number("LAB_API_WORKERS", cls.api_workers),
            api_port=_env_number("FLEETFISH_PORT", cls.api_port),
            kube_port=_env_number("LAB_KUBE_PORT", cls.kube_port),
            iso_port=_env_number("LAB_ISO_PORT", cls.iso_port),
            iso_bind=os.environ.get("LAB_ISO_BIND", "") or cls.iso_bind,
            flower_port=_env_number("LAB_FLOWER_PORT", cls.flower_port),
            redis_port=_env_number("LAB_REDIS_PORT", cls.redis_port),
            redis_url=os.environ.get("REDIS_URL", ""),
            kubeconfig=os.environ.get("KUBECONFIG", ""),
            legacy_sequential=_env_switch("FLEETFISH_LEGACY_SEQUENTIAL"),
            visibility_timeout=_env_number("FLEETFISH_VISIBILITY_TIMEOUT", cls.visibility_timeout),
            tls=_env_switch("LAB_TLS"),
            iso_tls=_env_switch("LAB_ISO_TLS"),
            watcher_in_workers=_env_switch("FLEETFISH_WORKER_WATCH"),
            worker_parent=_env_switch("LAB_WORKER_PARENT"),
        )

    @classmethod
    def for_tests(cls, var_dir: Path, **overrides) -> LabConfig:
        """Every port free and chosen now, so parallel runs never collide."""
        ports = {
            "api_port": free_port(),
            "kube_port": free_port(),
            "iso_port": free_port(),
            "flower_port": free_port(),
            "redis_port": free_port(),
        }
        ports.update(overrides)
        return cls(var_dir=Path(var_dir), **ports)


def worker_command(index: int, concurrency: int) -> list[str]:
    """A Celery worker of the fleet, named ``worker<index>@<host>``."""
    return [sys.executable, "-m", "celery", "-A", "workers.celery_app"] + worker_argv(
        index, concurrency
    )


def host_command(workers: int, concurrency: int, watcher: bool) -> list[str]:
    """Every worker (and the watcher) forked from one parent: ``python -m workers.host``."""
    command = [sys.executable, "-m", "workers.host", "--workers", str(workers)]
    command += ["--concurrency", str(concurrency)]
    return command + ([] if watcher else ["--no-watcher"])


def api_command() -> list[str]:
    """The API under gunicorn; bind address and port come from FLEETFISH_BIND/FLEETFISH_PORT."""
    return [sys.executable, "-m", "gunicorn", "-c", "app/gunicorn_conf.py", "app:create_app()"]


def watcher_command() -> list[str]:
    return [sys.executable, "-m", "workers.watcher"]


def isoserver_command(
    bind: str, port: int, size_mib: int, tls_dir: Path | None = None
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "lab.isoserver",
        "--bind",
        bind,
        "--port",
        str(port),
        "--size-mib",
        str(size_mib),
    ]
    if tls_dir is not None:
        command += ["--tls-cert", str(tls_dir / "cert.pem"), "--tls-key", str(tls_dir / "key.pem")]
    return command


def kubesim_command(
    bind: str, port: int, vms: int, import_seconds: float, iso_base: str
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "lab.kubesim",
        "--bind",
        bind,
        "--port",
        str(port),
        "--vms",
        str(vms),
        "--namespace",
        LAB_NAMESPACE,
        "--import-seconds",
        str(import_seconds),
        "--iso-base",
        iso_base,
    ]


class LabStack:
    """The running lab. ``start()`` returns once every part answers; ``stop()`` is idempotent."""

    def __init__(self, config: LabConfig):
        self.config = config
        self.procs: dict[str, subprocess.Popen] = {}
        self.redis: EmbeddedRedis | None = None
        self.password = ""
        self.logs_dir = config.var_dir / "logs"
        self._log_files: list = []
        self.pidfile = LabPidFile(config.var_dir / "lab.pids")

    # -- addresses ---------------------------------------------------------------------------

    @property
    def redfish_url(self) -> str:
        scheme = "https" if self.config.tls else "http"
        return f"{scheme}://127.0.0.1:{self.config.api_port}"

    @property
    def kube_url(self) -> str:
        return f"http://127.0.0.1:{self.config.kube_port}"

    @property
    def iso_url(self) -> str:
        host = "127.0.0.1" if self.config.iso_bind == "0.0.0.0" else self.config.iso_bind
        scheme = "https" if self.config.iso_tls else "http"
        return f"{scheme}://{host}:{self.config.iso_port}"

    @property
    def iso_ca(self) -> Path:
        """The CA certificate of the HTTPS ISO server (LAB_ISO_TLS)."""
        return self.config.var_dir / "iso-tls" / "ca.pem"

    @property
    def flower_url(self) -> str:
        return f"http://127.0.0.1:{self.config.flower_port}"

    @property
    def redis_url(self) -> str:
        return self.config.redis_url or (self.redis.url if self.redis else "")

    @property
    def simulated(self) -> bool:
        return not self.config.kubeconfig

    @property
    def credentials(self) -> tuple[str, str]:
        return LAB_USER, self.password

    def ready_line(self) -> str:
        kube = self.kube_url if self.simulated else f"kubeconfig={self.config.kubeconfig}"
        iso = f"{self.iso_url}/images/lab-boot.iso"
        flower = self.flower_url if self.config.flower else "(disabled)"
        return (
            f"fleetfish lab ready: redfish={self.redfish_url}/redfish/v1/ "
            f"user={LAB_USER} password={self.password} kubevirt={kube} iso={iso} flower={flower}"
        )

    # -- set-up ------------------------------------------------------------------------------

    def _write_users_file(self) -> Path:
        import bcrypt

        cred_file = self.config.var_dir / "credentials.json"
        if cred_file.exists():
            self.password = json.loads(cred_file.read_text())["password"]
        else:
            self.password = secrets.token_urlsafe(12)
            cred_file.write_text(json.dumps({"user": LAB_USER, "password": self.password}))
            cred_file.chmod(0o600)
        digest = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=10)).decode()
        users = self.config.var_dir / "users.json"
        users.write_text(
            json.dumps(
                {"users": [{"name": LAB_USER, "password_hash": digest, "role": "Administrator"}]}
            )
        )
        users.chmod(0o600)
        return users

    def _write_kubeconfig(self) -> Path:
        path = self.config.var_dir / "kubeconfig"
        return write_kubeconfig(path, self.kube_url)

    def _publish_iso_ca(self) -> None:
        """The ConfigMap an operator creates for an HTTPS image server with a private CA."""
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": ISO_CA_CONFIGMAP, "namespace": LAB_NAMESPACE},
            "data": {"ca.pem": self.iso_ca.read_text()},
        }
        url = f"{self.kube_url}/api/v1/namespaces/{LAB_NAMESPACE}/configmaps"
        requests.post(url, json=body, timeout=5).raise_for_status()

    def service_env(self) -> dict[str, str]:
        cfg = self.config
        env = dict(os.environ)
        env.update(
            {
                "REDIS_URL": self.redis_url,
                "FLEETFISH_BIND": "127.0.0.1",
                "FLEETFISH_PORT": str(cfg.api_port),
                "FLEETFISH_USERS_FILE": str(cfg.var_dir / "users.json"),
                "FLEETFISH_VISIBILITY_TIMEOUT": str(cfg.visibility_timeout),
                "FLEETFISH_API_WORKERS": str(cfg.api_workers),
                "FLEETFISH_LEGACY_SEQUENTIAL": "1" if cfg.legacy_sequential else "0",
                "FLEETFISH_WORKER_WATCH": "1" if cfg.watcher_in_workers else "0",
                "PYTHONUNBUFFERED": "1",
            }
        )
        # Flower starts with the workers here: it shows their first tasks too (unless the
        # environment says otherwise).
        env.setdefault("FLEETFISH_TASK_EVENTS", "1" if cfg.flower else "0")
        if cfg.tls:
            env["FLEETFISH_TLS_CERT"] = str(cfg.var_dir / "tls" / "cert.pem")
            env["FLEETFISH_TLS_KEY"] = str(cfg.var_dir / "tls" / "key.pem")
        if cfg.iso_tls:
            env["FLEETFISH_IMAGE_CA_CONFIGMAP"] = ISO_CA_CONFIGMAP
        if self.simulated:
            env["FLEETFISH_KUBECONFIG"] = str(cfg.var_dir / "kubeconfig")
            env["FLEETFISH_NAMESPACES"] = LAB_NAMESPACE
            env.pop("KUBECONFIG", None)
            # The lab's ISO server listens on loopback, which the default image policy refuses:
            # the lab lists it (and only it, besides what the caller listed).
            listed = env.get("FLEETFISH_IMAGE_ALLOWLIST", "")
            env["FLEETFISH_IMAGE_ALLOWLIST"] = ",".join(filter(None, (listed, "127.0.0.1")))
        else:
            env["KUBECONFIG"] = cfg.kubeconfig
        env.update(cfg.extra_env)
        return env

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None):
        log_path = self.logs_dir / f"{name}.log"
        out = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log_files.append(out)
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env or self.service_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[name] = proc
        self._record()
        log.info("started %s (pid %s), log %s", name, proc.pid, log_path)
        return proc

    def _record(self) -> None:
        pids = {name: proc.pid for name, proc in self.procs.items()}
        if self.redis and self.redis.proc:
            pids["redis"] = self.redis.proc.pid
        self.pidfile.write(pids)

    def ports(self) -> list[tuple[int, str, str]]:
        """(port, the setting that chooses it, bind address) of every port the lab will bind."""
        cfg = self.config
        wanted = [(cfg.api_port, "FLEETFISH_PORT", "127.0.0.1")]
        if not cfg.redis_url:
            wanted.append((cfg.redis_port, "LAB_REDIS_PORT", "127.0.0.1"))
        if self.simulated:
            wanted.append((cfg.kube_port, "LAB_KUBE_PORT", "127.0.0.1"))
        wanted.append((cfg.iso_port, "LAB_ISO_PORT", cfg.iso_bind))
        if cfg.flower:
            wanted.append((cfg.flower_port, "LAB_FLOWER_PORT", "127.0.0.1"))
        return wanted

    def worker_command(self, index: int) -> list[str]:
        return worker_command(index, self.config.worker_concurrency)

    def start(self, timeout: float = 60.0) -> LabStack:
        cfg = self.config
        cfg.var_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        # Another lab on this var dir is refused; what a killed one left running is stopped.
        self.pidfile.claim()
        try:
            for port, setting, host in self.ports():
                ensure_free(port, setting, host)
            if not cfg.redis_url:
                self.redis = EmbeddedRedis(cfg.var_dir / "redis", cfg.redis_port)
                self.redis.start(max(1.0, deadline - time.monotonic()), on_spawn=self._record)
            self._write_users_file()
            if cfg.tls:
                from lab.tls import self_signed

                self_signed(cfg.var_dir / "tls")
            iso_tls_dir = None
            if cfg.iso_tls:
                from lab.tls import private_ca

                iso_tls_dir = private_ca(cfg.var_dir / "iso-tls")[0].parent
            self._spawn(
                "isoserver",
                isoserver_command(cfg.iso_bind, cfg.iso_port, cfg.iso_size_mib, iso_tls_dir),
            )
            if self.simulated:
                self._write_kubeconfig()
                self._spawn(
                    "kubesim",
                    kubesim_command(
                        "127.0.0.1", cfg.kube_port, cfg.vms, cfg.import_seconds, self.iso_url
                    ),
                )
                self._await_port("kubesim", cfg.kube_port, deadline)
                if cfg.iso_tls:
                    self._publish_iso_ca()
            self._await_port("isoserver", cfg.iso_port, deadline)
            if cfg.worker_parent:
                watcher = not cfg.watcher_in_workers
                command = host_command(cfg.workers, cfg.worker_concurrency, watcher)
                self._spawn("workers", command)
            else:
                for i in range(cfg.workers):
                    self._spawn(f"worker{i}", self.worker_command(i))
                if not cfg.watcher_in_workers:
                    self._spawn("watcher", watcher_command())
            self._spawn("api", api_command())
            if cfg.flower:
                self._spawn(
                    "flower",
                    [
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "workers.celery_app",
                        "flower",
                        "--address=127.0.0.1",
                        f"--port={cfg.flower_port}",
                        # The same lab credentials guard Flower's UI and its HTTP API.
                        f"--basic-auth={LAB_USER}:{self.password}",
                        "--persistent=False",
                    ],
                )
            self._await_port("api", cfg.api_port, deadline)
            self._await_api(deadline)
            self._await_mirror(deadline)
            self._await_workers(cfg.workers, deadline)
            if cfg.flower:
                self._await_port("flower", cfg.flower_port, deadline)
        except BaseException:
            self.stop()
            raise
        return self

    # -- readiness ---------------------------------------------------------------------------

    def exited(self) -> dict[str, int]:
        """Name -> exit status of every process of the lab that is no longer running."""
        gone = {
            name: proc.returncode for name, proc in self.procs.items() if proc.poll() is not None
        }
        if self.redis and self.redis.proc and self.redis.proc.poll() is not None:
            gone["redis"] = self.redis.proc.returncode
        return gone

    def _log_tail(self, name: str, size: int = 3000) -> str:
        return (self.logs_dir / f"{name}.log").read_text(errors="replace")[-size:]

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = self._log_tail(name)
                raise RuntimeError(f"{name} exited with {proc.returncode} during start:\n{tail}")
        if self.redis and not self.redis.running:
            raise RuntimeError(f"redis-server exited during start (log: {self.redis.data_dir})")

    def _await_port(self, name: str, port: int, deadline: float) -> None:
        """Our process listens on ``port`` (someone else answering there does not count)."""
        proc = self.procs[name]
        while time.monotonic() < deadline:
            self._check_alive()
            if wait_for_port("127.0.0.1", port, 0.5) and listens(proc.pid, port):
                return
            time.sleep(0.05)
        tail = self._log_tail(name)
        raise TimeoutError(f"{name} did not listen on {port} in time; its log ends:\n{tail}")

    def _await_api(self, deadline: float) -> None:
        if self.config.tls:
            import urllib3

            # The lab's own self-signed certificate; nothing else is fetched unverified.
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                url = f"{self.redfish_url}/redfish/v1/"
                if requests.get(url, timeout=1, verify=False).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise TimeoutError("the Redfish API did not answer")

    def _await_mirror(self, deadline: float) -> None:
        """The watcher has listed the cluster once (and, in the lab, seen every VM)."""
        from fleetfish.store import Store

        store = Store.from_url(self.redis_url)
        try:
            while time.monotonic() < deadline:
                self._check_alive()
                synced, count = store.mirror_synced()
                if synced and (not self.simulated or count >= self.config.vms):
                    return
                time.sleep(0.2)
        finally:
            store.close()
        raise TimeoutError("the watcher did not mirror the cluster")

    def _await_workers(self, count: int, deadline: float) -> None:
        from celery import Celery
        from kombu.exceptions import OperationalError
        from redis.exceptions import ConnectionError as RedisConnectionError

        from fleetfish.celery_config import celery_config
        from fleetfish.settings import Settings

        last_error = ""
        while time.monotonic() < deadline:
            self._check_alive()
            # A fresh client per attempt: a connection Redis dropped while the fleet was
            # starting is not reused, and one failed ping is not the end of the wait.
            app = Celery("fleetfish-lab")
            app.conf.update(celery_config(Settings(redis_url=self.redis_url)))
            try:
                replies = app.control.ping(timeout=1.0) or []
            except (OSError, OperationalError, RedisConnectionError) as exc:
                last_error = f" (last ping: {type(exc).__name__}: {exc})"
                time.sleep(0.2)
                continue
            finally:
                app.close()
            if len(replies) >= count:
                return
        raise TimeoutError(f"fewer than {count} workers answered ping{last_error}")

    # -- faults and shutdown -----------------------------------------------------------------

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
            proc.wait(30)

    def restart(self, name: str) -> None:
        """Start a process again with the command it had (after a kill in a fault test)."""
        proc = self.procs[name]
        if proc.poll() is None:
            self.kill(name, signal.SIGTERM)
        self._spawn(name, list(proc.args))

    def stop(self, timeout: float = 20.0) -> None:
        # Front first, so nothing new arrives while the back drains.
        order = ["api", "flower", "watcher"] + sorted(
            n for n in self.procs if n.startswith("worker")
        )
        order += ["kubesim", "isoserver"]
        order += [n for n in self.procs if n not in order]
        for name in order:
            proc = self.procs.get(name)
            if proc and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        end = time.monotonic() + timeout
        for name in order:
            proc = self.procs.get(name)
            if not proc:
                continue
            try:
                proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %ss, killing it", name, timeout)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        self.procs.clear()
        if self.redis:
            self.redis.stop()
            self.redis = None
        self.pidfile.release()
        for handle in self._log_files:
            handle.close()
        self._log_files.clear()

    def __enter__(self) -> LabStack:
        # Also entered after an explicit start(): starting again would refuse itself (the lab's
        # own pid file) and leave the running one behind.
        return self if self.procs else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
