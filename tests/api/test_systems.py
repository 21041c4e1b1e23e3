"""ComputerSystem, Manager, Chassis and inventory rendering; PATCH Boot with If-Match."""

from __future__ import annotations

from tests.api.api_helpers import ADMIN, SYS, SYS_URI, error_ids, related


def test_system_has_what_sushy_and_ironic_need(client, systems):
    body = client.get(SYS_URI, headers=ADMIN).get_json()
    assert body["Id"] == SYS
    assert body["Name"] == "ostest-master-0"
    assert body["UUID"].startswith("00000000-0000-4000-8000-")
    assert body["PowerState"] == "Off"
    assert body["SystemType"] == "Virtual"
    assert body["Status"]["Health"] == "OK"
    boot = body["Boot"]
    assert boot["BootSourceOverrideEnabled"] == "Disabled"
    assert boot["BootSourceOverrideTarget"] == "None"
    assert boot["BootSourceOverrideMode"] == "UEFI"
    assert {"Cd", "Hdd", "Pxe"} <= set(boot["BootSourceOverrideTarget@Redfish.AllowableValues"])
    assert set(boot["BootSourceOverrideEnabled@Redfish.AllowableValues"]) == {
        "Disabled",
        "Once",
        "Continuous",
    }
    reset = body["Actions"]["#ComputerSystem.Reset"]
    assert reset["target"] == f"{SYS_URI}/Actions/ComputerSystem.Reset"
    assert {"On", "ForceOff", "ForceRestart", "GracefulShutdown"} <= set(
        reset["ResetType@Redfish.AllowableValues"]
    )
    assert "Nmi" not in reset["ResetType@Redfish.AllowableValues"]
    assert body["Links"]["ManagedBy"] == [{"@odata.id": f"/redfish/v1/Managers/{SYS}"}]
    assert body["Links"]["Chassis"] == [{"@odata.id": f"/redfish/v1/Chassis/{SYS}"}]
    assert body["ProcessorSummary"]["Count"] == 2
    assert body["MemorySummary"]["TotalSystemMemoryGiB"] == 4
    for link in (
        "VirtualMedia",
        "Processors",
        "Memory",
        "SimpleStorage",
        "EthernetInterfaces",
        "Links",
    ):
        assert link in body
    assert body["@odata.etag"].startswith('"')


def test_every_linked_resource_resolves(client, systems):
    body = client.get(SYS_URI, headers=ADMIN).get_json()
    for link in ("VirtualMedia", "Processors", "Memory", "SimpleStorage", "EthernetInterfaces"):
        coll = client.get(body[link]["@odata.id"], headers=ADMIN)
        assert coll.status_code == 200, link
        for member in coll.get_json()["Members"]:
            resp = client.get(member["@odata.id"], headers=ADMIN)
            assert resp.status_code == 200, member
            assert resp.get_json()["Id"]
    for link in body["Links"]["ManagedBy"] + body["Links"]["Chassis"]:
        assert client.get(link["@odata.id"], headers=ADMIN).status_code == 200


def test_inventory_values(client, systems):
    nic = client.get(f"{SYS_URI}/EthernetInterfaces/default", headers=ADMIN).get_json()
    assert nic["MACAddress"] == "52:54:00:00:00:01"
    cpu = client.get(f"{SYS_URI}/Processors/CPU1", headers=ADMIN).get_json()
    assert cpu["TotalCores"] == 2
    mem = client.get(f"{SYS_URI}/Memory/DIMM1", headers=ADMIN).get_json()
    assert mem["CapacityMiB"] == 4096
    storage = client.get(f"{SYS_URI}/SimpleStorage/1", headers=ADMIN).get_json()
    assert [d["Name"] for d in storage["Devices"]] == ["rootdisk"]
    assert client.get(f"{SYS_URI}/Processors/CPU9", headers=ADMIN).status_code == 404


def test_legacy_bios_vm_reads_legacy_mode(client, systems):
    body = client.get("/redfish/v1/Systems/lab-b.other-0", headers=ADMIN).get_json()
    assert body["Boot"]["BootSourceOverrideMode"] == "Legacy"


def test_manager_and_chassis(client, systems):
    manager = client.get(f"/redfish/v1/Managers/{SYS}", headers=ADMIN).get_json()
    assert manager["Id"] == SYS
    assert manager["VirtualMedia"]["@odata.id"] == f"/redfish/v1/Managers/{SYS}/VirtualMedia"
    assert manager["Links"]["ManagerForServers"] == [{"@odata.id": SYS_URI}]
    chassis = client.get(f"/redfish/v1/Chassis/{SYS}", headers=ADMIN).get_json()
    assert chassis["Links"]["ComputerSystems"] == [{"@odata.id": SYS_URI}]
    coll = client.get("/redfish/v1/Chassis", headers=ADMIN).get_json()
    assert coll["Members@odata.count"] == 3


def test_power_state_follows_the_mirror(client, store, systems):
    doc = store.get_system(SYS)
    doc["runStrategy"] = "Always"  # what `start` sets
    assert client.get(SYS_URI, headers=ADMIN).get_json()["PowerState"] == "Off"
    store.put_system(doc)
    assert client.get(SYS_URI, headers=ADMIN).get_json()["PowerState"] == "PoweringOn"
    doc["printableStatus"] = "Running"
    store.put_system(doc)
    assert client.get(SYS_URI, headers=ADMIN).get_json()["PowerState"] == "On"
    doc["runStrategy"] = "Halted"  # what `stop` sets, before the VMI goes
    store.put_system(doc)
    assert client.get(SYS_URI, headers=ADMIN).get_json()["PowerState"] == "PoweringOff"


def test_patch_boot_records_and_sends_boot_apply(client, store, systems, queues):
    resp = client.patch(
        SYS_URI,
        json={
            "Boot": {
                "BootSourceOverrideTarget": "Cd",
                "BootSourceOverrideEnabled": "Once",
                "HttpBootUri": None,
            }
        },
        headers=ADMIN,
    )
    assert resp.status_code == 200
    assert resp.get_json()["Boot"]["BootSourceOverrideTarget"] == "Cd"
    boot = client.get(SYS_URI, headers=ADMIN).get_json()["Boot"]
    assert (boot["BootSourceOverrideTarget"], boot["BootSourceOverrideEnabled"]) == ("Cd", "Once")
    assert store.get_boot(SYS)["target"] == "Cd"
    messages = queues.messages("fleetfish.power")
    assert [m["task"] for m in messages] == ["boot.apply"]
    assert messages[0]["args"] == [SYS, int(store.get_boot(SYS)["gen"])]


def test_patch_boot_mode_alone(client, systems):
    resp = client.patch(SYS_URI, json={"Boot": {"BootSourceOverrideMode": "Legacy"}}, headers=ADMIN)
    assert resp.status_code == 200
    assert (
        client.get(SYS_URI, headers=ADMIN).get_json()["Boot"]["BootSourceOverrideMode"] == "Legacy"
    )


def test_if_match(client, systems, queues):
    etag = client.get(SYS_URI, headers=ADMIN).headers["ETag"]
    stale = client.patch(
        SYS_URI,
        json={"Boot": {"BootSourceOverrideTarget": "Pxe"}},
        headers={**ADMIN, "If-Match": '"stale"'},
    )
    assert stale.status_code == 412
    assert error_ids(stale) == ["PreconditionFailed"]
    assert (
        client.get(SYS_URI, headers=ADMIN).get_json()["Boot"]["BootSourceOverrideTarget"] == "None"
    )
    assert queues.names("fleetfish.power") == []
    ok = client.patch(
        SYS_URI,
        json={"Boot": {"BootSourceOverrideTarget": "Pxe"}},
        headers={**ADMIN, "If-Match": etag},
    )
    assert ok.status_code == 200
    # The ETag changed with the resource: the old one no longer matches.
    again = client.patch(
        SYS_URI,
        json={"Boot": {"BootSourceOverrideTarget": "Hdd"}},
        headers={**ADMIN, "If-Match": etag},
    )
    assert again.status_code == 412


def test_etag_is_stable_between_gets(client, systems):
    first = client.get(SYS_URI, headers=ADMIN).headers["ETag"]
    assert client.get(SYS_URI, headers=ADMIN).headers["ETag"] == first


def test_patch_rejects_unknown_readonly_and_bad_values(client, store, systems, queues):
    cases = [
        ({"Bogus": 1}, "PropertyUnknown", "#/Bogus"),
        ({"PowerState": "On"}, "PropertyNotWritable", "#/PowerState"),
        ({"Boot": {"Nope": "x"}}, "PropertyUnknown", "#/Boot/Nope"),
        (
            {"Boot": {"BootSourceOverrideTarget": "Floppy"}},
            "PropertyValueNotInList",
            "#/Boot/BootSourceOverrideTarget",
        ),
        (
            {"Boot": {"BootSourceOverrideEnabled": 1}},
            "PropertyValueTypeError",
            "#/Boot/BootSourceOverrideEnabled",
        ),
        ({"Boot": "Cd"}, "PropertyValueTypeError", "#/Boot"),
        (
            {"Boot": {"BootSourceOverrideTarget@Redfish.AllowableValues": []}},
            "PropertyNotWritable",
            "#/Boot/BootSourceOverrideTarget@Redfish.AllowableValues",
        ),
    ]
    for body, message_id, prop in cases:
        resp = client.patch(SYS_URI, json=body, headers=ADMIN)
        assert resp.status_code == 400, body
        assert error_ids(resp) == [message_id], body
        assert related(resp) == [prop], body
    # A valid change next to an invalid one is not applied either.
    resp = client.patch(
        SYS_URI, json={"Boot": {"BootSourceOverrideTarget": "Cd"}, "Name": "x"}, headers=ADMIN
    )
    assert resp.status_code == 400
    assert store.get_boot(SYS) == {}
    assert queues.names("fleetfish.power") == []


def test_storage_lists_the_disks_and_refuses_raid_volumes(client, systems):
    storage = client.get(f"{SYS_URI}/Storage/1", headers=ADMIN).get_json()
    (link,) = storage["Drives"]
    drive = client.get(link["@odata.id"], headers=ADMIN).get_json()
    assert (drive["Id"], drive["Protocol"]) == ("rootdisk", "PCIe")
    assert "CapacityBytes" not in drive  # the mirror has read no claim size for it
    assert client.get(f"{SYS_URI}/Storage/2", headers=ADMIN).status_code == 404
    chassis_drives = f"/redfish/v1/Chassis/{SYS}/Drives"
    assert link["@odata.id"] == f"{chassis_drives}/rootdisk"
    listed = client.get(chassis_drives, headers=ADMIN).get_json()["Members"]
    assert listed == [link]
    assert client.get(f"{chassis_drives}/cdrom", headers=ADMIN).status_code == 404
    volumes = client.get(f"{SYS_URI}/Storage/1/Volumes", headers=ADMIN)
    assert volumes.get_json()["Members"] == [] and "POST" in volumes.headers["Allow"]
    refused = client.post(f"{SYS_URI}/Storage/1/Volumes", json={"RAIDType": "RAID0"}, headers=ADMIN)
    assert refused.status_code == 400
    assert error_ids(refused) == ["ActionNotSupported"]
