"""The ``dafka`` Spark source as a new user meets it (issue 22): it is there without a
registration call, a misspelled streaming option fails when the query is built, the sink says
that it only appends, stopping a query in the middle of a micro-batch prints no stack trace,
and ``help()`` lists the options."""

from __future__ import annotations

import io
import pydoc
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Self

import pytest
from conftest import unique_topic

import dafka

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _stream(spark: Any, towers: str, topic: str, **options: str) -> Any:
    reader = spark.readStream.format("dafka").option("towers", towers).option("subscribe", topic)
    return reader.options(**options).load()


def _count(spark: Any, towers: str, topic: str) -> int:
    reader = spark.read.format("dafka").option("towers", towers).option("subscribe", topic)
    return int(reader.load().count())


def test_the_source_registers_itself_with_every_session(spark: Any) -> None:
    # What Spark runs to find the Python data sources installed (once per driver): it imports
    # every top-level pyspark_* module and registers its DefaultSource.
    from pyspark.serializers import UTF8Deserializer, read_int
    from pyspark.sql.worker.lookup_data_sources import _main as lookup
    from pyspark.worker_util import pickleSer

    from dafka.spark import DafkaDataSource

    out = io.BytesIO()
    lookup(io.BytesIO(), out)
    out.seek(0)
    found = {}
    for _ in range(read_int(out)):
        name = UTF8Deserializer().loads(out)
        found[name] = pickleSer._read_with_length(out)
    assert found.get("dafka") is DafkaDataSource, found
    # And this session's Spark did: "dafka" is among its static data sources (those that
    # lookup found), not only registered by hand (dafka.spark.register, local_session).
    manager = getattr(spark._jvm.org.apache.spark.sql.execution.datasources, "DataSourceManager$")
    static = getattr(manager, "MODULE$").dataSourceBuilders()
    assert static.isDefined() and static.get().contains("dafka"), static.toString()


def test_stream_options_are_checked_when_the_query_is_built(
    spark: Any, cluster: dafka.LocalCluster, tmp_path: Path
) -> None:
    t = unique_topic("us")
    # A misspelled key: at load(), naming it, what it may have meant and every option.
    with pytest.raises(Exception, match=r"startingoffset \(did you mean startingOffsets\?\)") as e:
        _stream(spark, cluster.towers, t, startingOffset="earliest")
    assert "maxOffsetsPerTrigger" in str(e.value) and "towers" in str(e.value)
    # A bad value: at load() too, not once the query runs.
    with pytest.raises(Exception, match="maxOffsetsPerTrigger must be > 0"):
        _stream(spark, cluster.towers, t, maxOffsetsPerTrigger="0")
    with pytest.raises(Exception, match="startingOffsets must be"):
        _stream(spark, cluster.towers, t, startingOffsets="earlier")
    with pytest.raises(Exception, match=r"maxTriggerDelay must be a number and a unit .*30s\?"):
        _stream(spark, cluster.towers, t, minOffsetsPerTrigger="10", maxTriggerDelay="30")
    with pytest.raises(Exception, match=r"minOffsetsPerTrigger \(9\) must not exceed"):
        _stream(spark, cluster.towers, t, minOffsetsPerTrigger="9", maxOffsetsPerTrigger="5")
    # A batch-only option on a stream: known to the source, so load() cannot tell (Spark
    # does not say whether a read is a stream there); the query fails at its start, saying so.
    query = (
        _stream(spark, cluster.towers, t, endingOffsets="latest")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        with pytest.raises(Exception, match=r"endingOffsets \(for a dafka batch read only\)"):
            query.awaitTermination(120)
    finally:
        query.stop()


def test_the_sink_only_appends(spark: Any, cluster: dafka.LocalCluster) -> None:
    t = unique_topic("us")
    df = spark.createDataFrame([("a",), ("b",)], "value string")

    def write() -> Any:
        return df.write.format("dafka").option("towers", cluster.towers).option("topic", t)

    with pytest.raises(Exception, match=r'cannot overwrite them: write with mode\("append"\)'):
        write().mode("overwrite").save()
    # Spark refuses its default mode for every Python data source, before the sink is asked.
    with pytest.raises(Exception, match="ErrorIfExists"):
        write().save()
    assert _count(spark, cluster.towers, t) == 0, "nothing was written"
    write().mode("append").save()
    write().mode("append").save()
    assert _count(spark, cluster.towers, t) == 4


class _Log4jCapture:
    """Every line the driver's log4j emits while it is attached, as text."""

    def __init__(self, spark: Any) -> None:
        log4j = spark._jvm.org.apache.logging.log4j
        self._text = spark._jvm.java.io.StringWriter()
        layout = log4j.core.layout.PatternLayout.createDefaultLayout()
        self._appender = log4j.core.appender.WriterAppender.createAppender(
            layout, None, self._text, "dafka-test-capture", False, True
        )
        self._context = log4j.LogManager.getContext(False)
        self._root = self._context.getConfiguration().getRootLogger()

    def __enter__(self) -> Self:
        self._appender.start()
        self._root.addAppender(self._appender, None, None)
        self._context.updateLoggers()
        return self

    def __exit__(self, *exc: object) -> None:
        self._root.removeAppender("dafka-test-capture")
        self._context.updateLoggers()
        self._appender.stop()

    def text(self) -> str:
        return str(self._text.toString())


def test_stopping_a_query_in_the_middle_of_a_micro_batch_logs_no_stack_trace(
    spark: Any, cluster: dafka.LocalCluster, tmp_path: Path
) -> None:
    """Spark logged every write it aborted, with the stack of the interruption (50 to 90
    lines of ClosedByInterruptException or InterruptedException from FileFormatWriter, a
    TaskKilledException from "Aborting task"): dafka.spark.local_session quiets those."""
    t = unique_topic("us")
    with dafka.Producer(t, towers=cluster.towers) as p:
        for _ in range(4):
            p.send_many([b"r" * 100] * 100_000)
        p.flush(timeout=60)
    tracker = spark.sparkContext.statusTracker()
    with _Log4jCapture(spark) as log:
        query = (
            _stream(spark, cluster.towers, t, startingOffsets="earliest")
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .start()
        )
        try:
            deadline = time.monotonic() + 120
            while not tracker.getActiveJobsIds():
                assert time.monotonic() < deadline, "the first micro-batch never ran a job"
                assert query.exception() is None, query.exception()
                time.sleep(0.02)
        finally:
            query.stop()
        time.sleep(1.0)  # tasks killed after stop() returns log then
    assert query.exception() is None
    assert "Exception" not in log.text() and "ERROR" not in log.text(), log.text()


def test_help_lists_every_option_with_its_default_and_meaning() -> None:
    from dafka._spark_dafka import (
        OPTIONS,
        DafkaBatchReader,
        DafkaStreamReader,
        DafkaStreamWriter,
        DafkaWriter,
    )
    from dafka.spark import DafkaDataSource

    # help() shows the class docstring, each line behind " |  ".
    shown = " ".join(
        w for w in pydoc.render_doc(DafkaDataSource, renderer=pydoc.plaintext).split() if w != "|"
    )
    for o in OPTIONS:
        assert f"{o.name} {o.meaning.split()[0]}" in shown, o.name
        assert f"Default: {o.default}." in shown, o.name
    assert "startingOffsets earliest, latest or JSON" in shown
    assert "Default: earliest (batch), latest (stream)." in shown
    assert 'mode("append")' in shown
    per_class = {
        DafkaBatchReader: ("endingOffsets", "maxOffsetsPerTrigger"),
        DafkaStreamReader: ("maxOffsetsPerTrigger", "endingOffsets"),
        DafkaWriter: ("minAcks", "subscribe"),
        DafkaStreamWriter: ("flushTimeout", "startingOffsets"),
    }
    for cls, (has, lacks) in per_class.items():
        doc = cls.__doc__ or ""
        assert has in doc and lacks not in doc, cls.__name__
        assert has in pydoc.render_doc(cls, renderer=pydoc.plaintext), cls.__name__


def test_a_local_session_starts_without_log_noise(tmp_path: Path) -> None:
    # Spark's default profile announced itself, a native-hadoop WARN and PySpark's "Setting
    # default log level" lines on every start; local_session() starts the JVM with errors only.
    # The JVM's own incubator-module line is printed before any logging exists.
    script = (
        "import dafka.spark\n"
        "spark = dafka.spark.local_session('quiet')\n"
        "print(spark.range(5).count())\n"
        "spark.stop()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["5"]
    noise = [
        line
        for line in out.stderr.splitlines()
        if line.strip() and not line.startswith("WARNING: Using incubator modules")
    ]
    assert noise == [], out.stderr
