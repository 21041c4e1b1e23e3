"""VirtualMedia: rendering under System and Manager, InsertMedia validation and queueing, EjectMedia."""

from __future__ import annotations

import pytest

import app.resources.virtual_media as views
from app import create_app
from fleetfish.settings import Settings
from fleetfish.store import key_media
from tests.api.api_helpers import ADMIN, CD_URI, EJECT_URI, INSERT_URI, ISO, SYS, error_ids, related

MANAGER_CD = f"/redfish/v1/Managers/{SYS}/VirtualMedia/Cd"


def test_virtual_media_fields_under_system_and_manager(client, systems):
    for uri in (CD_URI, MANAGER_CD):
        coll = client.get(uri.rsplit("/", 1)[0], headers=ADMIN).get_json()
        assert coll["Members"] == [{"@odata.id": uri}]
        body = client.get(uri, headers=ADMIN).get_json()
        assert body["@odata.id"] == uri
        assert body["Id"] == "Cd" and body["Name"]
        assert body["MediaTypes"] == ["CD", "DVD"]
        assert body["Inserted"] is False
        assert body["ConnectedVia"] == "NotConnected"
        assert "Image" in body and body["WriteProtected"] is True
        assert (
            body["Actions"]["#VirtualMedia.InsertMedia"]["target"]
            == f"{uri}/Actions/VirtualMedia.InsertMedia"
        )
        assert (
            body["Actions"]["#VirtualMedia.EjectMedia"]["target"]
            == f"{uri}/Actions/VirtualMedia.EjectMedia"
        )
    assert (
        client.get(f"/redfish/v1/Systems/{SYS}/VirtualMedia/Floppy", headers=ADMIN).status_code
        == 404
    )


def test_insert_media_queues_the_chord_and_reads_back(client, store, systems, queues):
    resp = client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    assert resp.status_code == 202
    location = resp.headers["Location"]
    assert location.startswith("/redfish/v1/TaskService/TaskMonitors/")
    task = resp.get_json()
    assert task["TaskState"] == "Running"
    assert location.endswith(task["Id"])

    media = client.get(CD_URI, headers=ADMIN).get_json()
    assert media["Inserted"] is True
    assert media["Image"] == ISO
    assert media["ImageName"] == "boot-1234.iso"
    assert media["Status"]["State"] == "Starting"
    assert media["ConnectedVia"] == "URI"
    assert media["WriteProtected"] is True

    messages = queues.messages("fleetfish.media")
    assert [m["task"] for m in messages] == ["media.import"]
    gen = int(store.get_media(SYS)["gen"])
    assert messages[0]["args"] == [SYS, "Cd", gen, ISO, task["Id"]]
    assert store.get_task(task["Id"])["celery_id"]
    monitor = client.get(location, headers=ADMIN)
    assert monitor.status_code == 202
    assert monitor.headers["Location"] == location


def test_same_image_pending_returns_the_existing_task(client, systems, queues):
    first = client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    second = client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    assert second.status_code == 202
    assert second.headers["Location"] == first.headers["Location"]
    assert len(queues.names("fleetfish.media")) == 1


def test_same_image_ready_is_204(client, store, systems, queues):
    client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    gen = int(store.get_media(SYS)["gen"])
    store.update_media(SYS, "Cd", gen, state="Enabled", attached=True)
    assert client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN).status_code == 204
    assert len(queues.names("fleetfish.media")) == 1


@pytest.mark.parametrize(
    ("body", "message_id", "prop"),
    [
        ({}, "ActionParameterMissing", "#/Image"),
        ({"Image": "ftp://h/x.iso"}, "ActionParameterValueFormatError", "#/Image"),
        ({"Image": "file:///etc/passwd"}, "ActionParameterValueFormatError", "#/Image"),
        ({"Image": 5}, "ActionParameterValueTypeError", "#/Image"),
        ({"Image": ISO, "Inserted": "yes"}, "ActionParameterValueTypeError", "#/Inserted"),
        (
            {"Image": ISO, "TransferProtocolType": "NFS"},
            "ActionParameterValueNotInList",
            "#/TransferProtocolType",
        ),
        (
            {"Image": ISO, "TransferMethod": "Carrier"},
            "ActionParameterValueNotInList",
            "#/TransferMethod",
        ),
        ({"Image": ISO, "Colour": "red"}, "ActionParameterUnknown", "#/Colour"),
    ],
)
def test_insert_media_validation_leaves_state_unchanged(
    client, store, systems, queues, body, message_id, prop
):
    before = store.get_media(SYS)
    resp = client.post(INSERT_URI, json=body, headers=ADMIN)
    assert resp.status_code == 400
    assert error_ids(resp) == [message_id]
    assert related(resp) == [prop]
    assert store.get_media(SYS) == before
    assert client.get(CD_URI, headers=ADMIN).get_json()["Inserted"] is False
    assert queues.names("fleetfish.media") == []


def test_insert_media_without_body_names_image(client, systems):
    resp = client.post(INSERT_URI, headers=ADMIN)
    assert resp.status_code == 400
    assert error_ids(resp) == ["ActionParameterMissing"]


def test_image_allowlist(redis_url, users_file, systems, queues):
    settings = Settings(
        redis_url=redis_url,
        users_file=users_file,
        image_allowlist=("192.0.2.0/24", "iso.example.com"),
    )
    client = create_app(settings).test_client()
    assert (
        client.post(
            INSERT_URI, json={"Image": "http://evil.example.net/x.iso"}, headers=ADMIN
        ).status_code
        == 400
    )
    assert (
        client.post(
            INSERT_URI, json={"Image": "http://198.51.100.1/x.iso"}, headers=ADMIN
        ).status_code
        == 400
    )
    assert (
        client.post(
            INSERT_URI, json={"Image": "https://iso.example.com/x.iso"}, headers=ADMIN
        ).status_code
        == 202
    )
    assert client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN).status_code == 202


def test_credentials_are_kept_but_never_shown(client, store, systems):
    image = "https://user:secret@192.0.2.10/x.iso"
    body = {"Image": image, "UserName": "u2", "Password": "pw2", "TransferProtocolType": "HTTPS"}
    assert client.post(INSERT_URI, json=body, headers=ADMIN).status_code == 202
    text = client.get(CD_URI, headers=ADMIN).get_data(as_text=True)
    assert "secret" not in text and "pw2" not in text and "u2" not in text
    assert client.get(CD_URI, headers=ADMIN).get_json()["Image"] == "https://192.0.2.10/x.iso"
    assert store.media_credentials(SYS) == {"username": "u2", "password": "pw2"}


def test_eject_without_body_or_content_type(client, systems, queues):
    client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    resp = client.post(EJECT_URI, headers=ADMIN)
    assert resp.status_code == 202
    assert resp.headers["Location"].startswith("/redfish/v1/TaskService/TaskMonitors/")
    media = client.get(CD_URI, headers=ADMIN).get_json()
    assert media["Inserted"] is False
    assert media["ConnectedVia"] == "NotConnected"
    assert queues.names("fleetfish.media") == ["media.import", "media.eject"]


def test_eject_with_empty_json_object(client, systems, queues):
    client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    resp = client.post(EJECT_URI, json={}, headers=ADMIN)
    assert resp.status_code == 202
    assert client.get(CD_URI, headers=ADMIN).get_json()["Inserted"] is False


def test_eject_with_nothing_inserted_is_204(client, systems, queues):
    assert client.post(EJECT_URI, headers=ADMIN).status_code == 204
    assert queues.names("fleetfish.media") == []


def test_eject_rejects_parameters(client, systems):
    resp = client.post(EJECT_URI, json={"Force": True}, headers=ADMIN)
    assert resp.status_code == 400
    assert error_ids(resp) == ["ActionParameterUnknown"]


def test_failed_media_shows_the_reason(client, store, systems):
    client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    gen = int(store.get_media(SYS)["gen"])
    store.fail_media(SYS, "Cd", gen, "HTTP 404 fetching the image")
    media = client.get(CD_URI, headers=ADMIN).get_json()
    assert media["Inserted"] is False
    assert media["Status"]["Health"] == "Critical"
    assert media["Status"]["Conditions"][0]["Message"] == "HTTP 404 fetching the image"


def test_legacy_mode_sends_the_plain_chain(redis_url, users_file, systems, queues):
    client = create_app(
        Settings(redis_url=redis_url, users_file=users_file, legacy_sequential=True)
    ).test_client()
    assert client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN).status_code == 202
    assert queues.names("fleetfish.media") == ["media.import"]


def test_an_insert_outraced_on_its_drive_answers_503_and_records_nothing(
    client, systems, store, monkeypatch
):
    build = views.wire.insert_media_chord_message

    def racing(*args, **kwargs):
        # Another request on the same drive takes the generation every time this one is built.
        store.r.hincrby(key_media(SYS, "Cd"), "gen", 1)
        return build(*args, **kwargs)

    monkeypatch.setattr(views.wire, "insert_media_chord_message", racing)
    resp = client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    assert resp.status_code == 503 and resp.headers["Retry-After"]
    assert error_ids(resp) == ["ServiceTemporarilyUnavailable"]
    assert store.task_ids() == []
    assert store.get_media(SYS).get("image", "") == ""
