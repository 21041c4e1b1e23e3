"""The DataVolume watch: the watcher mirrors fleetfish's DataVolumes into Redis, resumes after
410 Gone, and imports learn of success, failure and deletion from it without reading the
DataVolume themselves."""

from __future__ import annotations

import re
import signal
import time

import requests

from tasks.media.volumes import dv_name
from tests.workers.conftest import NAMESPACE, system, wait_for
from workers.dvmirror import DvMirror

VM0 = "ostest-master-0"
DVS = f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{NAMESPACE}/datavolumes"
# Longer than any of these tests: an import that read its DataVolume itself would stall, so
# whatever the import learns here it learns from the watch.
NO_FALLBACK = "600"


def managed_dv(lab, name: str, image: str) -> None:
    body = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "fleetfish"},
            # No VM consumes it: bind at once, as fleetfish's own DataVolumes ask.
            "annotations": {"cdi.kubevirt.io/storage.bind.immediate.requested": "true"},
        },
        "spec": {
            "source": {"http": {"url": image}},
            "storage": {"resources": {"requests": {"storage": "64Mi"}}},
        },
    }
    requests.post(f"{lab.kube_url}{DVS}", json=body, timeout=5).raise_for_status()


def mirrored(lab, name: str) -> tuple[dict | None, bool]:
    dv, deleted, _ = DvMirror(lab.store.r).read(NAMESPACE, name)
    return dv, deleted


def phase(lab, name: str) -> str:
    dv, _ = mirrored(lab, name)
    return ((dv or {}).get("status") or {}).get("phase", "")


def dv_gets(lab) -> int:
    rows = requests.get(f"{lab.kube_url}/lab/requests/counts", timeout=5).json()["counts"]
    return sum(r["count"] for r in rows if (r["verb"], r["resource"]) == ("get", "datavolumes"))


def start_watched(lab, import_seconds: float, watcher: str = "watcher", **worker_env: str) -> str:
    """Simulator, watcher and worker w1 started, the DataVolume watch live; VM0's system id."""
    lab.start_kubesim(vms=1, import_seconds=import_seconds)
    lab.start_watcher(watcher)
    lab.start_worker("w1", **worker_env)
    wait_for(lambda: DvMirror(lab.store.r).fresh(NAMESPACE), 20, "the DataVolume watch")
    return system(VM0)


def test_dv_watch_mirrors_imports_and_resumes_after_410(lab):
    lab.start_kubesim(vms=1, import_seconds=1)
    lab.start_watcher("watcher-a")
    wait_for(lambda: lab.store.system_ids(), 20, "the watcher's first list")
    managed_dv(lab, "ff-a", lab.iso())
    wait_for(lambda: phase(lab, "ff-a") == "Succeeded", 20, "the import Succeeded in the mirror")
    # The watch expires (410 on reconnect): the watcher lists again and watches from there on.
    requests.post(f"{lab.kube_url}/lab/compact", timeout=5).raise_for_status()
    requests.post(f"{lab.kube_url}/lab/watches/drop", timeout=5).raise_for_status()
    managed_dv(lab, "ff-b", lab.iso())
    wait_for(lambda: phase(lab, "ff-b") == "Succeeded", 20, "a DataVolume made meanwhile")
    assert "relisting" in lab.procs.log("watcher-a")
    requests.delete(f"{lab.kube_url}{DVS}/ff-b", timeout=5).raise_for_status()
    wait_for(lambda: mirrored(lab, "ff-b")[1], 20, "the deletion in the mirror")
    # One deleted while no watcher ran is marked deleted by the next holder's list.
    lab.procs.kill("watcher-a")
    requests.delete(f"{lab.kube_url}{DVS}/ff-a", timeout=5).raise_for_status()
    wait_for(lambda: "ff-a" not in lab.dvs(), 20, "ff-a gone from the cluster")
    assert not mirrored(lab, "ff-a")[1]  # nothing watches: the mirror cannot know yet
    lab.start_watcher("watcher-b")
    wait_for(lambda: mirrored(lab, "ff-a")[1], 20, "ff-a marked deleted after the relist")


def test_import_fails_when_the_watch_shows_its_datavolume_deleted(lab):
    sid = start_watched(lab, 30, FLEETFISH_DV_FALLBACK_SECONDS=NO_FALLBACK)
    gets = dv_gets(lab)
    task = lab.insert(sid, lab.iso())
    name = dv_name(sid, "Cd", lab.iso(), lab.store.get_media(sid)["gen"])
    wait_for(lambda: phase(lab, name) == "ImportInProgress", 20, "the import under way")
    requests.delete(f"{lab.kube_url}{DVS}/{name}", timeout=5).raise_for_status()
    ended = wait_for(lambda: lab.task_done(task), 20, "the insert to fail")
    assert ended["state"] == "Exception" and name in ended["message"], ended
    media = lab.store.get_media(sid)
    assert media["inserted"] == "0" and name in media["message"], media
    assert dv_gets(lab) == gets, "the import read the DataVolume instead of the watch's mirror"


def test_failed_import_is_seen_through_the_watch(lab):
    sid = start_watched(lab, 1, FLEETFISH_DV_FALLBACK_SECONDS=NO_FALLBACK)
    gets = dv_gets(lab)
    task = lab.insert(sid, lab.iso("missing.iso"))
    ended = wait_for(lambda: lab.task_done(task), 60, "the insert to fail")
    assert ended["state"] == "Exception" and "404" in ended["message"], ended
    assert "404" in lab.store.get_media(sid)["message"]
    wait_for(lambda: lab.dvs() == [], 10, "the failed DataVolume deleted")
    assert dv_gets(lab) == gets, "the import read the DataVolume instead of the watch's mirror"


def test_the_watch_wakes_an_import_as_soon_as_it_ends(lab):
    # The parked import's own look falls due a minute later at the earliest: only the
    # watcher's wake-up can end it sooner.
    sid = start_watched(
        lab, 4, FLEETFISH_DV_FALLBACK_SECONDS=NO_FALLBACK, FLEETFISH_VISIBILITY_TIMEOUT="120"
    )
    started = time.monotonic()
    task = lab.insert(sid, lab.iso())
    # Meanwhile its progress shows, from the watch alone.
    wait_for(lambda: 0 < float(lab.store.get_media(sid)["progress"] or 0) < 100, 10, "progress")
    assert int(lab.task(task)["percent"]) > 0
    ended = wait_for(lambda: lab.task_done(task), 30, "the insert to complete")
    assert ended["state"] == "Completed", ended
    assert time.monotonic() - started < 20
    assert lab.store.get_media(sid)["attached"] == "1"


def import_runs(lab, worker: str) -> int:
    """Deliveries of media.import the worker took (Celery logs one line per delivery)."""
    return sum(
        "Task media.import[" in line and line.rstrip().endswith("received")
        for line in lab.procs.log(worker).splitlines()
    )


def test_an_import_runs_no_task_between_its_first_look_and_its_wake(lab):
    # A visibility timeout of 10 s: a waiting import that kept a look scheduled in Celery would
    # look again every few seconds (a third of it) while the import runs.
    sid = start_watched(lab, 10, FLEETFISH_DV_FALLBACK_SECONDS=NO_FALLBACK)
    task = lab.insert(sid, lab.iso())
    ended = wait_for(lambda: lab.task_done(task), 40, "the insert to complete")
    assert ended["state"] == "Completed", ended
    # The first look creates the DataVolume; the watcher's wake-up is the second and last.
    assert import_runs(lab, "w1") == 2, import_runs(lab, "w1")
    # The parked run ends as a run (the worker log and Flower say so), not as an exception
    # Celery would walk every frame of to build its report.
    log = lab.procs.log("w1")
    assert "succeeded" in log and "{'parked': True}" in log, log[-2000:]
    assert " ignored" not in log
    # Nothing of the chain ran from the parked run: the attach came once, after the wake.
    attaches = [ln for ln in log.splitlines() if "Task media.attach[" in ln and "received" in ln]
    assert len(attaches) == 1, attaches
    # Its progress went to the Redfish task and the media only: no Celery result (a SET and a
    # PUBLISH per look) that nothing reads.
    import_ids = set(re.findall(r"Task media\.import\[([0-9a-f-]+)\]", log))
    assert import_ids
    assert [i for i in import_ids if lab.store.r.exists(f"celery-task-meta-{i}")] == []


def test_a_parked_import_still_ends_when_the_watcher_dies(lab):
    sid = start_watched(lab, 6, "watcher-a")
    task = lab.insert(sid, lab.iso())
    name = dv_name(sid, "Cd", lab.iso(), lab.store.get_media(sid)["gen"])
    wait_for(lambda: phase(lab, name) == "ImportInProgress", 20, "the import under way")
    # Nothing is left to wake the import: its own scheduled look must come, find the watch
    # silent and read the DataVolume itself.
    lab.procs.kill("watcher-a", signal.SIGKILL)
    ended = wait_for(lambda: lab.task_done(task), 150, "the insert to complete")
    assert ended["state"] == "Completed", ended
    assert lab.store.get_media(sid)["attached"] == "1"
