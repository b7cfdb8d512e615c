"""``dafka produce``: a console producer sending each line of stdin as a record."""

from __future__ import annotations

import argparse
import sys
from typing import Any, BinaryIO

from dafka._cli._common import (
    Progress,
    add_host,
    add_progress,
    add_towers,
    check_towers,
    sigterm_as_interrupt,
)
from dafka._native import Producer

CHUNK = 1 << 16


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "produce",
        help="send each line of stdin as a record",
        description="Send each line of stdin (without its newline) as a record of TOPIC, in "
        "order, then wait until the stores acknowledged them all. Lines read together are "
        "sent together (send_many).",
    )
    p.add_argument("topic", help="the topic")
    add_towers(p)
    add_host(p)
    p.add_argument(
        "--min-acks", type=int, default=1, help="stores that must acknowledge (default 1)"
    )
    p.add_argument(
        "--partition",
        default=None,
        help="resume this partition (32 hex digits, printed by an earlier run)",
    )
    p.add_argument(
        "--flush-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="at the end, wait this long for the acknowledgements (default 30)",
    )
    add_progress(p)
    p.set_defaults(run=run, command="produce")


def lines(stream: BinaryIO) -> Any:
    """Batches of complete lines, as soon as they are readable (an interactive line goes out
    when typed; piped input goes out in 64 KiB chunks)."""
    rest = b""
    read = getattr(stream, "read1", stream.read)
    while chunk := read(CHUNK):
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        if parts:
            yield [p[:-1] if p.endswith(b"\r") else p for p in parts]
    if rest:
        yield [rest]


def run(args: argparse.Namespace) -> int:
    check_towers(args.towers, args.tower_timeout)
    progress = Progress("sent", args.progress)
    with Producer(
        args.topic,
        towers=args.towers,
        min_acks=args.min_acks,
        partition=args.partition,
        connect_timeout=args.tower_timeout,
        host=args.host,
        bind=args.bind,
    ) as producer:
        print(
            f"dafka produce: topic {args.topic!r} partition {producer.partition}",
            file=sys.stderr,
        )
        first = None
        try:
            with sigterm_as_interrupt():
                for batch in lines(sys.stdin.buffer):
                    offset = producer.send_many(batch)
                    first = offset if first is None else first
                    progress.add(len(batch))
        except KeyboardInterrupt:
            # Stop reading; what was sent is still flushed below.
            print("dafka produce: interrupted", file=sys.stderr)
        finally:
            progress.finish()
        producer.flush(timeout=args.flush_timeout)
        span = "" if first is None else f", offsets {first}..{first + progress.count - 1}"
        print(
            f"dafka produce: {progress.count} records sent and acknowledged{span}",
            file=sys.stderr,
        )
    return 0
