"""Fixtures for the security tests: the API test fixtures from tests/api/api_fixtures.py."""

from __future__ import annotations

import pytest

from app.bcrypt_budget import BcryptBudget
from tests.api.api_fixtures import app, app_settings, client, queues, systems, users_file

__all__ = ["app", "app_settings", "client", "queues", "systems", "unbounded_bcrypt", "users_file"]


@pytest.fixture
def unbounded_bcrypt(app):
    """The app's bcrypt budget never runs out (its clock stands still): for tests that count
    failed logins rather than time them."""
    app.extensions["fleetfish.bcrypt_budget"] = BcryptBudget(clock=lambda: 0.0)
