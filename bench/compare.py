"""``python -m bench.compare``: CPU per provisioned node of this checkout against older code, in turns.

The machine's speed drifts by about 10% from one hour to the next, more than the changes being
judged, so one run of each side says little. This runs ``bench.fleet`` for this checkout and for
``--ref`` (a git worktree of that commit, with this checkout's ``bench/`` copied in, as
``make bench-reference`` does) alternately, ``--rounds`` times per size, and prints each run's
fleetfish CPU per provisioned node, the means and their ratio, over the whole run and while the
calls ran (the issue's two windows). Results: ``--out``/<side>-n<N>-r<k>; ``--summarize`` prints
the summary of runs already in ``--out`` without running anything. ``--ref-python`` runs the
reference with another interpreter, e.g. a virtualenv holding the libraries the reference's
setup.cfg installs, where they differ from this checkout's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
from pathlib import Path

from bench.interrupt import stop_on_sigterm
from bench.report import cpu_per_node

REPO = Path(__file__).resolve().parent.parent
REFERENCE = "8dc8dbe"  # the code before the DataVolume watch: the reference of the cost target
# The CPU windows of a run's results.json, by the name the summary prints.
WINDOWS = {"whole run": "cpu_whole_run", "while the calls ran": "cpu_during_calls"}

PerWindow = dict[str, float]  # CPU per provisioned node in each of WINDOWS


def fleet_run(
    cwd: Path, size: int, import_seconds: float, out: Path, python: str = sys.executable
) -> PerWindow | None:
    """One ``bench.fleet`` run of the code in ``cwd`` with ``python``; its CPU per provisioned
    node, None when it wrote no results or not every node booted its ISO (its report says why)."""
    command = [
        python, "-m", "bench.fleet", "--sizes", str(size),
        "--import-seconds", str(import_seconds), "--workers", "2", "--modes", "fleetfish",
        "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    shutil.rmtree(out, ignore_errors=True)  # a run that writes nothing must not read an old one
    # bench.fleet exits 1 when a target FAILs: the run still counts, its results say why.
    run_child(command, cwd=cwd, env=env)
    return read_run(out)


def run_child(command: list[str], cwd: Path, env: dict[str, str]) -> None:
    """Run one benchmark to its end. Interrupted, it passes SIGTERM on and waits for the child
    to stop its lab (``subprocess.run`` would SIGKILL it, leaving the lab running)."""
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL) as child:
        try:
            child.wait()
        except BaseException:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=120)
            except subprocess.TimeoutExpired:
                child.kill()  # stuck for 2 minutes: its lab may be left running, as before
            raise


def read_run(out: Path) -> PerWindow | None:
    """The CPU per provisioned node of the run in ``out``, per window; None as in fleet_run."""
    results = out / "results.json"
    if not results.exists():
        return None
    run = json.loads(results.read_text())["results"][0]
    if run.get("cdrom_boots") != run.get("n"):
        return None
    return {name: cpu_per_node(run, key) for name, key in WINDOWS.items()}


def reference_worktree(ref: str, path: Path) -> Path:
    if path.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO, check=False)
        shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["git", "worktree", "prune"], cwd=REPO, check=True)
    subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=REPO, check=True)
    shutil.copytree(REPO / "bench", path / "bench", dirs_exist_ok=True)
    return path


Round = dict[str, float | None]  # {"this": CPU per node, "ref": ...}; None: no usable run


def summary_lines(ref: str, per_size: dict[int, list[Round]], window: str = "") -> list[str]:
    """Per size: each round's pair, and the means over the rounds where both sides ran."""
    lines = []
    for size, rounds in sorted(per_size.items()):
        shown = ", ".join(
            "/".join("-" if r[side] is None else f"{r[side]:.3f}" for side in ("this", "ref"))
            for r in rounds
        )
        label = f"N={size} {window}" if window else f"N={size}"
        line = f"{label}: this/reference per round {shown or 'none'}"
        complete = [r for r in rounds if r["this"] is not None and r["ref"] is not None]
        if complete:
            mine = statistics.mean(r["this"] for r in complete)
            theirs = statistics.mean(r["ref"] for r in complete)
            line += (
                f"; means over {len(complete)} rounds {mine:.3f} / {theirs:.3f} s per node: "
                f"{100 * (mine / theirs - 1):+.0f}% against {ref}"
            )
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default=REFERENCE, help=f"commit to compare with ({REFERENCE})")
    parser.add_argument("--sizes", default="50,200", help="comma-separated N")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--import-seconds", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=REPO / "var" / "bench-compare")
    parser.add_argument(
        "--ref-python",
        default=sys.executable,
        help="the Python the reference runs with (default: this one, with this checkout's libraries)",
    )
    parser.add_argument(
        "--summarize", action="store_true", help="print the summary of the runs in --out only"
    )
    args = parser.parse_args(argv)
    args.out = args.out.resolve()  # the runs work in other directories
    sizes = [int(s) for s in args.sizes.split(",") if s]
    runs: dict[int, list[dict[str, PerWindow | None]]] = {n: [] for n in sizes}
    if args.summarize:
        for size in sizes:
            for k in range(1, args.rounds + 1):
                runs[size].append(
                    {side: read_run(args.out / f"{side}-n{size}-r{k}") for side in ("this", "ref")}
                )
    else:
        run_rounds(args, sizes, runs)
    for window in WINDOWS:
        per_size = {
            size: [{side: (r[side] or {}).get(window) for side in r} for r in rounds]
            for size, rounds in runs.items()
        }
        for line in summary_lines(args.ref, per_size, window):
            print(line)
    complete = all(None not in r.values() for rounds in runs.values() for r in rounds)
    return 0 if complete else 1


def run_rounds(args, sizes: list[int], runs: dict[int, list[dict]]) -> None:
    """Both sides ``args.rounds`` times per size, into ``runs``, each run's line printed."""
    args.out.mkdir(parents=True, exist_ok=True)
    worktree = reference_worktree(args.ref, REPO / "var" / "compare-worktree")
    try:
        for k in range(1, args.rounds + 1):
            for size in sizes:
                pair: dict[str, PerWindow | None] = {}
                runs[size].append(pair)
                sides = [("this", REPO, sys.executable), ("ref", worktree, args.ref_python)]
                # Each side goes first in every other round: neither always runs on a warmer
                # (or busier) machine.
                for side, cwd, python in sides if k % 2 else sides[::-1]:
                    out = args.out / f"{side}-n{size}-r{k}"
                    pair[side] = cpu = fleet_run(cwd, size, args.import_seconds, out, python)
                    shown = (
                        "no usable result"
                        if cpu is None
                        else ", ".join(f"{v:.3f} s per node {w}" for w, v in cpu.items())
                    )
                    print(f"round {k} N={size} {side}: {shown} ({out})", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO)


if __name__ == "__main__":
    stop_on_sigterm()
    sys.exit(main())
