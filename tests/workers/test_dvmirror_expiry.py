"""What the DataVolume mirror leaves in Redis once a DataVolume is gone: kept as long as an
import could still wait on it (the task TTL), not for a day."""

from __future__ import annotations

from fleetfish.settings import Settings
from workers.dvmirror import DvMirror, key_dv

NS = "fleetfish-lab"


def _dv(name: str) -> dict:
    return {
        "metadata": {"namespace": NS, "name": name, "labels": {}},
        "status": {"phase": "ImportInProgress", "progress": "10.0%"},
    }


def test_a_deleted_datavolume_is_forgotten_with_the_tasks_that_could_wait_on_it(store):
    mirror = DvMirror(store.r)
    mirror.put(_dv("ff-gone"))
    mirror.deleted(NS, "ff-gone")
    ttl = store.r.ttl(key_dv(NS, "ff-gone"))
    assert 0 < ttl <= Settings.task_result_ttl
    assert ttl > Settings.import_timeout  # an import still waiting sees the deletion
    _, deleted, _ = mirror.read(NS, "ff-gone")
    assert deleted


def test_a_deleted_datavolume_is_kept_as_long_as_the_configured_task_ttl(store):
    mirror = DvMirror(store.r, deleted_ttl=2400)
    mirror.put(_dv("ff-gone-too"))
    mirror.deleted(NS, "ff-gone-too")
    assert 2390 < store.r.ttl(key_dv(NS, "ff-gone-too")) <= 2400
