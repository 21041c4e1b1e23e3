"""What the benchmark sees on the cluster side: a Kubernetes watch on VMs and VMIs, and the
simulator's boot records. Same observations as the e2e tests' VMTimeline, plus VMI start."""

from __future__ import annotations

import logging
import threading
import time

import requests

log = logging.getLogger("fleetfish.bench.observe")

BENCH_AGENT = "fleetfish-bench"
WATCH_SECONDS = 1800  # server-side bound of each watch; the benchmark stops it much sooner


class ClusterTimeline:
    """Per VM name: first time the CD-ROM volume appeared in the VM spec (``attached``), first time
    the VM was asked to run (``started``), first time a VMI existed (``vmi_created``)."""

    def __init__(self, kube_url: str, namespace: str, cdrom_disk: str = "cdrom"):
        from kubernetes import client, watch

        config = client.Configuration()
        config.host = kube_url
        api_client = client.ApiClient(config)
        # Named so the simulator's request counts can leave the observer's own watches out.
        api_client.user_agent = BENCH_AGENT
        self.api = client.CustomObjectsApi(api_client)
        self.namespace = namespace
        self.cdrom = cdrom_disk
        self.attached: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.vmi_created: dict[str, float] = {}
        self._watches = [watch.Watch(), watch.Watch()]
        self._threads = [
            threading.Thread(target=self._run, args=(w, kind), daemon=True)
            for w, kind in zip(
                self._watches, ("virtualmachines", "virtualmachineinstances"), strict=True
            )
        ]
        for thread in self._threads:
            thread.start()

    def _run(self, watcher, plural: str) -> None:
        try:
            for event in watcher.stream(
                self.api.list_namespaced_custom_object,
                "kubevirt.io",
                "v1",
                self.namespace,
                plural,
                timeout_seconds=WATCH_SECONDS,
            ):
                now = time.time()
                obj = event["object"]
                name = obj["metadata"]["name"]
                if plural == "virtualmachineinstances":
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.vmi_created.setdefault(name, now)
                    continue
                spec = obj.get("spec", {})
                volumes = spec.get("template", {}).get("spec", {}).get("volumes", []) or []
                if any(v.get("name") == self.cdrom for v in volumes):
                    self.attached.setdefault(name, now)
                strategy = spec.get("runStrategy")
                if strategy in ("Always", "RerunOnFailure") or spec.get("running"):
                    self.started.setdefault(name, now)
        except Exception as exc:  # noqa: BLE001 - the watch ends when the lab stops
            log.debug("watch on %s ended: %s", plural, exc)

    def stop(self) -> None:
        for watcher in self._watches:
            watcher.stop()


def boots(kube_url: str, since: float = 0.0) -> list[dict]:
    """The simulator's boot records since ``since`` (epoch seconds)."""
    reply = requests.get(f"{kube_url}/lab/boots", params={"since": since}, timeout=10)
    reply.raise_for_status()
    return reply.json()["boots"]


def kube_requests(kube_url: str) -> dict[str, int] | None:
    """Kubernetes API requests the simulator has answered so far, per "verb resource", left
    out the benchmark's own observers; None from a simulator that counts none (the lab of an
    older commit, when this bench measures it)."""
    reply = requests.get(f"{kube_url}/lab/requests/counts", timeout=10)
    if reply.status_code == 404:
        return None
    reply.raise_for_status()
    counts: dict[str, int] = {}
    for row in reply.json()["counts"]:
        if row["agent"].startswith(BENCH_AGENT):
            continue
        key = f"{row['verb']} {row['resource']}"
        counts[key] = counts.get(key, 0) + row["count"]
    return counts


def requests_between(
    before: dict[str, int] | None, after: dict[str, int] | None
) -> dict[str, int] | None:
    """Per "verb resource", the requests made between two ``kube_requests`` readings."""
    if before is None or after is None:
        return None
    delta = {key: after[key] - before.get(key, 0) for key in after}
    return {key: n for key, n in sorted(delta.items()) if n}


def first_boot_by_vm(records: list[dict]) -> dict[str, dict]:
    """The first boot of each VM: the one Ironic's deploy depends on."""
    first: dict[str, dict] = {}
    for record in sorted(records, key=lambda r: r["time"]):
        first.setdefault(record["vm"], record)
    return first
