"""PySpark (4.x) Python Data Sources over dafka, yielding Arrow batches built in Rust.

``dafka`` (:class:`DafkaDataSource`): Dafka topics as a source and a sink, batch
and streaming, modelled on Spark's Kafka source; registered with every session once
``dafka`` is installed (``pyspark_dafka``); see ``docs/spark.md`` and
``help(DafkaDataSource)``::

    df = (spark.read.format("dafka")
          .option("towers", cluster.towers)
          .option("subscribe", "readings")
          .load())

``zmtp`` (an extra, below): raw ZeroMQ messages, at most once, after
``dafka.spark.register(spark)``::

    df = (spark.read.format("zmtp")
          .option("endpoint", "tcp://127.0.0.1:5555")
          .option("numPartitions", 2)
          .load())

``zmtp`` (batch): each Spark partition connects one ZeroMQ ``PULL`` (or
``SUB``) socket to ``endpoint`` and reads until ``idleTimeout`` seconds pass
with nothing new, or until it has ``maxMessages`` messages. A ``PUSH`` peer
load-balances across the partitions; a ``PUB`` peer reaches every partition.
Schema: ``frames array<binary>`` (one row per message; ``frames[0]`` is the
first frame). Delivery is at most once: ZeroMQ keeps no offsets, so a message
in flight when a partition stops is lost. The Dafka source keeps offsets.

Options (case-insensitive, all strings as Spark passes them):

=================  =========  ==================================================
option             default    meaning
=================  =========  ==================================================
endpoint           required   ``tcp://host:port`` or ``ipc://path`` to connect to
socketType         ``PULL``   ``PULL`` or ``SUB``
subscribe          ``""``     SUB only: comma-free prefix to subscribe to
numPartitions      ``1``      parallel sockets (Spark tasks)
maxMessages        unlimited  per partition
idleTimeout        ``2.0``    seconds without a message that end a partition
batchSize          ``10000``  rows per Arrow batch
rcvhwm             ``10000``  receive high-water mark of each socket
=================  =========  ==================================================
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from dafka._spark_dafka import (
    DAFKA_SCHEMA,
    DAFKA_SCHEMA_WITH_HEADERS,
    DafkaDataSource,
    DafkaPartition,
    _warm_up_options,
)
from dafka.errors import InvalidArgumentError

__all__ = [
    "DAFKA_SCHEMA",
    "DAFKA_SCHEMA_WITH_HEADERS",
    "WARM_UP_GROUP",
    "ZMTP_SCHEMA",
    "DafkaDataSource",
    "DafkaPartition",
    "ZmtpDataSource",
    "local_session",
    "quiet_aborted_writes",
    "register",
    "warm_up",
]

ZMTP_SCHEMA = "frames array<binary>"

_log = logging.getLogger(__name__)


def register(spark: SparkSession) -> None:
    """Register every dafka data source with ``spark``: ``dafka`` and ``zmtp``.

    ``dafka`` registers itself in every session once the package is installed where Spark's
    Python runs (see :mod:`pyspark_dafka`); it is registered here only where it is not yet
    (Spark would log a warning on replacing it). ``zmtp`` is registered here only."""
    if not _registered(spark, DafkaDataSource.name()):
        spark.dataSource.register(DafkaDataSource)
    spark.dataSource.register(ZmtpDataSource)


def _registered(spark: SparkSession, name: str) -> bool:
    """Whether the JVM of a classic session knows data source `name` (False when it cannot
    be asked: a Spark Connect session)."""
    from py4j.protocol import Py4JError

    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:
        return False
    try:
        return bool(jsession.sessionState().dataSourceManager().dataSourceExists(name))
    except Py4JError:
        return False


# The job group of dafka.spark.warm_up's job (Spark UI, SparkContext.cancelJobGroup).
WARM_UP_GROUP = "dafka-warm-up"
# The thread-local properties setJobGroup sets (pyspark has no clearJobGroup).
_JOB_GROUP_PROPERTIES = (
    "spark.jobGroup.id",
    "spark.job.description",
    "spark.job.interruptOnCancel",
)


def warm_up(
    spark: SparkSession,
    towers: str | None = None,
    *,
    wait: bool = False,
    tasks: int | None = None,
    options: dict[str, str] | None = None,
) -> threading.Thread | None:
    """Start the executors' Python workers for ``format("dafka")`` reads ahead of the first.

    A new application's first read waits for Spark to start a Python worker on each executor
    (the worker's daemon, its fork, pyarrow and dafka imported): most of that read's task
    time (docs/spark.md, *A new application's first read*). This runs a read of the source
    (option ``warmUp``) whose ``tasks`` tasks read nothing and return: Spark keeps their
    workers, and the next read's tasks start in them. ``tasks`` defaults to the session's
    default parallelism: the executors' cores once they have registered (a session made
    before they did may say 2: give ``tasks``, or let the session wait for them with
    ``spark.scheduler.minRegisteredResourcesRatio``). With ``towers`` (and, for a CURVE
    cluster, the ``curve.*`` keys in ``options``), each worker's reader also starts
    connecting to the towers and finding the stores.

    In the background (a daemon thread, returned, Spark job group ``dafka-warm-up``) unless
    ``wait``; a read submitted meanwhile queues behind its tasks (Spark's FIFO scheduling)
    and then starts in the workers they started. Bad arguments raise here, at once; a failure
    of the job itself is logged in the background (the read after it reports the same fault
    with its own context). Spark stops workers left idle for a minute: call it within a
    minute of the first read (docs/spark.md)."""
    if tasks is None:
        try:
            tasks = spark.sparkContext.defaultParallelism
        except Exception:  # a Spark Connect session has no SparkContext here
            tasks = int(spark.conf.get("spark.default.parallelism", "2") or 2)
    if towers is not None and not towers.strip():
        # An empty string is a mistake (an unset variable), not "no towers": say so.
        raise InvalidArgumentError(
            "warm_up: towers is empty: give tcp://host:port[,...], or leave it out to start "
            "the workers without readers"
        )
    given = {"warmUp": str(tasks), **({"towers": towers} if towers is not None else {})}
    given.update(options or {})
    _warm_up_options(given)  # the checks the source makes, raised in the caller's thread
    reader = spark.read.format("dafka").options(**given)

    def run() -> None:
        try:
            sc = spark.sparkContext
        except Exception:  # Spark Connect: no job groups through SparkContext
            reader.load().write.format("noop").mode("overwrite").save()
            return
        saved = {k: sc.getLocalProperty(k) for k in _JOB_GROUP_PROPERTIES}
        sc.setJobGroup(WARM_UP_GROUP, f"dafka: starting {tasks} Python workers for reads")
        try:
            reader.load().write.format("noop").mode("overwrite").save()
        finally:  # the caller's later jobs (wait=True: this thread's) keep their own group
            for key, value in saved.items():
                sc.setLocalProperty(key, value)  # type: ignore[arg-type]  # None removes it

    if wait:
        run()
        return None

    def background() -> None:
        try:
            run()
        except Exception as e:  # the session stopped, an executor lost: the reads will say
            _log.warning("dafka.spark.warm_up failed: %s", e)

    thread = threading.Thread(target=background, name="dafka-warm-up", daemon=True)
    thread.start()
    return thread


# The loggers of Spark's ERROR lines that only say that a write was aborted. Stopping a
# streaming query interrupts the micro-batch running: each of these then logged its abort,
# FileFormatWriter with the whole stack of the interruption (a ClosedByInterruptException
# when the stop caught the query connecting to a Python worker to plan the batch, an
# InterruptedException when it caught it waiting for its tasks: 50 to 90 lines). The error of
# a write that really failed still reaches the caller: save() raises it, a query stops with it
# (query.exception(), and StreamExecution's own "terminated with error" line).
ABORT_LOGGERS = (
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
    "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec",
    "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask",
)
# Utils logs "Aborting task" (with the TaskKilledException of a stopped query's task) among
# errors worth seeing: only that message is dropped.
ABORTING_TASK = ("org.apache.spark.util.Utils", "Aborting task")


def quiet_aborted_writes(spark: SparkSession) -> None:
    """Stops Spark logging the writes it aborts (``ABORT_LOGGERS``, ``ABORTING_TASK``), so that
    stopping a streaming query in the middle of a micro-batch prints no stack trace. Classic
    sessions only (it configures the driver's log4j); ``local_session`` calls it. The levels
    stay whatever ``setLogLevel`` says later (it sets the root logger's)."""
    jvm: Any = spark.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    for name in ABORT_LOGGERS:
        log4j.core.config.Configurator.setLevel(name, log4j.Level.OFF)
    name, message = ABORTING_TASK
    context = log4j.LogManager.getContext(False)
    config = context.getConfiguration()
    logger = config.getLoggerConfig(name)
    if logger.getName() != name:
        logger = log4j.core.config.LoggerConfig(name, None, True)
        config.addLogger(name, logger)
    result = log4j.core.Filter.Result
    logger.addFilter(
        log4j.core.filter.RegexFilter.createFilter(message, None, True, result.DENY, result.NEUTRAL)
    )
    context.updateLoggers()


def local_session(
    app_name: str = "dafka", master: str = "local[2]", config: dict[str, str] | None = None
) -> SparkSession:
    """A Spark session on this machine, bound to loopback, with the dafka
    sources registered: what the demo, the tests and a notebook need.

    Spark binds to the machine's external interface unless told otherwise and
    starts its Python workers with whatever ``python3`` is on the PATH; this
    pins both (``SPARK_LOCAL_IP`` and ``PYSPARK_PYTHON`` set in the environment
    still win). Spark logs ERROR and above only, and not the writes it aborts
    (:func:`quiet_aborted_writes`: stopping a streaming query prints no stack trace).
    Spark's Python workers run :mod:`dafka.spark_daemon` (pyspark compiled once, not in
    every worker). ``master`` may be a cluster's (``spark://127.0.0.1:7077``); ``config``
    adds or overrides Spark settings (applied last).
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    log4j = Path(__file__).with_name("log4j2-local.properties")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        # Errors only from the JVM's start, when this call starts it (the driver's options
        # are read when the JVM is launched; an existing session keeps its own).
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.daemon.module", "dafka.spark_daemon")
    )
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    quiet_aborted_writes(spark)
    register(spark)
    return spark


@dataclass(frozen=True)
class _ZmtpOptions:
    endpoint: str
    socket_type: str
    subscribe: bytes
    num_partitions: int
    max_messages: int | None
    idle_timeout: float
    batch_size: int
    rcvhwm: int

    @classmethod
    def parse(cls, options: dict[str, str]) -> _ZmtpOptions:
        opts = {k.lower(): v for k, v in options.items()}
        endpoint = opts.get("endpoint")
        if not endpoint:
            raise InvalidArgumentError("the zmtp source needs option 'endpoint'")
        socket_type = opts.get("sockettype", "PULL").upper()
        if socket_type not in ("PULL", "SUB"):
            raise InvalidArgumentError(f"socketType must be PULL or SUB, not {socket_type!r}")
        max_messages = opts.get("maxmessages")
        parsed = cls(
            endpoint=endpoint,
            socket_type=socket_type,
            subscribe=opts.get("subscribe", "").encode(),
            num_partitions=_positive(opts, "numpartitions", 1),
            max_messages=None if max_messages is None else _positive(opts, "maxmessages", 0),
            idle_timeout=_positive(opts, "idletimeout", 2.0),
            batch_size=_positive(opts, "batchsize", 10_000),
            rcvhwm=_positive(opts, "rcvhwm", 10_000),
        )
        return parsed


_Number = TypeVar("_Number", int, float)


def _positive(opts: dict[str, str], key: str, default: _Number) -> _Number:
    """Option `key` parsed as the type of `default` (Spark passes strings); > 0."""
    raw = opts.get(key)
    kind = type(default)
    try:
        value = default if raw is None else kind(raw)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise InvalidArgumentError(f"option {key} must be {what}, not {raw!r}") from None
    if not value > 0:
        raise InvalidArgumentError(f"option {key} must be > 0, not {value}")
    return value


@dataclass(frozen=True)
class ZmtpPartition(InputPartition):
    """One Spark task: one socket connected to the endpoint."""

    index: int


class ZmtpDataSource(DataSource):
    """``spark.read.format("zmtp")``: messages from a ZeroMQ endpoint."""

    @classmethod
    def name(cls) -> str:
        return "zmtp"

    def schema(self) -> str:
        return ZMTP_SCHEMA

    def reader(self, schema: Any) -> ZmtpReader:
        return ZmtpReader(_ZmtpOptions.parse(dict(self.options)))


class ZmtpReader(DataSourceReader):
    def __init__(self, options: _ZmtpOptions) -> None:
        self.options = options

    def partitions(self) -> list[ZmtpPartition]:
        return [ZmtpPartition(i) for i in range(self.options.num_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # Imported here: this runs in a (forked) Spark worker, not the driver.
        from dafka.zmtp import Socket

        o = self.options
        with Socket(o.socket_type, rcvhwm=o.rcvhwm, linger=0) as sock:
            if o.socket_type == "SUB":
                sock.subscribe(o.subscribe)
            sock.connect(o.endpoint)
            received = 0
            while o.max_messages is None or received < o.max_messages:
                want = o.batch_size
                if o.max_messages is not None:
                    want = min(want, o.max_messages - received)
                batch = sock.recv_batch(want, timeout=o.idle_timeout)
                if batch.num_rows == 0:
                    break
                received += batch.num_rows
                yield batch
