"""Multi-host: API, Redis and two worker hosts in separate network namespaces; the worker host
holding the work is cut off mid-run and the other one picks it up after the visibility timeout."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from lab.ironic import IronicLike
from tests.e2e.conftest import lab_vm_names, system_id, wait_for
from tests.reliability.netlab import NetLab, NetnsUnavailable

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

VMS = 4
VISIBILITY = 8


def lab_boots(lab: NetLab, since: float) -> list[dict]:
    reply = requests.get(f"{lab.kube_url}/lab/boots", params={"since": since}, timeout=5)
    return reply.json()["boots"]


def test_worker_host_cut_off_mid_run_the_other_host_finishes(tmp_path):
    lab = NetLab(tmp_path / "netlab", vms=VMS, workers=2, import_seconds=3, vt=VISIBILITY)
    try:
        try:
            lab.start()
        except NetnsUnavailable as exc:
            pytest.skip(f"network namespaces unavailable: {exc}")
        vms = lab_vm_names(VMS)
        images = {system_id(vm): f"{lab.iso_url}/images/multihost-{vm}.iso" for vm in vms}
        user, password = lab.credentials
        ironic = IronicLike(lab.redfish_url, user, password)
        # VM writes (boot override, attach) answer slowly, so both hosts are seen holding work.
        fault = {"method": "PUT", "path_regex": "/virtualmachines/[^/]+$", "count": 2 * VMS}
        requests.post(f"{lab.kube_url}/lab/faults", json=fault | {"delay_seconds": 3}, timeout=5)
        # Worker host 0 takes no work until host 1 holds some and is cut: left to chance, host 0
        # could take every task and the cut would test nothing.
        lab.consume("worker0", on=False)
        since = time.time()
        cut = {}

        def cut_when_busy() -> bool:
            tasks = lab.active().get("worker1") or []
            if tasks:
                lab.cut("w1")
                cut["at"], cut["tasks"] = time.time(), [t["name"] for t in tasks]
                lab.consume("worker0", on=True)
            return bool(tasks)

        cutter = threading.Thread(
            target=lambda: wait_for(cut_when_busy, 30, interval=0.1, what="worker1 busy"),
            daemon=True,
        )
        cutter.start()
        with ironic:
            runs = ironic.provision_all(images, power_timeout=VISIBILITY * 6 + 60)
        cutter.join(35)
        assert cut, "worker host 1 never took any work"
        assert [r.error for r in runs] == [""] * VMS, [r.as_dict() for r in runs]
        wait_for(
            lambda: {b["vm"] for b in lab_boots(lab, since)} >= set(vms),
            VISIBILITY * 6 + 60,
            what="every node boots",
        )
        records = lab_boots(lab, since)
        assert sorted(b["vm"] for b in records) == sorted(vms), records
        assert all(b["kind"] == "cdrom" for b in records)
        assert {b["image_url"] for b in records} == set(images.values())
        # The cut host never answers again; the survivor alone is on the broker.
        assert lab.ping() == 1
        print(f"cut worker1 at {cut['at'] - since:.1f}s holding {cut['tasks']}")
    finally:
        lab.close()
