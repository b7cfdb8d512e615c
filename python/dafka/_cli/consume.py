"""``dafka consume``: a console consumer printing record values or JSON lines."""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from typing import Any

from dafka._cli._common import (
    Progress,
    add_progress,
    add_towers,
    check_towers,
    sigterm_as_interrupt,
)
from dafka._native import Consumer


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "consume",
        help="print the records of topics",
        description="Print each record of the topics on stdout: its value and a newline, or "
        "with --json one JSON object (topic, partition, offset, timestamp, value) a line. "
        "Runs until Ctrl-C, --max-records or --idle-timeout.",
    )
    p.add_argument("topics", nargs="+", metavar="TOPIC", help="topics (exact names)")
    add_towers(p)
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest record the stores hold (default: only new records)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="JSON lines; a value that is not UTF-8 goes in value_base64 instead of value",
    )
    p.add_argument("--max-records", type=int, default=None, help="exit after this many records")
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="exit when no record came for this long",
    )
    add_progress(p)
    p.set_defaults(run=run, command="consume")


def as_json(batch: Any) -> bytes:
    out = []
    columns = batch.to_pydict()
    for topic, partition, offset, value, ts in zip(
        columns["topic"],
        columns["partition"],
        columns["offset"],
        columns["value"],
        columns["timestamp"],
        strict=True,
    ):
        row: dict[str, Any] = {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "timestamp": ts.isoformat(),
        }
        try:
            row["value"] = value.decode()
        except UnicodeDecodeError:
            row["value_base64"] = base64.b64encode(value).decode()
        out.append(json.dumps(row, ensure_ascii=False).encode() + b"\n")
    return b"".join(out)


def values(batch: Any) -> bytes:
    vals = batch.column("value").to_pylist()
    return b"".join(v + b"\n" for v in vals)


def run(args: argparse.Namespace) -> int:
    if args.max_records is not None and args.max_records < 1:
        raise SystemExit("dafka consume: error: --max-records must be at least 1")
    check_towers(args.towers, args.tower_timeout)
    progress = Progress("received", args.progress)
    out = sys.stdout.buffer
    render = as_json if args.json else values
    with (
        Consumer(
            args.topics,
            towers=args.towers,
            offset_reset="earliest" if args.from_beginning else "latest",
        ) as consumer,
        sigterm_as_interrupt(),
    ):
        last = time.monotonic()
        try:
            while args.max_records is None or progress.count < args.max_records:
                want = 10_000
                if args.max_records is not None:
                    want = min(want, args.max_records - progress.count)
                batch = consumer.poll(max_records=want, timeout=0.2)
                now = time.monotonic()
                if batch.num_rows == 0:
                    if args.idle_timeout is not None and now - last >= args.idle_timeout:
                        break
                    continue
                last = now
                out.write(render(batch))
                out.flush()
                progress.add(batch.num_rows)
        except KeyboardInterrupt:
            pass
        except BrokenPipeError:
            # `dafka consume ... | head`: the reader is gone; stop quietly (and keep Python's
            # final flush of stdout from failing again).
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        finally:
            progress.finish()
    print(f"dafka consume: processed {progress.count} records", file=sys.stderr)
    return 0
