"""A Redis dataset large enough that a restarted redis-server answers LOADING for seconds."""

from __future__ import annotations

import re
from pathlib import Path

import redis

# About 2 s of AOF loading on a 2-core machine (155 MB on disk, 340 MB in memory).
KEYS = 2_000_000
BATCH = 2_000
VALUE = b"x" * 100


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
    finally:
        client.close()


def last_load_seconds(data_dir: Path) -> float:
    """How long the last start of the redis-server in ``data_dir`` spent loading its data."""
    loads = re.findall(
        r"DB loaded from (?:append only file|disk): ([\d.]+) seconds",
        (Path(data_dir) / "redis.log").read_text(errors="replace"),
    )
    assert loads, "redis-server logged no load"
    return float(loads[-1])
