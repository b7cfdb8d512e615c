"""Interop with the real libzmq (bundled in pyzmq's wheel): every socket pairing,
with our socket on either side, binding or connecting, over tcp loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

import dafka

from peers import IMPLS, Ours, Peer, Theirs, recv_pumping

PAIRS = [
    ("REQ", "REP"),
    ("REQ", "ROUTER"),
    ("DEALER", "REP"),
    ("DEALER", "ROUTER"),
    ("ROUTER", "ROUTER"),
    ("PUB", "SUB"),
    ("XPUB", "XSUB"),
    ("PUB", "XSUB"),
    ("XPUB", "SUB"),
    ("PUSH", "PULL"),
    ("PAIR", "PAIR"),
]

BIG = bytes(range(256)) * (300 * 1024 // 256)  # a 300 KiB frame


def exchange_req_rep(a: Peer, b: Peer) -> None:
    for i in range(3):  # lock-step, several rounds
        a.send([b"hello", b"", str(i).encode()])
        assert b.recv() == [b"hello", b"", str(i).encode()]
        b.send([b"world", str(i).encode()])
        assert a.recv() == [b"world", str(i).encode()]


def exchange_req_router(a: Peer, b: Peer) -> None:
    a.send([b"q1", b"q2"])
    ident, delimiter, *body = b.recv()
    assert delimiter == b"" and body == [b"q1", b"q2"] and ident
    b.send([ident, b"", b"reply"])
    assert a.recv() == [b"reply"]


def exchange_dealer_rep(a: Peer, b: Peer) -> None:
    a.send([b"", b"question"])
    assert b.recv() == [b"question"]
    b.send([b"answer"])
    assert a.recv() == [b"", b"answer"]


def exchange_dealer_router(a: Peer, b: Peer) -> None:
    a.send([b"q", b""])
    assert b.recv() == [b"dealer-1", b"q", b""]
    b.send([b"dealer-1", b"r", BIG])
    assert a.recv() == [b"r", BIG]


def exchange_router_router(a: Peer, b: Peer, binder: Peer, connector: Peer) -> None:
    # The connecting ROUTER knows the binder's routing id; with router_mandatory
    # its send fails until the handshake has told it that id.
    deadline = time.monotonic() + 5
    while True:
        try:
            connector.send([b"binder", b"hi"])
            break
        except (zmq.ZMQError, dafka.HostUnreachableError) as e:
            if time.monotonic() > deadline:
                raise AssertionError("binder never became routable") from e
            time.sleep(0.02)
    peer_id, body = binder.recv()
    assert body == b"hi"
    binder.send([peer_id, b"ho"])
    assert connector.recv() == [b"binder", b"ho"]


def _publish_until_received(pub: Peer, sub: Peer, topic: bytes) -> list[bytes]:
    """PUB drops until the subscription arrives (slow joiner): keep publishing."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pub.send([b"other", b"x"])
        pub.send([topic, b"payload"])
        try:
            return sub.recv(timeout=0.05)
        except TimeoutError:
            continue
    raise AssertionError(f"subscriber never received {topic!r}")


def _drain(sub: Peer, seconds: float = 0.2) -> list[list[bytes]]:
    got = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            got.append(sub.recv(timeout=0.02))
        except TimeoutError:
            pass
    return got


def exchange_pub_sub(a: Peer, b: Peer) -> None:
    b.subscribe(b"news")
    assert _publish_until_received(a, b, b"news") == [b"news", b"payload"]
    for _ in range(5):
        a.send([b"other", b"x"])
        a.send([b"news", b"more"])
    assert all(m[0] == b"news" for m in _drain(b)), "a topic nobody subscribed to was delivered"
    # Cancel and resubscribe: commands are ordered on the connection, so once
    # "sport" arrives the cancel of "news" has been applied.
    b.unsubscribe(b"news")
    b.subscribe(b"sport")
    assert _publish_until_received(a, b, b"sport")[0] == b"sport"
    for _ in range(5):
        a.send([b"news", b"stale"])
        a.send([b"sport", b"fresh"])
    assert all(m[0] == b"sport" for m in _drain(b)), "cancel was not applied"


def exchange_xpub_xsub(a: Peer, b: Peer) -> None:
    b.send([b"\x01topic"])
    assert recv_pumping(a, b) == [b"\x01topic"]
    a.send([b"topic-1", b"x"])
    a.send([b"elsewhere"])
    assert b.recv() == [b"topic-1", b"x"]
    b.send([b"\x00topic"])
    assert recv_pumping(a, b) == [b"\x00topic"]


def exchange_pub_xsub(a: Peer, b: Peer) -> None:
    # XSUB passes every message through: only the publisher's filtering keeps
    # other topics away.
    b.send([b"\x01t"])
    assert _publish_until_received(a, b, b"t") == [b"t", b"payload"]
    assert all(m[0] == b"t" for m in _drain(b)), "the publisher did not filter"
    # Cancel, then subscribe to another topic: once that one arrives, the
    # cancel (sent before it on the same connection) has been applied.
    b.send([b"\x00t"])
    b.send([b"\x01u"])
    got = _publish_until_received(a, b, b"u")
    while got[0] == b"t":
        got = b.recv(timeout=5)
    assert got == [b"u", b"payload"]
    for _ in range(5):
        a.send([b"t", b"stale"])
        a.send([b"u", b"fresh"])
    assert all(m[0] == b"u" for m in _drain(b)), "the publisher ignored the cancel"


def exchange_xpub_sub(a: Peer, b: Peer) -> None:
    b.subscribe(b"t")
    assert recv_pumping(a, b) == [b"\x01t"]
    a.send([b"t1"])
    a.send([b"u1"])
    assert b.recv() == [b"t1"]
    b.unsubscribe(b"t")
    assert recv_pumping(a, b) == [b"\x00t"]


def exchange_push_pull(a: Peer, b: Peer) -> None:
    messages = [[b"one"], [b"a", b"", b"c"], [b""], [BIG], [b"x" * 255, b"y" * 256]]
    messages += [[str(i).encode()] for i in range(200)]
    for m in messages:
        a.send(m)
    for m in messages:
        assert b.recv() == m


def exchange_pair(a: Peer, b: Peer) -> None:
    a.send([b"x", b"y"])
    assert b.recv() == [b"x", b"y"]
    b.send([b"z", BIG])
    assert a.recv() == [b"z", BIG]


EXCHANGES: dict[tuple[str, str], Callable[[Peer, Peer], None]] = {
    ("REQ", "REP"): exchange_req_rep,
    ("REQ", "ROUTER"): exchange_req_router,
    ("DEALER", "REP"): exchange_dealer_rep,
    ("DEALER", "ROUTER"): exchange_dealer_router,
    ("PUB", "SUB"): exchange_pub_sub,
    ("XPUB", "XSUB"): exchange_xpub_xsub,
    ("PUB", "XSUB"): exchange_pub_xsub,
    ("XPUB", "SUB"): exchange_xpub_sub,
    ("PUSH", "PULL"): exchange_push_pull,
    ("PAIR", "PAIR"): exchange_pair,
}


def _options(pair: tuple[str, str], side: int, binds: bool) -> dict[str, Any]:
    if pair == ("DEALER", "ROUTER") and side == 0:
        return {"routing_id": b"dealer-1"}
    if pair == ("ROUTER", "ROUTER"):
        return {"routing_id": b"binder"} if binds else {"router_mandatory": True}
    return {}


CASES = [
    pytest.param(
        pair,
        impls,
        binder,
        id=f"{pair[0]}({impls[0]})-{pair[1]}({impls[1]})-bind{binder}",
        marks=[pytest.mark.smoke] if pair == ("PUSH", "PULL") else [],
    )
    for pair in PAIRS
    for impls in (("dafka", "libzmq"), ("libzmq", "dafka"))
    for binder in (0, 1)
]


@pytest.fixture
def closing() -> Iterator[list[Peer]]:
    peers: list[Peer] = []
    yield peers
    for p in peers:
        p.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("pair", "impls", "binder"), CASES)
def test_pairing_with_libzmq(
    pair: tuple[str, str], impls: tuple[str, str], binder: int, closing: list[Peer]
) -> None:
    sockets = [IMPLS[impls[i]](pair[i], **_options(pair, i, binds=(i == binder))) for i in (0, 1)]
    closing.extend(sockets)
    endpoint = sockets[binder].bind("tcp://127.0.0.1:0")
    sockets[1 - binder].connect(endpoint)
    a, b = sockets
    if pair == ("ROUTER", "ROUTER"):
        exchange_router_router(a, b, sockets[binder], sockets[1 - binder])
    else:
        EXCHANGES[pair](a, b)


def _watch_disconnects(sock: zmq.Socket[bytes]) -> tuple[threading.Event, Callable[[], None]]:
    """Set an event when libzmq reports the connection dropped."""
    from zmq.utils.monitor import recv_monitor_message

    monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    dropped = threading.Event()
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            if monitor.poll(50):
                if recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED:
                    dropped.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def finish() -> None:
        stop.set()
        thread.join()
        sock.disable_monitor()
        monitor.close(linger=0)

    return dropped, finish


HEARTBEAT = {"heartbeat_ivl": 0.1, "heartbeat_timeout": 0.3}


class _Relay:
    """A TCP relay on loopback between one client and `target`, counting the
    bytes it forwards in each direction (so a test can see traffic that
    neither application sees, such as PING and PONG)."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("tcp://").rsplit(":", 1)
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"tcp://127.0.0.1:{self._listener.getsockname()[1]}"
        self.up = 0  # client -> target
        self.down = 0  # target -> client
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.up, self.down

    def _accept(self) -> None:
        client, _ = self._listener.accept()
        server = socket.create_connection(self._target)
        self._socks += [client, server]
        threading.Thread(target=self._pump, args=(client, server, "up"), daemon=True).start()
        self._pump(server, client, "down")

    def _pump(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                with self._lock:
                    setattr(self, direction, getattr(self, direction) + len(data))
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        for s in self._socks:
            s.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("pinger", "why"),
    [
        ("libzmq", "libzmq PINGs us and drops the connection unless we PONG"),
        ("dafka", "we PING libzmq with a 300 ms timeout; it answers, so we keep the link"),
    ],
)
def test_heartbeats_with_libzmq(pinger: str, why: str, closing: list[Peer]) -> None:
    """Heartbeats every 100 ms with a 300 ms timeout, on one side or the other:
    over 1.5 s the connection must never drop."""
    theirs = Theirs("PULL", **(HEARTBEAT if pinger == "libzmq" else {}))
    ours = Ours("PUSH", **({**HEARTBEAT, "heartbeat_ttl": 1.0} if pinger == "dafka" else {}))
    closing.extend([theirs, ours])
    dropped, finish = _watch_disconnects(theirs.sock)
    # Through a counting relay: while the applications are idle, only PINGs
    # (from the pinger) and PONGs (from the other side) cross it.
    relay = _Relay(theirs.bind("tcp://127.0.0.1:0"))
    ours.connect(relay.endpoint)
    ours.send([b"before"])
    assert theirs.recv() == [b"before"]
    time.sleep(0.2)
    idle_from = relay.counts()
    time.sleep(1.5)
    up, down = (now - then for now, then in zip(relay.counts(), idle_from, strict=True))
    ours.send([b"after"])
    assert theirs.recv() == [b"after"]
    finish()
    relay.close()
    assert not dropped.is_set(), f"the connection dropped: {why}"
    # A PING or PONG command frame is at least 7 bytes; about 15 of each in 1.5 s.
    pings, pongs = (up, down) if pinger == "dafka" else (down, up)
    assert pings >= 7 * 5, f"{pinger} sent {pings} bytes of PINGs while idle"
    assert pongs >= 7 * 5, f"the other side sent {pongs} bytes of PONGs while idle"


@pytest.mark.timeout(60)
def test_reconnect_after_libzmq_restarts(closing: list[Peer]) -> None:
    """The libzmq side goes away and comes back on the same port: what we
    queued meanwhile is delivered, in order, once it is back."""
    first = Theirs("PULL")
    endpoint = first.bind("tcp://127.0.0.1:0")
    ours = Ours("PUSH", reconnect_ivl=0.05)
    closing.append(ours)
    ours.connect(endpoint)
    for i in range(5):
        ours.send([b"first", str(i).encode()])
    for i in range(5):
        assert first.recv() == [b"first", str(i).encode()]
    first.close()
    time.sleep(0.5)  # let our side see the connection drop
    for i in range(5):
        ours.send([b"queued", str(i).encode()])
    second = Theirs("PULL")
    closing.append(second)
    second.bind(endpoint)
    for i in range(5):
        assert second.recv() == [b"queued", str(i).encode()]
    ours.send([b"live"])
    assert second.recv() == [b"live"]


@pytest.mark.timeout(60)
def test_ipc_with_libzmq(tmp_path: Any, closing: list[Peer]) -> None:
    theirs = Theirs("PULL")
    ours = Ours("PUSH")
    closing.extend([theirs, ours])
    endpoint = theirs.bind(f"ipc://{tmp_path}/sock")
    ours.connect(endpoint)
    ours.send([b"over", b"ipc"])
    assert theirs.recv() == [b"over", b"ipc"]


def test_every_pairing_is_covered() -> None:
    assert {p for p in PAIRS if p != ("ROUTER", "ROUTER")} == set(EXCHANGES)
    assert len(CASES) == 4 * len(PAIRS)
