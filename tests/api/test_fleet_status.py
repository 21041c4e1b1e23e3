"""The operator's fleet view: /fleet and /fleet/status.json in the API, and `fleetfish nodes`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleetfish.eventlog import EventLog
from tests.api.api_helpers import ADMIN, INSERT_URI, ISO, RESET_URI, SYS, basic

FLEETFISH = shutil.which("fleetfish", path=str(Path(sys.executable).parent))


def test_the_page_asks_a_browser_for_credentials(client, systems):
    for path in ("/fleet", "/fleet/status.json"):
        reply = client.get(path)
        assert reply.status_code == 401
        assert reply.headers["WWW-Authenticate"].startswith("Basic")


def test_the_page_loads_nothing_from_elsewhere(client, systems):
    reply = client.get("/fleet", headers=ADMIN)
    assert reply.status_code == 200 and reply.mimetype == "text/html"
    html = reply.get_data(as_text=True)
    assert "<script src" not in html and "<link" not in html and "http" not in html
    policy = reply.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "script-src 'sha256-" in policy


def test_status_shows_media_deferred_power_on_and_events(client, systems, queues, store):
    client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    client.post(RESET_URI, json={"ResetType": "On"}, headers=ADMIN)
    store.update_media(SYS, "Cd", 1, progress="42.0")
    rows = {r["id"]: r for r in client.get("/fleet/status.json", headers=ADMIN).json["systems"]}
    assert sorted(rows) == sorted(systems)
    node = rows[SYS]
    assert node["power"] == "PoweringOn"
    assert (node["media"], node["progress"], node["image"]) == ("importing", 42.0, "boot-1234.iso")
    assert node["deferred"] == "On"
    assert node["events"][0]["message"].startswith("Reset On deferred")
    assert node["events"][1]["message"] == f"Virtual media Cd inserted: {ISO}"


def test_status_is_filtered_by_the_users_scope(client, systems):
    reply = client.get("/fleet/status.json", headers=basic("operator"))
    assert [r["namespace"] for r in reply.json["systems"]] == ["lab-a", "lab-a"]


def test_a_failure_shows_as_the_last_error(client, systems, queues, store):
    client.post(INSERT_URI, json={"Image": ISO}, headers=ADMIN)
    store.fail_media(SYS, "Cd", 1, "HTTP 404 from the image server")
    rows = {r["id"]: r for r in client.get("/fleet/status.json", headers=ADMIN).json["systems"]}
    assert rows[SYS]["media"] == "failed"
    assert rows[SYS]["error"] == "HTTP 404 from the image server"


@pytest.fixture
def nodes(redis_url, systems):
    assert FLEETFISH, "the fleetfish console script is not installed in this environment"

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [FLEETFISH, "nodes", "--redis-url", redis_url, *args],
            capture_output=True,
            text=True,
            timeout=30,
        )

    return run


def test_nodes_prints_one_line_per_system(nodes, store):
    log = EventLog(store.r)
    log.booted(SYS, "vmi-1", "Cd", "http://192.0.2.10/boot.iso")
    store.r.hset(f"ff:power:{SYS}", "error", "the VM did not run within 300 s")
    result = nodes()
    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.split()[:3] == ["SYSTEM", "POWER", "MEDIA"]
    assert [line.split()[0] for line in lines] == sorted(
        ["lab-a.ostest-master-0", "lab-a.ostest-worker-0", "lab-b.other-0"]
    )
    master = lines[0]
    assert " Off " in master and " Cd " in master
    assert master.endswith("the VM did not run within 300 s")


def test_nodes_filters_by_namespace_and_label_selector(nodes):
    by_namespace = nodes("-n", "lab-b").stdout.splitlines()[1:]
    assert [line.split()[0] for line in by_namespace] == ["lab-b.other-0"]
    by_label = nodes("-l", "app.kubernetes.io/part-of=fleetfish-lab").stdout.splitlines()[1:]
    assert [line.split()[0] for line in by_label] == ["lab-a.ostest-master-0"]
    bad = nodes("-l", "a in (b")
    assert bad.returncode == 2 and "invalid label selector" in bad.stderr


def test_nodes_watch_refreshes_count_times_and_json_reads_back(nodes):
    watched = nodes("--watch", "--count", "3", "--interval", "0.1")
    assert watched.returncode == 0
    assert watched.stdout.count("SYSTEM ") == 3
    document = json.loads(nodes("--json", "--events", "2").stdout)
    assert len(document["systems"]) == 3


def test_nodes_says_when_redis_cannot_be_read(tmp_path):
    assert FLEETFISH
    result = subprocess.run(
        [FLEETFISH, "nodes", "--redis-url", "redis://:s3cret@127.0.0.1:1/0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("fleetfish nodes: cannot read 127.0.0.1:1/0")
    assert "s3cret" not in result.stderr
