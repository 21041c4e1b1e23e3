"""Flower in the lab shows the media work: tasks by name, with the system in their arguments."""

from __future__ import annotations

import pytest
import requests

from tests.e2e.conftest import system_id, wait_for

pytestmark = pytest.mark.e2e


def test_flower_lists_the_media_tasks_of_an_insert(lab_factory):
    stack = lab_factory(vms=1, import_seconds=3, workers=1, flower=True)
    system = system_id("ostest-master-0")
    reply = requests.post(
        f"{stack.redfish_url}/redfish/v1/Systems/{system}/VirtualMedia/Cd/Actions/"
        "VirtualMedia.InsertMedia",
        json={"Image": f"{stack.iso_url}/images/flower.iso"},
        auth=stack.credentials,
        timeout=5,
    )
    assert reply.status_code == 202

    def media_tasks() -> dict[str, dict]:
        listing = requests.get(
            f"{stack.flower_url}/api/tasks", auth=stack.credentials, timeout=5
        ).json()
        names = {info.get("name") for info in listing.values()}
        if {"media.import", "media.attach", "media.release"} <= names:
            return listing
        return {}

    tasks = wait_for(media_tasks, 60, what="media tasks in Flower")
    for info in tasks.values():
        if info.get("name", "").startswith("media."):
            assert system in str(info.get("args")), info
    assert requests.get(f"{stack.flower_url}/api/tasks", timeout=5).status_code == 401
