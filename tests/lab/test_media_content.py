"""Same URL, new bytes: the ISO server can change an image, and CDI and boots show which bytes."""

from __future__ import annotations

import hashlib

import requests

from lab.isoserver import IsoServer
from lab.ports import free_port
from tests.lab.kube import NS, wait_until

SHA256 = "lab.fleetfish.io/sha256"


def _imported_pvc(k8s, name: str, url: str):
    k8s.create_dv(name, url)
    wait_until(
        lambda: k8s.dv(name).get("status", {}).get("phase") == "Succeeded", what=f"{name} imported"
    )
    return k8s.core.read_namespaced_persistent_volume_claim(name, NS)


def test_regenerated_image_is_imported_and_booted_with_its_new_digest(k8s, iso):
    path = "content/agent.iso"
    url = iso.image_url(path)
    old = iso.sha256(path)
    assert _imported_pvc(k8s, "old", url).metadata.annotations[SHA256] == old
    new = iso.regenerate(path)
    assert new != old and iso.sha256(path) == new and iso.sha256(path, version=0) == old
    assert _imported_pvc(k8s, "new", url).metadata.annotations[SHA256] == new

    name = "ostest-master-0"
    k8s.boot_order(name, rootdisk=2, cdrom=1)
    k8s.insert_cdrom(name, "old")
    k8s.start_and_wait(name)
    # an edited annotation changes nothing: CDI keeps what it really downloaded
    k8s.core.patch_namespaced_persistent_volume_claim(
        "old", NS, {"metadata": {"annotations": {SHA256: new}}}
    )
    k8s.sub("virtualmachineinstances", name, "reset")
    k8s.eject_cdrom(name)
    wait_until(lambda: k8s.cdrom_status(name) is None, what="the eject")
    k8s.insert_cdrom(name, "new")
    wait_until(lambda: (k8s.cdrom_status(name) or {}).get("phase") == "Ready", what="attached")
    k8s.sub("virtualmachineinstances", name, "reset")
    assert [(b["reason"], b["kind"], b["image_url"], b["sha256"]) for b in k8s.boots(name)] == [
        ("start", "cdrom", url, old),
        ("reset", "cdrom", url, old),
        ("reset", "cdrom", url, new),
    ]


def test_regenerate_over_http_changes_the_bytes_served():
    with IsoServer(port=free_port(), size_mib=0.25) as iso:
        url = iso.image_url("http/x.iso")
        before = requests.get(url, timeout=5).content
        assert hashlib.sha256(before).hexdigest() == iso.sha256("http/x.iso")
        answer = requests.post(f"{iso.url}/lab/regenerate/http/x.iso", timeout=5)
        assert answer.status_code == 200
        info = answer.json()
        after = requests.get(url, timeout=5).content
        assert len(after) == len(before) and after != before
        assert after[0x8001:0x8006] == b"CD001"  # still looks like an ISO
        assert info == {
            "path": "/http/x.iso",
            "version": 1,
            "sha256": hashlib.sha256(after).hexdigest(),
        }
        assert requests.get(f"{iso.url}/lab/images/http/x.iso", timeout=5).json() == info
        assert iso.sha256("http/x.iso") == info["sha256"]
        # other images keep their bytes
        assert iso.version("http/y.iso") == 0
        assert requests.post(f"{iso.url}/lab/nothing", timeout=5).status_code == 404
