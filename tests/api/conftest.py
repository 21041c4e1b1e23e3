"""Fixtures for the API tests (defined in api_fixtures, shared with tests/fuzz and tests/security)."""

from __future__ import annotations

from tests.api.api_fixtures import app, app_settings, client, queues, systems, users_file

__all__ = ["app", "app_settings", "client", "queues", "systems", "users_file"]
