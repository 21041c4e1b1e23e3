"""A VirtualMedia's own CA certificates and VerifyCertificate, set with sushy, for image servers
whose CA the deployment does not know."""

from __future__ import annotations

import time

import pytest
import requests
import sushy

from lab.isoserver import IsoServer
from lab.stack import LAB_NAMESPACE
from lab.tls import private_ca, self_signed
from tests.e2e.conftest import ironic, system_id, wait_for
from tests.helpers import wait_boot

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(lab_factory):
    # The deployment's CA is the lab ISO server's; this operator allows VerifyCertificate false.
    return lab_factory(
        vms=2,
        import_seconds=2,
        workers=1,
        iso_tls=True,
        extra_env={"FLEETFISH_MEDIA_ALLOW_UNVERIFIED": "1"},
    )


def kube_get(stack, path: str) -> dict:
    reply = requests.get(f"{stack.kube_url}{path}", timeout=5)
    reply.raise_for_status()
    return reply.json()


def dv_ca(stack, url: str) -> tuple[str, str]:
    """(certConfigMap of the DataVolume importing ``url``, that ConfigMap's CA text)."""
    dvs = kube_get(stack, f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{LAB_NAMESPACE}/datavolumes")
    http = next(
        dv["spec"]["source"]["http"]
        for dv in dvs["items"]
        if dv["spec"]["source"]["http"]["url"] == url
    )
    name = http.get("certConfigMap", "")
    data = kube_get(stack, f"/api/v1/namespaces/{LAB_NAMESPACE}/configmaps/{name}")["data"]
    return name, "".join(data.values())


def configmap_gone(stack, name: str) -> bool:
    path = f"{stack.kube_url}/api/v1/namespaces/{LAB_NAMESPACE}/configmaps/{name}"
    return requests.get(path, timeout=5).status_code == 404


def test_a_ca_added_to_the_virtual_media_lets_its_image_boot(stack, tmp_path):
    vm = "ostest-master-0"
    node = ironic(stack)
    ca, cert, key = private_ca(tmp_path / "other-ca", common_name="a CA of this node only")
    media = node._cd_media(node.system(system_id(vm)))
    assert media.verify_certificate is True
    created = media.certificates.create_member(ca.read_text(), sushy.CertificateType.PEM)
    assert created.certificate_string.strip() == ca.read_text().strip()
    assert [m.identity for m in media.certificates.get_members()] == [created.identity]

    with IsoServer(tls=(str(cert), str(key))) as other:
        url = other.image_url(f"images/boot-{vm}.iso")
        since = time.time()
        run = node.provision(system_id(vm), url)
        assert not run.error, run.error
        boot = wait_boot(stack, vm, since, 60)
        assert (boot["kind"], boot["image_url"]) == ("cdrom", url)
        name, text = dv_ca(stack, url)
        assert name.endswith("-ca") and name != "fleetfish-image-ca"
        assert ca.read_text().strip() in text
        # Ejected: the import's DataVolume goes, and the ConfigMap made for it with it.
        node.eject(node.system(system_id(vm)))
        wait_for(lambda: configmap_gone(stack, name), 30, what="per-import CA ConfigMap removed")
    created.delete()
    fresh = node._cd_media(node.system(system_id(vm)))  # sushy caches the collection
    assert fresh.certificates.get_members() == []


def test_verify_certificate_false_trusts_what_the_server_presents(stack, tmp_path):
    vm = "ostest-master-1"
    node = ironic(stack)
    # Self-signed, as the images of a lab server often are; no CA of it was given to anyone.
    cert, key = self_signed(tmp_path / "unknown", hostnames=("localhost",))
    media = node._cd_media(node.system(system_id(vm)))
    media.set_verify_certificate(False)
    media.refresh()
    assert media.verify_certificate is False
    with IsoServer(tls=(str(cert), str(key))) as other:
        url = other.image_url(f"images/boot-{vm}.iso")
        since = time.time()
        run = node.provision(system_id(vm), url)
        assert not run.error, run.error
        boot = wait_boot(stack, vm, since, 60)
        assert (boot["kind"], boot["image_url"]) == ("cdrom", url)
        _, text = dv_ca(stack, url)
        assert text.strip() == cert.read_text().strip()
    media = node._cd_media(node.system(system_id(vm)))
    media.set_verify_certificate(True)
    media.refresh()
    assert media.verify_certificate is True
