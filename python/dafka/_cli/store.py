"""``dafka store``: a store node on a directory until Ctrl-C."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dafka._cli._common import add_host, add_towers, check_towers, wait_for_interrupt
from dafka._native import Store
from dafka.errors import StorageError


def sync_policy(text: str) -> str | float:
    if text in ("always", "never"):
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected always, never or an interval in seconds"
        ) from None


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "store",
        help="run a store on a directory",
        description="Run a store (keeps every partition it hears of on disk, acknowledges "
        "durable records, answers FETCH) until Ctrl-C.",
    )
    p.add_argument("path", type=Path, help="the store's directory (created if absent)")
    add_towers(p)
    add_host(p)
    p.add_argument(
        "--sync",
        type=sync_policy,
        default="always",
        help="always (fdatasync before every acknowledgement, the default), never, "
        "or an interval in seconds",
    )
    p.set_defaults(run=run, command="store")


def run(args: argparse.Namespace) -> int:
    check_towers(args.towers, args.tower_timeout)
    try:
        store = Store(
            str(args.path), towers=args.towers, sync=args.sync, host=args.host, bind=args.bind
        )
    except StorageError as e:
        raise StorageError(f"cannot open the store at {str(args.path)!r}: {e}") from e
    with store:
        announced = "" if args.host is None else f", announced as {args.host}"
        print(
            f"dafka store: {args.path} running{announced}, --towers {args.towers} (Ctrl-C stops)",
            file=sys.stderr,
        )
        wait_for_interrupt()
    return 0
