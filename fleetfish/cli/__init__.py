"""The ``fleetfish`` command: one subcommand per operator task (``fleetfish nodes``, ``fleetfish hosts``)."""

from __future__ import annotations

import argparse
import sys

from fleetfish.cli import hosts, nodes

# Each subcommand module has ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.
SUBCOMMANDS = {
    "nodes": nodes,
    "hosts": hosts,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fleetfish", description="fleetfish operator tools")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in SUBCOMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=module.HELP, description=module.HELP))
    args = parser.parse_args(argv)
    return SUBCOMMANDS[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
