"""ZeroMQ sockets (ZMTP 3.1) implemented in Rust.

>>> import dafka.zmtp
>>> with dafka.zmtp.Socket("PULL") as pull, dafka.zmtp.Socket("PUSH") as push:
...     endpoint = pull.bind("tcp://127.0.0.1:0")
...     push.connect(endpoint)
...     push.send([b"hello", b"world"])
...     pull.recv(timeout=5.0)
[b'hello', b'world']

Socket types: ``REQ``, ``REP``, ``DEALER``, ``ROUTER``, ``PUB``, ``SUB``,
``XPUB``, ``XSUB``, ``PUSH``, ``PULL``, ``PAIR``. Endpoints: ``tcp://host:port``
(``*`` binds every interface, port ``0`` picks a free port, which ``bind``
returns), ``ipc:///path/to/socket`` and ``inproc://name``.

Options are keyword arguments named as in libzmq, durations in seconds:
``sndhwm``, ``rcvhwm`` (messages; 0 = unlimited), ``linger`` (``None`` = until
sent), ``heartbeat_ivl``, ``heartbeat_ttl``, ``heartbeat_timeout``,
``reconnect_ivl``, ``reconnect_ivl_max``, ``connect_timeout``,
``handshake_timeout``, ``routing_id`` (bytes), ``router_mandatory``,
``router_handover``, ``immediate``, ``xpub_verbose``, ``xpub_welcome_msg``
(bytes), ``maxmsgsize`` (as libzmq's ``ZMQ_MAXMSGSIZE``: the largest frame, in bytes,
accepted from a peer or sent), ``max_frame_size`` (bytes), ``max_subscriptions`` and
``max_subscription_size`` (what one peer may subscribe to a PUB/XPUB),
``max_connections`` (accepted per bound endpoint; 0 = unlimited for these
three) and ``properties`` (extra READY metadata, ``{"X-Name": b"value"}``).
Invalid option values are reported by the first ``bind`` or ``connect``.
"""

from __future__ import annotations

from dafka._native import Socket

SOCKET_TYPES: tuple[str, ...] = (
    "REQ",
    "REP",
    "DEALER",
    "ROUTER",
    "PUB",
    "SUB",
    "XPUB",
    "XSUB",
    "PUSH",
    "PULL",
    "PAIR",
)

__all__ = ["SOCKET_TYPES", "Socket"]
