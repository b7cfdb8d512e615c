"""The ``dafka`` command: one subcommand per module of :mod:`dafka._cli`.

Each module exposes ``register(subparsers)``, which adds its parser and sets
``run`` (``args -> exit status``) as its default. This file only lists them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dafka import __version__
from dafka._cli import consume, groups, produce, store, tower, zre
from dafka.errors import DafkaError

COMMANDS = [tower, store, produce, consume, groups, zre]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dafka",
        description="Dafka nodes and console tools (towers, stores, producers, consumers) and ZRE.",
    )
    parser.add_argument("--version", action="version", version=f"dafka {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(subparsers)
    args = parser.parse_args(argv)
    try:
        status: int = args.run(args)
    except DafkaError as e:
        print(f"dafka {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
