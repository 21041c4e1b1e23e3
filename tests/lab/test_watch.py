"""Watches with the client's watch.Watch: events, 410 after compaction and relist, dropped streams."""

from __future__ import annotations

import threading

import pytest
import requests
from kubernetes import watch
from kubernetes.client.rest import ApiException

from tests.lab.kube import NS, wait_until

G, V, P = "kubevirt.io", "v1", "virtualmachines"


def _collect(k8s, events: list, stop: threading.Event, **kwargs):
    w = watch.Watch()
    for event in w.stream(k8s.custom.list_namespaced_custom_object, G, V, NS, P, **kwargs):
        events.append((event["type"], event["raw_object"]["metadata"]["name"], event["raw_object"]))
        if stop.is_set():
            w.stop()


def test_watch_from_a_list_sees_modifications_and_deletions(k8s):
    listing = k8s.custom.list_namespaced_custom_object(G, V, NS, P)
    rv = listing["metadata"]["resourceVersion"]
    events: list = []
    stop = threading.Event()
    thread = threading.Thread(
        target=_collect,
        args=(k8s, events, stop),
        kwargs={
            "resource_version": rv,
            "timeout_seconds": 10,
            "label_selector": "app.kubernetes.io/part-of",
        },
        daemon=True,
    )
    thread.start()
    k8s.patch_vm("ostest-master-1", {"metadata": {"labels": {"seen": "yes"}}})
    k8s.custom.delete_namespaced_custom_object(G, V, NS, P, "ostest-worker-0")
    wait_until(
        lambda: any(t == "DELETED" and n == "ostest-worker-0" for t, n, _ in events),
        what="DELETED event",
    )
    stop.set()
    modified = [o for t, n, o in events if t == "MODIFIED" and n == "ostest-master-1"]
    assert modified and modified[0]["metadata"]["labels"]["seen"] == "yes"
    assert all(int(o["metadata"]["resourceVersion"]) > int(rv) for _, _, o in events)


def test_watch_without_resource_version_starts_with_the_current_state(k8s):
    w = watch.Watch()
    seen = []
    for event in w.stream(k8s.custom.list_namespaced_custom_object, G, V, NS, P, timeout_seconds=1):
        seen.append((event["type"], event["raw_object"]["metadata"]["name"]))
        if len(seen) == 4:
            w.stop()
    assert seen == [
        ("ADDED", n)
        for n in ("ostest-master-0", "ostest-master-1", "ostest-master-2", "ostest-worker-0")
    ]


def test_compacted_resource_version_gets_410_and_relist_recovers(k8s, sim):
    old_rv = k8s.custom.list_namespaced_custom_object(G, V, NS, P)["metadata"]["resourceVersion"]
    k8s.patch_vm("ostest-master-0", {"metadata": {"labels": {"n": "1"}}})
    assert requests.post(f"{sim.url}/lab/compact", timeout=5).status_code == 200
    with pytest.raises(ApiException) as exc:
        for _ in watch.Watch().stream(
            k8s.custom.list_namespaced_custom_object,
            G,
            V,
            NS,
            P,
            resource_version=old_rv,
            timeout_seconds=5,
        ):
            pass
    assert exc.value.status == 410 and "too old resource version" in exc.value.reason

    fresh_rv = k8s.custom.list_namespaced_custom_object(G, V, NS, P)["metadata"]["resourceVersion"]
    events: list = []
    stop = threading.Event()
    thread = threading.Thread(
        target=_collect,
        args=(k8s, events, stop),
        kwargs={"resource_version": fresh_rv, "timeout_seconds": 10},
        daemon=True,
    )
    thread.start()
    k8s.patch_vm("ostest-master-0", {"metadata": {"labels": {"n": "2"}}})
    wait_until(lambda: events, what="an event after relisting")
    stop.set()
    assert events[0][0] == "MODIFIED" and events[0][2]["metadata"]["labels"]["n"] == "2"


def test_drop_ends_open_watches_and_bookmarks_carry_the_resource_version(k8s, sim):
    rv = k8s.custom.list_namespaced_custom_object(G, V, NS, P)["metadata"]["resourceVersion"]
    url = f"{sim.url}/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines"
    params = {
        "watch": "true",
        "resourceVersion": rv,
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "30",
    }
    lines: list[bytes] = []
    ended = threading.Event()

    def read():
        with requests.get(url, params=params, stream=True, timeout=30) as resp:
            try:
                for line in resp.iter_lines():
                    if line:
                        lines.append(line)
            except requests.RequestException:
                pass
        ended.set()

    threading.Thread(target=read, daemon=True).start()
    wait_until(
        lambda: any(
            r["path"].startswith(
                "/apis/kubevirt.io/v1/namespaces/fleetfish-lab/virtualmachines?watch"
            )
            for r in requests.get(f"{sim.url}/lab/requests", timeout=5).json()["requests"]
        ),
        what="the watch to be open",
    )
    k8s.patch_vm("ostest-master-2", {"metadata": {"labels": {"x": "y"}}})
    wait_until(lambda: lines, what="the MODIFIED line")
    assert requests.post(f"{sim.url}/lab/watches/drop", json={}, timeout=5).status_code == 200
    assert ended.wait(5), "the dropped watch did not end"
    assert b'"MODIFIED"' in lines[0]
