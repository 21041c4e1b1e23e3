"""CD-ROM media whose DataVolume is deleted: the VMI waits for it, a running guest loses it."""

from __future__ import annotations

from kubernetes.client.rest import ApiException

from tests.lab.kube import NS, holds, wait_until

CDI = ("cdi.kubevirt.io", "v1beta1", NS, "datavolumes")


def _import(k8s, name: str, url: str) -> None:
    k8s.create_dv(name, url)
    wait_until(
        lambda: k8s.dv(name).get("status", {}).get("phase") == "Succeeded", what=f"{name} imported"
    )


def _dv_gone(k8s, name: str) -> bool:
    try:
        k8s.dv(name)
        return False
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise


def _pvc(k8s, name: str):
    try:
        return k8s.core.read_namespaced_persistent_volume_claim(name, NS)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _not_found(k8s, vm: str) -> bool:
    status = k8s.cdrom_status(vm) or {}
    return (status.get("phase"), status.get("reason")) == ("Pending", "FailedPvcNotFound")


def test_cdrom_media_deleted_before_start_holds_the_vmi_scheduled(k8s, iso):
    name = "ostest-master-0"
    path = "missing-media/first.iso"
    _import(k8s, "media", iso.image_url(path))
    k8s.boot_order(name, rootdisk=2, cdrom=1)
    k8s.insert_cdrom(name, "media")
    k8s.custom.delete_namespaced_custom_object(*CDI, "media")  # an eject racing the next insert
    k8s.sub("virtualmachines", name, "start")
    wait_until(
        lambda: _not_found(k8s, name) and k8s.vmi(name)["status"]["phase"] == "Scheduled",
        what="Scheduled, the cdrom FailedPvcNotFound",
    )
    assert k8s.cdrom_status(name)["message"] == "PVC media not found"

    def waiting():
        vmi = k8s.vmi(name)
        return vmi["status"]["phase"] == "Scheduled" and k8s.printable(name) == "Starting"

    # far longer than a start takes (0.2 s): virt-handler waits for the volume, the VM says nothing
    holds(waiting, 1.5, what="the VMI Scheduled")
    assert _not_found(k8s, name) and k8s.boots(name) == []

    # the old DataVolume finishes its deletion; its PVC was never attached, so nothing holds it
    wait_until(lambda: _dv_gone(k8s, "media") and _pvc(k8s, "media") is None, what="old media gone")
    # media of that name appearing again lets the VMI proceed, with the new bytes
    fresh = iso.regenerate(path)
    _import(k8s, "media", iso.image_url(path))
    wait_until(lambda: k8s.printable(name) == "Running", what="Running")
    (boot,) = k8s.boots(name)
    assert (boot["kind"], boot["image_url"], boot["sha256"]) == (
        "cdrom",
        iso.image_url(path),
        fresh,
    )


def test_ejecting_the_missing_media_lets_the_vmi_start(k8s, iso):
    name = "ostest-master-1"
    _import(k8s, "short", iso.image_url("missing-media/short.iso"))
    k8s.insert_cdrom(name, "short")
    k8s.custom.delete_namespaced_custom_object(*CDI, "short")
    k8s.sub("virtualmachines", name, "start")
    wait_until(
        lambda: _not_found(k8s, name) and k8s.vmi(name)["status"]["phase"] == "Scheduled",
        what="Scheduled, the cdrom FailedPvcNotFound",
    )
    k8s.eject_cdrom(name)
    wait_until(lambda: k8s.printable(name) == "Running", what="Running after the eject")
    assert k8s.cdrom_status(name) is None
    (boot,) = k8s.boots(name)
    assert (boot["kind"], boot["device"], boot["sha256"]) == ("disk", "rootdisk", None)


def test_a_running_guest_loses_media_whose_datavolume_is_deleted(k8s, iso):
    name = "ostest-master-2"
    url = iso.image_url("missing-media/live.iso")
    _import(k8s, "live", url)
    k8s.boot_order(name, rootdisk=2, cdrom=1)
    k8s.start_and_wait(name)  # the drive is empty: the disk boots
    k8s.insert_cdrom(name, "live")
    wait_until(lambda: (k8s.cdrom_status(name) or {}).get("phase") == "Ready", what="attached")
    k8s.sub("virtualmachineinstances", name, "reset")
    assert (k8s.boots(name)[-1]["kind"], k8s.boots(name)[-1]["sha256"]) == (
        "cdrom",
        iso.sha256("missing-media/live.iso"),
    )

    k8s.custom.delete_namespaced_custom_object(*CDI, "live")
    wait_until(lambda: _not_found(k8s, name), what="the cdrom no longer Ready")
    wait_until(lambda: _dv_gone(k8s, "live"), what="the DataVolume gone")

    def terminating():
        pvc = _pvc(k8s, "live")
        return pvc is not None and pvc.metadata.deletion_timestamp is not None

    # the attachment still mounts the PVC: pvc-protection keeps it Terminating
    wait_until(terminating, what="the PVC Terminating")
    holds(terminating, 1.0, what="the PVC Terminating while attached")
    assert k8s.printable(name) == "Running"  # the guest runs on, without the media
    k8s.sub("virtualmachineinstances", name, "reset")
    assert k8s.boots(name)[-1]["kind"] == "disk"  # firmware finds no media in the drive

    k8s.eject_cdrom(name)
    wait_until(lambda: _pvc(k8s, "live") is None, what="the PVC gone after the eject")
