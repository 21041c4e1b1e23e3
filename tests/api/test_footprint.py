"""The API process stays small: no Kubernetes client, worker code or task bodies imported."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import redis
from api_helpers import (
    ADMIN,
    CD_URI,
    EJECT_URI,
    INSERT_URI,
    PASSWORDS,
    RESET_URI,
    SYS_URI,
)
from celery.result import AsyncResult

from app.auth import SESSIONS_PATH
from fleetfish.celery_config import MEDIA_QUEUE

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = ("kubernetes", "workers", "tasks", "requests")
PROBE = """
import json, sys
from app import create_app
from fleetfish.settings import Settings
app = create_app(Settings(redis_url=sys.argv[1]))
client = app.test_client()
client.get("/redfish/v1/")
client.get("/redfish/v1/Systems", headers={"Authorization": "Basic YTpi"})
# VmHWM, not ru_maxrss: the latter keeps the peak of the forking parent (pytest) across exec.
status = open("/proc/self/status").read()
peak_kib = int(status.split("VmHWM:")[1].split()[0])
print(json.dumps({"modules": sorted(sys.modules), "max_rss_mib": peak_kib / 1024}))
"""


def test_api_imports_no_cluster_or_worker_code_and_stays_small(redis_url):
    out = subprocess.run(
        [sys.executable, "-c", PROBE, redis_url],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    loaded = [m for m in report["modules"] if m.split(".")[0] in FORBIDDEN or m in FORBIDDEN]
    assert loaded == []
    # About 50 MiB alone (Flask, redis-py, Celery's client side). Printed, not asserted: inside
    # a loaded full run it read 156 MiB once; memory targets belong to the benchmarks.
    print(f"API process peak RSS: {report['max_rss_mib']:.0f} MiB")


def test_answered_calls_leave_no_celery_results_behind(client, systems):
    """Every InsertMedia sends a chord; the API never waits for it, so nothing of it may stay
    referenced after the answer (Celery's Redis backend files each chord header as a pending
    result to wait on, one entry per call for ever: the API's memory grew ~4 KiB per cycle)."""
    for cycle in range(25):
        assert client.post(EJECT_URI, json={}, headers=ADMIN).status_code in (202, 204)
        image = f"http://192.0.2.10:8080/redfish/boot-{cycle}.iso"
        assert client.post(INSERT_URI, json={"Image": image}, headers=ADMIN).status_code == 202
        assert client.post(RESET_URI, json={"ResetType": "On"}, headers=ADMIN).status_code == 202
    gc.collect()
    alive = [o for o in gc.get_objects() if isinstance(o, AsyncResult)]
    assert alive == [], f"{len(alive)} results still referenced"


def _redis_commands(redis_url: str, call) -> list[str]:
    """The commands the API sent to Redis while ``call`` ran (not those its scripts ran)."""
    marker = "ff-footprint-end"
    watcher = redis.Redis.from_url(redis_url, decode_responses=True)
    ender = redis.Redis.from_url(redis_url, decode_responses=True)
    ender.ping()  # connected before the feed starts: its handshake is not counted
    sent: list[str] = []
    with watcher.monitor() as feed:
        call()
        ender.echo(marker)  # after the call: the feed holds everything the call sent before it
        for _ in range(1000):
            entry = feed.next_command()
            if entry["command"] == f"ECHO {marker}":
                break
            # The login lockout check is remembered per user for a while (app/sessions.py).
            if entry.get("client_type") != "lua" and "ff:authlock" not in entry["command"]:
                sent.append(entry["command"].split(" ", 1)[0])
    watcher.close()
    ender.close()
    return sent


def test_insert_media_and_reset_cost_few_redis_commands(client, systems, redis_url):
    """Each Ironic call costs the API CPU per Redis command, and Ironic sends them for every
    node at once. InsertMedia: the system, the slot and its credentials, then one script that
    records the request, its event, the chord counter and the message (no "task-sent"
    event: Flower shows a task from the worker's events).
    A deferred Reset: the system, one script, the event log."""
    image = "http://192.0.2.10:8080/redfish/boot-{}.iso"
    # A first round opens the connections and loads the scripts; the second is what every
    # later provisioning costs.
    assert (
        client.post(INSERT_URI, json={"Image": image.format(0)}, headers=ADMIN).status_code == 202
    )
    assert client.post(RESET_URI, json={"ResetType": "On"}, headers=ADMIN).status_code == 202
    insert = _redis_commands(
        redis_url,
        lambda: client.post(INSERT_URI, json={"Image": image.format(1)}, headers=ADMIN),
    )
    reset = _redis_commands(
        redis_url,
        lambda: client.post(RESET_URI, json={"ResetType": "On"}, headers=ADMIN),
    )
    assert insert.count("EVALSHA") == 1 and "LPUSH" not in insert, " ".join(insert)
    assert len(insert) <= 4, " ".join(insert)
    # ... and that one script queued the media work.
    assert redis.Redis.from_url(redis_url).llen(MEDIA_QUEUE) == 2
    assert "PUBLISH" not in insert
    assert len(reset) <= 3, " ".join(reset)


def _round_trips(app, call) -> tuple[int, object]:
    """Round trips of the app's Redis client while ``call`` ran (one connection checkout per
    command or pipeline), and what ``call`` returned."""
    pool = app.extensions["fleetfish.store"].r.connection_pool
    checkouts = 0
    checkout = pool.get_connection

    def counted(*args, **kwargs):
        nonlocal checkouts
        checkouts += 1
        return checkout(*args, **kwargs)

    pool.get_connection = counted
    try:
        answer = call()
    finally:
        pool.get_connection = checkout
    return checkouts, answer


def test_a_session_call_reads_its_system_in_the_session_round_trip(app, client, systems):
    """Ironic authenticates by session: the token check and the system the call reads first
    share one round trip (GET system or media: nothing else; InsertMedia: its one script)."""
    login = client.post(SESSIONS_PATH, json={"UserName": "admin", "Password": PASSWORDS["admin"]})
    token = {"X-Auth-Token": login.headers["X-Auth-Token"]}

    def calls(round_: int) -> dict:
        image = {"Image": f"http://192.0.2.10:8080/redfish/boot-{round_}.iso"}
        return {
            "GET system": lambda: client.get(SYS_URI, headers=token),
            "GET media": lambda: client.get(CD_URI, headers=token),
            "InsertMedia": lambda: client.post(INSERT_URI, json=image, headers=token),
            "EjectMedia": lambda: client.post(EJECT_URI, json={}, headers=token),
            "Reset": lambda: client.post(RESET_URI, json={"ResetType": "ForceOff"}, headers=token),
        }

    # A first round loads the scripts (a fresh Redis answers NOSCRIPT once per script).
    for call in calls(0).values():
        call()
    trips = {}
    for name, call in calls(1).items():
        trips[name], answer = _round_trips(app, call)
        assert answer.status_code in (200, 202, 204), (name, answer.get_json())
    assert trips["GET system"] == 1 and trips["GET media"] == 1, trips
    assert trips["InsertMedia"] == 2, trips
    # The answers are the system's: another system's reads are never taken for them.
    other = client.get(SYS_URI.replace(SYS_URI.rsplit("/", 1)[1], systems[1]), headers=token)
    assert other.get_json()["Id"] == systems[1]


def test_every_read_of_a_provisioning_costs_one_round_trip_and_a_boot_patch_three(
    app, client, systems
):
    """Ironic reads the Manager, its VirtualMedia collection and the CD once per media call
    (three times per provisioning) and the system before and after each step: each read is
    the session check's round trip alone. A PATCH of the boot override: that round trip, its
    checked write, and the message of its work."""
    login = client.post(SESSIONS_PATH, json={"UserName": "admin", "Password": PASSWORDS["admin"]})
    token = {"X-Auth-Token": login.headers["X-Auth-Token"]}
    manager = SYS_URI.replace("/Systems/", "/Managers/")
    reads = {
        "GET system": SYS_URI,
        "GET manager": manager,
        "GET manager media": f"{manager}/VirtualMedia",
        "GET manager CD": f"{manager}/VirtualMedia/Cd",
        "GET system media": f"{SYS_URI}/VirtualMedia",
    }

    def patch(target: str):
        boot = {"BootSourceOverrideTarget": target, "BootSourceOverrideEnabled": "Once"}
        return client.patch(SYS_URI, json={"Boot": boot}, headers=token)

    patch("Pxe")  # loads the write's script (a fresh Redis answers NOSCRIPT once)
    trips = {}
    for name, uri in reads.items():
        trips[name], answer = _round_trips(app, lambda uri=uri: client.get(uri, headers=token))
        assert answer.status_code == 200, (name, answer.get_json())
    trips["PATCH boot"], answer = _round_trips(app, lambda: patch("Cd"))
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json()["Boot"]["BootSourceOverrideTarget"] == "Cd"
    assert trips == {**dict.fromkeys(reads, 1), "PATCH boot": 3}, trips
    # The answer's ETag is the one the system now has.
    assert client.get(SYS_URI, headers=token).headers["ETag"] == answer.headers["ETag"]
