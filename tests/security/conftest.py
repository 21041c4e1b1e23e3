"""Fixtures for the security tests: the API test fixtures from tests/api/api_fixtures.py."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))

from api_fixtures import app, app_settings, client, queues, systems, users_file  # noqa: E402

__all__ = ["app", "app_settings", "client", "queues", "systems", "users_file"]
