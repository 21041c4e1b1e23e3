"""Per-user scope on every route, actions, tasks and task monitors included: 404, never 403."""

from __future__ import annotations

import pytest
from security_helpers import body_for, concrete_routes, error_ids

from tests.api.api_helpers import ADMIN, ISO, PASSWORDS, basic

HIDDEN = {
    "operator": "lab-b.other-0",  # namespaces: [lab-a]
    "labeled": "lab-a.ostest-worker-0",  # labelSelector part-of=fleetfish-lab
}
SYSTEM_ROUTE = ("/Systems/", "/Managers/", "/Chassis/")


def _tasks_for(client, system_id: str) -> list[str]:
    base = f"/redfish/v1/Systems/{system_id}"
    locations = [
        client.post(
            f"{base}/Actions/ComputerSystem.Reset", json={"ResetType": "On"}, headers=ADMIN
        ),
        client.post(
            f"{base}/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia",
            json={"Image": ISO},
            headers=ADMIN,
        ),
    ]
    assert [r.status_code for r in locations] == [202, 202]
    return [r.headers["Location"].rsplit("/", 1)[-1] for r in locations]


@pytest.mark.parametrize("user", sorted(HIDDEN))
def test_every_system_route_hides_systems_outside_the_scope(app, client, store, systems, user):
    hidden = HIDDEN[user]
    task_ids = _tasks_for(client, hidden)
    before = {k: store.r.hgetall(k) for k in store.r.scan_iter("ff:*") if store.r.type(k) == "hash"}
    routes = [
        (m, p)
        for m, p in concrete_routes(app, system_id=hidden, task_id=task_ids[0])
        if any(s + hidden in p for s in SYSTEM_ROUTE)
        or "/TaskService/Task" in p
        and task_ids[0] in p
    ]
    routes += [("GET", f"/redfish/v1/TaskService/Tasks/{task_ids[1]}")]
    routes += [("GET", f"/redfish/v1/TaskService/TaskMonitors/{task_ids[1]}")]
    assert len(routes) > 25
    for method, path in routes:
        resp = client.open(path, method=method, json=body_for(path), headers=basic(user))
        assert resp.status_code == 404, (user, method, path, resp.status_code)
        if method != "HEAD":
            assert error_ids(resp) == ["ResourceNotFound"], (method, path)
    after = {k: store.r.hgetall(k) for k in store.r.scan_iter("ff:*") if store.r.type(k) == "hash"}
    assert after == before


@pytest.mark.parametrize("user", sorted(HIDDEN))
def test_collections_leave_out_systems_outside_the_scope(client, systems, user):
    hidden = HIDDEN[user]
    task_ids = _tasks_for(client, hidden)
    for path in (
        "/redfish/v1/Systems",
        "/redfish/v1/Managers",
        "/redfish/v1/Chassis",
        "/redfish/v1/TaskService/Tasks",
    ):
        text = client.get(path, headers=basic(user)).get_data(as_text=True)
        assert hidden not in text and not any(t in text for t in task_ids), path
    visible = client.get("/redfish/v1/Systems", headers=basic(user)).get_json()
    assert visible["Members@odata.count"] >= 1


def test_in_scope_systems_still_work(client, systems):
    """The control: the same routes answer for a system inside the scope."""
    path = "/redfish/v1/Systems/lab-a.ostest-master-0"
    for user in HIDDEN:
        assert client.get(path, headers=basic(user)).status_code == 200
        reset = client.post(
            f"{path}/Actions/ComputerSystem.Reset",
            json={"ResetType": "ForceOff"},
            headers=basic(user),
        )
        assert reset.status_code == 202
        monitor = client.get(reset.headers["Location"], headers=basic(user))
        assert monitor.status_code in (200, 202)


def test_sessions_and_accounts_of_others_are_hidden(client):
    admin = client.post(
        "/redfish/v1/SessionService/Sessions",
        json={"UserName": "admin", "Password": PASSWORDS["admin"]},
    ).headers["Location"]
    op = basic("operator")
    assert client.get(admin, headers=op).status_code == 404
    assert client.delete(admin, headers=op).status_code == 404
    assert client.get(admin, headers=ADMIN).status_code == 200
    assert client.get("/redfish/v1/AccountService/Accounts/admin", headers=op).status_code == 404
    accounts = client.get("/redfish/v1/AccountService/Accounts", headers=op).get_json()
    assert [m["@odata.id"].rsplit("/", 1)[-1] for m in accounts["Members"]] == ["operator"]
