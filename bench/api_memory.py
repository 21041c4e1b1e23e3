"""``python -m bench.api_memory``: does one API process keep memory per call it answered?

Runs Ironic's calls for one node (GET the system, EjectMedia, InsertMedia, PATCH the boot
override, Reset On, GET the media) over and over against the Flask app in this process, with a
real embedded Redis and nothing consuming the queues, and prints the process's RSS every
``--every`` cycles. Redis is emptied between rounds so only the API's own memory is measured.
A flat line after warm-up is the target; ``--trace`` adds tracemalloc's top growing call sites.

It also prints the CPU each kind of call took in this process, against the 0.8 ms target for
InsertMedia and Reset: ``time.process_time`` around the WSGI application (routing, auth, the
handler, its Redis round trips and the Celery send; not gunicorn's socket and HTTP parsing),
and beside it the same call through Flask's test client, which adds building the request.
``--profile CALL`` prints where one kind of call spends it.
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import gc
import pstats
import shutil
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

import bcrypt

from app import create_app, gunicorn_conf
from fleetfish.mirror import mirror_doc
from fleetfish.settings import Settings
from fleetfish.store import Store
from lab.ports import free_port
from lab.redis_embedded import EmbeddedRedis

NAMESPACE, VM = "bench", "node-0"
SYSTEM = f"{NAMESPACE}.{VM}"
PASSWORD = "bench-pw"
CPU_TARGET_MS = 0.8  # the API's CPU per InsertMedia and per Reset (issue: cost per node)


def _vm() -> dict:
    disks = [
        {"name": "rootdisk", "disk": {"bus": "virtio"}, "bootOrder": 1},
        {"name": "cdrom", "cdrom": {"bus": "sata"}},
    ]
    return {
        "metadata": {"namespace": NAMESPACE, "name": VM, "uid": "uid-0", "resourceVersion": "1"},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "spec": {
                    "domain": {
                        "cpu": {"cores": 2, "sockets": 1, "threads": 1},
                        "memory": {"guest": "4Gi"},
                        "firmware": {"bootloader": {"efi": {"secureBoot": False}}},
                        "devices": {"disks": disks, "interfaces": [{"name": "default"}]},
                    }
                }
            },
        },
        "status": {"printableStatus": "Stopped"},
    }


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1500)
    parser.add_argument("--every", type=int, default=250)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--trace", action="store_true", help="tracemalloc's top 5 growers")
    parser.add_argument(
        "--profile", metavar="CALL", help="cProfile one kind of call, e.g. InsertMedia"
    )
    parser.add_argument("--sort", default="cumulative", help="pstats order for --profile")
    parser.add_argument(
        "--callees", metavar="REGEX", help="with --profile: what the matching functions call"
    )
    parser.add_argument(
        "--session",
        action="store_true",
        help="authenticate by session token, as Ironic (sushy) does, instead of Basic",
    )
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="ff-api-memory-"))
    redis_server = EmbeddedRedis(workdir / "redis", free_port()).start()
    try:
        digest = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
        users = workdir / "users.yaml"
        users.write_text(
            f'users:\n  - name: admin\n    password_hash: "{digest}"\n    role: Administrator\n'
        )
        # The logging switches gunicorn's configuration sets in the API's processes.
        gunicorn_conf.lean_log_records()
        app = create_app(Settings(redis_url=redis_server.url, users_file=str(users)))
        store = Store.from_url(redis_server.url)
        client = app.test_client()
        auth = {"Authorization": "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()}
        system = f"/redfish/v1/Systems/{SYSTEM}"
        media = f"{system}/VirtualMedia/Cd"
        boot = {"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}}

        def reseed() -> None:
            store.r.flushdb()
            store.put_system(mirror_doc(_vm(), None))
            if args.session:  # the flush ended the session: a new one, as sushy would log in
                login = {"UserName": "admin", "Password": PASSWORD}
                answer = client.post("/redfish/v1/SessionService/Sessions", json=login)
                auth.clear()
                auth["X-Auth-Token"] = answer.headers["X-Auth-Token"]

        cpu_seconds: Counter = Counter()
        client_cpu_seconds: Counter = Counter()
        calls: Counter = Counter()
        in_app = [0.0]
        wsgi_app = app.wsgi_app

        def measured_wsgi_app(environ, start_response):
            before = time.process_time()
            try:
                return wsgi_app(environ, start_response)
            finally:
                in_app[0] = time.process_time() - before

        app.wsgi_app = measured_wsgi_app

        profiled = args.profile
        # CPU time, as the figures above: waits on Redis would otherwise dominate the profile.
        profiler = cProfile.Profile(time.process_time) if profiled else None

        def timed(name: str, call, *args, **kwargs):
            profiling = profiler is not None and name == profiled and not warming_up
            if profiling:
                profiler.enable()
            before = time.process_time()
            answer = call(*args, headers=auth, **kwargs)
            client_cpu_seconds[name] += time.process_time() - before
            cpu_seconds[name] += in_app[0]
            if profiling:
                profiler.disable()
            calls[name] += 1
            return answer

        def cycle(n: int) -> None:
            image = f"http://192.0.2.10/boot-{n % 7}.iso"
            answers = (
                timed("GET system", client.get, system),
                timed(
                    "EjectMedia", client.post, f"{media}/Actions/VirtualMedia.EjectMedia", json={}
                ),
                timed(
                    "InsertMedia",
                    client.post,
                    f"{media}/Actions/VirtualMedia.InsertMedia",
                    json={"Image": image},
                ),
                timed("PATCH boot", client.patch, system, json=boot),
                timed(
                    "Reset On",
                    client.post,
                    f"{system}/Actions/ComputerSystem.Reset",
                    json={"ResetType": "On"},
                ),
                timed("GET media", client.get, media),
            )
            failed = [a.status_code for a in answers if a.status_code >= 400]
            if failed:
                raise SystemExit(f"cycle {n}: error answers {failed}")

        warming_up = True
        reseed()
        for n in range(args.warmup):
            cycle(n)
        warming_up = False
        reseed()
        gc.collect()
        cpu_seconds.clear()
        client_cpu_seconds.clear()
        calls.clear()
        if args.trace:
            tracemalloc.start(8)
            before = tracemalloc.take_snapshot()
        start_rss, started = _rss_mib(), time.monotonic()
        print(f"after {args.warmup} warm-up cycles: RSS {start_rss:.1f} MiB")
        for n in range(1, args.cycles + 1):
            cycle(n)
            if n % args.every == 0:
                reseed()  # keep Redis small: it is not this process's memory
                rss = _rss_mib()
                print(
                    f"{n:6d} cycles  RSS {rss:6.1f} MiB  (+{rss - start_rss:4.1f})  "
                    f"{(time.monotonic() - started) * 1000 / n:5.2f} ms per cycle"
                )
        growth_kib = (_rss_mib() - start_rss) * 1024 / args.cycles
        print(f"growth: {growth_kib:.2f} KiB per cycle (6 calls each)")
        print("CPU per call in the WSGI app (no gunicorn, no socket); with the test client:")
        for name in calls:
            per_ms = cpu_seconds[name] * 1000 / calls[name]
            client_ms = client_cpu_seconds[name] * 1000 / calls[name]
            target = name in ("InsertMedia", "Reset On")
            verdict = ("PASS" if per_ms <= CPU_TARGET_MS else "FAIL") if target else ""
            print(f"  {name:<12} {per_ms:5.2f} ms {verdict:<4}  {client_ms:5.2f} ms")
        if profiler is not None:
            print(f"profile of {args.profile} (CPU figures above include the profiler):")
            stats = pstats.Stats(profiler).sort_stats(args.sort)
            stats.print_stats(40)
            if args.callees:
                stats.print_callees(args.callees)
        if args.trace:
            gc.collect()
            for stat in tracemalloc.take_snapshot().compare_to(before, "traceback")[:5]:
                print(stat)
                print("\n".join(stat.traceback.format()[-6:]))
    finally:
        redis_server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
