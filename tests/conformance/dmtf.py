"""Runs the DMTF Redfish validators against a lab and reduces their reports to counts.

`python -m tests.conformance.dmtf protocol OUTDIR` is what the protocol test runs inside a
loopback-only network namespace (the validator sends SSDP multicast and may post an event
subscription to a foreign address, so it must see nothing but the service).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import redis

from fleetfish.eventlog import EventLog
from lab.stack import LAB_NAMESPACE, LabConfig, LabStack

REPO = Path(__file__).resolve().parents[2]
# The schema and profile files the validators read, vendored (README.md there says from where).
DATA = Path(__file__).resolve().parent / "redfish"
BIN = Path(sys.executable).parent
PROFILE = DATA / "profiles" / "OpenStackIronicProfile.v1_2_0.json"


def start_lab(out: Path, tls: bool = False) -> LabStack:
    config = LabConfig.for_tests(
        out / "lab", vms=2, import_seconds=2, workers=1, flower=False, tls=tls
    )
    stack = LabStack(config).start(timeout=90)
    seed_event_log(stack)
    return stack


def seed_event_log(stack: LabStack) -> None:
    """An OK and a Critical entry in one system's log, so the validators check LogEntry too."""
    client = redis.Redis.from_url(stack.redis_url)
    try:
        log = EventLog(client)
        system = f"{LAB_NAMESPACE}.ostest-master-0"
        log.inserted(system, "Cd", "http://192.0.2.10/boot.iso", 1)
        log.media_failed(system, "Cd", 1, "HTTP 404 from the image server")
    finally:
        client.close()


def _table_counts(text: str) -> dict[str, int]:
    """The PASS/WARN/FAIL/NOT TESTED box the interop and service validators print last."""
    boxes = re.findall(
        r"\|\s*PASS\s*\|\s*WARN\s*\|\s*FAIL\s*\|\s*NOT TESTED\s*\|\s*\n[+\-\s]*\n"
        r"\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|",
        text,
    )
    if not boxes:
        return {}
    passed, warned, failed, untested = (int(x) for x in boxes[-1])
    return {"pass": passed, "warn": warned, "fail": failed, "not_tested": untested}


def _failures(log_dir: Path) -> list[str]:
    """The validators' debug logs name each failing property on a `FAIL - ` line."""
    found: set[str] = set()
    for log in log_dir.rglob("*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if " - FAIL - " in line or "ERROR - FAIL" in line:
                found.add(line.split(" - ", 3)[-1].strip())
    return sorted(found)[:40]


def _run_basic_auth_validator(
    stack: LabStack, out: Path, tool: str, name: str, extra: list[str]
) -> dict:
    """Interop and Service validators: same login options, same summary box, same debug logs."""
    user, password = stack.credentials
    log_dir = out / name
    proc = subprocess.run(
        [str(BIN / tool), "-r", stack.redfish_url, "-u", user, "-p", password]
        + ["--authtype", "Basic", "--logdir", str(log_dir), *extra],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=out,
    )
    result = _table_counts(proc.stdout)
    result.update(returncode=proc.returncode, failures=_failures(log_dir))
    return result


def run_interop(stack: LabStack, out: Path) -> dict:
    return _run_basic_auth_validator(stack, out, "rf_interop_validator", "interop", [str(PROFILE)])


def run_service(stack: LabStack, out: Path) -> dict:
    return _run_basic_auth_validator(
        stack,
        out,
        "rf_service_validator",
        "service",
        ["--skipschema", "--schema_directory", str(DATA / "csdl")],
    )


def run_protocol(stack: LabStack, out: Path) -> dict:
    """The protocol validator writes a TSV report: one row per assertion with its result."""
    user, password = stack.credentials
    report_dir = out / "protocol"
    # Trust the lab's own certificate. A CA bundle named in the environment would override it:
    # requests lets REQUESTS_CA_BUNDLE win over a Session's own verify setting.
    cert = stack.config.var_dir / "tls" / "cert.pem"
    tls_args = ["--ca-bundle", str(cert)] if stack.config.tls else []
    env = {k: v for k, v in os.environ.items() if k not in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
    report_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            str(BIN / "rf_protocol_validator"),
            "-r",
            stack.redfish_url,
            "-u",
            user,
            "-p",
            password,
            "--report-dir",
            str(report_dir),
            "--report-type",
            "tsv",
            "--avoid-http-redirect",
            *tls_args,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=out,
        env=env,
    )
    counts = {"pass": 0, "warn": 0, "fail": 0, "not_tested": 0}
    rows: list[dict] = []
    for tsv in report_dir.glob("*.tsv"):
        lines = tsv.read_text(errors="replace").splitlines()
        header = [h.strip().lower() for h in lines[0].split("\t")] if lines else []
        for line in lines[1:]:
            row = dict(zip(header, line.split("\t"), strict=False))
            kind = row.get("result", "").strip().upper().replace(" ", "_")
            key = {"PASS": "pass", "WARN": "warn", "FAIL": "fail"}.get(kind, "not_tested")
            counts[key] += 1
            if key in ("fail", "not_tested", "warn"):
                rows.append(row)
    counts.update(returncode=proc.returncode, stdout=proc.stdout[-2000:], rows=rows)
    return counts


def main(argv: list[str]) -> int:
    kind, out = argv[0], Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    if kind == "protocol":
        # Inside `unshare -n`, loopback starts down.
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    runner = {"interop": run_interop, "service": run_service, "protocol": run_protocol}[kind]
    # The protocol suite checks that Basic auth and sessions need HTTPS: it runs against the
    # lab's HTTPS mode, as a Metal3 deployment with a self-signed certificate would.
    stack = start_lab(out, tls=kind == "protocol")
    try:
        result = runner(stack, out)
    finally:
        stack.stop()
    (out / f"{kind}.json").write_text(json.dumps(result, indent=2))
    print(
        json.dumps(
            {
                k: v
                for k, v in result.items()
                if k in ("pass", "warn", "fail", "not_tested", "returncode")
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
