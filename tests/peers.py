"""One interface over our sockets and libzmq's (through pyzmq), so the interop
tests can run every pairing in both directions with the same code."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import zmq

import dafka.zmtp

Frames = Sequence[bytes]


class Peer(Protocol):
    impl: str

    def bind(self, endpoint: str) -> str: ...
    def connect(self, endpoint: str) -> None: ...
    def send(self, frames: Frames) -> None: ...
    def recv(self, timeout: float = 5.0) -> list[bytes]: ...
    def subscribe(self, prefix: bytes) -> None: ...
    def unsubscribe(self, prefix: bytes) -> None: ...
    def close(self) -> None: ...
    def pump(self) -> None: ...


class Ours:
    impl = "dafka"

    def __init__(self, socket_type: str, **options: Any) -> None:
        options.setdefault("linger", 0.0)
        self.sock = dafka.zmtp.Socket(socket_type, **options)

    def bind(self, endpoint: str) -> str:
        return self.sock.bind(endpoint)

    def connect(self, endpoint: str) -> None:
        self.sock.connect(endpoint)

    def send(self, frames: Frames) -> None:
        self.sock.send(list(frames), timeout=5.0)

    def recv(self, timeout: float = 5.0) -> list[bytes]:
        return self.sock.recv_multipart(timeout=timeout)

    def subscribe(self, prefix: bytes) -> None:
        self.sock.subscribe(prefix)

    def unsubscribe(self, prefix: bytes) -> None:
        self.sock.unsubscribe(prefix)

    def close(self) -> None:
        self.sock.close()

    def pump(self) -> None:
        """Our sockets make progress on their own threads."""


_ZMQ_OPTIONS = {
    "routing_id": zmq.ROUTING_ID,
    "router_mandatory": zmq.ROUTER_MANDATORY,
    "heartbeat_ivl": zmq.HEARTBEAT_IVL,
    "heartbeat_timeout": zmq.HEARTBEAT_TIMEOUT,
    "heartbeat_ttl": zmq.HEARTBEAT_TTL,
    "sndhwm": zmq.SNDHWM,
    "rcvhwm": zmq.RCVHWM,
}


class Theirs:
    """libzmq, through pyzmq (whose wheel bundles libzmq)."""

    impl = "libzmq"

    def __init__(self, socket_type: str, **options: Any) -> None:
        self.sock = zmq.Context.instance().socket(getattr(zmq, socket_type))
        self.sock.linger = 0
        for name, value in options.items():
            if name.startswith("heartbeat"):
                value = int(value * 1000)  # libzmq takes milliseconds
            self.sock.setsockopt(_ZMQ_OPTIONS[name], value)

    def bind(self, endpoint: str) -> str:
        self.sock.bind(endpoint)
        last: str = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        return last

    def connect(self, endpoint: str) -> None:
        self.sock.connect(endpoint)

    def send(self, frames: Frames) -> None:
        self.sock.send_multipart(list(frames))

    def recv(self, timeout: float = 5.0) -> list[bytes]:
        if not self.sock.poll(int(timeout * 1000), zmq.POLLIN):
            raise TimeoutError(f"libzmq {self.sock.type} received nothing in {timeout}s")
        frames: list[bytes] = self.sock.recv_multipart()
        return frames

    def subscribe(self, prefix: bytes) -> None:
        self.sock.setsockopt(zmq.SUBSCRIBE, prefix)

    def unsubscribe(self, prefix: bytes) -> None:
        self.sock.setsockopt(zmq.UNSUBSCRIBE, prefix)

    def close(self) -> None:
        self.sock.close(linger=0)

    def pump(self) -> None:
        """libzmq only attaches new connections (and sends the subscriptions
        it holds to them) when the application calls into the socket."""
        self.sock.getsockopt(zmq.EVENTS)


IMPLS: dict[str, Callable[..., Peer]] = {"dafka": Ours, "libzmq": Theirs}


def recv_pumping(receiver: Peer, other: Peer, timeout: float = 5.0) -> list[bytes]:
    """Receive on `receiver` while letting an idle libzmq `other` do its work."""
    deadline = time.monotonic() + timeout
    while True:
        other.pump()
        try:
            return receiver.recv(timeout=0.02)
        except TimeoutError:
            if time.monotonic() > deadline:
                raise


def until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
