"""Fixtures shared by tests/api, tests/fuzz and tests/security: users file, app, client, systems."""

from __future__ import annotations

import pytest

from app import create_app
from fleetfish.mirror import mirror_doc
from fleetfish.settings import Settings
from tests.api.api_helpers import LAB_LABELS, USERS_YAML, Queues, make_vm


@pytest.fixture
def users_file(tmp_path):
    path = tmp_path / "users.yaml"
    path.write_text(USERS_YAML)
    return str(path)


@pytest.fixture
def app_settings(redis_url, users_file) -> Settings:
    return Settings(redis_url=redis_url, users_file=users_file)


@pytest.fixture
def app(app_settings):
    return create_app(app_settings)


@pytest.fixture
def client(app):
    return app.test_client()


def seed_systems(store) -> list[str]:
    """Three systems: two in lab-a (one labelled for the lab), one in lab-b."""
    docs = [
        mirror_doc(make_vm("lab-a", "ostest-master-0", labels=LAB_LABELS), None),
        mirror_doc(make_vm("lab-a", "ostest-worker-0", mac="52:54:00:00:00:02"), None),
        mirror_doc(make_vm("lab-b", "other-0", mac="52:54:00:00:00:03", efi=False), None),
    ]
    for doc in docs:
        store.put_system(doc)
    return [d["id"] for d in docs]


@pytest.fixture
def systems(store):
    return seed_systems(store)


@pytest.fixture
def queues(redis_url):
    return Queues(redis_url)
