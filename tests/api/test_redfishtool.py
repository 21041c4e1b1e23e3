"""DMTF's redfishtool CLI against a real gunicorn: root, Systems, one system, reset, boot override,
account management."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.api_gunicorn import running_gunicorn
from tests.api.api_helpers import PASSWORDS, SYS, Queues

REDFISHTOOL = shutil.which("redfishtool", path=str(Path(sys.executable).parent)) or shutil.which(
    "redfishtool"
)
pytestmark = pytest.mark.skipif(REDFISHTOOL is None, reason="pip install redfishtool")


@pytest.fixture
def tool(redis_url, users_file, systems, tmp_path):
    # The bcrypt budget is off: the account test logs in with new passwords several times in a
    # row, which is what the budget defers (tests/security/test_bruteforce.py).
    with running_gunicorn(redis_url, users_file, tmp_path, FLEETFISH_BCRYPT_SHARE="0") as (
        port,
        _,
    ):

        def run(
            *args: str, password: str = PASSWORDS["admin"], auth: str = "Basic", user: str = "admin"
        ):
            cmd = [REDFISHTOOL, "-r", f"127.0.0.1:{port}", "-u", user, "-p", password]
            cmd += ["-S", "Never", "-A", auth, "-T", "10", *args]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

        yield run


def _json(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_root_and_systems(tool):
    assert _json(tool("root"))["Id"] == "RootService"
    members = [m["@odata.id"] for m in _json(tool("Systems"))["Members"]]
    assert f"/redfish/v1/Systems/{SYS}" in members and len(members) == 3
    listed = _json(tool("Systems", "list"))
    assert {m["Id"] for m in listed["Members"]} == {s.rsplit("/", 1)[-1] for s in members}


def test_one_system_and_its_parts(tool):
    system = _json(tool("Systems", "-I", SYS))
    assert system["Id"] == SYS and system["PowerState"] == "Off"
    assert _json(tool("Systems", "-I", SYS, "-P", "PowerState")) == {"PowerState": "Off"}
    cpus = _json(tool("Systems", "-I", SYS, "Processors", "list"))
    assert [m["Id"] for m in cpus["Members"]] == ["CPU1"]
    assert _json(tool("Managers", "-I", SYS))["Id"] == SYS
    assert _json(tool("Chassis", "-I", SYS))["Id"] == SYS


def test_reset_on_queues_the_power_action(tool, redis_url, store):
    # -N: do not follow the task monitor (no worker runs here, so the task never ends).
    result = tool("-N", "Systems", "-I", SYS, "reset", "On")
    assert result.returncode == 0, result.stderr
    assert Queues(redis_url).names("fleetfish.power") == ["power.reset"]
    tasks = [store.get_task(t) for t in store.task_ids()]
    assert [(t["name"], t["system"]) for t in tasks] == [("Reset On", SYS)]


def test_set_boot_override(tool, store):
    patched = _json(tool("Systems", "-I", SYS, "setBootOverride", "Once", "Cd"))
    assert patched["Boot"]["BootSourceOverrideTarget"] == "Cd"
    assert store.get_boot(SYS)["enabled"] == "Once" and store.get_boot(SYS)["target"] == "Cd"


def test_session_auth_logs_out_afterwards(tool, store):
    assert _json(tool("Systems", "list", auth="Session"))["Members@odata.count"] == 3
    assert list(store.r.scan_iter("ff:sess:*")) == []


def test_wrong_password_fails_with_401(tool):
    result = tool("Systems", password="wrong")
    assert result.returncode != 0 and "401" in result.stderr


def test_manager_clock_address_and_protocols(tool):
    manager = _json(tool("Managers", "-I", SYS))
    assert manager["DateTimeLocalOffset"] == "+00:00"
    protocols = _json(tool("Managers", "-I", SYS, "NetworkProtocol"))
    assert protocols["HTTP"]["ProtocolEnabled"] is True
    interfaces = _json(tool("Managers", "-I", SYS, "EthernetInterfaces", "list"))
    assert [m["Id"] for m in interfaces["Members"]] == ["BMC"]
    # redfishtool sends the time it is given; the service's own clock is within tolerance.
    result = tool("Managers", "-I", SYS, "setDateTime", manager["DateTime"])
    assert result.returncode == 0, result.stderr


def test_account_management(tool):
    assert tool("AccountService", "adduser", "zoe", "zoe-first-pw", "ReadOnly").returncode == 0
    account = _json(tool("AccountService", "Accounts", "-i", "zoe"))
    assert account["RoleId"] == "ReadOnly" and account["Enabled"] is True
    assert _json(tool("Systems", user="zoe", password="zoe-first-pw"))["Members@odata.count"] == 3

    assert tool("AccountService", "setpassword", "zoe", "zoe-second-pw").returncode == 0
    assert tool("Systems", user="zoe", password="zoe-first-pw").returncode != 0
    assert tool("Systems", user="zoe", password="zoe-second-pw").returncode == 0

    assert tool("AccountService", "useradmin", "zoe", "disable").returncode == 0
    refused = tool("Systems", user="zoe", password="zoe-second-pw")
    assert refused.returncode != 0 and "401" in refused.stderr
    assert tool("AccountService", "useradmin", "zoe", "enable").returncode == 0
    assert tool("Systems", user="zoe", password="zoe-second-pw").returncode == 0

    assert tool("AccountService", "deleteuser", "zoe").returncode == 0
    assert tool("Systems", user="zoe", password="zoe-second-pw").returncode != 0
    # An account of the users file is not deleted.
    assert tool("AccountService", "deleteuser", "viewer").returncode != 0
    assert _json(tool("AccountService", "Accounts", "-i", "viewer"))["UserName"] == "viewer"
