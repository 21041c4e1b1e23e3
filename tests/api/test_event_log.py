"""LogServices/Log: the requests the API sees are logged, read back under System and Manager,
bounded, and cleared by administrators only."""

from __future__ import annotations

from app import create_app
from fleetfish.eventlog import EventLog
from fleetfish.settings import Settings
from tests.api.api_helpers import ADMIN, EJECT_URI, INSERT_URI, ISO, RESET_URI, SYS, SYS_URI, basic

LOG = f"{SYS_URI}/LogServices/Log"
MANAGER_LOG = f"/redfish/v1/Managers/{SYS}/LogServices/Log"
CLEAR = f"{LOG}/Actions/LogService.ClearLog"


def messages(client, uri: str = LOG) -> list[str]:
    body = client.get(f"{uri}/Entries", headers=ADMIN).get_json()
    return [m["Message"] for m in body["Members"]]


def test_system_and_manager_link_their_log(client, systems):
    system = client.get(SYS_URI, headers=ADMIN).get_json()
    manager = client.get(f"/redfish/v1/Managers/{SYS}", headers=ADMIN).get_json()
    for parent, body in ((SYS_URI, system), (f"/redfish/v1/Managers/{SYS}", manager)):
        services = client.get(body["LogServices"]["@odata.id"], headers=ADMIN).get_json()
        assert services["Members"] == [{"@odata.id": f"{parent}/LogServices/Log"}]
        service = client.get(f"{parent}/LogServices/Log", headers=ADMIN).get_json()
        assert service["Entries"] == {"@odata.id": f"{parent}/LogServices/Log/Entries"}
        assert service["MaxNumberOfRecords"] == 200
        assert service["OverWritePolicy"] == "WrapsWhenFull"
        assert service["Actions"]["#LogService.ClearLog"]["target"] == (
            f"{parent}/LogServices/Log/Actions/LogService.ClearLog"
        )
    assert client.get(f"{SYS_URI}/LogServices/SEL", headers=ADMIN).status_code == 404


def test_insert_deferred_reset_and_eject_are_logged_in_order(client, systems, queues):
    assert client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN).status_code == 202
    assert client.post(RESET_URI, json={"ResetType": "On"}, headers=ADMIN).status_code == 202
    assert client.post(EJECT_URI, headers=ADMIN).status_code == 202

    logged = messages(client)
    assert logged[0] == f"Virtual media Cd inserted: {ISO}"
    assert logged[1].startswith("Reset On deferred until the virtual media is ready")
    assert logged[2] == "Virtual media Cd ejected"
    assert messages(client, MANAGER_LOG) == logged

    entries = client.get(f"{LOG}/Entries", headers=ADMIN).get_json()["Members"]
    first = client.get(entries[0]["@odata.id"], headers=ADMIN).get_json()
    assert first["Message"] == logged[0]
    assert first["Severity"] == "OK" and first["EntryType"] == "Event"
    assert first["Created"].endswith("Z")
    assert client.get(f"{LOG}/Entries/999", headers=ADMIN).status_code == 404


def test_credentials_in_the_image_url_are_not_logged(client, systems, queues):
    image = "http://user:secret@192.0.2.10:8080/boot.iso"
    assert client.post(INSERT_URI, json={"Image": image}, headers=ADMIN).status_code == 202
    assert messages(client) == ["Virtual media Cd inserted: http://192.0.2.10:8080/boot.iso"]


def test_the_log_keeps_the_newest_entries_up_to_its_bound(redis_url, users_file, systems):
    app = create_app(Settings(redis_url=redis_url, users_file=users_file, event_log_entries=5))
    client = app.test_client()
    log = EventLog(app.extensions["fleetfish.store"].r, 5)
    for number in range(12):
        log.add(SYS, "test", f"event {number}")
    assert messages(client) == [f"event {n}" for n in range(7, 12)]
    service = client.get(LOG, headers=ADMIN).get_json()
    assert service["MaxNumberOfRecords"] == 5


def test_clear_log_is_for_administrators(client, systems, queues):
    client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    assert client.post(CLEAR, json={}, headers=basic("operator")).status_code == 403
    assert client.post(CLEAR, json={}, headers=basic("viewer")).status_code == 403
    assert len(messages(client)) == 1
    assert client.post(CLEAR, json={}, headers=ADMIN).status_code == 204
    assert messages(client) == []
    # Ids keep growing after a clear: an entry's URI never names another entry.
    client.post(EJECT_URI, headers=ADMIN)
    entry = client.get(f"{LOG}/Entries", headers=ADMIN).get_json()["Members"][0]
    assert entry["Id"] == "2"


def test_a_log_outside_the_users_scope_is_not_found(client, systems):
    other = "/redfish/v1/Systems/lab-b.other-0/LogServices/Log/Entries"
    assert client.get(other, headers=basic("operator")).status_code == 404
    assert client.get(other, headers=ADMIN).status_code == 200
