"""Helpers the ZRE tests share: a free UDP port for beacons, waiting for an event."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from dafka.zre import Event, Node

TIMEOUT = 10.0


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def expect(node: Node, match: Callable[[Event], bool], timeout: float = TIMEOUT) -> Event:
    deadline = time.monotonic() + timeout
    seen = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            event = node.recv(timeout=left)
        except TimeoutError:
            break
        if match(event):
            return event
        seen.append(event)
    raise AssertionError(f"{node.name}: no matching event; saw {seen}")
