"""Free loopback ports for tests and benchmarks, chosen below the kernel's ephemeral range.

Asking the kernel for port 0 returns a port from the ephemeral range
(`/proc/sys/net/ipv4/ip_local_port_range`, 32768-60999 by default), and that port
is free only until the next outgoing connection on the machine picks it as its
source port. A fresh-clone CI run lost that race once: between the test choosing
a port and `dafka tower` binding it, something else took it, the tower exited
with "address in use" and every node after it waited 5 s for a tower that never
came. A connection to a port that nobody listens on yet can even take it
itself (a TCP self-connect, source port = destination port).

A port below the ephemeral range is never handed out as a source port, so once
it is found free it stays free unless a program binds it on purpose. Ports are
tried at random so that concurrent test runs rarely try the same one.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_LOWEST = 10000  # above the well-known and most registered service ports


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; macOS starts at 49152


def _free(kind: socket.SocketKind, host: str) -> int:
    top = _ephemeral_start()
    if top <= _LOWEST + 100:
        raise RuntimeError(f"the ephemeral port range starts at {top}: no room below it")
    for _ in range(200):
        port = random.randrange(_LOWEST, top)
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((host, port))  # no SO_REUSEADDR: any other user of the port fails this
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port found in {_LOWEST}..{top - 1} after 200 tries")


def free_tcp_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host`, outside the ephemeral range."""
    return _free(socket.SOCK_STREAM, host)


def free_udp_port(host: str = "127.0.0.1") -> int:
    """A UDP port free on `host`, outside the ephemeral range."""
    return _free(socket.SOCK_DGRAM, host)
