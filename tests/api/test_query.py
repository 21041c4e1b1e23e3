"""Query parameters $expand, $select and only, as a fleet tool uses them: one GET instead of N."""

from __future__ import annotations

import pytest

from tests.api.api_helpers import ADMIN, SYS, SYS_URI, basic, error_ids

SYSTEMS = "/redfish/v1/Systems"


def get(client, uri, headers=ADMIN):
    resp = client.get(uri, headers=headers)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()


@pytest.mark.parametrize("expand", [".", "*", ".($levels=1)", "*($levels=1)"])
def test_expanded_members_equal_their_single_gets(client, systems, expand):
    body = get(client, f"{SYSTEMS}?$expand={expand}")
    assert body["Members@odata.count"] == len(systems) == len(body["Members"])
    for member in body["Members"]:
        assert member == get(client, member["@odata.id"])
    assert {m["PowerState"] for m in body["Members"]} == {"Off"}


def test_expansion_keeps_the_scope_of_the_user(client, systems):
    body = get(client, f"{SYSTEMS}?$expand=.", headers=basic("operator"))
    assert [m["Id"] for m in body["Members"]] == [
        s for s in sorted(systems) if s.startswith("lab-a.")
    ]


def test_dot_expands_subordinate_resources_and_tilde_only_links(client, systems):
    dot = get(client, f"{SYS_URI}?$expand=.")
    assert dot["Processors"]["Members@odata.count"] == 1
    assert dot["Processors"] == get(client, f"{SYS_URI}/Processors")
    assert dot["VirtualMedia"]["Members"] == [{"@odata.id": f"{SYS_URI}/VirtualMedia/Cd"}]
    assert dot["Links"]["ManagedBy"] == [{"@odata.id": f"/redfish/v1/Managers/{SYS}"}]

    tilde = get(client, f"{SYS_URI}?$expand=~")
    assert tilde["Processors"] == {"@odata.id": f"{SYS_URI}/Processors"}
    assert tilde["Links"]["ManagedBy"][0] == get(client, f"/redfish/v1/Managers/{SYS}")

    star = get(client, f"{SYS_URI}?$expand=*")
    assert star["Processors"] == dot["Processors"]
    assert star["Links"]["Chassis"][0] == get(client, f"/redfish/v1/Chassis/{SYS}")


def test_two_levels_expand_the_members_resources_too(client, systems):
    body = get(client, f"{SYSTEMS}?$expand=.($levels=2)")
    member = body["Members"][0]
    assert member["Processors"]["Members@odata.count"] == 1
    assert member["Processors"] == get(client, f"{member['@odata.id']}/Processors")


def test_select_returns_only_the_selected_properties(client, systems):
    body = get(client, f"{SYS_URI}?$select=PowerState,Status/Health")
    assert set(body) == {
        "@odata.id",
        "@odata.type",
        "@odata.context",
        "@odata.etag",
        "PowerState",
        "Status",
    }
    assert body["Status"] == {"Health": "OK"}
    assert body["PowerState"] == "Off"


def test_select_through_expanded_members(client, systems):
    body = get(client, f"{SYSTEMS}?$expand=.&$select=Members/PowerState")
    assert len(body["Members"]) == len(systems)
    for member in body["Members"]:
        assert set(member) == {
            "@odata.id",
            "@odata.type",
            "@odata.context",
            "@odata.etag",
            "PowerState",
        }
        assert member["PowerState"] == get(client, member["@odata.id"])["PowerState"]


def test_only_on_a_one_member_collection_returns_the_member(client, systems):
    processors = client.get(f"{SYS_URI}/Processors?only", headers=ADMIN)
    assert processors.status_code == 200
    cpu = get(client, f"{SYS_URI}/Processors/CPU1")
    assert processors.get_json() == cpu
    assert processors.headers["ETag"] == cpu["@odata.etag"]
    # More than one member: the collection itself.
    assert get(client, f"{SYSTEMS}?only")["Members@odata.count"] == len(systems)


@pytest.mark.parametrize(
    ("query", "status", "message_id"),
    [
        ("$filter=PowerState eq 'On'", 501, "QueryParameterUnsupported"),
        ("$top=1", 501, "QueryParameterUnsupported"),
        ("$expand=Members", 400, "QueryParameterValueFormatError"),
        ("$expand=.($levels=0)", 400, "QueryParameterOutOfRange"),
        ("$expand=*($levels=9)", 400, "QueryParameterOutOfRange"),
        ("$select=Status/", 400, "QueryParameterValueFormatError"),
        ("only=foo", 400, "QueryParameterValueFormatError"),
        ("only&$expand=.", 400, "QueryCombinationInvalid"),
    ],
)
def test_bad_queries_get_the_redfish_error(client, systems, query, status, message_id):
    resp = client.get(f"{SYSTEMS}?{query}", headers=ADMIN)
    assert resp.status_code == status
    assert error_ids(resp) == [message_id]


def test_only_on_a_single_resource_and_queries_on_writes_are_refused(client, systems):
    resp = client.get(f"{SYS_URI}?only", headers=ADMIN)
    assert (resp.status_code, error_ids(resp)) == (400, ["QueryNotSupportedOnResource"])
    resp = client.patch(f"{SYS_URI}?$select=Boot", json={"Boot": {}}, headers=ADMIN)
    assert (resp.status_code, error_ids(resp)) == (400, ["QueryNotSupportedOnOperation"])


def test_service_root_advertises_what_is_supported(client):
    features = get(client, "/redfish/v1/")["ProtocolFeaturesSupported"]
    assert features["ExpandQuery"] == {
        "ExpandAll": True,
        "Levels": True,
        "Links": True,
        "NoLinks": True,
        "MaxLevels": 2,
    }
    assert features["SelectQuery"] is True and features["OnlyMemberQuery"] is True
    assert features["FilterQuery"] is False and features["ExcerptQuery"] is False


def test_an_unknown_method_or_uri_keeps_its_405_or_404_whatever_the_query(client, systems):
    assert client.delete(f"{SYSTEMS}?$select=Name", headers=ADMIN).status_code == 405
    assert client.get("/redfish/v1/Nowhere?$filter=x", headers=ADMIN).status_code == 404
