"""Virtual media over HTTPS from a server with a private CA, as OpenShift and Metal3 serve it."""

from __future__ import annotations

import time

import pytest
import requests

from lab.isoserver import IsoServer
from lab.stack import ISO_CA_CONFIGMAP, LAB_NAMESPACE
from lab.tls import private_ca
from tests.e2e.conftest import boots, ironic, system_id, wait_for
from tests.helpers import Redfish, wait_boot

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(vms=3, import_seconds=2, workers=1, iso_tls=True)


def media_failure(rf: Redfish, vm: str, timeout: float) -> dict:
    return wait_for(
        lambda: (m := rf.media(vm))["Inserted"] is False and m["Status"]["Health"] != "OK" and m,
        timeout,
        what=f"{vm} media failure",
    )


def test_an_https_image_signed_by_the_configured_ca_boots(stack):
    vm = "ostest-master-0"
    url = f"{stack.iso_url}/images/boot-{vm}.iso"
    assert url.startswith("https://")
    since = time.time()
    run = ironic(stack).provision(system_id(vm), url)
    assert not run.error, run.error
    boot = wait_boot(stack, vm, since, 60)
    assert (boot["kind"], boot["image_url"]) == ("cdrom", url)
    assert boot["sha256"]


def test_an_untrusted_https_server_fails_the_media_and_the_node_stays_off(stack, tmp_path):
    vm = "ostest-master-1"
    rf = Redfish(stack)
    _, cert, key = private_ca(tmp_path / "other-ca", common_name="some other CA")
    with IsoServer(tls=(str(cert), str(key))) as other:
        rf.power_off_and_eject(vm)
        since = time.time()
        insert = rf.insert(vm, other.image_url(f"images/boot-{vm}.iso"))
        assert insert.status_code == 202
        rf.boot_cd_once(vm)
        reset = rf.reset(vm, "On")
        assert rf.system(vm)["PowerState"] == "PoweringOn"
        media = media_failure(rf, vm, 90)
    assert "x509: certificate signed by unknown authority" in str(media["Status"])
    assert rf.task(insert)["TaskState"] == "Exception"
    wait_for(lambda: rf.system(vm)["PowerState"] == "Off", 10, what="deferred On dropped")
    assert rf.task(reset)["TaskState"] in ("Cancelled", "Exception")
    assert [b for b in boots(stack, since) if b["vm"] == vm] == []


def test_a_missing_ca_configmap_fails_at_once_and_says_what_to_create(stack):
    vm = "ostest-master-2"
    rf = Redfish(stack)
    configmaps = f"{stack.kube_url}/api/v1/namespaces/{LAB_NAMESPACE}/configmaps"
    saved = requests.get(f"{configmaps}/{ISO_CA_CONFIGMAP}", timeout=5).json()
    requests.delete(f"{configmaps}/{ISO_CA_CONFIGMAP}", timeout=5).raise_for_status()
    try:
        rf.power_off_and_eject(vm)
        started = time.monotonic()
        insert = rf.insert(vm, f"{stack.iso_url}/images/boot-{vm}.iso")
        assert insert.status_code == 202
        media = media_failure(rf, vm, 30)
        # The importer pod would wait for the ConfigMap for ever: no restarts to count.
        assert time.monotonic() - started < 20
        message = str(media["Status"])
        assert f"{LAB_NAMESPACE}/{ISO_CA_CONFIGMAP}" in message
        assert "FLEETFISH_IMAGE_CA_CONFIGMAP" in message
        assert rf.task(insert)["TaskState"] == "Exception"
    finally:
        body = {"metadata": {"name": ISO_CA_CONFIGMAP}, "data": saved["data"]}
        requests.post(configmaps, json=body, timeout=5).raise_for_status()
