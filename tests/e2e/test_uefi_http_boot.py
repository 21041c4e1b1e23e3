"""UEFI HTTP boot through sushy, as Ironic drives it for Metal3's ``redfish-uefihttp://`` BMCs."""

from __future__ import annotations

import time

import pytest
import sushy

from tests.e2e.conftest import boots, ironic, system_id, wait_for
from tests.helpers import Redfish, wait_boot

pytestmark = pytest.mark.e2e

IMPORT_SECONDS = 4


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(vms=3, import_seconds=IMPORT_SECONDS, workers=1)


def test_http_boot_image_is_attached_before_the_node_powers_on(stack):
    vm = "ostest-master-0"
    node = ironic(stack)
    system = node.system(system_id(vm))
    assert sushy.BootSource.UEFI_HTTP in system.get_allowed_system_boot_source_values()
    node.power_off(system)
    url = f"{stack.iso_url}/images/httpboot-{vm}.iso"
    since = time.time()
    # Ironic's redfish-https boot: one PATCH with target, URI and Once, then power on at once.
    system.set_system_boot_options(
        target=sushy.BootSource.UEFI_HTTP,
        enabled=sushy.BootSourceOverrideEnabled.ONCE,
        mode=sushy.BootSourceOverrideMode.UEFI,
        http_boot_uri=url,
    )
    system.refresh()
    assert system.boot.target == sushy.BootSource.UEFI_HTTP
    assert system.boot.http_boot_uri == url
    system.reset_system(sushy.ResetType.ON)
    system.refresh()
    assert system.power_state == sushy.PowerState.POWERING_ON

    boot = wait_boot(stack, vm, since, IMPORT_SECONDS + 60)
    assert (boot["kind"], boot["image_url"]) == ("cdrom", url)
    assert [b["vm"] for b in boots(stack, since)].count(vm) == 1
    assert time.time() - since >= IMPORT_SECONDS  # it waited for the import
    # The Once override ends with that boot; the URI stays, as a BMC keeps it.
    wait_for(
        lambda: Redfish(stack).system(vm)["Boot"]["BootSourceOverrideTarget"] == "None",
        30,
        what="Once UefiHttp override ended",
    )
    assert Redfish(stack).system(vm)["Boot"]["HttpBootUri"] == url


def test_http_boot_requests_that_cannot_boot_are_refused_and_change_nothing(stack):
    vm = "ostest-master-1"
    rf = Redfish(stack)
    path = f"/redfish/v1/Systems/{system_id(vm)}"
    before = rf.system(vm)["Boot"]
    cases = [
        # No URI given or kept: nothing to boot (no DHCP here to supply one).
        ({"BootSourceOverrideTarget": "UefiHttp"}, 409, "PropertyValueConflict", "Target"),
        (
            {"BootSourceOverrideTarget": "UefiHttp", "HttpBootUri": "ftp://host/x.iso"},
            400,
            "PropertyValueFormatError",
            "HttpBootUri",
        ),
        (
            {
                "BootSourceOverrideTarget": "UefiHttp",
                "HttpBootUri": "http://169.254.169.254/latest/x.iso",
            },
            400,
            "PropertyValueIncorrect",
            "HttpBootUri",
        ),
    ]
    for boot, status, message_id, prop in cases:
        reply = rf.session.patch(rf.base + path, json={"Boot": boot}, timeout=5)
        assert reply.status_code == status, (boot, reply.text)
        info = reply.json()["error"]["@Message.ExtendedInfo"][0]
        assert info["MessageId"].endswith(message_id), (boot, info)
        expected = "#/Boot/" + ("BootSourceOverrideTarget" if prop == "Target" else prop)
        assert info["RelatedProperties"] == [expected]
    assert rf.system(vm)["Boot"] == before
    assert rf.media(vm)["Inserted"] is False


def test_a_uri_without_the_uefihttp_target_is_kept_but_not_booted(stack):
    vm = "ostest-master-2"
    rf = Redfish(stack)
    path = f"/redfish/v1/Systems/{system_id(vm)}"
    url = f"{stack.iso_url}/images/later-{vm}.iso"
    reply = rf.session.patch(
        rf.base + path,
        json={"Boot": {"BootSourceOverrideTarget": "Cd", "HttpBootUri": url}},
        timeout=5,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["Boot"]["HttpBootUri"] == url
    assert rf.media(vm)["Inserted"] is False  # nothing imported for a Cd boot
    # The kept URI is what a later UefiHttp target boots.
    reply = rf.session.patch(
        rf.base + path, json={"Boot": {"BootSourceOverrideTarget": "UefiHttp"}}, timeout=5
    )
    assert reply.status_code == 200, reply.text
    media = rf.media(vm)
    assert (media["Inserted"], media["Image"]) == (True, url)
