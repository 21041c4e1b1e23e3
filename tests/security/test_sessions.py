"""Session tokens: random, long, expiring after inactivity, revocable, not stored in clear."""

from __future__ import annotations

import collections
import math
import time

from app import create_app
from fleetfish.settings import Settings
from tests.api.api_helpers import PASSWORDS, SYS_URI

SESSIONS = "/redfish/v1/SessionService/Sessions"
TOKEN_ALPHABET = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _login(client, user="operator"):
    resp = client.post(SESSIONS, json={"UserName": user, "Password": PASSWORDS[user]})
    assert resp.status_code == 201
    return resp.headers["X-Auth-Token"], resp.headers["Location"]


def test_tokens_are_long_random_and_unique(client):
    tokens = [_login(client)[0] for _ in range(60)]
    assert len(set(tokens)) == len(tokens)
    assert all(len(t) >= 43 and set(t) <= TOKEN_ALPHABET for t in tokens)  # >= 256 bits
    # Empirical Shannon entropy per character close to log2(64) = 6 bits (a counter, a
    # timestamp or hex would be far lower).
    counts = collections.Counter("".join(tokens))
    total = sum(counts.values())
    entropy = -sum(c / total * math.log2(c / total) for c in counts.values())
    assert entropy > 5.8, entropy
    # No shared prefix or suffix between tokens (nothing derived from the user or the time).
    assert len({t[:6] for t in tokens}) > 55 and len({t[-6:] for t in tokens}) > 55


def test_session_id_does_not_reveal_the_token(client):
    token, location = _login(client)
    session_id = location.rsplit("/", 1)[-1]
    assert session_id not in token and token[:16] != session_id


def test_delete_revokes_at_once(client, systems):
    token, location = _login(client)
    other, _ = _login(client)
    assert client.get(SYS_URI, headers={"X-Auth-Token": token}).status_code == 200
    assert client.delete(location, headers={"X-Auth-Token": token}).status_code == 204
    assert client.get(SYS_URI, headers={"X-Auth-Token": token}).status_code == 401
    assert client.delete(location, headers={"X-Auth-Token": other}).status_code == 404
    assert client.get(SYS_URI, headers={"X-Auth-Token": other}).status_code == 200


def test_sessions_expire_after_inactivity_and_use_extends_them(
    redis_url, users_file, store, systems
):
    app = create_app(Settings(redis_url=redis_url, users_file=users_file, session_timeout=2))
    client = app.test_client()
    kept, _ = _login(client)
    idle, _ = _login(client)
    deadline = time.monotonic() + 8
    # Use one token every 0.5 s; leave the other alone (not even a GET) until its key is gone.
    while time.monotonic() < deadline and len(list(store.r.scan_iter("ff:sess:*"))) > 1:
        assert client.get(SYS_URI, headers={"X-Auth-Token": kept}).status_code == 200
        time.sleep(0.5)
    assert client.get(SYS_URI, headers={"X-Auth-Token": idle}).status_code == 401
    assert client.get(SYS_URI, headers={"X-Auth-Token": kept}).status_code == 200
    for key in store.r.scan_iter("ff:sess*"):
        if store.r.type(key) != "zset":
            assert 0 < store.r.ttl(key) <= 2


def test_session_of_a_removed_user_is_refused(client, users_file, systems, monkeypatch):
    import os

    import app.auth as auth_mod

    monkeypatch.setattr(auth_mod, "RELOAD_CHECK_SECONDS", 0.0)
    token, _ = _login(client)
    text = open(users_file).read().replace("name: operator", "name: retired")
    with open(users_file, "w") as fh:
        fh.write(text)
    stat = os.stat(users_file)
    os.utime(users_file, (stat.st_atime, stat.st_mtime + 5))
    assert client.get(SYS_URI, headers={"X-Auth-Token": token}).status_code == 401
