"""`make lab`: run the whole fleetfish stack in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time

from fleetfish.settings import Settings
from lab.stack import LabConfig, LabStack

log = logging.getLogger("fleetfish.lab")


def settings_help() -> str:
    """The LAB_* settings with the defaults LabConfig really uses."""
    d = LabConfig()
    rows = [
        ("LAB_VMS", d.vms, "simulated VMs"),
        ("LAB_IMPORT_SECONDS", f"{d.import_seconds:g}", "how long a simulated CDI import takes"),
        ("LAB_WORKERS", d.workers, "Celery worker processes"),
        ("LAB_WORKER_CONCURRENCY", d.worker_concurrency, "threads per worker process"),
        ("LAB_API_WORKERS", d.api_workers, "gunicorn processes"),
        ("FLEETFISH_PORT", d.api_port, "API port (LAB_REDIS_PORT, LAB_KUBE_PORT, LAB_ISO_PORT, "
         "LAB_FLOWER_PORT: the others)"),
        ("LAB_ISO_BIND", d.iso_bind, "ISO server address (0.0.0.0: reachable from a real cluster)"),
        ("LAB_VAR_DIR", "var/lab", "Redis data, credentials, kubeconfig, logs"),
        ("LAB_TLS", 0, "1 serves the API over HTTPS with a self-signed certificate"),
        ("FLEETFISH_WORKER_WATCH", 0, "1 runs the watcher as a thread of each worker"),
        ("FLEETFISH_LEGACY_SEQUENTIAL", 0, "1 = one worker, no chord (what fleetfish replaces)"),
        ("REDIS_URL, KUBECONFIG", "", "your own Redis / a real cluster instead of the lab's"),
    ]  # fmt: skip
    lines = [
        f"  {name}{'=' if default != '' else ''}{default}".ljust(33) + text
        for name, default, text in rows
    ]
    return "settings (environment variables, docs/configuration.md):\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        prog="python -m lab",
        description="Run fleetfish on this machine (embedded Redis, KubeVirt simulator, ISO "
        "server, workers, watcher, API, Flower) until Ctrl-C or SIGTERM.",
        epilog=settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s fleetfish.lab %(message)s")
    stop = threading.Event()
    starting = True

    def request_stop(signum, _frame):
        log.info("received %s, stopping the lab", signal.Signals(signum).name)
        first = not stop.is_set()
        stop.set()
        if starting and first:
            # Abandon the start now: start() stops what it started before this propagates.
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)

    try:
        config = LabConfig.from_env()
        # What the services would refuse at their start, refused here before anything starts.
        Settings.from_env()
    except ValueError as exc:
        log.error("bad setting: %s (python -m lab --help lists them)", exc)
        return 2
    stack = LabStack(config)
    started = time.monotonic()
    try:
        stack.start(timeout=120)
    except KeyboardInterrupt:
        log.info("lab stopped before it was ready")
        return 130
    except Exception as exc:  # noqa: BLE001 - report and exit non-zero, children already stopped
        log.error("the lab did not start: %s", exc)
        return 1
    finally:
        starting = False
    log.info("started in %.1f s; logs in %s", time.monotonic() - started, stack.logs_dir)
    print(stack.ready_line(), flush=True)
    try:
        reported: set[str] = set()
        while not stop.wait(1.0):
            for name, status in stack.exited().items():
                if name not in reported:
                    where = (
                        stack.redis.data_dir / "redis.log"
                        if name == "redis"
                        else (stack.logs_dir / f"{name}.log")
                    )
                    log.error("%s exited with %s (log: %s)", name, status, where)
                    reported.add(name)
    finally:
        stack.stop()
        log.info("lab stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
