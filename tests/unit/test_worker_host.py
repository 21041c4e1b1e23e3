"""The worker host's parent: restarts a process that dies, gives up on one that keeps dying,
passes a stop on to every process."""

from __future__ import annotations

import os
import select
import signal

from workers.host import RESTARTS_PER_WINDOW, Host, worker_argv


def test_a_role_that_keeps_dying_stops_the_host_with_a_failure(tmp_path):
    starts = tmp_path / "starts"

    def dies_at_once(name, argv):
        with open(starts, "a") as log:
            log.write(f"{name}\n")
        os._exit(3)

    host = Host({"worker0": worker_argv(0, 1)}, grace=5, run_child=dies_at_once)
    assert host.run() == 1
    assert host.exits == {"worker0": 3}
    # The first start and RESTARTS_PER_WINDOW restarts; the death after those ends it.
    assert starts.read_text().split() == ["worker0"] * (RESTARTS_PER_WINDOW + 1)


def test_a_stop_reaches_every_child_and_the_host_ends_cleanly():
    read_end, write_end = os.pipe()

    def runs_until_terminated(name, argv):
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        os.write(write_end, b"+")
        while True:
            signal.pause()

    host = Host({"worker0": [], "watcher": None}, grace=5, run_child=runs_until_terminated)
    try:
        for name in host.roles:
            host.spawn(name)
        children = set(host.children)
        started = b""
        while len(started) < 2:
            readable, _, _ = select.select([read_end], [], [], 10)
            assert readable, "the children did not start"
            started += os.read(read_end, 2)
        host.stop()
        assert host.wait() == 0
        # Each ended on the stop's SIGTERM, not on the SIGKILL after the grace.
        assert host.exits == {"worker0": 0, "watcher": 0}
        assert host.children == {}
        for pid in children:  # reaped: not even a zombie is left
            try:
                os.kill(pid, 0)
                raise AssertionError(f"child {pid} is still there")
            except ProcessLookupError:
                pass
    finally:
        os.close(read_end)
        os.close(write_end)
        for pid in list(host.children):
            os.kill(pid, signal.SIGKILL)


def test_the_watcher_process_runs_unless_the_workers_run_it_or_it_is_elsewhere():
    from fleetfish.settings import Settings
    from workers.host import host_roles, parse_args

    plain = Settings(redis_url="redis://127.0.0.1:1/0")
    watching = Settings(redis_url="redis://127.0.0.1:1/0", worker_watch=True)
    assert list(host_roles(parse_args(["--workers", "3"]), plain)) == [
        "worker0",
        "worker1",
        "worker2",
        "watcher",
    ]
    assert list(host_roles(parse_args([]), watching)) == ["worker0", "worker1"]
    assert list(host_roles(parse_args(["--no-watcher"]), plain)) == ["worker0", "worker1"]
    assert host_roles(parse_args(["--concurrency", "4"]), plain)["worker1"][:5] == [
        "worker",
        "--pool",
        "threads",
        "--concurrency",
        "4",
    ]
