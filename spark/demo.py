"""`make demo`: the main job, end to end, on embedded defaults, in three stages.

    [1/3] producers --Dafka (ZMTP over loopback)--> store (fdatasync, then ACK)
          four dafka.Producers send a backlog of sensor readings, each record keyed by its
          sensor and stamped with the time of its reading (value, key and timestamp built
          as Arrow arrays: no per-record Python work), and wait for the store's
          acknowledgements
    [2/3] store --> Spark Structured Streaming, readStream.format("dafka")
          each task reads a partition's offset range as pyarrow.RecordBatches built in
          Rust; the query counts 10 s event-time windows per sensor on the records' own
          timestamps and keys (only the temperature is parsed out of the JSON value) into
          Parquet, while the producers keep sending at a steady rate
    [3/3] the result: the windows written, and a batch query over the whole topic,
          checked record for record against what was sent

A `dafka.LocalCluster` (a tower and a store in this process, loopback ephemeral
ports) stands in for a real cluster. Nothing to configure: run `make demo`.
DAFKA_DEMO_SCALE (default 1.0) scales every record count (the tests run 0.05).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

import dafka
import dafka.spark

SENSORS = ("boiler", "chiller", "pump", "valve")
SCALE = float(os.environ.get("DAFKA_DEMO_SCALE", "1.0"))
BACKLOG = int(250_000 * SCALE)  # per sensor, stage 1
LIVE_RATE = int(200_000 * SCALE)  # records/s over all sensors during stage 2
LIVE_SECONDS = 10
CHUNK = max(1, LIVE_RATE // len(SENSORS) // 10)  # a send every 0.1 s per sensor
MAX_PER_TRIGGER = max(1, int(500_000 * SCALE))  # records a micro-batch reads at most
STEP_MS = 10  # event time between two readings of a sensor
WINDOW_MS = 10_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, in ms
END = "_end"  # a last reading far ahead, so the watermark closes every window
SCHEMA = "celsius double"
TTY = sys.stdout.isatty()


def readings(sensor: int, start: int, count: int) -> pa.RecordBatch:
    """Readings `start..start+count` of one sensor, built by Arrow kernels: the value (JSON
    with the temperature), the key (the sensor) and the timestamp (when the reading was
    taken, in µs), the columns `Producer.send_many` takes."""
    i = pa.array(range(start, start + count), pa.int64())
    tenths = pc.bit_wise_and(pc.multiply(i, 7), 127)
    celsius = pc.add(pc.divide(tenths.cast(pa.float64()), 10.0), 20.0 + 5 * sensor)
    return pa.record_batch(
        {
            "value": pc.binary_join_element_wise('{"celsius":', celsius.cast(pa.string()), "}", ""),
            "key": pa.repeat(SENSORS[sensor].encode(), count),
            "timestamp": pc.multiply(pc.add(pc.multiply(i, STEP_MS), T0), 1000),
        }
    )


def status(text: str) -> None:
    """A line that updates in place on a terminal (every few seconds elsewhere)."""
    if TTY:
        print(f"\r\033[K{text}", end="", flush=True)


def line(text: str) -> None:
    if TTY:
        print("\r\033[K", end="")
    print(text, flush=True)


class Sensors:
    """Four producers, one per sensor, each in its own thread."""

    def __init__(self, towers: str, topic: str) -> None:
        self.producers = [dafka.Producer(topic, towers=towers) for _ in SENSORS]
        self.sent = [0] * len(SENSORS)

    def acknowledged(self) -> int:
        return sum(p.acknowledged for p in self.producers)

    def run(self, target, *args) -> list[threading.Thread]:  # type: ignore[no-untyped-def]
        """`target(sensor, *args)` in a thread per sensor; a failure ends the demo."""
        self.failures: list[BaseException] = []

        def guarded(sensor: int) -> None:
            try:
                target(sensor, *args)
            except BaseException as e:
                self.failures.append(e)

        threads = [threading.Thread(target=guarded, args=(s,)) for s in range(len(SENSORS))]
        for t in threads:
            t.start()
        return threads

    def check(self) -> None:
        if self.failures:
            raise RuntimeError(f"a producer failed: {self.failures[0]!r}") from self.failures[0]

    def backlog(self, sensor: int) -> None:
        p = self.producers[sensor]
        for start in range(0, BACKLOG, 10_000):
            count = min(10_000, BACKLOG - start)
            p.send_many(readings(sensor, start, count))
            self.sent[sensor] = start + count
        p.flush(timeout=60)

    def live(self, sensor: int, until: float) -> None:
        p = self.producers[sensor]
        n = BACKLOG
        next_at = time.monotonic()
        while next_at < until:
            p.send_many(readings(sensor, n, CHUNK))
            n += CHUNK
            self.sent[sensor] = n
            next_at += 0.1
            time.sleep(max(0.0, next_at - time.monotonic()))
        p.flush(timeout=60)

    def close(self) -> None:
        for p in self.producers:
            p.close()


def stage1(sensors: Sensors) -> None:
    total = BACKLOG * len(SENSORS)
    line(
        f"\n[1/3] producers -> store: {len(SENSORS)} producers x {BACKLOG:,} readings, keyed by "
        "sensor and stamped with\n      their time, each acknowledged once the store has "
        "fdatasync'd it"
    )
    started = time.monotonic()
    threads = sensors.run(sensors.backlog)
    while any(t.is_alive() for t in threads):
        acked = sensors.acknowledged()
        rate = acked / max(time.monotonic() - started, 1e-9)
        status(f"      {acked:>11,} / {total:,} acknowledged  {rate:>11,.0f} records/s")
        time.sleep(0.1)
    elapsed = time.monotonic() - started
    sensors.check()
    acked = sensors.acknowledged()
    line(
        f"      {acked:,} records durable in {elapsed:.2f} s: {acked / elapsed:,.0f} records/s "
        "(BENCHMARKS.md, Dafka end to end: 1.4 million/s\n      from Python, with the "
        "producer and the store in separate processes)"
    )


def stage2(spark, towers: str, topic: str, work: Path, sensors: Sensors):  # type: ignore[no-untyped-def]
    line(
        f"\n[2/3] store -> Spark streaming: readStream.format('dafka') from the earliest "
        f"offset, at most {MAX_PER_TRIGGER:,} records a micro-batch,\n"
        "      10 s windows per sensor on the records' timestamps and keys, 1 s triggers;\n"
        f"      meanwhile the producers send {LIVE_RATE:,} more readings/s for {LIVE_SECONDS} s"
    )
    parsed = (
        spark.readStream.format("dafka")
        .option("towers", towers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", MAX_PER_TRIGGER)
        .load()
        .select(
            F.col("key").cast("string").alias("sensor"),
            F.from_json(F.col("value").cast("string"), SCHEMA).celsius.alias("celsius"),
            "timestamp",
        )
    )
    windows = (
        parsed.withWatermark("timestamp", "5 seconds")
        .groupBy(F.window("timestamp", "10 seconds"), "sensor")
        .agg(
            F.count("*").alias("readings"),
            F.round(F.avg("celsius"), 2).alias("mean_c"),
            F.max("celsius").alias("max_c"),
        )
        .select(
            F.col("window.start").alias("window_start"), "sensor", "readings", "mean_c", "max_c"
        )
    )
    out = work / "windows"
    query = (
        windows.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(out))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    line(f"      {'batch':>5} {'rows':>10} {'seconds':>8} {'rows/s':>11} {'lag after it':>13}")
    started = time.monotonic()
    live = sensors.run(sensors.live, started + LIVE_SECONDS)
    shown: set[int] = set()
    read = 0
    rows_by_batch: dict[int, int] = {}
    ended = False
    deadline = started + 120
    while time.monotonic() < deadline:
        for p in query.recentProgress:
            if p["batchId"] in shown:
                continue
            shown.add(p["batchId"])
            rows = p["numInputRows"]
            rows_by_batch[p["batchId"]] = rows
            read = sum(rows_by_batch.values())
            if rows:
                seconds = p["durationMs"]["triggerExecution"] / 1000
                lag = max(0, sensors.acknowledged() - read)
                note = "  (starts Spark's Python workers)" if len(shown) == 1 else ""
                if ended and rows == 1:
                    note = "  (the end marker: closes the last windows)"
                line(
                    f"      {p['batchId']:>5} {rows:>10,} {seconds:>8.2f} "
                    f"{rows / max(seconds, 1e-9):>11,.0f} {lag:>13,}{note}"
                )
        acked = sensors.acknowledged()
        status(f"      acknowledged {acked:,}, read by the query {read:,}, lag {acked - read:,}")
        sensors.check()
        if not ended and not any(t.is_alive() for t in live) and read >= sum(sensors.sent):
            # The query has read every reading: one more, far ahead in event time, moves the
            # watermark past the last window so that window is written too. Not sooner: the
            # watermark would then drop the readings still unread as late.
            with dafka.Producer(topic, towers=towers) as p:
                p.send('{"celsius":0}', key=END, timestamp=(T0 + 10**9) * 1000)
                p.flush(timeout=30)
            ended = True
        total = sum(sensors.sent) + 1
        if ended and read >= total and windows_written(spark, out) >= expected_windows(sensors):
            break
        time.sleep(0.25)
    elapsed = time.monotonic() - started
    query.stop()
    timed = [p for p in query.recentProgress if p["numInputRows"]][1:]
    if timed:
        rows = sum(p["numInputRows"] for p in timed)
        seconds = sum(p["durationMs"]["triggerExecution"] for p in timed) / 1000
        add_batch = sum(p["durationMs"].get("addBatch", 0) for p in timed) / 1000
        line(
            f"      {read:,} rows in {elapsed:.1f} s; after the first batch {rows / seconds:,.0f} "
            f"rows/s while triggered ({add_batch / seconds:.0%} of it reading, parsing and "
            "aggregating;\n      BENCHMARKS.md's Spark section: about 800,000 rows/s for the "
            "read alone, 2 cores)"
        )
    return out


def expected_windows(sensors: Sensors) -> int:
    return sum(-(-n * STEP_MS // WINDOW_MS) for n in sensors.sent)


def windows_written(spark, out: Path) -> int:  # type: ignore[no-untyped-def]
    if not (out / "_spark_metadata").is_dir():
        return 0
    return spark.read.parquet(str(out)).where(F.col("sensor") != END).count()


def stage3(spark, towers: str, topic: str, out: Path, sensors: Sensors) -> bool:  # type: ignore[no-untyped-def]
    line("\n[3/3] the result")
    # The sentinel's window is filtered here, not in the query: a filter on the grouping
    # key would be pushed below the aggregation, and the watermark would never see it.
    result = (
        spark.read.parquet(str(out))
        .where(F.col("sensor") != END)
        .orderBy("window_start", "sensor")
        .collect()
    )
    line(f"      {'window (UTC)':<21} {'sensor':<8} {'readings':>8} {'mean °C':>8} {'max °C':>7}")
    for row in result[:8]:
        line(
            f"      {row['window_start']:%Y-%m-%d %H:%M:%S}  {row['sensor']:<8} "
            f"{row['readings']:>8} {row['mean_c']:>8.2f} {row['max_c']:>7.1f}"
        )
    streamed = sum(r["readings"] for r in result)
    line(f"      ... {len(result):,} windows in all, {streamed:,} readings")

    # Each producer is a partition of the topic: its records are counted, and their offsets
    # must run from 0 without a gap or a repeat, with no per-row parsing.
    started = time.monotonic()
    per_partition = (
        spark.read.format("dafka")
        .option("towers", towers)
        .option("subscribe", topic)
        .load()
        .groupBy("partition")
        .agg(F.count("*").alias("n"), F.min("offset").alias("lo"), F.max("offset").alias("hi"))
        .collect()
    )
    elapsed = time.monotonic() - started
    total = sum(r["n"] for r in per_partition)
    line(
        f"      batch query, read.format('dafka') of the whole topic: {total:,} records in "
        f"{elapsed:.1f} s ({total / elapsed:,.0f} records/s), counted per partition:"
    )
    found = {r["partition"]: (r["n"], r["lo"], r["hi"]) for r in per_partition}
    counted = {}
    for name, p in zip(SENSORS, sensors.producers, strict=True):
        n, lo, hi = found.get(p.partition, (0, None, None))
        counted[name] = n if (lo, hi) == (0, n - 1) else -1
        line(f"      {name:<8} partition {p.partition}: {n:,} records, offsets {lo}..{hi}")
    sent = dict(zip(SENSORS, sensors.sent, strict=True))
    return (
        streamed == sum(sensors.sent)
        and len(result) == expected_windows(sensors)
        and counted == sent
    )


def main() -> int:
    begun = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="dafka-demo-"))
    print("starting Spark (local[2], loopback) ...", flush=True)
    spark = dafka.spark.local_session("dafka-demo")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    ok = False
    try:
        with dafka.LocalCluster(work / "store") as cluster:
            topic = "readings"
            print(
                f"dafka {dafka.__version__}, Spark {spark.version}: a LocalCluster (tower and "
                f"store, sync='always') at {cluster.towers}, topic {topic!r}",
                flush=True,
            )
            sensors = Sensors(cluster.towers, topic)
            try:
                stage1(sensors)
                out = stage2(spark, cluster.towers, topic, work, sensors)
                ok = stage3(spark, cluster.towers, topic, out, sensors)
            finally:
                sensors.close()
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    took = time.monotonic() - begun
    if ok:
        print(f"\ndemo OK ({took:.0f} s): every reading sent was counted once, in its window")
        return 0
    print("\ndemo FAILED: readings were lost, repeated or altered")
    return 1


if __name__ == "__main__":
    sys.exit(main())
