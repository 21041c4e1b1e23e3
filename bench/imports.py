"""``python -m bench.imports``: resident memory each library adds to a fresh process on import.

Most of a fleetfish process's memory is the code of the libraries it imports, not its data:
this prints, for the API's and a worker's imports in the order they load, how much each one
added to the RSS of a new interpreter (its own dependencies included, shared ones counted
where first loaded), and the total against the bare interpreter.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The libraries in the order a process loads them, then fleetfish's own entry module.
API_IMPORTS = (
    "ssl",
    "redis",
    "kombu.transport.redis",
    "celery.app.base",
    "flask",
    "bcrypt",
    "yaml",
    "prometheus_client",
    "app",
)
WORKER_IMPORTS = (
    "ssl",
    "redis",
    "kombu.transport.redis",
    "celery.app.base",
    "celery.apps.worker",
    "pydantic",
    "requests",
    "jsonschema",
    "kubernetes",
    "workers.celery_app",
)

PROBE = """
import json, sys
def rss_kib():
    with open("/proc/self/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0])
steps = [["(interpreter)", rss_kib()]]
for name in sys.argv[1:]:
    __import__(name)
    steps.append([name, rss_kib()])
print(json.dumps(steps))
"""


def measure(modules: tuple[str, ...]) -> list[tuple[str, float]]:
    """(module, MiB it added) in load order, first row the bare interpreter's RSS."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *modules],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    steps = json.loads(out.stdout.strip().splitlines()[-1])
    rows = [(steps[0][0], steps[0][1] / 1024)]
    for (_, before), (name, after) in zip(steps, steps[1:], strict=False):
        rows.append((name, (after - before) / 1024))
    return rows


def render(title: str, rows: list[tuple[str, float]]) -> str:
    lines = [f"{title}", f"{'MiB':>7}  import"]
    lines += [f"{mib:7.1f}  {name}" for name, mib in rows]
    lines.append(f"{sum(m for _, m in rows):7.1f}  total RSS after these imports")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.imports", description=__doc__)
    parser.parse_args(argv)
    print(render("API process (gunicorn worker)", measure(API_IMPORTS)))
    print()
    print(render("Celery worker process", measure(WORKER_IMPORTS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
