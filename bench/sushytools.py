"""The sushy-tools reference emulator (fake driver), installed in its own venv and run on loopback.

It is the peer fleetfish is compared with. Its own venv under ``var/bench/`` keeps its pins
(Flask, requests, ...) away from the project's.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import requests

from lab.ports import free_port, wait_for_port

log = logging.getLogger("fleetfish.bench.sushytools")

REPO = Path(__file__).resolve().parent.parent
DEFAULT_VENV = REPO / "var" / "bench" / "sushy-venv"
INSTALL_TIMEOUT_S = 600


def ensure_venv(venv: Path = DEFAULT_VENV) -> Path:
    """The ``sushy-emulator`` executable, installing sushy-tools into ``venv`` the first time."""
    exe = venv / "bin" / "sushy-emulator"
    if exe.exists():
        return exe
    venv.parent.mkdir(parents=True, exist_ok=True)
    log.info("installing sushy-tools into %s", venv)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "sushy-tools"],
        check=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    return exe


def fake_systems(count: int) -> list[dict]:
    """``count`` fake systems, all off, named like the lab's VMs (uuid is the Redfish Id)."""
    systems = []
    for i in range(count):
        systems.append(
            {
                "uuid": str(uuid.UUID(int=0xF1EE7F15_0000_4000_8000_000000000000 + i)),
                "name": f"fake-{i}",
                "power_state": "Off",
                "external_notifier": False,
                "nics": [{"mac": f"52:54:00:00:{i // 256:02x}:{i % 256:02x}", "ip": "127.0.0.1"}],
            }
        )
    return systems


class SushyEmulator:
    """``with SushyEmulator(dir, systems=N, user=..., password_hash=...) as emu: emu.url``.

    ``password_hash`` is a bcrypt digest: the emulator reads an htpasswd file with bcrypt only,
    so the benchmark can give it the same digest (same cost) as fleetfish's users file.
    """

    def __init__(
        self, run_dir: Path, systems: int, user: str, password_hash: str, venv: Path = DEFAULT_VENV
    ):
        self.run_dir = Path(run_dir).resolve()
        self.systems = fake_systems(systems)
        self.user = user
        self.password_hash = password_hash
        self.venv = venv
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def system_ids(self) -> list[str]:
        return [s["uuid"] for s in self.systems]

    def _write_config(self) -> Path:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        htpasswd = self.run_dir / "htpasswd"
        htpasswd.write_text(f"{self.user}:{self.password_hash}\n")
        state = self.run_dir / "state"  # fresh per run: the emulator keeps state in sqlite
        state.mkdir(exist_ok=True)
        config = self.run_dir / "emulator.conf"
        config.write_text(
            "\n".join(
                [
                    "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'",
                    f"SUSHY_EMULATOR_LISTEN_PORT = {self.port}",
                    f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}",
                    f"SUSHY_EMULATOR_STATE_DIR = {str(state)!r}",
                    f"SUSHY_EMULATOR_FAKE_SYSTEMS = {self.systems!r}",
                    "",
                ]
            )
        )
        return config

    def start(self, timeout: float = 60.0) -> SushyEmulator:
        exe = ensure_venv(self.venv)
        config = self._write_config()
        self._log = open(self.run_dir / "sushy-emulator.log", "ab")  # noqa: SIM115 - closed in stop
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SUSHY_", "PYTHONPATH"))}
        # Its InsertMedia keeps every downloaded image in a temp dir: keep them in the run dir.
        tmp = self.run_dir / "tmp"
        tmp.mkdir(exist_ok=True)
        env["TMPDIR"] = str(tmp)
        self.proc = subprocess.Popen(
            [str(exe), "--fake", "--config", str(config), "-i", "127.0.0.1", "-p", str(self.port)],
            cwd=self.run_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"sushy-emulator exited {self.proc.returncode}, see {self._log.name}"
                )
            if wait_for_port("127.0.0.1", self.port, 0.5):
                try:
                    if requests.get(f"{self.url}/redfish/v1/", timeout=2).status_code < 500:
                        return self
                except requests.RequestException:
                    pass
        self.stop()
        raise TimeoutError("sushy-emulator did not answer")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        if self._log:
            self._log.close()
            self._log = None

    def __enter__(self) -> SushyEmulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
