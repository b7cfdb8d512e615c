"""``dafka tower``: a tower forwarding beacons until Ctrl-C."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dafka._cli._common import wait_for_interrupt
from dafka._native import Tower


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "tower",
        help="run a tower (forwards beacons between nodes)",
        description="Run a tower until Ctrl-C. Prints the --towers string for other nodes "
        "on stdout, then runs.",
    )
    p.add_argument(
        "--sub",
        default="tcp://*:5556",
        help="XSUB endpoint nodes beacon to (default tcp://*:5556; port 0 picks one)",
    )
    p.add_argument(
        "--pub",
        default=None,
        help="XPUB endpoint nodes listen to (default: the port after --sub's)",
    )
    p.set_defaults(run=run, command="tower")


def run(args: argparse.Namespace) -> int:
    with Tower(sub=args.sub, pub=args.pub) as tower:
        print(tower.towers, flush=True)
        print(f"dafka tower: running, --towers {tower.towers} (Ctrl-C stops)", file=sys.stderr)
        wait_for_interrupt()
    return 0
