"""Batch planning of the dafka source (`_plan`, `_check_batch_ranges`), no Spark session:
minPartitions bounds (issue 21, item 7c) and offsets past the end (items 7a, 7b)."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("pyspark")

from dafka._spark_dafka import (
    _BATCH_READ,
    MAX_MIN_PARTITIONS,
    MIN_SPLIT_RECORDS,
    DafkaPartition,
    _check_batch_ranges,
    _Options,
    _parse,
    _past_stores_end,
    _plan,
)
from dafka.errors import InvalidArgumentError

P, Q = "A" * 32, "B" * 32


def _options(**extra: str) -> _Options:
    return _parse(
        {"towers": "tcp://127.0.0.1:1", "subscribe": "t", **extra}, _BATCH_READ, "batch reader"
    )


def _covers(parts: list[DafkaPartition], partition: str, start: int, end: int) -> None:
    """`parts` of `partition` are contiguous from `start` to `end`."""
    mine = sorted((r.start, r.end) for r in parts if r.partition == partition)
    assert mine[0][0] == start and mine[-1][1] == end, mine
    assert all(a[1] == b[0] for a, b in itertools.pairwise(mine)), mine


def test_a_huge_min_partitions_is_refused_naming_the_limit() -> None:
    with pytest.raises(InvalidArgumentError, match=f"minPartitions must be at most {10_000}"):
        _options(minPartitions="1000000000")
    assert _options(minPartitions=str(MAX_MIN_PARTITIONS)).min_partitions == MAX_MIN_PARTITIONS


def test_no_split_is_smaller_than_the_minimum() -> None:
    # 1,000 records asked in 10,000 tasks: 1,000 tasks of one record took 107 s.
    o = _options(minPartitions=str(MAX_MIN_PARTITIONS))
    bounds = {"t": {P: (0, 1000), Q: (0, 40)}}
    parts = _plan({"t": {P: 0, Q: 0}}, {"t": {P: 1000, Q: 40}}, o, bounds)
    big = [r for r in parts if r.partition == P]
    assert len(big) == 1000 // MIN_SPLIT_RECORDS, big
    assert all(r.end - r.start >= MIN_SPLIT_RECORDS for r in big), big
    _covers(parts, P, 0, 1000)
    # A range below the minimum is never split.
    assert [(r.start, r.end) for r in parts if r.partition == Q] == [(0, 40)]


def test_splits_are_even_and_cover_the_range() -> None:
    o = _options(minPartitions="7")
    parts = _plan({"t": {P: 10}}, {"t": {P: 1010}}, o, {"t": {P: (0, 1010)}})
    sizes = [r.end - r.start for r in parts]
    assert len(parts) == 7 and max(sizes) - min(sizes) <= 1, sizes
    _covers(parts, P, 10, 1010)


def test_a_start_past_the_end_fails_naming_the_offsets() -> None:
    bounds = {"t": {P: (5, 100)}}
    with pytest.raises(
        InvalidArgumentError,
        match=f"startingOffsets 300 of t/{P} is past its endingOffsets 100 "
        r"\(the stores hold offsets 5..99\)",
    ):
        _check_batch_ranges({"t": {P: 300}}, {"t": {P: 100}}, bounds)
    # Equal offsets are an empty range, not a mistake.
    _check_batch_ranges({"t": {P: 100}}, {"t": {P: 100}}, bounds)


def test_an_end_past_the_stores_end_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    _check_batch_ranges({"t": {P: 0}}, {"t": {P: 500}}, {"t": {P: (0, 100)}})
    assert any(
        f"endingOffsets 500 of t/{P} is past the stores' end 100" in r.getMessage()
        for r in caplog.records
    ), caplog.records


def test_a_stream_started_past_the_stores_end_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 21, item 7b: a query started past the head said nothing while it waited."""
    _past_stores_end("startingOffsets", {"t": {P: 50, Q: 10}}, {"t": {P: (0, 20), Q: (0, 20)}})
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 1, said
    assert f"startingOffsets 50 of t/{P} is past the stores' end 20" in said[0], said
