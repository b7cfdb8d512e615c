"""``maxOffsetsPerTrigger`` split over partitions (`_cap`): exact, proportional, fair."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from dafka._spark_dafka import _cap


def _run(backlogs: dict[str, int], grow: dict[str, int], cap: int, triggers: int) -> list[dict]:
    """`triggers` micro-batches of topic t: each partition gets `grow` new records per
    trigger; returns how many records each partition got per trigger."""
    base = {"t": {p: 0 for p in backlogs}}
    ends = dict(backlogs)
    out = []
    for turn in range(triggers):
        latest = {"t": dict(ends)}
        capped = _cap(base, latest, {}, cap, turn * cap)
        out.append({p: capped["t"][p] - base["t"][p] for p in backlogs})
        base = capped
        ends = {p: e + grow.get(p, 0) for p, e in ends.items()}
    return out


def test_a_large_partition_is_not_starved_by_small_ones_that_keep_a_backlog() -> None:
    # Two partitions with one new record per trigger, one with a large backlog, cap 2.
    got = _run({"a": 1, "b": 1, "c": 10_000}, {"a": 1, "b": 1}, cap=2, triggers=6)
    assert all(sum(g.values()) == 2 for g in got), got
    assert sum(g["c"] for g in got) >= 3, got


def test_below_one_record_per_partition_every_partition_moves_in_turn() -> None:
    parts = {f"p{i}": 1000 for i in range(7)}
    got = _run(parts, dict.fromkeys(parts, 100), cap=3, triggers=3)
    assert all(sum(g.values()) == 3 for g in got), got
    assert all(sum(g[p] for g in got) >= 1 for p in parts), got


def test_shares_are_proportional_and_add_up_to_the_cap() -> None:
    got = _run({"a": 10, "b": 10_000, "c": 5000}, {}, cap=1000, triggers=1)[0]
    assert sum(got.values()) == 1000
    assert got["a"] >= 1
    assert abs(got["b"] - 2 * got["c"]) <= 2, got
    # Everything fits: every partition goes to its end.
    assert _run({"a": 10, "b": 20}, {}, cap=1000, triggers=1)[0] == {"a": 10, "b": 20}
