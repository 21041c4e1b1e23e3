"""Short soak in CI: two minutes of Ironic lifecycles (same URL, new bytes, eject and insert
back to back or after a random pause) on six VMs with worker SIGKILLs."""

from __future__ import annotations

import pytest

from tests.reliability.soak import format_report, run_soak

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_short_soak_loses_hangs_and_leaves_nothing_and_boots_only_fresh_bytes(tmp_path):
    rep = run_soak(
        tmp_path / "soak",
        minutes=2,
        vms=6,
        max_kills=4,
        kill_every=20,
        sample_every=15,
        power_on_timeout=30,
    )
    print(format_report(rep))
    assert rep.kills >= 2
    assert (rep.lost, rep.stuck, rep.stale, rep.duplicated, rep.orphans) == (0, 0, 0, 0, 0), (
        rep.errors
    )
    assert rep.cycles_ok >= 12 and rep.boots == rep.cycles_ok
    # The API and the watcher are never killed: their memory must stay flat.
    growth = rep.rss_growth()
    for name in ("api", "watcher"):
        assert growth.get(name, 0) < 40, growth
