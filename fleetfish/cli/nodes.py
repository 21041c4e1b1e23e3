"""``fleetfish nodes``: one line per system (power, media, deferred power-on, last boot, last error).

Reads the Redis the API serves from (``REDIS_URL``), never the cluster, so it runs anywhere that
Redis is reachable and costs the cluster nothing however often it refreshes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time

import redis

from fleetfish.fleet import fleet_status
from fleetfish.selectors import matches, parse_selector
from fleetfish.settings import Settings

HELP = "show every system's power, media, deferred power-on, last boot and last error"
COLUMNS = ("SYSTEM", "POWER", "MEDIA", "DEFERRED", "LAST BOOT", "LAST ERROR")
CLEAR_SCREEN = "\x1b[H\x1b[2J"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--redis-url", default="", help="the service's Redis (default: REDIS_URL, as the API)"
    )
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="only systems in this namespace (repeat or comma-separate for several)",
    )
    parser.add_argument(
        "-l", "--selector", default="", help="only VMs matching this Kubernetes label selector"
    )
    parser.add_argument(
        "--events", type=int, default=0, help="also print each node's last N events"
    )
    parser.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    parser.add_argument("-w", "--watch", action="store_true", help="refresh until interrupted")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    parser.add_argument("--count", type=int, default=0, help="with --watch: stop after N refreshes")


def _when(epoch: float | None) -> str:
    if not epoch:
        return ""
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).strftime("%H:%M:%SZ")


def media_text(row: dict) -> str:
    text = row["media"]
    if row["progress"] is not None and row["media"] == "importing":
        text = f"importing {row['progress']:.0f}%"
    return f"{text} {row['image']}".strip() if row["media"] != "empty" else text


def cells(row: dict) -> list[str]:
    boot = f"{row['boot_device']} {_when(row['boot_at'])}".strip() if row["boot_device"] else ""
    return [
        row["id"],
        row["power"],
        media_text(row),
        row["deferred"] or "-",
        boot or "-",
        row["error"] or "-",
    ]


def render(rows: list[dict], events: int = 0) -> str:
    """The table as text: aligned columns, the last one (the error) left free."""
    table = [list(COLUMNS)] + [cells(r) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS) - 1)]
    out = []
    for line, row in zip(table, [None, *rows], strict=True):
        text = "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=False)) + "  " + line[-1]
        out.append(text.rstrip())
        for entry in (row or {}).get("events", [])[:events]:
            out.append(f"    {_when(entry['created'])} {entry['severity']:<8} {entry['message']}")
    return "\n".join(out)


def _filter(args: argparse.Namespace):
    namespaces = {n.strip() for value in args.namespace for n in value.split(",") if n.strip()}
    requirements = parse_selector(args.selector)

    def allows(doc: dict) -> bool:
        if namespaces and doc.get("namespace") not in namespaces:
            return False
        return matches(requirements, doc.get("labels") or {})

    return allows


def run(args: argparse.Namespace) -> int:
    url = args.redis_url or Settings.from_env().redis_url
    try:
        allows = _filter(args)
    except ValueError as exc:
        print(f"fleetfish nodes: {exc}", file=sys.stderr)
        return 2
    client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=5)
    shown = 0
    try:
        while True:
            rows = fleet_status(client, allows, events=args.events)
            if args.json:
                text = json.dumps({"time": time.time(), "systems": rows})
            else:
                text = render(rows, args.events)
            prefix = CLEAR_SCREEN if args.watch and sys.stdout.isatty() else ""
            print(prefix + text, flush=True)
            shown += 1
            if not args.watch or (args.count and shown >= args.count):
                return 0
            time.sleep(max(0.1, args.interval))
    except redis.exceptions.RedisError as exc:
        print(f"fleetfish nodes: cannot read {url.rsplit('@', 1)[-1]}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        client.close()
