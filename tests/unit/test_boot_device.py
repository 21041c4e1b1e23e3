"""What the event log says a VMI booted from: the first disk in boot order with media attached."""

from __future__ import annotations

from workers.watcher import boot_device


def vmi(cd_order, root_order, cd_volume=True, cd_phase="Ready") -> dict:
    disks = [
        {"name": "rootdisk", "disk": {}, "bootOrder": root_order},
        {"name": "cdrom", "cdrom": {}, "bootOrder": cd_order},
    ]
    volumes = [{"name": "rootdisk", "persistentVolumeClaim": {"claimName": "root"}}]
    status = []
    if cd_volume:
        volumes.append({"name": "cdrom", "dataVolume": {"name": "ff-dv", "hotpluggable": True}})
        status.append({"name": "cdrom", "phase": cd_phase, "hotplugVolume": {}})
    return {
        "spec": {"domain": {"devices": {"disks": disks}}, "volumes": volumes},
        "status": {"phase": "Running", "volumeStatus": status},
    }


def test_cd_first_with_its_volume_attached_boots_cd():
    assert boot_device(vmi(1, 2)) == ("Cd", "ff-dv")


def test_an_empty_or_not_yet_attached_cd_falls_through_to_the_disk():
    assert boot_device(vmi(1, 2, cd_volume=False)) == ("Hdd", "root")
    assert boot_device(vmi(1, 2, cd_phase="AttachedToNode")) == ("Hdd", "root")


def test_disk_first_boots_the_disk_even_with_media_inserted():
    assert boot_device(vmi(2, 1)) == ("Hdd", "root")


def test_no_media_at_all_boots_nothing():
    assert boot_device({"spec": {"domain": {"devices": {"disks": []}}}}) == ("None", "")
