"""The benchmark's own measuring parts: percentiles and the throttled image server."""

from __future__ import annotations

import time

import requests

from bench.sampler import RequestCounter
from bench.stats import percentile, summary
from bench.throttle import ThrottledIsoServer


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
