"""The /lab endpoints (faults, request log), the two CLIs, and the ISO server's content."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from kubernetes.client.rest import ApiException

from lab.isoserver import content_sha256
from lab.ports import free_port
from tests.lab.kube import wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_faults_fail_the_next_matching_requests_then_stop(k8s, sim):
    fault = {
        "method": "PUT",
        "path_regex": "/virtualmachines/ostest-master-0/start$",
        "status": 500,
        "count": 1,
    }
    assert requests.post(f"{sim.url}/lab/faults", json=fault, timeout=5).status_code == 201
    code, body = k8s.sub_status("virtualmachines", "ostest-master-0", "start")
    assert (code, body["kind"], body["reason"]) == (500, "Status", "InternalError")
    assert k8s.sub_status("virtualmachines", "ostest-master-0", "start")[0] == 202

    requests.post(
        f"{sim.url}/lab/faults",
        json={"method": "*", "path_regex": "datavolumes", "status": 503, "count": 5},
        timeout=5,
    )
    assert requests.delete(f"{sim.url}/lab/faults", timeout=5).status_code == 200
    assert k8s.custom.list_namespaced_custom_object(
        "cdi.kubevirt.io", "v1beta1", "fleetfish-lab", "datavolumes"
    )

    requests.post(
        f"{sim.url}/lab/faults",
        json={"method": "GET", "path_regex": "ostest-master-1$", "delay_seconds": 0.5, "count": 1},
        timeout=5,
    )
    started = time.monotonic()
    k8s.vm("ostest-master-1")
    assert time.monotonic() - started >= 0.5


def test_request_log_shows_what_a_client_called(k8s, sim):
    since = time.time()
    with pytest.raises(ApiException):
        k8s.vm("absent")
    k8s.sub("virtualmachines", "ostest-master-2", "start")
    log = requests.get(f"{sim.url}/lab/requests", params={"since": since}, timeout=5).json()[
        "requests"
    ]
    calls = [
        (r["method"], r["path"], r["status"])
        for r in log
        if not r["path"].startswith("/api") or "virtualmachines" in r["path"]
    ]
    assert (
        "GET",
        "/apis/kubevirt.io/v1/namespaces/fleetfish-lab/virtualmachines/absent",
        404,
    ) in calls
    assert (
        "PUT",
        "/apis/subresources.kubevirt.io/v1/namespaces/fleetfish-lab/virtualmachines/ostest-master-2/start",
        202,
    ) in calls


def _counts(sim) -> dict[tuple[str, str], int]:
    rows = requests.get(f"{sim.url}/lab/requests/counts", timeout=5).json()["counts"]
    found: dict[tuple[str, str], int] = {}
    for row in rows:
        key = (row["verb"], row["resource"])
        found[key] = found.get(key, 0) + row["count"]
    return found


def test_request_counts_name_each_verb_and_resource_a_client_used(k8s, sim):
    before = _counts(sim)
    k8s.vm("ostest-master-0")
    k8s.vm("ostest-master-0")
    k8s.custom.list_namespaced_custom_object(
        "cdi.kubevirt.io", "v1beta1", "fleetfish-lab", "datavolumes"
    )
    vm = k8s.vm("ostest-master-1")
    k8s.custom.replace_namespaced_custom_object(
        "kubevirt.io", "v1", "fleetfish-lab", "virtualmachines", "ostest-master-1", vm
    )
    assert k8s.sub_status("virtualmachines", "ostest-master-1", "start")[0] == 202
    with pytest.raises(ApiException):
        k8s.vm("absent")
    requests.get(f"{sim.url}/lab/boots", timeout=5)  # the lab's own paths are not the API's
    after = _counts(sim)
    delta = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert delta == {
        ("get", "virtualmachines"): 4,
        ("list", "datavolumes"): 1,
        ("update", "virtualmachines"): 1,
        ("update", "virtualmachines/start"): 1,
    }
    # The client that called is named, so a benchmark can leave its own observers out.
    rows = requests.get(f"{sim.url}/lab/requests/counts", timeout=5).json()
    assert all(row["agent"].startswith("OpenAPI-Generator") for row in rows["counts"])
    assert rows["total"] == sum(after.values())


def _spawn(args: list[str], ready_prefix: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    line = proc.stdout.readline().strip()
    assert line.startswith(ready_prefix), line
    return proc, line.split(": ", 1)[1]


def _terminate(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_simulator_cli_serves_and_stops_on_sigterm():
    port = free_port()
    proc, url = _spawn(
        [
            "lab.kubesim",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--vms",
            "5",
            "--namespace",
            "fleetfish-lab",
            "--import-seconds",
            "1",
            "--iso-base",
            "http://x",
        ],
        "kubesim ready:",
    )
    try:
        assert url == f"http://127.0.0.1:{port}"
        assert requests.get(f"{url}/lab/healthz", timeout=5).json()["status"] == "ok"
        status = requests.get(f"{url}/lab/status", timeout=5).json()
        assert status["iso_base"] == "http://x" and len(status["vms"]) == 5
        assert "ostest-worker-1" in status["vms"]
    finally:
        assert _terminate(proc) == 0


def test_the_iso_server_cli_and_its_content():
    proc, url = _spawn(
        ["lab.isoserver", "--bind", "127.0.0.1", "--port", str(free_port()), "--size-mib", "1"],
        "isoserver ready:",
    )
    try:
        head = requests.head(f"{url}/images/a.iso", timeout=5)
        assert head.status_code == 200 and head.headers["Content-Length"] == str(1024 * 1024)
        first = requests.get(f"{url}/images/a.iso", timeout=5).content
        assert len(first) == 1024 * 1024 and first[0x8001:0x8006] == b"CD001"
        assert requests.get(f"{url}/images/a.iso", timeout=5).content == first
        assert hashlib.sha256(first).hexdigest() == content_sha256("/images/a.iso", 1024 * 1024)
        assert requests.get(f"{url}/images/b.iso", timeout=5).content != first
        assert requests.get(f"{url}/missing/a.iso", timeout=5).status_code == 404
        assert requests.get(f"{url}/notaniso.txt", timeout=5).status_code == 404
    finally:
        assert _terminate(proc) == 0


def test_discovery_serves_the_dynamic_client(k8s):
    vms = k8s.dynamic.resources.get(api_version="kubevirt.io/v1", kind="VirtualMachine")
    names = [i.metadata.name for i in vms.get(namespace="fleetfish-lab").items]
    assert names[0] == "ostest-master-0"
    assert k8s.dynamic.resources.get(
        api_version="cdi.kubevirt.io/v1beta1", kind="DataVolume"
    ).namespaced
    wait_until(lambda: k8s.dynamic.version["kubernetes"]["major"] == "1", what="version")
