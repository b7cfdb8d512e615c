"""`make demo`: the main job, end to end, on embedded defaults.

Today's deepest real path (Dafka's tower, producer and consumer arrive with
their own issues and take over this job):

    producer --ZMTP 3.1 over tcp loopback--> Spark tasks --Arrow--> Spark SQL
    (dafka PUSH, Rust)                        (dafka PULL, batches built in Rust)

A producer thread pushes sensor readings through a dafka PUSH socket. Spark
reads them with the `zmtp` Python data source: each Spark task (a forked
Python worker) connects its own PULL socket and yields `pyarrow.RecordBatch`es
built in Rust, with no per-row Python work. Spark then aggregates per sensor.
Nothing to configure and no server to start: run `make demo`.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from pyspark.sql import functions as F

import dafka
import dafka.spark
from dafka.zmtp import Socket

RECORDS = int(os.environ.get("DAFKA_DEMO_RECORDS", "1000000"))
SENSORS = 8


def produce(push: Socket, count: int, done: threading.Event) -> None:
    """Sensor i reports readings i, i+1, ... as (sensor, value) frames."""
    for n in range(count):
        sensor = n % SENSORS
        push.send([b"sensor-%d" % sensor, b"%d.5" % (n // SENSORS)])
    done.set()


def main() -> int:
    spark = dafka.spark.local_session("dafka-demo")

    # Spark's first Python job starts its worker processes (seconds on a cold
    # JVM): pay that once on an idle endpoint, so the timing below is the pipeline.
    warm = time.monotonic()
    with Socket("PUSH") as idle:
        idle_endpoint = idle.bind("tcp://127.0.0.1:0")
        spark.read.format("zmtp").option("endpoint", idle_endpoint).option(
            "idleTimeout", 0.2
        ).load().count()
    print(f"Spark is warm ({time.monotonic() - warm:.1f} s)")

    with Socket("PUSH", sndhwm=100_000) as push:
        endpoint = push.bind("tcp://127.0.0.1:0")
        print(f"dafka {dafka.__version__}: producer bound at {endpoint}, {RECORDS} records")
        done = threading.Event()
        producer = threading.Thread(target=produce, args=(push, RECORDS, done), daemon=True)
        producer.start()

        started = time.monotonic()
        readings = (
            spark.read.format("zmtp")
            .option("endpoint", endpoint)
            .option("numPartitions", 2)
            .option("idleTimeout", 1.0)
            .load()
            .select(
                F.col("frames")[0].cast("string").alias("sensor"),
                F.col("frames")[1].cast("string").cast("double").alias("value"),
            )
        )
        summary = (
            readings.groupBy("sensor")
            .agg(F.count("*").alias("readings"), F.avg("value").alias("mean"))
            .orderBy("sensor")
            .collect()
        )
        elapsed = time.monotonic() - started
        producer.join(timeout=30)

    print(f"{'sensor':<10} {'readings':>9} {'mean':>12}")
    for row in summary:
        print(f"{row['sensor']:<10} {row['readings']:>9} {row['mean']:>12.1f}")
    total = sum(row["readings"] for row in summary)
    rate = total / elapsed if elapsed > 0 else float("inf")
    print(
        f"received {total} of {RECORDS} records in {elapsed:.1f} s ({rate:,.0f} records/s, "
        "including the 1 s of silence that ends each partition)"
    )
    spark.stop()

    expected_mean = (RECORDS // SENSORS - 1) / 2 + 0.5
    ok = (
        done.is_set()
        and total == RECORDS
        and len(summary) == SENSORS
        and all(abs(row["mean"] - expected_mean) < 1.0 for row in summary)
    )
    print("demo OK" if ok else "demo FAILED: records were lost or altered")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
