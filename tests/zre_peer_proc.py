"""One ZRE node in its own process, driven by lines on stdin, reporting events on stdout, for
the network-namespace tests (tests/test_zre_netns.py runs it with `ip netns exec`).

    python zre_peer_proc.py dafka|pyre NAME PORT [--interface IF] [--timeouts E S X]
                            [--interval S] [--header K=V]... [--group G]...
                            [--ipv6] [--multicast GROUP]

stdout: ``UUID <hex>`` first, then one line per event: ``ENTER <uuid> <name> <address>
<k=v,...>``, ``EXIT <uuid>``, ``JOIN <uuid> <group>``, ``LEAVE <uuid> <group>``, ``SHOUT <uuid>
<group> <hex>...``, ``WHISPER <uuid> <hex>...``, ``EVASIVE <uuid>``, ``SILENT <uuid>``,
``STOP``. stdin: ``SHOUT <group> <hex>...``, ``WHISPER <uuid> <hex>...``, ``JOIN <group>``,
``LEAVE <group>``, ``STOP``. UUIDs are 32 upper-case hex digits on both implementations.

pyre picks its beacon interface itself (the first non-loopback one with a broadcast address,
here the namespace's veth), so ``--interface`` applies to dafka only.
"""

from __future__ import annotations

import argparse
import sys
import threading
import uuid as uuidlib
from collections.abc import Callable
from typing import Any


def say(*words: str) -> None:
    print(" ".join(words), flush=True)


def command(line: str, act: dict[str, Callable[..., None]]) -> bool:
    """Runs one stdin command; False on STOP."""
    words = line.split()
    if not words:
        return True
    if words[0] == "STOP":
        return False
    frames = [bytes.fromhex(w) for w in words[2:]]
    if words[0] in ("JOIN", "LEAVE"):
        act[words[0]](words[1])
    else:
        act[words[0]](words[1], frames)
    return True


def run_dafka(args: argparse.Namespace) -> None:
    from dafka.errors import ClosedError
    from dafka.zre import Node

    node = Node(
        args.name,
        headers=dict(h.split("=", 1) for h in args.header),
        interface=args.interface,
        port=args.port,
        interval=args.interval,
        ipv6=args.ipv6,
        multicast=args.multicast,
        evasive=args.timeouts[0],
        silent=args.timeouts[1],
        expired=args.timeouts[2],
    )
    node.start()
    say("UUID", node.uuid)
    for g in args.group:
        node.join(g)
    act: dict[str, Callable[..., None]] = {
        "JOIN": node.join,
        "LEAVE": node.leave,
        "SHOUT": lambda g, f: node.shout(g, *f),
        "WHISPER": lambda p, f: node.whisper(p, *f),
    }

    def commands() -> None:
        for line in sys.stdin:
            if not command(line, act):
                break
        node.stop()

    threading.Thread(target=commands, daemon=True).start()
    while True:
        try:
            e = node.recv()
        except ClosedError:
            break
        hexes = [f.hex() for f in e.frames]
        if e.type == "ENTER":
            kv = ",".join(f"{k}={v}" for k, v in e.headers.items())
            say("ENTER", e.peer_uuid or "", e.peer_name or "", e.address or "", kv)
        elif e.type in ("JOIN", "LEAVE"):
            say(e.type, e.peer_uuid or "", e.group or "")
        elif e.type == "SHOUT":
            say("SHOUT", e.peer_uuid or "", e.group or "", *hexes)
        elif e.type == "WHISPER":
            say("WHISPER", e.peer_uuid or "", *hexes)
        elif e.type == "STOP":
            say("STOP")
            break
        else:
            say(e.type, e.peer_uuid or "")


def run_pyre(args: argparse.Namespace) -> None:
    import zmq
    from pyre import Pyre
    from pyre.pyre_event import PyreEvent

    node = Pyre(args.name)
    for h in args.header:
        k, v = h.split("=", 1)
        node.set_header(k, v)
    node.set_port(str(args.port).encode())
    node.start()
    say("UUID", node.uuid().hex.upper())
    for g in args.group:
        node.join(g)
    act: dict[str, Callable[..., Any]] = {
        "JOIN": node.join,
        "LEAVE": node.leave,
        "SHOUT": node.shout,
        "WHISPER": lambda p, f: node.whisper(uuidlib.UUID(p), f),
    }
    poller = zmq.Poller()
    poller.register(node.socket(), zmq.POLLIN)
    poller.register(sys.stdin.fileno(), zmq.POLLIN)
    running = True
    while running:
        for item, _ in poller.poll():
            if item == sys.stdin.fileno():
                running = command(sys.stdin.readline() or "STOP", act)
                continue
            e = PyreEvent(node)
            peer = e.peer_uuid.hex.upper() if e.peer_uuid else ""
            if e.type == "ENTER":
                kv = ",".join(f"{k}={v}" for k, v in e.headers.items())
                say("ENTER", peer, e.peer_name, e.peer_addr, kv)
            elif e.type in ("JOIN", "LEAVE"):
                say(e.type, peer, e.group)
            elif e.type == "SHOUT":
                say("SHOUT", peer, e.group, *(f.hex() for f in e.msg))
            elif e.type == "WHISPER":
                say("WHISPER", peer, *(f.hex() for f in e.msg))
            else:
                say(e.type, peer)
    node.stop()
    say("STOP")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("impl", choices=["dafka", "pyre"])
    p.add_argument("name")
    p.add_argument("port", type=int)
    p.add_argument("--interface")
    p.add_argument("--ipv6", action="store_true")
    p.add_argument("--multicast")
    p.add_argument("--interval", type=float, default=0.2)
    p.add_argument("--timeouts", type=float, nargs=3, default=(5.0, 10.0, 30.0))
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    args = p.parse_args()
    (run_dafka if args.impl == "dafka" else run_pyre)(args)


if __name__ == "__main__":
    main()
