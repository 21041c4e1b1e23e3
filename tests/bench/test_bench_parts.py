"""The benchmark's own measuring parts: percentiles and the throttled image server."""

from __future__ import annotations

import time

import requests

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
