"""A record's key, headers and timestamp through the Python API (issue 25), beside
tests/test_records_meta.py (a live consumer, `send`'s refusals): through a store, with empty,
large and absent values of each; bad Arrow columns, tables and async calls refused before
anything of the call is sent; the record limit counting key and headers."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pytest
from conftest import unique_topic

import dafka

from records_util import (
    HEADERS,
    MAX_RECORD,
    MIB,
    RECORDS,
    as_records,
    expected,
    matches,
    now_us,
    read_all,
)


def test_send_and_send_many_carry_key_headers_and_timestamp_through_a_store(
    big_store: str,
) -> None:
    t = unique_topic("meta")
    with (
        dafka.Consumer(t, towers=big_store, offset_reset="earliest") as consumer,
        dafka.Producer(t, towers=big_store, max_record_bytes=MAX_RECORD) as p,
    ):
        before = now_us()
        for value, key, headers, stamp in RECORDS:
            p.send(value, key=key, headers=headers, timestamp=stamp)
        # send_many from lists, then from a RecordBatch with the same columns.
        p.send_many(
            [r[0] for r in RECORDS],
            keys=[r[1] for r in RECORDS],
            headers=[r[2] for r in RECORDS],
            timestamps=[r[3] for r in RECORDS],
        )
        batch = pa.record_batch(
            {
                "value": pa.array([r[0] for r in RECORDS], pa.binary()),
                "key": pa.array([r[1] for r in RECORDS], pa.binary()),
                "headers": pa.array(
                    [
                        None if r[2] is None else [{"key": k, "value": v} for k, v in r[2]]
                        for r in RECORDS
                    ],
                    HEADERS,
                ),
                "timestamp": pa.array([r[3] for r in RECORDS], pa.timestamp("us", tz="UTC")),
            }
        )
        p.send_many(batch)
        p.flush(timeout=30)
        after = now_us()
        want = expected(RECORDS * 3, (before, after))
        stored = as_records(read_all(big_store, t))
        assert matches(stored, want), stored[:2]
        got: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + 30
        while len(got) < len(want) and time.monotonic() < deadline:
            got += as_records(pa.Table.from_batches([consumer.poll(timeout=0.5)]))
        assert matches(got, want), got[:2]


BAD_SENDS: list[tuple[dict[str, Any], str]] = [
    ({"key": 5}, "a record key must be bytes, bytearray or str, not int"),
    (
        {"headers": [("a", b"x", b"y")]},
        r"a header must be a \(name, value\) pair, not a tuple of 3",
    ),
    ({"headers": 7}, "headers must be a dict or a list of .* not int"),
    ({"timestamp": "now"}, "a timestamp must be an int .* or a timezone-aware datetime, not str"),
]

BAD_MANY: list[tuple[dict[str, Any], str]] = [
    ({"keys": [b"a", 5, b"c"]}, r"send_many: keys\[1\]: a record key must be bytes"),
    ({"keys": [b"a", b"b"]}, "send_many: keys has 2 entries for 3 values"),
    ({"keys": pa.array([1, 2, 3])}, "keys must be a binary or string Arrow array, not Int64"),
    ({"headers": [None, None, {"a": 1}]}, r"send_many: headers\[2\]: a header value must be"),
    ({"headers": pa.array([[1], [2], [3]])}, "headers must be an Arrow list<struct<key"),
    (
        {"headers": pa.array([[], [], [{"key": None, "value": b"v"}]], HEADERS)},
        r"headers\[2\]: a header name must be a UTF-8 string, not null",
    ),
    ({"timestamps": [0, 1, "x"]}, r"send_many: timestamps\[2\]: a timestamp must be an int"),
    ({"timestamps": pa.array(["a", "b", "c"])}, "timestamps must be an Arrow timestamp or int64"),
    (
        {"timestamps": pa.array([0, 0, 1 << 62], pa.timestamp("s"))},
        r"timestamps\[2\] is out of range in microseconds",
    ),
]


def _table(**columns: pa.Array) -> pa.Table:
    return pa.table({"value": pa.array([b"a", b"b", b"c"]), **columns})


BAD_TABLES: list[tuple[pa.Table, str]] = [
    (_table(key=pa.array([1, 2, 3])), "keys must be a binary or string Arrow array, not Int64"),
    (_table(headers=pa.array(["x", "y", "z"])), "headers must be an Arrow list<struct<key"),
    (_table(timestamp=pa.array(["x", "y", "z"])), "timestamps must be an Arrow timestamp"),
    (pa.table({"val": pa.array([b"a"])}), "the batch has no 'value' column"),
]


def test_bad_arrow_columns_tables_and_async_calls_are_refused_and_nothing_is_sent(
    cluster: dafka.LocalCluster,
) -> None:
    """Each call with a bad key, header or timestamp (the async calls, lists, Arrow columns,
    tables and batches) raises InvalidArgumentError naming what is wrong, and sends nothing:
    a consumer of the topic sees only the good record sent last."""
    t = unique_topic("meta-bad")
    with (
        dafka.Consumer(t, towers=cluster.towers, offset_reset="earliest") as consumer,
        dafka.Producer(t, towers=cluster.towers) as p,
    ):
        for kwargs, message in BAD_SENDS:
            with pytest.raises(dafka.InvalidArgumentError, match=message):
                p.send(b"bad", **kwargs)
            with pytest.raises(dafka.InvalidArgumentError, match=message):
                p.send_async(b"bad", **kwargs)
        values = [b"good-0", b"good-1", b"good-2"]
        for kwargs, message in BAD_MANY:
            with pytest.raises(dafka.InvalidArgumentError, match=message):
                p.send_many(values, **kwargs)
            with pytest.raises(dafka.InvalidArgumentError, match=message):
                p.send_many_async(values, **kwargs)
        for table, message in BAD_TABLES:
            with pytest.raises(dafka.InvalidArgumentError, match=message):
                p.send_many(table)
            with pytest.raises(dafka.InvalidArgumentError, match=message):
                p.send_many(table.to_batches()[0])
        with pytest.raises(dafka.InvalidArgumentError, match="come from its key, headers"):
            p.send_many(_table(), keys=[b"a", b"b", b"c"])
        assert p.send(b"the only record", key=b"k") == 0
        p.flush(timeout=30)
        got: list[bytes] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(got) < 1:
            got += consumer.poll(timeout=0.2).column("value").to_pylist()
        time.sleep(0.5)
        got += consumer.poll(timeout=0.2).column("value").to_pylist()
    assert got == [b"the only record"]
    with dafka.PartitionReader(cluster.towers) as reader:
        assert list(reader.offsets(t).values()) == [(0, 1)]


OVER = "is over the maximum of 1048576 bytes"


def test_the_record_limit_counts_the_key_and_the_headers(cluster: dafka.LocalCluster) -> None:
    """A 1 MiB key or header value with a value is over the default 1 MiB limit (the big
    records above need max_record_bytes on the producer and the store)."""
    t = unique_topic("meta-limit")
    with dafka.Producer(t, towers=cluster.towers) as p:
        p.send(b"", key=b"k" * (MIB - 1))
        with pytest.raises(
            dafka.InvalidArgumentError, match="is over the maximum of 1048576 bytes"
        ):
            p.send(b"vv", key=b"k" * (MIB - 1))
        with pytest.raises(
            dafka.InvalidArgumentError, match="is over the maximum of 1048576 bytes"
        ):
            p.send(b"v", headers={"h": b"k" * MIB})


def test_a_partition_reader_leaves_the_headers_column_null_when_asked(
    cluster: dafka.LocalCluster,
) -> None:
    """`PartitionReader.poll(headers=False)` (the Spark source without includeHeaders): the
    same schema and rows, the headers column all nulls; the default builds it."""
    t = unique_topic("meta-noheaders")
    with dafka.Producer(t, towers=cluster.towers) as p:
        for i in range(3):
            p.send(b"v%d" % i, key=b"k%d" % i, headers={"trace": b"t%d" % i})
        p.flush(timeout=30)
        partition = p.partition
    batches: dict[bool, pa.RecordBatch] = {}
    for headers in (False, True):
        with dafka.PartitionReader(cluster.towers) as reader:
            reader.assign(t, partition, 0, 3)
            got: list[pa.RecordBatch] = []
            deadline = time.monotonic() + 20
            while sum(b.num_rows for b in got) < 3 and time.monotonic() < deadline:
                got.append(reader.poll(timeout=0.5, headers=headers))
            batches[headers] = pa.Table.from_batches(got).combine_chunks().to_batches()[0]
    without, with_ = batches[False], batches[True]
    assert without.schema == with_.schema
    assert without.column("key").to_pylist() == [b"k0", b"k1", b"k2"]
    assert without.column("headers").null_count == 3
    assert with_.column("headers").to_pylist() == [
        [{"key": "trace", "value": b"t%d" % i}] for i in range(3)
    ]
    assert without.drop_columns(["headers"]).equals(with_.drop_columns(["headers"]))
