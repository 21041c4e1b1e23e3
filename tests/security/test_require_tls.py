"""FLEETFISH_REQUIRE_TLS refuses credentials over plain HTTP; plain HTTP on a network warns at start."""

from __future__ import annotations

import logging

import pytest
from security_helpers import error_ids

from app import create_app
from fleetfish.settings import Settings
from tests.api.api_helpers import ADMIN, PASSWORDS, SYS_URI

LOGIN = "/redfish/v1/SessionService/Sessions"
CREDENTIALS = {"UserName": "admin", "Password": PASSWORDS["admin"]}


@pytest.fixture
def strict(redis_url, users_file, systems):
    settings = Settings(redis_url=redis_url, users_file=users_file, require_tls=True)
    return create_app(settings).test_client()


def test_basic_auth_over_plain_http_is_refused(strict):
    resp = strict.get(SYS_URI, headers=ADMIN)
    assert resp.status_code == 403
    assert error_ids(resp) == ["AccessDenied"]
    info = resp.get_json()["error"]["@Message.ExtendedInfo"][0]
    assert "FLEETFISH_REQUIRE_TLS" in info["Resolution"] and "https://" in info["Resolution"]
    assert "WWW-Authenticate" not in resp.headers  # asking again over HTTP would not help


def test_session_login_over_plain_http_is_refused(strict):
    resp = strict.post(LOGIN, json=CREDENTIALS)
    assert resp.status_code == 403
    assert error_ids(resp) == ["AccessDenied"]
    assert "X-Auth-Token" not in resp.headers


def test_a_forwarded_proto_header_is_not_trusted_by_the_app(strict):
    """Only gunicorn decides (FORWARDED_ALLOW_IPS); a client's header changes nothing."""
    resp = strict.get(SYS_URI, headers={**ADMIN, "X-Forwarded-Proto": "https"})
    assert resp.status_code == 403


def test_over_https_credentials_work(strict):
    assert strict.get(SYS_URI, headers=ADMIN, base_url="https://localhost").status_code == 200
    login = strict.post(LOGIN, json=CREDENTIALS, base_url="https://localhost")
    assert login.status_code == 201 and login.headers["X-Auth-Token"]
    token = {"X-Auth-Token": login.headers["X-Auth-Token"]}
    assert strict.get(SYS_URI, headers=token, base_url="https://localhost").status_code == 200
    assert strict.get(SYS_URI, headers=token).status_code == 403  # the token is a credential too


def test_open_paths_stay_open_over_plain_http(strict):
    assert strict.get("/redfish/v1/").status_code == 200


def test_without_the_setting_plain_http_works(client, systems):
    assert client.get(SYS_URI, headers=ADMIN).status_code == 200


@pytest.mark.parametrize(
    ("bind", "tls", "warned"),
    [
        ("0.0.0.0", False, True),
        ("10.0.0.5", False, True),
        ("0.0.0.0", True, False),
        ("127.0.0.1", False, False),  # the lab and the tests: nothing leaves the host
    ],
)
def test_plain_http_on_a_network_warns_once_at_start(
    redis_url, users_file, caplog, bind, tls, warned
):
    cert = {"tls_cert": "/etc/tls/cert.pem", "tls_key": "/etc/tls/key.pem"} if tls else {}
    settings = Settings(redis_url=redis_url, users_file=users_file, bind=bind, **cert)
    with caplog.at_level(logging.WARNING, logger="fleetfish.api"):
        create_app(settings)
    lines = [r.getMessage() for r in caplog.records if "plain HTTP" in r.getMessage()]
    assert len(lines) == (1 if warned else 0)
    if warned:
        assert "FLEETFISH_TLS_CERT" in lines[0] and "FLEETFISH_TLS_KEY" in lines[0]
