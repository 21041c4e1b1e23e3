"""The soak's own parts: a task TTL the services would refuse is an argument error, and the
memory report adds each process tree's RSS from its per-process samples."""

from __future__ import annotations

import argparse

import pytest

from tests.reliability.soak import SoakReport, task_ttl_arg, tree_rss


def test_a_task_ttl_the_services_would_refuse_is_an_argument_error():
    # Checked while the arguments are parsed, before any lab starts.
    for refused in ("60", "1", "-5"):
        with pytest.raises(argparse.ArgumentTypeError, match="must be 0 or more than 60 s"):
            task_ttl_arg(refused)
    assert task_ttl_arg("0") == 0  # the services' own TTL
    assert task_ttl_arg("61") == 61


def _sample(t: int, rss: dict[str, float]) -> dict:
    return {"t": t, "rss": rss, "pss": {k: v / 2 for k, v in rss.items()}}


def test_tree_rss_adds_a_parent_and_its_children():
    sample = _sample(0, {"api": 50.0, "api.1": 40.5, "api.2": 41.0, "watcher": 80.0})
    assert tree_rss(sample) == {"api": 131.5, "watcher": 80.0}


def test_rss_growth_counts_from_the_sample_after_warm_up_per_process_tree():
    rep = SoakReport(minutes=1, vms=1)
    rep.memory = [
        _sample(0, {"api": 30.0, "api.1": 20.0, "watcher": 70.0}),
        _sample(60, {"api": 50.0, "api.1": 40.0, "watcher": 80.0}),
        _sample(120, {"api": 50.0, "api.1": 43.0, "watcher": 80.5}),
    ]
    assert rep.rss_growth() == {"api": 3.0, "watcher": 0.5}
