"""Authentication, sessions, lock-out, roles and per-user system scope."""

from __future__ import annotations

import os
import time

import app.auth as auth_mod
from app import create_app
from fleetfish.settings import Settings
from tests.api.api_helpers import ADMIN, PASSWORDS, RESET_URI, SYS_URI, basic, error_ids

SESSIONS = "/redfish/v1/SessionService/Sessions"


def login(client, user="admin", password=None):
    return client.post(SESSIONS, json={"UserName": user, "Password": password or PASSWORDS[user]})


def test_basic_auth_wrong_password_is_401(client, systems):
    resp = client.get("/redfish/v1/Systems", headers={"Authorization": "Basic YWRtaW46bm9wZQ=="})
    assert resp.status_code == 401
    assert error_ids(resp) == ["NoValidSession"]


def test_session_create_use_list_delete(client, systems):
    resp = login(client)
    assert resp.status_code == 201
    token = resp.headers["X-Auth-Token"]
    location = resp.headers["Location"]
    assert location.startswith(SESSIONS + "/")
    assert resp.get_json()["UserName"] == "admin"
    assert "Password" not in resp.get_json() or resp.get_json()["Password"] is None

    auth = {"X-Auth-Token": token}
    assert client.get(SYS_URI, headers=auth).status_code == 200
    members = [m["@odata.id"] for m in client.get(SESSIONS, headers=auth).get_json()["Members"]]
    assert location in members
    assert client.get(location, headers=auth).get_json()["UserName"] == "admin"

    assert client.delete(location, headers=auth).status_code == 204
    assert client.get(SYS_URI, headers=auth).status_code == 401


def test_session_token_is_not_stored_in_clear(client, store):
    token = login(client).headers["X-Auth-Token"]
    readers = {
        "hash": store.r.hgetall,
        "string": store.r.get,
        "zset": lambda k: store.r.zrange(k, 0, -1),
    }
    keys = list(store.r.scan_iter("ff:sess*"))
    assert keys
    for key in keys:
        assert token not in key
        assert token not in str(readers[store.r.type(key)](key))


def test_session_expires_after_inactivity(redis_url, users_file, systems, store):
    app = create_app(Settings(redis_url=redis_url, users_file=users_file, session_timeout=1))
    client = app.test_client()
    token = login(client).headers["X-Auth-Token"]
    assert client.get(SYS_URI, headers={"X-Auth-Token": token}).status_code == 200
    # Left unused, the session's Redis key runs out after SessionTimeout.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and list(store.r.scan_iter("ff:sess:*")):
        time.sleep(0.1)
    assert client.get(SYS_URI, headers={"X-Auth-Token": token}).status_code == 401


def test_bad_login_is_401_and_missing_fields_400(client):
    assert login(client, password="wrong").status_code == 401
    resp = client.post(SESSIONS, json={"UserName": "admin"})
    assert resp.status_code == 400
    assert error_ids(resp) == ["PropertyMissing"]


def test_lockout_after_repeated_failures(client, systems):
    for _ in range(5):
        assert login(client, password="wrong").status_code == 401
    # Even the right password is refused while locked out.
    assert login(client).status_code == 401
    assert client.get(SYS_URI, headers=ADMIN).status_code == 401
    # Another user is not affected.
    assert client.get("/redfish/v1/Systems", headers=basic("viewer")).status_code == 200
    account = client.get("/redfish/v1/AccountService/Accounts/admin", headers=basic("viewer"))
    assert account.status_code == 404  # viewer sees only its own account


def test_read_only_user_cannot_write(client, systems, queues):
    resp = client.post(RESET_URI, json={"ResetType": "On"}, headers=basic("viewer"))
    assert resp.status_code == 403
    assert error_ids(resp) == ["InsufficientPrivilege"]
    assert queues.names("fleetfish.power") == []
    assert client.get(SYS_URI, headers=basic("viewer")).status_code == 200


def test_read_only_user_may_log_out(client):
    resp = login(client, "viewer")
    token, location = resp.headers["X-Auth-Token"], resp.headers["Location"]
    assert client.delete(location, headers={"X-Auth-Token": token}).status_code == 204


def test_users_see_only_their_own_sessions(client):
    admin_loc = login(client).headers["Location"]
    viewer = login(client, "viewer")
    auth = {"X-Auth-Token": viewer.headers["X-Auth-Token"]}
    members = [m["@odata.id"] for m in client.get(SESSIONS, headers=auth).get_json()["Members"]]
    assert members == [viewer.headers["Location"]]
    assert client.get(admin_loc, headers=auth).status_code == 404
    assert client.delete(admin_loc, headers=auth).status_code == 404


def test_namespace_scope_filters_and_hides(client, systems):
    op = basic("operator")
    members = [
        m["@odata.id"] for m in client.get("/redfish/v1/Systems", headers=op).get_json()["Members"]
    ]
    assert members == [
        "/redfish/v1/Systems/lab-a.ostest-master-0",
        "/redfish/v1/Systems/lab-a.ostest-worker-0",
    ]
    for path in (
        "/redfish/v1/Systems/lab-b.other-0",
        "/redfish/v1/Managers/lab-b.other-0",
        "/redfish/v1/Chassis/lab-b.other-0",
        "/redfish/v1/Systems/lab-b.other-0/VirtualMedia/Cd",
    ):
        assert client.get(path, headers=op).status_code == 404, path
    resp = client.post(
        "/redfish/v1/Systems/lab-b.other-0/Actions/ComputerSystem.Reset",
        json={"ResetType": "On"},
        headers=op,
    )
    assert resp.status_code == 404
    managers = client.get("/redfish/v1/Managers", headers=op).get_json()
    assert managers["Members@odata.count"] == 2


def test_label_selector_scope(client, systems):
    lab = basic("labeled")
    members = [
        m["@odata.id"] for m in client.get("/redfish/v1/Systems", headers=lab).get_json()["Members"]
    ]
    assert members == ["/redfish/v1/Systems/lab-a.ostest-master-0"]
    assert client.get("/redfish/v1/Systems/lab-a.ostest-worker-0", headers=lab).status_code == 404


def test_plain_password_logs_a_warning(redis_url, users_file, caplog):
    create_app(Settings(redis_url=redis_url, users_file=users_file))
    assert any(
        "plain-text password" in r.getMessage() and "labeled" in r.getMessage()
        for r in caplog.records
    )


def test_tasks_are_filtered_by_scope(client, systems):
    client.post(
        "/redfish/v1/Systems/lab-b.other-0/Actions/ComputerSystem.Reset",
        json={"ResetType": "On"},
        headers=ADMIN,
    )
    client.post(RESET_URI, json={"ResetType": "On"}, headers=ADMIN)
    everything = client.get("/redfish/v1/TaskService/Tasks", headers=ADMIN).get_json()
    scoped = client.get("/redfish/v1/TaskService/Tasks", headers=basic("operator")).get_json()
    assert everything["Members@odata.count"] == 2
    assert scoped["Members@odata.count"] == 1
    hidden = next(m["@odata.id"] for m in everything["Members"] if m not in scoped["Members"])
    assert client.get(hidden, headers=basic("operator")).status_code == 404


def test_account_service_lists_accounts_and_roles(client):
    service = client.get("/redfish/v1/AccountService", headers=ADMIN).get_json()
    assert service["AccountLockoutThreshold"] == 5
    accounts = client.get("/redfish/v1/AccountService/Accounts", headers=ADMIN).get_json()
    assert accounts["Members@odata.count"] == 4
    admin = client.get("/redfish/v1/AccountService/Accounts/admin", headers=ADMIN).get_json()
    assert admin["RoleId"] == "Administrator" and admin["Password"] is None
    assert "password_hash" not in str(admin) and "$2b$" not in str(admin)
    role = client.get("/redfish/v1/AccountService/Roles/ReadOnly", headers=ADMIN).get_json()
    assert role["AssignedPrivileges"] == ["Login", "ConfigureSelf"]
    # Accounts of the users file are read-only through Redfish (tests/api/test_accounts.py).
    refused = client.patch(
        "/redfish/v1/AccountService/Accounts/admin", json={"RoleId": "ReadOnly"}, headers=ADMIN
    )
    assert refused.status_code == 400 and error_ids(refused) == ["PropertyNotWritable"]


def test_users_file_change_is_picked_up(client, users_file, monkeypatch):
    monkeypatch.setattr(auth_mod, "RELOAD_CHECK_SECONDS", 0.0)
    assert client.get("/redfish/v1/SessionService", headers=basic("viewer")).status_code == 200
    text = open(users_file).read().replace("name: viewer", "name: watcher")
    with open(users_file, "w") as fh:
        fh.write(text)
    stat = os.stat(users_file)
    os.utime(users_file, (stat.st_atime, stat.st_mtime + 5))
    assert client.get("/redfish/v1/SessionService", headers=basic("viewer")).status_code == 401


def test_login_through_the_members_property(client):
    resp = client.post(
        f"{SESSIONS}/Members", json={"UserName": "admin", "Password": PASSWORDS["admin"]}
    )
    assert resp.status_code == 201
    assert resp.headers["X-Auth-Token"]


def test_basic_auth_verifies_bcrypt_once_then_uses_the_cache(client, systems, monkeypatch):
    calls = []
    real = auth_mod.bcrypt.checkpw

    def counting(password, hashed):
        calls.append(1)
        return real(password, hashed)

    monkeypatch.setattr(auth_mod.bcrypt, "checkpw", counting)
    for _ in range(10):
        assert client.get(SYS_URI, headers=ADMIN).status_code == 200
    assert len(calls) == 1
    # A wrong password never hits the cache.
    bad = {"Authorization": "Basic YWRtaW46bm9wZQ=="}
    assert client.get(SYS_URI, headers=bad).status_code == 401
    assert len(calls) == 2
