"""``python -m bench.auth_flood``: latency of authenticated GETs while others guess passwords.

Starts the lab (2 sync API processes), then measures one client's GET /redfish/v1/Systems/{id}
with verified Basic credentials and ``Connection: close`` (as Ironic sends), four times: alone;
while ``--flooders`` threads (in another process) send GET /redfish/v1/ (the same volume of
requests, no password check); while they send guesses for unknown user names, each from another
loopback address (127.0.0.2-254, so the per-address lock-out does not stop them: the bcrypt
budget does); and while they all guess from one address (the per-address lock-out).
Prints one table; docs/security.md quotes it.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import itertools
import multiprocessing
import shutil
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from bench.runs import lab_vm_names
from bench.stats import ms, summary
from lab.ports import free_port
from lab.stack import LAB_NAMESPACE, LabConfig, LabStack

MAX_REQUESTS = 1_000_000  # a bound per thread; the clock ends each phase long before


def _get(port: int, path: str, auth: str, source: str = "127.0.0.1") -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        headers = {"Connection": "close"} | ({"Authorization": auth} if auth else {})
        conn.request("GET", path, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _measure(port: int, path: str, auth: str, end: float, out: list, errors: Counter) -> None:
    for _ in range(MAX_REQUESTS):
        if time.monotonic() >= end:
            return
        t0 = time.perf_counter()
        status = _get(port, path, auth)
        if status == 200:
            out.append(time.perf_counter() - t0)
        else:
            errors[status] += 1


def _flood(port: int, path: str, end: float, sources, answers: Counter, lock) -> None:
    for n in range(MAX_REQUESTS):
        if time.monotonic() >= end:
            return
        with lock:
            source = next(sources) if sources is not None else ""
        try:
            if sources is None:  # the same volume of requests that need no password check
                status = _get(port, "/redfish/v1/", "")
            else:
                status = _get(port, path, _basic(f"guess-{source}-{n}", "x"), source)
        except OSError:
            status = 0
        with lock:
            answers[status] += 1


def flood_process(
    port: int, path: str, seconds: float, threads: int, mode: str, ready, out
) -> None:
    """The flooders, in a process of their own: their client work does not slow the measuring
    client (one interpreter lock)."""
    sources = {
        "open": None,
        "one": itertools.repeat("127.0.0.2"),
        "many": itertools.cycle(f"127.0.0.{i}" for i in range(2, 255)),
    }[mode]
    end = time.monotonic() + seconds
    answers: Counter = Counter()
    lock = threading.Lock()
    workers = [
        threading.Thread(target=_flood, args=(port, path, end, sources, answers, lock))
        for _ in range(threads)
    ]
    for t in workers:
        t.start()
    ready.set()
    for t in workers:
        t.join(timeout=seconds + 60)
    out.put(dict(answers))


def phase(port: int, path: str, auth: str, seconds: float, flooders: int, mode: str) -> dict:
    context = multiprocessing.get_context("spawn")
    out, ready = context.Queue(), context.Event()
    flood = None
    if flooders:
        flood = context.Process(
            target=flood_process, args=(port, path, seconds, flooders, mode, ready, out)
        )
        flood.start()
        if not ready.wait(timeout=60):
            raise RuntimeError("the flood process did not start")
    end = time.monotonic() + seconds
    samples: list[float] = []
    errors: Counter = Counter()
    _measure(port, path, auth, end, samples, errors)
    answers = {}
    if flood is not None:
        answers = out.get(timeout=seconds + 90)
        flood.join(timeout=30)
    return {"get": summary(samples), "errors": dict(errors), "flood": answers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--flooders", type=int, default=8)
    args = parser.parse_args()
    var = Path(tempfile.mkdtemp(prefix="fleetfish-auth-flood-"))
    config = LabConfig(
        var_dir=var,
        vms=2,
        workers=1,
        flower=False,
        api_port=free_port(),
        kube_port=free_port(),
        iso_port=free_port(),
        redis_port=free_port(),
    )
    stack = LabStack(config).start(timeout=120)
    try:
        port = config.api_port
        path = f"/redfish/v1/Systems/{LAB_NAMESPACE}.{lab_vm_names(config.vms)[0]}"
        auth = _basic(*stack.credentials)
        for _ in range(20):  # each API process verifies the lab credentials once
            assert _get(port, path, auth) == 200
        rows = [
            ("alone", phase(port, path, auth, args.seconds, 0, "")),
            ("flood of open GETs", phase(port, path, auth, args.seconds, args.flooders, "open")),
            (
                "guesses, many addresses",
                phase(port, path, auth, args.seconds, args.flooders, "many"),
            ),
            ("guesses, one address", phase(port, path, auth, args.seconds, args.flooders, "one")),
        ]
    finally:
        stack.stop()
        shutil.rmtree(var, ignore_errors=True)
    print(f"\n{args.flooders} flooding threads, {args.seconds:g} s per phase, 2 API processes")
    print("| phase | GETs | p50 | p99 | max | GET errors | flood answers |")
    print("|---|---|---|---|---|---|---|")
    for name, row in rows:
        g = row["get"]
        flood = ", ".join(f"{k}: {v}" for k, v in sorted(row["flood"].items())) or "-"
        print(
            f"| {name} | {g['count']} | {ms(g['p50'])} | {ms(g['p99'])} | {ms(g['max'])} "
            f"| {row['errors'] or '-'} | {flood} |"
        )


if __name__ == "__main__":
    main()
