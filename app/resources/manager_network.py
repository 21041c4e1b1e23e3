"""The BMC's own network face: its EthernetInterface (the address the service was reached at) and
its ManagerNetworkProtocol (HTTP/HTTPS as the service runs)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from flask import Blueprint, request

from app.context import not_found, settings, visible_system
from app.protocol import collection, resource

bp = Blueprint("manager_network", __name__)

BASE = "/redfish/v1/Managers/<system_id>"
INTERFACE_ID = "BMC"
OK = {"State": "Enabled", "Health": "OK"}
# Protocols a BMC commonly offers and this one does not: shown off so tools need not guess.
NOT_OFFERED = ("IPMI", "SSH", "SSDP", "SNMP", "Telnet")


def service_host() -> str:
    """The host part of the URL the client used to reach the service (its Host header)."""
    return urlsplit(f"//{request.host}").hostname or ""


def addresses(host: str) -> dict:
    """IPv4Addresses/IPv6Addresses for an address literal, HostName/FQDN for a name."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        names = {"HostName": host.split(".", 1)[0]}
        return {**names, "FQDN": host} if "." in host else names
    key = "IPv4Addresses" if address.version == 4 else "IPv6Addresses"
    return {key: [{"Address": str(address)}]}


def _interfaces_uri(system_id: str) -> str:
    return f"/redfish/v1/Managers/{system_id}/EthernetInterfaces"


@bp.get(f"{BASE}/EthernetInterfaces")
def interfaces(system_id: str):
    visible_system(system_id)
    uri = _interfaces_uri(system_id)
    body = collection(
        uri,
        "#EthernetInterfaceCollection.EthernetInterfaceCollection",
        "BMC Ethernet Interfaces",
        [f"{uri}/{INTERFACE_ID}"],
    )
    return resource(body)


@bp.get(f"{BASE}/EthernetInterfaces/<interface_id>")
def interface(system_id: str, interface_id: str):
    visible_system(system_id)
    if interface_id != INTERFACE_ID:
        raise not_found("EthernetInterface", interface_id)
    body = {
        "@odata.id": f"{_interfaces_uri(system_id)}/{INTERFACE_ID}",
        "@odata.type": "#EthernetInterface.v1_12_4.EthernetInterface",
        "Id": INTERFACE_ID,
        "Name": "BMC address",
        "Description": "The address of the fleetfish service this BMC is reached at.",
        "InterfaceEnabled": True,
        "Status": OK,
        **addresses(service_host()),
    }
    return resource(body)


@bp.get(f"{BASE}/NetworkProtocol")
def network_protocol(system_id: str):
    visible_system(system_id)
    conf = settings()
    tls = bool(conf.tls_cert and conf.tls_key)
    host = service_host()
    names = addresses(host)
    body = {
        "@odata.id": f"/redfish/v1/Managers/{system_id}/NetworkProtocol",
        "@odata.type": "#ManagerNetworkProtocol.v1_12_0.ManagerNetworkProtocol",
        "Id": "NetworkProtocol",
        "Name": "BMC network protocols",
        "Description": "The protocols of the fleetfish service, shared by every BMC it serves.",
        "Status": OK,
        **({"HostName": names["HostName"]} if "HostName" in names else {}),
        **({"FQDN": names["FQDN"]} if "FQDN" in names else {}),
        # One listener, HTTP or HTTPS: what gunicorn serves with these settings.
        "HTTP": {"ProtocolEnabled": not tls, **({} if tls else {"Port": conf.port})},
        "HTTPS": {"ProtocolEnabled": tls, **({"Port": conf.port} if tls else {})},
        **{name: {"ProtocolEnabled": False} for name in NOT_OFFERED},
    }
    return resource(body)
