"""The soak's own parts: a task TTL the services would refuse is an argument error, and the
memory report adds each process tree's RSS from its per-process samples."""

from __future__ import annotations

import pytest

from tests.reliability.soak import SoakReport, main, tree_rss


def test_a_task_ttl_the_services_would_refuse_is_an_argument_error(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--task-ttl", "60", "--minutes", "0.1"])
    assert stopped.value.code == 2  # argparse's usage error, before any lab starts
    assert "--task-ttl: must be 0 or more than 60 s" in capsys.readouterr().err


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
