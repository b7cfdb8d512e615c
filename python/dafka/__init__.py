"""dafka: ZeroMQ (ZMTP 3.1), ZRE and Dafka in Rust, with Arrow batches for Spark.

The heavy lifting happens in the Rust extension :mod:`dafka._native`; this
package adds the Python-facing names, type stubs and the Spark data source.
"""

from __future__ import annotations

from dafka import _native
from dafka._native import (
    ClusterKeys,
    Consumer,
    PartitionReader,
    Producer,
    Store,
    Tower,
    group_assignment,
)
from dafka.cluster import LocalCluster
from dafka.errors import (
    ClosedError,
    DafkaError,
    HostUnreachableError,
    InvalidArgumentError,
    ProtocolError,
    StateError,
    StorageError,
    TimeoutError,
    TransportError,
    WouldBlockError,
)

__version__: str = _native.__version__

__all__ = [
    "ClosedError",
    "ClusterKeys",
    "Consumer",
    "DafkaError",
    "HostUnreachableError",
    "InvalidArgumentError",
    "LocalCluster",
    "PartitionReader",
    "Producer",
    "ProtocolError",
    "StateError",
    "StorageError",
    "Store",
    "TimeoutError",
    "Tower",
    "TransportError",
    "WouldBlockError",
    "__version__",
    "group_assignment",
]
