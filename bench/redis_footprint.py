"""``python -m bench.redis_footprint``: what each provisioning cycle leaves in Redis, and for how long.

Runs Ironic's cycle (eject, InsertMedia, boot override Cd, Reset On; then back to disk) on every
VM of a lab several times, then groups Redis's keys into families (ids and system names folded)
and prints, per family, the bytes per cycle (``MEMORY USAGE``), the key count and the TTL left.
Steady-state Redis memory is about rate x TTL x bytes per cycle, plus the per-VM families that
have no TTL (mirror, media, power, boot, the capped event log).
"""

from __future__ import annotations

import argparse
import collections
import re
import tempfile
from pathlib import Path

import redis

from lab.ironic import IronicLike
from lab.stack import LAB_NAMESPACE, LabConfig, LabStack

_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f-]{27}|[0-9a-f]{16,}")
_SYSTEM = re.compile(re.escape(LAB_NAMESPACE) + r"\.[a-z0-9-]+")


def family(key: str) -> str:
    return _SYSTEM.sub("<system>", _ID.sub("<id>", key))


def measure(client: redis.Redis) -> dict[str, dict]:
    families: dict[str, dict] = collections.defaultdict(lambda: {"keys": 0, "bytes": 0, "ttl": -1})
    for raw in client.scan_iter(count=1000):
        key = raw.decode()
        entry = families[family(key)]
        entry["keys"] += 1
        entry["bytes"] += client.memory_usage(raw) or 0
        entry["ttl"] = max(entry["ttl"], client.ttl(raw))
    return families


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="cycles per VM")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="ff-redis-", ignore_cleanup_errors=True) as var:
        config = LabConfig.for_tests(Path(var), vms=args.vms, import_seconds=1, flower=False)
        with (
            LabStack(config).start(timeout=90) as stack,
            IronicLike(stack.redfish_url, *stack.credentials) as ironic,
        ):
            systems = _lab_systems(args.vms)
            for round_ in range(args.rounds):
                images = {
                    s: f"{stack.iso_url}/images/boot-{s.split('.', 1)[1]}.iso" for s in systems
                }
                runs = ironic.provision_all(images)
                errors = [r.error for r in runs if r.error]
                errors += [r.error for r in ironic.boot_all_from_disk(systems) if r.error]
                print(f"round {round_ + 1}/{args.rounds}: {len(runs)} nodes, errors: {errors}")
            client = redis.Redis.from_url(stack.redis_url)
            families = measure(client)
            used = client.info("memory")["used_memory"]
    cycles = args.vms * args.rounds
    print(f"\n{cycles} cycles on {args.vms} VMs; Redis used_memory {used / 2**20:.1f} MiB")
    print(f"{'B/cycle':>8} {'keys':>6} {'TTL s':>7}  family")
    ranked = sorted(families.items(), key=lambda item: -item[1]["bytes"])
    for name, entry in ranked[: args.top]:
        ttl = entry["ttl"] if entry["ttl"] >= 0 else "none"
        print(f"{entry['bytes'] / cycles:8.0f} {entry['keys']:6d} {ttl!s:>7}  {name}")
    expiring = sum(e["bytes"] for e in families.values() if e["ttl"] >= 0) / cycles
    print(f"\nexpiring keys: {expiring / 1024:.1f} KiB per cycle")
    return 0


def _lab_systems(count: int) -> list[str]:
    masters = [f"ostest-master-{i}" for i in range(min(count, 3))]
    workers = [f"ostest-worker-{i}" for i in range(max(0, count - 3))]
    return [f"{LAB_NAMESPACE}.{name}" for name in masters + workers]


if __name__ == "__main__":
    raise SystemExit(main())
