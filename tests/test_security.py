"""PLAIN and CURVE against the real libzmq (pyzmq's wheel is built with CURVE), each side as
server, over tcp loopback; heartbeats inside CURVE; and the refusals: a wrong server key, a
key not on the allow-list, a wrong password, a NULL client to a CURVE server, each refused
while the server keeps serving the others."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import zmq
import zmq.auth
from test_zmtp_interop import EXCHANGES
from zmq.auth.thread import ThreadAuthenticator

import dafka
import dafka.zmtp

from peers import Ours, Peer, Theirs

SERVER_PUBLIC, SERVER_SECRET = dafka.zmtp.curve_keypair()
CLIENT_PUBLIC, CLIENT_SECRET = dafka.zmtp.curve_keypair()

PAIRS = [("REQ", "REP"), ("DEALER", "ROUTER"), ("PUB", "SUB"), ("PUSH", "PULL")]


def server_options(mechanism: str) -> dict[str, Any]:
    if mechanism == "CURVE":
        return {"curve_server": True, "curve_secretkey": SERVER_SECRET}
    return {"plain_server": True}


def client_options(mechanism: str) -> dict[str, Any]:
    if mechanism == "CURVE":
        return {
            "curve_serverkey": SERVER_PUBLIC,
            "curve_publickey": CLIENT_PUBLIC,
            "curve_secretkey": CLIENT_SECRET,
        }
    return {"plain_username": "admin", "plain_password": "secret"}


@pytest.fixture(scope="module")
def zap() -> Iterator[ThreadAuthenticator]:
    """libzmq's ZAP handler (pyzmq's): libzmq refuses every PLAIN client without one. One per
    module: libzmq unbinds its inproc endpoint asynchronously, a second one could not bind."""
    auth = ThreadAuthenticator(zmq.Context.instance())
    auth.start()
    auth.configure_plain(domain="*", passwords={"admin": "secret"})
    auth.configure_curve(domain="*", location=zmq.auth.CURVE_ALLOW_ANY)
    try:
        yield auth
    finally:
        auth.stop()


def set_zmq_options(peer: Theirs, options: dict[str, Any]) -> None:
    """Security options on a libzmq socket, by libzmq's names (keys as Z85 bytes)."""
    for name, value in options.items():
        encoded = value.encode() if isinstance(value, str) else value
        peer.sock.setsockopt(getattr(zmq, name.upper()), encoded)


def make(impl: str, socket_type: str, options: dict[str, Any], server: bool) -> Peer:
    if impl == "dafka":
        if server and options.get("plain_server"):
            options = {**options, "authenticator": {"admin": "secret"}}
        return Ours(socket_type, **options)
    sock = Theirs(socket_type)
    set_zmq_options(sock, options)
    return sock


@pytest.mark.parametrize("mechanism", ["CURVE", "PLAIN"])
@pytest.mark.parametrize("server_impl", ["dafka", "libzmq"])
@pytest.mark.parametrize(
    "pair",
    [
        pytest.param(p, id=f"{p[0]}-{p[1]}", marks=[pytest.mark.smoke] if p[0] == "PUSH" else [])
        for p in PAIRS
    ],
)
def test_interop(
    mechanism: str, server_impl: str, pair: tuple[str, str], zap: ThreadAuthenticator
) -> None:
    client_impl = "libzmq" if server_impl == "dafka" else "dafka"
    a_opts = client_options(mechanism)
    if pair == ("DEALER", "ROUTER"):
        a_opts["routing_id"] = b"dealer-1"
    a = make(client_impl, pair[0], a_opts, server=False)
    b = make(server_impl, pair[1], server_options(mechanism), server=True)
    try:
        a.connect(b.bind("tcp://127.0.0.1:*" if server_impl == "libzmq" else "tcp://127.0.0.1:0"))
        EXCHANGES[pair](a, b)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("server_impl", ["dafka", "libzmq"])
def test_heartbeats_inside_curve(server_impl: str) -> None:
    """PINGs and PONGs travel boxed: with a 0.3 s heartbeat timeout on both sides, an idle
    connection survives 1.5 s only if each side opens the other's boxed PONGs."""
    hb = {"heartbeat_ivl": 0.1, "heartbeat_timeout": 0.3}
    ours = Ours(
        "DEALER" if server_impl == "libzmq" else "ROUTER",
        **hb,
        **(client_options("CURVE") if server_impl == "libzmq" else server_options("CURVE")),
    )
    theirs = Theirs("ROUTER" if server_impl == "libzmq" else "DEALER", **hb)
    set_zmq_options(
        theirs, server_options("CURVE") if server_impl == "libzmq" else client_options("CURVE")
    )
    monitor = ours.sock.monitor()
    try:
        if server_impl == "libzmq":
            ours.connect(theirs.bind("tcp://127.0.0.1:*"))
            client, server = ours, theirs
        else:
            theirs.connect(ours.bind("tcp://127.0.0.1:0"))
            client, server = theirs, ours
        client.send([b"before"])
        ident, body = server.recv()
        assert body == b"before"
        time.sleep(1.5)
        client.send([b"after"])
        assert server.recv() == [ident, b"after"]
        events = []
        while True:
            try:
                events.append(monitor.recv(dafka.zmtp.NOBLOCK)["event"])
            except dafka.WouldBlockError:
                break
        assert "handshake_succeeded" in events
        assert "disconnected" not in events, events
    finally:
        ours.close()
        theirs.close()


def libzmq_req(endpoint: str, wait: float = 5.0, **options: Any) -> list[bytes] | None:
    """A libzmq REQ asks once; None when no answer came within `wait` seconds."""
    s = Theirs("REQ")
    set_zmq_options(s, options)
    try:
        s.connect(endpoint)
        s.send([b"ping"])
        return s.recv(timeout=wait)
    except TimeoutError:
        return None
    finally:
        s.close()


@contextlib.contextmanager
def echo_server(**options: Any) -> Iterator[str]:
    """Our REP, bound on loopback, answering every request with itself on a thread."""
    rep = Ours("REP", **options)
    endpoint = rep.bind("tcp://127.0.0.1:0")
    stop = threading.Event()

    def echo() -> None:
        while not stop.is_set():
            try:
                rep.send(rep.recv(timeout=0.05))
            except dafka.TimeoutError:
                pass

    t = threading.Thread(target=echo)
    t.start()
    try:
        yield endpoint
    finally:
        stop.set()
        t.join()
        rep.close()


@pytest.mark.parametrize("form", ["list", "callable"])
def test_curve_refusals_and_server_keeps_serving(form: str) -> None:
    seen: list[tuple[str, str, Any]] = []

    def decide(address: str, mechanism: str, credentials: Any) -> bool | str:
        seen.append((address, mechanism, credentials))
        return True if credentials == CLIENT_PUBLIC else "not on the list"

    authenticator: Any = [CLIENT_PUBLIC] if form == "list" else decide
    with echo_server(authenticator=authenticator, **server_options("CURVE")) as endpoint:
        assert libzmq_req(endpoint, **client_options("CURVE")) == [b"ping"]
        # A key not on the list.
        other_public, other_secret = dafka.zmtp.curve_keypair()
        stranger = {
            **client_options("CURVE"),
            "curve_publickey": other_public,
            "curve_secretkey": other_secret,
        }
        assert libzmq_req(endpoint, wait=0.5, **stranger) is None
        # The wrong server key: the HELLO box does not open.
        wrong_server = {**client_options("CURVE"), "curve_serverkey": other_public}
        assert libzmq_req(endpoint, wait=0.5, **wrong_server) is None
        # A NULL client.
        assert libzmq_req(endpoint, wait=0.5) is None
        # Still serving the others.
        assert libzmq_req(endpoint, **client_options("CURVE")) == [b"ping"]
        if form == "callable":
            assert [c for _, _, c in seen] == [CLIENT_PUBLIC, other_public, CLIENT_PUBLIC]
            assert all(m == "CURVE" and a.startswith("127.0.0.1:") for a, m, _ in seen)


def test_plain_wrong_password_refused_and_server_keeps_serving() -> None:
    with echo_server(plain_server=True, authenticator={"admin": "secret"}) as endpoint:
        wrong = {"plain_username": "admin", "plain_password": "guess"}
        assert libzmq_req(endpoint, wait=0.5, **wrong) is None
        assert libzmq_req(endpoint, **client_options("PLAIN")) == [b"ping"]


def test_our_client_refused_by_our_server_sees_handshake_failed() -> None:
    with (
        dafka.zmtp.Socket("PULL", authenticator=[], linger=0, **server_options("CURVE")) as pull,
        dafka.zmtp.Socket("PUSH", linger=0, **client_options("CURVE")) as push,
    ):
        monitor = push.monitor()
        push.connect(pull.bind("tcp://127.0.0.1:0"))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            e = monitor.recv(timeout=5)
            if e["event"] == "handshake_failed":
                assert "400" in e["reason"]
                break
        else:
            raise AssertionError("no handshake_failed event")


def test_option_errors_name_the_option() -> None:
    with pytest.raises(dafka.InvalidArgumentError, match="curve_secretkey"):
        dafka.zmtp.Socket("REP", curve_server=True)
    with pytest.raises(dafka.InvalidArgumentError, match="curve_serverkey"):
        dafka.zmtp.Socket("REQ", curve_publickey=CLIENT_PUBLIC, curve_secretkey=CLIENT_SECRET)
    with pytest.raises(dafka.InvalidArgumentError, match="curve_publickey"):
        dafka.zmtp.Socket(
            "REQ",
            curve_serverkey=SERVER_PUBLIC,
            curve_publickey=SERVER_PUBLIC,
            curve_secretkey=CLIENT_SECRET,
        )
    with pytest.raises(dafka.InvalidArgumentError, match="Z85"):
        dafka.zmtp.Socket("REP", curve_server=True, curve_secretkey="too short")
    with pytest.raises(dafka.InvalidArgumentError, match="authenticator"):
        dafka.zmtp.Socket("REP", plain_server=True)
    with pytest.raises(dafka.InvalidArgumentError, match="combined"):
        dafka.zmtp.Socket("REP", plain_server=True, curve_server=True, authenticator={})
    # A low-order point (here all zeros) shares an all-zero secret with anyone: refused, as
    # libsodium and libzmq refuse it.
    with pytest.raises(dafka.InvalidArgumentError, match="low-order"):
        dafka.zmtp.Socket(
            "REQ",
            curve_serverkey=bytes(32),
            curve_publickey=CLIENT_PUBLIC,
            curve_secretkey=CLIENT_SECRET,
        )


def test_setsockopt_in_libzmq_order_and_getsockopt() -> None:
    s = dafka.zmtp.Socket("REP")
    assert s.getsockopt(dafka.zmtp.MECHANISM) == dafka.zmtp.NULL
    s.setsockopt(dafka.zmtp.CURVE_SERVER, 1)
    assert s.getsockopt(dafka.zmtp.CURVE_SERVER) == 1
    assert s.getsockopt(dafka.zmtp.MECHANISM) == dafka.zmtp.CURVE
    with pytest.raises(dafka.InvalidArgumentError, match="curve_secretkey"):
        s.bind("tcp://127.0.0.1:0")
    s.setsockopt(dafka.zmtp.CURVE_SECRETKEY, SERVER_SECRET.encode())
    assert s.getsockopt(dafka.zmtp.MECHANISM) == dafka.zmtp.CURVE
    s.bind("tcp://127.0.0.1:0")
    s.close()
    assert dafka.zmtp.curve_public(SERVER_SECRET) == SERVER_PUBLIC
    assert dafka.zmtp.curve_public(zmq.utils.z85.decode(SERVER_SECRET)) == SERVER_PUBLIC
    assert zmq.curve_public(SERVER_SECRET.encode()).decode() == SERVER_PUBLIC


# One I/O worker (DAFKA_IO_THREADS is read once per process, hence the child): a callable
# authenticator sleeping 4 s must not stall another connection's traffic meanwhile.
SLOW_AUTHENTICATOR = """
import threading, time
import dafka.zmtp

server_public, server_secret = dafka.zmtp.curve_keypair()
client_public, client_secret = dafka.zmtp.curve_keypair()
entered = threading.Event()

def slow(address, mechanism, credentials):
    entered.set()
    time.sleep(4.0)
    return True

with (
    dafka.zmtp.Socket("PULL", curve_server=True, curve_secretkey=server_secret,
                      authenticator=slow, linger=0) as guarded,
    dafka.zmtp.Socket("PUSH", curve_serverkey=server_public, curve_publickey=client_public,
                      curve_secretkey=client_secret, linger=0) as knocking,
    dafka.zmtp.Socket("PULL", linger=0) as pull,
    dafka.zmtp.Socket("PUSH", linger=0) as push,
):
    push.connect(pull.bind("tcp://127.0.0.1:0"))
    push.send(b"before")
    assert pull.recv(timeout=5) == b"before"
    knocking.connect(guarded.bind("tcp://127.0.0.1:0"))
    assert entered.wait(5), "the authenticator was not called"
    start = time.monotonic()
    push.send(b"during")
    assert pull.recv(timeout=10) == b"during"
    print(time.monotonic() - start)
"""


def test_slow_callable_authenticator_does_not_stall_other_connections() -> None:
    env = {**os.environ, "DAFKA_IO_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", SLOW_AUTHENTICATOR],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    elapsed = float(out.stdout.split()[-1])
    # Stalled, the message would wait for the rest of the 4 s sleep.
    assert elapsed < 2.0, f"traffic waited {elapsed:.2f} s for the authenticator"
