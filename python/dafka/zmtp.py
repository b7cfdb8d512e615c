"""ZeroMQ sockets (ZMTP 3.1) implemented in Rust.

>>> import dafka.zmtp
>>> with dafka.zmtp.Socket("PULL") as pull, dafka.zmtp.Socket("PUSH") as push:
...     endpoint = pull.bind("tcp://127.0.0.1:0")
...     push.connect(endpoint)
...     push.send([b"hello", b"world"])
...     pull.recv_multipart(timeout=5.0)
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
They can also be set with ``setsockopt(dafka.zmtp.SNDHWM, 1000)`` before the
socket's first bind, connect, send or receive, in libzmq's units (milliseconds).
A bad value raises :class:`dafka.InvalidArgumentError` naming the option, at
construction or in ``setsockopt``.

Security (``docs/security.md``), as libzmq names it: CURVE with
``curve_server=True`` and ``curve_secretkey`` on the server, ``curve_serverkey``,
``curve_publickey`` and ``curve_secretkey`` on clients (keys as 40-character Z85
from :func:`curve_keypair`, or 32 raw bytes); PLAIN with ``plain_server=True`` or
``plain_username``/``plain_password``. A server's ``authenticator`` decides on each
client (what a ZAP handler does for libzmq): a list or set of allowed CURVE public
keys, a dict of PLAIN ``username: password``, or a callable
``(address, mechanism, credentials)`` returning ``True`` to let the client in and
``False`` or a reason ``str`` to refuse it (``credentials`` is the Z85 public key for
CURVE, ``(username, password)`` bytes for PLAIN). A refused client gets ERROR
``400`` and is closed; the decision is logged. A CURVE server without
authenticator lets in every client that knows its public key. The callable must be
fast: it runs during the handshake on a dafka I/O thread holding the GIL, so while
it runs that handshake, other authentications and every Python thread wait (other
connections' traffic goes on); refresh a slow source elsewhere and look it up here.

>>> public, secret = dafka.zmtp.curve_keypair()
>>> len(public), dafka.zmtp.curve_public(secret) == public
(40, True)

The API follows pyzmq: ``send(data, flags=0, copy=True)``,
``send_multipart(frames)``, ``recv(flags=0, copy=True) -> bytes`` (one frame),
``recv_multipart() -> list``, ``NOBLOCK`` raising :class:`dafka.WouldBlockError`,
``copy=False`` giving zero-copy :class:`Frame` objects, :class:`Poller`, and
``close()`` returning at once while queued messages are flushed in the
background (:func:`term`, run at exit, waits for them). ``docs/python.md``
lists every place where it differs from pyzmq.
"""

from __future__ import annotations

import atexit

from dafka import _native
from dafka._native import Frame, Monitor, Socket, curve_keypair, curve_public, term

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

#: ``flags`` of send and receive calls (libzmq's values).
NOBLOCK = DONTWAIT = 1
SNDMORE = 2
#: Poller events.
POLLIN = 1
POLLOUT = 2

#: Socket types as libzmq numbers them (``getsockopt(TYPE)``).
PAIR, PUB, SUB, REQ, REP, DEALER, ROUTER, PULL, PUSH, XPUB, XSUB = range(11)

#: Option numbers for ``setsockopt``/``getsockopt``, as in libzmq's ``zmq.h``: read from the
#: extension's table (``_native.OPTION_NUMBERS``, the one place they are written down).
_OPTION = _native.OPTION_NUMBERS
ROUTING_ID = IDENTITY = _OPTION["routing_id"]
SUBSCRIBE = _OPTION["subscribe"]
UNSUBSCRIBE = _OPTION["unsubscribe"]
RCVMORE = _OPTION["rcvmore"]
EVENTS = _OPTION["events"]
TYPE = _OPTION["type"]
LINGER = _OPTION["linger"]
RECONNECT_IVL = _OPTION["reconnect_ivl"]
RECONNECT_IVL_MAX = _OPTION["reconnect_ivl_max"]
MAXMSGSIZE = _OPTION["maxmsgsize"]
SNDHWM = _OPTION["sndhwm"]
RCVHWM = _OPTION["rcvhwm"]
RCVTIMEO = _OPTION["rcvtimeo"]
SNDTIMEO = _OPTION["sndtimeo"]
LAST_ENDPOINT = _OPTION["last_endpoint"]
ROUTER_MANDATORY = _OPTION["router_mandatory"]
IMMEDIATE = _OPTION["immediate"]
XPUB_VERBOSE = _OPTION["xpub_verbose"]
ROUTER_HANDOVER = _OPTION["router_handover"]
HANDSHAKE_IVL = _OPTION["handshake_ivl"]
XPUB_WELCOME_MSG = _OPTION["xpub_welcome_msg"]
HEARTBEAT_IVL = _OPTION["heartbeat_ivl"]
HEARTBEAT_TTL = _OPTION["heartbeat_ttl"]
HEARTBEAT_TIMEOUT = _OPTION["heartbeat_timeout"]
CONNECT_TIMEOUT = _OPTION["connect_timeout"]
MECHANISM = _OPTION["mechanism"]
PLAIN_SERVER = _OPTION["plain_server"]
PLAIN_USERNAME = _OPTION["plain_username"]
PLAIN_PASSWORD = _OPTION["plain_password"]
CURVE_SERVER = _OPTION["curve_server"]
CURVE_PUBLICKEY = _OPTION["curve_publickey"]
CURVE_SECRETKEY = _OPTION["curve_secretkey"]
CURVE_SERVERKEY = _OPTION["curve_serverkey"]
#: ``getsockopt(MECHANISM)`` values.
NULL, PLAIN, CURVE = 0, 1, 2


class Poller(_native.Poller):
    """Waits until one of several sockets is ready, as ``zmq.Poller``.

    ``poll(timeout)`` blocks (timeout in milliseconds, ``None`` = forever) and
    ``await poll_async(timeout)`` is its asyncio form, as
    ``zmq.asyncio.Poller.poll``: the loop is never blocked and cancelling loses
    no message (one that made a socket readable stays queued on that socket).
    """

    async def poll_async(self, timeout: float | None = None) -> list[tuple[Socket, int]]:
        """Like :meth:`poll`, awaited: ``[(socket, events), ...]``, empty on timeout."""
        ready = self.poll(0)
        if ready or timeout == 0:
            return ready
        await self._wait_async(timeout)
        return self.poll(0)


# Sockets closed with messages still queued keep flushing in the background;
# give them a bounded time to finish before the interpreter exits.
atexit.register(term)

__all__ = [
    "CONNECT_TIMEOUT",
    "CURVE",
    "CURVE_PUBLICKEY",
    "CURVE_SECRETKEY",
    "CURVE_SERVER",
    "CURVE_SERVERKEY",
    "DEALER",
    "DONTWAIT",
    "EVENTS",
    "HANDSHAKE_IVL",
    "HEARTBEAT_IVL",
    "HEARTBEAT_TIMEOUT",
    "HEARTBEAT_TTL",
    "IDENTITY",
    "IMMEDIATE",
    "LAST_ENDPOINT",
    "LINGER",
    "MAXMSGSIZE",
    "MECHANISM",
    "NOBLOCK",
    "NULL",
    "PAIR",
    "PLAIN",
    "PLAIN_PASSWORD",
    "PLAIN_SERVER",
    "PLAIN_USERNAME",
    "POLLIN",
    "POLLOUT",
    "PUB",
    "PULL",
    "PUSH",
    "RCVHWM",
    "RCVMORE",
    "RCVTIMEO",
    "RECONNECT_IVL",
    "RECONNECT_IVL_MAX",
    "REP",
    "REQ",
    "ROUTER",
    "ROUTER_HANDOVER",
    "ROUTER_MANDATORY",
    "ROUTING_ID",
    "SNDHWM",
    "SNDMORE",
    "SNDTIMEO",
    "SOCKET_TYPES",
    "SUB",
    "SUBSCRIBE",
    "TYPE",
    "UNSUBSCRIBE",
    "XPUB",
    "XPUB_VERBOSE",
    "XPUB_WELCOME_MSG",
    "XSUB",
    "Frame",
    "Monitor",
    "Poller",
    "Socket",
    "curve_keypair",
    "curve_public",
    "term",
]
