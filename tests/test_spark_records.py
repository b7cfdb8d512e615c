"""Records with keys, headers and timestamps through the ``dafka`` Spark source and sink
(issue 25): producer -> store -> Spark -> sink -> store, batch and streaming; the same rows
from two stores and from a re-read; a stream killed mid-batch and restarted writes what an
uninterrupted one writes; the timestamp options and subscribePattern."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import unique_topic

import dafka

from records_util import MAX_RECORD, RECORDS, as_records, expected, matches, now_us, read_all

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _read(spark: Any, towers: str, topic: str, **options: str) -> Any:
    r = spark.read.format("dafka").option("towers", towers).option("subscribe", topic)
    return r.options(**options).load()


def _stream(spark: Any, towers: str, **options: str) -> Any:
    """A stream from the earliest records, unless `options` say where it starts."""
    r = spark.readStream.format("dafka").option("towers", towers)
    if not any(k.startswith("starting") for k in options):
        r = r.option("startingOffsets", "earliest")
    return r.options(**options).load()


def _rows(df: Any) -> pa.Table:
    """The rows of `df` as Arrow, in topic, partition and offset order."""
    return df.orderBy("topic", "partition", "offset").toArrow()


def _offsets(df: Any) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r in df.select("partition", "offset").collect():
        out.setdefault(r["partition"], []).append(r["offset"])
    return {p: sorted(o) for p, o in out.items()}


def test_key_headers_and_timestamp_round_trip_through_spark_batch_and_streaming(
    spark: Any, big_store: str, tmp_path: Path
) -> None:
    """Producer -> store -> Spark (batch and stream) -> sink -> store: key, headers and
    timestamp of each record as sent, with empty, 1 MiB and absent values of each."""
    towers = big_store
    t, out, streamed = unique_topic("rt"), unique_topic("rt-out"), unique_topic("rt-stream")
    with dafka.Producer(t, towers=towers, max_record_bytes=MAX_RECORD) as p:
        before = now_us()
        for value, key, headers, stamp in RECORDS:
            p.send(value, key=key, headers=headers, timestamp=stamp)
        p.flush(timeout=30)
        after = now_us()
    want = expected(RECORDS, (before, after))
    assert matches(as_records(read_all(towers, t)), want), "producer -> store -> consumer"

    df = _read(spark, towers, t, includeHeaders="true")
    assert df.columns == [*COLUMNS, "headers"]
    table = _rows(df)
    read = as_records(table)
    assert matches(read, want), [r[1:] for r in read if len(r[0]) < 100]
    assert set(table.column("topic").to_pylist()) == {t}
    assert table.column("offset").to_pylist() == list(range(len(RECORDS)))
    # Without includeHeaders: no headers column, the rest the same.
    assert _read(spark, towers, t).columns == COLUMNS

    # Batch sink: the read's key, value, headers and timestamp columns as they are.
    (
        df.coalesce(1)
        .write.format("dafka")
        .option("towers", towers)
        .option("topic", out)
        .option("maxRecordBytes", str(MAX_RECORD))
        .mode("append")
        .save()
    )
    assert as_records(read_all(towers, out)) == read

    # Streaming: the topic read by a stream, written by the stream sink.
    query = (
        _stream(spark, towers, subscribe=t, includeHeaders="true")
        .select("key", "value", "headers", "timestamp")
        .writeStream.format("dafka")
        .option("towers", towers)
        .option("topic", streamed)
        .option("maxRecordBytes", str(MAX_RECORD))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert as_records(read_all(towers, streamed)) == read


def test_the_same_offsets_read_twice_from_two_stores_give_identical_rows(
    spark: Any, tmp_path: Path
) -> None:
    """Two stores, each behind its own tower, acknowledge every record (min_acks=2); Spark
    reads the same offsets through one, then the other, then the first again: identical
    rows, timestamps included (the producer's, not each store's receive time)."""
    t = unique_topic("twice")
    with (
        dafka.Tower(sub="tcp://127.0.0.1:0") as a,
        dafka.Tower(sub="tcp://127.0.0.1:0") as b,
        dafka.Store(tmp_path / "a", towers=a.towers, sync="never"),
        dafka.Store(tmp_path / "b", towers=b.towers, sync="never"),
    ):
        for k in range(2):
            with dafka.Producer(t, towers=f"{a.towers},{b.towers}", min_acks=2) as p:
                for i in range(500):
                    # A key on every other record, explicit times on every third.
                    p.send(
                        b"%d-%d" % (k, i),
                        key=b"k%d" % i if i % 2 else None,
                        headers={"i": b"%d" % i} if i % 5 == 0 else None,
                        timestamp=(T0_MS + i) * 1000 if i % 3 == 0 else None,
                    )
                    if i % 100 == 99:
                        time.sleep(0.01)  # the default times move on
                p.flush(timeout=30)
        first = _rows(_read(spark, a.towers, t, includeHeaders="true"))
        second = _rows(_read(spark, b.towers, t, includeHeaders="true"))
        again = _rows(_read(spark, a.towers, t, includeHeaders="true"))
    assert first.num_rows == 1000
    assert first.equals(second), "store b served other rows than store a"
    assert first.equals(again), "a second read of store a gave other rows"
    stamps = first.column("timestamp").cast(pa.int64()).to_pylist()
    assert len(set(stamps)) > 10, "the producer's clock, not one time for all"
    assert set(first.column("timestampType").to_pylist()) == {0}


def _slow(marks: Path) -> Any:
    """A Python UDF passing a value through, 2 ms a row (a 500-row micro-batch lasts about half
    a second on 2 cores: long enough to stop a query in the middle of one), and marking in
    `marks` each hundredth offset it reaches (a micro-batch's tasks are running)."""
    from pyspark.sql.functions import udf

    def slow(offset: int, value: bytes) -> bytes:
        if offset % 100 == 0:
            (marks / uuid.uuid4().hex).touch()
        time.sleep(0.002)
        return value

    return udf(slow, "binary", useArrow=False)


OUT = "topic string, partition string, offset bigint, key binary, value binary, timestamp timestamp"


def test_a_stream_killed_mid_batch_and_restarted_writes_what_an_uninterrupted_run_writes(
    spark: Any, cluster: dafka.LocalCluster, tmp_path: Path
) -> None:
    """The same stream into Parquet (exactly once through its metadata log), run twice: once
    straight through, once stopped while a micro-batch's tasks run (its files half written,
    nothing of it committed) and restarted from the checkpoint. The two outputs are the same
    rows, keys and record timestamps included."""
    t = unique_topic("kill")
    for k in range(3):
        with dafka.Producer(t, towers=cluster.towers) as p:
            p.send_many(
                [b"%d-%d" % (k, i) for i in range(800)],
                keys=[b"k%d" % (i % 7) for i in range(800)],
            )
            p.flush(timeout=30)

    def start(name: str, trigger: dict[str, Any], **options: str) -> Any:
        marks = tmp_path / f"{name}-marks"
        marks.mkdir(exist_ok=True)
        stream = _stream(spark, cluster.towers, subscribe=t, **options)
        return (
            stream.select(
                "topic",
                "partition",
                "offset",
                "key",
                _slow(marks)("offset", "value").alias("value"),
                "timestamp",
            )
            .writeStream.format("parquet")
            .option("path", str(tmp_path / name))
            .option("checkpointLocation", str(tmp_path / f"{name}-ckpt"))
            .trigger(**trigger)
            .start()
        ), marks

    query, _ = start("straight", {"availableNow": True})
    assert query.awaitTermination(180) and query.exception() is None

    # Micro-batches of 500 records: stopped in the second.
    query, marks = start(
        "killed", {"processingTime": "100 milliseconds"}, maxOffsetsPerTrigger="500"
    )
    try:
        deadline = time.monotonic() + 120
        # Past the first committed micro-batch, and into the tasks of the next.
        while not [p for p in query.recentProgress if p["numInputRows"]]:
            assert time.monotonic() < deadline and query.exception() is None
            time.sleep(0.05)
        committed = len(list(marks.iterdir()))
        while len(list(marks.iterdir())) == committed:
            assert time.monotonic() < deadline and query.exception() is None
            time.sleep(0.02)
    finally:
        query.stop()
    done = [p for p in query.recentProgress if p["numInputRows"]]
    assert sum(p["numInputRows"] for p in done) < 2400, "the query ended before it was stopped"
    query, _ = start("killed", {"availableNow": True})
    assert query.awaitTermination(180) and query.exception() is None
    # The stopped micro-batch was in the offset log: run again with its offsets (500 records,
    # though the restart has no cap), then the rest.
    again = [p for p in query.recentProgress if p["numInputRows"]]
    assert again[0]["batchId"] == done[-1]["batchId"] + 1, (done, again)
    assert again[0]["numInputRows"] == 500, again

    def output(name: str) -> pa.Table:
        df = spark.read.schema(OUT).parquet(str(tmp_path / name))
        return df.orderBy("partition", "offset").toArrow()

    straight, restarted = output("straight"), output("killed")
    assert straight.num_rows == 2400
    assert restarted.equals(straight)


def _timed(towers: str, topic: str, stamps_ms: list[float]) -> str:
    """A partition of `topic` with a record per time of `stamps_ms` (its value the index)."""
    with dafka.Producer(topic, towers=towers) as p:
        p.send_many(
            [b"%d" % i for i in range(len(stamps_ms))],
            timestamps=[int((T0_MS + ms) * 1000) for ms in stamps_ms],
        )
        p.flush(timeout=30)
        return p.partition


def test_timestamp_options_start_and_end_at_the_first_offset_at_or_after_the_time(
    spark: Any, cluster: dafka.LocalCluster, tmp_path: Path
) -> None:
    """Milliseconds in the options (as Kafka's); a partition starts (ends) at its first record
    whose timestamp is at or after the time, also when the times are out of order."""
    t = unique_topic("times")
    # P: a record a second, 250 µs past the second; Q: out of order.
    p = _timed(cluster.towers, t, [i * 1000 + 0.25 for i in range(10)])
    q = _timed(cluster.towers, t, [5000, 1000, 12_000, 2000])

    def offsets(**options: str) -> dict[str, list[int]]:
        return _offsets(_read(spark, cluster.towers, t, **options))

    def ms(offset: int) -> str:
        return str(T0_MS + offset)

    # The ms of P's record 3 (but for its 250 µs): record 3; Q's first at or after: 0 (5 s).
    assert offsets(startingTimestamp=ms(3000)) == {p: list(range(3, 10)), q: [0, 1, 2, 3]}
    assert offsets(startingTimestamp=ms(3001)) == {p: list(range(4, 10)), q: [0, 1, 2, 3]}
    # P from 6 s to before 9 s; Q's first at or after 6 s and at or after 9 s are both its
    # record of 12 s: nothing of Q.
    assert offsets(startingTimestamp=ms(6000), endingTimestamp=ms(9000)) == {p: [6, 7, 8]}
    # Per partition; a partition not named starts at earliest, ends at latest.
    got = offsets(
        startingOffsetsByTimestamp=json.dumps({t: {p: T0_MS + 7000}}),
        endingOffsetsByTimestamp=json.dumps({t: {q: T0_MS + 6000}}),
    )
    assert got == {p: [7, 8, 9], q: [0, 1]}
    # No record of P at or after 9.5 s: the read fails, or P starts at latest.
    with pytest.raises(Exception, match=f"no record of {t}/{p} has a timestamp at or after"):
        offsets(startingTimestamp=ms(9500))
    assert offsets(startingTimestamp=ms(9500), startingOffsetsByTimestampStrategy="latest") == {
        q: [2, 3]
    }

    # A stream starts where the time says.
    query = (
        _stream(spark, cluster.towers, subscribe=t, startingTimestamp=ms(8000))
        .writeStream.format("memory")
        .queryName("bytime")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120) and query.exception() is None
    assert _offsets(spark.table("bytime")) == {p: [8, 9], q: [2, 3]}


def _produce(towers: str, topic: str, n: int) -> str:
    with dafka.Producer(topic, towers=towers) as p:
        p.send_many([b"%d" % i for i in range(n)])
        p.flush(timeout=30)
        return p.partition


def test_subscribe_pattern_reads_the_topics_whose_whole_names_match(
    spark: Any, cluster: dafka.LocalCluster, tmp_path: Path
) -> None:
    prefix = unique_topic("pat")
    for name, n in (("a", 3), ("b", 5), ("ab", 7)):
        _produce(cluster.towers, f"{prefix}-{name}", n)
    _produce(cluster.towers, f"x{prefix}-a", 11)
    df = (
        spark.read.format("dafka")
        .option("towers", cluster.towers)
        .option("subscribePattern", f"{prefix}-[ab]")
        .load()
    )
    counts = {r["topic"]: r["count"] for r in df.groupBy("topic").count().collect()}
    assert counts == {f"{prefix}-a": 3, f"{prefix}-b": 5}
    none = spark.read.format("dafka").option("towers", cluster.towers)
    assert none.option("subscribePattern", f"{prefix}-z.*").load().count() == 0

    # A stream reads the matching topics and, at its next triggers, those that come to match.
    _produce(cluster.towers, f"{prefix}-s1", 4)
    query = (
        _stream(spark, cluster.towers, subscribePattern=f"{prefix}-s[0-9]")
        .writeStream.format("memory")
        .queryName("pattern")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    def topics() -> dict[str, int]:
        rows = spark.table("pattern").groupBy("topic").count().collect()
        return {r["topic"]: r["count"] for r in rows}

    try:
        deadline = time.monotonic() + 60
        while topics() != {f"{prefix}-s1": 4}:
            assert time.monotonic() < deadline and query.exception() is None, topics()
            time.sleep(0.2)
        _produce(cluster.towers, f"{prefix}-s2", 6)
        _produce(cluster.towers, f"{prefix}-sx", 8)
        while topics() != {f"{prefix}-s1": 4, f"{prefix}-s2": 6}:
            assert time.monotonic() < deadline and query.exception() is None, topics()
            time.sleep(0.2)
        time.sleep(1.0)
        assert topics() == {f"{prefix}-s1": 4, f"{prefix}-s2": 6}
    finally:
        query.stop()


def test_the_sink_refuses_bad_keys_headers_and_timestamps_and_sends_nothing(
    spark: Any, cluster: dafka.LocalCluster
) -> None:
    """A key, headers or timestamp column of a type a record cannot take fails the write
    when it is built; a null value or a header without a name fails the batch before any
    of it is sent. The topic stays empty."""
    t = unique_topic("sink-bad")
    rows = spark.range(100).coalesce(1)
    nameless = "named_struct('key', cast(null as string), 'value', cast('v' as binary))"
    named = "named_struct('key', 'k', 'value', cast('v' as binary))"
    cases = [
        (["cast(id as string) value", "id key"], "key column must be a string or binary"),
        (
            ["cast(id as string) value", "array(named_struct('key', 1, 'value', 'x')) headers"],
            "headers column must be an array<struct<key:string,value:binary>>",
        ),
        (
            ["cast(id as string) value", "cast(id as string) timestamp"],
            "timestamp column must be a timestamp, not string",
        ),
        (
            ["cast(id as string) value", "timestamp_ntz'2026-01-01 00:00:00' timestamp"],
            "timestamp without time zone is ambiguous",
        ),
        (
            [
                "cast(id as string) value",
                f"array(if(id = 50, {nameless}, {named})) headers",
            ],
            "a header of the batch has a null key",
        ),
        (
            ["if(id = 50, null, cast(id as string)) value", "timestamp_micros(id) timestamp"],
            "the value of row 50 of a batch is null",
        ),
    ]
    for columns, message in cases:
        with pytest.raises(Exception, match=message):
            (
                rows.selectExpr(*columns)
                .write.format("dafka")
                .option("towers", cluster.towers)
                .option("topic", t)
                .mode("append")
                .save()
            )
    with dafka.PartitionReader(cluster.towers) as reader:
        assert reader.offsets(t) == {}, "a record of a refused write was sent"
