"""The event log end to end: a node provisioned with sushy, its log read with the DMTF
Redfish Tacklebox (redfish_utilities, over the `redfish` client), as an operator would after a
failed install."""

from __future__ import annotations

import time

import pytest
import redfish
import redfish_utilities
from redfish_utilities.logs import log_container

from tests.e2e.conftest import boots, ironic, system_id, wait_for

pytestmark = pytest.mark.e2e

IMPORT_SECONDS = 6
LOG_BOUND = 14


@pytest.fixture(scope="module")
def stack(lab_factory):
    return lab_factory(
        vms=3,
        import_seconds=IMPORT_SECONDS,
        workers=2,
        extra_env={"FLEETFISH_EVENT_LOG_ENTRIES": str(LOG_BOUND)},
    )


@pytest.fixture(scope="module")
def operator_client(stack):
    user, password = stack.credentials
    client = redfish.redfish_client(base_url=stack.redfish_url, username=user, password=password)
    client.login(auth="basic")
    yield client
    client.logout()


def read_log(client, vm: str, container=log_container.SYSTEM) -> list[dict]:
    return redfish_utilities.get_log_entries(client, container, system_id(vm), "Log")


def index(entries: list[dict], prefix: str) -> int:
    found = [i for i, e in enumerate(entries) if e["Message"].startswith(prefix)]
    assert found, (prefix, [e["Message"] for e in entries])
    return found[-1]


def test_a_provisioning_is_logged_in_order(stack, operator_client):
    vm = "ostest-master-0"
    image = f"{stack.iso_url}/images/log-{vm}.iso"
    since = time.time()
    run = ironic(stack).provision(system_id(vm), image)
    assert run.error == ""
    boot = wait_for(
        lambda: next((b for b in boots(stack, since) if b["vm"] == vm), None), 60, what="boot"
    )
    assert boot["kind"] == "cdrom"
    entries = wait_for(
        lambda: (e := read_log(operator_client, vm)) and "Booted" in e[-1]["Message"] and e,
        30,
        what="the boot in the log",
    )
    messages = [e["Message"] for e in entries]
    inserted = index(entries, f"Virtual media Cd inserted: {image}")
    started = index(entries, "Import of log-ostest-master-0.iso started")
    finished = index(entries, "Import of log-ostest-master-0.iso finished (100%)")
    deferred = index(entries, "Reset On deferred until the virtual media is ready")
    released = index(entries, "Reset On released: virtual media ready")
    booted = index(entries, f"Booted from Cd: {image}")
    assert inserted < started < finished < released < booted, messages
    assert inserted < deferred < released, messages
    percents = [
        int(m.rsplit(" ", 1)[-1].rstrip("%"))
        for m in messages
        if m.startswith("Import of") and m.endswith("%") and "finished" not in m
    ]
    assert percents == sorted(set(percents)), messages
    assert all(e["Severity"] == "OK" for e in entries), entries
    assert [e["Id"] for e in entries] == sorted((e["Id"] for e in entries), key=int)
    # The manager is that node's BMC: the same log.
    manager = read_log(operator_client, vm, log_container.MANAGER)
    assert [e["Message"] for e in manager] == messages


def test_a_media_failure_shows_the_clusters_reason(stack, operator_client):
    vm = "ostest-master-1"
    image = f"{stack.iso_url}/missing/log-{vm}.iso"
    since = time.time()
    run = ironic(stack).provision(system_id(vm), image)
    assert run.error == ""
    failed = wait_for(
        lambda: next(
            (e for e in read_log(operator_client, vm) if e["Severity"] == "Critical"), None
        ),
        90,
        what="the media failure in the log",
    )
    assert failed["Message"].startswith("Virtual media Cd failed:")
    assert "404" in failed["Message"]
    messages = [e["Message"] for e in read_log(operator_client, vm)]
    # The Reset met pending media (it came right after the insert, as Ironic sends it); one that
    # came after the failure would rightly power the node on, and this test would prove nothing.
    deferred = [m for m in messages if m.startswith("Reset On deferred")]
    assert deferred, f"the Reset reached the API only after the media failed: {messages}"
    assert not any(m.startswith(("Reset On released", "Booted")) for m in messages), messages
    assert [b for b in boots(stack, since) if b["vm"] == vm] == []


def test_the_log_is_bounded_and_an_administrator_clears_it(stack, operator_client):
    vm = "ostest-master-2"
    client = ironic(stack)
    for round_number in range(3):
        image = f"{stack.iso_url}/images/bound-{round_number}-{vm}.iso"
        assert client.provision(system_id(vm), image).error == ""
        wait_for(
            lambda image=image: (
                (e := read_log(operator_client, vm))
                and e[-1]["Message"] == f"Booted from Cd: {image}"
            ),
            60,
            what=f"boot {round_number} in the log",
        )
    entries = read_log(operator_client, vm)
    assert len(entries) == LOG_BOUND, [e["Message"] for e in entries]
    # The oldest were dropped: three provisionings log more than the bound.
    assert int(entries[0]["Id"]) > 1, [e["Message"] for e in entries]
    service = operator_client.get(f"/redfish/v1/Systems/{system_id(vm)}/LogServices/Log").dict
    assert service["MaxNumberOfRecords"] == LOG_BOUND

    redfish_utilities.clear_log_entries(operator_client, log_container.SYSTEM, system_id(vm), "Log")
    assert read_log(operator_client, vm) == []
