"""Secrets are compared in constant time: hmac.compare_digest or bcrypt, never ``==``."""

from __future__ import annotations

import ast
from pathlib import Path

import app.auth as auth_mod
from tests.api.api_helpers import PASSWORDS, SYS_URI, basic

APP = Path(__file__).resolve().parents[2] / "app"
SECRET_WORDS = ("password", "passwd", "token", "digest", "secret", "hash", "credential")


def _names(node: ast.AST) -> str:
    return " ".join(
        (
            n.id
            if isinstance(n, ast.Name)
            else n.attr
            if isinstance(n, ast.Attribute)
            else str(n.value)
        )
        for n in ast.walk(node)
        if isinstance(n, (ast.Name, ast.Attribute))
        or (isinstance(n, ast.Constant) and isinstance(n.value, str))
    ).lower()


def test_no_equality_comparison_on_secrets_in_the_api():
    """Code review as a test: no ==/!=/in on anything named like a secret in app/."""
    offenders = []
    for path in sorted(APP.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            if not any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
                continue
            text = _names(node)
            if any(word in text for word in SECRET_WORDS):
                offenders.append(
                    f"{path.relative_to(APP.parent)}:{node.lineno}: {ast.unparse(node)}"
                )
    assert offenders == []


def _spy(monkeypatch):
    calls = {"compare_digest": 0, "checkpw": 0}
    real_compare, real_check = auth_mod.hmac.compare_digest, auth_mod.bcrypt.checkpw

    def compare(a, b):
        calls["compare_digest"] += 1
        return real_compare(a, b)

    def check(password, hashed):
        calls["checkpw"] += 1
        return real_check(password, hashed)

    monkeypatch.setattr(auth_mod.hmac, "compare_digest", compare)
    monkeypatch.setattr(auth_mod.bcrypt, "checkpw", check)
    return calls


def test_bcrypt_then_compare_digest_for_hashed_users(client, systems, monkeypatch):
    calls = _spy(monkeypatch)
    assert client.get(SYS_URI, headers=basic("admin")).status_code == 200
    assert calls == {"compare_digest": 0, "checkpw": 1}
    assert client.get(SYS_URI, headers=basic("admin")).status_code == 200  # from the cache
    assert calls == {"compare_digest": 1, "checkpw": 1}


def test_plain_text_users_use_compare_digest(client, systems, monkeypatch):
    calls = _spy(monkeypatch)
    assert client.get(SYS_URI, headers=basic("labeled")).status_code == 200
    assert calls["compare_digest"] >= 1 and calls["checkpw"] == 0


def test_unknown_users_cost_a_bcrypt_round_too(client, monkeypatch):
    calls = _spy(monkeypatch)
    users = client.application.extensions["fleetfish.users"]
    assert users.verify("no-such-user", PASSWORDS["admin"]) is None
    assert calls["checkpw"] == 1
    # The dummy digest has the production cost, so an unknown name takes as long as a real one.
    assert auth_mod._DUMMY_HASH.startswith(b"$2b$12$")


def test_session_tokens_are_looked_up_by_hash():
    """A token is never compared: its SHA-256 names the Redis key (see app/sessions.py)."""
    source = (APP / "sessions.py").read_text()
    assert "hashlib.sha256(token.encode())" in source
    assert "secrets.token_urlsafe(32)" in source
