"""The ``dafka`` Spark data source end to end on a LocalCluster: batch and streaming reads,
the sink, options and failures. One SparkSession (conftest) and one cluster per module."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import Retained, unique_topic

import dafka
from dafka.spark import DAFKA_SCHEMA

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _topic() -> str:
    return unique_topic("sp")


def _produce(towers: str, topic: str, values: list[bytes]) -> str:
    with dafka.Producer(topic, towers=towers) as p:
        if values:
            p.send_many(values)
        p.flush(timeout=30)
        return p.partition


def _read(spark: Any, cluster: dafka.LocalCluster, topic: str, **options: str) -> Any:
    r = spark.read.format("dafka").option("towers", cluster.towers).option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _stream(spark: Any, cluster: dafka.LocalCluster, topic: str, **options: str) -> Any:
    """A stream of `topic` from its earliest records (`options` may say otherwise)."""
    r = spark.readStream.format("dafka").option("towers", cluster.towers)
    r = r.option("subscribe", topic).option("startingOffsets", "earliest")
    return r.options(**options).load()


def _sizes(query: Any) -> list[int]:
    """Rows of each micro-batch that read any, in order."""
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_batch_read_every_record_of_several_partitions(
    spark: Any, cluster: dafka.LocalCluster
) -> None:
    t = _topic()
    sizes = [3000, 2000, 1]
    parts = {
        _produce(cluster.towers, t, [b"%d-%d" % (k, i) for i in range(n)]): (k, n)
        for k, n in enumerate(sizes)
    }
    df = _read(spark, cluster, t)
    assert df.schema.simpleString() == spark.createDataFrame([], DAFKA_SCHEMA).schema.simpleString()
    rows = df.select("topic", "partition", "offset", "value").collect()
    assert len(rows) == sum(sizes)
    got = {(r["partition"], r["offset"]): bytes(r["value"]) for r in rows}
    want = {(p, i): b"%d-%d" % (k, i) for p, (k, n) in parts.items() for i in range(n)}
    assert got == want
    assert {r["topic"] for r in rows} == {t}

    # endingOffsets (JSON, -1 = latest) and startingOffsets (JSON, -2 = earliest).
    big = next(p for p, (_, n) in parts.items() if n == 3000)
    small = next(p for p, (_, n) in parts.items() if n == 2000)
    ending = json.dumps({t: {big: 100, small: -1}})
    starting = json.dumps({t: {big: 10, small: -2}})
    df = _read(spark, cluster, t, startingOffsets=starting, endingOffsets=ending)
    offsets = sorted(
        (r["partition"], r["offset"]) for r in df.select("partition", "offset").collect()
    )
    want_offsets = sorted([(big, i) for i in range(10, 100)] + [(small, i) for i in range(2000)])
    one = next(p for p, (_, n) in parts.items() if n == 1)
    assert offsets == sorted([*want_offsets, (one, 0)])

    # minPartitions splits the ranges across more tasks; the rows stay the same.
    df = _read(spark, cluster, t, minPartitions="8")
    assert df.rdd.getNumPartitions() >= 8
    assert df.count() == sum(sizes)


def test_bad_options_fail_at_once_naming_the_option(
    spark: Any, cluster: dafka.LocalCluster
) -> None:
    cases = [
        ({"subscribe": "x"}, "towers is required"),
        ({"towers": cluster.towers}, "subscribe .* or subscribePattern .* is required"),
        ({"towers": cluster.towers, "subscribe": "x", "bogus": "1"}, "unknown option.*bogus"),
        ({"towers": cluster.towers, "subscribe": "x", "minPartitions": "zero"}, "minPartitions"),
        ({"towers": cluster.towers, "subscribe": "x", "startingOffsets": "{"}, "startingOffsets"),
        ({"towers": cluster.towers, "subscribe": "x", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"towers": "127.0.0.1:1", "subscribe": "x"}, "towers"),
    ]
    for options, message in cases:
        started = time.monotonic()
        with pytest.raises(Exception, match=message):
            spark.read.format("dafka").options(**options).load().collect()
        assert time.monotonic() - started < 30


def test_batch_read_with_nothing_to_read_is_empty(spark: Any, cluster: dafka.LocalCluster) -> None:
    """Nothing to read is an empty DataFrame with the source's schema (issue 21, item 7a:
    pyspark's stand-in partition for an empty plan failed the task with AssertionError); a
    start past the end fails when the query is built, naming the offsets."""
    schema = spark.createDataFrame([], DAFKA_SCHEMA).schema.simpleString()
    t = _topic()
    p = _produce(cluster.towers, t, [b"%d" % i for i in range(10)])
    empty = {
        "a topic nobody wrote": (_topic(), {}),
        "latest on a finished topic": (t, {"startingOffsets": "latest"}),
        "start == end": (
            t,
            {
                "startingOffsets": json.dumps({t: {p: 4}}),
                "endingOffsets": json.dumps({t: {p: 4}}),
            },
        ),
    }
    for case, (topic, options) in empty.items():
        df = _read(spark, cluster, topic, **options)
        assert df.schema.simpleString() == schema, case
        assert df.collect() == [], case
    past = f"startingOffsets 7 of {t}/{p} is past its endingOffsets 3"
    with pytest.raises(Exception, match=past):
        _read(
            spark,
            cluster,
            t,
            startingOffsets=json.dumps({t: {p: 7}}),
            endingOffsets=json.dumps({t: {p: 3}}),
        ).collect()


def test_unreachable_towers_fail_within_the_offsets_timeout(spark: Any) -> None:
    started = time.monotonic()
    with pytest.raises(Exception, match="no store answered within"):
        (
            spark.read.format("dafka")
            .option("towers", "tcp://127.0.0.1:9")
            .option("subscribe", "x")
            .option("offsetsTimeout", "1")
            .load()
            .collect()
        )
    assert time.monotonic() - started < 30


def _keep_producing(
    towers: str,
    topic: str,
    stop: threading.Event,
    sent: list[int],
    chunk: int = 500,
    pause: float = 0.05,
) -> threading.Thread:
    """A producer of its own partition writing `chunk` records every `pause` s until `stop`;
    `sent[0]` counts them."""

    def run() -> None:
        with dafka.Producer(topic, towers=towers) as p:
            i = 0
            while not stop.is_set():
                p.send_many([b"%d" % n for n in range(i, i + chunk)])
                i += chunk
                sent[0] = i
                time.sleep(pause)
            p.flush(timeout=30)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


_OUT = "partition string, offset bigint, value binary"


def _wait_rows(spark: Any, path: Path, n: int, within: float = 120.0) -> int:
    deadline = time.monotonic() + within
    got = 0
    while time.monotonic() < deadline:
        if (path / "_spark_metadata").is_dir():
            # Through the sink's metadata log: committed files only.
            got = spark.read.schema(_OUT).parquet(str(path)).count()
            if got >= n:
                return got
        time.sleep(0.5)
    return got


def test_streaming_read_restarts_from_its_checkpoint_exactly_once(
    spark: Any, cluster: dafka.LocalCluster, tmp_path: Path
) -> None:
    t = _topic()
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    stop, sent = threading.Event(), [0]
    producer = _keep_producing(cluster.towers, t, stop, sent)
    time.sleep(1.0)

    def start() -> Any:
        stream = (
            spark.readStream.format("dafka")
            .option("towers", cluster.towers)
            .option("subscribe", t)
            .option("startingOffsets", "earliest")
            .load()
        )
        return (
            stream.select("partition", "offset", "value")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    query = start()
    try:
        assert _wait_rows(spark, out, 2000) >= 2000
    finally:
        query.stop()
    query = start()
    try:
        time.sleep(2.0)
        stop.set()
        producer.join(timeout=30)
        total = sent[0]
        assert _wait_rows(spark, out, total) >= total
    finally:
        query.stop()
    rows = spark.read.schema(_OUT).parquet(str(out)).collect()
    offsets = sorted(r["offset"] for r in rows)
    assert offsets == list(range(total)), "no record lost or repeated across the restart"
    assert all(bytes(r["value"]) == b"%d" % r["offset"] for r in rows)


def test_max_offsets_per_trigger_bounds_each_micro_batch(
    spark: Any, cluster: dafka.LocalCluster, tmp_path: Path
) -> None:
    import pyspark

    t = _topic()
    for _ in range(2):
        _produce(cluster.towers, t, [b"x%d" % i for i in range(1500)])
    query = (
        _stream(spark, cluster, t, maxOffsetsPerTrigger="700")
        .writeStream.format("memory")
        .queryName("capped")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )

    def wait(n: int) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and spark.table("capped").count() < n:
            time.sleep(0.5)

    try:
        wait(1)
        # More records once the first micro-batch ran (Spark 4.0/4.1 cannot cap the first).
        for _ in range(2):
            _produce(cluster.towers, t, [b"y%d" % i for i in range(1500)])
        wait(6000)
        sizes = _sizes(query)
    finally:
        query.stop()
    assert sum(sizes) == 6000
    assert max(sizes[1:]) <= 700, sizes
    assert len(sizes) >= 6, sizes
    if tuple(int(x) for x in pyspark.__version__.split(".")[:2]) >= (4, 2):
        # The start and the ReadLimit reach latestOffset: the first micro-batch is capped too.
        assert sizes[0] <= 700, sizes


def test_available_now_reads_everything_in_capped_micro_batches_then_stops(
    spark: Any, cluster: dafka.LocalCluster, tmp_path: Path
) -> None:
    """trigger(availableNow=True) with maxOffsetsPerTrigger: several micro-batches of exactly
    the cap (the last one less), every record there when the query started read once, and the
    query stops by itself although a producer keeps writing (it reads up to the heads of its
    start, not what comes after)."""
    t = _topic()
    written = {_produce(cluster.towers, t, [b"%d" % i for i in range(1500)]) for _ in range(2)}
    stop, sent = threading.Event(), [0]
    # 200 records/s: a few thousand by the time the query has started.
    producer = _keep_producing(cluster.towers, t, stop, sent, chunk=20, pause=0.1)
    try:
        while sent[0] < 200:
            time.sleep(0.05)
        started = time.monotonic()
        query = (
            _stream(spark, cluster, t, maxOffsetsPerTrigger="700")
            .select("partition", "offset", "value")
            .writeStream.format("memory")
            .queryName("availablenow")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(180), "the availableNow query did not stop by itself"
            took = time.monotonic() - started
            sizes = _sizes(query)
        finally:
            query.stop()
        assert sent[0] > 0 and not stop.is_set()
    finally:
        stop.set()
        producer.join(timeout=30)
    assert query.exception() is None
    rows = spark.table("availablenow").collect()
    by_partition: dict[str, list[int]] = {}
    for r in rows:
        by_partition.setdefault(r["partition"], []).append(r["offset"])
        assert bytes(r["value"]) == b"%d" % r["offset"]
    for p, offsets in by_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), f"{p}: a gap or a repeat"
    for p in written:
        assert len(by_partition[p]) == 1500, p
    live = next(p for p in by_partition if p not in written)
    assert len(by_partition[live]) >= 200
    assert len(by_partition[live]) < sent[0], "read records written after the query started"
    # Every micro-batch but the last takes exactly the cap.
    assert sum(sizes) == len(rows)
    assert len(sizes) == -(-len(rows) // 700) >= 5, sizes
    assert all(n == 700 for n in sizes[:-1]) and 0 < sizes[-1] <= 700, sizes
    print(f"availableNow: {len(rows)} rows in {len(sizes)} micro-batches, {took:.1f} s")


def test_min_offsets_per_trigger_holds_a_batch_and_max_trigger_delay_releases_it(
    spark: Any, cluster: dafka.LocalCluster, tmp_path: Path
) -> None:
    t = _topic()
    delay = 10.0
    partition = _produce(cluster.towers, t, [b"a%d" % i for i in range(300)])
    query = (
        _stream(spark, cluster, t, minOffsetsPerTrigger="1000", maxTriggerDelay=f"{delay:.0f}s")
        .writeStream.format("memory")
        .queryName("minoffsets")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="250 milliseconds")
        .start()
    )

    def count() -> int:
        return int(spark.table("minoffsets").count())

    def wait_for(n: int, within: float) -> float:
        started = time.monotonic()
        while count() < n:
            assert time.monotonic() - started < within, f"{count()} rows, not {n}"
            time.sleep(0.2)
        return time.monotonic()

    try:
        # 300 records wait, fewer than minOffsetsPerTrigger: no micro-batch reads them.
        waited = time.monotonic()
        while time.monotonic() - waited < 3.0:
            assert count() == 0, "a micro-batch ran with 300 records of the 1000 asked"
            time.sleep(0.2)
        # 1100 wait: the next trigger reads them all, in one micro-batch.
        _produce(cluster.towers, t, [b"b%d" % i for i in range(800)])
        first = wait_for(1100, 60)
        assert _sizes(query) == [1100]
        # 100 more, and no others: held while maxTriggerDelay has not passed since the last
        # micro-batch, then read without more records arriving.
        with dafka.Producer(t, towers=cluster.towers) as p:
            p.send_many([b"c%d" % i for i in range(100)])
            p.flush(timeout=30)
        held = time.monotonic()
        while time.monotonic() - held < 3.0:
            assert count() == 1100, "a micro-batch ran with 100 records of the 1000 asked"
            time.sleep(0.2)
        second = wait_for(1200, delay + 60)
        assert second - first >= delay - 4.0, (second - first, delay)
        assert _sizes(query) == [1100, 100]
    finally:
        query.stop()
    assert query.exception() is None
    rows = spark.table("minoffsets").collect()
    assert sorted(bytes(r["value"]) for r in rows) == sorted(
        [b"a%d" % i for i in range(300)]
        + [b"b%d" % i for i in range(800)]
        + [b"c%d" % i for i in range(100)]
    )
    assert sorted(r["offset"] for r in rows if r["partition"] == partition) == list(range(300))
    print(f"minOffsetsPerTrigger: held batch released after {second - first:.1f} s")


def test_sink_round_trip_batch_and_streaming(
    spark: Any, cluster: dafka.LocalCluster, tmp_path: Path
) -> None:
    t, u = _topic(), _topic()
    values = [f"row-{i}" for i in range(5000)]
    (
        spark.createDataFrame([(v,) for v in values], "value string")
        .repartition(3)
        .write.format("dafka")
        .option("towers", cluster.towers)
        .option("topic", t)
        .mode("append")
        .save()
    )
    # Acknowledged before save() returned: readable at once.
    back = _read(spark, cluster, t).selectExpr("cast(value as string) v").collect()
    assert sorted(r["v"] for r in back) == sorted(values)
    partitions = _read(spark, cluster, t).select("partition").distinct().count()
    assert partitions <= 2, "one partition per Python worker, not one per task"

    # Streaming: topic t -> topic column u, through the stream sink.
    query = (
        spark.readStream.format("dafka")
        .option("towers", cluster.towers)
        .option("subscribe", t)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr(f"'{u}' as topic", "value")
        .writeStream.format("dafka")
        .option("towers", cluster.towers)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    back = _read(spark, cluster, u).selectExpr("cast(value as string) v").collect()
    assert sorted(r["v"] for r in back) == sorted(values)


def test_sink_refuses_a_frame_without_value_or_topic(
    spark: Any, cluster: dafka.LocalCluster
) -> None:
    df = spark.createDataFrame([(1,)], "n int")
    with pytest.raises(Exception, match="value column"):
        df.write.format("dafka").option("towers", cluster.towers).option("topic", "x").mode(
            "append"
        ).save()
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="topic column or option topic"):
        df.write.format("dafka").option("towers", cluster.towers).mode("append").save()


def test_a_read_batch_has_sparks_kafka_columns_from_the_consumers_arrays(
    cluster: dafka.LocalCluster,
) -> None:
    # What Spark receives: the consumer's batches, their columns picked, never rebuilt.
    from dafka._spark_dafka import _READ, READ_COLUMNS, DafkaPartition, _parse, _read

    t = _topic()
    p = _produce(cluster.towers, t, [b"v%d" % i for i in range(50)])
    for headers in ("false", "true"):
        o = _parse(
            {"towers": cluster.towers, "subscribe": t, "includeHeaders": headers},
            _READ,
            "batch reader",
        )
        batches = list(_read(DafkaPartition(t, p, 5, 20), o))
        table = pa.Table.from_batches(batches)
        names = [*READ_COLUMNS, "headers"] if headers == "true" else list(READ_COLUMNS)
        assert table.column_names == names
        assert table.column("offset").to_pylist() == list(range(5, 20))
        assert table.column("value").to_pylist() == [b"v%d" % i for i in range(5, 20)]
        assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")


def test_fail_on_data_loss_batch(spark: Any, retained: Retained) -> None:
    # Offsets from 0 asked of a partition whose first records retention dropped.
    r = retained
    starting = json.dumps({r.topic: {r.partition: 0}})

    def read(**options: str) -> Any:
        reader = (
            spark.read.format("dafka")
            .option("towers", r.towers)
            .option("subscribe", r.topic)
            .option("startingOffsets", starting)
        )
        return reader.options(**options).load()

    with pytest.raises(Exception, match=rf"offsets 0\.\.{r.low - 1} of .* failOnDataLoss=false"):
        read().collect()
    df = read(failOnDataLoss="false").selectExpr("min(offset)", "max(offset)", "count(*)")
    assert tuple(df.first()) == (r.low, r.end - 1, r.end - r.low)


def test_fail_on_data_loss_streaming(spark: Any, retained: Retained, tmp_path: Path) -> None:
    r = retained
    starting = json.dumps({r.topic: {r.partition: 0}})

    def start(name: str, fail: str) -> Any:
        return (
            spark.readStream.format("dafka")
            .option("towers", r.towers)
            .option("subscribe", r.topic)
            .option("startingOffsets", starting)
            .option("failOnDataLoss", fail)
            .load()
            .select("offset")
            .writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
        )

    query = start("lossfails", "true")
    with pytest.raises(Exception, match=rf"offsets 0\.\.{r.low - 1} of .* failOnDataLoss=false"):
        query.awaitTermination(120)
    assert query.exception() is not None
    query = start("lossskips", "false")
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()
    offsets = [row["offset"] for row in spark.table("lossskips").collect()]
    assert sorted(offsets) == list(range(r.low, r.end))


def test_latest_offset_answers_at_once_from_heads_tracked_in_the_background(
    cluster: dafka.LocalCluster,
) -> None:
    # No offsets query per trigger (each waits its settle time, ~150 ms): a thread keeps the
    # stores' heads fresh and latestOffset takes the newest answer.
    from dafka._spark_dafka import _STREAM_READ, DafkaStreamReader, _parse

    t = _topic()
    p = _produce(cluster.towers, t, [b"a"] * 100)
    o = _parse(
        {"towers": cluster.towers, "subscribe": t, "startingOffsets": "earliest"},
        _STREAM_READ,
        "stream reader",
    )
    reader = DafkaStreamReader(o)
    try:
        assert reader.initialOffset() == {t: {p: 0}}
        assert reader.latestOffset() == {t: {p: 100}}
        q = _produce(cluster.towers, t, [b"b"] * 50)
        took, deadline = [], time.monotonic() + 10
        while time.monotonic() < deadline:
            started = time.monotonic()
            latest = reader.latestOffset()
            took.append(time.monotonic() - started)
            if latest == {t: {p: 100, q: 50}}:
                break
            time.sleep(0.05)
        assert latest == {t: {p: 100, q: 50}}
        assert sorted(took)[len(took) // 2] < 0.05, took
    finally:
        reader.stop()


def _stream_options(cluster: dafka.LocalCluster, topic: str) -> Any:
    from dafka._spark_dafka import _STREAM_READ, _parse

    return _parse({"towers": cluster.towers, "subscribe": topic}, _STREAM_READ, "stream reader")


def test_heads_thread_survives_an_unexpected_error(
    cluster: dafka.LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An error other than DafkaError ends the thread: the caller gets it at once (not after
    # offsetsTimeout + 5 s) and the next get() starts a new thread.
    from dafka import _spark_dafka

    t = _topic()
    p = _produce(cluster.towers, t, [b"a"] * 3)
    real = _spark_dafka._bounds
    calls = []

    def failing_once(o: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("injected")
        return real(o)

    monkeypatch.setattr(_spark_dafka, "_bounds", failing_once)
    heads = _spark_dafka._Heads(_stream_options(cluster, t))
    try:
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="injected"):
            heads.get()
        assert time.monotonic() - started < 2.0
        assert heads.get() == {t: {p: (0, 3)}}
    finally:
        heads.stop()


def test_concurrent_offsets_queries_of_one_topic_each_get_every_partition(
    cluster: dafka.LocalCluster,
) -> None:
    # The node keys an offsets query by topic: concurrent queries of one topic through the
    # cached reader must not reset or remove each other's answers.
    from dafka._spark_dafka import _bounds

    t = _topic()
    parts = {_produce(cluster.towers, t, [b"a"] * (i + 1)): i + 1 for i in range(3)}
    want = {t: {p: (0, n) for p, n in parts.items()}}
    o = _stream_options(cluster, t)
    assert _bounds(o) == want
    got: list[Any] = []

    def ask() -> None:
        for _ in range(3):
            got.append(_bounds(o))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert got == [want] * 12


def test_heads_thread_stops_when_no_one_asks_and_restarts_on_demand(
    cluster: dafka.LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dafka._spark_dafka import _Heads

    monkeypatch.setattr(_Heads, "IDLE", 0.5)
    t = _topic()
    p = _produce(cluster.towers, t, [b"a"] * 2)
    heads = _Heads(_stream_options(cluster, t))
    try:
        assert heads.get() == {t: {p: (0, 2)}}
        thread = heads._thread
        assert thread is not None
        thread.join(timeout=5.0)
        assert not thread.is_alive(), "the heads thread kept querying with no one asking"
        q = _produce(cluster.towers, t, [b"b"])
        deadline = time.monotonic() + 10
        while (got := heads.get()) != {t: {p: (0, 2), q: (0, 1)}}:
            assert time.monotonic() < deadline, got
            time.sleep(0.05)
    finally:
        heads.stop()


def test_fail_on_data_loss_for_a_record_damaged_on_every_store(spark: Any, tmp_path: Path) -> None:
    """Issue 21: a record damaged on the only store that held it. The read no longer waits
    for it forever: with failOnDataLoss (the default) the query fails naming the offset, and
    with failOnDataLoss=false it returns every other record."""
    t, path = _topic(), tmp_path / "store"
    values = [b"%099d" % i for i in range(1000)]
    with dafka.Tower(sub="tcp://127.0.0.1:0") as tower:
        with dafka.Store(path, towers=tower.towers):
            partition = _produce(tower.towers, t, values)
        segment = path / "00000000000000000000.log"
        data = bytearray(segment.read_bytes())
        data[data.index(values[500]) + 7] ^= 0x01
        segment.write_bytes(bytes(data))
        with dafka.Store(path, towers=tower.towers):

            def read(**options: str) -> Any:
                reader = (
                    spark.read.format("dafka")
                    .option("towers", tower.towers)
                    .option("subscribe", t)
                    .option("startingOffsets", "earliest")
                )
                return reader.options(**options).load()

            with pytest.raises(Exception, match=rf"offsets 500\.\.500 of {t}/{partition}"):
                read().collect()
            df = read(failOnDataLoss="false").selectExpr("min(offset)", "max(offset)", "count(*)")
            assert tuple(df.first()) == (0, 999, 999)
