"""The workers' cycle collector: a full collection after a task, at most once per interval."""

from __future__ import annotations

import gc
import weakref

from workers.memory import CycleCollector


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Node:
    """Holds a payload and, through ``peer``, itself: only the cycle collector frees it."""

    def __init__(self) -> None:
        self.payload = bytearray(1 << 20)
        self.peer = self


def test_collects_at_most_once_per_interval():
    clock = FakeClock()
    collector = CycleCollector(interval=5.0, clock=clock)
    assert not collector.after_task()
    clock.now += 4.9
    assert not collector.after_task()
    clock.now += 0.2
    assert collector.after_task()
    assert not collector.after_task()  # the interval starts again from this collection
    clock.now += 5.0
    assert collector.after_task()


def test_a_collection_frees_cycles_left_by_tasks():
    clock = FakeClock()
    collector = CycleCollector(interval=5.0, clock=clock)
    gc.disable()  # so that only the collector can free the cycle
    try:
        node = Node()
        gone = weakref.ref(node)
        del node
        assert gone() is not None  # reference counting alone does not free a cycle
        assert not collector.after_task()
        assert gone() is not None
        clock.now += 5.0
        assert collector.after_task()
        assert gone() is None
    finally:
        gc.enable()
