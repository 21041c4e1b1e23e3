"""Every route from url_map, every method: 401 without valid credentials, except the open ones."""

from __future__ import annotations

import base64
import time

import pytest
from security_helpers import body_for, concrete_routes, error_ids, is_open

from app import create_app
from fleetfish.settings import Settings
from tests.api.api_helpers import ADMIN, PASSWORDS, SYS_URI

SESSIONS = "/redfish/v1/SessionService/Sessions"
# Every route with bad credentials, in quick succession: 401 each time. The per-process bcrypt
# budget would answer 503 to some of them; it is tested in test_bruteforce.py.
pytestmark = pytest.mark.usefixtures("unbounded_bcrypt")


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _login(client, user="operator") -> tuple[str, str]:
    resp = client.post(SESSIONS, json={"UserName": user, "Password": PASSWORDS[user]})
    assert resp.status_code == 201
    return resp.headers["X-Auth-Token"], resp.headers["Location"]


def _assert_every_route_401(app, client, store, headers: dict[str, str]) -> int:
    checked = 0
    before = sorted(store.r.scan_iter("ff:*"))
    for method, path in concrete_routes(app):
        if is_open(method, path):
            continue
        resp = client.open(path, method=method, json=body_for(path), headers=headers)
        assert resp.status_code == 401, (method, path, resp.status_code)
        assert resp.headers["WWW-Authenticate"].startswith("Basic")
        if method != "HEAD":
            assert error_ids(resp) == ["NoValidSession"], (method, path)
        checked += 1
    # Nothing was created or changed (lock-out counters aside).
    after = [k for k in sorted(store.r.scan_iter("ff:*")) if not k.startswith("ff:auth")]
    assert after == [k for k in before if not k.startswith("ff:auth")]
    return checked


CREDENTIALS = {
    "none": {},
    "wrong password": _basic("operator", "not-the-password"),
    "unknown user": _basic("nobody", "x"),
    "empty user": _basic("", ""),
    "not basic": {"Authorization": "Bearer abc"},
    "garbage basic": {"Authorization": "Basic !!!not-base64"},
    "unknown token": {"X-Auth-Token": "A" * 43},
    "empty token": {"X-Auth-Token": ""},
}


@pytest.mark.parametrize("kind", sorted(CREDENTIALS))
def test_every_route_refuses_bad_credentials(app, client, store, systems, kind):
    assert _assert_every_route_401(app, client, store, CREDENTIALS[kind]) > 50


def test_deleted_session_token_is_refused_everywhere(app, client, store, systems):
    token, location = _login(client)
    assert client.get(SYS_URI, headers={"X-Auth-Token": token}).status_code == 200
    assert client.delete(location, headers={"X-Auth-Token": token}).status_code == 204
    _assert_every_route_401(app, client, store, {"X-Auth-Token": token})


def test_expired_session_token_is_refused_everywhere(redis_url, users_file, store, systems):
    app = create_app(Settings(redis_url=redis_url, users_file=users_file, session_timeout=1))
    client = app.test_client()
    token, _ = _login(client)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and list(store.r.scan_iter("ff:sess:*")):
        time.sleep(0.1)
    _assert_every_route_401(app, client, store, {"X-Auth-Token": token})


def test_a_valid_token_beats_nothing_else(app, client, systems):
    """A bad token is not rescued by good Basic credentials sent alongside (no fallback)."""
    headers = {**ADMIN, "X-Auth-Token": "B" * 43}
    assert client.get(SYS_URI, headers=headers).status_code == 401


def test_open_routes_answer_without_credentials(app, client):
    opened = [(m, p) for m, p in concrete_routes(app) if is_open(m, p)]
    assert {p for _, p in opened} >= {"/redfish", "/redfish/v1", "/metrics", SESSIONS}
    for method, path in opened:
        body = {"UserName": "x", "Password": "y"} if method == "POST" else None
        resp = client.open(path, method=method, json=body)
        # Login with wrong credentials is 401 by design; everything else answers.
        assert resp.status_code == (401 if method == "POST" else 200), (method, path)
