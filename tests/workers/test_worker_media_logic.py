"""DataVolume naming, sizing, CDI status and cdrom volume edits: pure functions, no cluster."""

from __future__ import annotations

import json
import re

from fleetfish.settings import Settings
from tasks.media.volumes import (
    ANN_BIND_IMMEDIATE,
    LABEL_DEVICE,
    LABEL_GEN,
    LABEL_SYSTEM,
    dv_body,
    dv_generation,
    dv_name,
    import_poll_delay,
    remove_cdrom_volume,
    set_cdrom_volume,
    storage_size,
    vmi_volume_ready,
)
from workers.dvstatus import import_status, parse_progress
from workers.kubevirt import (
    AlreadyExists,
    Conflict,
    Invalid,
    NotFound,
    Transient,
    map_api_exception,
)

DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def test_dv_name_is_one_per_insert_even_of_the_same_image():
    a = dv_name("fleetfish-lab.ostest-master-0", "Cd", "http://iso/a.iso", 3)
    # A redelivered task of the same insert finds its own DataVolume...
    assert a == dv_name("fleetfish-lab.ostest-master-0", "Cd", "http://iso/a.iso", 3)
    # ...and no other insert shares it: not the next one of the same URL, nor another VM's.
    assert a != dv_name("fleetfish-lab.ostest-master-0", "Cd", "http://iso/a.iso", 5)
    assert a != dv_name("fleetfish-lab.ostest-master-0", "Cd", "http://iso/b.iso", 3)
    assert a != dv_name("fleetfish-lab.ostest-master-1", "Cd", "http://iso/a.iso", 3)
    assert re.match(r"^ff-ostest-master-0-g3-[0-9a-f]{8}$", a)


def test_dv_name_of_a_long_dotted_vm_is_a_dns_label():
    name = dv_name("ns." + "Very.Long_name-" * 10, "Cd", "http://iso/a.iso", 123456789)
    assert len(name) <= 63 and DNS_LABEL.match(name), name
    assert name.endswith("-g123456789-" + name.rsplit("-", 1)[1])


def test_storage_size_has_margin_minimum_and_fallback():
    s = Settings(dv_size_margin=1.3, dv_min_size_mib=64)
    assert storage_size(1000 * 2**20, s) == "1300Mi"
    assert storage_size(2**20 + 1, s) == "64Mi"
    assert storage_size(100 * 2**20 + 1, s) == "131Mi"  # rounded up, never below the margin
    assert storage_size(None, s) == "2048Mi"


def test_dv_body_labels_annotation_and_source():
    body = dv_body("fleetfish-lab.vm0", "Cd", "http://iso/a.iso", 7, "64Mi", Settings())
    meta = body["metadata"]
    assert meta["namespace"] == "fleetfish-lab"
    assert meta["labels"][LABEL_SYSTEM] == "vm0" and meta["labels"][LABEL_DEVICE] == "Cd"
    assert meta["labels"][LABEL_GEN] == "7" and dv_generation(body) == 7
    assert meta["annotations"][ANN_BIND_IMMEDIATE] == "true"
    assert body["spec"]["source"] == {"http": {"url": "http://iso/a.iso"}}
    assert body["spec"]["storage"]["resources"]["requests"]["storage"] == "64Mi"


def test_parse_progress():
    assert parse_progress("45.20%") == 45.2
    assert parse_progress("100.0%") == 100.0
    assert parse_progress("N/A") is None
    assert parse_progress("") is None


def dv(**status) -> dict:
    return {"metadata": {"name": "ff-x"}, "status": status}


def test_import_status_phases():
    assert import_status(dv(phase="Succeeded", progress="100.0%")).done
    running = import_status(dv(phase="ImportInProgress", progress="12.5%"))
    assert not running.done and not running.error and running.progress == 12.5
    failed = import_status(
        dv(phase="Failed", conditions=[{"type": "Running", "message": "checksum mismatch"}])
    )
    assert "checksum mismatch" in failed.error


def test_import_status_gives_up_after_three_restarts_with_the_condition_message():
    msg = "Unable to connect to http data source: expected status code 200, got 404"
    retrying = dv(
        phase="ImportInProgress", restartCount=2, conditions=[{"type": "Running", "message": msg}]
    )
    assert not import_status(retrying).error
    broken = dv(
        phase="ImportInProgress", restartCount=3, conditions=[{"type": "Running", "message": msg}]
    )
    assert "got 404" in import_status(broken).error


def vm_with_cdrom(volumes):
    return {
        "spec": {
            "template": {
                "spec": {
                    "domain": {"devices": {"disks": [{"name": "rootdisk"}, {"name": "cdrom"}]}},
                    "volumes": volumes,
                }
            }
        }
    }


def test_set_cdrom_volume_replaces_the_previous_media_only():
    vm = vm_with_cdrom([{"name": "rootdisk", "persistentVolumeClaim": {"claimName": "r"}}])
    assert set_cdrom_volume(vm, "cdrom", "ff-a")
    assert set_cdrom_volume(vm, "cdrom", "ff-b")
    volumes = vm["spec"]["template"]["spec"]["volumes"]
    assert volumes == [
        {"name": "rootdisk", "persistentVolumeClaim": {"claimName": "r"}},
        {"name": "cdrom", "dataVolume": {"name": "ff-b", "hotpluggable": True}},
    ]
    assert not set_cdrom_volume(vm, "cdrom", "ff-b")
    assert remove_cdrom_volume(vm, "cdrom") and not remove_cdrom_volume(vm, "cdrom")
    assert [v["name"] for v in vm["spec"]["template"]["spec"]["volumes"]] == ["rootdisk"]


def test_vmi_volume_ready_needs_the_right_claim_ready():
    vmi = {
        "spec": {"volumes": [{"name": "cdrom", "dataVolume": {"name": "ff-b"}}]},
        "status": {"volumeStatus": [{"name": "cdrom", "phase": "Bound"}]},
    }
    assert not vmi_volume_ready(vmi, "cdrom", "ff-b")
    vmi["status"]["volumeStatus"][0]["phase"] = "Ready"
    assert vmi_volume_ready(vmi, "cdrom", "ff-b")
    assert not vmi_volume_ready(vmi, "cdrom", "ff-a")


def test_api_exceptions_map_to_domain_errors():
    from kubernetes.client.exceptions import ApiException

    def exc(status, reason=""):
        e = ApiException(status=status, reason="x")
        e.body = json.dumps({"kind": "Status", "message": "m", "reason": reason})
        return map_api_exception(e, "call")

    assert isinstance(exc(404), NotFound)
    assert isinstance(exc(409, "AlreadyExists"), AlreadyExists)
    assert type(exc(409, "Conflict")) is Conflict
    assert isinstance(exc(422, "Invalid"), Invalid)
    assert isinstance(exc(500), Transient) and isinstance(exc(0), Transient)
    assert exc(404).message == "call: m"


def test_dv_body_references_the_credentials_secret_only_when_given():
    body = dv_body("ns.vm0", "Cd", "http://iso/a.iso", 1, "64Mi", Settings(), secret_name="s-auth")
    assert body["spec"]["source"]["http"] == {"url": "http://iso/a.iso", "secretRef": "s-auth"}
    plain = dv_body(
        "ns.vm0", "Cd", "http://iso/a.iso", 1, "64Mi", Settings(dv_storage_class="fast")
    )
    assert "secretRef" not in plain["spec"]["source"]["http"]
    assert plain["spec"]["storage"]["storageClassName"] == "fast"


def test_import_polls_space_out_on_a_long_import_and_tighten_near_its_end():
    """A 30 s import at a steady rate, polled as media.import does (elapsed counted from the
    first poll): a few polls instead of 30, and the finish seen within one base interval."""
    duration, base = 30.0, 1.0
    polls = [base]
    while polls[-1] < duration and len(polls) < 100:
        progress = min(100.0, 100.0 * polls[-1] / duration)
        polls.append(polls[-1] + import_poll_delay(progress, polls[-1] - polls[0], base, 10, 60))
    assert polls[-1] < duration + base
    assert len(polls) <= 12


def test_import_poll_delay_bounds():
    # no progress known yet: the base interval
    assert import_poll_delay(None, 5.0, 1.0, 10.0, 60) == 1.0
    assert import_poll_delay(0.0, 5.0, 1.0, 10.0, 60) == 1.0
    # 10% after 10 s: about 90 s left, capped
    assert import_poll_delay(10.0, 10.0, 1.0, 10.0, 60) == 10.0
    # never longer than a third of the visibility timeout (the message would come back)
    assert import_poll_delay(10.0, 10.0, 1.0, 10.0, 9) == 3.0
    # almost done: never below the base interval
    assert import_poll_delay(99.9, 30.0, 1.0, 10.0, 60) == 1.0
    # half way after 8 s: 8 s left, poll in 4 s
    assert import_poll_delay(50.0, 8.0, 1.0, 10.0, 60) == 4.0
