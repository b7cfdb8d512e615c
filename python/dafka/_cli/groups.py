"""``dafka groups``: a consumer group's committed offsets and lag, per partition."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dafka._cli._common import add_towers, check_towers
from dafka._native import PartitionReader, group_assignment


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "groups",
        help="show a consumer group's committed offsets and lag",
        description="The members of a consumer group heard (listening to its heartbeats, "
        "without joining), and for each partition of the topics it committed offsets in: "
        "the committed offset (- where the group has none yet), the partition's end (one past "
        "its last record) and the lag (records after the committed offset, or after the first "
        "record held where there is none), and its owner as the members compute it, from the "
        "stores reachable.",
    )
    p.add_argument("group", metavar="GROUP", help="the consumer group's name")
    add_towers(p)
    p.add_argument("--json", action="store_true", help="one JSON object a line")
    p.add_argument(
        "--timeout", type=float, default=10.0, metavar="SECONDS", help="wait for the stores"
    )
    p.add_argument(
        "--session-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="the group's session timeout: its members are listened to for a quarter of it "
        "plus a second (default 10)",
    )
    p.set_defaults(run=run, command="groups")


def run(args: argparse.Namespace) -> int:
    check_towers(args.towers, args.tower_timeout)
    with PartitionReader(args.towers) as reader:
        committed = reader.committed(args.group, timeout=args.timeout)
        bounds: dict[tuple[str, str], tuple[int, int]] = {}
        for topic in sorted({t for t, _ in committed}):
            for partition, low_end in reader.offsets(topic, timeout=args.timeout).items():
                bounds[(topic, partition)] = low_end
        members = reader.group_members(
            args.group, wait=args.session_timeout / 4 + 1, session_timeout=args.session_timeout
        )
    # The owner of each partition, as every member computes it from the same view.
    owners = group_assignment(members, sorted(set(committed) | set(bounds)))
    rows = []
    for topic, partition in sorted(set(committed) | set(bounds)):
        offset = committed.get((topic, partition))
        low, end = bounds.get((topic, partition), (None, None))
        start = offset if offset is not None else low
        lag = None if end is None or start is None else max(end - start, 0)
        rows.append(
            {
                "group": args.group,
                "topic": topic,
                "partition": partition,
                "committed": offset,
                "end": end,
                "lag": lag,
                "owner": owners.get((topic, partition)),
            }
        )
    if args.json:
        print(json.dumps({"group": args.group, "members": members}))
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"group {args.group}: {len(members)} member{'s' * (len(members) != 1)} heard")
    for m in members:
        print(f"  member {m}")
    if not rows:
        print(f"dafka groups: no committed offset of group {args.group!r}", file=sys.stderr)
        return 0
    header = f"{'TOPIC':<24} {'PARTITION':<32} {'COMMITTED':>10} {'END':>10} {'LAG':>8}  OWNER"
    print(header)
    for r in rows:
        shown = {k: "-" if r[k] is None else r[k] for k in ("committed", "end", "lag", "owner")}
        print(
            f"{r['topic']:<24} {r['partition']:<32} {shown['committed']:>10} "
            f"{shown['end']:>10} {shown['lag']:>8}  {shown['owner']}"
        )
    return 0
