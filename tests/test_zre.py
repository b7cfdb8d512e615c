"""dafka.zre.Node, the Python API of issue 12, between nodes of this process on loopback.

Every node beacons to 127.255.255.255 on a UDP port picked per test (never 5670), so no
beacon leaves the host and parallel runs do not meet.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import Iterator

import pytest
from zre_util import TIMEOUT, expect, free_udp_port

import dafka
from dafka.zre import Event, Node


@pytest.fixture
def port() -> int:
    return free_udp_port()


@pytest.fixture(params=[True, False], ids=["inproc", "tcp"])
def two(port: int, request: pytest.FixtureRequest) -> Iterator[tuple[Node, Node]]:
    """Two nodes of this process: through inproc:// (the default between nodes of one
    process), or over TCP as nodes of two processes would be."""
    local = bool(request.param)
    a = Node(
        "alpha",
        headers={"X-ROLE": "a"},
        interface="lo",
        port=port,
        interval=0.1,
        local_inproc=local,
    )
    b = Node("beta", interface="127.0.0.1", port=port, interval=0.1, local_inproc=local)
    a.set_header("X-NAME", "tcp://127.0.0.1:7000")
    with a, b:
        yield a, b


def test_uuid_and_name_before_start() -> None:
    node = Node()
    assert len(node.uuid) == 32 and int(node.uuid, 16) >= 0 and node.uuid == node.uuid.upper()
    assert node.name == node.uuid[:6]
    assert Node("x").uuid != node.uuid
    node.stop()  # before start: nothing to do


def test_join_before_start_as_pyres_chat_example_does(port: int) -> None:
    # pyre's chat example: Pyre("CHAT"), set_header, join("CHAT"), then start().
    a = Node("a", interface="lo", port=port, interval=0.1)
    a.set_header("CHAT_Header1", "example header1")
    a.join("CHAT")
    a.join("OTHER")
    a.leave("OTHER")
    a.join("CHAT")  # joining twice is joining once
    assert a.own_groups() == ["CHAT"]
    b = Node("b", interface="lo", port=port, interval=0.1)
    b.join("CHAT")
    with a, b:
        assert a.own_groups() == ["CHAT"]
        join = expect(b, lambda e: e.type == "JOIN" and e.peer_uuid == a.uuid)
        assert join.group == "CHAT"
        expect(a, lambda e: e.type == "JOIN" and e.peer_uuid == b.uuid)
        assert b.peers_by_group("CHAT") == [a.uuid]
        a.shout("CHAT", b"hello")
        shout = expect(b, lambda e: e.type == "SHOUT")
        assert (shout.peer_uuid, shout.group, shout.frames) == (a.uuid, "CHAT", [b"hello"])
        assert b.peer_header(a.uuid, "CHAT_Header1") == "example header1"


def test_a_bad_group_joined_before_start_fails_the_start(port: int) -> None:
    node = Node("bad", interface="lo", port=port)
    node.join("g" * 256)
    with pytest.raises(dafka.InvalidArgumentError):
        node.start()
    # Not started: start again after leaving the bad group works.
    node.leave("g" * 256)
    with node:
        assert node.own_groups() == []


@pytest.mark.smoke
def test_discovery_groups_and_messages(two: tuple[Node, Node]) -> None:
    a, b = two
    a.join("G")
    b.join("G")
    enter = expect(b, lambda e: e.type == "ENTER")
    assert (enter.peer_uuid, enter.peer_name) == (a.uuid, "alpha")
    assert enter.headers == {"X-ROLE": "a", "X-NAME": "tcp://127.0.0.1:7000"}
    assert enter.address == a.endpoint and a.endpoint.startswith("tcp://127.0.0.1:")
    join = expect(b, lambda e: e.type == "JOIN")
    assert (join.peer_uuid, join.peer_name, join.group) == (a.uuid, "alpha", "G")
    expect(a, lambda e: e.type == "JOIN" and e.peer_uuid == b.uuid)

    assert b.peers() == [a.uuid]
    assert b.peer_groups() == ["G"]
    assert b.own_groups() == ["G"]
    assert b.peers_by_group("G") == [a.uuid]
    assert b.peers_by_group("nope") == []
    assert b.peer_header(a.uuid, "X-ROLE") == "a"
    assert b.peer_header(a.uuid, "X-MISSING") is None
    assert b.peer_address(a.uuid) == a.endpoint
    assert b.peer_name(a.uuid) == "alpha"

    a.shout("G", b"one", b"two")
    shout = expect(b, lambda e: e.type == "SHOUT")
    assert (shout.peer_uuid, shout.group, shout.frames) == (a.uuid, "G", [b"one", b"two"])
    b.whisper(a.uuid, b"w1", b"", b"w3")
    whisper = expect(a, lambda e: e.type == "WHISPER")
    assert (whisper.peer_uuid, whisper.peer_name, whisper.frames) == (
        b.uuid,
        "beta",
        [b"w1", b"", b"w3"],
    )

    a.leave("G")
    leave = expect(b, lambda e: e.type == "LEAVE")
    assert (leave.peer_uuid, leave.group) == (a.uuid, "G")
    assert a.own_groups() == []
    assert b.peers_by_group("G") == []

    a.stop()
    exit_ = expect(b, lambda e: e.type == "EXIT")
    assert (exit_.peer_uuid, exit_.peer_name) == (a.uuid, "alpha")
    assert b.peers() == []


def test_recv_times_out_and_stop_comes_last(port: int) -> None:
    node = Node("lonely", interface="lo", port=port)
    node.start()
    started = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        node.recv(timeout=0.2)
    assert time.monotonic() - started >= 0.19
    assert isinstance(info.value, dafka.TimeoutError)
    assert isinstance(info.value, builtins.TimeoutError)
    with pytest.raises(TimeoutError):
        node.recv(timeout=0)
    node.stop()
    # Events queued at stop stay readable; STOP is the last one, then the node is closed.
    assert [e.type for e in node] == ["STOP"]
    with pytest.raises(dafka.ClosedError):
        node.recv(timeout=1)
    with pytest.raises(dafka.ClosedError):
        node.join("G")
    node.stop()


def test_iteration_yields_events_until_stop(two: tuple[Node, Node]) -> None:
    a, b = two
    a.join("G")
    types = []
    for event in b:
        types.append(event.type)
        if event.type == "JOIN":
            b.stop()
    assert types[0] == "ENTER" and "JOIN" in types and types[-1] == "STOP"


def test_async_for_and_cancelled_recv_loses_nothing(two: tuple[Node, Node]) -> None:
    a, b = two

    async def scenario() -> list[Event]:
        b.join("G")
        a.join("G")
        got = []
        async for event in b:
            got.append(event)
            if event.type == "JOIN":
                break
        # a shouts to the peers it knows in G: wait until it heard b's JOIN too.
        deadline = time.monotonic() + TIMEOUT
        while a.peers_by_group("G") != [b.uuid] and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        # Receives cancelled while they wait, racing the SHOUTs as they arrive: none may eat
        # one (an event taken for a cancelled receive goes back, in order).
        for i in range(50):
            a.shout("G", str(i).encode())
        while len(got) < 52:
            try:
                got.append(await asyncio.wait_for(b.recv_async(), timeout=0.0002))
            except TimeoutError:
                pass
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(b.recv_async(), timeout=0.05)
        a.shout("G", b"after")
        got.append(await asyncio.wait_for(b.recv_async(), TIMEOUT))
        return got

    got = asyncio.run(scenario())
    assert [e.type for e in got[:2]] == ["ENTER", "JOIN"]
    assert [e.frames for e in got[2:]] == [[str(i).encode()] for i in range(50)] + [[b"after"]]


def test_known_endpoints_without_beacons() -> None:
    # No UDP socket at all: b knows a's mailbox, a learns of b from b's HELLO.
    a = Node("a", interface="127.0.0.1", beacons=False)
    with a:
        b = Node("b", interface="127.0.0.1", beacons=False, known_endpoints=[a.endpoint])
        with b:
            assert expect(a, lambda e: e.type == "ENTER").peer_uuid == b.uuid
            assert expect(b, lambda e: e.type == "ENTER").peer_uuid == a.uuid


def test_gossip_hub_meshes_nodes_without_udp() -> None:
    with Node("hub", interface="127.0.0.1", beacons=False, gossip_hub=True) as hub:
        nodes = [
            Node(f"n{i}", interface="127.0.0.1", beacons=False, known_endpoints=[hub.endpoint])
            for i in range(3)
        ]
        for n in nodes:
            n.start()
        try:
            for n in nodes:
                want = {m.uuid for m in nodes if m is not n} | {hub.uuid}
                seen: set[str] = set()
                while seen != want:
                    seen.add(expect(n, lambda e: e.type == "ENTER").peer_uuid or "")
                assert sorted(n.peers()) == sorted(want)
        finally:
            for n in nodes:
                n.stop()


def test_caller_mistakes(port: int) -> None:
    unknown = r'interface "no-such-if0": .*no interface'
    with pytest.raises(dafka.InvalidArgumentError, match=unknown):
        Node(interface="no-such-if0", port=port).start()
    with pytest.raises(dafka.InvalidArgumentError, match="multicast"):
        Node(interface="lo", port=port, multicast="10.0.0.1").start()
    with Node("m", interface="lo", port=port) as node:
        with pytest.raises(dafka.StateError):
            node.start()
        with pytest.raises(dafka.InvalidArgumentError):
            node.whisper("not-a-uuid", b"x")
        with pytest.raises(dafka.HostUnreachableError):
            node.whisper("0" * 32, b"x")
        with pytest.raises(dafka.InvalidArgumentError):
            node.join("g" * 256)
