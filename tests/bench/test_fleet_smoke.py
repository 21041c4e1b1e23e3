"""The fleet benchmark runs end to end at N=2 with a short import and writes all its outputs."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys

import pytest

from bench import fleet
from tests.helpers import process_gone
from tests.polling import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_fleet_benchmark_writes_json_markdown_and_figures(tmp_path):
    out = tmp_path / "out"
    fleet.main(
        [
            "--sizes",
            "2",
            "--import-seconds",
            "3",
            "--modes",
            "fleetfish,sushy-tools",
            "--max-wait",
            "40",
            "--out",
            str(out),
            "--work-dir",
            str(tmp_path / "work"),
        ]
    )

    document = json.loads((out / "results.json").read_text())
    runs = {r["mode"]: r for r in document["results"]}
    assert set(runs) == {"fleetfish", "sushy-tools"}
    for run in runs.values():
        assert run["n"] == 2 and len(run["nodes"]) == 2
        for node in run["nodes"]:
            # Every Ironic call of every node was made and timed.
            assert node["insert_requested"] is not None and node["insert_answered"] is not None
            assert node["reset_requested"] is not None and node["reset_answered"] is not None
    # sushy-tools downloads the image inside InsertMedia: its insert takes the 3 s of the server.
    assert runs["sushy-tools"]["latency"]["insert"]["p50"] >= 2.5
    assert runs["fleetfish"]["peak_rss"]["peak_total_mib"] > 0
    assert runs["fleetfish"]["requests"]["requests"] > 0
    assert runs["fleetfish"]["redis_ops"] > 0
    assert document["verdicts"], "targets were evaluated"
    # Who used the CPU while the calls ran, and (where tcpdump can capture) the answer times
    # as the API's port saw them: one per node and action.
    assert runs["fleetfish"]["cpu_during_calls"]["cpu_seconds"]["api"] > 0
    wire = runs["fleetfish"]["on_the_wire"]
    if shutil.which("tcpdump") and "unavailable" not in wire:
        assert wire["InsertMedia"]["count"] == 2 and wire["Reset"]["count"] == 2
    else:
        assert wire.get("unavailable")

    markdown = (out / "results.md").read_text()
    assert "| fleetfish | 2 |" in markdown and "| sushy-tools | 2 |" in markdown
    assert "## CPU while the Ironic calls ran" in markdown
    for png in ("timeline-fleetfish-n2.png", "timeline-sushy-tools-n2.png", "makespan.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


def test_a_fleet_run_stopped_by_sigterm_stops_the_lab_it_started(tmp_path):
    # A timeout or a cancelled job ends a benchmark with SIGTERM: nothing of its lab may be left.
    log_path = tmp_path / "fleet.log"
    command = [sys.executable, "-m", "bench.fleet", "--sizes", "3", "--import-seconds", "30"]
    with open(log_path, "wb") as log:
        bench = subprocess.Popen(
            [*command, "--out", str(tmp_path / "out"), "--work-dir", str(tmp_path / "work")],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: "started api (pid" in log_path.read_text(), 120, what="the lab's API")
        started = [
            int(pid) for pid in re.findall(r"started \S+ \(pid (\d+)\)", log_path.read_text())
        ]
        # The embedded Redis is not in the log: the lab's pid file lists it with the rest.
        [pid_file] = (tmp_path / "work").rglob("lab.pids")
        children = json.loads(pid_file.read_text())["children"]
        assert "redis" in children, children
        started += [pid for pid, _start_time in children.values()]
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=60) != 0
    finally:
        if bench.poll() is None:
            bench.kill()
    assert started and [pid for pid in started if not process_gone(pid)] == []
