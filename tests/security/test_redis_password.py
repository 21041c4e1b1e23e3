"""Redis with a password (REDIS_URL=redis://:pw@...) for the API and the workers; JSON-only Celery."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from celery import Celery
from security_helpers import error_ids

from app import create_app
from app.dispatch import make_celery
from fleetfish.celery_config import MEDIA_QUEUE, celery_config
from fleetfish.settings import Settings
from fleetfish.store import Store, key_media
from lab.ports import free_port
from lab.redis_embedded import EmbeddedRedis
from tests.api.api_fixtures import seed_systems
from tests.api.api_gunicorn import running_gunicorn
from tests.api.api_helpers import ADMIN, RESET_URI, SYS, SYS_URI, Queues

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "redis-pw-8812"


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory):
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis-pw"), free_port(), password=PASSWORD)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pw_url(locked_redis):
    store = Store.from_url(locked_redis.url)
    store.r.flushall()
    seed_systems(store)
    return locked_redis.url


def test_the_server_really_wants_the_password(locked_redis):
    url = locked_redis.url.replace(f":{PASSWORD}@", "")
    with pytest.raises(Exception, match="(?i)auth"):
        Store.from_url(url).r.ping()


def test_api_reads_and_queues_with_the_password(pw_url, users_file, caplog):
    caplog.set_level(logging.DEBUG)
    client = create_app(Settings(redis_url=pw_url, users_file=users_file)).test_client()
    assert client.get(SYS_URI, headers=ADMIN).status_code == 200
    assert client.post(RESET_URI, json={"ResetType": "On"}, headers=ADMIN).status_code == 202
    assert Queues(pw_url).names("fleetfish.power") == ["power.reset"]
    assert PASSWORD not in caplog.text


def test_wrong_redis_password_is_503_not_500(locked_redis, users_file):
    url = locked_redis.url.replace(PASSWORD, "not-it")
    client = create_app(Settings(redis_url=url, users_file=users_file)).test_client()
    resp = client.get(SYS_URI, headers=ADMIN)
    assert resp.status_code == 503
    assert error_ids(resp) == ["ServiceTemporarilyUnavailable"]
    assert "not-it" not in resp.get_data(as_text=True)


def test_gunicorn_with_a_password_redis(pw_url, users_file, tmp_path):
    with running_gunicorn(pw_url, users_file, tmp_path) as (port, log_path):
        reply = requests.get(
            f"http://127.0.0.1:{port}{SYS_URI}", auth=("admin", "admin-pw"), timeout=10
        )
        assert reply.status_code == 200
        assert PASSWORD not in log_path.read_text()


def test_celery_accepts_json_only():
    settings = Settings(redis_url="redis://127.0.0.1:1/0")
    assert celery_config(settings)["accept_content"] == ["json"]
    assert celery_config(settings)["task_serializer"] == "json"
    api = make_celery(settings)
    assert list(api.conf.accept_content) == ["json"]
    assert list(api.conf.result_accept_content) == ["json"]


def _start_worker(url: str, log_file) -> subprocess.Popen:
    env = {
        **os.environ,
        "REDIS_URL": url,
        "PYTHONPATH": str(REPO),
        "FLEETFISH_KUBECONFIG": "/nonexistent/kubeconfig",
    }
    cmd = [
        sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker",
        "--pool", "threads", "--concurrency", "1", "-Q", MEDIA_QUEUE,
        "-n", f"sec{os.getpid()}@%h", "--loglevel", "INFO",
        "--without-mingle", "--without-gossip", "--without-heartbeat",
    ]  # fmt: skip
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT)


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_worker_with_password_rejects_a_pickled_message(pw_url, tmp_path):
    store = Store.from_url(pw_url)
    # media.failed for a stale generation only marks its task Cancelled: an effect without a cluster.
    store.r.hset(key_media(SYS), mapping={"gen": "5", "state": "Starting"})
    pickled_task = store.new_task("InsertMedia Cd", SYS, state="Running")
    json_task = store.new_task("InsertMedia Cd", SYS, state="Running")
    sender = Celery("pickle-sender", set_as_current=False)
    sender.conf.update(celery_config(Settings(redis_url=pw_url)))
    sender.conf.accept_content = ["json", "pickle"]
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log_file:
        worker = _start_worker(pw_url, log_file)
        try:
            sender.send_task("media.failed", args=[SYS, "Cd", 1, pickled_task], serializer="pickle")
            _wait(
                lambda: "untrusted content of type pickle" in log_path.read_text(),
                60,
                "the worker to refuse the pickled message",
            )
            # The control: the same task as JSON runs on the same worker.
            sender.send_task("media.failed", args=[SYS, "Cd", 1, json_task], serializer="json")
            _wait(lambda: store.get_task(json_task)["state"] == "Cancelled", 30, "the JSON task")
        finally:
            worker.terminate()
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(timeout=5)
            sender.close()
    assert store.get_task(pickled_task)["state"] == "Running"
    assert store.r.llen(MEDIA_QUEUE) == 0
    assert PASSWORD not in log_path.read_text()
