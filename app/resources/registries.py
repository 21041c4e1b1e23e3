"""Registries: the DMTF Base message registry bundled in app/data (BSD 3-Clause, see app/data)
and fleetfish's BIOS attribute registry (app/bios_attributes.py)."""

from __future__ import annotations

import json

from flask import Blueprint, Response

from app import bios_attributes
from app.context import not_found
from app.errors import base_registry
from app.protocol import collection, resource

bp = Blueprint("registries", __name__)

REGISTRIES = "/redfish/v1/Registries"


def _base_id() -> str:
    return base_registry()["Id"]  # e.g. Base.1.22.1


@bp.get(REGISTRIES)
def registries():
    members = [f"{REGISTRIES}/Base", f"{REGISTRIES}/{bios_attributes.REGISTRY}"]
    body = collection(
        REGISTRIES,
        "#MessageRegistryFileCollection.MessageRegistryFileCollection",
        "Registries",
        members,
    )
    return resource(body)


@bp.get(f"{REGISTRIES}/<name>")
def registry_file(name: str):
    if name == bios_attributes.REGISTRY:
        return resource(_bios_registry_file())
    if name != "Base":
        raise not_found("MessageRegistryFile", name)
    body = {
        "@odata.id": f"{REGISTRIES}/Base",
        "@odata.type": "#MessageRegistryFile.v1_1_5.MessageRegistryFile",
        "Id": "Base",
        "Name": "Base Message Registry File",
        "Registry": _base_id().rsplit(".", 1)[0],
        "Languages": ["en"],
        "Location": [
            {
                "Language": "en",
                "Uri": f"{REGISTRIES}/Base/{_base_id()}",
                "PublicationUri": f"http://redfish.dmtf.org/registries/{_base_id()}.json",
            }
        ],
    }
    return resource(body)


@bp.get(f"{REGISTRIES}/Base/<registry_id>")
def registry(registry_id: str):
    if registry_id != _base_id():
        raise not_found("MessageRegistry", registry_id)
    resp = Response(json.dumps(base_registry()), mimetype="application/json")
    resp.headers["Allow"] = "GET, HEAD"
    return resp


def _bios_registry_file() -> dict:
    name = bios_attributes.REGISTRY
    return {
        "@odata.id": f"{REGISTRIES}/{name}",
        "@odata.type": "#MessageRegistryFile.v1_1_5.MessageRegistryFile",
        "Id": name,
        "Name": "BIOS Attribute Registry File",
        # Registry_name.Major.Minor, the key sushy files the registry under besides its Id.
        "Registry": bios_attributes.REGISTRY_ID.rsplit(".", 1)[0],
        "Languages": ["en"],
        "Location": [
            {"Language": "en", "Uri": f"{REGISTRIES}/{name}/{bios_attributes.REGISTRY_ID}"}
        ],
    }


@bp.get(f"{REGISTRIES}/{bios_attributes.REGISTRY}/<bios_registry_id>")
def bios_registry(bios_registry_id: str):
    if bios_registry_id != bios_attributes.REGISTRY_ID:
        raise not_found("AttributeRegistry", bios_registry_id)
    uri = f"{REGISTRIES}/{bios_attributes.REGISTRY}/{bios_registry_id}"
    return resource(bios_attributes.attribute_registry(uri))
