"""Duplicate deliveries of one task run (Redis visibility timeout) against a real Redis."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from celery.exceptions import Ignore, Retry

from fleetfish.settings import Settings
from workers import runtime
from workers.taskutil import single_delivery


@pytest.fixture(autouse=True)
def _runtime(store, monkeypatch):
    monkeypatch.setattr(runtime, "_store", store)
    monkeypatch.setattr(runtime, "_settings", Settings(redis_url="", visibility_timeout=9))


class FakeTask:
    name = "media.import"

    def __init__(self, retries=0):
        self.request = SimpleNamespace(id="celery-1", retries=retries, called_directly=False)
        self.retried_with = None

    def retry(self, countdown=None, **_kwargs):
        self.retried_with = countdown
        return Retry()


def make(calls: list):
    @single_delivery
    def body(self, value):
        calls.append(value)
        return value

    return body


def test_a_second_copy_of_a_finished_run_is_dropped():
    calls: list = []
    body = make(calls)
    assert body(FakeTask(), "a") == "a"
    with pytest.raises(Ignore):
        body(FakeTask(), "a")
    # Any later run of a finished task too (a copy of an older retry).
    with pytest.raises(Ignore):
        body(FakeTask(retries=3), "a")
    assert calls == ["a"]


def test_a_copy_of_a_run_still_marked_running_tries_again_later(store):
    calls: list = []
    body = make(calls)
    # The first copy was SIGKILLed mid-run: its mark stays "running".
    store.r.set("ff:run:celery-1:0", "running")
    task = FakeTask()
    with pytest.raises(Retry):
        body(task, "a")
    assert task.retried_with == 3.0 and calls == []
    # The next run is free, so the work carries on.
    assert body(FakeTask(retries=1), "a") == "a" and calls == ["a"]
