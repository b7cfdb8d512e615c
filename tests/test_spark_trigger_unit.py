"""Admission control of the dafka stream reader without Spark or a cluster: the options
minOffsetsPerTrigger, maxTriggerDelay and maxOffsetsPerTrigger, the ReadLimits Spark hands
`latestOffset`, and trigger(availableNow=True) (`prepareForTriggerAvailableNow`). The stores'
heads and the clock are fakes the tests move by hand."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from dafka import _spark_dafka
from dafka._spark_dafka import (
    _STREAM_READ,
    DafkaDataSource,
    DafkaStreamReader,
    _Options,
    _parse,
)
from dafka.errors import InvalidArgumentError

P, Q = "A" * 32, "B" * 32


def _options(**extra: str) -> _Options:
    return _parse(
        {"towers": "tcp://127.0.0.1:1", "subscribe": "t", **extra}, _STREAM_READ, "stream reader"
    )


class _Stores:
    """What the stores hold, ``{partition: (low, end)}`` of topic t, and a clock."""

    def __init__(self) -> None:
        self.parts: dict[str, tuple[int, int]] = {}
        self.clock = 1000.0

    def bounds(self, *_: Any) -> dict[str, dict[str, tuple[int, int]]]:
        return {"t": dict(self.parts)}

    def write(self, partition: str, n: int) -> None:
        low, end = self.parts.get(partition, (0, 0))
        self.parts[partition] = (low, end + n)

    # The reader's _Heads.
    def get(self) -> dict[str, dict[str, tuple[int, int]]]:
        return self.bounds()

    def stop(self) -> None:
        pass


@pytest.fixture
def stores(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Stores]:
    s = _Stores()
    monkeypatch.setattr(_spark_dafka, "_now", lambda: s.clock)
    monkeypatch.setattr(_spark_dafka, "_bounds", s.bounds)
    yield s


def _reader(stores: _Stores, **extra: str) -> DafkaStreamReader:
    reader = DafkaStreamReader(_options(**extra))
    reader._heads = stores  # type: ignore[assignment]
    return reader


def _total(start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]) -> int:
    return sum(e - start["t"].get(p, 0) for p, e in end["t"].items())


def test_durations_with_a_unit_are_read_in_seconds() -> None:
    def delay(value: str | None) -> float:
        extra = {"minOffsetsPerTrigger": "10"}
        if value is not None:
            extra["maxTriggerDelay"] = value
        return _options(**extra).max_trigger_delay

    assert delay(None) == 15 * 60  # Kafka's default
    assert delay("30s") == 30
    assert delay("500ms") == 0.5
    assert delay(" 2H ") == 7200
    assert delay("1.5min") == 90
    assert delay("250us") == pytest.approx(250e-6)
    assert delay("1d") == 86400
    o = _options()
    assert (o.min_offsets_per_trigger, o.max_offsets_per_trigger) == (None, None)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"maxTriggerDelay": "30"}, r"a number and a unit .*not \'30\'; 30ms or 30s\?"),
        ({"maxTriggerDelay": "soon"}, r'maxTriggerDelay must be a number and a unit .*"15m"'),
        ({"maxTriggerDelay": "3 fortnights"}, "maxTriggerDelay must be a number and a unit"),
        ({"maxTriggerDelay": "-5s"}, "maxTriggerDelay must be a number and a unit"),
        ({"maxTriggerDelay": "0s"}, "maxTriggerDelay must be longer than 0"),
        ({"minOffsetsPerTrigger": "many"}, "minOffsetsPerTrigger must be an integer"),
        ({"minOffsetsPerTrigger": "0"}, "minOffsetsPerTrigger must be > 0"),
        ({"minOffsetsPerTrigger": "1.5"}, "minOffsetsPerTrigger must be an integer"),
    ],
)
def test_bad_values_are_refused_naming_the_option(extra: dict[str, str], message: str) -> None:
    if "minOffsetsPerTrigger" not in extra:
        extra = {**extra, "minOffsetsPerTrigger": "10"}
    with pytest.raises(InvalidArgumentError, match=message):
        _options(**extra)


def test_options_that_contradict_each_other_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="maxTriggerDelay applies only with min"):
        _options(maxTriggerDelay="1m")
    with pytest.raises(
        InvalidArgumentError,
        match=r"minOffsetsPerTrigger \(500\) must not exceed maxOffsetsPerTrigger \(100\)",
    ):
        _options(minOffsetsPerTrigger="500", maxOffsetsPerTrigger="100")
    o = _options(minOffsetsPerTrigger="100", maxOffsetsPerTrigger="100")
    assert (o.min_offsets_per_trigger, o.max_offsets_per_trigger) == (100, 100)


def test_the_new_options_are_stream_only_and_in_help() -> None:
    doc = DafkaStreamReader.__doc__ or ""
    assert "minOffsetsPerTrigger" in doc and "maxTriggerDelay" in doc and "15m" in doc
    assert "maxTriggerDelay" in (DafkaDataSource.__doc__ or "")
    from dafka._spark_dafka import _BATCH_READ

    with pytest.raises(InvalidArgumentError, match=r"minOffsetsPerTrigger \(for a dafka stream"):
        _parse(
            {"towers": "tcp://127.0.0.1:1", "subscribe": "t", "minOffsetsPerTrigger": "5"},
            _BATCH_READ,
            "batch reader",
        )


def test_default_read_limit_is_the_options() -> None:
    assert isinstance(DafkaStreamReader(_options()).getDefaultReadLimit(), ReadAllAvailable)
    limit = DafkaStreamReader(_options(maxOffsetsPerTrigger="70")).getDefaultReadLimit()
    assert limit == ReadMaxRows(70)
    limit = DafkaStreamReader(_options(minOffsetsPerTrigger="7")).getDefaultReadLimit()
    assert limit == ReadMinRows(7)
    # Both: a Python ReadLimit cannot be composite; the bound goes to Spark, the rest is
    # taken from the options by latestOffset.
    both = _options(minOffsetsPerTrigger="7", maxOffsetsPerTrigger="70")
    assert DafkaStreamReader(both).getDefaultReadLimit() == ReadMaxRows(70)
    assert isinstance(DafkaStreamReader(both), SupportsTriggerAvailableNow)


def test_min_offsets_holds_a_batch_until_enough_records_wait(stores: _Stores) -> None:
    stores.write(P, 30)
    reader = _reader(stores, minOffsetsPerTrigger="100", maxTriggerDelay="10s")
    start = {"t": {P: 0}}
    limit = reader.getDefaultReadLimit()
    assert reader.latestOffset(start, limit) == start  # 30 < 100: held
    stores.write(Q, 60)
    stores.clock += 9.9
    assert reader.latestOffset(start, limit) == start  # 90 < 100, 9.9 s < 10 s: held
    stores.write(Q, 10)
    assert reader.latestOffset(start, limit) == {"t": {P: 30, Q: 70}}  # 100: through


def test_max_trigger_delay_releases_a_held_batch_and_restarts_after_it(stores: _Stores) -> None:
    stores.write(P, 5)
    reader = _reader(stores, minOffsetsPerTrigger="100", maxTriggerDelay="10s")
    limit = reader.getDefaultReadLimit()
    start = {"t": {P: 0}}
    assert reader.latestOffset(start, limit) == start
    stores.clock += 10.0
    end = reader.latestOffset(start, limit)
    assert end == {"t": {P: 5}}  # waited maxTriggerDelay since the query started
    # The wait starts again from that micro-batch.
    stores.write(P, 5)
    stores.clock += 5.0
    assert reader.latestOffset(end, limit) == end
    stores.clock += 5.0
    assert reader.latestOffset(end, limit) == {"t": {P: 10}}
    # Nothing waiting: no micro-batch whatever the delay, and the wait does not restart.
    stores.clock += 60.0
    assert reader.latestOffset({"t": {P: 10}}, limit) == {"t": {P: 10}}
    stores.write(P, 1)
    assert reader.latestOffset({"t": {P: 10}}, limit) == {"t": {P: 11}}


def test_min_and_max_together_hold_then_cap(stores: _Stores) -> None:
    stores.write(P, 40)
    reader = _reader(stores, minOffsetsPerTrigger="50", maxOffsetsPerTrigger="80")
    limit = reader.getDefaultReadLimit()  # ReadMaxRows(80): minOffsetsPerTrigger from options
    start = {"t": {P: 0, Q: 0}}
    assert reader.latestOffset(start, limit) == start
    stores.write(Q, 200)
    end = reader.latestOffset(start, limit)
    assert _total(start, end) == 80, end
    # Spark's ReadAllAvailable (Trigger.Once) overrides both.
    stores.write(P, 1)
    assert reader.latestOffset(end, ReadAllAvailable()) == {"t": {P: 41, Q: 200}}


def test_available_now_stops_at_the_heads_of_its_start_in_capped_batches(
    stores: _Stores,
) -> None:
    stores.write(P, 250)
    stores.write(Q, 60)
    reader = _reader(stores, maxOffsetsPerTrigger="100", minOffsetsPerTrigger="100")
    limit = reader.getDefaultReadLimit()
    reader.prepareForTriggerAvailableNow()
    # Written after the query started: not read by it, not even a partition that is new.
    stores.write(P, 1000)
    stores.write("C" * 32, 10)
    start: dict[str, dict[str, int]] = {"t": {P: 0, Q: 0}}
    sizes = []
    while True:
        end = reader.latestOffset(start, limit)
        if end == start:
            break
        sizes.append(_total(start, end))
        start = end
    assert start == {"t": {P: 250, Q: 60}}
    # The last batch is under minOffsetsPerTrigger: nothing more comes, so it is not held.
    assert sizes == [100, 100, 100, 10], sizes
    stores.write(Q, 5)
    assert reader.latestOffset(start, limit) == start


def test_available_now_restarted_from_a_checkpoint_reads_what_is_left(stores: _Stores) -> None:
    stores.write(P, 300)
    reader = _reader(stores, maxOffsetsPerTrigger="120")
    reader.prepareForTriggerAvailableNow()
    start = {"t": {P: 200}}
    limit = reader.getDefaultReadLimit()
    assert reader.latestOffset(start, limit) == {"t": {P: 300}}
    assert reader.latestOffset({"t": {P: 300}}, limit) == {"t": {P: 300}}


def test_spark_4_0_without_a_limit_takes_the_limits_from_the_options(stores: _Stores) -> None:
    # latestOffset() alone: the start is the last offset planned or committed.
    stores.write(P, 30)
    reader = _reader(stores, minOffsetsPerTrigger="50", maxTriggerDelay="1s")
    reader.commit({"t": {P: 0}})
    assert reader.latestOffset() == {"t": {P: 0}}
    stores.clock += 1.0
    assert reader.latestOffset() == {"t": {P: 30}}
