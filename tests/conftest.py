"""Session fixtures shared by every test layer: an embedded Redis, settings, a Store."""

from __future__ import annotations

import os

import pytest
import redis

from fleetfish.settings import Settings
from fleetfish.store import Store
from lab.ports import free_port
from lab.redis_embedded import EmbeddedRedis


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A real redis-server for the whole session (or REDIS_URL's, when the caller gives one)."""
    if os.environ.get("FLEETFISH_TEST_REDIS_URL"):
        yield os.environ["FLEETFISH_TEST_REDIS_URL"]
        return
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"), free_port()).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server):
    """The session Redis, emptied before each test so tests never see each other's keys."""
    client = redis.Redis.from_url(redis_server)
    client.flushall()
    client.close()
    return redis_server


@pytest.fixture
def settings(redis_url) -> Settings:
    return Settings(redis_url=redis_url)


@pytest.fixture
def store(settings) -> Store:
    return Store.from_url(settings.redis_url)
