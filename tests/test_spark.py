"""The Spark data source end to end: Spark tasks (forked Python workers)
connect dafka sockets and hand Arrow batches built in Rust to Spark."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pyspark.sql import functions as F

import dafka
from dafka.zmtp import Socket


def _push_in_background(push: Socket, messages: list[list[bytes]]) -> threading.Thread:
    def run() -> None:
        try:
            for m in messages:
                push.send(m)
        except dafka.ClosedError:
            pass  # the test closed the socket once it had read what it needed

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_zmtp_source_delivers_every_message_once(spark: Any) -> None:
    n = 20_000
    messages = [[b"k%d" % (i % 7), b"%d" % i] for i in range(n)]
    with Socket("PUSH", sndhwm=0, linger=5.0) as push:
        endpoint = push.bind("tcp://127.0.0.1:0")
        producer = _push_in_background(push, messages)
        df = (
            spark.read.format("zmtp")
            .option("endpoint", endpoint)
            .option("numPartitions", "2")
            .option("idleTimeout", "1.5")
            .option("batchSize", "1000")
            .load()
        )
        assert df.schema.simpleString() == "struct<frames:array<binary>>"
        rows = df.select(F.col("frames")[1].cast("string").cast("long").alias("i")).collect()
        producer.join(timeout=30)
    assert sorted(r["i"] for r in rows) == list(range(n))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_zmtp_source_stops_at_max_messages(spark: Any) -> None:
    with Socket("PUSH", linger=0) as push:
        endpoint = push.bind("tcp://127.0.0.1:0")
        _push_in_background(push, [[b"x", b"%d" % i] for i in range(500)])
        df = (
            spark.read.format("zmtp")
            .option("endpoint", endpoint)
            .option("maxMessages", "120")
            .option("batchSize", "50")
            .load()
        )
        frames = [r["frames"] for r in df.collect()]
    assert len(frames) == 120
    assert [bytes(f[1]) for f in frames] == [b"%d" % i for i in range(120)]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_zmtp_source_subscribes_with_sub(spark: Any) -> None:
    stop = threading.Event()
    with Socket("PUB", linger=0) as pub:
        endpoint = pub.bind("tcp://127.0.0.1:0")

        def publish() -> None:
            i = 0
            while not stop.is_set():
                pub.send([b"alpha" if i % 2 else b"beta", b"%d" % i])
                i += 1
                if i % 100 == 0:
                    stop.wait(0.001)

        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        try:
            df = (
                spark.read.format("zmtp")
                .option("endpoint", endpoint)
                .option("socketType", "SUB")
                .option("subscribe", "al")
                .option("maxMessages", "200")
                .load()
            )
            topics = {bytes(r["frames"][0]) for r in df.collect()}
        finally:
            stop.set()
            thread.join()
    assert topics == {b"alpha"}


@pytest.mark.slow
def test_zmtp_source_rejects_bad_options(spark: Any) -> None:
    with pytest.raises(Exception, match="endpoint"):
        spark.read.format("zmtp").load().collect()
    with pytest.raises(Exception, match="socketType"):
        spark.read.format("zmtp").option("endpoint", "tcp://127.0.0.1:1").option(
            "socketType", "REQ"
        ).load().collect()
