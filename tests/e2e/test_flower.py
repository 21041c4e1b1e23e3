"""Flower shows the media work (tasks by name, with the system in their arguments), and workers
send task events only while something like Flower asks for them."""

from __future__ import annotations

import threading

import pytest
import redis
import requests

from tests.e2e.conftest import system_id, wait_for
from tests.helpers import Redfish

pytestmark = pytest.mark.e2e


def _insert(stack, image: str) -> None:
    reply = Redfish(stack).insert("ostest-master-0", f"{stack.iso_url}/images/{image}")
    assert reply.status_code == 202


def _flower_media_tasks(stack) -> dict[str, dict]:
    """Flower's tasks once it lists every media task of an insert, else {}."""
    listing = requests.get(
        f"{stack.flower_url}/api/tasks", auth=stack.credentials, timeout=5
    ).json()
    names = {info.get("name") for info in listing.values()}
    return listing if {"media.import", "media.attach", "media.release"} <= names else {}


def _succeeded_tasks(stack) -> str:
    """The worker log's lines of tasks that succeeded."""
    log = (stack.logs_dir / "worker0.log").read_text(errors="replace")
    return "\n".join(line for line in log.splitlines() if " succeeded in " in line)


def test_flower_lists_the_media_tasks_of_an_insert(lab_factory):
    stack = lab_factory(vms=1, import_seconds=3, workers=1, flower=True)
    system = system_id("ostest-master-0")
    _insert(stack, "flower.iso")

    tasks = wait_for(lambda: _flower_media_tasks(stack), 60, what="media tasks in Flower")
    for info in tasks.values():
        if info.get("name", "").startswith("media."):
            assert system in str(info.get("args")), info
    assert requests.get(f"{stack.flower_url}/api/tasks", timeout=5).status_code == 401


def test_workers_send_no_task_events_while_nothing_asks_for_them(lab_factory):
    stack = lab_factory(vms=1, import_seconds=1, workers=1)
    client = redis.Redis.from_url(stack.redis_url)
    listener = client.pubsub(ignore_subscribe_messages=True)
    listener.psubscribe("*celeryev*")
    heard: list[str] = []
    done = threading.Event()

    def listen() -> None:
        while not done.is_set():
            message = listener.get_message(timeout=0.2)
            if message is not None:
                heard.append(message["channel"].decode())

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    try:
        _insert(stack, "quiet.iso")
        wait_for(lambda: "media.attach" in _succeeded_tasks(stack), 60, what="the ISO attached")
        # The worker's heartbeat goes out on the same channels every 2 s: hearing one shows
        # the listener would have heard task events too.
        wait_for(lambda: any("worker" in c for c in heard), 15, what="a worker heartbeat")
    finally:
        done.set()
        thread.join(timeout=5)
        listener.close()
    assert [c for c in heard if "task" in c] == []


def test_flower_started_after_the_workers_turns_their_task_events_on(lab_factory):
    # As in a deployment where Flower is started, or restarted, after the workers.
    stack = lab_factory(
        vms=1, import_seconds=1, workers=1, flower=True, extra_env={"FLEETFISH_TASK_EVENTS": "0"}
    )
    # Flower asks every 5 s; the worker logs each time it is asked.
    wait_for(
        lambda: "enabled by remote" in (stack.logs_dir / "worker0.log").read_text(errors="replace"),
        30,
        what="Flower asking the worker for task events",
    )
    _insert(stack, "asked.iso")
    wait_for(lambda: _flower_media_tasks(stack), 60, what="media tasks in Flower")
