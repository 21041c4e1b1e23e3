"""The stalled-media check against a real Redis: only pending media untouched for the stale
period is sent again, once per period, for its current generation."""

from __future__ import annotations

import time

from fleetfish.store import key_media
from workers.reaper import resend_stalled

SID = "fleetfish-lab.ostest-master-0"
OTHER = "fleetfish-lab.ostest-master-1"


def _system(store, sid):
    store.put_system({"id": sid, "name": sid})


def test_only_stalled_pending_media_is_sent_again_once(store):
    for sid in (SID, OTHER):
        _system(store, sid)
    task = store.new_task("InsertMedia Cd", SID, state="Running")
    began = store.begin_insert(SID, "Cd", "http://iso/a.iso", task)
    store.begin_insert(OTHER, "Cd", "http://iso/b.iso", store.new_task("InsertMedia Cd", OTHER))
    store.r.hset(key_media(SID), "updated", str(time.time() - 100))
    sent = []

    def send(*args):
        sent.append(args)

    assert resend_stalled(store, send, stale_after=60) == [SID]
    assert sent == [(SID, "Cd", int(began["gen"]), "http://iso/a.iso", task)]
    # Touched when sent: not sent again before another stale period.
    assert resend_stalled(store, send, stale_after=60) == []
    assert len(sent) == 1


def test_finished_media_is_left_alone(store):
    _system(store, SID)
    task = store.new_task("InsertMedia Cd", SID, state="Running")
    gen = int(store.begin_insert(SID, "Cd", "http://iso/a.iso", task)["gen"])
    store.update_media(SID, "Cd", gen, state="Enabled")
    store.r.hset(key_media(SID), "updated", str(time.time() - 1000))
    assert resend_stalled(store, lambda *a: None, stale_after=60) == []
