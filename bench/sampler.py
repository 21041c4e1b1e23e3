"""Resource accounting of one run: peak RSS of the fleetfish processes, requests, Redis commands."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import psutil
import requests

SAMPLE_SECONDS = 0.5
REQUEST_LINE = re.compile(rb'"(GET|POST|PATCH|PUT|DELETE|HEAD) /')
# app/gunicorn_conf.py's access line: ... "POST /redfish/v1/...InsertMedia HTTP/1.1" 202 0 3ms "ua"
ACTION_LINE = re.compile(
    rb'"POST \S+/Actions/\S+\.(InsertMedia|Reset) HTTP/[\d.]+" \d+ \S+ (\d+)ms'
)


def process_tree(pid: int) -> list[psutil.Process]:
    """A process and all its children (gunicorn's workers); empty when it is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def process_memory(name: str, pid: int, children: bool = True) -> dict[str, tuple[int, int]]:
    """(RSS, PSS) in bytes of each process of a tree, labelled ``name`` for the root and
    ``name.1``, ``name.2``... for its children in PID order (gunicorn's or Celery's workers);
    PSS is 0 where the OS lacks it, and a process gone meanwhile is left out. ``children``
    False: the process alone (Redis, whose only children are the short forks of a save)."""
    tree = process_tree(pid) if children else process_tree(pid)[:1]
    out: dict[str, tuple[int, int]] = {}
    for n, member in enumerate(tree[:1] + sorted(tree[1:], key=lambda p: p.pid)):
        try:
            info = member.memory_full_info()
        except psutil.Error:
            continue
        out[name if n == 0 else f"{name}.{n}"] = (info.rss, getattr(info, "pss", 0))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its children (gunicorn's workers), so far."""
    total = 0.0
    for member in process_tree(pid):
        try:
            times = member.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


class RssSampler:
    """Samples the summed RSS of some PIDs and all their children every ~0.5 s in a thread.

    RSS of forked gunicorn workers counts shared pages in each process, so the RSS sum is an
    upper bound; PSS (shared pages split between their users) is sampled too, as the fair total.
    """

    def __init__(self, pids: dict[str, int], interval: float = SAMPLE_SECONDS):
        self.pids = pids
        self.interval = interval
        self.peak_total = 0
        self.peak_pss_total = 0
        self.peak_by_name: dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _memory_of(name: str, pid: int) -> tuple[int, int]:
        """(RSS, PSS) of a process and all its children."""
        parts = process_memory(name, pid).values()
        return sum(rss for rss, _ in parts), sum(pss for _, pss in parts)

    def sample(self) -> int:
        memory = {name: self._memory_of(name, pid) for name, pid in self.pids.items()}
        by_name = {name: rss for name, (rss, _) in memory.items()}
        total = sum(by_name.values())
        self.samples += 1
        self.peak_total = max(self.peak_total, total)
        self.peak_pss_total = max(self.peak_pss_total, sum(p for _, p in memory.values()))
        for name, rss in by_name.items():
            self.peak_by_name[name] = max(rss, self.peak_by_name.get(name, 0))
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> RssSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sample()

    def as_dict(self) -> dict:
        mib = 1024 * 1024
        return {
            "peak_total_mib": round(self.peak_total / mib, 1),
            "peak_pss_total_mib": round(self.peak_pss_total / mib, 1),
            "peak_by_process_mib": {k: round(v / mib, 1) for k, v in self.peak_by_name.items()},
            "samples": self.samples,
        }


class CpuAccount:
    """CPU seconds each named process (with its children) used between ``start`` and ``stop``.

    ``own`` names this process alone (not its children): in the fleet bench it is the Ironic-like
    client, whose share of the 2 cores explains the latencies it records.
    """

    def __init__(self, pids: dict[str, int], own: str = ""):
        self.pids = pids
        self.own = own
        self._start: dict[str, float] = {}
        self._wall = 0.0

    def _cpu(self) -> dict[str, float]:
        out = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        if self.own:
            times = psutil.Process().cpu_times()
            out[self.own] = times.user + times.system
        return out

    def start(self) -> None:
        self._start = self._cpu()
        self._wall = time.monotonic()

    def stop(self, digits: int = 2) -> dict:
        """{"wall_seconds", "cpu_seconds": {name: s}}, rounded to ``digits``; a process gone
        meanwhile reads 0."""
        wall = time.monotonic() - self._wall
        now = self._cpu()
        used = {
            name: round(max(0.0, now.get(name, 0.0) - t0), digits)
            for name, t0 in self._start.items()
        }
        return {"wall_seconds": round(wall, digits), "cpu_seconds": used}


class RequestCounter:
    """Requests the API handled during a run: gunicorn access-log lines written since ``start``,
    else the API's /metrics counter (which, without a multiprocess dir, sees one worker only)."""

    def __init__(self, log_path: Path, metrics_url: str):
        self.log_path = Path(log_path)
        self.metrics_url = metrics_url
        self._offset = 0
        self._metric0: float | None = None
        # Time inside the API (gunicorn's request time) of each action since start(), in
        # seconds: what the service spent, apart from the accept queue and the client's CPU.
        self.server_seconds: dict[str, list[float]] = {"InsertMedia": [], "Reset": []}

    def _metric(self) -> float | None:
        if not self.metrics_url:
            return None
        try:
            text = requests.get(self.metrics_url, timeout=5).text
        except requests.RequestException:
            return None
        total = None
        for line in text.splitlines():
            if line.startswith("fleetfish_api_requests_total{"):
                total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
        return total

    def start(self) -> None:
        self.server_seconds = {"InsertMedia": [], "Reset": []}
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._metric0 = self._metric()

    def stop(self) -> dict:
        lines = 0
        if self.log_path.exists():
            with open(self.log_path, "rb") as handle:
                handle.seek(self._offset)
                for line in handle:
                    if REQUEST_LINE.search(line):
                        lines += 1
                    action = ACTION_LINE.search(line)
                    if action:
                        name = action.group(1).decode()
                        self.server_seconds[name].append(int(action.group(2)) / 1000)
        if lines:
            return {"requests": lines, "source": "access log"}
        metric = self._metric()
        if metric is not None and self._metric0 is not None:
            return {"requests": int(metric - self._metric0), "source": "/metrics (one worker)"}
        return {"requests": None, "source": "unavailable"}


class RedisOps:
    """Commands Redis processed during a run (``INFO stats`` delta; includes the bench's own few),
    and per command (``INFO commandstats`` delta) in ``by_command`` after ``stop``."""

    def __init__(self, url: str):
        import redis

        self.client = redis.Redis.from_url(url)
        self._start = 0
        self._calls0: dict[str, int] = {}
        self.by_command: dict[str, int] = {}

    def _total(self) -> int:
        return int(self.client.info("stats")["total_commands_processed"])

    def _calls(self) -> dict[str, int]:
        stats = self.client.info("commandstats")
        return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}

    def start(self) -> None:
        self._start = self._total()
        self._calls0 = self._calls()

    def stop(self) -> int:
        try:
            calls = self._calls()
            delta = {k: n - self._calls0.get(k, 0) for k, n in calls.items()}
            self.by_command = dict(
                sorted(((k, n) for k, n in delta.items() if n), key=lambda x: -x[1])
            )
            return self._total() - self._start
        finally:
            self.client.close()
