"""The VM's disks as Redfish storage: the Storage controller (its Controllers and an empty
Volumes), and one Drive per KubeVirt disk or lun under the Chassis."""

from __future__ import annotations

from flask import Blueprint

from app.context import not_found, reads_system, visible_system
from app.errors import RedfishError
from app.protocol import READ, collection, json_body, resource
from fleetfish.mirror import storage_disks

bp = Blueprint("storage", __name__)

OK = {"State": "Enabled", "Health": "OK"}
# KubeVirt disk bus -> Redfish Protocol: virtio-blk is a PCI device; Redfish has no plain SCSI,
# SAS is its SCSI transport.
PROTOCOLS = {"virtio": "PCIe", "sata": "SATA", "usb": "USB", "scsi": "SAS"}
STORAGE_ID = "1"


def _uri(system_id: str, part: str) -> str:
    return f"/redfish/v1/Systems/{system_id}/{part}"


def drive_uri(system_id: str, drive_id: str = "") -> str:
    """Drives live under the Chassis (the system's own Id), where current Redfish puts them."""
    base = f"/redfish/v1/Chassis/{system_id}/Drives"
    return f"{base}/{drive_id}" if drive_id else base


def disk_model(disk: dict) -> str:
    # What the guest reads: QEMU names its emulated SATA and SCSI disks so; virtio-blk has none.
    return "QEMU HARDDISK" if disk.get("bus") in ("sata", "scsi") else "virtio-blk"


def _description(disk: dict, root: bool) -> str:
    volume = disk.get("volume") or {}
    text = f"KubeVirt {disk.get('kind', 'disk')} on bus {disk.get('bus') or 'virtio'}"
    if volume:
        text += f", {volume.get('kind')} {volume.get('name')}"
    return text + (", root disk (boots first)" if root else "")


def _drives(doc: dict) -> dict[str, dict]:
    """Drive resources by Id (the KubeVirt disk name), the root disk first."""
    drives = {}
    for index, disk in enumerate(storage_disks(doc)):
        name = disk.get("name") or f"disk{index}"
        drive = {
            "@odata.type": "#Drive.v1_22_0.Drive",
            "Id": name,
            "Name": name,
            "Description": _description(disk, index == 0),
            "Model": disk_model(disk),
            "Manufacturer": "KubeVirt",
            # The guest sees QEMU's disks as rotational, so IPA's "rotational" hint matches HDD.
            "MediaType": "HDD",
            "Status": OK,
        }
        if disk.get("sizeBytes"):
            drive["CapacityBytes"] = int(disk["sizeBytes"])
        if disk.get("serial"):
            drive["SerialNumber"] = disk["serial"]
        if disk.get("bus") in PROTOCOLS:
            drive["Protocol"] = PROTOCOLS[disk["bus"]]
        drives[name] = drive
    return drives


def storage_members(doc: dict) -> dict[str, dict]:
    """The members of ``/Systems/{id}/Storage``: one virtual controller holding every disk."""
    uri = _uri(doc["id"], f"Storage/{STORAGE_ID}")
    links = [{"@odata.id": drive_uri(doc["id"], name)} for name in _drives(doc)]
    return {
        STORAGE_ID: {
            "@odata.type": "#Storage.v1_21_0.Storage",
            "Id": STORAGE_ID,
            "Name": "Virtual disk controller",
            "Description": "The VM's disks, the root disk first",
            "Drives": links,
            "Drives@odata.count": len(links),
            "Controllers": {"@odata.id": f"{uri}/Controllers"},
            # No RAID: the disks are drives only (Ironic then sizes from the drives).
            "Volumes": {"@odata.id": f"{uri}/Volumes"},
            "Status": OK,
        }
    }


def _controllers(doc: dict) -> dict[str, dict]:
    protocols = sorted(
        {PROTOCOLS[d["bus"]] for d in storage_disks(doc) if d.get("bus") in PROTOCOLS}
    )
    return {
        "1": {
            "@odata.type": "#StorageController.v1_11_0.StorageController",
            "Id": "1",
            "Name": "Virtual disk controller",
            "Manufacturer": "KubeVirt",
            "SupportedControllerProtocols": ["PCIe"],
            "SupportedDeviceProtocols": protocols,
            "SupportedRAIDTypes": [],
            "Status": OK,
        }
    }


def _storage_doc(system_id: str, storage_id: str) -> dict:
    doc = visible_system(system_id)
    if storage_id != STORAGE_ID:
        raise not_found("Storage", storage_id)
    return doc


@reads_system()
def drives(system_id: str):
    members = [drive_uri(system_id, name) for name in _drives(visible_system(system_id))]
    kind = "#DriveCollection.DriveCollection"
    return resource(collection(drive_uri(system_id), kind, "Drives", members))


@reads_system()
def drive(system_id: str, drive_id: str):
    found = _drives(visible_system(system_id))
    if drive_id not in found:
        raise not_found("Drive", drive_id)
    return resource({"@odata.id": drive_uri(system_id, drive_id), **found[drive_id]})


@reads_system()
def controllers(system_id: str, storage_id: str):
    uri = _uri(system_id, f"Storage/{storage_id}/Controllers")
    members = [f"{uri}/{m}" for m in _controllers(_storage_doc(system_id, storage_id))]
    kind = "#StorageControllerCollection.StorageControllerCollection"
    return resource(collection(uri, kind, "Storage Controllers", members))


@reads_system()
def controller(system_id: str, storage_id: str, controller_id: str):
    found = _controllers(_storage_doc(system_id, storage_id))
    if controller_id not in found:
        raise not_found("StorageController", controller_id)
    uri = _uri(system_id, f"Storage/{storage_id}/Controllers/{controller_id}")
    return resource({"@odata.id": uri, **found[controller_id]})


VOLUMES_ALLOW = (*READ, "POST")


@reads_system()
def volumes(system_id: str, storage_id: str):
    _storage_doc(system_id, storage_id)
    uri = _uri(system_id, f"Storage/{storage_id}/Volumes")
    body = collection(uri, "#VolumeCollection.VolumeCollection", "Volumes", [])
    body["@Redfish.OperationApplyTimeSupport"] = {
        "@odata.type": "#Settings.v1_4_0.OperationApplyTimeSupport",
        "SupportedValues": ["Immediate"],
    }
    return resource(body, allow=VOLUMES_ALLOW)


def create_volume(system_id: str, storage_id: str):
    """Always refused: a KubeVirt disk is made by adding a volume to the VM, not by RAID. The
    collection takes POST so a RAID client gets this answer instead of a bare 405."""
    _storage_doc(system_id, storage_id)
    json_body()
    raise RedfishError(400, "ActionNotSupported", ["create volume"])


STORAGE = "/redfish/v1/Systems/<system_id>/Storage/<storage_id>"
CHASSIS_DRIVES = "/redfish/v1/Chassis/<system_id>/Drives"
bp.add_url_rule(CHASSIS_DRIVES, "drives", drives, methods=["GET"])
bp.add_url_rule(f"{CHASSIS_DRIVES}/<drive_id>", "drive", drive, methods=["GET"])
bp.add_url_rule(f"{STORAGE}/Controllers", "controllers", controllers, methods=["GET"])
bp.add_url_rule(f"{STORAGE}/Controllers/<controller_id>", "controller", controller, methods=["GET"])
bp.add_url_rule(f"{STORAGE}/Volumes", "volumes", volumes, methods=["GET"])
bp.add_url_rule(f"{STORAGE}/Volumes", "create_volume", create_volume, methods=["POST"])
