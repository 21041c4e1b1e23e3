"""Password guessing: throttled per client address as well as per name, bcrypt cost bounded."""

from __future__ import annotations

import base64

import bcrypt
import pytest
from security_helpers import error_ids

import app.sessions as sessions_mod
from app import auth, create_app
from app.bcrypt_budget import BcryptBudget
from fleetfish.settings import Settings
from tests.api.api_helpers import ADMIN, PASSWORDS, SYS_URI

SESSIONS = "/redfish/v1/SessionService/Sessions"
CHECK_SECONDS = 0.25  # about one cost-12 bcrypt check on a small core


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _from(address: str) -> dict[str, dict[str, str]]:
    return {"environ_base": {"REMOTE_ADDR": address}}


@pytest.fixture
def client(app, unbounded_bcrypt, monkeypatch):
    """The API with a budget that never runs out, and a cost-4 dummy hash for unknown names:
    the lock-out tests count checks, they do not time them."""
    monkeypatch.setattr(auth, "_DUMMY_HASH", bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=4)))
    return app.test_client()


@pytest.fixture
def checks(monkeypatch):
    """Counts bcrypt checks (the real ones still run)."""
    calls = []
    real = bcrypt.checkpw

    def counting(password, hashed):
        calls.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    return calls


def test_guesses_over_many_unknown_names_from_one_address_are_throttled(
    client, store, systems, checks
):
    attacker = _from("198.51.100.7")
    for i in range(sessions_mod.ADDRESS_THRESHOLD):
        resp = client.get(SYS_URI, headers=_basic(f"ghost-{i}", "guess"), **attacker)
        assert resp.status_code == 401
    assert len(checks) == sessions_mod.ADDRESS_THRESHOLD  # no name reached its own threshold
    assert store.r.ttl("ff:authlock-addr:198.51.100.7") > 50
    # Locked: further guesses, new names or the Sessions POST, cost no bcrypt.
    for i in range(10):
        resp = client.get(SYS_URI, headers=_basic(f"other-{i}", "guess"), **attacker)
        assert resp.status_code == 401
    resp = client.post(SESSIONS, json={"UserName": "x", "Password": "y"}, **attacker)
    assert resp.status_code == 401
    assert len(checks) == sessions_mod.ADDRESS_THRESHOLD
    # The address is refused even with a real password; other addresses are not affected.
    assert client.get(SYS_URI, headers=ADMIN, **attacker).status_code == 401
    assert client.get(SYS_URI, headers=ADMIN, **_from("192.0.2.50")).status_code == 200


def test_address_failures_count_across_known_and_unknown_names(client, store, systems):
    attacker = _from("198.51.100.8")
    names = ["admin"] * 4 + ["operator"] * 4 + [f"ghost-{i}" for i in range(12)]
    assert len(names) == sessions_mod.ADDRESS_THRESHOLD
    for name in names[:-1]:
        client.post(SESSIONS, json={"UserName": name, "Password": "guess"}, **attacker)
    assert not store.r.exists("ff:authlock-addr:198.51.100.8")
    assert client.get(SYS_URI, headers=ADMIN, **attacker).status_code == 200
    client.post(SESSIONS, json={"UserName": names[-1], "Password": "guess"}, **attacker)
    assert store.r.exists("ff:authlock-addr:198.51.100.8")


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def budgeted(redis_url, users_file, systems, monkeypatch):
    """The app with a budget on a fake clock; every bcrypt check 'takes' CHECK_SECONDS."""
    clock = FakeClock()
    app = create_app(Settings(redis_url=redis_url, users_file=users_file))
    app.extensions["fleetfish.bcrypt_budget"] = BcryptBudget(clock=clock)
    monkeypatch.setattr(auth, "_DUMMY_HASH", bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=4)))
    real = bcrypt.checkpw
    calls = []

    def slow(password, hashed):
        calls.append(hashed)
        clock.now += CHECK_SECONDS
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", slow)
    return app.test_client(), clock, calls


def test_a_flood_of_new_credentials_is_deferred_while_verified_ones_keep_working(budgeted, store):
    client, clock, calls = budgeted
    assert client.get(SYS_URI, headers=ADMIN).status_code == 200  # Ironic, verified once
    token = client.post(
        SESSIONS, json={"UserName": "operator", "Password": PASSWORDS["operator"]}
    ).headers["X-Auth-Token"]
    # Guesses from many addresses and names, so no lock-out stops them: the budget does.
    answers = []
    for i in range(100):
        resp = client.get(SYS_URI, headers=_basic(f"ghost-{i}", "guess"), **_from(f"203.0.113.{i}"))
        answers.append(resp.status_code)
        if resp.status_code == 429:
            break
    assert answers[-1] == 429 and set(answers[:-1]) == {401}, answers
    # Checks run at most at half the time: the burst, then the share of the time they took.
    budget = BcryptBudget()
    assert len(calls) * CHECK_SECONDS * (1 - budget.share) <= budget.burst + CHECK_SECONDS
    assert error_ids(resp) == ["ServiceTemporarilyUnavailable"]
    assert int(resp.headers["Retry-After"]) >= 1
    assert not store.r.exists(f"ff:authfail:ghost-{len(answers) - 1}")  # not counted as a failure
    # Over budget, verified Basic credentials and session tokens are served as before.
    checked = len(calls)
    assert client.get(SYS_URI, headers=ADMIN).status_code == 200
    assert client.get(SYS_URI, headers={"X-Auth-Token": token}).status_code == 200
    assert len(calls) == checked
    # A new login waits for the budget to refill.
    login = {"UserName": "viewer", "Password": PASSWORDS["viewer"]}
    assert client.post(SESSIONS, json=login).status_code == 429
    clock.now += int(resp.headers["Retry-After"])
    assert client.post(SESSIONS, json=login).status_code == 201


def test_over_budget_credentials_verified_before_are_still_checked(budgeted, monkeypatch):
    """Verified credentials leave the 30 s cache; Ironic's next request still gets through."""
    client, clock, calls = budgeted
    monkeypatch.setattr(auth, "CACHE_TTL", 0.0)  # every request needs a bcrypt check
    assert client.get(SYS_URI, headers=ADMIN).status_code == 200
    for i in range(100):
        resp = client.get(SYS_URI, headers=_basic(f"ghost-{i}", "guess"), **_from(f"203.0.113.{i}"))
        if resp.status_code == 429:
            break
    assert resp.status_code == 429
    checked = len(calls)
    assert client.get(SYS_URI, headers=ADMIN).status_code == 200
    assert len(calls) == checked + 1  # checked again, not waved through
    assert client.get(SYS_URI, headers=_basic("admin", "guess")).status_code == 429


def test_budget_refills_at_its_share_of_time():
    clock = FakeClock()
    budget = BcryptBudget(share=0.5, burst=1.0, clock=clock)
    # Each check takes 0.5 s and earns 0.25 s back meanwhile (not the first: the bucket is full).
    for _ in range(3):
        assert budget.available()
        with budget.spending():
            clock.now += 0.5
    assert not budget.available()
    assert budget.retry_after() == 1
    clock.now += 0.1
    assert budget.available()
    with budget.spending():
        clock.now += 5.0  # a slow check: the bucket (full at 1 s meanwhile) ends at -4 s
    assert not budget.available()
    assert budget.retry_after() == 9  # -4 + 0.5 * 9 > 0
    clock.now += 8
    assert not budget.available()
    clock.now += 1
    assert budget.available()
    clock.now += 100  # idle time refills the burst, never more
    with budget.spending():
        clock.now += 1.2
    assert not budget.available()  # min(1, 1 + 0.6) - 1.2
