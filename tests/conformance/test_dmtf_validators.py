"""DMTF conformance suites against the lab: Interop (OpenStack Ironic profile), Service, Protocol.

Each prints its summary counts (pytest -s, or the CI log's captured output on failure) and
leaves its reports under the test's tmp directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conformance import dmtf

pytestmark = pytest.mark.slow

# Protocol-validator assertions the service deliberately does not support, with the reason.
# Anything else that is not PASS fails the test.
UNSUPPORTED_PROTOCOL = {}


def _print(name: str, result: dict) -> None:
    counts = {k: result.get(k) for k in ("pass", "warn", "fail", "not_tested")}
    print(f"\n{name}: {counts}")
    for failure in result.get("failures", []):
        print(f"  {failure}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    out = tmp_path_factory.mktemp("dmtf")
    stack = dmtf.start_lab(out)
    yield stack, out
    stack.stop()


def test_interop_validator_ironic_profile_has_no_failures(lab):
    stack, out = lab
    result = dmtf.run_interop(stack, out)
    _print("Redfish Interop Validator (OpenStackIronicProfile v1.2.0)", result)
    assert result.get("pass", 0) > 0, result
    assert result["fail"] == 0, result["failures"]


def test_service_validator_has_no_failures(lab):
    stack, out = lab
    result = dmtf.run_service(stack, out)
    _print("Redfish Service Validator (offline schemas)", result)
    assert result.get("pass", 0) > 0, result
    assert result["fail"] == 0, result["failures"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root + unshare")
def test_protocol_validator_in_a_loopback_only_namespace(tmp_path):
    out = tmp_path / "protocol"
    proc = subprocess.run(
        ["unshare", "-n", sys.executable, "-m", "tests.conformance.dmtf", "protocol", str(out)],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=dmtf.REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "protocol.json").read_text())
    print(
        f"\nRedfish Protocol Validator: pass={result['pass']} warn={result['warn']} "
        f"fail={result['fail']} not_tested={result['not_tested']}"
    )
    for row in result["rows"]:
        if row.get("result", "").strip().upper() != "NOT TESTED":
            print("  ", row.get("result"), row.get("assertion"), "|", row.get("message", "")[:200])
    untested = sorted(
        {
            r.get("assertion")
            for r in result["rows"]
            if r.get("result", "").strip().upper() == "NOT TESTED"
        }
    )
    print(f"  not tested ({len(untested)}): {', '.join(untested)}")
    assert result["pass"] > 0
    failing = [
        r
        for r in result["rows"]
        if r.get("result", "").strip().upper() == "FAIL"
        and r.get("assertion") not in UNSUPPORTED_PROTOCOL
    ]
    assert failing == [], failing
