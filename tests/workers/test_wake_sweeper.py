"""Parked imports' looks in Redis: the workers' sweep sends each one once it falls due, keeps
it when its send fails, and never drops a newer look registered meanwhile."""

from __future__ import annotations

import logging
import time

from workers.dvmirror import RESEND_SECONDS, DvMirror
from workers.wake_sweeper import WakeSweeper

NS = "fleetfish-lab"
PROGRESS = {"system_id": f"{NS}.vm-0", "device": "Cd", "gen": "1", "task_id": "t", "image": "i"}


class Sender:
    def __init__(self, fail: bool = False, during=None):
        self.sent: list[str] = []
        self.fail = fail
        self.during = during

    def __call__(self, look: str) -> None:
        if self.during:
            self.during()
        if self.fail:
            raise ConnectionError("broker away")
        self.sent.append(look)


def park(mirror: DvMirror, name: str, look: str, due_at: float) -> None:
    mirror.register_wake(NS, name, look, PROGRESS, due_at=due_at, ttl=3600)


def test_a_look_is_sent_once_when_it_falls_due(store, caplog):
    caplog.set_level(logging.INFO, logger="fleetfish.worker")
    mirror = DvMirror(store.r)
    now = time.time()
    park(mirror, "dv-a", '{"look": "a"}', now + 30)
    park(mirror, "dv-b", '{"look": "b"}', now - 1)
    send = Sender()
    sweeper = WakeSweeper(mirror, send)
    assert sweeper.sweep(now) == 1
    assert send.sent == ['{"look": "b"}']
    assert mirror.wake_payload(NS, "dv-b") is None
    # The log line names the system whose import looks now.
    assert f"system={PROGRESS['system_id']}" in caplog.text
    # Nothing more until the other falls due, then it goes too.
    assert sweeper.sweep(now + 1) == 0
    assert sweeper.sweep(now + 31) == 1
    assert send.sent[-1] == '{"look": "a"}'
    assert sweeper.sweep(now + 3600) == 0


def test_a_look_whose_send_failed_is_due_again(store):
    mirror = DvMirror(store.r)
    now = time.time()
    park(mirror, "dv-a", '{"look": "a"}', now - 1)
    assert WakeSweeper(mirror, Sender(fail=True)).sweep(now) == 0
    assert mirror.wake_payload(NS, "dv-a") == '{"look": "a"}'
    send = Sender()
    assert WakeSweeper(mirror, send).sweep(now + 1) == 0  # another sweeper is sending it
    assert WakeSweeper(mirror, send).sweep(now + RESEND_SECONDS + 1) == 1
    assert send.sent == ['{"look": "a"}']


def test_a_newer_look_registered_during_the_send_stays_parked(store):
    mirror = DvMirror(store.r)
    now = time.time()
    park(mirror, "dv-a", '{"look": 1}', now - 1)
    # The sent look runs at once and parks the import again before the sweep forgets it.
    send = Sender(during=lambda: park(mirror, "dv-a", '{"look": 2}', now + 60))
    assert WakeSweeper(mirror, send).sweep(now) == 1
    assert mirror.wake_payload(NS, "dv-a") == '{"look": 2}'
    later = Sender()
    assert WakeSweeper(mirror, later).sweep(now + 61) == 1
    assert later.sent == ['{"look": 2}']


def test_the_watcher_taking_a_look_leaves_nothing_to_sweep(store):
    mirror = DvMirror(store.r)
    now = time.time()
    park(mirror, "dv-a", '{"look": "a"}', now + 30)
    assert mirror.take_wake(NS, "dv-a") == '{"look": "a"}'
    assert WakeSweeper(mirror, Sender()).sweep(now + 3600) == 0
