"""The documented lock-out: 5 failed logins for one name within 60 s lock it for 60 s."""

from __future__ import annotations

import base64
import time

import pytest

import app.sessions as sessions_mod
from tests.api.api_helpers import PASSWORDS, SYS_URI, basic

SESSIONS = "/redfish/v1/SessionService/Sessions"

# These tests count failures in quick succession (cost-12 checks for unknown names); the
# per-process bcrypt budget, which defers some of them, is tested in test_bruteforce.py.
pytestmark = pytest.mark.usefixtures("unbounded_bcrypt")


def _basic(user, password):
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_policy_is_published(client):
    service = client.get("/redfish/v1/AccountService", headers=basic("admin")).get_json()
    assert service["AccountLockoutThreshold"] == sessions_mod.LOCKOUT_THRESHOLD == 5
    assert service["AccountLockoutDuration"] == sessions_mod.LOCKOUT_SECONDS == 60
    assert service["AccountLockoutCounterResetAfter"] == sessions_mod.LOCKOUT_WINDOW == 60


def test_basic_and_session_failures_count_together(client, store, systems):
    for i in range(4):
        if i % 2:
            client.get(SYS_URI, headers=_basic("operator", "wrong"))
        else:
            client.post(SESSIONS, json={"UserName": "operator", "Password": "wrong"})
    # Four failures: not locked yet, the right password works.
    assert client.get(SYS_URI, headers=basic("operator")).status_code == 200
    assert client.get(SYS_URI, headers=_basic("operator", "wrong")).status_code == 401
    # Fifth failure: locked, even the right password is refused, by Basic and by login.
    assert client.get(SYS_URI, headers=basic("operator")).status_code == 401
    login = client.post(SESSIONS, json={"UserName": "operator", "Password": PASSWORDS["operator"]})
    assert login.status_code == 401
    account = client.get("/redfish/v1/AccountService/Accounts/operator", headers=basic("admin"))
    assert account.get_json()["Locked"] is True
    # Other users are not affected; the lock lives in Redis (shared by every API process).
    assert client.get(SYS_URI, headers=basic("admin")).status_code == 200
    assert store.r.ttl("ff:authlock:operator") > 50


def test_existing_sessions_keep_working_during_a_lock_out(client, systems):
    token = client.post(
        SESSIONS, json={"UserName": "operator", "Password": PASSWORDS["operator"]}
    ).headers["X-Auth-Token"]
    for _ in range(5):
        client.get(SYS_URI, headers=_basic("operator", "wrong"))
    assert client.get(SYS_URI, headers=basic("operator")).status_code == 401
    # Documented: the lock-out stops password guessing; issued tokens are revoked by DELETE.
    assert client.get(SYS_URI, headers={"X-Auth-Token": token}).status_code == 200


def test_unknown_names_are_locked_the_same_way(client, store):
    for _ in range(5):
        client.get("/redfish/v1/Systems", headers=_basic("ghost", "x"))
    assert store.r.exists("ff:authlock:ghost")


def test_lock_out_ends_after_its_duration(client, store, systems, monkeypatch):
    monkeypatch.setattr(sessions_mod, "LOCKOUT_SECONDS", 1)
    for _ in range(5):
        client.get(SYS_URI, headers=_basic("operator", "wrong"))
    assert client.get(SYS_URI, headers=basic("operator")).status_code == 401
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and store.r.exists("ff:authlock:operator"):
        time.sleep(0.1)
    assert client.get(SYS_URI, headers=basic("operator")).status_code == 200


def test_attempts_during_the_lock_out_do_not_extend_it(client, store, systems, monkeypatch):
    for _ in range(5):
        client.get(SYS_URI, headers=_basic("operator", "wrong"))
    ttl = store.r.pttl("ff:authlock:operator")
    for _ in range(10):
        client.get(SYS_URI, headers=_basic("operator", "wrong"))
    assert store.r.pttl("ff:authlock:operator") <= ttl
    assert not store.r.exists("ff:authfail:operator")


def test_a_lock_out_from_another_process_applies_within_a_second(
    app, redis_url, users_file, systems
):
    """Each process skips the lock-out lookup for CLEAR_MEMO_SECONDS after a good login."""
    from app import create_app
    from fleetfish.settings import Settings

    here = app.test_client()
    elsewhere = create_app(Settings(redis_url=redis_url, users_file=users_file)).test_client()
    assert here.get(SYS_URI, headers=basic("operator")).status_code == 200  # cached here
    for _ in range(5):
        elsewhere.get(SYS_URI, headers=_basic("operator", "wrong"))
    started = time.monotonic()
    deadline = started + 5
    while (
        time.monotonic() < deadline
        and here.get(SYS_URI, headers=basic("operator")).status_code == 200
    ):
        time.sleep(0.05)
    assert here.get(SYS_URI, headers=basic("operator")).status_code == 401
    assert time.monotonic() - started < sessions_mod.CLEAR_MEMO_SECONDS + 0.5
