"""``python -m bench.idle``: what an idle fleet costs: CPU per process of a lab nobody calls.

A BMC service runs all day for nodes that are provisioned now and then; what its processes spend
while nothing happens (heartbeats, leases, sweeps, polls) is paid every minute. This starts a lab
of ``--vms`` VMs, lets it settle for ``--settle`` seconds, and prints the CPU milliseconds per
minute of each process over ``--seconds``, with the fleetfish total (API, workers, watcher,
Redis; the simulator and image server are the lab's own).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench.report import FLEET_PROCESSES
from bench.sampler import CpuAccount
from lab.stack import LabConfig, LabStack


def idle_cpu(vms: int, settle: float, seconds: float, var_dir: Path) -> dict[str, float]:
    """CPU milliseconds per minute of each lab process while the lab is left alone."""
    config = LabConfig.for_tests(var_dir, vms=vms, workers=2, flower=False)
    stack = LabStack(config).start(timeout=120 + vms)
    try:
        pids = {name: proc.pid for name, proc in stack.procs.items()}
        if stack.redis and stack.redis.proc:
            pids["redis"] = stack.redis.proc.pid
        time.sleep(settle)  # the first list, leases and worker start-up are not idle work
        account = CpuAccount(pids)
        account.start()
        time.sleep(seconds)  # the measurement itself: nothing is waited for
        used = account.stop(digits=4)  # an idle process spends milliseconds
    finally:
        stack.stop()
    per_minute = 60 / used["wall_seconds"]
    return {name: 1000 * s * per_minute for name, s in used["cpu_seconds"].items()}


def is_fleetfish(name: str) -> bool:
    return name in FLEET_PROCESSES or name.startswith("worker")


def format_idle(vms: int, used: dict[str, float]) -> str:
    parts = ", ".join(f"{name} {ms:.0f}" for name, ms in sorted(used.items()))
    total = sum(ms for name, ms in used.items() if is_fleetfish(name))
    return f"idle CPU, {vms} VMs (ms per minute): {parts}; fleetfish total {total:.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=200)
    parser.add_argument("--settle", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ff-idle-") as tmp:
        used = idle_cpu(args.vms, args.settle, args.seconds, Path(tmp))
    print(format_idle(args.vms, used))
    return 0


if __name__ == "__main__":
    sys.exit(main())
