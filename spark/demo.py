"""`make demo`: the main job, end to end, on embedded defaults.

    sensors --Dafka (ZMTP over loopback)--> store (fsync) --> Spark Structured Streaming
    (dafka.Producer x4, JSON readings)                          format("dafka"), Arrow batches
                                                                 built in Rust
    --> parse JSON, 10 s event-time windows with a watermark --> Parquet --> result table
    --> then a batch query over the same topic.

A `dafka.LocalCluster` (a tower and a store in this process, loopback ephemeral
ports) stands in for a real cluster; four producer threads play sensors
writing JSON readings whose event time runs ahead of the clock (a reading
every 10 ms of event time). Spark reads the topic with the `dafka` source:
each task reads one partition's offset range through a reader cached in its
Python worker and hands the consumer's `pyarrow.RecordBatch`es to Spark with
no per-row Python work. Nothing to configure: run `make demo`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from pyspark.sql import functions as F

import dafka
import dafka.spark

SENSORS = ("boiler", "chiller", "pump", "valve")
READINGS = int(os.environ.get("DAFKA_DEMO_READINGS", "50000"))  # per sensor
STEP_MS = 10  # event time between two readings of a sensor
WINDOW = "10 seconds"
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, in ms
END = "_end"  # a last reading far ahead, so the watermark closes every window

SCHEMA = "sensor string, ts_ms long, celsius double"


def reading(sensor: int, i: int) -> bytes:
    celsius = 20.0 + sensor * 5 + (i % 100) / 10
    return json.dumps(
        {"sensor": SENSORS[sensor], "ts_ms": T0 + i * STEP_MS, "celsius": celsius}
    ).encode()


def produce(towers: str, topic: str, sensor: int, sent: list[int]) -> None:
    """One sensor: its readings in batches of 2000, then waits for the store's ACK."""
    with dafka.Producer(topic, towers=towers) as p:
        for start in range(0, READINGS, 2000):
            p.send_many([reading(sensor, i) for i in range(start, min(start + 2000, READINGS))])
            sent[sensor] = min(start + 2000, READINGS)
        p.flush(timeout=60)


def bar(done: int, total: int, started: float, width: int = 30) -> str:
    filled = width * done // max(total, 1)
    rate = done / max(time.monotonic() - started, 1e-9)
    gauge = "#" * filled + "." * (width - filled)
    return f"\r[{gauge}] {done:>9,}/{total:,} rows  {rate:>9,.0f} rows/s"


def main() -> int:
    total = READINGS * len(SENSORS)
    windows_per_sensor = -(-READINGS * STEP_MS // 10_000)
    work = Path(tempfile.mkdtemp(prefix="dafka-demo-"))
    spark = dafka.spark.local_session("dafka-demo")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        with dafka.LocalCluster(work / "store") as cluster:
            topic = "readings"
            print(f"dafka {dafka.__version__}: LocalCluster at {cluster.towers}, topic {topic!r}")
            print(f"{len(SENSORS)} sensors x {READINGS:,} JSON readings = {total:,} records")
            sent = [0] * len(SENSORS)
            producers = [
                threading.Thread(target=produce, args=(cluster.towers, topic, s, sent))
                for s in range(len(SENSORS))
            ]
            for t in producers:
                t.start()

            readings = (
                spark.readStream.format("dafka")
                .option("towers", cluster.towers)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .load()
                .select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("r"))
                .select("r.sensor", "r.celsius", F.timestamp_millis("r.ts_ms").alias("ts"))
            )
            windows = (
                readings.withWatermark("ts", "5 seconds")
                .groupBy(F.window("ts", WINDOW), "sensor")
                .agg(
                    F.count("*").alias("readings"),
                    F.round(F.avg("celsius"), 2).alias("mean_c"),
                    F.max("celsius").alias("max_c"),
                )
                .select(
                    F.col("window.start").alias("window_start"),
                    "sensor",
                    "readings",
                    "mean_c",
                    "max_c",
                )
            )
            out = work / "windows"
            started = time.monotonic()
            query = (
                windows.writeStream.format("parquet")
                .outputMode("append")
                .option("path", str(out))
                .option("checkpointLocation", str(work / "checkpoint"))
                .trigger(processingTime="1 second")
                .start()
            )
            processed = 0
            ended = False
            deadline = started + 100
            while time.monotonic() < deadline:
                processed = sum(p["numInputRows"] for p in query.recentProgress)
                print(bar(min(processed, total), total, started), end="", flush=True)
                if not ended and not any(t.is_alive() for t in producers):
                    # Every reading is acknowledged: one more, far ahead in event time,
                    # moves the watermark past the last window so it is written.
                    with dafka.Producer(topic, towers=cluster.towers) as p:
                        p.send(json.dumps({"sensor": END, "ts_ms": T0 + 10**9}).encode())
                        p.flush(timeout=30)
                    ended = True
                if ended and processed > total and (out / "_spark_metadata").is_dir():
                    done = spark.read.parquet(str(out)).where(F.col("sensor") != END).count()
                    if done >= windows_per_sensor * len(SENSORS):
                        break
                time.sleep(0.5)
            elapsed = time.monotonic() - started
            query.stop()
            print(bar(min(processed, total), total, started))

            # The sentinel's window is filtered here, not in the query: a filter on the grouping
            # key would be pushed below the aggregation, and the watermark would never see it.
            result = (
                spark.read.parquet(str(out))
                .where(F.col("sensor") != END)
                .orderBy("window_start", "sensor")
                .collect()
            )
            print(
                f"\n{'window (UTC)':<21} {'sensor':<8} {'readings':>8} {'mean °C':>8} {'max °C':>7}"
            )
            for row in result[:12]:
                print(
                    f"{row['window_start']:%Y-%m-%d %H:%M:%S}  {row['sensor']:<8} "
                    f"{row['readings']:>8} {row['mean_c']:>8.2f} {row['max_c']:>7.1f}"
                )
            if len(result) > 12:
                print(f"... {len(result) - 12} more windows")
            streamed = sum(r["readings"] for r in result)
            print(
                f"streaming: {processed:,} records in {elapsed:.1f} s "
                f"({processed / elapsed:,.0f} records/s from the first send to the last window "
                "written, 1 s triggers); "
                f"{len(result)} windows, {streamed:,} readings"
            )

            batch_started = time.monotonic()
            per_sensor = (
                spark.read.format("dafka")
                .option("towers", cluster.towers)
                .option("subscribe", topic)
                .load()
                .select(F.get_json_object(F.col("value").cast("string"), "$.sensor").alias("s"))
                .where(F.col("s") != END)
                .groupBy("s")
                .count()
                .orderBy("s")
                .collect()
            )
            batch_elapsed = time.monotonic() - batch_started
            counted = {r["s"]: r["count"] for r in per_sensor}
            print(f"batch query over the topic ({batch_elapsed:.1f} s): {counted}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    ok = (
        streamed == total
        and len(result) == windows_per_sensor * len(SENSORS)
        and counted == dict.fromkeys(SENSORS, READINGS)
    )
    print("demo OK" if ok else "demo FAILED: readings were lost, repeated or altered")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
