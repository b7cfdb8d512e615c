"""The dafka source's record columns, timestamp and pattern options, and the sink's record
columns, without a Spark session: the Arrow schema a task hands Spark, option checks,
offsets from timestamps on a fake store answer, the sink's column checks and batches."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pyspark.sql import Row
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

import dafka
from dafka import _spark_dafka
from dafka._spark_dafka import (
    _BATCH_READ,
    _STREAM_READ,
    _WRITE,
    DAFKA_SCHEMA,
    DAFKA_SCHEMA_WITH_HEADERS,
    READ_COLUMNS,
    DafkaBatchReader,
    DafkaStreamReader,
    _check_rows,
    _Options,
    _parse,
    _rows_to_batches,
    _write_options,
)
from dafka.errors import InvalidArgumentError

P, Q, R = "A" * 32, "B" * 32, "C" * 32
HEADER = pa.struct([("key", pa.utf8()), ("value", pa.binary())])
HEADERS = pa.list_(pa.field("element", HEADER))


def _batch(**extra: str) -> _Options:
    return _parse(
        {"towers": "tcp://127.0.0.1:1", "subscribe": "t", **extra}, _BATCH_READ, "batch reader"
    )


def _stream(**extra: str) -> _Options:
    return _parse({"towers": "tcp://127.0.0.1:1", **extra}, _STREAM_READ, "stream reader")


# Spark's types of the read schema (DDL needs a JVM to parse), and of sink rows.
BIN, STR, TS = T.BinaryType(), T.StringType(), T.TimestampType()
SPARK_HEADERS = T.ArrayType(T.StructType([T.StructField("key", STR), T.StructField("value", BIN)]))
READ_TYPES = {
    "key": BIN,
    "value": BIN,
    "topic": STR,
    "partition": STR,
    "offset": T.LongType(),
    "timestamp": TS,
    "timestampType": T.IntegerType(),
    "headers": SPARK_HEADERS,
}


def _struct(**fields: T.DataType) -> T.StructType:
    return T.StructType([T.StructField(name, kind) for name, kind in fields.items()])


@pytest.mark.parametrize("headers", [False, True])
def test_a_read_batch_is_exactly_the_arrow_schema_spark_checks(
    cluster: dafka.LocalCluster, headers: bool
) -> None:
    """Spark 4.2 compares the first batch's Arrow schema with its own for the DDL schema
    (names, order, types, nullability, list item names): the consumer's columns, picked."""
    columns = [*READ_COLUMNS, "headers"] if headers else list(READ_COLUMNS)
    ddl = DAFKA_SCHEMA_WITH_HEADERS if headers else DAFKA_SCHEMA
    assert ddl == ", ".join(f"{c} {READ_TYPES[c].simpleString()}" for c in columns)
    want = to_arrow_schema(_struct(**{c: READ_TYPES[c] for c in columns}), timezone="UTC")
    with dafka.PartitionReader(cluster.towers) as reader:
        batch = reader.poll(timeout=0.01)
    assert batch.select(columns).schema.equals(want), (batch.schema, want)
    assert [f.name for f in want] == columns


def test_include_headers_adds_the_headers_column() -> None:
    assert not _batch().include_headers
    assert _batch(includeHeaders="TRUE").include_headers
    source = _spark_dafka.DafkaDataSource(
        {"towers": "tcp://127.0.0.1:1", "subscribe": "t", "includeHeaders": "true"}
    )
    assert source.schema() == DAFKA_SCHEMA_WITH_HEADERS
    with pytest.raises(InvalidArgumentError, match="includeHeaders must be true or false"):
        _batch(includeHeaders="yes")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t", "subscribePattern": "t.*"}, "subscribe and subscribePattern"),
        ({}, "subscribe .* or subscribePattern .* is required"),
        ({"subscribePattern": "  "}, "subscribePattern must be a regular expression"),
        ({"subscribePattern": r"\p{L}+"}, r"not a regular expression .*\\p\{\.\.\.\}"),
        ({"subscribePattern": "(unclosed"}, "subscribePattern: '\\(unclosed'"),
        (
            {"subscribe": "t", "startingOffsets": "earliest", "startingTimestamp": "1"},
            "startingOffsets and startingTimestamp both say where the read starts",
        ),
        (
            {"subscribe": "t", "startingTimestamp": "1", "startingOffsetsByTimestamp": "{}"},
            "startingTimestamp and startingOffsetsByTimestamp both",
        ),
        ({"subscribe": "t", "startingTimestamp": "soon"}, "startingTimestamp must be milli"),
        ({"subscribe": "t", "startingTimestamp": "-5"}, "startingTimestamp must be milli"),
        ({"subscribe": "t", "startingTimestamp": "1.5"}, "startingTimestamp must be milli"),
        (
            {"subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"P": "x"}}'},
            "startingOffsetsByTimestamp must be JSON",
        ),
        (
            {"subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"P": -1}}'},
            "startingOffsetsByTimestamp must be JSON",
        ),
        (
            {"subscribe": "t", "startingOffsetsByTimestamp": '{"u": {"P": 1}}'},
            r"startingOffsetsByTimestamp names topics not subscribed: \['u'\]",
        ),
        (
            {"subscribePattern": "t-.*", "startingOffsets": '{"u": {"P": 1}}'},
            r"startingOffsets names topics subscribePattern does not match: \['u'\]",
        ),
        (
            {"subscribe": "t", "startingOffsetsByTimestampStrategy": "latest"},
            "startingOffsetsByTimestampStrategy applies only with startingTimestamp",
        ),
        (
            {
                "subscribe": "t",
                "startingTimestamp": "5",
                "startingOffsetsByTimestampStrategy": "earliest",
            },
            "startingOffsetsByTimestampStrategy must be error or latest",
        ),
    ],
)
def test_bad_subscriptions_and_timestamps_are_refused_naming_the_options(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        _stream(**options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"endingOffsets": "latest", "endingTimestamp": "5"},
            "endingOffsets and endingTimestamp both say where the read ends",
        ),
        (
            {"startingTimestamp": "2000", "endingTimestamp": "1000"},
            "startingTimestamp 2000 is after endingTimestamp 1000: the read would end",
        ),
        (
            {
                "startingOffsetsByTimestamp": json.dumps({"t": {P: 3000}}),
                "endingTimestamp": "1000",
            },
            f"startingOffsetsByTimestamp 3000 is after endingTimestamp 1000 for t/{P}",
        ),
        (
            {
                "startingTimestamp": "3000",
                "endingOffsetsByTimestamp": json.dumps({"t": {P: 1000}}),
            },
            f"startingTimestamp 3000 is after endingOffsetsByTimestamp 1000 for t/{P}",
        ),
    ],
)
def test_batch_ends_by_time_are_checked_against_the_start(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        _batch(**options)


def test_ending_options_are_for_a_batch_read_only() -> None:
    for name in ("endingTimestamp", "endingOffsetsByTimestamp"):
        with pytest.raises(InvalidArgumentError, match=f"{name} \\(for a dafka batch read only"):
            _stream(subscribe="t", **{name: "1"})


def test_subscribe_pattern_is_a_whole_name_java_style_regex() -> None:
    pattern = _stream(subscribePattern="sensor-(?<site>[a-z]+)\\.v[0-9]").pattern
    assert pattern is not None
    assert pattern.fullmatch("sensor-paris.v2")
    assert not pattern.fullmatch("sensor-paris.v2-old"), "Java's matches(): the whole name"
    assert not pattern.fullmatch("old-sensor-paris.v2")
    # An escaped parenthesis is no named group.
    assert _stream(subscribePattern=r"a\(?<b").pattern.fullmatch("a(<b")  # type: ignore[union-attr]


class _Times:
    """The stores' answers: bounds and, per topic, offsets by time (µs) of each partition's
    records, which have the timestamps `stamps` (µs) in offset order."""

    def __init__(self, stamps: dict[str, dict[str, list[int]]]) -> None:
        self.stamps = stamps
        self.asked: list[tuple[str, Any]] = []

    def bounds(self, *_: Any) -> dict[str, dict[str, tuple[int, int]]]:
        return {t: {p: (0, len(s)) for p, s in ps.items()} for t, ps in self.stamps.items()}

    def offsets_for_times(
        self, o: _Options, asked: dict[str, int | dict[str, int]]
    ) -> dict[str, dict[str, int | None]]:
        out: dict[str, dict[str, int | None]] = {}
        for t, times in asked.items():
            self.asked.append((t, times))
            parts = self.stamps.get(t, {})
            wanted = times if isinstance(times, dict) else dict.fromkeys(parts, times)
            out[t] = {
                p: next((i for i, s in enumerate(parts.get(p, [])) if s >= us), None)
                for p, us in wanted.items()
            }
        return out


@pytest.fixture
def times(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Times]:
    # Offsets 0..4 of P at 1, 2, 3, 4, 5 s; of Q at 3, 3, 9 s; R has none in topic t.
    s = _Times({"t": {P: [1, 2, 3, 4, 5], Q: [3, 3, 9]}})
    for part in s.stamps["t"].values():
        part[:] = [x * 1_000_000 for x in part]
    monkeypatch.setattr(_spark_dafka, "_bounds", s.bounds)
    monkeypatch.setattr(_spark_dafka, "_offsets_for_times", s.offsets_for_times)
    yield s


def _ranges(reader: DafkaBatchReader) -> dict[str, tuple[int, int]]:
    return {r.partition: (r.start, r.end) for r in reader.partitions()}


def test_starting_and_ending_timestamps_pick_the_first_offset_at_or_after(times: _Times) -> None:
    # Milliseconds in the options, microseconds asked of the stores.
    reader = DafkaBatchReader(_batch(startingTimestamp="3000"))
    assert times.asked == [("t", 3_000_000)]
    assert _ranges(reader) == {P: (2, 5), Q: (0, 3)}
    # Q's first record at or after 3.001 s is its last, at 9 s, past the end: nothing of Q.
    reader = DafkaBatchReader(_batch(startingTimestamp="3001", endingTimestamp="5000"))
    assert _ranges(reader) == {P: (3, 4)}
    # No record of P at or after the end: P ends at latest.
    assert _ranges(DafkaBatchReader(_batch(endingTimestamp="6000"))) == {P: (0, 5), Q: (0, 2)}
    # Exactly a record's time starts at it; a ms after it, at the next.
    assert _ranges(DafkaBatchReader(_batch(startingTimestamp="2000")))[P] == (1, 5)
    assert _ranges(DafkaBatchReader(_batch(startingTimestamp="2001")))[P] == (2, 5)


def test_a_start_without_a_record_that_recent_fails_or_starts_at_latest(times: _Times) -> None:
    with pytest.raises(
        InvalidArgumentError,
        match=f"no record of t/{P} has a timestamp at or after startingTimestamp 7000 "
        r"\(1970-01-01T00:00:07.000\+00:00\); set startingOffsetsByTimestampStrategy=latest",
    ):
        DafkaBatchReader(_batch(startingTimestamp="7000"))
    reader = DafkaBatchReader(
        _batch(startingTimestamp="7000", startingOffsetsByTimestampStrategy="latest")
    )
    assert _ranges(reader) == {Q: (2, 3)}, "P starts at latest: nothing to read"


def test_offsets_by_timestamp_per_partition(times: _Times) -> None:
    starting = json.dumps({"t": {P: 4000}})
    ending = json.dumps({"t": {Q: 9000}})
    reader = DafkaBatchReader(
        _batch(startingOffsetsByTimestamp=starting, endingOffsetsByTimestamp=ending)
    )
    # P from its record of 4 s to latest; Q (not named in the start) from earliest to its
    # record of 9 s, excluded.
    assert _ranges(reader) == {P: (3, 5), Q: (0, 2)}
    assert ("t", {P: 4_000_000}) in times.asked and ("t", {Q: 9_000_000}) in times.asked
    # A partition no store holds: an error by default; with "latest" read when it comes.
    unknown = json.dumps({"t": {R: 1000, P: 1000}})
    with pytest.raises(InvalidArgumentError, match=f"no record of t/{R}"):
        DafkaBatchReader(_batch(startingOffsetsByTimestamp=unknown))
    reader = DafkaBatchReader(
        _batch(startingOffsetsByTimestamp=unknown, startingOffsetsByTimestampStrategy="latest")
    )
    assert _ranges(reader) == {P: (0, 5), Q: (0, 3)}


def test_a_stream_starts_by_time_then_reads_new_partitions_from_earliest(times: _Times) -> None:
    reader = DafkaStreamReader(_stream(subscribe="t", startingTimestamp="4500"))
    assert reader.initialOffset() == {"t": {P: 4, Q: 2}}
    reader.stop()


class _Topics:
    """Stores holding a changing set of topics; bounds for `_Heads` and `_bounds` alike."""

    def __init__(self) -> None:
        self.held: dict[str, dict[str, tuple[int, int]]] = {}

    def get(self) -> dict[str, dict[str, tuple[int, int]]]:
        return dict(self.held)

    def stop(self) -> None:
        pass


def test_a_pattern_stream_reads_topics_that_come_to_match(monkeypatch: pytest.MonkeyPatch) -> None:
    stores = _Topics()
    stores.held = {"s-1": {P: (0, 10)}}
    monkeypatch.setattr(_spark_dafka, "_bounds", lambda o: stores.get())
    reader = DafkaStreamReader(_stream(subscribePattern="s-.*", startingOffsets="earliest"))
    reader._heads = stores  # type: ignore[assignment]
    start = reader.initialOffset()
    assert start == {"s-1": {P: 0}}
    first = reader.latestOffset(start, None)
    assert first == {"s-1": {P: 10}}
    stores.held["s-2"] = {Q: (0, 4)}
    second = reader.latestOffset(first, None)
    assert second == {"s-1": {P: 10}, "s-2": {Q: 4}}
    parts = reader.partitions(first, second)
    assert [(p.topic, p.partition, p.start, p.end) for p in parts] == [("s-2", Q, 0, 4)]


def test_bounds_with_a_pattern_lists_the_matching_topics(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    class Reader:
        def topics(self, timeout: float) -> list[str]:
            return ["s-1", "s-10", "x-s-1", "s-2"]

        def offsets(self, topic: str, timeout: float) -> dict[str, tuple[int, int]]:
            asked.append(topic)
            return {P: (0, 1)}

    monkeypatch.setattr(_spark_dafka, "_reader", lambda towers: Reader())
    got = _spark_dafka._bounds(_stream(subscribePattern="s-[0-9]"))
    assert got == {"s-1": {P: (0, 1)}, "s-2": {P: (0, 1)}}
    assert asked == ["s-1", "s-2"]


def _sink(fields: dict[str, T.DataType], **extra: str) -> Any:
    return _write_options(
        {"towers": "tcp://127.0.0.1:1", "topic": "out", **extra}, _struct(**fields)
    )


def _headers(key: T.DataType, value: T.DataType, names: tuple[str, str] = ("key", "value")) -> Any:
    return T.ArrayType(T.StructType([T.StructField(names[0], key), T.StructField(names[1], value)]))


def test_the_sink_sends_the_record_columns_the_rows_have() -> None:
    assert _sink({"value": BIN}).columns == (("value", "binary"),)
    w = _sink(
        {
            "timestamp": TS,
            "offset": T.LongType(),
            "key": STR,
            "value": STR,
            "partition": STR,
            "headers": SPARK_HEADERS,
        }
    )
    assert w.columns == (
        ("value", "string"),
        ("key", "string"),
        ("headers", "array<struct<key:string,value:binary>>"),
        ("timestamp", "timestamp"),
    )
    assert _sink({"value": BIN}, maxRecordBytes="4194304").options.max_record_bytes == 4 << 20
    assert _parse({"towers": "tcp://127.0.0.1:1"}, _WRITE, "sink").max_record_bytes == 1 << 20


@pytest.mark.parametrize(
    ("column", "kind", "message"),
    [
        ("key", T.IntegerType(), "key column must be a string or binary, not int"),
        ("headers", T.ArrayType(STR), "headers column must be an array<struct<key"),
        ("headers", _headers(STR, BIN, ("name", "value")), "headers column must be"),
        ("headers", _headers(BIN, BIN), "headers column must be"),
        ("headers", T.MapType(STR, BIN), "headers column must be"),
        ("timestamp", STR, "timestamp column must be a timestamp, not string"),
        ("timestamp", T.LongType(), "timestamp column must be a timestamp, not bigint"),
        ("timestamp", T.TimestampNTZType(), "timestamp without time zone is ambiguous"),
    ],
)
def test_the_sink_refuses_record_columns_of_the_wrong_type(
    column: str, kind: T.DataType, message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        _sink({"value": BIN, column: kind})
    # A header value may be a string (sent as its UTF-8).
    _sink({"value": BIN, "headers": _headers(STR, STR)})


def test_a_batch_with_a_null_value_or_a_nameless_header_is_refused_whole() -> None:
    ok = pa.record_batch(
        {
            "value": pa.array([b"a", b""]),
            "headers": pa.array([None, [{"key": "k", "value": None}]], HEADERS),
        }
    )
    _check_rows(ok)
    with pytest.raises(InvalidArgumentError, match="value of row 1 of a batch is null"):
        _check_rows(pa.record_batch({"value": pa.array([b"a", None])}))
    nameless = pa.record_batch(
        {
            "value": pa.array([b"a", b"b"]),
            "headers": pa.array([[], [{"key": None, "value": b"v"}]], HEADERS),
        }
    )
    with pytest.raises(InvalidArgumentError, match="a header of the batch has a null key"):
        _check_rows(nameless)


def test_spark_4_0_rows_become_batches_with_every_record_column(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # PySpark hands a timestamp to Python as a naive datetime in the process's time zone.
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    fields = {"value": STR, "key": BIN, "headers": _headers(STR, STR), "timestamp": TS}
    w = _write_options({"towers": "tcp://127.0.0.1:1"}, _struct(**fields, topic=STR))
    local = dt.datetime(2026, 3, 1, 12, 0, 0, 5)  # a naive datetime: this process's local time
    rows = [
        Row(value="v0", key=None, headers=None, timestamp=None, topic="a"),
        Row(
            value="v1",
            key=bytearray(b"k"),
            headers=[Row(key="h", value="x"), Row(key="n", value=None)],
            timestamp=local,
            topic="b",
        ),
    ]
    (batch,) = list(_rows_to_batches(iter(rows), w))
    assert batch.schema.names == ["value", "key", "headers", "timestamp", "topic"]
    assert batch.column("key").to_pylist() == [None, b"k"]
    assert batch.column("headers").to_pylist() == [
        None,
        [{"key": "h", "value": b"x"}, {"key": "n", "value": None}],
    ]
    monkeypatch.delenv("TZ")
    time.tzset()
    assert batch.column("timestamp").to_pylist() == [
        None,
        dt.datetime(2026, 3, 1, 6, 30, 0, 5, tzinfo=dt.UTC),  # 12:00 at +05:30
    ]


class _Producers:
    """Fake producers of the sink's tasks: what each topic was sent, batch by batch."""

    def __init__(self) -> None:
        self.sent: dict[str, list[pa.RecordBatch]] = {}

    def __call__(self, o: _Options, topic: str) -> Any:
        sent = self.sent.setdefault(topic, [])

        class Producer:
            partition = P

            def send_many(self, batch: pa.RecordBatch) -> int:
                sent.append(batch)
                return 0

            def flush(self, timeout: float) -> None:
                pass

        return Producer()


def test_the_sink_sends_each_batch_per_topic_with_its_record_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    producers = _Producers()
    monkeypatch.setattr(_spark_dafka, "_producer", producers)
    fields = {"topic": STR, "key": BIN, "value": BIN, "timestamp": TS, "offset": T.LongType()}
    batch = pa.record_batch(
        {
            "topic": pa.array(["a", "b", "a"]),
            "key": pa.array([b"k0", None, b"k2"]),
            "value": pa.array([b"v0", b"v1", b"v2"]),
            "timestamp": pa.array([1, 2, None], pa.timestamp("us", tz="Europe/Paris")),
            "offset": pa.array([7, 8, 9]),
        }
    )
    # The topic column: rows go to their topics, with value, key and timestamp only.
    w = _write_options({"towers": "tcp://127.0.0.1:1"}, _struct(**fields))
    commit = _spark_dafka._write_batches(iter([batch]), w)
    assert sorted(commit.sent) == [("a", P, 2), ("b", P, 1)]
    (a,) = producers.sent["a"]
    assert a.schema.names == ["value", "key", "timestamp"]
    assert a.column("key").to_pylist() == [b"k0", b"k2"]
    assert a.column("timestamp").cast(pa.int64()).to_pylist() == [1, None]
    # Option topic: every row to it, whatever the column says (Kafka's sink).
    producers.sent.clear()
    w = _write_options({"towers": "tcp://127.0.0.1:1", "topic": "out"}, _struct(**fields))
    _spark_dafka._write_batches(iter([batch]), w)
    assert list(producers.sent) == ["out"] and producers.sent["out"][0].num_rows == 3
    # A null topic without the option, or a nameless header: that batch sends nothing.
    producers.sent.clear()
    w = _write_options({"towers": "tcp://127.0.0.1:1"}, _struct(**fields))
    nulled = batch.set_column(0, "topic", pa.array(["a", None, "a"]))
    with pytest.raises(InvalidArgumentError, match="a row has a null topic"):
        _spark_dafka._write_batches(iter([batch, nulled]), w)
    assert [b.num_rows for b in producers.sent["a"]] == [2], "only the first batch"
