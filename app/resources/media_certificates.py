"""Certificates of a VirtualMedia: the CA certificates its https image imports trust.

Kept in Redis per system and device; the worker puts them in a ConfigMap that the import's
DataVolume names as ``certConfigMap`` (workers/media.py ``trust_configmap``). While a device has
certificates they replace the deployment's CA (FLEETFISH_IMAGE_CA_CONFIGMAP) for its imports.
Registered under Systems and Managers like the VirtualMedia itself.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import ssl

from flask import Blueprint, request

from app.context import not_found, store, visible_system
from app.errors import RedfishError, message
from app.protocol import collection, json_body, no_content, resource
from app.resources.virtual_media import PARENTS
from app.validate import Param, patch_object, pointer, raise_if
from fleetfish.store import DEVICES

log = logging.getLogger("fleetfish.api")
bp = Blueprint("media_certificates", __name__)

CERTS = "/<system_id>/VirtualMedia/<device>/Certificates"
TYPES = ("PEM", "PEMchain")
WRITABLE = {"CertificateString": Param(str), "CertificateType": Param(str, allowed=TYPES)}
# More would only slow every import of the device; a bundle fits in one PEMchain.
MAX_CERTIFICATES = 16
MAX_PEM_BYTES = 32 * 1024
_PEM_BLOCK = re.compile(
    r"-----BEGIN CERTIFICATE-----\s*([A-Za-z0-9+/=\s]+?)\s*-----END CERTIFICATE-----"
)


def _uri(system_id: str, device: str) -> str:
    parent = PARENTS.get((request.blueprint or "").replace("_certs", "_media"), "")
    return f"{parent or '/redfish/v1/Systems'}/{system_id}/VirtualMedia/{device}/Certificates"


def _visible(system_id: str, device: str) -> None:
    visible_system(system_id)
    if device not in DEVICES:
        raise not_found("VirtualMedia", device)


def der_blocks(pem: str) -> list[bytes]:
    """The DER bytes of each certificate in a PEM text; [] if any block is not one OpenSSL
    loads as a certificate."""
    blocks = [base64.b64decode(b, validate=False) for b in _PEM_BLOCK.findall(pem)]
    if not blocks:
        return []
    try:
        ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError):
        return []
    return blocks


def render_certificate(uri: str, cert_id: str, pem: str) -> dict:
    blocks = der_blocks(pem)
    return {
        "@odata.id": f"{uri}/{cert_id}",
        "@odata.type": "#Certificate.v1_11_0.Certificate",
        "Id": cert_id,
        "Name": f"CA certificate {cert_id}",
        "CertificateString": pem,
        "CertificateType": "PEMchain" if len(blocks) > 1 else "PEM",
        "CertificateUsageTypes": ["Device"],
        "Fingerprint": hashlib.sha256(blocks[0] if blocks else b"").hexdigest().upper(),
        "FingerprintHashAlgorithm": "TLS_HASH_ALG_SHA256",
    }


@bp.get(CERTS)
def certificates(system_id: str, device: str):
    _visible(system_id, device)
    uri = _uri(system_id, device)
    members = [f"{uri}/{i}" for i in store().media_certificates(system_id, device)]
    body = collection(uri, "#CertificateCollection.CertificateCollection", "Certificates", members)
    return resource(body, allow=("GET", "HEAD", "POST"))


@bp.post(CERTS)
def add_certificate(system_id: str, device: str):
    _visible(system_id, device)
    body = json_body(allow_empty=False)
    values, errors = patch_object(body, WRITABLE, set())
    for name in WRITABLE:
        if name not in body:
            errors.append(message("PropertyMissing", [name], [pointer(name)]))
    raise_if(errors)
    pem = values["CertificateString"]
    blocks = der_blocks(pem) if len(pem) <= MAX_PEM_BYTES else []
    if not blocks or (values["CertificateType"] == "PEM" and len(blocks) != 1):
        shown = pem[:40] + ("..." if len(pem) > 40 else "")
        raise RedfishError(
            400,
            "PropertyValueFormatError",
            [shown, "CertificateString"],
            [pointer("CertificateString")],
        )
    if len(store().media_certificates(system_id, device)) >= MAX_CERTIFICATES:
        raise RedfishError(400, "CreateLimitReachedForResource")
    cert_id = store().add_media_certificate(system_id, device, pem.strip() + "\n")
    uri = _uri(system_id, device)
    log.info("CA certificate %s added to %s system=%s", cert_id, device, system_id)
    shown = render_certificate(uri, cert_id, pem.strip() + "\n")
    return resource(shown, status=201, headers={"Location": f"{uri}/{cert_id}"})


@bp.get(f"{CERTS}/<cert_id>")
def certificate(system_id: str, device: str, cert_id: str):
    _visible(system_id, device)
    pem = store().media_certificates(system_id, device).get(cert_id)
    if pem is None:
        raise not_found("Certificate", cert_id)
    body = render_certificate(_uri(system_id, device), cert_id, pem)
    return resource(body, allow=("GET", "HEAD", "DELETE"))


@bp.delete(f"{CERTS}/<cert_id>")
def delete_certificate(system_id: str, device: str, cert_id: str):
    _visible(system_id, device)
    if not store().delete_media_certificate(system_id, device, cert_id):
        raise not_found("Certificate", cert_id)
    log.info("CA certificate %s removed from %s system=%s", cert_id, device, system_id)
    return no_content(allow=("GET", "HEAD", "DELETE"))
