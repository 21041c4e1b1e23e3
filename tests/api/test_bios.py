"""Bios, its pending Settings, ResetBios and the BIOS attribute registry, as a client sees them."""

from __future__ import annotations

from api_helpers import ADMIN, SYS, SYS_URI, error_ids, make_vm, related

from fleetfish.celery_config import POWER_QUEUE
from fleetfish.mirror import mirror_doc

BIOS = f"{SYS_URI}/Bios"
SETTINGS = f"{BIOS}/Settings"


def patch(client, body: dict, headers: dict | None = None):
    return client.patch(SETTINGS, json=body, headers={**ADMIN, **(headers or {})})


def pending(client) -> dict:
    return client.get(SETTINGS, headers=ADMIN).get_json()["Attributes"]


def test_bios_shows_the_vm_spec_and_where_to_change_it(client, systems):
    system = client.get(SYS_URI, headers=ADMIN).get_json()
    assert system["Bios"] == {"@odata.id": BIOS}
    reply = client.get(BIOS, headers=ADMIN)
    assert reply.status_code == 200
    assert reply.headers["ETag"]
    body = reply.get_json()
    assert body["Attributes"] == {
        "BootMode": "UEFI",
        "SecureBoot": "Disabled",
        "CpuMaxSockets": 0,
        "ProcessorSockets": 1,
    }
    settings = body["@Redfish.Settings"]
    assert settings["SettingsObject"] == {"@odata.id": SETTINGS}
    assert settings["SupportedApplyTimes"] == ["OnReset"]
    assert body["Actions"]["#Bios.ResetBios"]["target"] == f"{BIOS}/Actions/Bios.ResetBios"
    assert "#Bios.ChangePassword" not in body["Actions"]
    assert pending(client) == {}
    legacy = client.get("/redfish/v1/Systems/lab-b.other-0/Bios", headers=ADMIN).get_json()
    assert legacy["Attributes"]["BootMode"] == "Legacy"


def test_the_registry_the_bios_names_is_in_the_registries_collection(client, systems):
    name = client.get(BIOS, headers=ADMIN).get_json()["AttributeRegistry"]
    members = client.get("/redfish/v1/Registries", headers=ADMIN).get_json()["Members"]
    files = [client.get(m["@odata.id"], headers=ADMIN).get_json() for m in members]
    found = [f for f in files if name.startswith(f["Registry"])]
    assert len(found) == 1
    registry = client.get(found[0]["Location"][0]["Uri"], headers=ADMIN).get_json()
    assert registry["Id"] == name
    entries = {a["AttributeName"]: a for a in registry["RegistryEntries"]["Attributes"]}
    assert set(entries) == {"BootMode", "SecureBoot", "CpuMaxSockets", "ProcessorSockets"}
    assert [v["ValueName"] for v in entries["BootMode"]["Value"]] == ["UEFI", "Legacy"]
    assert entries["SecureBoot"]["DefaultValue"] == "Disabled"
    assert (entries["CpuMaxSockets"]["Type"], entries["CpuMaxSockets"]["LowerBound"]) == (
        "Integer",
        0,
    )
    assert entries["ProcessorSockets"]["ReadOnly"] is True
    assert all(e["ResetRequired"] for e in entries.values() if not e["ReadOnly"])


def test_settings_are_pending_and_shared_with_secure_boot_and_boot(client, systems, queues):
    reply = patch(client, {"Attributes": {"SecureBoot": "Enabled", "CpuMaxSockets": 4}})
    assert reply.status_code == 200, reply.get_json()
    assert reply.get_json()["Attributes"] == {"SecureBoot": "Enabled", "CpuMaxSockets": 4}
    # The VM is not touched now: the current values stay, nothing is sent to a worker.
    assert client.get(BIOS, headers=ADMIN).get_json()["Attributes"]["SecureBoot"] == "Disabled"
    assert queues.messages(POWER_QUEUE) == []
    # One setting, two views: the SecureBoot resource reads the same request.
    assert client.get(f"{SYS_URI}/SecureBoot", headers=ADMIN).get_json()["SecureBootEnable"]
    refused = client.patch(
        SYS_URI, json={"Boot": {"BootSourceOverrideMode": "Legacy"}}, headers=ADMIN
    )
    assert refused.status_code == 409
    # A Boot PATCH of the mode is the BootMode attribute's request too.
    assert patch(client, {"Attributes": {"SecureBoot": "Disabled"}}).status_code == 200
    boot = client.patch(SYS_URI, json={"Boot": {"BootSourceOverrideMode": "Legacy"}}, headers=ADMIN)
    assert boot.status_code == 200
    assert pending(client) == {"BootMode": "Legacy", "CpuMaxSockets": 4}


def test_secure_boot_and_legacy_conflict_in_either_order(client, systems):
    reply = patch(client, {"Attributes": {"BootMode": "Legacy", "SecureBoot": "Enabled"}})
    assert reply.status_code == 409
    assert error_ids(reply) == ["PropertyValueConflict"]
    assert related(reply) == ["#/Attributes/SecureBoot"]
    assert patch(client, {"Attributes": {"BootMode": "Legacy"}}).status_code == 200
    reply = client.patch(f"{SYS_URI}/SecureBoot", json={"SecureBootEnable": True}, headers=ADMIN)
    assert reply.status_code == 409
    reply = patch(client, {"Attributes": {"SecureBoot": "Enabled"}})
    assert (reply.status_code, related(reply)) == (409, ["#/Attributes/SecureBoot"])
    # Both at once, in a consistent pair, is fine.
    both = patch(client, {"Attributes": {"BootMode": "UEFI", "SecureBoot": "Enabled"}})
    assert both.status_code == 200
    assert pending(client) == {"SecureBoot": "Enabled"}


def test_bad_attributes_name_themselves_and_nothing_is_kept(client, systems):
    before = client.get(SETTINGS, headers=ADMIN)
    cases = {
        "PropertyUnknown": ({"Hyperthreading": "Enabled"}, "Hyperthreading"),
        "PropertyValueNotInList": ({"BootMode": "Bios"}, "BootMode"),
        "PropertyValueTypeError": ({"CpuMaxSockets": "4"}, "CpuMaxSockets"),
        "PropertyNotWritable": ({"ProcessorSockets": 2}, "ProcessorSockets"),
        "PropertyValueOutOfRange": ({"CpuMaxSockets": 65}, "CpuMaxSockets"),
    }
    for message_id, (attributes, name) in cases.items():
        # A good attribute alongside: the whole request is refused.
        reply = patch(client, {"Attributes": {"SecureBoot": "Enabled", **attributes}})
        assert reply.status_code == 400, reply.get_json()
        assert error_ids(reply) == [message_id]
        info = reply.get_json()["error"]["@Message.ExtendedInfo"][0]
        assert f"Attributes/{name}" in info["MessageArgs"]
        assert info["RelatedProperties"] == [f"#/Attributes/{name}"]
    after = client.get(SETTINGS, headers=ADMIN)
    assert after.headers["ETag"] == before.headers["ETag"]
    assert after.get_json()["Attributes"] == {}


def test_body_shape_apply_time_and_if_match(client, systems):
    reply = patch(client, {"Attributes": "BootMode=UEFI"})
    assert (reply.status_code, error_ids(reply)) == (400, ["PropertyValueTypeError"])
    reply = patch(client, {"Id": "Other", "Attributes": {}})
    assert (reply.status_code, error_ids(reply)) == (400, ["PropertyNotWritable"])
    immediate = {
        "Attributes": {"CpuMaxSockets": 2},
        "@Redfish.SettingsApplyTime": {"ApplyTime": "Immediate"},
    }
    reply = patch(client, immediate)
    assert (reply.status_code, error_ids(reply)) == (400, ["PropertyValueNotInList"])
    assert related(reply) == ["#/@Redfish.SettingsApplyTime/ApplyTime"]
    odd_type = {
        "Attributes": {"CpuMaxSockets": 2},
        "@Redfish.SettingsApplyTime": {"@odata.type": {}},
    }
    reply = patch(client, odd_type)
    assert (reply.status_code, error_ids(reply)) == (400, ["PropertyValueTypeError"])
    assert related(reply) == ["#/@Redfish.SettingsApplyTime/@odata.type"]
    assert pending(client) == {}
    stale = patch(client, {"Attributes": {"CpuMaxSockets": 2}}, {"If-Match": '"stale"'})
    assert stale.status_code == 412
    etag = client.get(SETTINGS, headers=ADMIN).headers["ETag"]
    on_reset = {
        "Attributes": {"CpuMaxSockets": 2},
        "@Redfish.SettingsApplyTime": {"ApplyTime": "OnReset"},
    }
    assert patch(client, on_reset, {"If-Match": etag}).status_code == 200
    assert client.get(SETTINGS, headers=ADMIN).headers["ETag"] != etag
    assert pending(client) == {"CpuMaxSockets": 2}


def test_max_sockets_cannot_go_below_the_sockets_or_beside_an_instancetype(client, store, systems):
    four = make_vm("lab-a", "ostest-master-0")
    four["spec"]["template"]["spec"]["domain"]["cpu"]["sockets"] = 4
    store.put_system(mirror_doc(four, None))
    reply = patch(client, {"Attributes": {"CpuMaxSockets": 3}})
    assert (reply.status_code, error_ids(reply)) == (409, ["PropertyValueConflict"])
    assert related(reply) == ["#/Attributes/CpuMaxSockets"]
    assert patch(client, {"Attributes": {"CpuMaxSockets": 8}}).status_code == 200
    itype = make_vm("lab-a", "ostest-master-0")
    itype["spec"]["instancetype"] = {"name": "u1.large"}
    del itype["spec"]["template"]["spec"]["domain"]["cpu"]
    store.put_system(mirror_doc(itype, None))
    reply = patch(client, {"Attributes": {"CpuMaxSockets": 8}})
    assert reply.status_code == 409
    assert reply.get_json()["error"]["@Message.ExtendedInfo"][0]["MessageArgs"][1] == (
        "spec.instancetype"
    )


def test_reset_bios_requests_the_defaults_and_change_password_is_refused(client, store, systems):
    assert (
        patch(client, {"Attributes": {"BootMode": "Legacy", "CpuMaxSockets": 4}}).status_code == 200
    )
    reply = client.post(f"{BIOS}/Actions/Bios.ResetBios", headers=ADMIN)
    assert reply.status_code == 204
    assert pending(client) == {}
    assert store.get_boot(SYS)["max_sockets"] == "0"
    assert store.get_boot(SYS)["mode"] == "UEFI"
    refused = client.post(
        f"{BIOS}/Actions/Bios.ChangePassword",
        json={"NewPassword": "x", "OldPassword": "y", "PasswordName": "AdminPassword"},
        headers=ADMIN,
    )
    assert (refused.status_code, error_ids(refused)) == (400, ["ActionNotSupported"])
    unknown = client.post(f"{BIOS}/Actions/Bios.ResetBios", json={"Now": True}, headers=ADMIN)
    assert (unknown.status_code, error_ids(unknown)) == (400, ["ActionParameterUnknown"])
    assert client.get(f"/redfish/v1/Systems/{SYS}x/Bios", headers=ADMIN).status_code == 404
