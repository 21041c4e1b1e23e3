"""The ``fleetfish`` command: one subcommand per operator task."""

from __future__ import annotations

import argparse
import sys

from fleetfish.cli import hosts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fleetfish")
    commands = parser.add_subparsers(dest="command", required=True)
    hosts.add_parser(commands)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
