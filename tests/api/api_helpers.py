"""Shared helpers for the API tests: users, VM dicts, credentials, URIs, broker queue reader."""

from __future__ import annotations

import base64
import json
import zlib

import bcrypt
import redis

PASSWORDS = {
    "admin": "admin-pw",
    "operator": "operator-pw",
    "viewer": "viewer-pw",
    "labeled": "labeled-pw",
}


def _hash(password: str) -> str:
    # Cost 4 keeps the tests fast; production hashes use 12.
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


USERS_YAML = f"""
users:
  - name: admin
    password_hash: "{_hash(PASSWORDS["admin"])}"
    role: Administrator
  - name: operator
    password_hash: "{_hash(PASSWORDS["operator"])}"
    role: Operator
    systems:
      namespaces: [lab-a]
  - name: viewer
    password_hash: "{_hash(PASSWORDS["viewer"])}"
    role: ReadOnly
  - name: labeled
    password: "{PASSWORDS["labeled"]}"
    role: Operator
    systems:
      labelSelector: "app.kubernetes.io/part-of=fleetfish-lab"
"""


def make_vm(
    namespace: str, name: str, *, labels=None, status="Stopped", mac="52:54:00:00:00:01", efi=True
):
    firmware = {
        "uuid": f"00000000-0000-4000-8000-{zlib.crc32(f'{namespace}/{name}'.encode()):012d}"
    }
    if efi:
        firmware["bootloader"] = {"efi": {"secureBoot": False}}
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": "1",
            "labels": labels or {},
        },
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "spec": {
                    "domain": {
                        "cpu": {"cores": 2, "sockets": 1, "threads": 1},
                        "memory": {"guest": "4Gi"},
                        "firmware": firmware,
                        "devices": {
                            "disks": [
                                {"name": "rootdisk", "disk": {"bus": "virtio"}, "bootOrder": 1},
                                {"name": "cdrom", "cdrom": {"bus": "sata"}},
                            ],
                            "interfaces": [
                                {"name": "default", "macAddress": mac, "model": "virtio"}
                            ],
                        },
                    },
                    "volumes": [
                        {"name": "rootdisk", "persistentVolumeClaim": {"claimName": f"{name}-root"}}
                    ],
                }
            },
        },
        "status": {"printableStatus": status},
    }


LAB_LABELS = {"app.kubernetes.io/part-of": "fleetfish-lab"}


def basic(user: str = "admin") -> dict[str, str]:
    token = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


ADMIN = basic("admin")
SYS = "lab-a.ostest-master-0"
SYS_URI = f"/redfish/v1/Systems/{SYS}"
CD_URI = f"{SYS_URI}/VirtualMedia/Cd"
INSERT_URI = f"{CD_URI}/Actions/VirtualMedia.InsertMedia"
EJECT_URI = f"{CD_URI}/Actions/VirtualMedia.EjectMedia"
RESET_URI = f"{SYS_URI}/Actions/ComputerSystem.Reset"
ISO = "http://192.0.2.10:8080/redfish/boot-1234.iso"


class Queues:
    """Reads what the API queued on the Celery broker (the Redis lists named after the queues)."""

    def __init__(self, url: str):
        self.r = redis.Redis.from_url(url)

    def messages(self, queue: str) -> list[dict]:
        out = []
        for raw in self.r.lrange(queue, 0, -1):
            msg = json.loads(raw)
            args = json.loads(base64.b64decode(msg["body"]))[0]
            out.append({"task": msg["headers"]["task"], "args": args})
        # LPUSH queues: oldest message last.
        return list(reversed(out))

    def names(self, queue: str) -> list[str]:
        return [m["task"] for m in self.messages(queue)]


def error_ids(resp) -> list[str]:
    return [
        m["MessageId"].rsplit(".", 1)[-1] for m in resp.get_json()["error"]["@Message.ExtendedInfo"]
    ]


def related(resp) -> list[str]:
    return [
        p for m in resp.get_json()["error"]["@Message.ExtendedInfo"] for p in m["RelatedProperties"]
    ]


def free_port_url() -> str:
    """A Redis URL on a loopback port nothing listens on (Redis "down")."""
    from lab.ports import free_port

    return f"redis://127.0.0.1:{free_port()}/0"
