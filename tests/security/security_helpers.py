"""Helpers for the security tests: every served route with its placeholders filled in."""

from __future__ import annotations

import re

from app.auth import LOGIN_PATHS, OPEN_PATHS
from tests.api.api_helpers import SYS

SERVED_METHODS = ("GET", "HEAD", "POST", "PATCH", "DELETE")


def concrete_routes(app, system_id: str = SYS, **values: str) -> list[tuple[str, str]]:
    """(method, path) for every url_map rule and method, placeholders filled with real-looking ids."""
    fill = {
        "system_id": system_id,
        "device": "Cd",
        "member_id": "CPU1",
        "task_id": "0123456789abcdef",
        "session_id": "0123456789abcdef",
        "name": "admin",
        "role_id": "Operator",
        "registry_id": "Base.1.22.1",
        "bios_registry_id": "FleetfishBios.1.0.0",
        "log_id": "Log",
        "entry_id": "1",
        "storage_id": "1",
        "drive_id": "rootdisk",
        "controller_id": "1",
        "interface_id": "BMC",
        "cert_id": "1",
        **values,
    }
    out = []
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", lambda m: fill[m.group(1)], rule.rule)
        out += [(m, path) for m in sorted(rule.methods) if m in SERVED_METHODS]
    return sorted(set(out))


def is_open(method: str, path: str) -> bool:
    return path in OPEN_PATHS or (method == "POST" and path in LOGIN_PATHS)


def body_for(path: str) -> dict | None:
    if path.endswith("ComputerSystem.Reset"):
        return {"ResetType": "On"}
    if path.endswith("InsertMedia"):
        return {"Image": "http://192.0.2.10/x.iso"}
    if path.endswith(("EjectMedia", "ClearLog")):
        return {}
    return None


def error_ids(resp) -> list[str]:
    return [
        m["MessageId"].rsplit(".", 1)[-1] for m in resp.get_json()["error"]["@Message.ExtendedInfo"]
    ]
