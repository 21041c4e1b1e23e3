"""``python -m bench.compare``: CPU per provisioned node of this checkout against older code, in turns.

The machine's speed drifts by about 10% from one hour to the next, more than the changes being
judged, so one run of each side says little. This runs ``bench.fleet`` for this checkout and for
``--ref`` (a git worktree of that commit, with this checkout's ``bench/`` copied in, as
``make bench-reference`` does) alternately, ``--rounds`` times per size, and prints each run's
fleetfish CPU per provisioned node, the means and their ratio. Results: ``--out``/<side>-n<N>-r<k>.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from bench.report import cpu_per_node

REPO = Path(__file__).resolve().parent.parent
REFERENCE = "8dc8dbe"  # the code before the DataVolume watch: the reference of the cost target


def fleet_run(cwd: Path, size: int, import_seconds: float, out: Path) -> float | None:
    """One ``bench.fleet`` run of the code in ``cwd``; its CPU per provisioned node, None when
    it wrote no results or not every node booted its ISO (its report says why)."""
    command = [
        sys.executable, "-m", "bench.fleet", "--sizes", str(size),
        "--import-seconds", str(import_seconds), "--workers", "2", "--modes", "fleetfish",
        "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    shutil.rmtree(out, ignore_errors=True)  # a run that writes nothing must not read an old one
    # bench.fleet exits 1 when a target FAILs: the run still counts, its results say why.
    subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, check=False)
    results = out / "results.json"
    if not results.exists():
        return None
    run = json.loads(results.read_text())["results"][0]
    if run.get("cdrom_boots") != run.get("n"):
        return None
    return cpu_per_node(run, "cpu_whole_run")


def reference_worktree(ref: str, path: Path) -> Path:
    if path.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO, check=False)
        shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["git", "worktree", "prune"], cwd=REPO, check=True)
    subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=REPO, check=True)
    shutil.copytree(REPO / "bench", path / "bench", dirs_exist_ok=True)
    return path


Round = dict[str, float | None]  # {"this": CPU per node, "ref": ...}; None: no usable run


def summary_lines(ref: str, per_size: dict[int, list[Round]]) -> list[str]:
    """Per size: each round's pair, and the means over the rounds where both sides ran."""
    lines = []
    for size, rounds in sorted(per_size.items()):
        shown = ", ".join(
            "/".join("-" if r[side] is None else f"{r[side]:.3f}" for side in ("this", "ref"))
            for r in rounds
        )
        line = f"N={size}: this/reference per round {shown or 'none'}"
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
    args = parser.parse_args(argv)
    args.out = args.out.resolve()  # the runs work in other directories
    sizes = [int(s) for s in args.sizes.split(",") if s]
    args.out.mkdir(parents=True, exist_ok=True)
    worktree = reference_worktree(args.ref, REPO / "var" / "compare-worktree")
    per_size: dict[int, list[Round]] = {n: [] for n in sizes}
    try:
        for k in range(1, args.rounds + 1):
            for size in sizes:
                pair: Round = {}
                per_size[size].append(pair)
                sides = [("this", REPO), ("ref", worktree)]
                # Each side goes first in every other round: neither always runs on a warmer
                # (or busier) machine.
                for side, cwd in sides if k % 2 else sides[::-1]:
                    out = args.out / f"{side}-n{size}-r{k}"
                    pair[side] = cpu = fleet_run(cwd, size, args.import_seconds, out)
                    shown = "no usable result" if cpu is None else f"{cpu:.3f} s per node"
                    print(f"round {k} N={size} {side}: {shown} ({out})", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO)
    for line in summary_lines(args.ref, per_size):
        print(line)
    complete = all(None not in r.values() for rounds in per_size.values() for r in rounds)
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
