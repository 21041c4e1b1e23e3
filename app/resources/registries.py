"""Registries: the DMTF Base message registry bundled in app/data (BSD 3-Clause, see app/data)."""

from __future__ import annotations

import json

from flask import Blueprint, Response

from app.context import not_found
from app.errors import base_registry
from app.protocol import collection, resource

bp = Blueprint("registries", __name__)

REGISTRIES = "/redfish/v1/Registries"


def _base_id() -> str:
    return base_registry()["Id"]  # e.g. Base.1.22.1


@bp.get(REGISTRIES)
def registries():
    members = [f"{REGISTRIES}/Base"]
    body = collection(
        REGISTRIES,
        "#MessageRegistryFileCollection.MessageRegistryFileCollection",
        "Registries",
        members,
    )
    return resource(body)


@bp.get(f"{REGISTRIES}/<name>")
def registry_file(name: str):
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
