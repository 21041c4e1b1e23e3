"""The atomic media/power hand-off in fleetfish.store, against a real Redis."""

from __future__ import annotations


def test_reset_on_during_pending_insert_is_deferred_and_released_once(store):
    ins = store.begin_insert("ns.vm", "Cd", "http://iso/boot.iso", "t-insert")
    assert store.get_media("ns.vm")["state"] == "Starting"
    assert store.request_power("ns.vm", "On", "t-reset")["verdict"] == "deferred"
    first = store.release_deferred("ns.vm", "Cd", ins["gen"], "body-1")
    assert first == {"verdict": "released", "action": "On", "task": "t-reset"}
    # A redelivered body gets the same action back; another body gets nothing.
    assert store.release_deferred("ns.vm", "Cd", ins["gen"], "body-1")["verdict"] == "inflight"
    assert store.release_deferred("ns.vm", "Cd", ins["gen"], "body-2")["verdict"] == "none"
    assert store.get_media("ns.vm")["state"] == "Enabled"


def test_reset_without_pending_media_runs_now(store):
    assert store.request_power("ns.vm", "On", "t1")["verdict"] == "run"


def test_force_off_cancels_deferred_on(store):
    store.begin_insert("ns.vm", "Cd", "http://iso/boot.iso", "t-insert")
    store.request_power("ns.vm", "On", "t-on")
    verdict = store.request_power("ns.vm", "ForceOff", "t-off")
    assert verdict == {"verdict": "run", "cancelled_task": "t-on"}
    assert "deferred" not in store.get_power("ns.vm")


def test_failed_media_drops_deferred_power_on(store):
    ins = store.begin_insert("ns.vm", "Cd", "http://iso/missing.iso", "t-insert")
    store.request_power("ns.vm", "On", "t-on")
    assert store.fail_media("ns.vm", "Cd", ins["gen"], "404")["cancelled_task"] == "t-on"
    media = store.get_media("ns.vm")
    assert media["inserted"] == "0" and media["health"] == "Critical"
    assert store.release_deferred("ns.vm", "Cd", ins["gen"], "b")["verdict"] == "none"


def test_stale_generation_cannot_release_or_update(store):
    old = store.begin_insert("ns.vm", "Cd", "http://iso/a.iso", "t1")
    new = store.begin_insert("ns.vm", "Cd", "http://iso/b.iso", "t2")
    assert new["previous_image"] == "http://iso/a.iso"
    assert not store.update_media("ns.vm", "Cd", old["gen"], progress=50)
    assert store.release_deferred("ns.vm", "Cd", old["gen"], "b")["verdict"] == "stale"
    assert store.get_media("ns.vm")["image"] == "http://iso/b.iso"


def test_eject_while_pending_releases_deferred_action(store):
    store.begin_insert("ns.vm", "Cd", "http://iso/a.iso", "t1")
    store.request_power("ns.vm", "On", "t-on")
    ej = store.begin_eject("ns.vm", "Cd", "t-ej")
    assert ej["was_pending"] and ej["released_action"] == "On" and ej["released_task"] == "t-on"
    assert store.get_media("ns.vm")["inserted"] == "0"
