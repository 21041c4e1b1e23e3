"""UEFI secure boot through sushy, as Ironic sets it for Metal3's ``bootMode: UEFISecureBoot``."""

from __future__ import annotations

import time

import pytest
import sushy
from kubernetes import client

from lab.stack import LAB_NAMESPACE
from tests.e2e.conftest import ironic, system_id, wait_for
from tests.helpers import Redfish, wait_boot

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(vms=3, import_seconds=3, workers=1)


def set_secure_boot_like_ironic(system, state: bool) -> None:
    """Ironic's redfish management ``set_secure_boot_state``: refuses legacy BIOS itself,
    PATCHes, then re-reads ``SecureBootEnable`` (a BMC that shows the old value gets rebooted)."""
    sb = system.secure_boot
    if sb.enabled == state:
        return
    assert system.boot.mode != sushy.BootSourceOverrideMode.LEGACY
    sb.set_enabled(state)
    sb.refresh(force=True)
    assert sb.enabled == state


def vm_domain(stack, vm: str) -> dict:
    config = client.Configuration()
    config.host = stack.kube_url
    api = client.CustomObjectsApi(client.ApiClient(config))
    obj = api.get_namespaced_custom_object(
        "kubevirt.io", "v1", LAB_NAMESPACE, "virtualmachines", vm
    )
    return obj["spec"]["template"]["spec"]["domain"]


def current_boot(system) -> str:
    sb = system.secure_boot
    sb.refresh(force=True)
    return sb.current_boot.value if hasattr(sb.current_boot, "value") else sb.current_boot


def test_secure_boot_applies_at_the_next_boot_and_off_again(stack):
    vm = "ostest-master-0"
    node = ironic(stack)
    system = node.system(system_id(vm))
    assert system.secure_boot.enabled is False
    assert current_boot(system) == "Disabled"

    set_secure_boot_like_ironic(system, True)
    since = time.time()
    run = node.provision(system_id(vm), f"{stack.iso_url}/images/secure-{vm}.iso")
    assert not run.error, run.error
    boot = wait_boot(stack, vm, since, 60)
    assert boot["kind"] == "cdrom"
    assert boot["firmware"] == {"bootloader": "efi", "secureBoot": True}
    # KubeVirt refuses secure boot without SMM: the VM got both.
    domain = vm_domain(stack, vm)
    assert domain["firmware"]["bootloader"]["efi"]["secureBoot"] is True
    assert domain["features"]["smm"].get("enabled", True) is True
    wait_for(lambda: current_boot(system) == "Enabled", 30, what="SecureBootCurrentBoot")

    # Turned off while running: the setting changes now, the running boot stays as it was.
    set_secure_boot_like_ironic(system, False)
    assert current_boot(system) == "Enabled"
    since = time.time()
    run = node.boot_from_disk(system_id(vm))
    assert not run.error, run.error
    boot = wait_boot(stack, vm, since, 60)
    assert (boot["kind"], boot["firmware"]["secureBoot"]) == ("disk", False)
    wait_for(lambda: current_boot(system) == "Disabled", 30, what="SecureBootCurrentBoot off")


def test_secure_boot_and_legacy_bios_exclude_each_other(stack):
    vm = "ostest-master-1"
    rf = Redfish(stack)
    path = f"/redfish/v1/Systems/{system_id(vm)}"

    def patch(suffix: str, body: dict):
        return rf.session.patch(rf.base + path + suffix, json=body, timeout=5)

    assert patch("", {"Boot": {"BootSourceOverrideMode": "Legacy"}}).status_code == 200
    refused = patch("/SecureBoot", {"SecureBootEnable": True})
    assert refused.status_code == 409
    info = refused.json()["error"]["@Message.ExtendedInfo"][0]
    assert info["MessageId"].endswith("PropertyValueConflict")
    assert info["RelatedProperties"] == ["#/SecureBootEnable"]
    assert rf.get(path + "/SecureBoot")["SecureBootEnable"] is False

    assert patch("", {"Boot": {"BootSourceOverrideMode": "UEFI"}}).status_code == 200
    assert patch("/SecureBoot", {"SecureBootEnable": True}).status_code == 200
    refused = patch("", {"Boot": {"BootSourceOverrideMode": "Legacy"}})
    assert refused.status_code == 409
    info = refused.json()["error"]["@Message.ExtendedInfo"][0]
    assert info["MessageId"].endswith("PropertyValueConflict")
    assert info["RelatedProperties"] == ["#/Boot/BootSourceOverrideMode"]
    assert rf.system(vm)["Boot"]["BootSourceOverrideMode"] == "UEFI"


def test_secure_boot_bad_input_names_the_property(stack):
    rf = Redfish(stack)
    path = f"/redfish/v1/Systems/{system_id('ostest-master-2')}/SecureBoot"
    before = rf.get(path)
    cases = {
        "PropertyValueTypeError": ({"SecureBootEnable": "yes"}, "#/SecureBootEnable"),
        "PropertyNotWritable": ({"SecureBootMode": "UserMode"}, "#/SecureBootMode"),
        "PropertyUnknown": ({"SecureBootKeys": 1}, "#/SecureBootKeys"),
    }
    for message_id, (body, pointer) in cases.items():
        reply = rf.session.patch(rf.base + path, json=body, timeout=5)
        assert reply.status_code == 400, reply.text
        info = reply.json()["error"]["@Message.ExtendedInfo"][0]
        assert info["MessageId"].endswith(message_id)
        assert info["RelatedProperties"] == [pointer]
    stale = rf.session.patch(
        rf.base + path, json={"SecureBootEnable": True}, headers={"If-Match": '"stale"'}, timeout=5
    )
    assert stale.status_code == 412
    assert rf.get(path)["SecureBootEnable"] == before["SecureBootEnable"]
