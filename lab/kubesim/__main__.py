"""``python -m lab.kubesim``: run the simulator until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from lab.kubesim.cdi import CdiTimings
from lab.kubesim.controller import Timings
from lab.kubesim.simulator import Simulator


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lab.kubesim", description=__doc__)
    p.add_argument("--bind", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--vms", type=int, default=5, help="lab VMs to create (3 masters, then workers)")
    p.add_argument("--namespace", default="fleetfish-lab")
    p.add_argument(
        "--import-seconds", type=float, default=5.0, help="how long one ISO import takes"
    )
    p.add_argument(
        "--iso-base", default="", help="the lab ISO server's base URL (shown in /lab/status)"
    )
    p.add_argument("--start-seconds", type=float, default=0.5, help="VMI creation to Running")
    p.add_argument("--stop-seconds", type=float, default=0.3)
    p.add_argument("--hotplug-seconds", type=float, default=0.5)
    p.add_argument(
        "--retry-seconds", type=float, default=2.0, help="delay before an import retries"
    )
    p.add_argument(
        "--dv-delete-seconds",
        type=float,
        default=1.0,
        help="a deleted DataVolume's finalizer work: it is gone this long after the DELETE",
    )
    p.add_argument(
        "--immediate-binding",
        action="store_true",
        help="bind every PVC at once (default: WaitForFirstConsumer unless the DataVolume "
        "asks for immediate binding)",
    )
    p.add_argument("--log-level", default="WARNING")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    sim = Simulator(
        port=args.port,
        bind=args.bind,
        vms=args.vms,
        namespace=args.namespace,
        iso_base=args.iso_base,
        immediate_binding=args.immediate_binding,
        timings=Timings.scaled(
            args.start_seconds, stop=args.stop_seconds, hotplug=args.hotplug_seconds
        ),
        cdi_timings=CdiTimings(
            import_seconds=args.import_seconds,
            retry=args.retry_seconds,
            delete_seconds=args.dv_delete_seconds,
        ),
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    sim.start()
    print(f"kubesim ready: {sim.url}", flush=True)
    while not done.wait(1.0):
        pass
    sim.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
