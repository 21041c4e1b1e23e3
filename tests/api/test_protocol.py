"""DSP0266 protocol behaviour: open root, headers, slashes, HEAD, error bodies, Redis down."""

from __future__ import annotations

import pytest

from app import create_app
from fleetfish.settings import Settings
from tests.api.api_helpers import ADMIN, INSERT_URI, SYS_URI, error_ids, free_port_url

OPEN = ["/redfish", "/redfish/v1/", "/redfish/v1", "/redfish/v1/odata", "/redfish/v1/$metadata"]


@pytest.mark.parametrize("path", OPEN)
def test_open_paths_need_no_credentials(client, path):
    resp = client.get(path)
    assert resp.status_code == 200
    assert resp.headers["OData-Version"] == "4.0"


@pytest.mark.parametrize(
    "path",
    ["/redfish/v1/Systems", SYS_URI, "/redfish/v1/SessionService/Sessions", "/redfish/v1/nowhere"],
)
def test_everything_else_needs_credentials(client, systems, path):
    resp = client.get(path)
    assert resp.status_code == 401
    assert error_ids(resp) == ["NoValidSession"]
    assert resp.headers["WWW-Authenticate"].startswith("Basic")


def test_service_root_fields(client):
    root = client.get("/redfish/v1/").get_json()
    assert root["Id"] == "RootService"
    assert root["Vendor"] == "fleetfish"
    assert tuple(int(x) for x in root["RedfishVersion"].split(".")) >= (1, 6, 0)
    assert root["Links"]["Sessions"]["@odata.id"] == "/redfish/v1/SessionService/Sessions"
    for name in (
        "Systems",
        "Managers",
        "Chassis",
        "Tasks",
        "SessionService",
        "AccountService",
        "Registries",
    ):
        assert root[name]["@odata.id"].startswith("/redfish/v1/")
    assert root["UUID"] and root["@odata.type"].startswith("#ServiceRoot.")
    assert client.get("/redfish").get_json() == {"v1": "/redfish/v1/"}


def test_metadata_references_schema_files(client):
    resp = client.get("/redfish/v1/$metadata")
    text = resp.get_data(as_text=True)
    assert resp.mimetype == "application/xml"
    assert 'Uri="http://redfish.dmtf.org/schemas/v1/ComputerSystem_v1.xml"' in text
    assert 'Uri="http://redfish.dmtf.org/schemas/v1/VirtualMedia_v1.xml"' in text
    assert "ServiceContainer" in text


def test_resource_headers(client, systems):
    resp = client.get(SYS_URI, headers=ADMIN)
    assert resp.status_code == 200
    assert resp.headers["Content-Type"] == "application/json; charset=utf-8"
    assert resp.headers["Cache-Control"] == "no-cache"
    assert resp.headers["OData-Version"] == "4.0"
    assert "PATCH" in resp.headers["Allow"] and "GET" in resp.headers["Allow"]
    assert resp.headers["Link"] == (
        "<http://redfish.dmtf.org/schemas/v1/ComputerSystem.v1_27_0.json>; rel=describedby"
    )
    body = resp.get_json()
    assert resp.headers["ETag"] == body["@odata.etag"]
    assert body["@odata.context"].startswith("/redfish/v1/$metadata#ComputerSystem")


def test_trailing_slash_is_tolerated_without_redirect(client, systems):
    plain = client.get("/redfish/v1/Systems", headers=ADMIN)
    slashed = client.get("/redfish/v1/Systems/", headers=ADMIN)
    assert plain.status_code == slashed.status_code == 200
    assert plain.get_json() == slashed.get_json()


def test_head_has_headers_and_no_body(client, systems):
    resp = client.head(SYS_URI, headers=ADMIN)
    assert resp.status_code == 200
    assert resp.data == b""
    assert resp.headers["ETag"]


def test_405_carries_allow_and_a_redfish_body(client, systems):
    resp = client.delete(SYS_URI, headers=ADMIN)
    assert resp.status_code == 405
    assert set(resp.headers["Allow"].replace(" ", "").split(",")) >= {"GET", "PATCH"}
    assert error_ids(resp) == ["OperationNotAllowed"]


def test_404_unknown_uri_and_unknown_system(client, systems):
    resp = client.get("/redfish/v1/Nothing", headers=ADMIN)
    assert resp.status_code == 404
    assert resp.get_json()["error"]["@Message.ExtendedInfo"][0]["MessageId"].startswith("Base.1.")
    resp = client.get("/redfish/v1/Systems/lab-a.missing", headers=ADMIN)
    assert resp.status_code == 404
    assert error_ids(resp) == ["ResourceNotFound"]


def test_415_for_a_non_json_body(client, systems):
    resp = client.post(INSERT_URI, data="Image=x", headers={**ADMIN, "Content-Type": "text/plain"})
    assert resp.status_code == 415
    assert "error" in resp.get_json()


def test_413_for_an_oversized_body(redis_url, users_file, systems):
    app = create_app(Settings(redis_url=redis_url, users_file=users_file, max_body_bytes=1024))
    body = '{"Image": "http://h/' + "a" * 4096 + '.iso"}'
    resp = app.test_client().post(
        INSERT_URI, data=body, headers={**ADMIN, "Content-Type": "application/json"}
    )
    assert resp.status_code == 413
    assert error_ids(resp) == ["PayloadTooLarge"]


def test_malformed_json(client, systems):
    resp = client.patch(
        SYS_URI, data="{nope", headers={**ADMIN, "Content-Type": "application/json"}
    )
    assert resp.status_code == 400
    assert error_ids(resp) == ["MalformedJSON"]
    body = resp.get_json()["error"]
    assert body["code"] == body["@Message.ExtendedInfo"][0]["MessageId"]
    info = body["@Message.ExtendedInfo"][0]
    assert {
        "@odata.type",
        "MessageId",
        "Message",
        "MessageArgs",
        "Severity",
        "Resolution",
        "RelatedProperties",
    } <= set(info)


def test_redis_down_gives_503_with_retry_after(users_file):
    app = create_app(Settings(redis_url=free_port_url(), users_file=users_file))
    client = app.test_client()
    assert client.get("/redfish/v1/").status_code == 200  # the root never needs Redis
    resp = client.get("/redfish/v1/Systems", headers=ADMIN)
    assert resp.status_code == 503
    assert error_ids(resp) == ["ServiceTemporarilyUnavailable"]
    assert int(resp.headers["Retry-After"]) > 0
    resp = client.post(INSERT_URI, json={"Image": "http://h/x.iso"}, headers=ADMIN)
    assert resp.status_code == 503


def test_metrics_are_open_and_count_requests(client, systems):
    client.get(SYS_URI, headers=ADMIN)
    text = client.get("/metrics").get_data(as_text=True)
    assert (
        'fleetfish_api_requests_total{method="GET",route="/redfish/v1/Systems/<system_id>",status="200"}'
        in text
    )
    assert "fleetfish_api_request_seconds_bucket" in text


def test_unsupported_odata_version_is_412(client):
    resp = client.get("/redfish/v1/", headers={"OData-Version": "4.1"})
    assert resp.status_code == 412
    assert client.get("/redfish/v1/", headers={"OData-Version": "4.0"}).status_code == 200


def test_unsupported_dollar_query_parameters_are_501_others_ignored(client, systems):
    resp = client.get("/redfish/v1/Systems?$skip=1", headers=ADMIN)
    assert resp.status_code == 501
    assert error_ids(resp) == ["QueryParameterUnsupported"]
    assert client.get("/redfish/v1/Systems?foo=bar", headers=ADMIN).status_code == 200
