"""dafka: ZeroMQ (ZMTP 3.1), ZRE and Dafka in Rust, with Arrow batches for Spark.

The heavy lifting happens in the Rust extension :mod:`dafka._native`; this
package adds the Python-facing names, type stubs and the Spark data source.
"""

from __future__ import annotations

from dafka import _native
from dafka.errors import (
    ClosedError,
    DafkaError,
    HostUnreachableError,
    InvalidArgumentError,
    ProtocolError,
    StateError,
    TimeoutError,
    TransportError,
    WouldBlockError,
)

__version__: str = _native.__version__

__all__ = [
    "ClosedError",
    "DafkaError",
    "HostUnreachableError",
    "InvalidArgumentError",
    "ProtocolError",
    "StateError",
    "TimeoutError",
    "TransportError",
    "WouldBlockError",
    "__version__",
]
