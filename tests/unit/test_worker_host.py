"""The worker host's parent: restarts a process that dies, gives up on one that keeps dying,
passes a stop on to every process."""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.helpers import process_gone
from tests.polling import wait_for
from workers.host import RESTARTS_PER_WINDOW, Host, worker_argv

REPO = Path(__file__).resolve().parents[2]


def test_a_role_that_keeps_dying_stops_the_host_with_a_failure(tmp_path):
    starts = tmp_path / "starts"

    def dies_at_once(name, argv):
        with open(starts, "a") as log:
            log.write(f"{name}\n")
        os._exit(3)

    host = Host({"worker0": worker_argv(0, 1)}, grace=5, run_child=dies_at_once, backoff=(0.0,))
    assert host.run() == 1
    assert host.exits == {"worker0": 3}
    # The first start and RESTARTS_PER_WINDOW restarts; the death after those ends it.
    assert starts.read_text().split() == ["worker0"] * (RESTARTS_PER_WINDOW + 1)


def test_a_stop_reaches_every_child_and_the_host_ends_cleanly():
    with _ready_pipe() as (read_end, write_end):
        host = Host(
            {"worker0": [], "watcher": None}, grace=5, run_child=_until_terminated(write_end)
        )
        with _killing_leftovers(host):
            for name in host.roles:
                host.spawn(name)
            children = set(host.children)
            _await_ready(read_end, 2)
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


@contextlib.contextmanager
def _ready_pipe():
    """A pipe on which children report themselves started (``_await_ready`` reads it)."""
    read_end, write_end = os.pipe()
    try:
        yield read_end, write_end
    finally:
        os.close(read_end)
        os.close(write_end)


@contextlib.contextmanager
def _killing_leftovers(host: Host):
    """Whatever the test asserted, no child of ``host`` outlives it."""
    try:
        yield host
    finally:
        for pid in list(host.children):
            os.kill(pid, signal.SIGKILL)


def _until_terminated(write_end: int):
    """A child that reports itself ready, exits 0 on SIGTERM and 2 on SIGINT."""

    def run(name, argv):
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        signal.signal(signal.SIGINT, lambda *_: os._exit(2))
        os.write(write_end, b"+")
        while True:
            signal.pause()

    return run


def _await_ready(read_end: int, count: int) -> None:
    started = b""
    while len(started) < count:
        readable, _, _ = select.select([read_end], [], [], 10)
        assert readable, "the children did not start"
        started += os.read(read_end, count)


def test_an_interrupt_reaches_the_children_as_a_warm_stop():
    with _ready_pipe() as (read_end, write_end):
        host = Host({"worker0": []}, grace=5, run_child=_until_terminated(write_end))
        with _killing_leftovers(host):
            host.spawn("worker0")
            _await_ready(read_end, 1)
            host.stop(signal.SIGINT)  # Ctrl-C: Celery takes a second SIGINT as a cold shutdown
            assert host.wait() == 0
            assert host.exits == {"worker0": 0}


def test_no_process_starts_once_a_stop_has_begun():
    host = Host({"worker0": []}, grace=5, run_child=lambda name, argv: os._exit(0))
    host.stopping = True
    assert host.spawn("worker0") is None
    assert host.children == {}


def test_a_runner_that_raises_ends_its_child_instead_of_running_the_parent_loop():
    def raises(name, argv):
        raise RuntimeError("broken runner")

    host = Host({"worker0": []}, grace=5, run_child=raises)
    pid = host.spawn("worker0")
    _, status = os.waitpid(pid, 0)
    host.children.clear()
    assert os.waitstatus_to_exitcode(status) == 1


def test_restarts_of_a_role_that_keeps_dying_wait_longer_each_time(tmp_path):
    starts = tmp_path / "starts"

    def dies_at_once(name, argv):
        with open(starts, "a") as log:
            log.write(f"{time.monotonic()}\n")
        os._exit(3)

    host = Host({"worker0": []}, grace=5, run_child=dies_at_once, backoff=(0.0, 0.2, 0.4))
    assert host.run() == 1
    times = [float(line) for line in starts.read_text().split()]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert len(times) == RESTARTS_PER_WINDOW + 1
    # First restart at once, then the backoff's steps, its last step repeated.
    assert gaps[1] >= 0.2 and gaps[2] >= 0.4 and gaps[3] >= 0.4, gaps


def test_a_stop_that_had_to_kill_a_process_ends_the_host_with_a_failure():
    with _ready_pipe() as (read_end, write_end):

        def ignores_sigterm(name, argv):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.write(write_end, b"+")
            while True:
                signal.pause()

        host = Host({"worker0": []}, grace=0.3, run_child=ignores_sigterm)
        with _killing_leftovers(host):
            host.spawn("worker0")
            _await_ready(read_end, 1)
            host.stop()
            assert host.wait() == 1
            assert host.exits == {"worker0": -signal.SIGKILL}


def test_a_failed_fork_is_a_failed_start_retried_after_the_backoff(monkeypatch):
    real_fork, forks = os.fork, []

    def fork_fails_once():
        forks.append(1)
        if len(forks) == 1:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return real_fork()

    monkeypatch.setattr(os, "fork", fork_fails_once)
    with _ready_pipe() as (read_end, write_end):
        host = Host(
            {"worker0": []}, grace=5, run_child=_until_terminated(write_end), backoff=(0.1,)
        )
        with _killing_leftovers(host):
            assert host.spawn("worker0") is None
            assert list(host.restarts) == ["worker0"] and len(host.deaths["worker0"]) == 1
            wait_for(lambda: host._start_due() is None and host.children, 5, "the retried start")
            _await_ready(read_end, 1)
            host.stop()
            assert host.wait() == 0
            assert host.exits == {"worker0": 0}


def test_the_children_end_when_the_parent_is_killed(tmp_path):
    pids = tmp_path / "pids"
    script = textwrap.dedent(
        f"""
        import os, signal
        from workers.host import Host

        def run(name, argv):
            with open({str(pids)!r}, "a") as out:
                out.write(f"{{os.getpid()}}\\n")
            while True:
                signal.pause()

        Host({{"worker0": [], "watcher": None}}, grace=5, run_child=run).run()
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO)
    try:
        children = wait_for(
            lambda: pids.exists() and len(pids.read_text().split()) == 2 and pids.read_text(),
            20,
            "both children",
        )
        parent.kill()
        parent.wait(10)
        for pid in map(int, children.split()):
            wait_for(lambda pid=pid: process_gone(pid), 10, f"child {pid} to end with its parent")
    finally:
        if parent.poll() is None:
            parent.kill()
        for pid in map(int, pids.read_text().split()) if pids.exists() else ():
            if not process_gone(pid):
                os.kill(pid, signal.SIGKILL)
