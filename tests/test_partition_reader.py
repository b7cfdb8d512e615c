"""dafka.PartitionReader: the offsets query and assigned ranges, over a LocalCluster."""

from __future__ import annotations

import socket
import time

import pyarrow as pa
import pytest
from conftest import unique_topic

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


def test_offsets_fail_in_bounded_time_when_the_towers_are_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with dafka.PartitionReader(f"tcp://127.0.0.1:{port}") as reader:
        started = time.monotonic()
        with pytest.raises(dafka.TimeoutError, match="no store answered"):
            reader.offsets("x", timeout=0.5)
        assert time.monotonic() - started < 3.0


def test_bad_partition_id_is_refused() -> None:
    with dafka.LocalCluster() as c, dafka.PartitionReader(c.towers) as reader:
        with pytest.raises(dafka.InvalidArgumentError, match="32 hexadecimal"):
            reader.assign("t", "nope", 0)
