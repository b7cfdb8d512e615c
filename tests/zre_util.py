"""Helpers the ZRE tests share: a free UDP port for beacons (from `ports`), waiting for an event."""

from __future__ import annotations

import time
from collections.abc import Callable

from ports import free_udp_port

from dafka.zre import Event, Node

__all__ = ["TIMEOUT", "expect", "free_udp_port"]

TIMEOUT = 10.0


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
