"""Fixtures for the security tests: the API test fixtures from tests/api/api_fixtures.py."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))

import pytest  # noqa: E402
from api_fixtures import app, app_settings, client, queues, systems, users_file  # noqa: E402

from app.bcrypt_budget import BcryptBudget  # noqa: E402

__all__ = ["app", "app_settings", "client", "queues", "systems", "unbounded_bcrypt", "users_file"]


@pytest.fixture
def unbounded_bcrypt(app):
    """The app's bcrypt budget never runs out (its clock stands still): for tests that count
    failed logins rather than time them."""
    app.extensions["fleetfish.bcrypt_budget"] = BcryptBudget(clock=lambda: 0.0)
