"""``dafka consume``: a console consumer printing record values or JSON lines."""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
import time
from typing import Any

from dafka._cli._common import (
    Progress,
    add_host,
    add_progress,
    add_towers,
    check_towers,
    sigterm_as_interrupt,
)
from dafka._native import Consumer
from dafka.errors import DafkaError


class TopicNotHeldError(DafkaError):
    """``--from-beginning`` of a topic that every store answered it does not hold."""


class SaidHere(logging.Filter):
    """Drops the consumer node's own log line that a topic is not held: the command says it
    (once, in its own words)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("no store holds topic")


# The logger the Rust consumer node logs through (pyo3-log: its module path).
NODE_LOGGER = "dafka_node.consumer"


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
    add_host(p)
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest record the stores hold, and fail if no store holds a "
        "topic (default: only records written after the consumer started)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="JSON lines; a value that is not UTF-8 goes in value_base64 instead of value",
    )
    p.add_argument(
        "--group",
        default=None,
        metavar="NAME",
        help="join consumer group NAME: share the topics' partitions with its other members, "
        "start each at the group's committed offset (--from-beginning: at the earliest record "
        "where the group has none), and commit what was printed",
    )
    p.add_argument(
        "--session-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="with --group: a member silent this long is replaced (default 10); a new group "
        "reads nothing for this long at its start",
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


def not_held(topics: list[str]) -> str:
    names = ", ".join(repr(t) for t in topics)
    return f"no store holds topic{'s' if len(topics) > 1 else ''} {names}"


def check_held(consumer: Any, from_beginning: bool, said: set[str]) -> None:
    """Once the stores answered that they hold no partition of a topic: fails the command
    with --from-beginning (a typo reads nothing for ever), else says it once per topic (new
    records may still come)."""
    missing = [t for t in consumer.topics_not_held if t not in said]
    if not missing:
        return
    if from_beginning:
        raise TopicNotHeldError(
            f"{not_held(missing)} (every store reachable answered; a typo? without "
            "--from-beginning the command waits for new records)"
        )
    said.update(missing)
    print(f"dafka consume: {not_held(missing)} yet; waiting for new records", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    if args.max_records is not None and args.max_records < 1:
        raise SystemExit("dafka consume: error: --max-records must be at least 1")
    check_towers(args.towers, args.tower_timeout)
    progress = Progress("received", args.progress)
    out = sys.stdout.buffer
    render = as_json if args.json else values
    said_here = SaidHere()
    logging.getLogger(NODE_LOGGER).addFilter(said_here)
    try:
        return consume(args, progress, out, render)
    finally:
        logging.getLogger(NODE_LOGGER).removeFilter(said_here)


def consume(args: argparse.Namespace, progress: Progress, out: Any, render: Any) -> int:
    with (
        Consumer(
            args.topics,
            towers=args.towers,
            offset_reset="earliest" if args.from_beginning else "latest",
            connect_timeout=args.tower_timeout,
            host=args.host,
            bind=args.bind,
            group=args.group,
            session_timeout=args.session_timeout,
        ) as consumer,
        sigterm_as_interrupt(),
    ):
        last = time.monotonic()
        said: set[str] = set()
        try:
            while args.max_records is None or progress.count < args.max_records:
                want = 10_000
                if args.max_records is not None:
                    want = min(want, args.max_records - progress.count)
                batch = consumer.poll(max_records=want, timeout=0.2)
                check_held(consumer, args.from_beginning, said)
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
