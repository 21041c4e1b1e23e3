"""The BMC itself, through sushy against a real gunicorn: clock, reset, address, protocols."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import requests
import sushy
from sushy import exceptions as sushy_exceptions
from sushy.auth import SessionOrBasicAuth

from app import create_app
from fleetfish.settings import Settings
from tests.api.api_gunicorn import running_gunicorn
from tests.api.api_helpers import ADMIN, PASSWORDS, SYS, error_ids, related

MANAGER = f"/redfish/v1/Managers/{SYS}"
OTHER_MANAGER = "/redfish/v1/Managers/lab-a.ostest-worker-0"


class Api(str):
    """The service's base URL; remembers the sushy logins to end while it still runs."""

    auths: list[SessionOrBasicAuth]


@pytest.fixture
def api(redis_url, users_file, systems, tmp_path):
    with running_gunicorn(redis_url, users_file, tmp_path) as (port, _):
        url = Api(f"http://127.0.0.1:{port}")
        url.auths = []
        yield url
        # Logged out here: sushy would otherwise log out when collected, from a later test,
        # against a server that is gone (and retry for a while).
        for auth in url.auths:
            auth.close()


def bmc(api: Api, user: str = "admin") -> sushy.Sushy:
    auth = SessionOrBasicAuth(username=user, password=PASSWORDS[user])
    api.auths.append(auth)
    return sushy.Sushy(f"{api}/redfish/v1", auth=auth)


def login(api: str, user: str) -> str:
    reply = requests.post(
        f"{api}/redfish/v1/SessionService/Sessions",
        json={"UserName": user, "Password": PASSWORDS[user]},
        timeout=10,
    )
    assert reply.status_code == 201, reply.text
    return reply.headers["X-Auth-Token"]


def token_works(api: str, token: str) -> bool:
    reply = requests.get(f"{api}/redfish/v1/Systems", headers={"X-Auth-Token": token}, timeout=10)
    assert reply.status_code in (200, 401), reply.text
    return reply.status_code == 200


def test_clock_reads_utc_and_a_patch_within_tolerance_is_accepted(api):
    manager = bmc(api).get_manager(MANAGER)
    shown = datetime.fromisoformat(manager.datetime)
    assert abs((shown - datetime.now(UTC)).total_seconds()) < 5
    assert manager.datetimelocaloffset == "+00:00"
    # What Ironic's clock step sends: the conductor's time, microseconds and offset included.
    manager.set_datetime(datetime.now(UTC).isoformat(), "+00:00")
    assert abs((datetime.fromisoformat(manager.datetime) - shown).total_seconds()) < 5


def test_a_clock_far_off_is_refused_naming_the_property(api):
    manager = bmc(api).get_manager(MANAGER)
    far = (datetime.now(UTC) - timedelta(days=3)).isoformat()
    with pytest.raises(sushy_exceptions.BadRequestError) as refused:
        manager.set_datetime(far)
    assert "DateTime" in str(refused.value)
    with pytest.raises(sushy_exceptions.BadRequestError) as refused:
        manager.set_datetime(datetime_local_offset="+02:00")
    assert "DateTimeLocalOffset" in str(refused.value)


def test_manager_reset_ends_the_sessions_scoped_to_that_system_only(api):
    # "labeled" sees lab-a.ostest-master-0 alone; "operator" all of lab-a; "admin" everything.
    labeled, operator, admin = login(api, "labeled"), login(api, "operator"), login(api, "admin")
    manager = bmc(api).get_manager(MANAGER)
    assert manager.get_allowed_reset_manager_values() == {
        sushy.RESET_MANAGER_GRACEFUL_RESTART,
        sushy.RESET_MANAGER_FORCE_RESTART,
    }

    bmc(api).get_manager(OTHER_MANAGER).reset_manager(sushy.RESET_MANAGER_FORCE_RESTART)
    assert token_works(api, labeled)

    manager.reset_manager(sushy.RESET_MANAGER_GRACEFUL_RESTART)
    assert not token_works(api, labeled)
    assert token_works(api, operator) and token_works(api, admin)
    # The BMC answers again at once, with a new session for that user.
    assert token_works(api, login(api, "labeled"))


def test_ethernet_interface_and_protocols_show_how_the_service_was_reached(api):
    manager = bmc(api).get_manager(MANAGER)
    [interface] = manager.ethernet_interfaces.get_members()
    assert interface.json["IPv4Addresses"] == [{"Address": "127.0.0.1"}]
    protocols = requests.get(
        f"{api}{MANAGER}/NetworkProtocol", auth=("admin", PASSWORDS["admin"]), timeout=10
    )
    body = protocols.json()
    port = int(api.rsplit(":", 1)[-1])
    assert body["HTTP"] == {"ProtocolEnabled": True, "Port": port}
    assert body["HTTPS"] == {"ProtocolEnabled": False}
    assert body["IPMI"] == {"ProtocolEnabled": False}


def test_names_and_https_as_configured(redis_url, users_file, systems):
    app = create_app(
        Settings(redis_url=redis_url, users_file=users_file, tls_cert="c", tls_key="k", port=8443)
    )
    client = app.test_client()
    headers = {**ADMIN, "Host": "bmc.example.com:8443"}
    body = client.get(f"{MANAGER}/NetworkProtocol", headers=headers).get_json()
    assert body["HTTPS"] == {"ProtocolEnabled": True, "Port": 8443}
    assert body["HTTP"] == {"ProtocolEnabled": False}
    assert (body["HostName"], body["FQDN"]) == ("bmc", "bmc.example.com")
    interface = client.get(
        f"{MANAGER}/EthernetInterfaces/BMC", headers={**ADMIN, "Host": "[fd00::5]:8443"}
    ).get_json()
    assert interface["IPv6Addresses"] == [{"Address": "fd00::5"}]


def test_patch_refuses_other_properties_and_bad_times(client, systems):
    resp = client.patch(MANAGER, json={"Name": "x", "DateTime": "yesterday"}, headers=ADMIN)
    assert resp.status_code == 400
    assert error_ids(resp) == ["PropertyNotWritable", "PropertyValueFormatError"]
    assert related(resp) == ["#/Name", "#/DateTime"]
    # A time without an offset is not a point in time.
    resp = client.patch(MANAGER, json={"DateTime": "2030-01-01T00:00:00"}, headers=ADMIN)
    assert error_ids(resp) == ["PropertyValueFormatError"]
    resp = client.post(f"{MANAGER}/Actions/Manager.Reset", json={"ResetType": "On"}, headers=ADMIN)
    assert error_ids(resp) == ["ActionParameterValueNotInList"]
