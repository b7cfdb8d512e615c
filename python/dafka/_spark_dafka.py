"""The ``dafka`` PySpark data source: batch and streaming reads, batch and streaming writes.

Read through :mod:`dafka.spark` (``DafkaDataSource``); ``docs/spark.md`` is the user guide.

Reading. The driver asks the stores for the topic's partitions and their bounds
(``dafka.PartitionReader.offsets``: GET-HEADS answered by DIRECT-LOW-WATER and DIRECT-HEAD)
and plans one Spark input partition per Dafka partition and offset range (split further for
``minPartitions``); with ``subscribePattern`` the topics are those the stores hold
(``PartitionReader.topics``) whose names match, and timestamp options become offsets through
``PartitionReader.offsets_for_times``. A task assigns its range on a ``PartitionReader`` kept
per Python worker process and keyed by the towers (Spark reuses its Python workers, so the
beacons, connections and discovery are paid once per worker, not per task), yields the
``pyarrow.RecordBatch``es the Rust consumer builds with their columns picked in the order of
Spark's Kafka source, and unassigns. Offsets are ``{topic: {partition: next_offset}}`` and
live only in Spark's checkpoint.

Writing. A task sends each Arrow batch's ``value`` column (string or binary), and its ``key``,
``headers`` and ``timestamp`` columns when the rows have them, with ``Producer.send_many`` (no
per-row Python work) and returns only once every record is acknowledged (``flush``).
Partition identity: one producer, so one Dafka partition, per (Python worker process, towers,
topic), kept for the worker's life; see docs/spark.md.
"""

from __future__ import annotations

import difflib
import itertools
import json
import logging
import math
import os
import re
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

from dafka import _spark_keys
from dafka.errors import DafkaError, InvalidArgumentError

if TYPE_CHECKING:
    # pyarrow is imported where batches are made or inspected: Spark's lookup and creation
    # of the source (a Python process each on the driver, per application) do without it.
    import pyarrow as pa

    from dafka._native import PartitionReader, Producer

__all__ = ["DAFKA_SCHEMA", "DAFKA_SCHEMA_WITH_HEADERS", "DafkaDataSource", "DafkaPartition"]

# The columns of Spark's Kafka source, in its order (`partition` a string: a Dafka partition is
# its producer's id); `headers` after them with includeHeaders. A task hands Spark the
# consumer's Arrow columns (`Consumer.poll`: topic, partition, offset, value, timestamp,
# timestampType, key, headers) picked in this order, never rebuilt.
READ_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
DAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition string, offset bigint, "
    "timestamp timestamp, timestampType int"
)
HEADERS_FIELD = "headers array<struct<key:string,value:binary>>"
DAFKA_SCHEMA_WITH_HEADERS = f"{DAFKA_SCHEMA}, {HEADERS_FIELD}"
# The columns of a row the sink sends: value (required), key, headers, timestamp (optional).
RECORD_COLUMNS = ("value", "key", "headers", "timestamp")


@dataclass(frozen=True)
class _Option:
    """One option of the source or sink: what `help()`, the messages and the checks use."""

    name: str  # as users write it; Spark hands it over in lower case
    uses: frozenset[str]  # of BATCH, STREAM, SINK
    default: str
    meaning: str


BATCH, STREAM, SINK = "batch read", "stream read", "sink"
_ALL = frozenset({BATCH, STREAM, SINK})
_READS = frozenset({BATCH, STREAM})

OPTIONS: tuple[_Option, ...] = (
    _Option("towers", _ALL, "required", "tcp://host:port of the towers, comma-separated"),
    _Option(
        "subscribe",
        _READS,
        "none",
        "comma list of topics (exact names); this or subscribePattern is required",
    ),
    _Option(
        "subscribePattern",
        _READS,
        "none",
        "a regular expression (Java syntax, as Kafka's) matching whole topic names among the "
        "topics the stores hold, instead of subscribe; a stream also reads the topics that "
        "come to match, from their earliest records",
    ),
    _Option(
        "startingOffsets",
        _READS,
        "earliest (batch), latest (stream)",
        'earliest, latest or JSON {"topic": {"PARTITION": offset}} (-2 earliest, -1 latest; '
        "a partition not named starts at earliest)",
    ),
    _Option(
        "startingTimestamp",
        _READS,
        "none",
        "milliseconds since the epoch (UTC): every partition starts at its first record "
        "whose timestamp is at or after it; instead of startingOffsets",
    ),
    _Option(
        "startingOffsetsByTimestamp",
        _READS,
        "none",
        'JSON {"topic": {"PARTITION": milliseconds}}: as startingTimestamp, per partition (a '
        "partition not named starts at earliest); instead of startingOffsets",
    ),
    _Option(
        "startingOffsetsByTimestampStrategy",
        _READS,
        "error",
        "error or latest: a partition without a record at or after its starting timestamp "
        "fails the query, or starts at latest",
    ),
    _Option(
        "endingOffsets",
        frozenset({BATCH}),
        "latest",
        "latest or JSON as startingOffsets (a partition not named ends at latest)",
    ),
    _Option(
        "endingTimestamp",
        frozenset({BATCH}),
        "none",
        "milliseconds since the epoch (UTC): every partition ends before its first record "
        "whose timestamp is at or after it (at latest without one); instead of endingOffsets",
    ),
    _Option(
        "endingOffsetsByTimestamp",
        frozenset({BATCH}),
        "none",
        'JSON {"topic": {"PARTITION": milliseconds}}: as endingTimestamp, per partition (a '
        "partition not named ends at latest); instead of endingOffsets",
    ),
    _Option(
        "includeHeaders",
        _READS,
        "false",
        "true adds the column headers array<struct<key:string,value:binary>> (null: none)",
    ),
    _Option(
        "maxOffsetsPerTrigger",
        frozenset({STREAM}),
        "none",
        "most records per micro-batch over all partitions (trigger(availableNow=True) too)",
    ),
    _Option(
        "minOffsetsPerTrigger",
        frozenset({STREAM}),
        "none",
        "a micro-batch waits until this many new records wait over all partitions, or until "
        "maxTriggerDelay passed since the last one; at most maxOffsetsPerTrigger",
    ),
    _Option(
        "maxTriggerDelay",
        frozenset({STREAM}),
        "15m",
        "with minOffsetsPerTrigger: the longest a micro-batch waits for it while records wait; "
        "a number and a unit: us, ms, s, m (or min), h, d",
    ),
    _Option(
        "minPartitions",
        _READS,
        "1",
        "split offset ranges into at least this many tasks (at most 10000; no piece under "
        "100 records)",
    ),
    _Option(
        "failOnDataLoss",
        _READS,
        "true",
        "fail when offsets the query needs are gone (retention, damage); false skips them",
    ),
    _Option(
        "offsetsTimeout",
        _READS,
        "10",
        "seconds to wait for a store when listing partitions, before failing",
    ),
    _Option(
        "pollTimeout",
        _READS,
        "60",
        "seconds a task waits for the next record of its range before failing",
    ),
    _Option("maxRecordsPerBatch", _READS, "65536", "most rows per Arrow batch handed to Spark"),
    _Option(
        "warmUp",
        frozenset({BATCH}),
        "none",
        "N: instead of a read, N tasks that read nothing and only start the executors' Python "
        "workers with dafka imported (and, with towers, their readers), so the next "
        "read's tasks start in them at once; takes only towers and the curve.* keys besides "
        "(dafka.spark.warm_up runs it)",
    ),
    _Option(
        "topic",
        frozenset({SINK}),
        "none",
        "the topic of every row, over any topic column (as Kafka's sink); without it, each "
        "row's topic column",
    ),
    _Option("minAcks", frozenset({SINK}), "1", "distinct stores that must acknowledge a record"),
    _Option(
        "maxRecordBytes",
        frozenset({SINK}),
        "1048576",
        "the largest record a write sends, its value, key and headers together (the stores "
        "must take it too: their max_record_bytes)",
    ),
    _Option(
        "flushTimeout",
        frozenset({SINK}),
        "60",
        "seconds a write task waits for acknowledgements before failing",
    ),
    _Option(
        _spark_keys.NAMES[_spark_keys.CLUSTER],
        _ALL,
        "none",
        "an encrypted cluster's secret key (Z85); all three curve.* options or none",
    ),
    _Option(
        _spark_keys.NAMES[_spark_keys.MEMBER],
        _ALL,
        "none",
        "this job's member secret key (Z85), its public key on the cluster's allow-lists",
    ),
    _Option(
        _spark_keys.NAMES[_spark_keys.ALLOWED],
        _ALL,
        "none",
        "comma list of member public keys (Z85) allowed to connect to the job's nodes",
    ),
)
# Lower case, as Spark hands options over: the option.
_BY_KEY = {o.name.lower(): o for o in OPTIONS}


def _keys(use: str) -> set[str]:
    return {o.name.lower() for o in OPTIONS if use in o.uses}


_BATCH_READ = _keys(BATCH)
_STREAM_READ = _keys(STREAM)
_READ = _BATCH_READ & _STREAM_READ
_WRITE = _keys(SINK)
# Spark's own keys that may reach a data source's options.
_SPARK_KEYS = {"path", "checkpointlocation", "queryname"}


def _options_doc(uses: frozenset[str]) -> str:
    """The options of `uses` as a text table, for the docstrings `help()` shows."""
    rows = [o for o in OPTIONS if o.uses & uses]
    width = max(len(o.name) for o in rows) + 2
    lines = ["Options (keys case-insensitive, values strings; an unknown key fails):", ""]
    for o in rows:
        meaning = f"{o.meaning}. Default: {o.default}."
        if uses - o.uses:
            meaning += f" For: {', '.join(u for u in (BATCH, STREAM, SINK) if u in o.uses)}."
        wrapped = textwrap.wrap(meaning, 90 - width)
        lines.append(f"    {o.name:<{width}}{wrapped[0]}")
        lines += [f"    {'':<{width}}{w}" for w in wrapped[1:]]
    return "\n".join(lines)


# minPartitions splits no range into pieces of fewer records than this (a range already
# smaller stays whole): a task costs about 0.1 s of scheduling and start-up whatever it reads,
# so 1,000 one-record tasks made a 1,000-row read take 107 s.
MIN_SPLIT_RECORDS = 100
# The largest minPartitions accepted: more tasks than this cost more to schedule than any
# read gains from them.
MAX_MIN_PARTITIONS = 10_000

_log = logging.getLogger(__name__)
_IMPORTED = time.time()


@dataclass(frozen=True)
class _Position:
    """Where a read starts or ends, as the one option that said it: startingOffsets or
    endingOffsets ("earliest", "latest" or JSON offsets), startingTimestamp or endingTimestamp
    (milliseconds), startingOffsetsByTimestamp or endingOffsetsByTimestamp (JSON of
    milliseconds). `value` is the option's text, checked by `_parse`."""

    option: str
    value: str

    @property
    def start(self) -> bool:
        return self.option.startswith("starting")


@dataclass(frozen=True)
class _Options:
    towers: str
    topics: tuple[str, ...]  # subscribe; empty with subscribePattern
    pattern: re.Pattern[str] | None  # subscribePattern
    starting: _Position
    ending: _Position
    latest_without_time: bool  # startingOffsetsByTimestampStrategy=latest
    include_headers: bool
    min_partitions: int
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay: float  # seconds
    offsets_timeout: float
    poll_timeout: float
    max_records_per_batch: int
    topic: str | None
    min_acks: int
    max_record_bytes: int
    flush_timeout: float


def _parse(options: dict[str, str], allowed: set[str], what: str) -> _Options:
    """Validates every option at once; the message names the option at fault."""
    opts = {k.lower(): str(v) for k, v in options.items()}
    _check_keys(opts, allowed, what)
    towers = _towers(opts)
    if towers is None:
        raise InvalidArgumentError('option towers is required: "tcp://host:port[,...]"')
    topics: tuple[str, ...] = ()
    pattern = None
    if "subscribe" in allowed:
        topics, pattern = _subscription(opts)
    default_start = "latest" if what == "stream reader" else "earliest"
    starting = _position(opts, "starting", default_start, topics, pattern)
    ending = _position(opts, "ending", "latest", topics, pattern)
    _check_times(starting, ending)
    strategy = opts.get("startingoffsetsbytimestampstrategy")
    if strategy is not None:
        if strategy.strip().lower() not in ("error", "latest"):
            raise InvalidArgumentError(
                f"option startingOffsetsByTimestampStrategy must be error or latest, not "
                f"{strategy!r}"
            )
        if "Timestamp" not in starting.option:
            raise InvalidArgumentError(
                "option startingOffsetsByTimestampStrategy applies only with startingTimestamp "
                "or startingOffsetsByTimestamp: add one or drop it"
            )
    most, fewest = _trigger_limits(opts)
    return _Options(
        towers=towers,
        topics=topics,
        pattern=pattern,
        starting=starting,
        ending=ending,
        latest_without_time=(strategy or "").strip().lower() == "latest",
        include_headers=_bool(opts, "includeHeaders"),
        min_partitions=_number(opts, "minPartitions", int, most=MAX_MIN_PARTITIONS),
        fail_on_data_loss=_bool(opts, "failOnDataLoss"),
        max_offsets_per_trigger=most,
        min_offsets_per_trigger=fewest,
        max_trigger_delay=_duration(opts, "maxTriggerDelay"),
        offsets_timeout=_number(opts, "offsetsTimeout", float),
        poll_timeout=_number(opts, "pollTimeout", float),
        max_records_per_batch=_number(opts, "maxRecordsPerBatch", int),
        topic=opts.get("topic") or None,
        min_acks=_number(opts, "minAcks", int),
        max_record_bytes=_number(opts, "maxRecordBytes", int),
        flush_timeout=_number(opts, "flushTimeout", float),
    )


def _towers(opts: dict[str, str]) -> str | None:
    """Option towers checked (tcp://host:port, comma-separated) with the curve.* keys applied
    (`_spark_keys.parse`); None when it is not given."""
    towers = opts.get("towers", "").strip()
    if not towers:
        return None
    for t in towers.split(","):
        if not t.strip().startswith("tcp://") or ":" not in t.strip()[6:]:
            raise InvalidArgumentError(f"option towers: {t.strip()!r} is not tcp://host:port")
    return _spark_keys.parse(opts, towers)


# What a warm-up read (option warmUp) takes: its own key, towers and the CURVE keys.
_WARM_UP = {"warmup", "towers", *_spark_keys.OPTIONS}


@dataclass(frozen=True)
class _WarmUp:
    tasks: int
    towers: str | None


def _warm_up_options(options: dict[str, str]) -> _WarmUp | None:
    """The warm-up read `options` ask for (option warmUp), or None for a real read."""
    opts = {k.lower(): str(v) for k, v in options.items()}
    if "warmup" not in opts:
        return None
    others = sorted(set(opts) - _WARM_UP - _SPARK_KEYS)
    if others:
        raise InvalidArgumentError(
            f"option warmUp reads nothing and takes only towers and the curve.* keys besides, "
            f"not {', '.join(_BY_KEY[k].name if k in _BY_KEY else k for k in others)}"
        )
    tasks = _number(opts, "warmUp", int, most=MAX_MIN_PARTITIONS)
    return _WarmUp(tasks, _towers(opts))


def _subscription(opts: dict[str, str]) -> tuple[tuple[str, ...], re.Pattern[str] | None]:
    """subscribe's topics, or subscribePattern's regular expression: exactly one of them."""
    given = [name for name in ("subscribe", "subscribePattern") if name.lower() in opts]
    if len(given) > 1:
        raise InvalidArgumentError(
            "options subscribe and subscribePattern cannot be given together: subscribe names "
            "topics, subscribePattern matches them; give one"
        )
    if "subscribepattern" in opts:
        return (), _java_regex(opts["subscribepattern"])
    topics = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
    if not topics:
        raise InvalidArgumentError(
            "option subscribe (a comma list of topics) or subscribePattern (a regular "
            "expression over topic names) is required"
        )
    return topics, None


# Java's named group, (?<name>...), which Python spells (?P<name>...); not an escaped "(".
_JAVA_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<(?=[A-Za-z])")


def _java_regex(text: str) -> re.Pattern[str]:
    """subscribePattern as Python's `re` reads it. Kafka's source compiles it with Java's
    `Pattern`, and a topic is read when the whole name matches (`matches()`: `fullmatch`
    here). What topic patterns use (classes, quantifiers, alternation, groups, anchors) is
    the same in both; Java's named groups are translated; what Python lacks (\\p{...}
    classes, for one) is refused, naming the option."""
    if not text.strip():
        raise InvalidArgumentError("option subscribePattern must be a regular expression, not ''")
    try:
        return re.compile(_JAVA_NAMED_GROUP.sub("(?P<", text))
    except re.error as e:
        raise InvalidArgumentError(
            f"option subscribePattern: {text!r} is not a regular expression Python's re reads "
            f"({e}); Java-only syntax such as \\p{{...}} classes has no equivalent here"
        ) from None


def _position(
    opts: dict[str, str],
    kind: str,
    default: str,
    topics: tuple[str, ...],
    pattern: re.Pattern[str] | None,
) -> _Position:
    """The start (`kind` "starting") or end ("ending") of a read: from at most one of
    {kind}Offsets, {kind}Timestamp and {kind}OffsetsByTimestamp (Kafka's source takes the
    first of Timestamp, OffsetsByTimestamp, Offsets and ignores the others silently; here
    giving two is refused: one of them would do nothing)."""
    names = [f"{kind}Offsets", f"{kind}Timestamp", f"{kind}OffsetsByTimestamp"]
    given = [n for n in names if n.lower() in opts]
    if len(given) > 1:
        raise InvalidArgumentError(
            f"options {' and '.join(given)} both say where the read "
            f"{'starts' if kind == 'starting' else 'ends'}: give one"
        )
    if not given:
        return _Position(names[0], default)
    name = given[0]
    value = opts[name.lower()].strip()
    if name == names[0]:
        if value not in (("earliest", "latest") if kind == "starting" else ("latest",)):
            _offsets_json(name, value, topics, pattern)
    elif name == names[1]:
        _millis(name, value)
    else:
        _times_json(name, value, topics, pattern)
    return _Position(name, value)


def _millis(name: str, text: str) -> int:
    """A timestamp option: milliseconds since the epoch, UTC (as Kafka's source takes it)."""
    try:
        ms = int(text)
    except ValueError:
        ms = -1
    if ms < 0:
        raise InvalidArgumentError(
            f"option {name} must be milliseconds since the epoch (UTC), an integer >= 0, like "
            f"{int(time.time() * 1000)} for now, not {text!r}"
        )
    return ms


def _times_json(
    name: str, text: str, topics: tuple[str, ...], pattern: re.Pattern[str] | None
) -> dict[str, dict[str, int]]:
    """``{"topic": {"PARTITION": milliseconds}}`` (milliseconds since the epoch, >= 0)."""
    value = _json_map(text)
    if value is None or any(ms < 0 for ps in value.values() for ms in ps.values()):
        raise InvalidArgumentError(
            f'option {name} must be JSON {{"topic": {{"PARTITION": milliseconds}}}} '
            f"(milliseconds since the epoch, UTC, >= 0), not {text!r}"
        )
    _check_named_topics(name, value, topics, pattern)
    return value


def _json_map(text: str) -> dict[str, dict[str, int]] | None:
    """``{"topic": {"PARTITION": integer}}`` read from `text`, None if it is not that shape."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    ok = isinstance(value, dict) and all(
        isinstance(t, str)
        and isinstance(ps, dict)
        and all(
            isinstance(p, str) and isinstance(o, int) and not isinstance(o, bool)
            for p, o in ps.items()
        )
        for t, ps in value.items()
    )
    return value if ok else None


def _check_named_topics(
    name: str,
    value: dict[str, dict[str, int]],
    topics: tuple[str, ...],
    pattern: re.Pattern[str] | None,
) -> None:
    if pattern is not None:
        extra = sorted(t for t in value if not pattern.fullmatch(t))
        if extra:
            raise InvalidArgumentError(
                f"option {name} names topics subscribePattern does not match: {extra}"
            )
        return
    extra = sorted(set(value) - set(topics))
    if extra:
        raise InvalidArgumentError(f"option {name} names topics not subscribed: {extra}")


def _times_of(position: _Position) -> tuple[int | None, dict[tuple[str, str], int]]:
    """A timestamp position's times in ms: (for every partition, {(topic, partition): ms})."""
    if position.option.endswith("OffsetsByTimestamp"):
        given = json.loads(position.value)
        return None, {(t, p): ms for t, ps in given.items() for p, ms in ps.items()}
    if position.option.endswith("Timestamp"):
        return int(position.value), {}
    return None, {}


def _check_times(starting: _Position, ending: _Position) -> None:
    """A read that would start after it ends, by the times given, is a mistake: refused."""
    start_all, start_by = _times_of(starting)
    end_all, end_by = _times_of(ending)
    for key in {*start_by, *end_by, ("", "")}:
        s = start_by.get(key, start_all)
        e = end_by.get(key, end_all)
        if s is not None and e is not None and s > e:
            where = "" if key == ("", "") else f" for {key[0]}/{key[1]}"
            raise InvalidArgumentError(
                f"{starting.option} {s} is after {ending.option} {e}{where}: the read would "
                "end before it starts"
            )


def _check_keys(opts: dict[str, str], allowed: set[str], what: str) -> None:
    """Fails on a key that is no option of `what`, naming it, the option it may be a
    misspelling of, and every option `what` takes."""
    unknown = sorted(set(opts) - allowed - _SPARK_KEYS)
    if not unknown:
        return
    said = []
    for key in unknown:
        if key in _BY_KEY:
            o = _BY_KEY[key]
            said.append(f"{o.name} (for a dafka {' or '.join(sorted(o.uses))} only)")
            continue
        near = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.75)
        said.append(f"{key} (did you mean {_BY_KEY[near[0]].name}?)" if near else key)
    raise InvalidArgumentError(
        f"unknown option{'s' if len(said) > 1 else ''} {', '.join(said)} for a dafka {what}; "
        f"its options: {', '.join(sorted((_BY_KEY[k].name for k in allowed), key=str.lower))}"
    )


def _number(opts: dict[str, str], name: str, kind: type, most: Any = None) -> Any:
    """Option `name` as a positive `kind`; its default is the one the option table says (and
    `help()` shows)."""
    raw = opts.get(name.lower())
    if raw is None:
        return kind(_BY_KEY[name.lower()].default)
    try:
        value = kind(raw)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise InvalidArgumentError(f"option {name} must be {what}, not {raw!r}") from None
    if not value > 0 or (kind is float and math.isinf(value)):
        raise InvalidArgumentError(f"option {name} must be > 0, not {raw!r}")
    if most is not None and value > most:
        raise InvalidArgumentError(f"option {name} must be at most {most}, not {raw!r}")
    return value


def _trigger_limits(opts: dict[str, str]) -> tuple[int | None, int | None]:
    """maxOffsetsPerTrigger and minOffsetsPerTrigger (None when not given), checked against
    each other and maxTriggerDelay."""
    most = _number(opts, "maxOffsetsPerTrigger", int) if "maxoffsetspertrigger" in opts else None
    fewest = _number(opts, "minOffsetsPerTrigger", int) if "minoffsetspertrigger" in opts else None
    if "maxtriggerdelay" in opts and fewest is None:
        # Kafka's source ignores it then; a delay that does nothing is a mistake to show.
        raise InvalidArgumentError(
            "option maxTriggerDelay applies only with minOffsetsPerTrigger (the delay a "
            "micro-batch waiting for minOffsetsPerTrigger records may take): add "
            "minOffsetsPerTrigger or drop maxTriggerDelay"
        )
    if most is not None and fewest is not None and fewest > most:
        raise InvalidArgumentError(
            f"option minOffsetsPerTrigger ({fewest}) must not exceed maxOffsetsPerTrigger "
            f"({most}): a micro-batch would wait for more records than it may read"
        )
    return most, fewest


# Spark's time units (its `timeStringAsMs`, which Kafka's maxTriggerDelay goes through), in s.
_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?)\s*([a-z]*)")


def _duration(opts: dict[str, str], name: str) -> float:
    """Option `name`, a duration such as "15m", "30s" or "500ms", in seconds (> 0); its default
    is the option table's. A bare number is refused: it is milliseconds in Spark's Kafka
    source but seconds in this source's other options (offsetsTimeout, pollTimeout)."""
    raw = opts.get(name.lower(), _BY_KEY[name.lower()].default)
    match = _DURATION.fullmatch(raw.strip().lower())
    units = ", ".join(_TIME_UNITS)
    if match is None or match[2] not in _TIME_UNITS:
        hint = f"; {raw.strip()}ms or {raw.strip()}s?" if match and not match[2] else ""
        raise InvalidArgumentError(
            f'option {name} must be a number and a unit ({units}), like "15m", "30s" or '
            f'"500ms", not {raw!r}{hint}'
        )
    seconds = float(match[1]) * _TIME_UNITS[match[2]]
    if not seconds > 0:
        raise InvalidArgumentError(f"option {name} must be longer than 0, not {raw!r}")
    return seconds


def _bool(opts: dict[str, str], name: str) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return _BY_KEY[name.lower()].default == "true"
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise InvalidArgumentError(f"option {name} must be true or false, not {raw!r}")


def _offsets_json(
    name: str, text: str, topics: tuple[str, ...], pattern: re.Pattern[str] | None = None
) -> dict[str, dict[str, int]]:
    """``{"topic": {"PARTITION": offset}}``; -2 means earliest, -1 latest (as Kafka's)."""
    value = _json_map(text)
    if value is None or any(o < -2 for ps in value.values() for o in ps.values()):
        raise InvalidArgumentError(
            f'option {name} must be "earliest", "latest" or JSON '
            f'{{"topic": {{"PARTITION": offset}}}} (offset >= 0, -2 earliest, -1 latest), '
            f"not {text!r}"
        )
    _check_named_topics(name, value, topics, pattern)
    return value


# --- per-process node caches ---------------------------------------------------------------

_LOCK = threading.Lock()
_READERS: dict[str, PartitionReader] = {}
# One offsets query at a time per reader (keyed by towers, as the readers): the node keys a
# query by topic only, so two concurrent queries of one topic (the heads thread and a direct
# `_bounds`) would share, reset and remove each other's answers (empty or partial bounds).
_OFFSETS_LOCKS: dict[str, threading.Lock] = {}
_PRODUCERS: dict[tuple[str, str, int, int], Producer] = {}


def _reader(towers: str, topic: str | None = None, timeout: float = 10.0) -> PartitionReader:
    """This process's reader for `towers`, started on first use and kept (Spark reuses its
    Python workers: the node's start-up and discovery are paid once per worker). A new one
    first waits until a store is reachable (an offsets query of `topic`), so the FETCH of the
    first range is not sent before any store can hear it (and retried with backoff)."""
    from dafka._native import PartitionReader

    with _LOCK:
        reader = _READERS.get(towers)
        if reader is None or reader.closed:
            reader = PartitionReader(towers, curve=_spark_keys.curve_of(towers))
            if topic is not None:
                reader.offsets(topic, timeout=timeout)
            _READERS[towers] = reader
        return reader


def _process_started(pid: int) -> float | None:
    """When process `pid` started (s since the epoch), from /proc; None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(x.split()[1]) for x in f if x.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _timing(event: dict[str, Any]) -> None:
    """Appends `event` as a JSON line to $DAFKA_SPARK_TIMING, if set (the benchmarks'
    task-start to first-batch measurement), with where this Python worker's time went:
    when it and its parent (pyspark's daemon on an executor) started, when it imported this
    module, and the Spark task it runs (stage, partition, attempt) if any."""
    path = os.environ.get("DAFKA_SPARK_TIMING")
    if not path:
        return
    from pyspark import TaskContext

    task = TaskContext.get()
    event = {
        "pid": os.getpid(),
        "at": time.time(),
        "process_start": _process_started(os.getpid()),
        "parent_start": _process_started(os.getppid()),
        "imported": _IMPORTED,
        **event,
    }
    if task is not None:
        event.update(stage=task.stageId(), task=task.partitionId(), attempt=task.attemptNumber())
    with open(path, "a") as f:
        f.write(json.dumps(event) + "\n")


def _producer(o: _Options, topic: str) -> Producer:
    """This process's producer of `topic`: one Dafka partition per worker process and topic."""
    from dafka._native import Producer

    with _LOCK:
        key = (o.towers, topic, o.min_acks, o.max_record_bytes)
        producer = _PRODUCERS.get(key)
        if producer is None or producer.closed:
            producer = Producer(
                topic,
                towers=o.towers,
                min_acks=o.min_acks,
                curve=_spark_keys.curve_of(o.towers),
                max_record_bytes=o.max_record_bytes,
            )
            _PRODUCERS[key] = producer
        return producer


# --- planning --------------------------------------------------------------------------------

Offsets = dict[str, dict[str, int]]


def _offsets_lock(towers: str) -> threading.Lock:
    with _LOCK:
        return _OFFSETS_LOCKS.setdefault(towers, threading.Lock())


def _source_error(e: DafkaError, what: str, o: _Options) -> DafkaError:
    """`e`, a failed query of the stores, said again naming what the source asked."""
    msg = f"dafka source: cannot {what}: {e}"
    if _spark_keys.curve_of(o.towers) is None:
        msg += " (an encrypted cluster answers only with the curve.* options)"
    return type(e)(msg)


def _subscribed(o: _Options) -> str:
    return (
        f"{list(o.topics)}" if o.pattern is None else f"the topics matching {o.pattern.pattern!r}"
    )


def _bounds(o: _Options) -> dict[str, dict[str, tuple[int, int]]]:
    """``{topic: {partition: (low, end)}}`` from the stores: every subscribed topic, or with
    subscribePattern every topic the stores hold whose whole name matches it."""
    reader = _reader(o.towers)
    try:
        with _offsets_lock(o.towers):
            topics = o.topics
            if o.pattern is not None:
                held = reader.topics(timeout=o.offsets_timeout)
                topics = tuple(sorted(t for t in held if o.pattern.fullmatch(t)))
            return {t: reader.offsets(t, timeout=o.offsets_timeout) for t in topics}
    except DafkaError as e:
        raise _source_error(e, f"list the partitions of {_subscribed(o)}", o) from e


def _resolve(
    position: _Position, o: _Options, bounds: dict[str, dict[str, tuple[int, int]]]
) -> Offsets:
    """Offsets for every known partition from where `position` says a read starts or ends:
    "earliest", "latest" or JSON offsets (-2/-1 inside; a partition the JSON does not name
    starts at earliest, ends at latest), or timestamps (`_from_times`)."""
    if position.option.endswith("Timestamp"):
        return _from_times(position, o, bounds)
    spec = position.value
    given = (
        {}
        if spec in ("earliest", "latest")
        else _offsets_json(position.option, spec, o.topics, o.pattern)
    )
    default = -1 if spec == "latest" or not position.start else -2
    out: Offsets = {}
    for t in sorted({*bounds, *given}):
        out[t] = {}
        for p, (low, end) in bounds.get(t, {}).items():
            want = given.get(t, {}).get(p, default)
            out[t][p] = low if want == -2 else end if want == -1 else want
        for p, want in given.get(t, {}).items():
            if p not in out[t]:
                if want < 0:
                    continue
                out[t][p] = want
    return out


def _from_times(
    position: _Position, o: _Options, bounds: dict[str, dict[str, tuple[int, int]]]
) -> Offsets:
    """Offsets from a timestamp option (milliseconds, as Kafka's): per partition, the first
    offset whose record's timestamp is at or after the time, as the stores answer
    `PartitionReader.offsets_for_times`. A partition the JSON does not name starts at earliest
    or ends at latest. A partition without a record that recent ends at latest; a start there
    fails, or with startingOffsetsByTimestampStrategy=latest starts at latest (a partition no
    store holds yet is then left out: it is read from its first record when it comes)."""
    every, by = _times_of(position)
    named: dict[str, dict[str, int]] = {}
    for (t, p), at in by.items():
        named.setdefault(t, {})[p] = at
    asked: dict[str, int | dict[str, int]] = (
        {t: every * 1000 for t in bounds}
        if every is not None
        else {t: {p: ms * 1000 for p, ms in ps.items()} for t, ps in named.items()}
    )
    found = _offsets_for_times(o, asked)
    out: Offsets = {}
    for t in sorted({*bounds, *named}):
        held = bounds.get(t, {})
        out[t] = {}
        for p in sorted({*held, *named.get(t, {})}):
            low, end = held.get(p, (0, 0))
            ms: int | None = every if every is not None else named.get(t, {}).get(p)
            if ms is None:
                out[t][p] = low if position.start else end
                continue
            offset = found.get(t, {}).get(p)
            if offset is not None:
                out[t][p] = offset
            elif position.start and not o.latest_without_time:
                raise InvalidArgumentError(
                    f"dafka source: no record of {t}/{p} has a timestamp at or after "
                    f"{position.option} {ms} ({_utc(ms)}); set "
                    "startingOffsetsByTimestampStrategy=latest to start such partitions at "
                    "latest"
                )
            elif p in held:
                out[t][p] = end
    return out


def _utc(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def _offsets_for_times(
    o: _Options, asked: dict[str, int | dict[str, int]]
) -> dict[str, dict[str, int | None]]:
    """`PartitionReader.offsets_for_times` of each topic of `asked` (times in microseconds:
    one for every partition, or per partition)."""
    reader = _reader(o.towers)
    try:
        with _offsets_lock(o.towers):
            return {
                t: reader.offsets_for_times(t, times, timeout=o.offsets_timeout)
                for t, times in asked.items()
            }
    except DafkaError as e:
        raise _source_error(e, f"find offsets by time in {_subscribed(o)}", o) from e


@dataclass(frozen=True)
class DafkaPartition(InputPartition):
    """One Spark task: offsets ``[start, end)`` of one Dafka partition."""

    topic: str
    partition: str
    start: int
    end: int


def _plan(
    start: Offsets,
    end: Offsets,
    o: _Options,
    low: dict[str, dict[str, tuple[int, int]]] | None,
) -> list[DafkaPartition]:
    """Ranges from `start` to `end` (a partition missing from `start` starts at its low-water
    mark, 0 if unknown); checks for data lost to retention; splits for ``minPartitions``, into
    pieces of at least ``MIN_SPLIT_RECORDS`` records."""
    ranges = []
    for t, parts in end.items():
        for p, e in sorted(parts.items()):
            first = (low or {}).get(t, {}).get(p, (0, 0))[0]
            s = start.get(t, {}).get(p, first)
            if s < first:
                if o.fail_on_data_loss:
                    raise _gone(t, p, s, first)
                s = first
            if e > s:
                ranges.append(DafkaPartition(t, p, s, e))
    total = sum(r.end - r.start for r in ranges)
    if o.min_partitions <= len(ranges) or total == 0:
        return ranges
    out = []
    for r in ranges:
        size = r.end - r.start
        wanted = math.ceil(size * o.min_partitions / total)
        pieces = max(1, min(size // MIN_SPLIT_RECORDS, wanted))
        # Even pieces (sizes differ by one at most): none below size // pieces.
        cuts = [r.start + size * i // pieces for i in range(pieces + 1)]
        out += [DafkaPartition(r.topic, r.partition, a, b) for a, b in itertools.pairwise(cuts)]
    return out


def _check_batch_ranges(
    start: Offsets,
    end: Offsets,
    bounds: dict[str, dict[str, tuple[int, int]]],
    names: tuple[str, str] = ("startingOffsets", "endingOffsets"),
) -> None:
    """A batch read's offsets against each other and the stores' bounds. A start past the end
    fails (offsets given by hand that cannot be meant: an empty result would hide the
    mistake); an end past what the stores hold is logged (`_past_stores_end`)."""
    waiting: Offsets = {}
    for t, parts in end.items():
        for p, e in sorted(parts.items()):
            s = start.get(t, {}).get(p)
            held = bounds.get(t, {}).get(p)
            if s is not None and s > e:
                stores = (
                    f"the stores hold offsets {held[0]}..{held[1] - 1}"
                    if held and held[1] > held[0]
                    else "the stores hold none of its records"
                )
                raise InvalidArgumentError(
                    f"dafka source: {names[0]} {s} of {t}/{p} is past its {names[1]} {e} ({stores})"
                )
            if s is not None and s < e:
                waiting.setdefault(t, {})[p] = e
    if names[1] == "endingOffsets":
        _past_stores_end(names[1], waiting, bounds)


def _past_stores_end(
    name: str, offsets: Offsets, bounds: dict[str, dict[str, tuple[int, int]]]
) -> None:
    """Logs (WARNING, once per query) each offset of `offsets` past its partition's end in the
    stores: instead of waiting silently, a batch task waits up to pollTimeout for those
    records, a stream reads that partition only once producers have written past it."""
    for t, parts in offsets.items():
        for p, o in sorted(parts.items()):
            held_end = bounds.get(t, {}).get(p, (0, 0))[1]
            if o > held_end:
                _log.warning(
                    "dafka source: %s %d of %s/%s is past the stores' end %d: nothing from "
                    "there is read until producers write it",
                    name,
                    o,
                    t,
                    p,
                    held_end,
                )


def _gone(topic: str, partition: str, first: int, end: int) -> DafkaError:
    return DafkaError(
        f"dafka source: offsets {first}..{end - 1} of {topic}/{partition} are gone "
        "(dropped by store retention, or damaged on every store that held them); set "
        "failOnDataLoss=false to skip them"
    )


def _read(part: DafkaPartition, o: _Options) -> Iterator[pa.RecordBatch]:
    """The records of one range, as the Rust consumer's Arrow batches (their columns picked
    in Spark's order, no row touched in Python: the reader delivers the range and nothing past
    it). Records the stores no longer
    hold (retention, or damaged on every store: DIRECT-MISSING) are noticed at once: the
    DIRECT-LOW-WATER a store answers, or the skip after DIRECT-MISSINGs, moves the
    reader's position past them, so an empty poll with the position above the next offset
    expected means they are gone; the task then fails naming failOnDataLoss, or
    (failOnDataLoss=false) goes on with what remains."""
    started = time.monotonic()
    read_start = time.time()
    columns = [*READ_COLUMNS, "headers"] if o.include_headers else list(READ_COLUMNS)
    cached = o.towers in _READERS
    reader = _reader(o.towers, part.topic, o.offsets_timeout)
    reader_s = time.monotonic() - started
    reader.assign(part.topic, part.partition, part.start, part.end)
    try:
        expected = part.start
        first_batch = True
        last_progress = time.monotonic()
        while expected < part.end:
            want = min(o.max_records_per_batch, part.end - expected)
            # Read before the poll: if the poll comes back empty, every record delivered
            # below this position was polled already, so the offsets from `expected` up to
            # it were skipped, never delivered.
            position = reader.position(part.topic, part.partition)
            batch = reader.poll(max_records=want, timeout=0.5, headers=o.include_headers)
            if batch.num_rows == 0:
                if position is not None and position > expected:
                    if o.fail_on_data_loss:
                        raise _gone(part.topic, part.partition, expected, min(position, part.end))
                    expected = position
                    last_progress = time.monotonic()
                    continue
                if time.monotonic() - last_progress > o.poll_timeout:
                    raise DafkaError(
                        f"dafka source: no record of {part.topic}/{part.partition} from offset "
                        f"{expected} within pollTimeout={o.poll_timeout}s (range ends at "
                        f"{part.end}); are the stores reachable from this executor?"
                    )
                continue
            last_progress = time.monotonic()
            offsets = batch.column("offset")
            first, last = offsets[0].as_py(), offsets[-1].as_py()
            if o.fail_on_data_loss and (first != expected or last - first + 1 != len(offsets)):
                # Retention moved the partition past records this range needs.
                lo, hi = expected, first
                if first == expected:  # the jump is inside the batch
                    steps = offsets.to_numpy()
                    at = int((steps[1:] - steps[:-1] != 1).argmax())
                    lo, hi = int(steps[at]) + 1, int(steps[at + 1])
                raise _gone(part.topic, part.partition, lo, min(hi, part.end))
            # The reader delivers nothing past the range's end (a range read): no filter.
            expected = last + 1
            if first_batch:
                first_batch = False
                _timing(
                    {
                        "cached": cached,
                        "read_start": read_start,
                        "reader_s": reader_s,
                        "first_batch_s": time.monotonic() - started,
                    }
                )
            if batch.num_rows:
                # Spark's columns in its order: the same arrays, no row touched.
                yield batch.select(columns)
    finally:
        reader.unassign(part.topic, part.partition)


class _Heads:
    """The stores' bounds of a stream's topics, kept fresh by a thread of the process that
    hosts the stream reader: it asks again as soon as an answer is in, at most every `EVERY`
    seconds (a query ends when every store has sent its HEADS-END, a few ms; with a store
    that sends none, a reference store, it waits out the 150 ms settle time), so
    ``latestOffset`` takes the newest answer at once instead of paying a query per trigger.
    An answer is used only if the query behind it started after the call asking for it began
    minus `FRESH` seconds. The thread ends after `IDLE` seconds without a `get` (no GET-HEADS
    to every store for a stream that is not triggered) and on an unexpected error; the next
    `get` starts it again."""

    FRESH = 0.5
    IDLE = 5.0
    EVERY = 0.05

    def __init__(self, o: _Options) -> None:
        self._o = o
        self._cond = threading.Condition()
        self._answer: tuple[float, dict[str, dict[str, tuple[int, int]]]] | None = None
        self._error: tuple[float, Exception] | None = None
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._asked = time.monotonic()

    def get(self) -> dict[str, dict[str, tuple[int, int]]]:
        """The newest bounds from a query started at most FRESH s before this call; raises
        what the queries raise (no store within offsetsTimeout)."""
        asked = time.monotonic()
        with self._cond:
            self._asked = asked
            if self._thread is None or not self._thread.is_alive():
                self._error = None  # the ended thread's: the new one answers afresh
                self._thread = threading.Thread(target=self._run, name="dafka-heads", daemon=True)
                self._thread.start()
            deadline = asked + self._o.offsets_timeout + 5.0
            while True:
                if self._answer is not None and self._answer[0] >= asked - self.FRESH:
                    return self._answer[1]
                if self._error is not None and self._error[0] >= asked - self.FRESH:
                    raise self._error[1]
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
        return _bounds(self._o)  # the thread is stuck: ask directly

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped or time.monotonic() - self._asked > self.IDLE:
                    self._thread = None
                    return
            started = time.monotonic()
            if self._answer is not None and started - self._answer[0] < self.EVERY:
                time.sleep(self.EVERY - (started - self._answer[0]))
                continue
            try:
                bounds = _bounds(self._o)
            except Exception as e:
                # A DafkaError (no store in time) is retried; anything else ends the thread,
                # and the callers waiting get it at once rather than after offsetsTimeout.
                with self._cond:
                    self._error = (started, e)
                    self._cond.notify_all()
                    if not isinstance(e, DafkaError):
                        self._thread = None
                        return
                time.sleep(0.2)
                continue
            with self._cond:
                self._answer = (started, bounds)
                self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True

    # Spark pickles stream readers (for their `read`): only the options travel.
    def __getstate__(self) -> _Options:
        return self._o

    def __setstate__(self, o: _Options) -> None:
        self.__init__(o)  # type: ignore[misc]


# --- the data source -------------------------------------------------------------------------


def _with_options(uses: frozenset[str]) -> Any:
    """Appends the table of the options of `uses` to the class's docstring (`help()`)."""

    def add(cls: type) -> type:
        cls.__doc__ = f"{cls.__doc__}\n\n{_options_doc(uses)}\n"
        return cls

    return add


@_with_options(_ALL)
class DafkaDataSource(DataSource):
    """``format("dafka")``: Dafka topics as a Spark source and sink, batch and streaming.

    Registered with every Spark session once ``dafka`` is installed (the ``pyspark_dafka``
    module, which Spark looks up); ``dafka.spark.register(spark)`` does it by hand. Rows, as
    Spark's Kafka source has them: ``key binary, value binary, topic string, partition string,
    offset bigint, timestamp timestamp, timestampType int``, and ``headers
    array<struct<key:string,value:binary>>`` with includeHeaders. The sink takes a ``value``
    column (string or binary), optional ``key`` (string or binary), ``headers`` (as read) and
    ``timestamp`` columns, and a ``topic`` column or option; it appends: a batch write needs
    ``mode("append")`` (Spark refuses its default mode, ErrorIfExists, for every Python data
    source; ``overwrite`` is refused: a topic keeps what was written). Unknown keys and bad
    values fail when the query is built. See docs/spark.md."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        _timing({"source": True})
        # Spark makes the source when a query is built (load(), save(), start()): a key no
        # use of the source knows (a misspelling) fails there, not in a background stream.
        _check_keys(
            {k.lower(): v for k, v in options.items()},
            _BATCH_READ | _STREAM_READ | _WRITE,
            "source or sink",
        )

    @classmethod
    def name(cls) -> str:
        return "dafka"

    def schema(self) -> str:
        # Asked by load() of a read without a schema, batch or stream (which one is not said):
        # every read option is checked here, so a stream's fail at load() too, not in the
        # query's background thread once it started.
        if _warm_up_options(dict(self.options)) is not None:
            # (warmUp is a batch read's: a stream with it fails at start(), in streamReader.)
            return DAFKA_SCHEMA
        o = _parse(dict(self.options), _BATCH_READ | _STREAM_READ, "reader")
        return DAFKA_SCHEMA_WITH_HEADERS if o.include_headers else DAFKA_SCHEMA

    def reader(self, schema: Any) -> DafkaBatchReader | _WarmUpReader:
        warm = _warm_up_options(dict(self.options))
        if warm is not None:
            return _WarmUpReader(warm)
        return DafkaBatchReader(_parse(dict(self.options), _BATCH_READ, "batch reader"))

    def streamReader(self, schema: Any) -> DafkaStreamReader:
        return DafkaStreamReader(_parse(dict(self.options), _STREAM_READ, "stream reader"))

    def writer(self, schema: Any, overwrite: bool) -> DafkaWriter:
        if overwrite:
            raise InvalidArgumentError(
                "the dafka sink appends records to topics and cannot overwrite them: write with "
                'mode("append") (a topic keeps every record written to it until the stores\' '
                "retention drops it)"
            )
        return DafkaWriter(_write_options(dict(self.options), schema))

    def streamWriter(self, schema: Any, overwrite: bool) -> DafkaStreamWriter:
        # `overwrite` is outputMode("complete"): each micro-batch's whole result is appended
        # to the topic, as Kafka's sink does (a topic cannot be truncated).
        return DafkaStreamWriter(_write_options(dict(self.options), schema))


@_with_options(frozenset({BATCH}))
class DafkaBatchReader(DataSourceReader):
    """A batch read of ``format("dafka")``: one task per partition and offset range."""

    def __init__(self, options: _Options) -> None:
        self.options = options
        # Planned on the driver when the query is built: bad offsets and unreachable
        # towers fail here, before any task runs.
        o = options
        planning = time.time()
        cached = o.towers in _READERS
        bounds = _bounds(o)
        _timing(
            {
                "plan": True,
                "cached": cached,
                "plan_start": planning,
                "bounds_s": time.time() - planning,
            }
        )
        start = _resolve(o.starting, o, bounds)
        end = _resolve(o.ending, o, bounds)
        if o.starting.option != "startingOffsets":
            # An offset found by time may lie past the end planned from the heads asked just
            # before (records written in between): nothing of this read is there.
            for t, parts in start.items():
                for p, s in parts.items():
                    if p in end.get(t, {}):
                        parts[p] = min(s, end[t][p])
        _check_batch_ranges(start, end, bounds, (o.starting.option, o.ending.option))
        self._partitions = _plan(start, end, o, bounds)

    def partitions(self) -> list[DafkaPartition]:
        return list(self._partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, DafkaPartition) and partition.value is None:
            # Nothing to read (no partition, or every range empty): pyspark plans one task
            # with its stand-in `InputPartition(None)` instead of none; it reads no row.
            return
        assert isinstance(partition, DafkaPartition)
        yield from _read(partition, self.options)


@dataclass(frozen=True)
class _WarmUpPartition(InputPartition):
    index: int


class _WarmUpReader(DataSourceReader):
    """The read of ``dafka.spark.warm_up`` (option warmUp): `tasks` tasks that read nothing.

    Spark starts an executor's Python worker (its daemon, then a fork of it) when the first
    task that needs one arrives, and that is most of a new application's first read: 1 to 6 s
    from task start to first batch on this project's machines (BENCHMARKS.md). A worker is kept
    for the tasks after it only among tasks of the same kind: a Python UDF's or an RDD's
    workers run with other environment variables, so they are never reused by a data source's
    read. This read is of that very kind; its tasks import what a read imports and, with
    towers, start the worker's reader (`_reader` without a topic: it starts connecting to the
    towers and finding the stores, and does not wait for them; a read's FETCH sent before a
    store is found is sent again once one is), then return with no row."""

    def __init__(self, warm: _WarmUp) -> None:
        # Made on the driver, in Spark's planning worker, which plans the reads after it too:
        # its reader (for the read's offsets) starts now as well.
        self.warm = warm
        self._start_reader()

    def _start_reader(self) -> None:
        if self.warm.towers is not None:
            try:
                _reader(self.warm.towers)
            except DafkaError as e:  # a warm-up is an optimisation: the read reports it
                _log.warning("dafka warm-up: no reader for %s: %s", self.warm.towers, e)

    def partitions(self) -> list[_WarmUpPartition]:
        return [_WarmUpPartition(i) for i in range(self.warm.tasks)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow  # noqa: F401  (a read imports it with its first batch)

        from dafka import _native  # noqa: F401

        self._start_reader()
        _timing({"warm_up": True})
        return iter(())


try:  # Spark >= 4.2: trigger(availableNow=True) in rate-limited micro-batches.
    from pyspark.sql.streaming.datasource import (
        SupportsTriggerAvailableNow as _AvailableNowBase,
    )
except ImportError:  # pragma: no cover
    _AvailableNowBase = object  # type: ignore[misc, assignment]

# The clock of minOffsetsPerTrigger's wait (the tests' fake clock replaces it).
_now = time.monotonic


@_with_options(frozenset({STREAM}))
class DafkaStreamReader(DataSourceStreamReader, _AvailableNowBase):
    """Offsets ``{topic: {partition: next_offset}}``. ``latestOffset`` caps each micro-batch
    at ``maxOffsetsPerTrigger`` records over all partitions, shared in proportion to what each
    partition has waiting (as Kafka's source does), fairly (see `_cap`); with
    ``minOffsetsPerTrigger`` it holds a micro-batch back (returns its start) until that many
    records wait or ``maxTriggerDelay`` passed since the last micro-batch (or the start of the
    query's run). ``trigger(availableNow=True)``: ``prepareForTriggerAvailableNow`` fixes the
    end at the stores' heads of that moment, and no offset returned goes past it."""

    def __init__(self, options: _Options) -> None:
        self.options = options
        self._last: Offsets | None = None
        # The stores' bounds as latestOffset last heard them: partitions() of the same
        # trigger checks data loss against them instead of asking again (each query costs
        # the settle time of the offsets query).
        self._bounds: dict[str, dict[str, tuple[int, int]]] | None = None
        self._heads = _Heads(options)
        # Where _cap's turn starts when maxOffsetsPerTrigger is below the partitions waiting.
        self._turn = 0
        # trigger(availableNow=True): the ends fixed by prepareForTriggerAvailableNow.
        self._target: Offsets | None = None
        # When the last micro-batch was let through (minOffsetsPerTrigger's maxTriggerDelay).
        self._since = _now()

    def initialOffset(self) -> dict[str, Any]:
        o = self.options
        bounds = _bounds(o)
        start = _resolve(o.starting, o, bounds)
        if o.starting.option == "startingOffsets":
            _past_stores_end("startingOffsets", start, bounds)
        self._last = start
        return start

    def prepareForTriggerAvailableNow(self) -> None:
        # A query of its own rather than the heads thread's last answer, which may have
        # started up to _Heads.FRESH before this call: records acknowledged before the query
        # started are all in.
        bounds = _bounds(self.options)
        self._target = {t: {p: end for p, (_low, end) in ps.items()} for t, ps in bounds.items()}

    def latestOffset(self, start: Offsets | None = None, limit: Any = None) -> Offsets:
        # Spark 4.2 passes the start and a ReadLimit (admission control); 4.0/4.1 call
        # latestOffset() alone: then the start is the last offset returned or committed.
        o = self.options
        base: Offsets = start if start is not None else (self._last or {})
        bounds = self._bounds = self._heads.get()
        ends = self._target
        if ends is None:
            ends = {t: {p: end for p, (_low, end) in ps.items()} for t, ps in bounds.items()}
        # subscribePattern: the topics read so far and those matching now (a new one starts
        # at its low-water mark, as a new partition does).
        topics = o.topics if o.pattern is None else sorted({*base, *ends})
        latest: Offsets = {}
        for t in topics:
            latest[t] = dict(base.get(t, {}))
            for p, end in ends.get(t, {}).items():
                latest[t][p] = max(end, latest[t].get(p, 0))
        # Without a start (Spark 4.0/4.1 right after a restart, before this reader planned a
        # batch) the checkpointed position is unknown here: capping from the low-water marks
        # could end a partition below where the checkpoint resumes it, so that first
        # micro-batch is neither held nor capped (docs/spark.md). It still ends at the
        # stores' heads, which are never below a checkpointed offset.
        if start is None and self._last is None:
            self._last = latest
            return latest
        fewest, most = self._limits(limit)
        waiting = sum(e - s for s, e in _backlog(base, latest, bounds).values())
        if waiting == 0:
            self._last = latest
            return latest
        # Under availableNow nothing more comes: a batch held back would end the query with
        # records unread (Spark stops it at the first trigger with no new offsets).
        if (
            fewest is not None
            and self._target is None
            and waiting < fewest
            and _now() - self._since < o.max_trigger_delay
        ):
            return base
        if most is not None:
            latest = _cap(base, latest, bounds, most, self._turn)
            self._turn += most
        self._since = _now()
        self._last = latest
        return latest

    def _limits(self, limit: Any) -> tuple[int | None, int | None]:
        """(fewest, most) records for this micro-batch. Spark hands latestOffset either
        getDefaultReadLimit's limit or ReadAllAvailable (Trigger.Once; everything, whatever
        the options say); a Python ReadLimit is one of a few single kinds (pyspark's
        ReadLimitRegistry: no composite to carry Kafka's CompositeReadLimit), so the half of
        minOffsetsPerTrigger with maxOffsetsPerTrigger that the default cannot carry comes
        from the options. Spark 4.0/4.1 pass no limit: the options alone."""
        o = self.options
        fewest, most = o.min_offsets_per_trigger, o.max_offsets_per_trigger
        if limit is None:
            return fewest, most
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

        if isinstance(limit, ReadAllAvailable):
            return None, None
        if isinstance(limit, ReadMinRows):
            fewest = limit.min_rows
        if isinstance(limit, ReadMaxRows):
            most = limit.max_rows
        return fewest, most

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

        o = self.options
        if o.max_offsets_per_trigger is not None:
            return ReadMaxRows(o.max_offsets_per_trigger)
        if o.min_offsets_per_trigger is not None:
            return ReadMinRows(o.min_offsets_per_trigger)
        return ReadAllAvailable()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[DafkaPartition]:
        o = self.options
        low = self._bounds
        if low is None and (
            o.fail_on_data_loss
            or any(p not in start.get(t, {}) for t, ps in end.items() for p in ps)
        ):
            low = self._heads.get()
        # The planned end is where the next micro-batch starts, whatever latestOffset said
        # before a restart: Spark 4.0/4.1 pass no start to latestOffset.
        self._last = end
        return _plan(start, end, o, low)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, DafkaPartition)
        yield from _read(partition, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        # Offsets live in Spark's checkpoint; nothing to commit to Dafka.
        self._last = end

    def stop(self) -> None:
        self._heads.stop()


def _backlog(
    base: Offsets, latest: Offsets, bounds: dict[str, dict[str, tuple[int, int]]]
) -> dict[tuple[str, str], tuple[int, int]]:
    """``{(topic, partition): (start, end)}`` of every partition with records between `base`
    and `latest` (a partition missing from `base` starts at its low-water mark, 0 if
    unknown)."""
    backlog = {}
    for t, parts in latest.items():
        for p, e in parts.items():
            s = base.get(t, {}).get(p, bounds.get(t, {}).get(p, (0, 0))[0])
            if e > s:
                backlog[(t, p)] = (s, e)
    return backlog


def _cap(
    base: Offsets,
    latest: Offsets,
    bounds: dict[str, dict[str, tuple[int, int]]],
    cap: int,
    turn: int = 0,
) -> Offsets:
    """At most `cap` records past `base` in all, and exactly `cap` when more wait. With at
    least as many records as partitions waiting, every partition with a backlog gets one, and
    the rest is shared in proportion to what each has left (largest remainders first, so the
    shares add up to `cap`). With fewer (`cap` below the number of partitions waiting), `cap`
    partitions get one each, taken in turn from the sorted list starting at `turn` (the
    caller advances it by `cap` each trigger): every partition moves within a few triggers,
    none is starved by others that keep a backlog."""
    backlog = _backlog(base, latest, bounds)
    total = sum(e - s for s, e in backlog.values())
    if total <= cap:
        return latest
    out = {t: dict(parts) for t, parts in latest.items()}
    keys = sorted(backlog)
    if cap < len(keys):
        take = {keys[(turn + i) % len(keys)]: 1 for i in range(cap)}
    else:
        rest = cap - len(keys)
        left = {k: e - s - 1 for k, (s, e) in backlog.items()}
        weight = sum(left.values())
        exact = {k: n * rest / weight for k, n in left.items()}
        take = {k: 1 + int(x) for k, x in exact.items()}
        spare = cap - sum(take.values())
        for k in sorted(keys, key=lambda k: (int(exact[k]) - exact[k], -left[k]))[:spare]:
            take[k] += 1
    for (t, p), (s, e) in backlog.items():
        out[t][p] = s + min(take.get((t, p), 0), e - s)
    return out


# --- the sink ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _WriteOptions:
    options: _Options
    # The record columns the rows have (value, and of key, headers, timestamp those present),
    # with their Spark types as DDL ("string", "binary", "timestamp", ...).
    columns: tuple[tuple[str, str], ...]
    has_topic_column: bool


@dataclass(frozen=True)
class DafkaCommit(WriterCommitMessage):
    """What one write task sent: (topic, partition) -> records, all acknowledged."""

    sent: tuple[tuple[str, str, int], ...]


def _write_options(options: dict[str, str], schema: Any) -> _WriteOptions:
    """The sink's options and the columns it sends, each checked against what a record takes:
    value string or binary (required); key string or binary; headers an array of
    struct<key: string, value: binary or string> (as a read gives it); timestamp a timestamp.
    Other columns (a read's partition, offset, timestampType) are not sent."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        StringType,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    o = _parse(options, _WRITE, "sink")
    fields = {f.name: f.dataType for f in schema.fields}
    text = (StringType, BinaryType)
    value = fields.get("value")
    if not isinstance(value, text):
        raise InvalidArgumentError(
            f"the dafka sink needs a value column of type string or binary; got {value}"
        )
    key = fields.get("key")
    if key is not None and not isinstance(key, text):
        raise InvalidArgumentError(
            f"the dafka sink's key column must be a string or binary, not {key.simpleString()} "
            "(cast it: key.cast('string'))"
        )
    headers = fields.get("headers")
    if headers is not None:
        entry = headers.elementType if isinstance(headers, ArrayType) else None
        names = {f.name: f.dataType for f in entry.fields} if isinstance(entry, StructType) else {}
        if not (
            set(names) == {"key", "value"}
            and isinstance(names["key"], StringType)
            and isinstance(names["value"], text)
        ):
            raise InvalidArgumentError(
                "the dafka sink's headers column must be an array<struct<key:string,"
                f"value:binary>> (the value may be a string), not {headers.simpleString()}"
            )
    stamp = fields.get("timestamp")
    if stamp is not None and not isinstance(stamp, TimestampType):
        hint = (
            ": a timestamp without time zone is ambiguous as a record's time; cast it to a "
            "timestamp (in the session's time zone)"
            if isinstance(stamp, TimestampNTZType)
            else " (make one: to_timestamp(...), timestamp_millis(...), timestamp_micros(...))"
        )
        raise InvalidArgumentError(
            f"the dafka sink's timestamp column must be a timestamp, not {stamp.simpleString()}"
            f"{hint}"
        )
    # Option topic, when given, is every row's topic (as in Kafka's sink: a read written back
    # as it is goes to the topic asked, not to the one it came from).
    topic = fields.get("topic") if o.topic is None else None
    if topic is not None and not isinstance(topic, StringType):
        raise InvalidArgumentError(f"the dafka sink's topic column must be a string, not {topic}")
    if topic is None and o.topic is None:
        raise InvalidArgumentError("the dafka sink needs a topic column or option topic")
    columns = tuple((c, fields[c].simpleString()) for c in RECORD_COLUMNS if c in fields)
    return _WriteOptions(o, columns, topic is not None)


def _check_rows(batch: pa.RecordBatch) -> None:
    """What Spark's types let through but a record cannot take, found in the whole batch before
    any of it is sent: a null value, a header without a name."""
    import pyarrow.compute as pc

    values = batch.column("value")
    if values.null_count:
        row = pc.index(pc.is_null(values), True).as_py()
        raise InvalidArgumentError(
            f"dafka sink: the value of row {row} of a batch is null; a Dafka record needs one "
            "(nothing of the batch was sent)"
        )
    if "headers" in batch.schema.names:
        entries = pc.list_flatten(batch.column("headers"))
        names = pc.struct_field(entries, "key")
        if entries.null_count or names.null_count:
            raise InvalidArgumentError(
                "dafka sink: a header of the batch has a null key; every header needs a name "
                "(nothing of the batch was sent)"
            )


def _write_batches(batches: Iterator[pa.RecordBatch], w: _WriteOptions) -> DafkaCommit:
    """Sends every row (value, and key, headers and timestamp when the rows have them: the
    Arrow columns as they are, to `Producer.send_many`), then waits until every record is
    acknowledged. A batch with a row no record can take is refused whole, before any of it
    is sent."""
    import pyarrow.compute as pc

    o = w.options
    used: dict[str, Producer] = {}
    counts: dict[str, int] = {}
    record_columns = [c for c, _type in w.columns]

    def send(topic: str, records: pa.RecordBatch) -> None:
        producer = used.get(topic) or _producer(o, topic)
        used[topic] = producer
        producer.send_many(records)
        counts[topic] = counts.get(topic, 0) + records.num_rows

    for batch in batches:
        if batch.num_rows == 0:
            continue
        records = batch.select(record_columns)
        _check_rows(records)
        if not w.has_topic_column:
            assert o.topic is not None
            send(o.topic, records)
            continue
        topics = batch.column("topic")
        if topics.null_count:
            raise InvalidArgumentError(
                "dafka sink: a row has a null topic; set option topic for every row (nothing of "
                "the batch was sent)"
            )
        for t in pc.unique(topics).to_pylist():
            send(t, records.filter(pc.equal(topics, t)))
    for producer in used.values():
        producer.flush(timeout=o.flush_timeout)
    return DafkaCommit(tuple((t, used[t].partition, n) for t, n in counts.items()))


def _rows_to_batches(rows: Iterator[Any], w: _WriteOptions) -> Iterator[pa.RecordBatch]:
    """Spark 4.0 gives a stream writer Rows: regroup them in Arrow batches."""
    import datetime as dt

    import pyarrow as pa

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    types = {
        "string": pa.string(),
        "binary": pa.binary(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }
    chunk: list[Any] = []

    def column(name: str, spark_type: str) -> pa.Array:
        cells = [r[name] for r in chunk]
        if name == "headers":
            cells = [None if hs is None else [(h[0], _bytes(h[1])) for h in hs] for hs in cells]
            return pa.array(cells, type=pa.list_(pa.field("element", header)))
        if spark_type == "timestamp":
            # A Row's timestamp is a naive datetime in this process's local time (PySpark's
            # conversion): astimezone reads it as such.
            cells = [None if c is None else c.astimezone(dt.UTC) for c in cells]
        return pa.array(cells, type=types[spark_type])

    def flush() -> pa.RecordBatch:
        cols = {name: column(name, t) for name, t in w.columns}
        if w.has_topic_column:
            cols["topic"] = pa.array([r["topic"] for r in chunk], type=pa.string())
        return pa.RecordBatch.from_pydict(cols)

    for row in rows:
        chunk.append(row)
        if len(chunk) >= 10_000:
            yield flush()
            chunk = []
    if chunk:
        yield flush()


def _bytes(v: str | bytes | bytearray | None) -> bytes | None:
    return v.encode() if isinstance(v, str) else None if v is None else bytes(v)


def _batches(iterator: Iterator[Any], w: _WriteOptions) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa

    first = next(iterator, None)
    if first is None:
        return
    if isinstance(first, pa.RecordBatch):
        yield first
        yield from iterator
    else:
        yield from _rows_to_batches(_chain(first, iterator), w)


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


try:  # Spark >= 4.1: Arrow batches in a stream writer too; 4.0 gives Rows.
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # pragma: no cover
    _StreamWriterBase = DataSourceStreamWriter  # type: ignore[misc, assignment]


@_with_options(frozenset({SINK}))
class DafkaWriter(DataSourceArrowWriter):
    """Batch sink: at-least-once (a retried task sends its rows again)."""

    def __init__(self, w: _WriteOptions) -> None:
        self.w = w

    def write(self, iterator: Iterator[Any]) -> DafkaCommit:
        return _write_batches(_batches(iter(iterator), self.w), self.w)


@_with_options(frozenset({SINK}))
class DafkaStreamWriter(_StreamWriterBase):
    """Streaming sink: each micro-batch's task returns once its records are acknowledged;
    at-least-once (a retried micro-batch is sent again)."""

    def __init__(self, w: _WriteOptions) -> None:
        self.w = w

    def write(self, iterator: Iterator[Any]) -> DafkaCommit:
        return _write_batches(_batches(iter(iterator), self.w), self.w)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every record was acknowledged before its task returned."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: Dafka has no transactions (at-least-once)."""
