"""A Redis dataset large enough that a restarted redis-server answers LOADING for seconds."""

from __future__ import annotations

import re
import time
from pathlib import Path

import redis

# About 3 s of loading on a 2-core machine (an RDB-preamble AOF; 500 MB in memory).
KEYS = 3_000_000
BATCH = 2_000
VALUE = b"x" * 100
REWRITE_SECONDS = 120


def fill(url: str, keys: int = KEYS) -> None:
    """Write ``keys`` filler keys (``fill:N``), which no part of fleetfish reads."""
    client = redis.Redis.from_url(url)
    try:
        pipe = client.pipeline(transaction=False)
        for start in range(0, keys, BATCH):
            pairs = [part for n in range(start, start + BATCH) for part in (f"fill:{n}", VALUE)]
            pipe.execute_command("MSET", *pairs)
            if len(pipe) >= 20:
                pipe.execute()
        pipe.execute()
        # Rewritten as one RDB snapshot, which Redis loads answering LOADING to every caller
        # as it goes. Replayed MSET commands of 2000 keys would leave it deaf for seconds.
        # A rewrite Redis started by itself during the fill may predate the last keys.
        deadline = time.monotonic() + REWRITE_SECONDS
        _wait_rewrite(client, deadline)
        client.bgrewriteaof()
        _wait_rewrite(client, deadline)
    finally:
        client.close()


def _wait_rewrite(client: redis.Redis, deadline: float) -> None:
    while time.monotonic() < deadline:
        info = client.info("persistence")
        if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
            return
        time.sleep(0.1)
    raise TimeoutError(f"an AOF rewrite took more than {REWRITE_SECONDS} s")


def last_load_seconds(data_dir: Path) -> float:
    """How long the last start of the redis-server in ``data_dir`` spent loading its data."""
    loads = re.findall(
        r"DB loaded from (?:append only file|disk): ([\d.]+) seconds",
        (Path(data_dir) / "redis.log").read_text(errors="replace"),
    )
    assert loads, "redis-server logged no load"
    return float(loads[-1])


def last_load_window(data_dir: Path) -> tuple[float, float]:
    """(start, end) in epoch seconds of the last load, from redis.log (local time, ms)."""
    loads = re.findall(
        r"(\d+ \w+ \d{4} [\d:]+)\.(\d{3}) \* DB loaded from (?:append only file|disk): "
        r"([\d.]+) seconds",
        (Path(data_dir) / "redis.log").read_text(errors="replace"),
    )
    assert loads, "redis-server logged no load"
    stamp, millis, seconds = loads[-1]
    end = time.mktime(time.strptime(stamp, "%d %b %Y %H:%M:%S")) + int(millis) / 1000
    return end - float(seconds), end
