"""``dafka zre``: a ZRE node that joins groups and prints every event, like zyre's zpinger.

One line per event on stdout, flushed at once, fields separated by spaces::

    ENTER <uuid> <name> <address> <key=value>...
    JOIN <uuid> <name> <group>          LEAVE <uuid> <name> <group>
    SHOUT <uuid> <name> <group> <frame>...
    WHISPER <uuid> <name> <frame>...
    EXIT|EVASIVE|SILENT <uuid> <name>
    STOP

Frames are printed as text when they are printable UTF-8, else as ``0x`` + hex. With
``--greet``, every peer that enters is whispered ``Hello`` (as zpinger does) and every group
joined is shouted ``--greet``'s text once a peer joins it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from types import FrameType
from typing import Any

from dafka.errors import TimeoutError as DafkaTimeout
from dafka.zre import DEFAULT_PORT, Event, Node


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "zre",
        help="join ZRE groups and print events",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("groups", nargs="*", metavar="GROUP", help="groups to join")
    p.add_argument("--name", help="node name (default: first 6 hex digits of its id)")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--interface", "-i", help="interface name or address (default: zyre's)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="beacon UDP port")
    p.add_argument("--interval", type=float, default=1.0, help="beacon interval, seconds")
    p.add_argument("--ipv6", action="store_true", help="beacon to ff02::1 over IPv6")
    p.add_argument("--multicast", metavar="GROUP_IP", help="beacon to this multicast group")
    p.add_argument(
        "--known",
        action="append",
        default=[],
        metavar="ENDPOINT",
        help="a node's mailbox (tcp://ip:port) to find without beacons",
    )
    p.add_argument("--no-beacons", action="store_true", help="no UDP: known endpoints only")
    p.add_argument(
        "--gossip-hub", action="store_true", help="tell every peer of every other (a hub)"
    )
    p.add_argument(
        "--timeouts",
        type=float,
        nargs=3,
        default=(5.0, 10.0, 30.0),
        metavar=("EVASIVE", "SILENT", "EXPIRED"),
        help="peer timeouts in seconds (default: 5 10 30, as zyre)",
    )
    p.add_argument(
        "--curve-secret",
        metavar="Z85",
        help="CURVE mode (43/ZRE v3) with this secret key (40 Z85 characters; "
        "default: $DAFKA_ZRE_CURVE_SECRET); plaintext nodes are ignored. A key starting "
        "with '-' needs the = form: --curve-secret=KEY",
    )
    p.add_argument(
        "--allow-key",
        action="append",
        metavar="Z85",
        help="CURVE mode: talk only to peers with this public key (repeat for more; "
        "--allow-key=KEY for a key starting with '-')",
    )
    p.add_argument("--greet", metavar="TEXT", help="whisper Hello to peers, shout TEXT")
    p.add_argument("--count", type=int, help="stop after this many events")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.set_defaults(run=run, command="zre")


def frame_text(frame: bytes) -> str:
    try:
        text = frame.decode()
    except UnicodeDecodeError:
        return "0x" + frame.hex()
    if text and text.isprintable() and " " not in text:
        return text
    return "0x" + frame.hex()


def line(e: Event) -> str:
    who = [e.peer_uuid or "", e.peer_name or ""]
    if e.type == "ENTER":
        fields = [*who, e.address or "", *(f"{k}={v}" for k, v in e.headers.items())]
    elif e.type in ("JOIN", "LEAVE"):
        fields = [*who, e.group or ""]
    elif e.type == "SHOUT":
        fields = [*who, e.group or "", *map(frame_text, e.frames)]
    elif e.type == "WHISPER":
        fields = [*who, *map(frame_text, e.frames)]
    elif e.type == "STOP":
        fields = []
    else:
        fields = who
    return " ".join([e.type, *fields])


def run(args: argparse.Namespace) -> int:
    headers = {}
    for h in args.header:
        key, sep, value = h.partition("=")
        if not sep:
            print(f"dafka zre: --header {h!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        headers[key] = value
    # A secret on the command line shows in `ps`; the environment does not.
    secret = args.curve_secret or os.environ.get("DAFKA_ZRE_CURVE_SECRET") or None
    if args.allow_key and secret is None:
        print("dafka zre: --allow-key needs CURVE mode (--curve-secret)", file=sys.stderr)
        return 2
    node = Node(
        args.name,
        headers=headers,
        interface=args.interface,
        port=args.port,
        interval=args.interval,
        ipv6=args.ipv6,
        multicast=args.multicast,
        beacons=not args.no_beacons,
        known_endpoints=args.known,
        gossip_hub=args.gossip_hub,
        evasive=args.timeouts[0],
        silent=args.timeouts[1],
        expired=args.timeouts[2],
        curve_secretkey=secret,
        allowed_keys=args.allow_key,
    )
    stopping = False

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    node.start()
    print(f"UUID {node.uuid} {node.name} {node.endpoint}", flush=True)
    deadline = None if args.duration is None else time.monotonic() + args.duration
    seen = 0
    try:
        for group in args.groups:
            node.join(group)
        while not stopping:
            if deadline is not None and time.monotonic() >= deadline:
                break
            if args.count is not None and seen >= args.count:
                break
            try:
                event = node.recv(timeout=0.2)
            except DafkaTimeout:
                continue
            seen += 1
            print(line(event), flush=True)
            if args.greet is not None:
                if event.type == "ENTER" and event.peer_uuid:
                    node.whisper(event.peer_uuid, b"Hello")
                elif (
                    event.type == "JOIN" and event.group is not None and event.group in args.groups
                ):
                    node.shout(event.group, args.greet.encode())
    except KeyboardInterrupt:
        pass
    finally:
        node.stop()
    # What was still queued at stop, STOP last.
    for event in node:
        print(line(event), flush=True)
    return 0
