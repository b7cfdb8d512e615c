"""Helpers the tests of records with keys, headers and timestamps share (issue 25): records
with empty, large and absent values of each, reading a topic back, comparing."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

import dafka

MIB = 1 << 20
# Keys, headers and values of 1 MiB each in one record: above the default 1 MiB limit, which
# counts value, key and headers together.
MAX_RECORD = 4 * MIB
LAST_US = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z, Spark's last timestamp
HEADER = pa.struct([("key", pa.utf8()), ("value", pa.binary())])
HEADERS = pa.list_(pa.field("element", HEADER))

Record = tuple[bytes, bytes | None, list[tuple[str, bytes | None]] | None, int | None]

# (value, key, headers, timestamp µs or None for the producer's clock): each of key, headers
# and timestamp absent, empty (b"", [], the epoch) and large (1 MiB, a 1 MiB header value,
# the last microsecond Spark shows); values empty and of 1 MiB.
RECORDS: list[Record] = [
    (b"v0", None, None, None),
    (b"", b"", [], 0),
    (b"\x01" * MIB, b"\x02" * MIB, [("big", b"\x03" * MIB)], LAST_US),
    (b"v3", b"k3", [("a", b"1"), ("b", None), ("a", b""), ("\u00e9t\u00e9", b"2")], -1),
    (b"v4", None, [], 1_767_225_600_123_456),
    (b"v5", b"\x00", None, None),
]


def as_records(table: pa.Table) -> list[tuple[Any, ...]]:
    """(value, key, headers as pairs, timestamp µs, timestampType) per row."""
    stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    return [
        (
            v,
            k,
            None if hs is None else [(h["key"], h["value"]) for h in hs],
            ts,
            kind,
        )
        for v, k, hs, ts, kind in zip(
            table.column("value").to_pylist(),
            table.column("key").to_pylist(),
            table.column("headers").to_pylist(),
            stamps,
            table.column("timestampType").to_pylist(),
            strict=True,
        )
    ]


def read_all(towers: str, topic: str, within: float = 30.0) -> pa.Table:
    """Every record the stores hold of `topic`, in partition and offset order."""
    batches = []
    with dafka.PartitionReader(towers) as reader:
        for partition, (low, end) in sorted(reader.offsets(topic).items()):
            reader.assign(topic, partition, low, end)
            got, deadline = 0, time.monotonic() + within
            while got < end - low:
                assert time.monotonic() < deadline, f"{got} of {end - low} records"
                batch = reader.poll(max_records=100_000, timeout=0.5)
                got += batch.num_rows
                batches.append(batch)
            reader.unassign(topic, partition)
        schema = reader.poll(timeout=0.01).schema
    return pa.Table.from_batches(batches, schema=schema)


def expected(records: list[Record], sent_between: tuple[int, int]) -> list[tuple[Any, ...]]:
    """What a reader gives for `records`: a record sent without a timestamp has the
    producer's clock, somewhere in `sent_between` (µs); every type is create time (0)."""
    return [(v, k, hs, ts if ts is not None else sent_between, 0) for v, k, hs, ts in records]


def matches(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> bool:
    if len(got) != len(want):
        return False
    for g, w in zip(got, want, strict=True):
        if isinstance(w[3], tuple):
            lo, hi = w[3]
            if not lo <= g[3] <= hi:
                return False
            g, w = (*g[:3], None, g[4]), (*w[:3], None, w[4])
        if g != w:
            return False
    return True


def now_us() -> int:
    return time.time_ns() // 1000
