"""The ``dafka`` command line (console script ``dafka = dafka.cli:main``).

Each subcommand lives in its own module of :mod:`dafka._cli`, which exposes
``register(subparsers)``: it adds its parser and sets ``func`` to the function that runs it
(taking the parsed arguments, returning the exit status). This file only lists those modules.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dafka._cli import zre

COMMANDS = [zre]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dafka", description="dafka: ZMTP, ZRE and Dafka.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
    args = parser.parse_args(argv)
    status: int = args.func(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
