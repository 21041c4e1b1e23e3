"""BIOS settings through sushy, the way Ironic's redfish BIOS interface drives them (and Metal3's
HostFirmwareSettings through it): cache the settings, apply a configuration and reboot, verify;
factory reset and reboot."""

from __future__ import annotations

import time

import pytest
import sushy
from kubernetes import client

from lab.stack import LAB_NAMESPACE
from tests.e2e.conftest import ironic, system_id, wait_for
from tests.helpers import wait_boot

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(vms=2, import_seconds=3, workers=1)


def vm_domain(stack, vm: str) -> dict:
    config = client.Configuration()
    config.host = stack.kube_url
    api = client.CustomObjectsApi(client.ApiClient(config))
    obj = api.get_namespaced_custom_object(
        "kubevirt.io", "v1", LAB_NAMESPACE, "virtualmachines", vm
    )
    return obj["spec"]["template"]["spec"]["domain"]


def fresh_bios(node, vm: str):
    """A new sushy Bios each time: sushy caches the pending Settings resource."""
    return node.system(system_id(vm)).bios


def applied(node, vm: str, wanted: dict) -> bool:
    """Ironic's post-reboot check: every requested attribute reads back, nothing pending."""
    bios = fresh_bios(node, vm)
    current = bios.attributes
    return all(current.get(k) == v for k, v in wanted.items()) and not bios.pending_attributes


def reboot(system, stack, vm: str) -> dict:
    """Ironic's reboot to finish a step: power on a system that is off, else restart it."""
    since = time.time()
    system.refresh()
    if system.power_state == sushy.PowerState.OFF:
        system.reset_system(sushy.ResetType.ON)
    else:
        system.reset_system(sushy.ResetType.FORCE_RESTART)
    return wait_boot(stack, vm, since, 60)


def test_apply_configuration_then_factory_reset(stack):
    vm = "ostest-master-0"
    node = ironic(stack)
    system = node.system(system_id(vm))
    bios = system.bios

    # cache_bios_settings: the attributes and, for Metal3's FirmwareSchema, their registry.
    assert bios.attributes == {
        "BootMode": "UEFI",
        "SecureBoot": "Disabled",
        "CpuMaxSockets": 0,
        "ProcessorSockets": 1,
    }
    registry = bios.get_attribute_registry()
    assert registry is not None
    entries = {a.name: a for a in registry.registry_entries.attributes}
    assert entries["ProcessorSockets"].read_only is True
    assert entries["CpuMaxSockets"].reset_required is True
    assert [v["ValueName"] for v in entries["SecureBoot"].allowable_values] == [
        "Enabled",
        "Disabled",
    ]

    # apply_configuration, step 1: OnReset is offered, so it is asked for.
    assert sushy.APPLY_TIME_ON_RESET in bios.supported_apply_times
    wanted = {"SecureBoot": "Enabled", "CpuMaxSockets": 4}
    bios.set_attributes(wanted, apply_time=sushy.APPLY_TIME_ON_RESET)
    assert fresh_bios(node, vm).pending_attributes == wanted
    assert fresh_bios(node, vm).attributes["SecureBoot"] == "Disabled"
    assert "maxSockets" not in (vm_domain(stack, vm).get("cpu") or {})

    # The reboot writes them before the VM starts: the firmware booted with them.
    boot = reboot(system, stack, vm)
    assert boot["firmware"] == {"bootloader": "efi", "secureBoot": True}
    assert boot["maxSockets"] == 4
    domain = vm_domain(stack, vm)
    assert domain["cpu"]["maxSockets"] == 4
    assert domain["firmware"]["bootloader"]["efi"]["secureBoot"] is True
    assert domain["features"]["smm"].get("enabled", True) is True
    # apply_configuration, step 2: Ironic compares what it asked for with the attributes.
    wait_for(lambda: applied(node, vm, wanted), 30, what="BIOS settings applied")
    assert system.secure_boot.enabled is True

    # factory_reset: pending defaults; a running VM's spec is left alone until the restart.
    fresh_bios(node, vm).reset_bios()
    defaults = {"SecureBoot": "Disabled", "CpuMaxSockets": 0}
    assert fresh_bios(node, vm).pending_attributes == defaults
    assert vm_domain(stack, vm)["cpu"]["maxSockets"] == 4
    boot = reboot(system, stack, vm)
    assert boot["firmware"] == {"bootloader": "efi", "secureBoot": False}
    assert boot["maxSockets"] == 0
    assert "maxSockets" not in (vm_domain(stack, vm).get("cpu") or {})
    wait_for(lambda: applied(node, vm, defaults), 30, what="BIOS defaults applied")


def test_legacy_boot_mode_and_refused_settings(stack):
    vm = "ostest-master-1"
    node = ironic(stack)
    system = node.system(system_id(vm))
    bios = system.bios
    with pytest.raises(sushy.exceptions.BadRequestError, match="PropertyUnknown"):
        bios.set_attributes({"BootMode": "Legacy", "HyperThreading": "Enabled"})
    with pytest.raises(sushy.exceptions.BadRequestError, match="PropertyNotWritable"):
        bios.set_attributes({"ProcessorSockets": 2})
    assert fresh_bios(node, vm).pending_attributes == {}
    with pytest.raises(sushy.exceptions.HTTPError) as conflict:
        bios.set_attributes({"BootMode": "Legacy", "SecureBoot": "Enabled"})
    assert conflict.value.status_code == 409
    # Not offered (KubeVirt firmware has no password): sushy says so before any request.
    with pytest.raises(sushy.exceptions.MissingActionError):
        fresh_bios(node, vm).change_password("new", "old", "AdminPassword")

    fresh_bios(node, vm).set_attributes({"BootMode": "Legacy"})
    # One setting: the Boot override mode reads the same request.
    system.refresh()
    assert system.boot.mode == sushy.BootSourceOverrideMode.LEGACY
    assert vm_domain(stack, vm)["firmware"]["bootloader"] == {"efi": {"secureBoot": False}}
    boot = reboot(system, stack, vm)
    assert boot["firmware"] == {"bootloader": "bios", "secureBoot": False}
    assert vm_domain(stack, vm)["firmware"]["bootloader"] == {"bios": {}}
    wait_for(lambda: applied(node, vm, {"BootMode": "Legacy"}), 30, what="legacy boot mode")
