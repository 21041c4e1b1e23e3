"""`make lab`: run the whole fleetfish stack in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time

from lab.stack import LabConfig, LabStack

log = logging.getLogger("fleetfish.lab")


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s fleetfish.lab %(message)s")
    stop = threading.Event()

    def request_stop(signum, _frame):
        log.info("received %s, stopping the lab", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)

    config = LabConfig.from_env()
    stack = LabStack(config)
    started = time.monotonic()
    try:
        stack.start(timeout=120)
    except Exception as exc:  # noqa: BLE001 - report and exit non-zero, children already stopped
        log.error("the lab did not start: %s", exc)
        return 1
    log.info("started in %.1f s; logs in %s", time.monotonic() - started, stack.logs_dir)
    print(stack.ready_line(), flush=True)
    try:
        while not stop.wait(1.0):
            for name, proc in list(stack.procs.items()):
                if proc.poll() is not None:
                    log.error(
                        "%s exited with %s (log: %s/%s.log)",
                        name,
                        proc.returncode,
                        stack.logs_dir,
                        name,
                    )
                    stack.procs.pop(name)
    finally:
        stack.stop()
        log.info("lab stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
