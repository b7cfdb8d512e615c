"""The Arrow batch a poll builds names each row's own topic and partition, also when one
batch holds runs of several topics and partitions (the text of each is made once per run)."""

from __future__ import annotations

import time
import uuid

import pyarrow as pa

import dafka


def test_rows_of_interleaved_partitions_and_topics_carry_their_own_names(cluster) -> None:
    topics = [f"rb-{uuid.uuid4().hex[:10]}-{i}" for i in range(2)]
    producers = [
        dafka.Producer(t, towers=cluster.towers) for t in topics for _ in range(2)
    ]  # two partitions per topic
    try:
        with dafka.Consumer(topics, towers=cluster.towers, offset_reset="earliest") as consumer:
            origin = {}
            for round_ in range(5):
                for k, p in enumerate(producers):
                    values = [b"%d/%d/%d" % (k, round_, i) for i in range(50)]
                    p.send_many(values)
            for k, p in enumerate(producers):
                p.flush(timeout=20)
                origin[k] = (p.topic, p.partition)
            want = 5 * 50 * len(producers)
            batches, rows = [], 0
            deadline = time.monotonic() + 30
            while rows < want and time.monotonic() < deadline:
                batch = consumer.poll(max_records=100_000, timeout=0.5)
                rows += batch.num_rows
                batches.append(batch)
            table = pa.Table.from_batches(batches)
    finally:
        for p in producers:
            p.close()
    assert table.num_rows == want
    assert any(len(set(b.column("partition").to_pylist())) > 1 for b in batches), (
        "no batch mixed partitions: the test would not see a wrong name"
    )
    for t, part, v in zip(
        table.column("topic").to_pylist(),
        table.column("partition").to_pylist(),
        table.column("value").to_pylist(),
        strict=True,
    ):
        assert (t, part) == origin[int(v.split(b"/")[0])], v
