"""Fixtures for the fuzz tests: the API test fixtures from tests/api/api_fixtures.py."""

from __future__ import annotations

from tests.api.api_fixtures import app, app_settings, client, queues, systems, users_file

__all__ = ["app", "app_settings", "client", "queues", "systems", "users_file"]
