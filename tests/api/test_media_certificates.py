"""VirtualMedia Certificates (CA certificates of https imports) and VerifyCertificate."""

from __future__ import annotations

import pytest
from api_helpers import ADMIN, CD_URI, SYS, error_ids, related

from app import create_app
from fleetfish.settings import Settings
from lab.tls import private_ca

CERTS = f"{CD_URI}/Certificates"


@pytest.fixture(scope="module")
def ca_pem(tmp_path_factory) -> str:
    ca, _, _ = private_ca(tmp_path_factory.mktemp("ca"))
    return ca.read_text()


def test_certificates_are_added_listed_read_and_removed(client, store, systems, ca_pem):
    media = client.get(CD_URI, headers=ADMIN).get_json()
    assert media["VerifyCertificate"] is True
    assert media["Certificates"] == {"@odata.id": CERTS}
    assert client.get(CERTS, headers=ADMIN).get_json()["Members"] == []
    reply = client.post(
        CERTS, json={"CertificateString": ca_pem, "CertificateType": "PEM"}, headers=ADMIN
    )
    assert reply.status_code == 201, reply.get_json()
    location = reply.headers["Location"]
    assert location == f"{CERTS}/1"
    cert = client.get(location, headers=ADMIN).get_json()
    assert cert["CertificateString"].strip() == ca_pem.strip()
    assert len(cert["Fingerprint"]) == 64
    assert client.get(CERTS, headers=ADMIN).get_json()["Members"] == [{"@odata.id": location}]
    assert list(store.media_certificates(SYS, "Cd").values()) == [ca_pem.strip() + "\n"]
    # The same collection through the Manager.
    manager = f"/redfish/v1/Managers/{SYS}/VirtualMedia/Cd/Certificates"
    assert client.get(manager, headers=ADMIN).get_json()["Members"] == [
        {"@odata.id": f"{manager}/1"}
    ]
    assert client.delete(location, headers=ADMIN).status_code == 204
    assert client.get(location, headers=ADMIN).status_code == 404
    assert store.media_certificates(SYS, "Cd") == {}


def test_bad_certificates_are_refused(client, store, systems, ca_pem):
    cases = [
        (
            {"CertificateString": "not a certificate", "CertificateType": "PEM"},
            "PropertyValueFormatError",
        ),
        (
            {"CertificateString": ca_pem + ca_pem, "CertificateType": "PEM"},
            "PropertyValueFormatError",
        ),
        ({"CertificateString": ca_pem, "CertificateType": "PKCS7"}, "PropertyValueNotInList"),
        ({"CertificateString": ca_pem}, "PropertyMissing"),
        ({"CertificateString": ca_pem, "CertificateType": "PEM", "Key": "x"}, "PropertyUnknown"),
    ]
    broken = ca_pem.replace(ca_pem.splitlines()[3], "A" * 64)
    cases.append(
        ({"CertificateString": broken, "CertificateType": "PEM"}, "PropertyValueFormatError")
    )
    for body, message_id in cases:
        reply = client.post(CERTS, json=body, headers=ADMIN)
        assert reply.status_code == 400, body
        assert message_id in error_ids(reply)
    assert store.media_certificates(SYS, "Cd") == {}
    chain = client.post(
        CERTS,
        json={"CertificateString": ca_pem + ca_pem, "CertificateType": "PEMchain"},
        headers=ADMIN,
    )
    assert chain.status_code == 201


def test_verify_certificate_false_needs_the_operator_setting(client, store, systems, app_settings):
    reply = client.patch(CD_URI, json={"VerifyCertificate": False}, headers=ADMIN)
    assert (reply.status_code, error_ids(reply)) == (400, ["PropertyValueNotInList"])
    assert related(reply) == ["#/VerifyCertificate"]
    assert (
        "FLEETFISH_MEDIA_ALLOW_UNVERIFIED"
        in reply.get_json()["error"]["@Message.ExtendedInfo"][0]["Resolution"]
    )
    reply = client.patch(CD_URI, json={"Image": "http://x/y.iso"}, headers=ADMIN)
    assert (reply.status_code, error_ids(reply)) == (400, ["PropertyNotWritable"])
    assert client.get(CD_URI, headers=ADMIN).get_json()["VerifyCertificate"] is True

    allowing = create_app(
        Settings(
            redis_url=app_settings.redis_url,
            users_file=app_settings.users_file,
            media_allow_unverified=True,
        )
    ).test_client()
    stale = allowing.patch(
        CD_URI, json={"VerifyCertificate": False}, headers={**ADMIN, "If-Match": '"x"'}
    )
    assert stale.status_code == 412
    reply = allowing.patch(CD_URI, json={"VerifyCertificate": False}, headers=ADMIN)
    assert reply.status_code == 200
    assert reply.get_json()["VerifyCertificate"] is False
    assert store.get_media(SYS, "Cd")["verify_certificate"] == "0"
    assert client.patch(CD_URI, json={"VerifyCertificate": True}, headers=ADMIN).status_code == 200
    assert store.get_media(SYS, "Cd")["verify_certificate"] == "1"
