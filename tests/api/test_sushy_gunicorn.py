"""Ironic's call sequence, driven with sushy against a real gunicorn (no worker tier: Reset stays deferred)."""

from __future__ import annotations

import re
import socket

import pytest
import requests
import sushy
from sushy.auth import SessionOrBasicAuth

from fleetfish.mirror import mirror_doc
from lab.ironic import IronicLike
from tests.api.api_gunicorn import running_gunicorn
from tests.api.api_helpers import LAB_LABELS, PASSWORDS, SYS, SYS_URI, Queues, make_vm

OLD_ISO = "http://192.0.2.10:8080/redfish/boot-old.iso"
NEW_ISO = "http://192.0.2.10:8080/redfish/boot-new.iso"


@pytest.fixture
def gunicorn(redis_url, users_file, store, tmp_path):
    store.put_system(mirror_doc(make_vm("lab-a", "ostest-master-0", labels=LAB_LABELS), None))
    with running_gunicorn(redis_url, users_file, tmp_path) as (port, log_path):
        yield f"http://127.0.0.1:{port}", log_path


def test_ironic_sequence_with_sushy(gunicorn, redis_url, store):
    url, log_path = gunicorn
    queues = Queues(redis_url)
    # Ironic's first call: the root, without credentials.
    assert (
        requests.get(f"{url}/redfish/v1/", headers={"Connection": "close"}, timeout=10).status_code
        == 200
    )

    auth = SessionOrBasicAuth(username="admin", password=PASSWORDS["admin"])
    conn = sushy.Sushy(f"{url}/redfish/v1", auth=auth)
    assert list(store.r.scan_iter("ff:sess:*")), "sushy should have opened a session"

    try:
        system = conn.get_system(SYS_URI)
        assert system.identity == SYS
        assert [m.identity for m in system.managers] == [SYS]
        assert system.power_state == sushy.POWER_STATE_OFF

        # A previous deploy left media in the slot.
        cd = system.virtual_media.get_members()[0]
        cd.insert_media(OLD_ISO)
        cd.refresh()
        assert cd.inserted is True

        # Eject every inserted CD/DVD (sushy sends no body), then insert the new image.
        for member in system.virtual_media.get_members():
            assert {"CD", "DVD"} & {str(t.value) for t in member.media_types}
            if member.inserted:
                member.eject_media()
        cd.refresh()
        assert cd.inserted is False
        cd.insert_media(NEW_ISO)
        cd.refresh()
        assert cd.inserted is True and cd.image == NEW_ISO

        # The manager exposes the same slot.
        manager_cd = system.managers[0].virtual_media.get_members()[0]
        assert manager_cd.image == NEW_ISO

        system.set_system_boot_options(mode=sushy.BOOT_SOURCE_MODE_UEFI)
        system.set_system_boot_options(
            target=sushy.BOOT_SOURCE_TARGET_CD, enabled=sushy.BOOT_SOURCE_ENABLED_ONCE
        )
        system.refresh()
        assert system.boot.target == sushy.BOOT_SOURCE_TARGET_CD
        assert system.boot.enabled == sushy.BOOT_SOURCE_ENABLED_ONCE
        assert system.boot.mode == sushy.BOOT_SOURCE_MODE_UEFI

        system.reset_system(sushy.RESET_ON)
        system.refresh()
        assert system.power_state == sushy.POWER_STATE_POWERING_ON
        # No worker ran the media work, so the power-on is still waiting for it.
        assert "power.reset" not in queues.names("fleetfish.power")
        assert queues.names("fleetfish.power") == ["boot.apply", "boot.apply"]
        assert queues.names("fleetfish.media") == ["media.import", "media.eject", "media.import"]
    finally:
        # Log out while the server is still up (sushy would retry the DELETE for 30 s on GC).
        auth.close()
    assert not list(store.r.scan_iter("ff:sess:*"))
    assert "fleetfish.api access" in log_path.read_text()


def test_metrics_aggregate_across_gunicorn_workers(redis_url, users_file, store, tmp_path):
    prom_dir = tmp_path / "prom"
    prom_dir.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(prom_dir), "FLEETFISH_API_WORKERS": "2"}
    with running_gunicorn(redis_url, users_file, tmp_path, **env) as (port, _):
        for _ in range(20):
            assert requests.get(
                f"http://127.0.0.1:{port}/redfish/v1/", headers={"Connection": "close"}, timeout=10
            ).ok
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    line = next(
        ln
        for ln in text.splitlines()
        if ln.startswith("fleetfish_api_requests_total{") and 'route="/redfish/v1"' in ln
    )
    assert float(line.rsplit(" ", 1)[1]) == 20.0


@pytest.mark.parametrize("setting", ["-", ""])
def test_access_log_follows_its_setting(redis_url, users_file, tmp_path, setting):
    """One line per request by default, in the documented format; none when switched off."""
    env = {"FLEETFISH_ACCESS_LOG": setting}
    with running_gunicorn(redis_url, users_file, tmp_path, **env) as (port, log_path):
        reply = requests.get(
            f"http://127.0.0.1:{port}/redfish/v1/Systems",
            headers={"User-Agent": "probe/1.0"},
            auth=("admin", PASSWORDS["admin"]),
            timeout=10,
        )
        assert reply.status_code == 200
    lines = [ln for ln in log_path.read_text().splitlines() if "fleetfish.api access" in ln]
    if setting == "":
        assert lines == []
        return
    (line,) = lines
    found = re.search(
        r'fleetfish\.api access 127\.0\.0\.1 "GET /redfish/v1/Systems HTTP/1\.1" 200 (\d+) '
        r'\d+ms "probe/1\.0"$',
        line,
    )
    assert found, line
    assert int(found.group(1)) == len(reply.content)
    assert PASSWORDS["admin"] not in line


def test_stalled_client_is_dropped_and_others_served(redis_url, users_file, tmp_path):
    """A client that sends half a request holds its process only until the read timeout."""
    env = {"FLEETFISH_API_WORKERS": "1", "FLEETFISH_API_READ_TIMEOUT": "1"}
    with running_gunicorn(redis_url, users_file, tmp_path, **env) as (port, log_path):
        with socket.create_connection(("127.0.0.1", port), timeout=20) as stalled:
            stalled.sendall(b"GET /redfish/v1/ HTTP/1.1\r\nHost: x\r\n")  # no blank line
            # The one process is busy with the stalled client; this request waits for it.
            reply = requests.get(f"http://127.0.0.1:{port}/redfish/v1/", timeout=20)
            assert reply.status_code == 200
            assert stalled.recv(1024) == b""  # the server closed the stalled connection
    # The process was not killed and restarted by the arbiter (its 30 s timeout).
    log = log_path.read_text()
    assert "WORKER TIMEOUT" not in log
    assert "dropped a client connection" in log and "Traceback" not in log


def test_an_ironic_like_client_logs_its_session_out_when_closed(gunicorn, store):
    """Left to sushy's finalizer, the logout comes at some later garbage collection, in the
    middle of whatever calls run then; closed, the session ends at once."""
    url, _ = gunicorn
    node = IronicLike(url, "admin", PASSWORDS["admin"])
    assert node.system(SYS).identity == SYS
    assert list(store.r.scan_iter("ff:sess:*"))
    node.close()
    assert list(store.r.scan_iter("ff:sess:*")) == []
    node.close()  # a second close has nothing to log out


def _answered(sock: socket.socket) -> bytes:
    """Everything the server sent on ``sock`` until it closed its side."""
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    return reply


def test_a_client_slow_to_hang_up_does_not_hold_the_process(redis_url, users_file, tmp_path):
    """sushy asks for ``Connection: close`` and its threads hang up when they next get the
    interpreter; the one process must take the next call meanwhile, not wait for that hang-up
    (gunicorn's lingering close waits up to 2 s per connection for it)."""
    with running_gunicorn(redis_url, users_file, tmp_path) as (port, _):
        with socket.create_connection(("127.0.0.1", port), timeout=20) as lingering:
            lingering.sendall(b"GET /redfish/v1/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert _answered(lingering).startswith(b"HTTP/1.1 200")
            # Answered and half-closed by the server; this client has not hung up yet. The next
            # call is answered before gunicorn's 2 s linger would have ended.
            reply = requests.get(
                f"http://127.0.0.1:{port}/redfish/v1/", headers={"Connection": "close"}, timeout=1.5
            )
            assert reply.status_code == 200


def test_a_call_refused_before_its_body_was_read_is_not_reset(redis_url, users_file, tmp_path):
    """A call refused before its body is read (no credentials) leaves that body unread. Closed on
    unread bytes, a connection is reset (RST), which can cut the answer short on a real network;
    the server drains them and lingers instead, so the client gets the whole answer, can finish
    sending and hangs up cleanly."""
    body = b'{"ResetType": "On", "Padding": "' + b"x" * 60000 + b'"}'
    head = (
        f"POST {SYS_URI}/Actions/ComputerSystem.Reset HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    with running_gunicorn(redis_url, users_file, tmp_path) as (port, _):
        with socket.create_connection(("127.0.0.1", port), timeout=20) as client:
            client.sendall(head + body)
            reply = _answered(client)
            # Still being read: one more byte and the hang-up reach a lingering server; a
            # reset connection raises ConnectionResetError or BrokenPipeError here.
            client.sendall(b" ")
            client.shutdown(socket.SHUT_WR)
            assert client.recv(1) == b""
    status, _, rest = reply.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 401"), status
    length = int(re.search(rb"Content-Length: (\d+)", rest, re.I).group(1))
    assert len(rest.split(b"\r\n\r\n", 1)[1]) == length
