"""``dafka groups``: the consumer groups, their members, and each partition's committed offset,
lag and owner."""

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
        help="list the consumer groups, or show one: members, committed offsets, lag, owners",
        description="Without GROUP, every consumer group: those with offsets committed in a "
        "reachable store and those whose members are heard (listening to their heartbeats, "
        "without joining). For each group: its members heard, and for each partition of the "
        "topics it committed offsets in: the committed offset (- where the group has none "
        "yet), the partition's end (one past its last record), the lag (records after the "
        "committed offset, or after the first record held where there is none) and its owner "
        "as the members compute it, from the stores reachable.",
    )
    p.add_argument(
        "group", metavar="GROUP", nargs="?", default=None, help="one consumer group's name"
    )
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
        help="the groups' session timeout: their members are listened to for a quarter of it "
        "plus a second (default 10)",
    )
    p.set_defaults(run=run, command="groups")


def run(args: argparse.Namespace) -> int:
    check_towers(args.towers, args.tower_timeout)
    wait = args.session_timeout / 4 + 1
    with PartitionReader(args.towers) as reader:
        if args.group is None:
            stored = reader.groups(timeout=args.timeout)
            heard = reader.groups_heard(wait=wait, session_timeout=args.session_timeout)
            names = sorted(set(stored) | set(heard))
        else:
            members = reader.group_members(
                args.group, wait=wait, session_timeout=args.session_timeout
            )
            heard, names = {args.group: members}, [args.group]
        bounds: dict[str, dict[str, tuple[int, int]]] = {}
        groups = [
            (name, heard.get(name, []), rows_of(reader, name, heard.get(name, []), bounds, args))
            for name in names
        ]
    if not groups:
        print(
            "dafka groups: no consumer group found (none has offsets committed in a reachable "
            f"store, and no member was heard within {wait:g} s)",
            file=sys.stderr,
        )
        return 0
    for name, members, rows in groups:
        if args.json:
            print(json.dumps({"group": name, "members": members}))
            for row in rows:
                print(json.dumps(row))
        else:
            show(name, members, rows)
    return 0


def rows_of(
    reader: PartitionReader,
    group: str,
    members: list[str],
    bounds: dict[str, dict[str, tuple[int, int]]],
    args: argparse.Namespace,
) -> list[dict[str, Any]]:
    """Each partition of the topics `group` committed offsets in: committed offset, end, lag
    and owner (`bounds`: each topic's partitions, asked once for all the groups)."""
    committed = reader.committed(group, timeout=args.timeout)
    for topic in sorted({t for t, _ in committed} - set(bounds)):
        bounds[topic] = reader.offsets(topic, timeout=args.timeout)
    partitions = set(committed) | {
        (topic, partition) for topic in {t for t, _ in committed} for partition in bounds[topic]
    }
    # The owner of each partition, as every member computes it from the same view.
    owners = group_assignment(members, sorted(partitions))
    rows = []
    for topic, partition in sorted(partitions):
        offset = committed.get((topic, partition))
        low, end = bounds[topic].get(partition, (None, None))
        start = offset if offset is not None else low
        lag = None if end is None or start is None else max(end - start, 0)
        rows.append(
            {
                "group": group,
                "topic": topic,
                "partition": partition,
                "committed": offset,
                "end": end,
                "lag": lag,
                "owner": owners.get((topic, partition)),
            }
        )
    return rows


def show(group: str, members: list[str], rows: list[dict[str, Any]]) -> None:
    print(f"group {group}: {len(members)} member{'s' * (len(members) != 1)} heard")
    for m in members:
        print(f"  member {m}")
    if not rows:
        print(f"  no committed offset of group {group!r}")
        return
    header = f"{'TOPIC':<24} {'PARTITION':<32} {'COMMITTED':>10} {'END':>10} {'LAG':>8}  OWNER"
    print(header)
    for r in rows:
        shown = {k: "-" if r[k] is None else r[k] for k in ("committed", "end", "lag", "owner")}
        print(
            f"{r['topic']:<24} {r['partition']:<32} {shown['committed']:>10} "
            f"{shown['end']:>10} {shown['lag']:>8}  {shown['owner']}"
        )
