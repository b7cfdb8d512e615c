"""ZRE across network namespaces: pyre interop both ways, beacon modes, a link down and up.

Each node runs in its own namespace (``tests/netns.py``: made and deleted by the test, joined
by veth pairs or a bridge in a hub namespace), so beacons cross real interfaces (broadcast,
IPv4 multicast, IPv6 multicast to ff02::1) and still never reach the host's: the namespaces
have no link out. pyre chooses its interface itself (the namespace's veth, its only
non-loopback one); dafka nodes are given theirs by name. Skipped, with the reason, only where
namespaces cannot be made (not root, no iproute2).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns import Lab, Proc, netns_unavailable

PEER = str(Path(__file__).with_name("zre_peer_proc.py"))
PORT = "5670"  # inside the namespaces: nobody else is there

pytestmark = pytest.mark.skipif((reason := netns_unavailable()) is not None, reason=reason or "")


@pytest.fixture
def lab() -> Iterator[Lab]:
    with Lab() as lab:
        yield lab


def peer(lab: Lab, ns: str, impl: str, name: str, *args: str) -> tuple[Proc, str]:
    p = lab.run(ns, [sys.executable, PEER, impl, name, PORT, *args])
    return p, p.expect(lambda w: w[0] == "UUID")[1]


def hexes(*frames: bytes) -> list[str]:
    return [f.hex() for f in frames]


@pytest.mark.parametrize("first", ["pyre", "dafka"])
def test_pyre_interop_across_namespaces(lab: Lab, first: str) -> None:
    a, b = lab.namespace(), lab.namespace()
    ea, eb = lab.veth(a, b)
    lab.address(a, ea, "10.78.0.1/24")
    lab.address(b, eb, "10.78.0.2/24")
    start = {
        "pyre": lambda: peer(lab, a, "pyre", "pyre-node", "--header", "X-PYRE=yes"),
        "dafka": lambda: peer(
            lab, b, "dafka", "rusty", "--interface", eb, "--header", "X-RUST=tcp://10.78.0.2:1"
        ),
    }
    second = "dafka" if first == "pyre" else "pyre"
    started = {first: start[first](), second: start[second]()}
    (py, py_id), (rs, rs_id) = started["pyre"], started["dafka"]

    # Discovery both ways, with headers and the address each side sees.
    words = py.expect(lambda w: w[:2] == ["ENTER", rs_id])
    assert words[2:] == ["rusty", words[3], "X-RUST=tcp://10.78.0.2:1"]
    assert words[3].startswith("tcp://10.78.0.2:")
    words = rs.expect(lambda w: w[:2] == ["ENTER", py_id])
    assert words[2] == "pyre-node" and words[3].startswith("tcp://10.78.0.1:")
    assert "X-PYRE=yes" in words[4].split(",")

    py.send("JOIN G")
    rs.send("JOIN G")
    rs.expect(lambda w: w == ["JOIN", py_id, "G"])
    py.expect(lambda w: w == ["JOIN", rs_id, "G"])

    # pyre -> dafka and dafka -> pyre: SHOUT and WHISPER with several frames.
    py.send("SHOUT G " + " ".join(hexes(b"p-shout", b"p2", b"p3")))
    shout = rs.expect(lambda w: w[0] == "SHOUT")
    assert shout[1:] == [py_id, "G", *hexes(b"p-shout", b"p2", b"p3")]
    py.send(f"WHISPER {rs_id} " + " ".join(hexes(b"p-whisper", b"w-2")))
    assert rs.expect(lambda w: w[0] == "WHISPER")[1:] == [py_id, *hexes(b"p-whisper", b"w-2")]
    rs.send("SHOUT G " + " ".join(hexes(b"r-shout", b"r-2")))
    assert py.expect(lambda w: w[0] == "SHOUT")[1:] == [rs_id, "G", *hexes(b"r-shout", b"r-2")]
    rs.send(f"WHISPER {py_id} " + " ".join(hexes(b"r-whisper", b"r-w2", b"r-w3")))
    assert py.expect(lambda w: w[0] == "WHISPER")[1:] == [
        rs_id,
        *hexes(b"r-whisper", b"r-w2", b"r-w3"),
    ]

    # LEAVE both ways, then EXIT when the first one stops (its port-0 beacon).
    rs.send("LEAVE G")
    py.expect(lambda w: w == ["LEAVE", rs_id, "G"])
    py.send("LEAVE G")
    rs.expect(lambda w: w == ["LEAVE", py_id, "G"])
    stopping, staying, gone = (py, rs, py_id) if first == "pyre" else (rs, py, rs_id)
    assert stopping.stop() == 0
    staying.expect(lambda w: w == ["EXIT", gone], timeout=10)
    assert staying.stop() == 0


@pytest.mark.parametrize(
    "mode",
    [[], ["--multicast", "225.25.25.25"], ["--ipv6"], ["--ipv6", "--multicast", "ff02::1"]],
    ids=["broadcast", "ipv4-multicast", "ipv6", "ipv6-explicit-group"],
)
def test_beacon_modes_and_a_shared_port(lab: Lab, mode: list[str]) -> None:
    """Two nodes in namespace a (sharing UDP port 5670) and one in b find each other."""
    a, b = lab.namespace(), lab.namespace()
    ea, eb = lab.veth(a, b)
    lab.address(a, ea, "10.79.0.1/24")
    lab.address(b, eb, "10.79.0.2/24")
    lab.address(a, ea, "fd79::1/64")
    lab.address(b, eb, "fd79::2/64")
    nodes = [
        peer(lab, a, "dafka", "a1", "--interface", ea, *mode),
        peer(lab, a, "dafka", "a2", "--interface", ea, *mode),
        peer(lab, b, "dafka", "b1", "--interface", eb, *mode),
    ]
    subnet = "tcp://[fd79::" if "--ipv6" in mode else "tcp://10.79.0."
    for p, me in nodes:
        for _, other in nodes:
            if other != me:
                words = p.expect(lambda w, o=other: w[:2] == ["ENTER", o])
                assert words[3].startswith(subnet)
    for p, _ in nodes:
        assert p.stop() == 0


def test_three_nodes_link_down_and_back_up(lab: Lab) -> None:
    hub = lab.namespace()
    lab.bridge(hub)
    timeouts = ["--timeouts", "1", "2", "4"]
    nodes = []
    ends = []
    for i in (1, 2, 3):
        ns = lab.namespace()
        h, n = lab.plug(hub, ns, f"10.80.0.{i}/24")
        ends.append(h)
        nodes.append(peer(lab, ns, "dafka", f"n{i}", "--interface", n, *timeouts))
    (p1, id1), (p2, id2), (p3, id3) = nodes
    for p, me in nodes:
        for _, other in nodes:
            if other != me:
                p.expect(lambda w, o=other: w[:2] == ["ENTER", o])

    # n3's link goes down: n1 and n2 see it EVASIVE, SILENT, then EXIT; n3 loses both.
    lab.link(hub, ends[2], up=False)
    for p in (p1, p2):
        p.expect(lambda w: w == ["EVASIVE", id3], timeout=10)
        p.expect(lambda w: w == ["SILENT", id3], timeout=10)
        p.expect(lambda w: w == ["EXIT", id3], timeout=10)
    for other in (id1, id2):
        p3.expect(lambda w, o=other: w == ["EXIT", o], timeout=10)
    # n1 and n2 still talk.
    p1.send("JOIN after")
    p2.expect(lambda w: w == ["JOIN", id1, "after"])

    # Back up: everyone ENTERs again, and n3 learns the group n1 joined meanwhile.
    lab.link(hub, ends[2], up=True)
    for p in (p1, p2):
        p.expect(lambda w: w[:2] == ["ENTER", id3], timeout=10)
    for other in (id1, id2):
        p3.expect(lambda w, o=other: w[:2] == ["ENTER", o], timeout=10)
    p3.expect(lambda w: w == ["JOIN", id1, "after"])
    for p, _ in nodes:
        assert p.stop() == 0


def test_dafka_over_zre_across_three_namespaces(lab: Lab, tmp_path: Path) -> None:
    """A store, a producer and a consumer, each in its own namespace, with no tower: they find
    each other through ZRE beacons on their veths and move records end to end."""
    hub = lab.namespace()
    lab.bridge(hub)
    script = str(Path(__file__).with_name("dafka_zre_proc.py"))
    procs = {}
    for i, role in enumerate(["store", "produce", "consume"], start=1):
        ns = lab.namespace()
        _, dev = lab.plug(hub, ns, f"10.81.0.{i}/24")
        towers = f"zre://netns-cluster?interface={dev}&interval=0.2"
        arg = str(tmp_path / "store") if role == "store" else "zt"
        extra = [] if role == "store" else ["500"]
        procs[role] = lab.run(ns, [sys.executable, script, role, towers, arg, *extra])
        if role == "store":
            procs[role].expect(lambda w: w == ["READY"])
    # FLUSHED: the store (another namespace) acknowledged all 500 records.
    procs["produce"].expect(lambda w: w == ["FLUSHED"], timeout=60)
    assert procs["consume"].expect(lambda w: w[0] == "GOT", timeout=60) == [
        "GOT",
        "500",
        "v0",
        "v499",
    ]
    procs["store"].send("")
    for p in procs.values():
        assert p.proc.wait(timeout=20) == 0
