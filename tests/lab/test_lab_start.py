"""`python -m lab` starts every time or says in one line why not, and leaves nothing behind.

Each lab here is small (1 VM, 1 worker, 1 API process) and started as `make lab` starts it: a
process of its own, stopped with SIGINT to its process group, as a terminal's Ctrl-C does.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import redis
import requests

from lab.ports import free_port
from lab.redis_embedded import EmbeddedRedis
from lab.stack import REPO, LabConfig, LabStack, write_kubeconfig
from tests import redis_dataset
from tests.polling import wait_for

pytestmark = pytest.mark.slow

START_SECONDS = 90
STOP_SECONDS = 40
ROLES = ("redis-server", "gunicorn", "celery", "workers.watcher", "lab.kubesim", "lab.isoserver")
PORT_SETTINGS = ("FLEETFISH_PORT", "LAB_REDIS_PORT", "LAB_KUBE_PORT", "LAB_ISO_PORT")


def lab_env(var_dir: Path, ports: dict[str, int] | None = None) -> dict[str, str]:
    ports = ports or {name: free_port() for name in (*PORT_SETTINGS, "LAB_FLOWER_PORT")}
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "KUBECONFIG")}
    env.update({name: str(port) for name, port in ports.items()})
    env.update(
        LAB_VAR_DIR=str(var_dir),
        LAB_VMS="1",
        LAB_WORKERS="1",
        LAB_WORKER_CONCURRENCY="2",
        LAB_API_WORKERS="1",
        LAB_IMPORT_SECONDS="1",
    )
    return env


class Lab:
    """One `python -m lab` process; its output goes to files under ``out``."""

    def __init__(self, env: dict[str, str], out: Path):
        out.mkdir(parents=True, exist_ok=True)
        self.env = env
        self.seen: list[psutil.Process] = []  # everything it ran, for the teardown
        self.stdout = out / "stdout"
        self.stderr = out / "stderr"
        with open(self.stdout, "w") as stdout, open(self.stderr, "w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lab"],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )

    @property
    def ports(self) -> list[int]:
        return [int(self.env[name]) for name in (*PORT_SETTINGS, "LAB_FLOWER_PORT")]

    def output(self) -> str:
        return self.stdout.read_text() + self.stderr.read_text()

    def wait_ready(self) -> str:
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"the lab exited with {self.proc.returncode}:\n{self.output()}"
                )
            return "fleetfish lab ready" in self.stdout.read_text()

        wait_for(ready, START_SECONDS, what="the lab's ready line")
        self.children()
        return self.stdout.read_text()

    def children(self) -> dict[str, psutil.Process]:
        """Every process the lab runs, named by what it is (its command line)."""
        found = {}
        for proc in psutil.Process(self.proc.pid).children(recursive=True):
            cmdline = " ".join(proc.cmdline())
            name = next((n for n in ROLES if n in cmdline), cmdline)
            found[f"{name} {proc.pid}"] = proc
        self.seen += found.values()
        return found

    def interrupt(self) -> int:
        """Ctrl-C in the terminal: SIGINT to the lab's process group."""
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(STOP_SECONDS)

    def kill(self) -> None:
        """Teardown: the lab and whatever it started, even if a failed test left them running."""
        if self.proc.poll() is None:
            self.children()  # what it runs now: its own sessions, killed one by one below
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(STOP_SECONDS)
        for proc in self.seen:
            try:
                proc.kill()  # psutil checks it is still the same process
            except psutil.Error:
                pass


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def gone(procs) -> bool:
    return not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)


def assert_nothing_left(lab: Lab, procs: dict[str, psutil.Process]) -> None:
    wait_for(lambda: gone(procs.values()), 10, what="every process of the lab to exit")
    assert [port for port in lab.ports if listening(port)] == []


@pytest.fixture
def labs():
    started: list[Lab] = []
    yield started
    for lab in started:
        lab.kill()


def test_ctrl_c_stops_everything_and_the_next_start_works(tmp_path, labs):
    env = lab_env(tmp_path / "var")
    for run in range(2):
        lab = Lab(env, tmp_path / f"run{run}")
        labs.append(lab)
        line = lab.wait_ready()
        assert f"redfish=http://127.0.0.1:{env['FLEETFISH_PORT']}/redfish/v1/" in line
        procs = lab.children()
        roles = {name.split()[0] for name in procs}
        assert set(ROLES) <= roles, sorted(procs)  # celery: the worker and Flower
        assert lab.interrupt() == 0, lab.output()
        assert_nothing_left(lab, procs)


def test_after_kill_9_the_next_start_stops_the_orphans_of_the_previous_lab(tmp_path, labs):
    env = lab_env(tmp_path / "var")
    first = Lab(env, tmp_path / "first")
    labs.append(first)
    first.wait_ready()
    orphans = first.children()
    os.kill(first.proc.pid, signal.SIGKILL)  # the lab only: its children keep running
    first.proc.wait(STOP_SECONDS)
    assert not gone(orphans.values())
    assert listening(int(env["LAB_REDIS_PORT"]))

    second = Lab(env, tmp_path / "second")
    labs.append(second)
    second.wait_ready()
    assert gone(orphans.values())
    assert "stopping what a previous lab" in second.output()
    # The new lab serves with its own processes (the old ones are gone, so these answer).
    user, password = "admin", json.loads((tmp_path / "var" / "credentials.json").read_text())
    reply = requests.get(
        f"http://127.0.0.1:{env['FLEETFISH_PORT']}/redfish/v1/Systems",
        auth=(user, password["password"]),
        timeout=5,
    )
    assert reply.status_code == 200 and reply.json()["Members@odata.count"] == 1
    procs = second.children()
    assert second.interrupt() == 0, second.output()
    assert_nothing_left(second, procs)


def test_a_second_lab_is_refused_while_one_runs_and_disturbs_nothing(tmp_path, labs):
    env = lab_env(tmp_path / "var")
    first = Lab(env, tmp_path / "first")
    labs.append(first)
    first.wait_ready()
    procs = first.children()

    # Same settings, another var dir: the ports are taken; the first one checked is named.
    other = Lab({**env, "LAB_VAR_DIR": str(tmp_path / "other")}, tmp_path / "other-out")
    assert other.proc.wait(START_SECONDS) == 1
    errors = [line for line in other.stderr.read_text().splitlines() if "did not start" in line]
    assert len(errors) == 1, other.output()
    assert (
        f"port {env['FLEETFISH_PORT']} is already in use (FLEETFISH_PORT={env['FLEETFISH_PORT']})"
        in errors[0]
    )
    assert "Traceback" not in other.output()

    # Same var dir, free ports: refused too, naming the running lab.
    again = Lab(lab_env(tmp_path / "var"), tmp_path / "again-out")
    assert again.proc.wait(START_SECONDS) == 1
    assert f"another lab (pid {first.proc.pid}) runs with" in again.stderr.read_text()

    # The first lab lost nothing: same processes, still serving.
    assert not gone(procs.values()) and first.proc.poll() is None
    assert listening(int(env["FLEETFISH_PORT"])) and listening(int(env["LAB_REDIS_PORT"]))
    assert first.interrupt() == 0
    assert_nothing_left(first, procs)


@pytest.mark.parametrize("setting", ["LAB_REDIS_PORT", "FLEETFISH_PORT", "LAB_ISO_PORT"])
def test_a_port_taken_by_another_program_is_refused_and_left_alone(tmp_path, setting):
    config = LabConfig.for_tests(tmp_path / "var", vms=1, workers=1, flower=False)
    field = {
        "LAB_REDIS_PORT": "redis_port",
        "FLEETFISH_PORT": "api_port",
        "LAB_ISO_PORT": "iso_port",
    }[setting]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        setattr(config, field, port)
        stack = LabStack(config)
        with pytest.raises(RuntimeError) as refused:
            stack.start(timeout=30)
        assert str(refused.value) == (
            f"port {port} is already in use ({setting}={port}): stop what listens there "
            f"or set {setting} to a free port"
        )
        # Nothing was started, and the other program still has its port.
        assert stack.procs == {} and stack.redis is None
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass


def test_a_lab_whose_redis_loads_for_seconds_starts(tmp_path):
    """A lab used for days has a large AOF: Redis answers LOADING at first, and that is waited
    for instead of ending the start."""
    config = LabConfig.for_tests(tmp_path / "var", vms=1, workers=1, api_workers=1, flower=False)
    redis_dir = config.var_dir / "redis"
    server = EmbeddedRedis(redis_dir, config.redis_port).start()
    try:
        redis_dataset.fill(server.url)
    finally:
        server.stop()
    stack = LabStack(config)
    try:
        stack.start(timeout=START_SECONDS)
        assert redis_dataset.last_load_seconds(redis_dir) >= 0.5  # it did answer LOADING
        client = redis.Redis.from_url(stack.redis_url)
        assert client.dbsize() > redis_dataset.KEYS  # the data, and the lab's own keys
        client.close()
    finally:
        stack.stop()
    assert not listening(config.redis_port)


def test_redis_of_a_lab_given_a_relative_state_directory_starts(tmp_path, monkeypatch):
    """``--var-dir var/x`` from a shell: Redis changes into its data directory before it opens
    its log, so a relative path must not reach it as such."""
    monkeypatch.chdir(tmp_path)
    server = EmbeddedRedis(Path("var") / "redis", free_port()).start(timeout=30)
    try:
        assert redis.Redis.from_url(server.url).ping()
    finally:
        server.stop()
    assert (tmp_path / "var" / "redis" / "redis.log").stat().st_size > 0


def test_with_a_kubeconfig_the_lab_still_serves_its_iso_server(tmp_path, sim):
    """KUBECONFIG selects a cluster (here the simulator, started apart as a cluster would be):
    the lab starts no simulator of its own, but its ISO server serves images all the same."""
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", sim.url)
    config = LabConfig.for_tests(
        tmp_path / "var", vms=1, workers=1, api_workers=1, flower=False, kubeconfig=str(kubeconfig)
    )
    stack = LabStack(config)
    try:
        stack.start(timeout=START_SECONDS)
        assert "kubesim" not in stack.procs
        assert f"iso={stack.iso_url}/images/lab-boot.iso" in stack.ready_line()
        reply = requests.head(f"{stack.iso_url}/images/any.iso", timeout=5)
        assert reply.status_code == 200 and int(reply.headers["Content-Length"]) > 0
    finally:
        stack.stop()
    assert not listening(config.iso_port)


def test_a_lab_killed_while_redis_loads_leaves_nothing_the_next_start_trips_on(tmp_path, labs):
    env = lab_env(tmp_path / "var")
    server = EmbeddedRedis(tmp_path / "var" / "redis", int(env["LAB_REDIS_PORT"])).start()
    try:
        redis_dataset.fill(server.url)
    finally:
        server.stop()
    first = Lab(env, tmp_path / "first")
    labs.append(first)
    wait_for(lambda: "loading its dataset" in first.output(), START_SECONDS, what="Redis loading")
    orphans = first.children()
    first.seen += orphans.values()
    assert any(name.startswith("redis-server") for name in orphans), sorted(orphans)
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait(STOP_SECONDS)

    second = Lab(env, tmp_path / "second")
    labs.append(second)
    second.wait_ready()
    assert gone(orphans.values())
    procs = second.children()
    assert second.interrupt() == 0, second.output()
    assert_nothing_left(second, procs)


def test_a_started_lab_used_as_a_context_manager_is_not_started_twice(tmp_path):
    """``with LabStack(config).start() as stack`` is the natural spelling: entering must not
    start a second lab over the first (which then refused itself and left the first running)."""
    config = LabConfig.for_tests(tmp_path / "var", vms=1, workers=1, api_workers=1, flower=False)
    with LabStack(config).start(timeout=90) as stack:
        pids = [proc.pid for proc in stack.procs.values()]
        assert stack.exited() == {}
    assert not [pid for pid in pids if psutil.pid_exists(pid)]
