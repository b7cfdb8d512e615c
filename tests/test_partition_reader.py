"""dafka.PartitionReader: the offsets query and assigned ranges, over a LocalCluster."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from conftest import Retained, unique_topic
from ports import free_tcp_port

import dafka


def _topic() -> str:
    return unique_topic("pr")


def _read_range(reader: dafka.PartitionReader, end: int, within: float = 20.0) -> pa.Table:
    batches = []
    deadline = time.monotonic() + within
    last = -1
    while last + 1 < end and time.monotonic() < deadline:
        batch = reader.poll(max_records=1000, timeout=0.2)
        if batch.num_rows:
            batches.append(batch)
            last = batch.column("offset")[-1].as_py()
    return pa.Table.from_batches(batches)


def test_offsets_and_assigned_ranges(cluster: dafka.LocalCluster) -> None:
    t = _topic()
    partitions = {}
    for name, n in (("a", 120), ("b", 80)):
        with dafka.Producer(t, towers=cluster.towers) as p:
            p.send_many([b"%s%d" % (name.encode(), i) for i in range(n)])
            p.flush(timeout=20)
            partitions[p.partition] = (name, n)
    with dafka.PartitionReader(cluster.towers) as reader:
        offsets = reader.offsets(t)
        assert offsets == {p: (0, n) for p, (_, n) in partitions.items()}
        assert reader.offsets(_topic()) == {}
        for p, (name, _) in partitions.items():
            reader.assign(t, p, 10, end=50)
            table = _read_range(reader, 50)
            assert set(table.column("partition").to_pylist()) == {p}
            got = [o for o in table.column("offset").to_pylist() if o < 50]
            assert got == list(range(10, 50))
            values = table.column("value").to_pylist()[: len(got)]
            assert values == [b"%s%d" % (name.encode(), i) for i in range(10, 50)]
            reader.unassign(t, p)
    assert reader.closed


def test_a_range_ends_at_its_end_while_the_partition_grows(cluster: dafka.LocalCluster) -> None:
    """A range read takes only the stores' answers to it: records the producer sends while it
    runs (the live stream, which a range reader does not subscribe to) are not delivered,
    neither past the end nor held for later."""
    t = _topic()
    with dafka.Producer(t, towers=cluster.towers) as p:
        p.send_many([b"v%d" % i for i in range(100)])
        p.flush(timeout=20)
        with dafka.PartitionReader(cluster.towers) as reader:
            assert reader.offsets(t) == {p.partition: (0, 100)}
            reader.assign(t, p.partition, 40, end=60)
            p.send_many([b"v%d" % i for i in range(100, 300)])
            p.flush(timeout=20)
            table = _read_range(reader, 60)
            # Records sent after the assign had every chance to arrive.
            time.sleep(0.5)
            late = reader.poll(max_records=1000, timeout=0.5)
            assert table.column("offset").to_pylist() == list(range(40, 60))
            assert table.column("value").to_pylist() == [b"v%d" % i for i in range(40, 60)]
            assert late.num_rows == 0, late.column("offset").to_pylist()[:5]
            assert reader.position(t, p.partition) == 60


def test_offsets_fail_in_bounded_time_when_the_towers_are_unreachable() -> None:
    port = free_tcp_port()
    with dafka.PartitionReader(f"tcp://127.0.0.1:{port}") as reader:
        started = time.monotonic()
        with pytest.raises(dafka.TimeoutError, match="no store answered"):
            reader.offsets("x", timeout=0.5)
        assert time.monotonic() - started < 3.0


def test_bad_partition_id_is_refused() -> None:
    with dafka.LocalCluster() as c, dafka.PartitionReader(c.towers) as reader:
        with pytest.raises(dafka.InvalidArgumentError, match="32 hexadecimal"):
            reader.assign("t", "nope", 0)


def test_position_moves_past_records_retention_dropped(retained: Retained) -> None:
    r = retained
    with dafka.PartitionReader(r.towers) as reader:
        assert reader.position(r.topic, r.partition) is None
        for end in (10, r.low + 5):
            reader.assign(r.topic, r.partition, 0, end=end)
            assert reader.position(r.topic, r.partition) is not None
            # The store answers DIRECT-LOW-WATER: the position skips to the first offset held.
            deadline = time.monotonic() + 10
            while reader.position(r.topic, r.partition) == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert reader.position(r.topic, r.partition) >= r.low
            # The records held from there to the range's end are fetched and delivered: none
            # of a range retention took whole, the first 5 held of the other.
            got = reader.poll(max_records=1000, timeout=2).column("offset").to_pylist()
            assert got == list(range(r.low, max(r.low, end)))
            reader.unassign(r.topic, r.partition)
            assert reader.position(r.topic, r.partition) is None


def _range_read(r: Retained, start: int, end: int, fail: str) -> list[pa.RecordBatch]:
    from dafka._spark_dafka import _READ, DafkaPartition, _parse, _read

    o = _parse(
        {"towers": r.towers, "subscribe": r.topic, "failOnDataLoss": fail, "pollTimeout": "60"},
        _READ,
        "batch reader",
    )
    return list(_read(DafkaPartition(r.topic, r.partition, start, end), o))


def test_a_read_task_notices_its_range_is_gone_at_once(retained: Retained) -> None:
    # A range planned before retention removed it: the task does not wait pollTimeout (60 s).
    # The second case is a partition of which every record is gone: nothing comes after the
    # range either, so only the position tells (DIRECT-LOW-WATER to the partition's end).
    r = retained
    g = Retained(r.towers, r.topic, r.gone, r.gone_end, r.gone_end, r.gone, r.gone_end)
    for part, start, end in ((r, 0, 10), (g, 200, 300)):
        started = time.monotonic()
        gone = rf"offsets {start}\.\.{end - 1} .* failOnDataLoss=false"
        with pytest.raises(dafka.DafkaError, match=gone):
            _range_read(part, start, end, "true")
        assert _range_read(part, start, end, "false") == []
        assert time.monotonic() - started < 8
    # Partly gone: failOnDataLoss=false goes on with what remains.
    with pytest.raises(dafka.DafkaError, match=rf"offsets 0\.\.{r.low - 1} .* failOnDataLoss"):
        _range_read(r, 0, r.low + 100, "true")
    table = pa.Table.from_batches(_range_read(r, 0, r.low + 100, "false"))
    assert table.column("offset").to_pylist() == list(range(r.low, r.low + 100))
    assert table.column("value").to_pylist() == [b"%099d" % i for i in range(r.low, r.low + 100)]
