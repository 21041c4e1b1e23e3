"""``python -m bench.fleet``: Ironic's deploy sequence on N nodes at once, fleetfish side by side
with its legacy sequential mode and the sushy-tools emulator; writes JSON, Markdown and PNGs."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
from pathlib import Path

from bench import plots, report
from bench.interrupt import stop_on_sigterm
from bench.runs import MODES, SUSHY_TOOLS, run_lab_mode, run_sushy_tools

log = logging.getLogger("fleetfish.bench")

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__)
    p.add_argument("--sizes", default="3,10,50", help="comma-separated fleet sizes N")
    p.add_argument("--import-seconds", type=float, default=30.0, help="import time T per ISO")
    p.add_argument("--workers", type=int, default=2, help="Celery workers for fleetfish mode")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {MODES}")
    p.add_argument("--out", type=Path, required=True, help="directory for results and figures")
    p.add_argument(
        "--max-wait",
        type=float,
        default=0.0,
        help="seconds to wait for boots after the first call (default 2 T + 60); "
        "the sequential mode is cut there and its media makespan projected",
    )
    p.add_argument(
        "--sushy-attempts",
        type=int,
        default=2,
        help="sushy attempts per request against sushy-tools (Ironic's default is 10; "
        "fewer keep T > 60 s runs bounded)",
    )
    p.add_argument(
        "--watcher-in-workers",
        action="store_true",
        help="run the watcher role inside the worker processes (FLEETFISH_WORKER_WATCH=1) "
        "instead of a separate watcher process",
    )
    p.add_argument(
        "--worker-parent",
        action="store_true",
        help="fork the workers and the watcher from one parent that imported their code once "
        "(python -m workers.host) instead of starting each on its own",
    )
    p.add_argument(
        "--api-workers", type=int, default=2, help="gunicorn processes of the fleetfish API"
    )
    p.add_argument(
        "--service-cpus",
        type=int,
        default=0,
        help="pin the API and Redis to this many CPUs of their own and everything else to "
        "the rest (0: all share every CPU)",
    )
    p.add_argument("--work-dir", type=Path, default=REPO / "var" / "bench" / "fleet")
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(args.modes) - set(MODES)
    if unknown:
        p.error(f"unknown modes {sorted(unknown)}; choose from {MODES}")
    if args.service_cpus < 0:
        p.error("--service-cpus must be 0 (no pinning) or more")
    if not args.max_wait:
        args.max_wait = 2 * args.import_seconds + 60
    return args


def run_all(args: argparse.Namespace) -> list[dict]:
    work = args.work_dir / time.strftime("%Y%m%d-%H%M%S")
    results = []
    for count in args.sizes:
        for mode in args.modes:
            log.info("run: mode=%s N=%s T=%ss", mode, count, args.import_seconds)
            load_before = os.getloadavg()[0]
            if mode == SUSHY_TOOLS:
                result = run_sushy_tools(count, args.import_seconds, work, args.sushy_attempts)
            else:
                result = run_lab_mode(
                    mode,
                    count,
                    args.import_seconds,
                    args.workers,
                    work,
                    args.max_wait,
                    watcher_in_workers=args.watcher_in_workers,
                    worker_parent=args.worker_parent,
                    api_workers=args.api_workers,
                    service_cpus=args.service_cpus,
                )
            # The machine is shared: the load around each run says how far to trust its latencies.
            result["load_average_1m"] = {"before": load_before, "after": os.getloadavg()[0]}
            results.append(result)
            log.info(
                "done: mode=%s N=%s makespan=%s iso=%s/%s errors=%s",
                mode,
                count,
                result["makespan_seconds"],
                result["cdrom_boots"],
                count,
                result["errors"],
            )
    return results


def write_outputs(results: list[dict], out: Path, command: str) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    figures = []
    for r in results:
        name = f"timeline-{r['mode']}-n{r['n']}.png"
        plots.timeline(r, out / name)
        figures.append(name)
    plots.makespan_chart(results, out / "makespan.png")
    figures.append("makespan.png")
    document = {
        "command": command,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "verdicts": [
            {"target": t, "verdict": v, "measured": d} for t, v, d in report.verdicts(results)
        ],
        "results": results,
    }
    (out / "results.json").write_text(json.dumps(document, indent=2, sort_keys=True))
    (out / "results.md").write_text(report.markdown(results, command, figures))
    return figures


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("sushy").setLevel(logging.ERROR)
    # sushy's session keeps 10 connections per host and 64 threads share it; with Connection:
    # close every spare is discarded anyway, and urllib3 would say so hundreds of times a run.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    args = parse_args(argv)
    command = "python -m bench.fleet " + shlex.join(sys.argv[1:] if argv is None else argv)
    results = run_all(args)
    write_outputs(results, args.out, command)
    print(report.table(results))
    for line in report.cost_lines(results):
        print(line)
    failed = False
    for target, verdict, detail in report.verdicts(results):
        print(f"{verdict:<15} {target}: {detail}")
        failed |= verdict == "FAIL"
    print(f"results in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    stop_on_sigterm()
    sys.exit(main())
