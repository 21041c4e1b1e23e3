"""/redfish, the service root, the OData service document and $metadata (all open, no Redis)."""

from __future__ import annotations

import hashlib
import uuid

from flask import Blueprint, Response

from app.context import settings
from app.protocol import resource
from app.query import MAX_LEVELS

bp = Blueprint("service_root", __name__)

REDFISH_VERSION = "1.6.0"

# Schema files whose types the service renders: (file stem, versioned namespace).
SCHEMAS = (
    ("ServiceRoot", "ServiceRoot.v1_20_0"),
    ("ComputerSystemCollection", ""),
    ("ComputerSystem", "ComputerSystem.v1_27_0"),
    ("ManagerCollection", ""),
    ("Manager", "Manager.v1_24_0"),
    ("ManagerNetworkProtocol", "ManagerNetworkProtocol.v1_12_0"),
    ("IPAddresses", "IPAddresses.v1_1_5"),
    ("ChassisCollection", ""),
    ("Chassis", "Chassis.v1_28_0"),
    ("VirtualMediaCollection", ""),
    ("VirtualMedia", "VirtualMedia.v1_6_5"),
    ("ProcessorCollection", ""),
    ("Processor", "Processor.v1_22_0"),
    ("MemoryCollection", ""),
    ("Memory", "Memory.v1_23_0"),
    ("SimpleStorageCollection", ""),
    ("SimpleStorage", "SimpleStorage.v1_3_2"),
    ("StorageCollection", ""),
    ("Storage", "Storage.v1_21_0"),
    ("DriveCollection", ""),
    ("Drive", "Drive.v1_22_0"),
    ("StorageControllerCollection", ""),
    ("StorageController", "StorageController.v1_11_0"),
    ("VolumeCollection", ""),
    ("Settings", "Settings.v1_4_0"),
    ("EthernetInterfaceCollection", ""),
    ("EthernetInterface", "EthernetInterface.v1_12_4"),
    ("SecureBoot", "SecureBoot.v1_1_2"),
    ("Bios", "Bios.v1_2_3"),
    ("CertificateCollection", ""),
    ("Certificate", "Certificate.v1_11_0"),
    ("AttributeRegistry", "AttributeRegistry.v1_4_0"),
    ("LogServiceCollection", ""),
    ("LogService", "LogService.v1_9_0"),
    ("LogEntryCollection", ""),
    ("LogEntry", "LogEntry.v1_21_0"),
    ("TaskService", "TaskService.v1_3_0"),
    ("TaskCollection", ""),
    ("Task", "Task.v1_7_4"),
    ("SessionService", "SessionService.v1_2_0"),
    ("SessionCollection", ""),
    ("Session", "Session.v1_8_0"),
    ("AccountService", "AccountService.v1_18_1"),
    ("ManagerAccountCollection", ""),
    ("ManagerAccount", "ManagerAccount.v1_14_1"),
    ("RoleCollection", ""),
    ("Role", "Role.v1_3_3"),
    ("MessageRegistryFileCollection", ""),
    ("MessageRegistryFile", "MessageRegistryFile.v1_1_5"),
    ("Message", "Message.v1_2_1"),
    ("Resource", "Resource.v1_20_0"),
)

TOP_LEVEL = (
    ("Systems", "/redfish/v1/Systems"),
    ("Managers", "/redfish/v1/Managers"),
    ("Chassis", "/redfish/v1/Chassis"),
    ("Tasks", "/redfish/v1/TaskService"),
    ("SessionService", "/redfish/v1/SessionService"),
    ("AccountService", "/redfish/v1/AccountService"),
    ("Registries", "/redfish/v1/Registries"),
)


def service_uuid() -> str:
    """Stable across processes and replicas of one deployment (derived from its Redis, hashed)."""
    seed = hashlib.sha256(settings().redis_url.encode()).hexdigest()
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fleetfish:{seed}"))


@bp.get("/redfish")
def versions():
    return resource({"v1": "/redfish/v1/"}, etag=False)


@bp.get("/redfish/v1")
def root():
    body = {
        "@odata.id": "/redfish/v1/",
        "@odata.type": "#ServiceRoot.v1_20_0.ServiceRoot",
        "Id": "RootService",
        "Name": "fleetfish Redfish service",
        "RedfishVersion": REDFISH_VERSION,
        "UUID": service_uuid(),
        "Vendor": "fleetfish",
        "Product": "fleetfish KubeVirt BMC",
        "ProtocolFeaturesSupported": {
            "ExcerptQuery": False,
            "ExpandQuery": {
                "ExpandAll": True,
                "Levels": True,
                "Links": True,
                "NoLinks": True,
                "MaxLevels": MAX_LEVELS,
            },
            "FilterQuery": False,
            "OnlyMemberQuery": True,
            "SelectQuery": True,
        },
        "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}},
    }
    for name, uri in TOP_LEVEL:
        body[name] = {"@odata.id": uri}
    return resource(body)


@bp.get("/redfish/v1/odata")
def odata():
    services = [{"name": "Service", "kind": "Singleton", "url": "/redfish/v1/"}]
    services += [{"name": name, "kind": "Singleton", "url": uri} for name, uri in TOP_LEVEL]
    body = {"@odata.context": "/redfish/v1/$metadata", "value": services}
    return resource(body, etag=False)


@bp.get("/redfish/v1/$metadata")
def metadata():
    refs = []
    for stem, versioned in SCHEMAS:
        includes = f'    <edmx:Include Namespace="{stem}"/>\n'
        if versioned:
            includes += f'    <edmx:Include Namespace="{versioned}"/>\n'
        refs.append(
            f'  <edmx:Reference Uri="http://redfish.dmtf.org/schemas/v1/{stem}_v1.xml">\n'
            f"{includes}  </edmx:Reference>\n"
        )
    xml = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">\n'
        + "".join(refs)
        + "  <edmx:DataServices>\n"
        '    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="Service">\n'
        '      <EntityContainer Name="Service" Extends="ServiceRoot.v1_20_0.ServiceContainer"/>\n'
        "    </Schema>\n"
        "  </edmx:DataServices>\n"
        "</edmx:Edmx>\n"
    )
    resp = Response(xml, mimetype="application/xml")
    resp.headers["Allow"] = "GET, HEAD"
    return resp
