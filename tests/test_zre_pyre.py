"""ZRE interop with pyre (PyPI zeromq-pyre, pinned in requirements-dev.txt).

A pyre node runs in this process and a dafka ZRE node in a subprocess (the `zre_peer` example
of crates/zre, built here with cargo); they find each other by beacons and exchange ENTER
(with headers), JOIN, SHOUT and WHISPER with several frames both ways, LEAVE, and EXIT when
pyre stops.

Loopback only. pyre picks its beacon interface itself (`Pyre.set_interface` is a no-op in
0.3.4): the first non-loopback interface with a broadcast address, else multicast
225.25.25.25, which would leave the host. So the test replaces `ZBeacon._prepare_socket`, where
pyre makes that choice, with one that sets 127.0.0.1 / 127.255.255.255, and checks that the
replacement ran before the node beacons. The dafka node is started with `Options::loopback`.
Both use a UDP port picked per test run, not 5670.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zmq
from netns import Proc
from ports import free_udp_port
from pyre import Pyre, zbeacon
from pyre.pyre_event import PyreEvent

LOOPBACK_BROADCAST = "127.255.255.255"
TIMEOUT = 15.0


@pytest.fixture
def loopback_pyre(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Confines every pyre beacon of this test to 127.255.255.255; returns the interfaces
    pyre was given, so the test can check the patch took effect."""
    chosen: list[str] = []

    def prepare_loopback(self: Any) -> None:
        self.address = ipaddress.IPv4Address("127.0.0.1")
        self.network_address = ipaddress.IPv4Address("127.0.0.0")
        self.broadcast_address = ipaddress.IPv4Address(LOOPBACK_BROADCAST)
        self.interface_name = "lo"
        chosen.append(str(self.broadcast_address))

    monkeypatch.setattr(zbeacon.ZBeacon, "_prepare_socket", prepare_loopback)
    return chosen


@pytest.fixture(scope="module")
def zre_peer(repo: Path) -> Path:
    subprocess.run(
        ["cargo", "build", "--quiet", "-p", "dafka-zre", "--example", "zre_peer"],
        cwd=repo,
        check=True,
    )
    target = Path(os.environ.get("CARGO_TARGET_DIR", repo / "target"))
    binary = target / "debug" / "examples" / "zre_peer"
    assert binary.is_file(), binary
    return binary


class RustPeer(Proc):
    """The dafka node: commands on stdin, one event per line on stdout."""

    def __init__(self, binary: Path, port: int, *args: str) -> None:
        super().__init__([str(binary), str(port), *args])
        self.uuid = self.expect(lambda w: w[0] == "UUID")[1]

    def close(self) -> None:
        self.stop(timeout=5)


def pyre_expect(node: Pyre, match: Callable[[PyreEvent], bool]) -> PyreEvent:
    poller = zmq.Poller()
    poller.register(node.socket(), zmq.POLLIN)
    deadline = time.monotonic() + TIMEOUT
    seen = []
    while time.monotonic() < deadline:
        if dict(poller.poll(100)).get(node.socket()) == zmq.POLLIN:
            event = PyreEvent(node)
            if match(event):
                return event
            seen.append(str(event))
    raise AssertionError(f"pyre: no matching event; saw {seen}")


def hexes(*frames: bytes) -> list[str]:
    return [f.hex() for f in frames]


def test_pyre_and_dafka_meet_and_talk(zre_peer: Path, loopback_pyre: list[str]) -> None:
    port = free_udp_port()
    rust = RustPeer(zre_peer, port, "rusty", "G", "X-RUST=tcp://127.0.0.1:7000")
    node = Pyre("pyre-node")
    try:
        node.set_header("X-PYRE", "yes")
        node.set_port(str(port).encode())
        node.start()
        assert loopback_pyre == [LOOPBACK_BROADCAST], "pyre chose its own interface"
        node.join("G")
        pyre_id = node.uuid().hex.upper()
        rust_id = uuid.UUID(rust.uuid)

        # Discovery both ways, with headers.
        enter = pyre_expect(node, lambda e: e.type == "ENTER" and e.peer_uuid == rust_id)
        assert enter.peer_name == "rusty"
        assert enter.header("X-RUST") == "tcp://127.0.0.1:7000"
        assert enter.peer_addr.startswith("tcp://127.0.0.1:")
        words = rust.expect(lambda w: w[0] == "ENTER" and w[1] == pyre_id)
        assert words[2] == "pyre-node"
        assert "X-PYRE=yes" in words[4].split(",")
        pyre_expect(node, lambda e: e.type == "JOIN" and e.group == "G")
        rust.expect(lambda w: w[:3] == ["JOIN", pyre_id, "G"])

        # pyre -> dafka: SHOUT and WHISPER with two frames each.
        node.shout("G", [b"p-shout", b"frame-2"])
        words = rust.expect(lambda w: w[0] == "SHOUT")
        assert words[1:] == [pyre_id, "G", *hexes(b"p-shout", b"frame-2")]
        node.whisper(rust_id, [b"p-whisper", b"w-2"])
        words = rust.expect(lambda w: w[0] == "WHISPER")
        assert words[1:] == [pyre_id, *hexes(b"p-whisper", b"w-2")]

        # dafka -> pyre.
        rust.send("SHOUT G " + " ".join(hexes(b"r-shout", b"r-2")))
        shout = pyre_expect(node, lambda e: e.type == "SHOUT")
        assert (shout.peer_uuid, shout.group, shout.msg) == (rust_id, "G", [b"r-shout", b"r-2"])
        rust.send(f"WHISPER {pyre_id} " + " ".join(hexes(b"r-whisper", b"r-w2")))
        whisper = pyre_expect(node, lambda e: e.type == "WHISPER")
        assert (whisper.peer_uuid, whisper.msg) == (rust_id, [b"r-whisper", b"r-w2"])

        # LEAVE, then EXIT when pyre stops (its port-0 beacon).
        rust.send("LEAVE G")
        leave = pyre_expect(node, lambda e: e.type == "LEAVE")
        assert (leave.peer_uuid, leave.group) == (rust_id, "G")
    finally:
        node.stop()
    rust.expect(lambda w: w[:2] == ["EXIT", pyre_id])
    rust.close()
    assert rust.proc.returncode == 0
