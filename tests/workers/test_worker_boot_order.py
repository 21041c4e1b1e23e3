"""Boot override mapping onto KubeVirt bootOrder: pure functions, no cluster."""

from __future__ import annotations

import copy
import json

import pytest

from tasks.boot.override import ANN_ORIGINAL, boot_mutator, plan_boot_order, write_order


def lab_vm() -> dict:
    return {
        "metadata": {"name": "ostest-master-0", "namespace": "fleetfish-lab", "annotations": {}},
        "spec": {
            "template": {
                "spec": {
                    "domain": {
                        "firmware": {"bootloader": {"efi": {"secureBoot": False}}},
                        "devices": {
                            "disks": [
                                {"name": "rootdisk", "bootOrder": 1, "disk": {"bus": "virtio"}},
                                {"name": "cdrom", "cdrom": {"bus": "sata"}},
                            ],
                            "interfaces": [{"name": "default", "masquerade": {}}],
                        },
                    },
                    "volumes": [{"name": "rootdisk", "persistentVolumeClaim": {"claimName": "r"}}],
                }
            }
        },
    }


def orders(vm: dict) -> dict[str, int | None]:
    devices = vm["spec"]["template"]["spec"]["domain"]["devices"]
    return {d["name"]: d.get("bootOrder") for d in devices["disks"] + devices["interfaces"]}


def test_cd_puts_cdrom_first_and_renumbers_the_rest():
    vm = lab_vm()
    boot_mutator({"enabled": "Once", "target": "Cd"}, "cdrom")(vm)
    assert orders(vm) == {"rootdisk": 2, "cdrom": 1, "default": None}
    assert json.loads(vm["metadata"]["annotations"][ANN_ORIGINAL])["disks"] == {"rootdisk": 1}


def test_pxe_puts_first_interface_first():
    vm = lab_vm()
    boot_mutator({"enabled": "Continuous", "target": "Pxe"}, "cdrom")(vm)
    assert orders(vm) == {"rootdisk": 2, "cdrom": None, "default": 1}


def test_hdd_after_cd_keeps_orders_unique_and_original_annotation():
    vm = lab_vm()
    boot_mutator({"enabled": "Continuous", "target": "Cd"}, "cdrom")(vm)
    boot_mutator({"enabled": "Continuous", "target": "Hdd"}, "cdrom")(vm)
    assert orders(vm) == {"rootdisk": 1, "cdrom": None, "default": None}
    # Equal to the original order again: nothing left to remember.
    assert ANN_ORIGINAL not in vm["metadata"]["annotations"]


def test_disabled_restores_the_configured_order_exactly():
    vm = lab_vm()
    pristine = copy.deepcopy(vm)
    boot_mutator({"enabled": "Once", "target": "Cd", "mode": "UEFI", "gen": "3"}, "cdrom")(vm)
    boot_mutator({"enabled": "Disabled", "target": "None", "mode": "UEFI", "gen": "4"}, "cdrom")(vm)
    assert vm == pristine


def test_never_two_devices_with_the_same_order():
    vm = lab_vm()
    disks = vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"]
    disks.append({"name": "data", "bootOrder": 2, "disk": {"bus": "virtio"}})
    for target in ("Cd", "Pxe", "Hdd", "None"):
        plan = plan_boot_order(vm, target, "cdrom")
        values = list(plan["disks"].values()) + list(plan["interfaces"].values())
        assert sorted(values) == list(range(1, len(values) + 1)), target


def test_mode_legacy_switches_firmware_to_bios():
    vm = lab_vm()
    boot_mutator({"enabled": "Disabled", "mode": "Legacy"}, "cdrom")(vm)
    assert vm["spec"]["template"]["spec"]["domain"]["firmware"]["bootloader"] == {"bios": {}}
    boot_mutator({"enabled": "Disabled", "mode": "UEFI"}, "cdrom")(vm)
    assert "efi" in vm["spec"]["template"]["spec"]["domain"]["firmware"]["bootloader"]


def test_cd_without_a_cdrom_disk_is_refused():
    vm = lab_vm()
    with pytest.raises(ValueError, match="no disk named"):
        plan_boot_order(vm, "Cd", "missing")


def test_write_order_drops_orders_not_in_the_plan():
    vm = lab_vm()
    write_order(vm, {"disks": {"cdrom": 1}, "interfaces": {}})
    assert orders(vm) == {"rootdisk": None, "cdrom": 1, "default": None}


def test_max_sockets_is_written_and_zero_removes_it():
    vm = lab_vm()
    domain = vm["spec"]["template"]["spec"]["domain"]
    boot_mutator({"max_sockets": "4"}, "cdrom")(vm)
    assert domain["cpu"] == {"maxSockets": 4}
    domain["cpu"]["sockets"] = 2
    boot_mutator({"max_sockets": "0"}, "cdrom")(vm)
    assert domain["cpu"] == {"sockets": 2}
    boot_mutator({}, "cdrom")(vm)  # nothing requested: the VM's own value stays
    assert domain["cpu"] == {"sockets": 2}


def test_max_sockets_leaves_an_instancetype_vm_alone():
    vm = lab_vm()
    vm["spec"]["instancetype"] = {"name": "u1.large"}
    boot_mutator({"max_sockets": "4"}, "cdrom")(vm)
    assert "cpu" not in vm["spec"]["template"]["spec"]["domain"]
