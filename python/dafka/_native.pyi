# Type stubs for the Rust extension module dafka._native, checked against the
# built module by tests/test_stubs.py (mypy.stubtest).

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import TypeAlias, final

import pyarrow

__all__ = ["Socket", "__version__"]
__version__: str

_Frame: TypeAlias = bytes | bytearray | memoryview
_Frames: TypeAlias = _Frame | Sequence[_Frame]

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
    ) -> Socket: ...
    @property
    def socket_type(self) -> str: ...
    def bind(self, endpoint: str) -> str: ...
    def connect(self, endpoint: str) -> None: ...
    def unbind(self, endpoint: str) -> None: ...
    def disconnect(self, endpoint: str) -> None: ...
    def send(self, frames: _Frames, timeout: float | None = None) -> None: ...
    def recv(self, timeout: float | None = None) -> list[bytes]: ...
    def recv_batch(
        self, max_messages: int = 10000, timeout: float | None = None
    ) -> pyarrow.RecordBatch: ...
    def subscribe(self, prefix: bytes) -> None: ...
    def unsubscribe(self, prefix: bytes) -> None: ...
    def close(self) -> None: ...
    def send_async(self, frames: _Frames) -> asyncio.Future[None]: ...
    def recv_async(self) -> asyncio.Future[list[bytes]]: ...
    def __enter__(self) -> Socket: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...
