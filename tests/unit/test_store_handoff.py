"""The atomic media/power hand-off in fleetfish.store, against a real Redis."""

from __future__ import annotations

import pytest

from fleetfish.store import KEY_RESETS, key_media_cred, key_task


def test_reset_on_during_pending_insert_is_deferred_and_released_once(store):
    ins = store.begin_insert("ns.vm", "Cd", "http://iso/boot.iso")
    assert store.get_media("ns.vm")["state"] == "Starting"
    on = store.request_power("ns.vm", "On")
    assert on["verdict"] == "deferred" and on["celery_id"] == ""
    assert store.get_task(on["task"])["state"] == "Pending"
    first = store.release_deferred("ns.vm", "Cd", ins["gen"], "body-1")
    assert first == {"verdict": "released", "action": "On", "task": on["task"]}
    # A redelivered body gets the same action back; another body gets nothing.
    assert store.release_deferred("ns.vm", "Cd", ins["gen"], "body-1")["verdict"] == "inflight"
    assert store.release_deferred("ns.vm", "Cd", ins["gen"], "body-2")["verdict"] == "none"
    assert store.get_media("ns.vm")["state"] == "Enabled"
    # The media chord runs it: it is not waiting for a power.reset message.
    assert store.stale_resets(float("inf")) == []


def test_reset_without_pending_media_runs_now(store):
    on = store.request_power("ns.vm", "On")
    assert on["verdict"] == "run"
    task = store.get_task(on["task"])
    assert task["name"] == "Reset On" and task["system"] == "ns.vm" and task["action"] == "On"
    # Recorded with the Celery id it is sent under, until a worker takes it.
    assert task["celery_id"] == on["celery_id"] and on["celery_id"]
    assert store.stale_resets(float("inf")) == [on["task"]]
    assert store.take_reset(on["task"]) == "New"
    assert store.stale_resets(float("inf")) == []
    assert store.get_task(on["task"])["picked"]


def test_force_off_cancels_deferred_on(store):
    store.begin_insert("ns.vm", "Cd", "http://iso/boot.iso")
    on = store.request_power("ns.vm", "On")
    off = store.request_power("ns.vm", "ForceOff")
    assert off["verdict"] == "run" and off["cancelled_task"] == on["task"]
    assert "deferred" not in store.get_power("ns.vm")
    cancelled = store.get_task(on["task"])
    assert cancelled["state"] == "Cancelled" and cancelled["end"]
    assert f"ForceOff (task {off['task']})" in cancelled["message"]


def test_sequential_mode_never_defers(store):
    store.begin_insert("ns.vm", "Cd", "http://iso/boot.iso")
    assert store.request_power("ns.vm", "On", defer=False)["verdict"] == "run"
    assert "deferred" not in store.get_power("ns.vm")


def test_failed_media_drops_deferred_power_on(store):
    ins = store.begin_insert("ns.vm", "Cd", "http://iso/missing.iso")
    on = store.request_power("ns.vm", "On")
    failed = store.fail_media("ns.vm", "Cd", ins["gen"], "404", ins["task"])
    assert failed["cancelled_task"] == on["task"]
    media = store.get_media("ns.vm")
    assert media["inserted"] == "0" and media["health"] == "Critical"
    # The insert's task and the power-on it held back ended in the same step.
    assert store.get_task(ins["task"])["state"] == "Exception"
    dropped = store.get_task(on["task"])
    assert dropped["state"] == "Exception" and "virtual media failed: 404" in dropped["message"]
    assert store.release_deferred("ns.vm", "Cd", ins["gen"], "b")["verdict"] == "none"


def test_stale_generation_cannot_release_or_update(store):
    old = store.begin_insert("ns.vm", "Cd", "http://iso/a.iso")
    new = store.begin_insert("ns.vm", "Cd", "http://iso/b.iso")
    assert new["previous_image"] == "http://iso/a.iso"
    assert not store.update_media("ns.vm", "Cd", old["gen"], progress=50)
    assert store.release_deferred("ns.vm", "Cd", old["gen"], "b")["verdict"] == "stale"
    assert store.get_media("ns.vm")["image"] == "http://iso/b.iso"


def test_insert_creates_its_running_task_and_credentials_together(store):
    ins = store.begin_insert("ns.vm", "Cd", "http://iso/a.iso", username="u", password="p")
    task = store.get_task(ins["task"])
    assert task["name"] == "InsertMedia Cd" and task["state"] == "Running"
    assert store.get_media("ns.vm")["task"] == ins["task"]
    assert store.media_credentials("ns.vm") == {"username": "u", "password": "p"}
    assert 0 < store.r.ttl(key_task(ins["task"])) <= store.task_ttl
    assert ins["task"] in store.task_ids()
    store.begin_insert("ns.vm", "Cd", "http://iso/b.iso")
    assert not store.r.exists(key_media_cred("ns.vm"))


def test_eject_while_pending_releases_deferred_action(store):
    store.begin_insert("ns.vm", "Cd", "http://iso/a.iso")
    on = store.request_power("ns.vm", "On")
    ej = store.begin_eject("ns.vm", "Cd")
    assert ej["unfinished"] and ej["released_action"] == "On"
    assert ej["released_task"] == on["task"]
    assert store.get_media("ns.vm")["inserted"] == "0"
    assert store.get_task(ej["task"])["state"] == "Running"
    # The released Reset is now sent as power.reset: recorded under the id it is sent with.
    released = store.get_task(on["task"])
    assert released["state"] == "Running" and released["celery_id"] == ej["released_celery_id"]
    assert store.stale_resets(float("inf")) == [on["task"]]


def test_eject_with_nothing_to_undo_ends_its_task_at_once(store):
    store.r.hset("ff:media:ns.vm:Cd", mapping={"inserted": "1", "state": "Enabled"})
    ej = store.begin_eject("ns.vm", "Cd")
    assert not ej["unfinished"] and not ej["previous_dv"]
    task = store.get_task(ej["task"])
    assert task["state"] == "Completed" and task["end"] and task["percent"] == "100"


@pytest.mark.parametrize("call", ["insert", "eject", "reset"])
def test_a_failed_request_step_leaves_no_task(store, call):
    # The task is written by the same script as the request: a script that fails (here on a
    # media key of the wrong type) writes neither.
    store.r.set("ff:media:ns.vm:Cd", "not a hash")
    with pytest.raises(Exception, match="WRONGTYPE"):
        if call == "insert":
            store.begin_insert("ns.vm", "Cd", "http://iso/a.iso")
        elif call == "eject":
            store.begin_eject("ns.vm", "Cd")
        else:
            store.request_power("ns.vm", "On")
    assert store.task_ids() == []
    assert store.r.zcard(KEY_RESETS) == 0


def test_a_resent_reset_is_touched_and_a_superseded_one_cancelled(store):
    first = store.request_power("ns.vm", "ForceOff")
    # Sent long ago and never taken by a worker.
    store.r.zadd(KEY_RESETS, {first["task"]: 1.0})
    claim = store.resend_reset(first["task"], sent_before=100.0)
    assert claim == {
        "verdict": "resend",
        "system": "ns.vm",
        "action": "ForceOff",
        "celery_id": first["celery_id"],
    }
    assert store.resend_reset(first["task"], sent_before=100.0)["verdict"] == "fresh"
    # A later Reset of the same system: the old one is not sent again but ends.
    store.r.zadd(KEY_RESETS, {first["task"]: 1.0})
    later = store.request_power("ns.vm", "On")
    claim = store.resend_reset(first["task"], sent_before=100.0)
    assert claim["verdict"] == "superseded" and claim["superseded_by"] == later["task"]
    assert store.get_task(first["task"])["state"] == "Cancelled"
    assert store.take_reset(first["task"]) == "Cancelled"
    assert store.stale_resets(float("inf")) == [later["task"]]


def test_a_once_override_is_ended_only_for_its_own_generation(store):
    first = store.set_boot("ns.vm", enabled="Once", target="Cd")
    second = store.set_boot("ns.vm", enabled="Once", target="Cd")
    # The end of the first power-on's one-time boot comes after the next request.
    assert store.end_boot_once("ns.vm", first) is False
    assert store.get_boot("ns.vm")["enabled"] == "Once"
    assert store.end_boot_once("ns.vm", second) is True
    boot = store.get_boot("ns.vm")
    assert (boot["enabled"], boot["target"]) == ("Disabled", "None")
    assert int(boot["gen"]) > second
    # A repeated end changes nothing.
    assert store.end_boot_once("ns.vm", second) is False


def test_a_failed_power_on_ends_its_task_and_shows_on_the_system_until_the_next_reset(store):
    on = store.request_power("ns.vm", "On")
    reason = "volume cdrom: PVC ff-vm-g3-abcd not found"
    assert store.fail_power_on("ns.vm", on["task"], reason)
    task = store.get_task(on["task"])
    assert task["state"] == "Exception" and task["status"] == "Critical"
    assert reason in task["message"] and task["end"]
    assert store.get_power("ns.vm")["error"] == reason
    # A second copy of the check finds the task ended: nothing changes.
    assert not store.fail_power_on("ns.vm", on["task"], "other")
    assert store.get_power("ns.vm")["error"] == reason
    store.request_power("ns.vm", "ForceOff")
    assert "error" not in store.get_power("ns.vm")


def test_a_failed_power_on_superseded_by_a_later_request_leaves_the_system_alone(store):
    on = store.request_power("ns.vm", "On")
    store.begin_insert("ns.vm", "Cd", "http://iso/next.iso")
    assert store.fail_power_on("ns.vm", on["task"], "did not run")
    assert store.get_task(on["task"])["state"] == "Exception"
    assert "error" not in store.get_power("ns.vm")


def test_a_boot_write_under_if_match_loses_to_a_writer_between_its_check_and_write(store):
    """Two PATCHes with the same ETag: the one whose check raced the other's write gets 412."""
    store.set_boot("ns.vm", enabled="Disabled", target="None")
    seen: list[dict] = []

    def unchanged(_doc, _power, boot):
        seen.append(boot)
        if len(seen) == 1:
            # Another API process writes between this check and the write.
            store.set_boot("ns.vm", enabled="Once", target="Pxe")
        return boot.get("target") == "None"

    assert store.set_boot_if("ns.vm", unchanged, enabled="Once", target="Cd") is None
    assert len(seen) == 2  # checked again on what was stored at the write
    assert (store.get_boot("ns.vm")["enabled"], store.get_boot("ns.vm")["target"]) == (
        "Once",
        "Pxe",
    )
    gen = store.set_boot_if("ns.vm", lambda *_: True, enabled="Once", target="Cd")
    assert gen == int(store.get_boot("ns.vm")["gen"])
    assert store.get_boot("ns.vm")["target"] == "Cd"


def test_a_settled_power_on_stops_showing_in_flight_before_its_body_is_redelivered(store):
    ins = store.begin_insert("ns.vm", "Cd", "http://iso/boot.iso")
    on = store.request_power("ns.vm", "On")
    store.release_deferred("ns.vm", "Cd", ins["gen"], "body-1")
    store.end_inflight_task("ns.vm", "some-other-task")
    assert store.get_power("ns.vm")["inflight"] == "On"
    # The start's check saw the VM run; the body that started it died and comes back later.
    store.end_inflight_task("ns.vm", on["task"])
    assert "inflight" not in store.get_power("ns.vm")
    assert store.release_deferred("ns.vm", "Cd", ins["gen"], "body-1")["verdict"] == "none"


def test_a_lost_power_off_followed_only_by_media_requests_is_still_sent_again(store):
    """Ironic sends ForceOff and EjectMedia back to back: an eject changes no power state, so
    a lost ForceOff must still happen (the soak's "never off": the reaper cancelled it)."""
    off = store.request_power("ns.vm", "ForceOff")
    store.begin_eject("ns.vm", "Cd")
    store.begin_insert("ns.vm", "Cd", "http://iso/next.iso")
    store.r.zadd(KEY_RESETS, {off["task"]: 1.0})
    assert store.resend_reset(off["task"], sent_before=100.0)["verdict"] == "resend"
    # A power-on after media requests would land out of order: it is still cancelled.
    on = store.request_power("ns.vm", "On", defer=False)
    store.begin_insert("ns.vm", "Cd", "http://iso/other.iso")
    store.r.zadd(KEY_RESETS, {on["task"]: 1.0})
    assert store.resend_reset(on["task"], sent_before=100.0)["verdict"] == "superseded"


@pytest.mark.parametrize("first", ["insert", "eject"])
@pytest.mark.parametrize("then", ["insert", "eject"])
def test_a_media_request_whose_message_was_lost_ends_when_a_newer_one_supersedes_it(
    store, first, then
):
    # The API stopped between recording a request and sending its work (a SIGKILL under load):
    # no worker will ever end that task, and the reaper resends only the current generation.
    store.begin_insert("ns.vm", "Cd", "http://iso/boot.iso")
    begin = {"insert": lambda: store.begin_insert("ns.vm", "Cd", "http://iso/next.iso")}
    begin["eject"] = lambda: store.begin_eject("ns.vm", "Cd")
    lost = begin[first]()
    newer = begin[then]()
    ended = store.get_task(lost["task"])
    assert ended["state"] == "Cancelled" and ended["end"], ended
    assert "Superseded by a newer media request" in ended["message"]
    assert newer["task"] in ended["message"]
    # An eject after a lost eject does the work itself: a volume may still be attached.
    assert store.get_task(newer["task"])["state"] == "Running"


def test_an_ended_media_task_is_not_rewritten_by_a_newer_request(store):
    done = store.begin_insert("ns.vm", "Cd", "http://iso/boot.iso")
    store.update_task(done["task"], state="Completed", message="attached")
    store.begin_insert("ns.vm", "Cd", "http://iso/next.iso")
    assert store.get_task(done["task"])["state"] == "Completed"
    assert store.get_task(done["task"])["message"] == "attached"
