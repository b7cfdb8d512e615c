# Type stubs for the Rust extension module dafka._native, checked against the
# built module by tests/test_stubs.py (mypy.stubtest).

import asyncio
import builtins
import datetime
import os
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias, final, overload

import pyarrow
from typing_extensions import Buffer, disjoint_base

__all__ = [
    "OPTION_NUMBERS",
    "ClusterKeys",
    "Consumer",
    "Frame",
    "Monitor",
    "PartitionReader",
    "Poller",
    "Producer",
    "Socket",
    "Store",
    "Tower",
    "ZreNode",
    "__version__",
    "curve_keypair",
    "curve_public",
    "group_assignment",
    "term",
]
__version__: str
OPTION_NUMBERS: dict[str, int]

_Frames: TypeAlias = Buffer | Sequence[Buffer]
#: A store's sync policy: fdatasync before every acknowledgement, never, or at most every this
#: many seconds.
_Sync: TypeAlias = Literal["always", "never"] | float
_Authenticator: TypeAlias = (
    list[str | bytes]
    | tuple[str | bytes, ...]
    | set[str | bytes]
    | frozenset[str | bytes]
    | dict[str, str]
    | dict[bytes, bytes]
    # (address, mechanism, credentials) -> True | False | reason. Must be fast: it runs
    # in the handshake on a dafka I/O thread holding the GIL (see docs/security.md).
    | Callable[[str, str, Any], bool | str]
)

@final
class Frame:
    def __new__(cls, data: Buffer) -> Frame: ...
    @property
    def bytes(self) -> builtins.bytes: ...
    @property
    def buffer(self) -> memoryview: ...
    def __bytes__(self) -> builtins.bytes: ...
    def __len__(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

@final
class Monitor:
    def recv(self, flags: int = 0, *, timeout: float | None = None) -> dict[str, Any] | None: ...
    @property
    def dropped(self) -> int: ...
    def __iter__(self) -> Monitor: ...
    def __next__(self) -> dict[str, Any]: ...

@disjoint_base
class Poller:
    def __new__(cls) -> Self: ...
    def register(self, socket: Socket, flags: int = 3) -> None: ...
    def modify(self, socket: Socket, flags: int = 3) -> None: ...
    def unregister(self, socket: Socket) -> None: ...
    def poll(self, timeout: float | None = None) -> list[tuple[Socket, int]]: ...
    def _wait_async(self, timeout: float | None = None) -> asyncio.Future[None]: ...

@final
class Socket:
    def __new__(
        cls,
        socket_type: str,
        *,
        sndhwm: int = ...,
        rcvhwm: int = ...,
        linger: float | None = ...,
        heartbeat_ivl: float | None = ...,
        heartbeat_ttl: float | None = ...,
        heartbeat_timeout: float | None = ...,
        reconnect_ivl: float = ...,
        reconnect_ivl_max: float | None = ...,
        connect_timeout: float | None = ...,
        handshake_timeout: float | None = ...,
        routing_id: bytes | None = ...,
        router_mandatory: bool = ...,
        router_handover: bool = ...,
        immediate: bool = ...,
        xpub_welcome_msg: bytes | None = ...,
        xpub_verbose: bool = ...,
        maxmsgsize: int = ...,
        max_frame_size: int = ...,
        max_subscriptions: int = ...,
        max_subscription_size: int = ...,
        max_connections: int = ...,
        properties: dict[str, bytes] = ...,
        curve_server: bool = ...,
        curve_publickey: str | bytes | None = ...,
        curve_secretkey: str | bytes | None = ...,
        curve_serverkey: str | bytes | None = ...,
        plain_server: bool = ...,
        plain_username: str | bytes | None = ...,
        plain_password: str | bytes | None = ...,
        authenticator: _Authenticator | None = ...,
    ) -> Socket: ...
    @property
    def socket_type(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def bind(self, endpoint: str) -> str: ...
    def connect(self, endpoint: str) -> None: ...
    def unbind(self, endpoint: str) -> None: ...
    def disconnect(self, endpoint: str) -> None: ...
    def send(
        self, data: _Frames, flags: int = 0, copy: bool = True, *, timeout: float | None = None
    ) -> None: ...
    def send_multipart(
        self,
        msg_parts: Sequence[Buffer],
        flags: int = 0,
        copy: bool = True,
        *,
        timeout: float | None = None,
    ) -> None: ...
    @overload
    def recv(
        self, flags: int = 0, copy: Literal[True] = True, *, timeout: float | None = None
    ) -> bytes: ...
    @overload
    def recv(
        self, flags: int = 0, *, copy: Literal[False], timeout: float | None = None
    ) -> Frame: ...
    @overload
    def recv(self, flags: int, copy: Literal[False], *, timeout: float | None = None) -> Frame: ...
    @overload
    def recv_multipart(
        self, flags: int = 0, copy: Literal[True] = True, *, timeout: float | None = None
    ) -> list[bytes]: ...
    @overload
    def recv_multipart(
        self, flags: int = 0, *, copy: Literal[False], timeout: float | None = None
    ) -> list[Frame]: ...
    @overload
    def recv_multipart(
        self, flags: int, copy: Literal[False], *, timeout: float | None = None
    ) -> list[Frame]: ...
    def recv_batch(
        self, max_messages: int = 10000, timeout: float | None = None
    ) -> pyarrow.RecordBatch: ...
    def subscribe(self, topic: str | Buffer) -> None: ...
    def unsubscribe(self, topic: str | Buffer) -> None: ...
    def setsockopt(self, option: int, value: Any) -> None: ...
    def getsockopt(self, option: int) -> Any: ...
    def close(self, linger: float | None = None) -> None: ...
    def monitor(self, capacity: int = 1024) -> Monitor: ...
    def send_async(self, frames: _Frames) -> asyncio.Future[None]: ...
    def recv_async(self) -> asyncio.Future[list[bytes]]: ...
    def __enter__(self) -> Socket: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...

def group_assignment(
    members: Sequence[str], partitions: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], str]: ...
def term(timeout: float = 5.0) -> int: ...
def curve_keypair() -> tuple[str, str]: ...
def curve_public(secret: str | bytes) -> str: ...

_Towers: TypeAlias = str

@final
class ClusterKeys:
    def __new__(
        cls,
        cluster_secretkey: str | bytes,
        member_secretkey: str | bytes,
        allowed_keys: Sequence[str | bytes],
    ) -> ClusterKeys: ...
    @property
    def cluster_publickey(self) -> str: ...
    @property
    def member_publickey(self) -> str: ...
    @property
    def allowed_keys(self) -> list[str]: ...

_Values: TypeAlias = (
    Sequence[builtins.bytes | bytearray | str]
    | pyarrow.Array[Any]
    | pyarrow.RecordBatch
    | pyarrow.Table
)
_Value: TypeAlias = builtins.bytes | bytearray | str
_Headers: TypeAlias = Mapping[str, _Value | None] | Sequence[tuple[str, _Value | None]]
_Time: TypeAlias = int | datetime.datetime

@final
class Tower:
    def __new__(
        cls, sub: str = "tcp://*:5556", pub: str | None = None, *, curve: ClusterKeys | None = None
    ) -> Tower: ...
    @property
    def towers(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Tower: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...

@final
class Store:
    def __new__(
        cls,
        path: str | os.PathLike[str],
        towers: _Towers,
        sync: _Sync | None = None,
        *,
        curve: ClusterKeys | None = None,
        segment_bytes: int | None = None,
        retention_bytes: int | None = None,
        retention_ms: int | None = None,
        max_record_bytes: int | None = None,
        host: str | None = None,
        bind: str | None = None,
    ) -> Store: ...
    @property
    def path(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Store: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...

@final
class Producer:
    def __new__(
        cls,
        topic: str,
        towers: _Towers,
        min_acks: int = 1,
        partition: str | None = None,
        *,
        curve: ClusterKeys | None = None,
        max_record_bytes: int | None = None,
        connect_timeout: float | None = ...,
        host: str | None = None,
        bind: str | None = None,
    ) -> Producer: ...
    @property
    def partition(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def acknowledged(self) -> int: ...
    def send(
        self,
        value: _Value,
        key: _Value | None = None,
        headers: _Headers | None = None,
        timestamp: _Time | None = None,
    ) -> int: ...
    def send_many(
        self,
        values: _Values,
        keys: Sequence[_Value | None] | pyarrow.Array[Any] | None = None,
        headers: Sequence[_Headers | None] | pyarrow.Array[Any] | None = None,
        timestamps: Sequence[_Time | None] | pyarrow.Array[Any] | None = None,
    ) -> int: ...
    def flush(self, timeout: float | None = None) -> None: ...
    def send_async(
        self,
        value: _Value,
        key: _Value | None = None,
        headers: _Headers | None = None,
        timestamp: _Time | None = None,
    ) -> asyncio.Future[int]: ...
    def send_many_async(
        self,
        values: _Values,
        keys: Sequence[_Value | None] | pyarrow.Array[Any] | None = None,
        headers: Sequence[_Headers | None] | pyarrow.Array[Any] | None = None,
        timestamps: Sequence[_Time | None] | pyarrow.Array[Any] | None = None,
    ) -> asyncio.Future[int]: ...
    def flush_async(self, timeout: float | None = None) -> asyncio.Future[None]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Producer: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...

@final
class Consumer:
    def __new__(
        cls,
        topics: str | Sequence[str],
        towers: _Towers,
        offset_reset: Literal["earliest", "latest"] = "latest",
        start_offsets: dict[tuple[str, str], int] | None = None,
        *,
        curve: ClusterKeys | None = None,
        connect_timeout: float | None = ...,
        host: str | None = None,
        bind: str | None = None,
        group: str | None = None,
        session_timeout: float = 10.0,
        enable_auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        on_assign: Callable[[Consumer, list[tuple[str, str]]], object] | None = None,
        on_revoke: Callable[[Consumer, list[tuple[str, str]]], object] | None = None,
    ) -> Consumer: ...
    def poll(self, max_records: int = 10000, timeout: float = 1.0) -> pyarrow.RecordBatch: ...
    def assignment(self) -> list[tuple[str, str]]: ...
    @overload
    def commit(
        self, asynchronous: Literal[False] = False, timeout: float = 10.0
    ) -> dict[tuple[str, str], int]: ...
    @overload
    def commit(self, asynchronous: Literal[True], timeout: float = 10.0) -> None: ...
    def committed(self, timeout: float = 10.0) -> dict[tuple[str, str], int]: ...
    def seek(self, topic: str, partition: str, offset: int) -> None: ...
    def pause(self, partitions: Sequence[tuple[str, str]]) -> None: ...
    def resume(self, partitions: Sequence[tuple[str, str]]) -> None: ...
    def paused(self) -> list[tuple[str, str]]: ...
    def lag(self) -> dict[tuple[str, str], int]: ...
    def poll_async(
        self, max_records: int = 10000, timeout: float = 1.0
    ) -> asyncio.Future[pyarrow.RecordBatch]: ...
    def __iter__(self) -> Consumer: ...
    def __next__(self) -> pyarrow.RecordBatch: ...
    @property
    def topics_not_held(self) -> list[str]: ...
    @property
    def lost(self) -> int: ...
    def offsets_for_times(
        self, topic: str, times: _Time | Mapping[str, _Time], timeout: float = 10.0
    ) -> dict[str, int | None]: ...
    def topics(self, timeout: float = 10.0) -> list[str]: ...
    def positions(self) -> dict[tuple[str, str], int]: ...
    def subscribe(self, topic: str) -> None: ...
    def unsubscribe(self, topic: str) -> None: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Consumer: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...

@final
class PartitionReader:
    def __new__(cls, towers: _Towers, *, curve: ClusterKeys | None = None) -> PartitionReader: ...
    def offsets(self, topic: str, timeout: float = 10.0) -> dict[str, tuple[int, int]]: ...
    def offsets_for_times(
        self, topic: str, times: _Time | Mapping[str, _Time], timeout: float = 10.0
    ) -> dict[str, int | None]: ...
    def group_members(
        self, group: str, wait: float = 3.0, session_timeout: float = 10.0
    ) -> list[str]: ...
    def groups_heard(
        self, wait: float = 3.0, session_timeout: float = 10.0
    ) -> dict[str, list[str]]: ...
    def groups(self, timeout: float = 10.0) -> list[str]: ...
    def committed(self, group: str, timeout: float = 10.0) -> dict[tuple[str, str], int]: ...
    def topics(self, timeout: float = 10.0) -> list[str]: ...
    def assign(self, topic: str, partition: str, offset: int, end: int | None = None) -> None: ...
    def position(self, topic: str, partition: str) -> int | None: ...
    def unassign(self, topic: str, partition: str) -> None: ...
    def poll(
        self, max_records: int = 10000, timeout: float = 1.0, headers: bool = True
    ) -> pyarrow.RecordBatch: ...
    @property
    def towers(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> PartitionReader: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...

_ZreEventType: TypeAlias = Literal[
    "ENTER", "EXIT", "JOIN", "LEAVE", "WHISPER", "SHOUT", "EVASIVE", "SILENT", "STOP"
]
_ZreEvent: TypeAlias = tuple[
    _ZreEventType, str | None, str | None, str | None, list[bytes], dict[str, str], str | None
]

@final
class ZreNode:
    def __new__(
        cls,
        uuid: bytes,
        name: str | None = None,
        headers: Sequence[tuple[str, str]] | None = None,
        interface: str | None = None,
        port: int = 5670,
        interval: float = 1.0,
        *,
        ipv6: bool = False,
        multicast: str | None = None,
        beacons: bool = True,
        known_endpoints: Sequence[str] | None = None,
        gossip_hub: bool = False,
        local_inproc: bool = True,
        evasive: float = 5.0,
        silent: float = 10.0,
        expired: float = 30.0,
        curve_secretkey: str | bytes | None = None,
        curve_publickey: str | bytes | None = None,
        allowed_keys: Sequence[str | bytes] | None = None,
    ) -> ZreNode: ...
    @property
    def uuid(self) -> str: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def stopped(self) -> bool: ...
    def recv(self, timeout: float | None = None) -> _ZreEvent: ...
    def recv_async(self) -> asyncio.Future[_ZreEvent]: ...
    def join(self, group: str) -> None: ...
    def leave(self, group: str) -> None: ...
    def shout(self, group: str, frames: Sequence[bytes]) -> None: ...
    def whisper(self, peer: str, frames: Sequence[bytes]) -> None: ...
    def peers(self) -> list[str]: ...
    def peer_groups(self) -> list[str]: ...
    def own_groups(self) -> list[str]: ...
    def peers_by_group(self, group: str) -> list[str]: ...
    def peer_header(self, peer: str, key: str) -> str | None: ...
    def peer_address(self, peer: str) -> str | None: ...
    def peer_name(self, peer: str) -> str | None: ...
    def stop(self) -> None: ...
