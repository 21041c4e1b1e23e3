"""The benchmark's own measuring parts: percentiles and the throttled image server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import requests

from bench import compare
from bench.idle import format_idle
from bench.sampler import RequestCounter, process_memory
from bench.stats import percentile, summary
from bench.throttle import ThrottledIsoServer
from tests.polling import wait_for


def test_percentile_is_nearest_rank():
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None
    assert summary([1.0, None, 2.0])["count"] == 2


def test_throttled_server_takes_the_set_time_for_a_whole_image():
    with ThrottledIsoServer(seconds=1.0, size_bytes=64 * 1024) as iso:
        started = time.monotonic()
        reply = requests.get(iso.url_for("boot-a"), timeout=10)
        took = time.monotonic() - started
        assert reply.status_code == 200
        assert len(reply.content) == 64 * 1024
        assert 0.9 <= took < 3.0
        assert requests.get(f"{iso.base_url}/other", timeout=5).status_code == 404
        assert iso.downloads == 1


def test_request_counter_reads_action_times_from_the_access_log(tmp_path):
    """Only lines written after start() count; InsertMedia and Reset times come from the
    access line format app/gunicorn_conf.py writes."""
    log = tmp_path / "api.log"
    prefix = "2026-12-03 06:00:00,000 INFO gunicorn.access fleetfish.api access 127.0.0.1 "
    log.write_text(
        prefix
        + '"POST /redfish/v1/Systems/a/Actions/ComputerSystem.Reset HTTP/1.1" 204 0 900ms "x"\n'
    )
    counter = RequestCounter(log, metrics_url="")
    counter.start()
    with open(log, "a") as handle:
        handle.write(prefix + '"GET /redfish/v1/Systems/a HTTP/1.1" 200 1200 1ms "x"\n')
        handle.write(
            prefix + '"POST /redfish/v1/Systems/a/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia'
            ' HTTP/1.1" 202 0 14ms "python-requests/2.32"\n'
        )
        handle.write(
            prefix
            + '"POST /redfish/v1/Systems/a/Actions/ComputerSystem.Reset HTTP/1.1" 204 0 3ms "x"\n'
        )
        handle.write("2026-12-03 06:00:01,000 INFO gunicorn.error Booting worker with pid: 1\n")
    assert counter.stop() == {"requests": 3, "source": "access log"}
    assert counter.server_seconds == {"InsertMedia": [0.014], "Reset": [0.003]}


def test_cpu_account_charges_a_busy_child_and_not_an_idle_one():
    """The CPU table says who used the cores while the Ironic calls ran."""
    import subprocess
    import sys

    import psutil

    from bench.sampler import CpuAccount

    # Spins for 1 s of CPU, then stays alive (idle) so that its total can be read at stop().
    busy_code = (
        "import time\nend = time.process_time() + 1.0\n"
        "while time.process_time() < end: pass\ntime.sleep(30)"
    )
    busy = subprocess.Popen([sys.executable, "-c", busy_code])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        account = CpuAccount({"busy": busy.pid, "idle": idle.pid}, own="me")
        account.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            times = psutil.Process(busy.pid).cpu_times()
            if times.user + times.system >= 1.0:
                break
            time.sleep(0.05)
        used = account.stop()
    finally:
        for proc in (busy, idle):
            proc.kill()
            proc.wait(5)
    assert used["cpu_seconds"]["busy"] >= 0.5
    assert used["cpu_seconds"]["idle"] < 0.2
    assert set(used["cpu_seconds"]) == {"busy", "idle", "me"}
    assert used["wall_seconds"] >= used["cpu_seconds"]["busy"] * 0.9


def test_import_memory_probe_reports_each_import_in_a_fresh_interpreter():
    from bench.imports import measure

    rows = measure(("email.parser", "json"))
    assert [name for name, _ in rows] == ["(interpreter)", "email.parser", "json"]
    assert rows[0][1] > 1  # a bare interpreter is several MiB
    assert all(mib >= 0 for _, mib in rows[1:])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_service_cpus_split_the_api_and_redis_from_everything_else():
    import subprocess
    import sys

    import psutil

    from bench.runs import pin_service

    mine = os.sched_getaffinity(0)
    procs = {
        name: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        for name in ("api", "redis", "kubesim")
    }
    try:
        split = pin_service({name: p.pid for name, p in procs.items()}, 1)
        service, others = set(split["service"]), set(split["others"])
        assert service and others and not service & others
        for name in ("api", "redis"):
            assert set(psutil.Process(procs[name].pid).cpu_affinity()) == service
        assert set(psutil.Process(procs["kubesim"].pid).cpu_affinity()) == others
        assert os.sched_getaffinity(0) == others  # the client runs beside the cluster
    finally:
        os.sched_setaffinity(0, mine)
        for p in procs.values():
            p.kill()
            p.wait(5)


def test_a_negative_media_to_power_on_gap_is_labelled():
    from bench.report import _gap

    assert _gap(-31.05) == "-31050.0 ms (powered on before its media)"
    assert _gap(0.28) == "280.0 ms"
    assert _gap(None) == "n/a"


def test_a_negative_service_cpu_count_is_refused(capsys):
    from bench.fleet import parse_args

    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--out", "x", "--service-cpus", "-1"])
    assert exit_info.value.code == 2
    assert "--service-cpus must be 0" in capsys.readouterr().err


def test_process_memory_labels_a_parent_and_each_child_apart():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        memory = process_memory("bench", os.getpid())
        assert set(memory) >= {"bench", "bench.1"}
        rss, pss = memory["bench.1"]
        assert rss > 1024 * 1024 and 0 < pss <= rss
    finally:
        child.kill()
        child.wait()


def test_compare_summary_pairs_rounds_and_averages_only_complete_ones():
    rounds = [
        {"this": 0.066, "ref": 0.130},
        {"this": None, "ref": 0.200},  # this side's run failed: the round does not count
        {"this": 0.070, "ref": 0.126},
    ]
    assert compare.summary_lines("8dc8dbe", {50: rounds}) == [
        "N=50: this/reference per round 0.066/0.130, -/0.200, 0.070/0.126; "
        "means over 2 rounds 0.068 / 0.128 s per node: -47% against 8dc8dbe"
    ]
    assert compare.summary_lines("x", {200: []}) == ["N=200: this/reference per round none"]


def test_compare_summarizes_runs_already_made_in_both_windows(tmp_path, capsys):
    def run(out: str, whole: float, calls: float, boots: int = 50) -> None:
        (tmp_path / out).mkdir()
        result = {
            "n": 50,
            "cdrom_boots": boots,
            "cpu_whole_run": {"cpu_seconds": {"api": whole * boots}},
            "cpu_during_calls": {"cpu_seconds": {"api": calls * boots}},
        }
        (tmp_path / out / "results.json").write_text(json.dumps({"results": [result]}))

    run("this-n50-r1", 0.06, 0.03)
    run("ref-n50-r1", 0.12, 0.05)
    run("this-n50-r2", 0.08, 0.04, boots=49)  # a node missed its ISO: the round does not count
    run("ref-n50-r2", 0.12, 0.05)
    argv = ["--summarize", "--out", str(tmp_path), "--sizes", "50", "--rounds", "2"]
    assert compare.main(argv) == 1  # one run is not usable
    assert capsys.readouterr().out.splitlines() == [
        "N=50 whole run: this/reference per round 0.060/0.120, -/0.120; "
        "means over 1 rounds 0.060 / 0.120 s per node: -50% against 8dc8dbe",
        "N=50 while the calls ran: this/reference per round 0.030/0.050, -/0.050; "
        "means over 1 rounds 0.030 / 0.050 s per node: -40% against 8dc8dbe",
    ]


def test_idle_report_totals_fleetfish_processes_only():
    line = format_idle(200, {"api": 20.4, "kubesim": 800.0, "watcher": 130.0, "worker0": 99.6})
    assert line == (
        "idle CPU, 200 VMs (ms per minute): api 20, kubesim 800, watcher 130, worker0 100; "
        "fleetfish total 250"
    )


def test_compare_run_that_writes_no_results_counts_as_none_not_an_old_result(tmp_path, monkeypatch):
    out = tmp_path / "this-n50-r1"
    out.mkdir()
    earlier = {"n": 50, "cdrom_boots": 50, "cpu_whole_run": {"cpu_seconds": {"api": 1.0}}}
    (out / "results.json").write_text(json.dumps({"results": [earlier]}))  # an earlier run's
    monkeypatch.setattr(compare, "run_child", lambda *a, **k: None)  # the run wrote nothing
    assert compare.fleet_run(tmp_path, 50, 30.0, out) is None


def test_compare_run_where_a_node_missed_its_iso_counts_as_none(tmp_path, monkeypatch):
    out = tmp_path / "ref-n50-r1"

    def partial_run(*args, **kwargs):
        out.mkdir()
        run = {"n": 50, "cdrom_boots": 49, "cpu_whole_run": {"cpu_seconds": {"api": 1.0}}}
        (out / "results.json").write_text(json.dumps({"results": [run]}))

    monkeypatch.setattr(compare, "run_child", partial_run)
    assert compare.fleet_run(tmp_path, 50, 30.0, out) is None


def test_process_memory_of_a_process_alone_leaves_its_children_out():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert set(process_memory("bench", os.getpid(), children=False)) == {"bench"}
    finally:
        child.kill()
        child.wait()


def _fleet_result(n: int, makespan: float, pss: float, parent: bool) -> dict:
    """One fleetfish run as bench.runs records it, with only what the verdicts read."""
    gap = {"p99": 0.3}
    return {
        "mode": "fleetfish",
        "n": n,
        "workers": 2,
        "import_seconds": 30.0,
        "cdrom_boots": n,
        "makespan_seconds": makespan,
        "latency": {"insert": {"p99": 0.2}, "reset": {"p99": 0.2}, "media_to_power_on": gap},
        "worker_parent": parent,
        "watcher_in_workers": parent,
        "peak_rss": {"peak_total_mib": 2 * pss, "peak_pss_total_mib": pss},
    }


def test_the_pss_and_makespan_targets_of_the_cost_issue_are_judged():
    from bench.report import verdicts

    def judged(results):
        return {t: (v, d) for t, v, d in verdicts(results)}

    over = judged([_fleet_result(200, 38.3, 259.2, False)])
    pss = over["PSS sum of API+workers+watcher <= 250 MiB at N=200"]
    assert pss[0] == "FAIL" and "259.2 MiB PSS" in pss[1] and "on its own" in pss[1]
    assert over["makespan N=200, 2 workers <= 1.25 T"] == ("FAIL", "38.3 s = 1.28 T")

    under = judged([_fleet_result(200, 37.0, 240.0, True), _fleet_result(500, 51.0, 300, True)])
    pss = under["PSS sum of API+workers+watcher <= 250 MiB at N=200"]
    assert pss[0] == "PASS" and "forked from one parent, the watcher in the workers" in pss[1]
    assert under["makespan N=200, 2 workers <= 1.25 T"][0] == "PASS"
    assert under["makespan N=500, 2 workers <= 1.3 T"] == ("FAIL", "51.0 s = 1.70 T")


class _Configured(Exception):
    """Raised by a stand-in LabConfig.for_tests to stop a bench run at its lab's settings."""


def test_a_default_bench_run_asks_the_lab_only_for_what_the_reference_lab_has(
    monkeypatch, tmp_path
):
    # bench.compare runs this bench/ against the reference commit's lab, whose LabConfig has no
    # worker_parent: naming it at all failed every reference run.
    from bench import runs

    def settings_only(var_dir, **settings):
        raise _Configured(settings)

    monkeypatch.setattr(runs.LabConfig, "for_tests", settings_only)
    with pytest.raises(_Configured) as default:
        runs.run_lab_mode(runs.FLEETFISH, 3, 1.0, 2, tmp_path, 60)
    assert "worker_parent" not in default.value.args[0]
    with pytest.raises(_Configured) as parent:
        runs.run_lab_mode(runs.FLEETFISH, 3, 1.0, 2, tmp_path, 60, worker_parent=True)
    assert parent.value.args[0]["worker_parent"] is True


def test_api_memory_bench_prints_the_cpu_verdicts_and_leaves_no_files_behind(tmp_path):
    # Run as anyone would, with its temporary files under a directory this test can look into.
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    command = [sys.executable, "-m", "bench.api_memory", "--cycles", "20", "--every", "20"]
    done = subprocess.run(
        [*command, "--warmup", "5", "--session"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    verdicts = [
        line.split() for line in done.stdout.splitlines() if "PASS" in line or "FAIL" in line
    ]
    assert [words[0] for words in verdicts] == ["InsertMedia", "Reset"]
    assert list(tmp_path.iterdir()) == []


def test_compare_runs_the_reference_with_the_python_it_is_given(tmp_path, monkeypatch):
    started: dict[str, str] = {}

    def record(command, cwd, env):
        started["this" if cwd == compare.REPO else "ref"] = command[0]

    monkeypatch.setattr(compare, "run_child", record)
    monkeypatch.setattr(compare.subprocess, "run", lambda *a, **k: None)  # git worktree remove
    monkeypatch.setattr(compare, "reference_worktree", lambda ref, path: tmp_path / "worktree")
    argv = ["--sizes", "3", "--rounds", "1", "--out", str(tmp_path / "runs")]
    compare.main([*argv, "--ref-python", "/opt/reference-venv/bin/python"])
    assert started == {"this": sys.executable, "ref": "/opt/reference-venv/bin/python"}


def test_compare_stopped_by_sigterm_lets_the_running_benchmark_stop_its_lab(tmp_path):
    # The benchmark stands in as a child that marks when it runs and when SIGTERM reached it.
    child = (
        "import pathlib, signal, sys, time\n"
        "here = pathlib.Path(sys.argv[1])\n"
        "signal.signal(signal.SIGTERM, lambda *_: (here.joinpath('stopped').touch(), sys.exit(0)))\n"
        "here.joinpath('running').touch()\n"
        "time.sleep(60)\n"
    )
    parent = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from bench.compare import run_child\n"
        "from bench.interrupt import stop_on_sigterm\n"
        "stop_on_sigterm()\n"
        "run_child([sys.executable, '-c', sys.argv[1], sys.argv[2]], Path('.'), dict(os.environ))\n"
    )
    compare_like = subprocess.Popen(
        [sys.executable, "-c", parent, child, str(tmp_path)], cwd=compare.REPO
    )
    try:
        wait_for(lambda: (tmp_path / "running").exists(), 30, what="the benchmark started")
        compare_like.send_signal(signal.SIGTERM)
        compare_like.wait(timeout=30)
    finally:
        if compare_like.poll() is None:
            compare_like.kill()
    assert (tmp_path / "stopped").exists()


def test_what_the_benchmarks_import_from_the_lab_exists_in_the_reference_they_are_copied_into():
    """bench.compare runs this checkout's bench/ inside a worktree of the reference commit, on
    that commit's lab/: a bench module importing a lab name the reference lacks breaks every
    reference run ("no usable result")."""
    missing = []
    for module in sorted((compare.REPO / "bench").glob("*.py")):
        for lab_module, names in re.findall(
            r"^from (lab(?:\.\w+)*) import ([^\n(]+)$", module.read_text(), re.MULTILINE
        ):
            path = lab_module.replace(".", "/") + ".py"
            shown = subprocess.run(
                ["git", "show", f"{compare.REFERENCE}:{path}"],
                cwd=compare.REPO, capture_output=True, text=True,
            )  # fmt: skip
            for name in (n.strip() for n in names.split(",")):
                if shown.returncode != 0 or not re.search(
                    rf"^(def|class) {name}\b|^{name}\b\s*[:=]", shown.stdout, re.MULTILINE
                ):
                    missing.append(f"{module.name}: {lab_module}.{name}")
    assert missing == []
