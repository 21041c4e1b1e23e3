"""``python -m bench.api_latency``: GET /redfish/v1/Systems/{id} throughput and p50/p99 with many
concurrent clients, fleetfish and the sushy-tools fake-driver emulator side by side, Basic auth on
both (same bcrypt digest), once with ``Connection: close`` (as sushy/Ironic sends) and once with
keep-alive.

The load comes from ``wrk`` (Debian package ``wrk``), a C event-loop client that spends a few
microseconds of CPU per request: on a 2-core machine a Python client pool costs more CPU per
request than the server it measures, and its own queueing would be reported as the server's
latency. ``--client python`` keeps the requests-based pool for machines without wrk.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis
import requests

from bench.runs import lab_vm_names
from bench.sampler import cpu_seconds
from bench.stats import ms, percentile
from bench.sushytools import SushyEmulator
from lab.stack import LAB_NAMESPACE, LabConfig, LabStack

log = logging.getLogger("fleetfish.bench.api_latency")

REPO = Path(__file__).resolve().parent.parent
SYSTEMS = 10
MAX_REQUESTS_PER_CLIENT = 1_000_000  # a bound; the clock ends each run long before
THROUGHPUT_FACTOR = 10.0
P99_LIMIT_S = 0.050


def _client(urls, auth, keep_alive, end, out, errors) -> None:
    session = requests.Session() if keep_alive else None
    headers = (
        {"OData-Version": "4.0"} if keep_alive else {"OData-Version": "4.0", "Connection": "close"}
    )
    for i in range(MAX_REQUESTS_PER_CLIENT):
        if time.monotonic() >= end:
            break
        url = urls[i % len(urls)]
        t0 = time.perf_counter()
        try:
            if session:
                reply = session.get(url, auth=auth, headers=headers, timeout=30)
            else:
                reply = requests.get(url, auth=auth, headers=headers, timeout=30)
            ok = reply.status_code == 200
        except requests.RequestException:
            ok = False
        if ok:
            out.append(time.perf_counter() - t0)
        else:
            errors.append(1)
    if session:
        session.close()


def _process(args) -> tuple[list[float], int]:
    """One client process: ``threads`` clients until ``seconds`` pass; returns latencies, errors."""
    urls, auth, keep_alive, threads, start_at, seconds = args
    time.sleep(max(0.0, start_at - time.time()))
    end = time.monotonic() + seconds
    latencies: list[float] = []
    errors: list[int] = []
    pool = [
        threading.Thread(target=_client, args=(urls, auth, keep_alive, end, latencies, errors))
        for _ in range(threads)
    ]
    for t in pool:
        t.start()
    for t in pool:
        t.join(seconds + 60)
    return latencies, len(errors)


# Each wrk connection walks the system URLs in turn; done() prints one JSON line with the
# counts and the latency percentiles (microseconds) wrk recorded for every request.
WRK_SCRIPT = """
local paths = {%(paths)s}
local headers = {%(headers)s}
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[(i %% #paths) + 1], headers)
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_RESULT {"requests": %%d, "duration_us": %%d, "connect": %%d, "read": %%d, ' ..
    '"write": %%d, "status": %%d, "timeout": %%d, "p50_us": %%d, "p99_us": %%d, "max_us": %%d}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
"""


def _lua_string(text: str) -> str:
    return json.dumps(text)  # a JSON string literal is a valid Lua string literal here


def wrk_measure(urls, auth, keep_alive: bool, clients: int, seconds: float) -> dict:
    """One wrk run: ``clients`` connections on one thread for ``seconds``."""
    token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    headers = {"Authorization": f"Basic {token}", "OData-Version": "4.0"}
    if not keep_alive:
        headers["Connection"] = "close"
    base = urls[0].split("/redfish/", 1)[0]
    paths = [u[len(base) :] for u in urls]
    script = WRK_SCRIPT % {
        "paths": ", ".join(_lua_string(p) for p in paths),
        "headers": ", ".join(f"[{_lua_string(k)}] = {_lua_string(v)}" for k, v in headers.items()),
    }
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as lua:
        lua.write(script)
        lua.flush()
        command = [
            "wrk", "-t1", f"-c{clients}", f"-d{int(seconds)}s", "--timeout", "30s",
            "-s", lua.name, base,
        ]  # fmt: skip
        out = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120)
    line = next((x for x in out.stdout.splitlines() if x.startswith("WRK_RESULT ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({out.returncode}): {out.stderr.strip() or out.stdout}")
    r = json.loads(line.split(" ", 1)[1])
    errors = r["connect"] + r["read"] + r["write"] + r["status"] + r["timeout"]
    ok = r["requests"] - r["status"]
    return {
        "connection": "keep-alive" if keep_alive else "close",
        "client": "wrk",
        "requests_ok": ok,
        "errors": errors,
        "throughput_rps": round(ok / (r["duration_us"] / 1e6), 1),
        "p50": r["p50_us"] / 1e6,
        "p99": r["p99_us"] / 1e6,
    }


def measure(urls, auth, keep_alive: bool, clients: int, seconds: float, procs: int) -> dict:
    procs = max(1, min(procs, clients))
    shares = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    start_at = time.time() + 1.0  # every process starts together
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        parts = pool.map(_process, [(urls, auth, keep_alive, n, start_at, seconds) for n in shares])
    latencies = [x for part, _ in parts for x in part]
    errors = sum(e for _, e in parts)
    return {
        "connection": "keep-alive" if keep_alive else "close",
        "client": "python",
        "requests_ok": len(latencies),
        "errors": errors,
        "throughput_rps": round(len(latencies) / seconds, 1),
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
    }


def _warm(url: str, auth) -> None:
    reply = requests.get(url, auth=auth, timeout=30)
    reply.raise_for_status()


def run(clients: int, seconds: float, procs: int, work_dir: Path, client: str) -> list[dict]:
    def one(urls, auth, keep_alive, server_pid):
        # Server CPU per request depends far less on what else the machine runs than latency
        # and throughput do: it is the figure to compare across runs.
        cpu_before, load_before = cpu_seconds(server_pid), os.getloadavg()[0]
        if client == "wrk":
            r = wrk_measure(urls, auth, keep_alive, clients, seconds)
        else:
            r = measure(urls, auth, keep_alive, clients, seconds, procs)
        cpu = cpu_seconds(server_pid) - cpu_before
        r["server_cpu_ms_per_request"] = (
            round(cpu * 1000 / r["requests_ok"], 3) if r["requests_ok"] else None
        )
        r["load_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        return r

    results = []
    config = LabConfig.for_tests(work_dir / "fleetfish", vms=SYSTEMS, workers=1, flower=False)
    with LabStack(config) as stack:
        auth = stack.credentials
        digest = json.loads((config.var_dir / "users.json").read_text())["users"][0][
            "password_hash"
        ]
        urls = [
            f"{stack.redfish_url}/redfish/v1/Systems/{LAB_NAMESPACE}.{n}"
            for n in lab_vm_names(SYSTEMS)
        ]
        _warm(urls[0], auth)
        for keep_alive in (False, True):
            r = one(urls, auth, keep_alive, stack.procs["api"].pid)
            results.append({"service": "fleetfish", **r})
            log.info("fleetfish %s: %s", r["connection"], r)
    with SushyEmulator(work_dir / "sushy-tools", SYSTEMS, auth[0], digest) as emu:
        urls = [f"{emu.url}/redfish/v1/Systems/{sid}" for sid in emu.system_ids]
        _warm(urls[0], auth)
        for keep_alive in (False, True):
            r = one(urls, auth, keep_alive, emu.proc.pid)
            results.append({"service": "sushy-tools", **r})
            log.info("sushy-tools %s: %s", r["connection"], r)
    return results


class RoundTrips:
    """Counts Redis round trips of this process: one per command sent alone, one per pipeline
    (redis-py writes a whole pipeline with one send)."""

    def __init__(self):
        self.count = 0
        self._original = redis.connection.AbstractConnection.send_packed_command

    def __enter__(self) -> RoundTrips:
        original, counter = self._original, self

        def counted(conn, command, *args, **kwargs):
            counter.count += 1
            return original(conn, command, *args, **kwargs)

        redis.connection.AbstractConnection.send_packed_command = counted
        return self

    def __exit__(self, *exc) -> None:
        redis.connection.AbstractConnection.send_packed_command = self._original


def expand_compare(systems: int, repeats: int, work_dir: Path) -> dict:
    """One GET of /redfish/v1/Systems?$expand=.($levels=1) against the collection plus one GET
    per member: wall time over HTTP (keep-alive, the lab's gunicorn; median of ``repeats``) and
    Redis round trips inside the API (the same app in this process, against the lab's Redis)."""
    from app import create_app
    from fleetfish.settings import Settings

    config = LabConfig.for_tests(work_dir / "expand", vms=systems, workers=1, flower=False)
    with LabStack(config) as stack:
        auth = stack.credentials
        base = f"{stack.redfish_url}/redfish/v1/Systems"
        expanded_url = f"{base}?$expand=.($levels=1)"
        session = requests.Session()
        session.auth = auth
        session.get(base, timeout=30).raise_for_status()

        def expanded() -> list[str]:
            reply = session.get(expanded_url, timeout=60)
            reply.raise_for_status()
            return [m["PowerState"] for m in reply.json()["Members"]]

        def singles() -> list[str]:
            reply = session.get(base, timeout=30)
            reply.raise_for_status()
            states = []
            for member in reply.json()["Members"]:
                one = session.get(stack.redfish_url + member["@odata.id"], timeout=30)
                one.raise_for_status()
                states.append(one.json()["PowerState"])
            return states

        timings: dict[str, list[float]] = {"expanded": [], "singles": []}
        states: dict[str, list[str]] = {}
        for _ in range(repeats):
            for name, call in (("expanded", expanded), ("singles", singles)):
                t0 = time.perf_counter()
                states[name] = call()
                timings[name].append(time.perf_counter() - t0)
        assert states["expanded"] == states["singles"], "expanded members differ from GETs"
        assert len(states["expanded"]) == systems, len(states["expanded"])

        users_file = str(config.var_dir / "users.json")
        app = create_app(Settings(redis_url=stack.redis_url, users_file=users_file))
        client = app.test_client()
        headers = {
            "Authorization": "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        }
        client.get("/redfish/v1/Systems", headers=headers)  # the password check, once
        trips = {}
        with RoundTrips() as counter:
            body = client.get("/redfish/v1/Systems?$expand=.($levels=1)", headers=headers)
            trips["expanded"] = counter.count
            counter.count = 0
            for member in client.get("/redfish/v1/Systems", headers=headers).get_json()["Members"]:
                client.get(member["@odata.id"], headers=headers)
            trips["singles"] = counter.count
        assert len(body.get_json()["Members"]) == systems
    return {
        "systems": systems,
        "repeats": repeats,
        "expanded_ms": round(percentile(timings["expanded"], 50) * 1000, 1),
        "singles_ms": round(percentile(timings["singles"], 50) * 1000, 1),
        "expanded_redis_round_trips": trips["expanded"],
        "singles_redis_round_trips": trips["singles"],
        "singles_requests": systems + 1,
    }


def expand_table(r: dict) -> str:
    return (
        "| reading the power state of every system | requests | time (median) "
        "| Redis round trips |\n|---|---|---|---|\n"
        f"| one GET `Systems?$expand=.($levels=1)` | 1 | {r['expanded_ms']} ms "
        f"| {r['expanded_redis_round_trips']} |\n"
        f"| GET `Systems`, then each member | {r['singles_requests']} | {r['singles_ms']} ms "
        f"| {r['singles_redis_round_trips']} |\n"
    )


def table(results: list[dict]) -> str:
    lines = [
        "| service | connection | requests | errors | throughput | p50 | p99 | server CPU/req "
        "| load 1m |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['service']} | {r['connection']} | {r['requests_ok']} | {r['errors']} | "
            f"{r['throughput_rps']} req/s | {ms(r['p50'])} | {ms(r['p99'])} | "
            f"{r.get('server_cpu_ms_per_request')} ms | "
            f"{' -> '.join(str(x) for x in r.get('load_1m') or [])} |"
        )
    return "\n".join(lines) + "\n"


def verdicts(results: list[dict]) -> list[tuple[str, str, str]]:
    out = []
    by = {(r["service"], r["connection"]): r for r in results}
    for conn in ("close", "keep-alive"):
        ff, st = by.get(("fleetfish", conn)), by.get(("sushy-tools", conn))
        if not ff or not st:
            continue
        ratio = ff["throughput_rps"] / st["throughput_rps"] if st["throughput_rps"] else None
        out.append(
            (
                f"throughput >= 10x sushy-tools ({conn})",
                "PASS" if ratio is not None and ratio >= THROUGHPUT_FACTOR else "FAIL",
                "n/a" if ratio is None else f"{ratio:.1f}x",
            )
        )
        out.append(
            (
                f"fleetfish p99 < 50 ms ({conn})",
                "PASS" if ff["p99"] is not None and ff["p99"] < P99_LIMIT_S else "FAIL",
                ms(ff["p99"]),
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    p = argparse.ArgumentParser(prog="python -m bench.api_latency", description=__doc__)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument(
        "--client",
        choices=("wrk", "python"),
        default="wrk" if shutil.which("wrk") else "python",
        help="load generator (default: wrk when installed: apt-get install wrk)",
    )
    p.add_argument(
        "--procs", type=int, default=2, help="python client: processes sharing the clients"
    )
    p.add_argument("--out", type=Path, default=REPO / "var" / "bench" / "api-latency")
    p.add_argument("--work-dir", type=Path, default=REPO / "var" / "bench" / "api")
    p.add_argument(
        "--expand",
        type=int,
        metavar="N",
        help="instead: N systems, one expanded GET of the collection against N+1 single GETs",
    )
    p.add_argument("--repeats", type=int, default=5, help="--expand: runs of each, median shown")
    args = p.parse_args(argv)
    work = args.work_dir / time.strftime("%Y%m%d-%H%M%S")
    command = "python -m bench.api_latency " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.expand:
        found_expand = expand_compare(args.expand, args.repeats, work)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "expand.json").write_text(
            json.dumps({"command": command, **found_expand}, indent=2)
        )
        print(expand_table(found_expand))
        return 0
    if args.client == "python":
        log.warning("wrk not used: the Python clients' own CPU use inflates the latencies")
    results = run(args.clients, args.seconds, args.procs, work, args.client)
    found = verdicts(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "api_latency.json").write_text(
        json.dumps(
            {
                "command": command,
                "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "clients": args.clients,
                "seconds": args.seconds,
                "client": args.client,
                "client_processes": args.procs if args.client == "python" else 1,
                "results": results,
                "verdicts": [{"target": t, "verdict": v, "measured": d} for t, v, d in found],
            },
            indent=2,
        )
    )
    md = [f"# Redfish GET latency\n\nCommand: `{command}`\n\n", table(results), "\n"]
    md += [f"- {v}: {t}: {d}\n" for t, v, d in found]
    (args.out / "api_latency.md").write_text("".join(md))
    print(table(results))
    for t, v, d in found:
        print(f"{v:<6} {t}: {d}")
    return 1 if any(v == "FAIL" for _, v, _ in found) else 0


if __name__ == "__main__":
    sys.exit(main())
