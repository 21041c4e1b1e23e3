"""Start the API under the real gunicorn config on a free port, for tests that need real HTTP."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

from lab.ports import free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def running_gunicorn(redis_url, users_file, tmp_path, **extra_env):
    """gunicorn with app/gunicorn_conf.py on a free port; yields (port, log path)."""
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "FLEETFISH_BIND": "127.0.0.1",
        "FLEETFISH_PORT": str(port),
        "FLEETFISH_USERS_FILE": users_file,
        "FLEETFISH_API_WORKERS": "1",
        "FLEETFISH_API_THREADS": "4",
        "PYTHONPATH": str(REPO),
        **extra_env,
    }
    log_path = tmp_path / f"gunicorn-{port}.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(REPO / "app" / "gunicorn_conf.py")],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        if not wait_for_port("127.0.0.1", port, timeout=30):
            raise RuntimeError(log_path.read_text())
        yield port, log_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()
