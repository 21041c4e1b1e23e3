"""The watcher writes a VM's mirror document only when it changed: the many VM and VMI events
of one provisioning that change nothing a client reads cost no Redis write."""

from __future__ import annotations

import copy

from workers.kubevirt import VM_PLURAL, VMI_PLURAL
from workers.watcher import Watcher

NS = "fleetfish-lab"


def _vm(rv: str, run_strategy: str = "Halted") -> dict:
    return {
        "metadata": {"namespace": NS, "name": "node-0", "uid": "vm-uid", "resourceVersion": rv},
        "spec": {
            "runStrategy": run_strategy,
            "template": {
                "spec": {
                    "domain": {
                        "devices": {"disks": [{"name": "rootdisk", "disk": {"bus": "virtio"}}]}
                    },
                    "volumes": [{"name": "rootdisk", "containerDisk": {"image": "img"}}],
                }
            },
        },
        "status": {"printableStatus": "Stopped"},
    }


def _sets(store) -> int:
    return store.r.info("commandstats").get("cmdstat_set", {}).get("calls", 0)


def test_an_event_that_changes_nothing_shown_writes_nothing(store, settings):
    watcher = Watcher(settings, store, kube=None)
    watcher.holding = True
    system = f"{NS}.node-0"

    watcher.apply(VM_PLURAL, "ADDED", _vm("1"))
    shown = store.get_system(system)
    assert shown is not None
    before = _sets(store)
    watcher.apply(VM_PLURAL, "MODIFIED", _vm("2"))  # a new resourceVersion only
    assert _sets(store) == before

    running = _vm("3", "Always")
    running["status"]["printableStatus"] = "Running"
    watcher.apply(VM_PLURAL, "MODIFIED", running)
    assert _sets(store) == before + 1
    assert store.get_system(system) != shown  # a change that shows is written

    vmi = {"metadata": {"namespace": NS, "name": "node-0", "uid": "vmi-1"}, "status": {}}
    watcher.apply(VMI_PLURAL, "ADDED", copy.deepcopy(vmi))
    after_vmi = _sets(store)
    vmi["metadata"]["resourceVersion"] = "9"
    watcher.apply(VMI_PLURAL, "MODIFIED", vmi)
    assert _sets(store) == after_vmi
