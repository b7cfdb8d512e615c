"""ZRE: peer discovery and group messaging, compatible with zyre and pyre.

:class:`Node` is a ZRE node (issue 12's contract) over the Rust node of ``crates/zre``: UDP
beacons on an interface chosen by name or address (IPv4 broadcast by default, IPv4 or IPv6
multicast as options), or no UDP at all with ``beacons=False`` and ``known_endpoints``; a
mailbox on an ephemeral TCP port; events as :class:`Event`::

    with dafka.zre.Node("me", interface="lo") as node:
        node.join("CHAT")
        for event in node:
            print(event.type, event.peer_name, event.frames)
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, Self, TypeAlias

from dafka import _native
from dafka.errors import ClosedError, StateError

__all__ = ["DEFAULT_PORT", "Event", "EventType", "Node"]

#: The UDP port of ZRE beacons (IANA "zre-disc").
DEFAULT_PORT = 5670

EventType: TypeAlias = Literal[
    "ENTER", "EXIT", "JOIN", "LEAVE", "WHISPER", "SHOUT", "EVASIVE", "SILENT", "STOP"
]


@dataclass(frozen=True)
class Event:
    """What a node hears. ``peer_uuid`` is 32 upper-case hex digits (``None`` for STOP);
    ``group`` is set for JOIN, LEAVE and SHOUT, ``frames`` for WHISPER and SHOUT,
    ``headers`` and ``address`` (the peer's mailbox, ``tcp://ip:port``) for ENTER."""

    type: EventType
    peer_uuid: str | None = None
    peer_name: str | None = None
    group: str | None = None
    frames: list[bytes] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    address: str | None = None


class Node:
    """A ZRE node. Nothing runs before :meth:`start` (or ``with``); :attr:`uuid` is fixed at
    construction. Groups joined before :meth:`start` are joined when it starts (as pyre and
    zyre do: pyre's chat example joins first).

    ``interface`` is a name (``"eth0"``, ``"lo"``) or an address (``"10.0.0.1"``,
    ``"fd00::1"``); ``None`` picks the first interface that is up, not loopback and has an
    IPv4 broadcast address, as zyre does. ``ipv6=True`` takes the named interface's IPv6
    address and beacons to ``ff02::1`` there; ``multicast`` (``"225.25.25.25"``, ``"ff02::1"``)
    sends beacons to that group instead of broadcasting. ``beacons=False`` opens no UDP socket:
    peers are found through ``known_endpoints`` (their mailboxes, ``tcp://ip:port``) and by
    the HELLOs of the nodes that know this one; with ``gossip_hub=True`` this node tells every
    peer of every other, so nodes that know only its mailbox mesh fully. Nodes of one process
    reach each other through ``inproc://`` (no TCP connection, no descriptor per pair) unless
    ``local_inproc=False``. ``evasive``,
    ``silent`` and ``expired`` are the peer timeouts in seconds (zyre's 5, 10 and 30).

    CURVE mode (43/ZRE version 3, as zyre with a certificate): ``curve_secretkey`` (40 Z85
    characters or 32 raw bytes, from :func:`dafka.zmtp.curve_keypair`; ``curve_publickey``,
    if given, must match it) makes the node beacon its public key in 54-byte beacons, say it
    in HELLO as header ``X-PUBLICKEY``, run its mailbox as a CURVE server and reach each peer
    over CURVE with the key from that peer's beacon. It ignores 22-byte (plaintext) beacons
    and plaintext connections fail their handshake, so plaintext nodes and CURVE nodes never
    see each other. ``allowed_keys`` (public keys, Z85 or raw) limits the peers to those keys:
    other beacons are ignored and the mailbox refuses their connections. CURVE mode refuses
    ``known_endpoints``, ``beacons=False`` and ``gossip_hub`` (they carry no keys): start()
    raises ``ValueError``. See ``docs/security.md``.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        interface: str | None = None,
        port: int = DEFAULT_PORT,
        interval: float = 1.0,
        ipv6: bool = False,
        multicast: str | None = None,
        beacons: bool = True,
        known_endpoints: Sequence[str] = (),
        gossip_hub: bool = False,
        local_inproc: bool = True,
        evasive: float = 5.0,
        silent: float = 10.0,
        expired: float = 30.0,
        curve_secretkey: str | bytes | None = None,
        curve_publickey: str | bytes | None = None,
        allowed_keys: Sequence[str | bytes] | None = None,
    ) -> None:
        raw = secrets.token_bytes(16)
        self._raw_uuid = raw
        self._uuid = raw.hex().upper()
        self._name = name if name is not None else self._uuid[:6]
        self._headers = dict(headers or {})
        self._options = {
            "interface": interface,
            "port": port,
            "interval": interval,
            "ipv6": ipv6,
            "multicast": multicast,
            "beacons": beacons,
            "known_endpoints": list(known_endpoints),
            "gossip_hub": gossip_hub,
            "local_inproc": local_inproc,
            "evasive": evasive,
            "silent": silent,
            "expired": expired,
            "curve_secretkey": curve_secretkey,
            "curve_publickey": curve_publickey,
            "allowed_keys": None if allowed_keys is None else list(allowed_keys),
        }
        self._node: _native.ZreNode | None = None
        # Joined before start(), in join order.
        self._groups: list[str] = []

    @property
    def uuid(self) -> str:
        """This node's id: 32 upper-case hex digits."""
        return self._uuid

    @property
    def name(self) -> str:
        """This node's name (default: the first six hex digits of its id, as zyre)."""
        return self._name

    @property
    def endpoint(self) -> str:
        """The mailbox peers connect to, ``tcp://ip:port`` (once started)."""
        return self._running().endpoint

    def set_header(self, key: str, value: str) -> None:
        """Adds a header to announce in HELLO (before :meth:`start`)."""
        if self._node is not None:
            raise StateError("headers are announced at start: set them before start()")
        self._headers[key] = value

    def start(self) -> None:
        """Binds the mailbox and the beacon socket, joins the groups joined so far and starts
        beaconing. A group the node refuses (e.g. over 255 bytes) fails the start: the node
        stays unstarted, its groups kept."""
        if self._node is not None:
            raise StateError("the ZRE node is already started")
        node = _native.ZreNode(
            self._raw_uuid,
            self._name,
            list(self._headers.items()),
            **self._options,  # type: ignore[arg-type]
        )
        try:
            for group in self._groups:
                node.join(group)
        except BaseException:
            node.stop()
            raise
        self._node = node
        self._groups = []

    def stop(self) -> None:
        """Says goodbye (a port-0 beacon) and closes every connection. Events not taken yet
        stay readable, STOP last. Stopping twice, or before start, does nothing."""
        if self._node is not None:
            self._node.stop()

    def close(self) -> None:
        """:meth:`stop`, under the name every dafka node closes by."""
        self.stop()

    @property
    def closed(self) -> bool:
        """Whether the node was started and has stopped (a node never started is not
        closed: :meth:`start` still works)."""
        return self._node is not None and self._node.stopped

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _running(self) -> _native.ZreNode:
        if self._node is None:
            raise StateError("the ZRE node is not started")
        return self._node

    def join(self, group: str) -> None:
        """Joins ``group``; before :meth:`start`, once the node starts."""
        if self._node is None:
            if group not in self._groups:
                self._groups.append(group)
            return
        self._node.join(group)

    def leave(self, group: str) -> None:
        """Leaves ``group``; before :meth:`start`, forgets a group joined."""
        if self._node is None:
            if group in self._groups:
                self._groups.remove(group)
            return
        self._node.leave(group)

    def shout(self, group: str, *frames: bytes) -> None:
        """Sends ``frames`` (one message) to every peer in ``group``."""
        self._running().shout(group, list(frames))

    def whisper(self, peer_uuid: str, *frames: bytes) -> None:
        """Sends ``frames`` (one message) to one peer; ``HostUnreachableError`` if unknown."""
        self._running().whisper(peer_uuid, list(frames))

    def recv(self, timeout: float | None = None) -> Event:
        """The next event. Raises ``TimeoutError`` (:class:`dafka.TimeoutError`) when none
        came within ``timeout`` seconds, :class:`dafka.ClosedError` after STOP was taken."""
        return Event(*self._running().recv(timeout))

    def __iter__(self) -> Iterator[Event]:
        """Events until the node stops, STOP included."""
        node = self._running()
        while True:
            try:
                event = Event(*node.recv(None))
            except ClosedError:
                return
            yield event
            if event.type == "STOP":
                return

    async def __aiter__(self) -> AsyncIterator[Event]:
        """``async for``: as iteration, without blocking the event loop."""
        node = self._running()
        while True:
            try:
                event = Event(*await node.recv_async())
            except ClosedError:
                return
            yield event
            if event.type == "STOP":
                return

    async def recv_async(self) -> Event:
        """:meth:`recv` for asyncio (wrap in ``asyncio.wait_for`` for a time limit;
        cancelling loses no event)."""
        return Event(*await self._running().recv_async())

    def peers(self) -> list[str]:
        """Peers that said HELLO, sorted."""
        return self._running().peers()

    def peer_groups(self) -> list[str]:
        """Groups some peer is in, sorted."""
        return self._running().peer_groups()

    def own_groups(self) -> list[str]:
        """Groups this node is in (before :meth:`start`: will join), in join order."""
        if self._node is None:
            return list(self._groups)
        return self._node.own_groups()

    def peers_by_group(self, group: str) -> list[str]:
        return self._running().peers_by_group(group)

    def peer_header(self, peer_uuid: str, key: str) -> str | None:
        return self._running().peer_header(peer_uuid, key)

    def peer_address(self, peer_uuid: str) -> str | None:
        """The peer's mailbox, ``tcp://ip:port``."""
        return self._running().peer_address(peer_uuid)

    def peer_name(self, peer_uuid: str) -> str | None:
        return self._running().peer_name(peer_uuid)

    def __repr__(self) -> str:
        state = "started" if self._node is not None else "not started"
        return f"<dafka.zre.Node name={self._name!r} uuid={self._uuid} {state}>"
