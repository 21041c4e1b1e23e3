"""An InsertMedia recorded, logged and queued in one step (Store.insert_and_send), against a
real Redis: the message always carries the generation the Store recorded."""

from __future__ import annotations

import base64
import json

import pytest

from app.dispatch import make_celery
from fleetfish import wire
from fleetfish.celery_config import MEDIA_QUEUE
from fleetfish.eventlog import EventLog
from fleetfish.store import INSERT_TRIES, GenerationRace, InsertWrites, key_media

SYSTEM, DEVICE, IMAGE = "ns.vm", "Cd", "http://192.0.2.10/boot-1.iso"


@pytest.fixture
def composer(settings, store):
    """A compose callback as the API's, recording the generations it was asked for."""
    app = make_celery(settings)
    log = EventLog(store.r)
    asked: list[int] = []

    def compose(gen: int, task_id: str, celery_id: str) -> InsertWrites:
        asked.append(gen)
        chord = wire.insert_media_chord_message(
            app, SYSTEM, DEVICE, gen, IMAGE, task_id, body_id=celery_id
        )
        return InsertWrites(chord, *log.inserted_args(SYSTEM, DEVICE, IMAGE, gen))

    compose.asked = asked
    compose.log = log
    return compose


def _queued_generations(store) -> list[int]:
    """The generation each queued media.import carries."""
    gens = []
    for raw in store.r.lrange(MEDIA_QUEUE, 0, -1):
        args, _, _ = json.loads(base64.b64decode(json.loads(raw)["body"]))
        gens.append(args[2])
    return gens


def test_an_insert_built_on_a_stale_read_queues_the_generation_it_recorded(store, composer):
    # Two inserts the caller did not see: it read generation 0, the drive is at 2.
    store.begin_insert(SYSTEM, DEVICE, "http://192.0.2.10/old.iso")
    store.begin_insert(SYSTEM, DEVICE, "http://192.0.2.10/old.iso")
    began = store.insert_and_send(SYSTEM, DEVICE, IMAGE, composer, known_gen=0)
    assert began["gen"] == 3 and store.get_media(SYSTEM)["gen"] == "3"
    assert composer.asked == [1, 3]  # the first guess wrote nothing
    assert _queued_generations(store) == [3]
    [entry] = composer.log.entries(SYSTEM)
    assert entry["kind"] == "inserted" and IMAGE in entry["message"]
    assert composer.log.meta(SYSTEM)[f"insert:{DEVICE}"] == "3"
    task = store.get_task(began["task"])
    assert task["state"] == "Running" and task["celery_id"] == began["celery_id"]


def test_an_insert_that_keeps_losing_its_generation_writes_nothing(store, composer):
    def racing(gen: int, task_id: str, celery_id: str) -> InsertWrites:
        # Another request takes the generation between the guess and the write, every time.
        store.r.hincrby(key_media(SYSTEM, DEVICE), "gen", 1)
        return composer(gen, task_id, celery_id)

    with pytest.raises(GenerationRace):
        store.insert_and_send(SYSTEM, DEVICE, IMAGE, racing, known_gen=0)
    assert len(composer.asked) == INSERT_TRIES
    assert store.r.llen(MEDIA_QUEUE) == 0
    assert store.task_ids() == []
    assert composer.log.entries(SYSTEM) == []
    assert store.get_media(SYSTEM).get("image", "") == ""


def test_a_failed_insert_step_queues_nothing(store, composer):
    store.r.set(key_media(SYSTEM, DEVICE), "not a hash")
    with pytest.raises(Exception, match="WRONGTYPE"):
        store.insert_and_send(SYSTEM, DEVICE, IMAGE, composer, known_gen=0)
    assert store.r.llen(MEDIA_QUEUE) == 0
    assert store.task_ids() == []
    assert composer.log.entries(SYSTEM) == []
