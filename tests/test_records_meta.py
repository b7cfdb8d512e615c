"""Key, headers and timestamp: what `send` and `send_many` take, what a consumer's Arrow
batch carries (live and from a store), the time queries, and the refusals (issue 25)."""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any

import pyarrow as pa
import pytest

import dafka
from tests.conftest import unique_topic

MIB = 1 << 20
UTC = dt.UTC


def _rows(consumer: Any, want: int, within: float = 30.0) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + within
    while len(rows) < want and time.monotonic() < deadline:
        rows += consumer.poll(max_records=10_000, timeout=0.5).to_pylist()
    return rows


def _micros(t: dt.datetime) -> int:
    return (t - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)


def test_the_arrow_columns_keep_their_order_and_add_the_metadata(cluster) -> None:
    topic = unique_topic("meta-schema")
    with (
        dafka.Consumer(topic, towers=cluster.towers, offset_reset="earliest") as c,
        dafka.Producer(topic, towers=cluster.towers) as p,
    ):
        p.send(b"v", key=b"k", headers=[("h", b"x")], timestamp=1_000_000)
        p.flush(timeout=20)
        batch = pa.Table.from_pylist(_rows(c, 1))
        schema = c.poll(max_records=1, timeout=0.1).schema
    assert schema.names == [
        "topic",
        "partition",
        "offset",
        "value",
        "timestamp",
        "timestampType",
        "key",
        "headers",
    ]
    assert schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert schema.field("timestampType").type == pa.int32()
    assert schema.field("key").type == pa.binary()
    header = schema.field("headers").type.value_type
    assert [(f.name, f.type) for f in header] == [("key", pa.string()), ("value", pa.binary())]
    assert batch.num_rows == 1


def test_key_headers_and_timestamp_reach_a_consumer_with_empty_large_and_absent_values(
    big_store: str,
) -> None:
    # A store that keeps the large records too: a consumer whose subscription reaches the
    # producer after them FETCHes them from it.
    topic = unique_topic("meta-live")
    big = bytes(range(256)) * (MIB // 256)
    at = dt.datetime(2026, 11, 27, 12, 0, 0, 123456, tzinfo=UTC)
    sent = [
        # (value, key, headers, timestamp)
        (b"absent", None, None, None),
        (b"empty", b"", [], 0),
        (b"", b"k1", {"trace": b"t-1", "null": None, "empty": b""}, at),
        (b"big-key", big, [("a", b"1"), ("a", b"2")], -1),
        (b"big-header", "str-key", [("blob", big)], 1_764_000_000_000_000),
    ]
    with (
        dafka.Consumer(topic, towers=big_store, offset_reset="earliest") as c,
        dafka.Producer(topic, towers=big_store, max_record_bytes=4 * MIB) as p,
    ):
        before = _micros(dt.datetime.now(UTC))
        for value, key, headers, ts in sent:
            p.send(value, key=key, headers=headers, timestamp=ts)
        after = _micros(dt.datetime.now(UTC))
        rows = _rows(c, len(sent))
    assert [r["value"] for r in rows] == [s[0] for s in sent]
    absent, empty, keyed, big_key, big_header = rows
    assert (absent["key"], absent["headers"]) == (None, None)
    assert before <= _micros(absent["timestamp"]) <= after, "the producer's clock at send"
    assert absent["timestampType"] == 0
    assert (empty["key"], empty["headers"]) == (b"", [])
    assert _micros(empty["timestamp"]) == 0
    assert keyed["key"] == b"k1"
    assert keyed["headers"] == [
        {"key": "trace", "value": b"t-1"},
        {"key": "null", "value": None},
        {"key": "empty", "value": b""},
    ]
    assert keyed["timestamp"] == at
    assert big_key["key"] == big and _micros(big_key["timestamp"]) == -1
    assert big_key["headers"] == [{"key": "a", "value": b"1"}, {"key": "a", "value": b"2"}]
    assert big_header["key"] == b"str-key"
    assert big_header["headers"] == [{"key": "blob", "value": big}]


def test_send_many_takes_a_record_batch_or_parallel_columns(cluster) -> None:
    topic = unique_topic("meta-many")
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_pydict(
        {
            "value": pa.array([b"a", b"b", b"c"]),
            "key": pa.array([b"ka", None, b""]),
            "headers": pa.array([[{"key": "h", "value": b"1"}], None, []], headers_type),
            # Milliseconds: converted to microseconds.
            "timestamp": pa.array([1, None, 3], pa.timestamp("ms", tz="UTC")),
            "topic": pa.array(["ignored"] * 3),
        }
    )
    with (
        dafka.Consumer(topic, towers=cluster.towers, offset_reset="earliest") as c,
        dafka.Producer(topic, towers=cluster.towers) as p,
    ):
        assert p.send_many(batch) == 0
        assert p.send_many(pa.Table.from_batches([batch])) == 3
        assert (
            p.send_many(
                [b"x", b"y"],
                keys=[b"kx", None],
                headers=[None, {"n": "text"}],
                timestamps=[dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), 5],
            )
            == 6
        )
        rows = _rows(c, 8)
    assert [r["value"] for r in rows] == [b"a", b"b", b"c"] * 2 + [b"x", b"y"]
    assert [r["key"] for r in rows[:3]] == [b"ka", None, b""]
    assert [r["headers"] for r in rows[:3]] == [[{"key": "h", "value": b"1"}], None, []]
    assert _micros(rows[0]["timestamp"]) == 1000 and _micros(rows[2]["timestamp"]) == 3000
    assert _micros(rows[1]["timestamp"]) > 1_700_000_000_000_000, "null: the producer's clock"
    # The Table sends the same rows: the same keys, headers and explicit timestamps.
    for a, b in zip(rows[:3], rows[3:6], strict=True):
        assert (a["key"], a["headers"]) == (b["key"], b["headers"])
    assert (rows[3]["timestamp"], rows[5]["timestamp"]) == (
        rows[0]["timestamp"],
        rows[2]["timestamp"],
    )
    assert [r["key"] for r in rows[6:]] == [b"kx", None]
    assert rows[7]["headers"] == [{"key": "n", "value": b"text"}]
    assert [_micros(r["timestamp"]) for r in rows[6:]] == [1_000_000, 5]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda p: p.send(b"v", key=3), "a record key must be bytes"),
        (lambda p: p.send(b"v", headers="h"), "headers must be a dict or a list"),
        (lambda p: p.send(b"v", headers=[("h", 1)]), "a header value must be bytes"),
        (lambda p: p.send(b"v", headers={1: b"x"}), "a header name must be str"),
        (lambda p: p.send(b"v", timestamp=1.5), "a timestamp must be an int"),
        (lambda p: p.send(b"v", timestamp=True), "not bool"),
        (lambda p: p.send(b"v", timestamp=dt.datetime(2026, 1, 1)), "naive datetime"),
        (lambda p: p.send(b"v", timestamp=1 << 70), "fit in 64 bits"),
        (lambda p: p.send_many([b"a", b"b"], keys=[b"k", 7]), "keys[1]"),
        (lambda p: p.send_many([b"a", b"b"], keys=[b"k"]), "keys has 1 entries for 2"),
        (lambda p: p.send_many([b"a", b"b"], timestamps=[1, "x"]), "timestamps[1]"),
        (lambda p: p.send_many([b"a"], headers=pa.array([1])), "list<struct"),
        (lambda p: p.send_many(None), "values must be a list, an iterable or an Arrow array"),
        (lambda p: p.send(b"v", headers=[("a",)]), "pair, not a tuple of 1"),
        # Checked before any record is sent: the size (value, key and headers) and the count.
        (lambda p: p.send_many([b"a", b"b"], keys=[b"k", b"x" * MIB]), "over the maximum"),
        (lambda p: p.send_many([b"a", b"b"], headers=[None, [("h", b"")] * 1025]), "1025 headers"),
        (lambda p: p.send_many(pa.RecordBatch.from_pydict({"v": [b"a"]})), "no 'value' column"),
        (
            lambda p: p.send_many(pa.RecordBatch.from_pydict({"value": [b"a"]}), keys=[b"k"]),
            "come from its key",
        ),
    ],
)
def test_a_bad_key_header_or_timestamp_is_refused_and_nothing_is_sent(
    cluster, call: Any, message: str
) -> None:
    topic = unique_topic("meta-bad")
    with (
        dafka.Consumer(topic, towers=cluster.towers, offset_reset="earliest") as c,
        dafka.Producer(topic, towers=cluster.towers) as p,
    ):
        p.send(b"first")
        with pytest.raises(dafka.InvalidArgumentError, match=re.escape(message)):
            call(p)
        p.send(b"last")
        rows = _rows(c, 2)
    assert [(r["offset"], r["value"]) for r in rows] == [(0, b"first"), (1, b"last")]


def test_offsets_for_times_and_topics_ask_the_stores(cluster) -> None:
    topic = unique_topic("meta-times")
    t0 = 1_764_000_000_000_000
    with dafka.Producer(topic, towers=cluster.towers) as p:
        p.send_many([b"%d" % i for i in range(100)], timestamps=[t0 + 1000 * i for i in range(100)])
        p.flush(timeout=20)
        partition = p.partition
    at_51 = dt.datetime.fromtimestamp((t0 + 50_500) / 1e6, UTC)
    with (
        dafka.PartitionReader(cluster.towers) as reader,
        dafka.Consumer([], towers=cluster.towers) as consumer,
    ):
        for asker in (reader, consumer):
            assert asker.offsets_for_times(topic, t0 + 50_500) == {partition: 51}
            assert asker.offsets_for_times(topic, {partition: at_51}) == {partition: 51}
            assert asker.offsets_for_times(topic, 0) == {partition: 0}
            assert asker.offsets_for_times(topic, t0 + 99_001) == {partition: None}
            unknown = "0" * 32
            assert asker.offsets_for_times(topic, {unknown: 0}) == {unknown: None}
            assert topic in asker.topics()
        with pytest.raises(dafka.InvalidArgumentError, match="naive datetime"):
            reader.offsets_for_times(topic, dt.datetime(2026, 1, 1))
