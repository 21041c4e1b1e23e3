"""FLEETFISH_TLS_CERT/KEY: gunicorn serves HTTPS only (certificate from lab/tls.py)."""

from __future__ import annotations

import pytest
import requests

from lab.tls import self_signed
from tests.api.api_gunicorn import running_gunicorn
from tests.api.api_helpers import PASSWORDS, SYS_URI


@pytest.fixture
def https_api(redis_url, users_file, systems, tmp_path):
    cert, key = self_signed(tmp_path / "tls")
    # FLEETFISH_REQUIRE_TLS: credentials over gunicorn's own TLS count as HTTPS.
    env = {
        "FLEETFISH_TLS_CERT": str(cert),
        "FLEETFISH_TLS_KEY": str(key),
        "FLEETFISH_REQUIRE_TLS": "1",
    }
    with running_gunicorn(redis_url, users_file, tmp_path, **env) as (port, _):
        yield port, cert


def test_https_with_basic_auth_and_sessions(https_api):
    port, cert = https_api
    base = f"https://127.0.0.1:{port}"
    assert requests.get(f"{base}/redfish/v1/", verify=str(cert), timeout=10).status_code == 200
    auth = ("admin", PASSWORDS["admin"])
    system = requests.get(base + SYS_URI, auth=auth, verify=str(cert), timeout=10)
    assert system.status_code == 200
    login = requests.post(
        f"{base}/redfish/v1/SessionService/Sessions",
        json={"UserName": "admin", "Password": PASSWORDS["admin"]},
        verify=str(cert),
        timeout=10,
    )
    assert login.status_code == 201 and login.headers["X-Auth-Token"]


def test_plain_http_gets_no_answer_on_the_tls_port(https_api):
    port, _ = https_api
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}{SYS_URI}", auth=("admin", "x"), timeout=10)


def test_untrusted_certificate_is_refused_by_a_verifying_client(https_api):
    port, _ = https_api
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"https://127.0.0.1:{port}/redfish/v1/", timeout=10)
