"""schemathesis fuzzes a real gunicorn (seeded Redis, Basic auth) from app/openapi.yaml.

Every check schemathesis has runs (tests/fuzz/schemathesis.toml tunes two), among them: no 5xx,
every response matches the spec (4xx bodies are the Redfish error schema), invalid bodies are
refused, auth is not ignored, wrong methods get 405 with Allow. Bounded by max examples per
operation and a subprocess timeout.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml

from tests.api.api_gunicorn import running_gunicorn
from tests.api.api_helpers import PASSWORDS, RESET_URI

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "app" / "openapi.yaml"
CONFIG = Path(__file__).with_name("schemathesis.toml")
MAX_EXAMPLES = 15
TIMEOUT_S = 150


def _schemathesis() -> str | None:
    return shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which(
        "schemathesis"
    )


def _spec_with_live_ids(tmp_path: Path, task_id: str, session_id: str) -> Path:
    """The spec with examples naming a real task and session, so those GETs reach their handlers."""
    spec = yaml.safe_load(SPEC.read_text())
    spec["components"]["parameters"]["TaskId"]["example"] = task_id
    spec["components"]["parameters"]["SessionId"]["example"] = session_id
    path = tmp_path / "openapi.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.skipif(_schemathesis() is None, reason="pip install schemathesis")
def test_schemathesis_finds_no_failure(redis_url, users_file, systems, tmp_path):
    # Schemathesis's invalid-auth check wants 401 for every bad credential; its generated logins
    # are a flood of new credentials that the bcrypt budget answers 429 once it runs out
    # (tests/security/test_bruteforce.py tests that). Here the budget is off: what is fuzzed is
    # the answers, not the throttling.
    with running_gunicorn(redis_url, users_file, tmp_path, FLEETFISH_BCRYPT_SHARE="0") as (
        port,
        log_path,
    ):
        base = f"http://127.0.0.1:{port}"
        auth = ("admin", PASSWORDS["admin"])
        task = requests.post(base + RESET_URI, json={"ResetType": "On"}, auth=auth, timeout=10)
        session = requests.post(
            base + "/redfish/v1/SessionService/Sessions",
            json={"UserName": "operator", "Password": PASSWORDS["operator"]},
            timeout=10,
        )
        task_id = task.headers["Location"].rsplit("/", 1)[-1]
        session_id = session.headers["Location"].rsplit("/", 1)[-1]
        spec = _spec_with_live_ids(tmp_path, task_id, session_id)
        run = subprocess.run(
            [
                _schemathesis(),
                "--no-color",
                "--config-file",
                str(CONFIG),
                "run",
                str(spec),
                "--url",
                base,
                "--auth",
                f"admin:{PASSWORDS['admin']}",
                "--max-examples",
                str(MAX_EXAMPLES),
                "--workers",
                "2",
                "--request-timeout",
                "10",
                "--seed",
                "20261202",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        server_log = log_path.read_text()
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    generated = re.search(r"(\d+) generated", output)
    assert generated and int(generated.group(1)) > 500, output[-2000:]
    print(f"schemathesis: {generated.group(0)} test cases")
    assert "Traceback" not in server_log and "unexpected error" not in server_log
