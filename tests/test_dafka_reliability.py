"""Issue 21 from Python: damaged logs, records over the size limit, a locked store directory
and a position past the stores' end, each as a user meets it (loopback only)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import dafka

# The first segment of a store directory (20 decimal digits of its base position).
FIRST_SEGMENT = "00000000000000000000.log"


def topic() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def tower() -> Iterator[dafka.Tower]:
    with dafka.Tower(sub="tcp://127.0.0.1:0") as t:
        yield t


def offsets_read(source: dafka.Consumer | dafka.PartitionReader, n: int) -> list[int]:
    """Polls until `n` records came or nothing came for 10 s; their offsets in order."""
    got: list[int] = []
    idle_since = time.monotonic()
    while len(got) < n and time.monotonic() - idle_since < 10:
        batch = source.poll(max_records=10_000, timeout=0.2)
        if batch.num_rows:
            idle_since = time.monotonic()
            got.extend(batch.column("offset").to_pylist())
    return got


def test_a_record_over_the_limit_is_refused_at_send(tower: dafka.Tower) -> None:
    with dafka.Producer(topic(), towers=tower.towers) as producer:
        with pytest.raises(dafka.InvalidArgumentError) as info:
            producer.send(b"x" * ((1 << 20) + 1))
        assert "1048577" in str(info.value) and "1048576" in str(info.value)
        # Nothing was taken: the next record still gets offset 0.
        assert producer.send(b"fits") == 0


def test_a_store_that_keeps_less_says_so_and_the_partition_flows(
    tower: dafka.Tower, tmp_path: Path
) -> None:
    t = topic()
    with (
        dafka.Store(tmp_path / "s", towers=tower.towers, max_record_bytes=1024),
        dafka.Producer(t, towers=tower.towers, max_record_bytes=4096) as producer,
    ):
        # Sent at once, so the store may publish the refusal before the producer's
        # subscription reached it: it comes again with the ACK (issue 21's race).
        producer.send_many([b"a", b"b", b"x" * 2000, b"c"])
        with pytest.raises(dafka.StorageError, match=r"2000 bytes.*1024"):
            producer.flush(timeout=20)
        producer.send(b"d")
        producer.flush(timeout=20)  # said once; the partition goes on
        with dafka.Consumer([t], towers=tower.towers, offset_reset="earliest") as consumer:
            assert offsets_read(consumer, 4) == [0, 1, 3, 4]
            assert consumer.lost == 1


def test_a_damaged_record_is_skipped_and_counted_not_waited_for(
    tower: dafka.Tower, tmp_path: Path
) -> None:
    """The issue's repro: one flipped bit in the value of offset 5000; an "earliest" reader
    used to receive 0..4999 and then wait forever."""
    t, path = topic(), tmp_path / "store"
    values = [f"record-{i:06}".encode() for i in range(10_000)]
    with (
        dafka.Store(path, towers=tower.towers),
        dafka.Producer(t, towers=tower.towers) as producer,
    ):
        producer.send_many(pa.array(values, pa.binary()))
        producer.flush(timeout=30)
        partition = producer.partition
    segment = path / FIRST_SEGMENT
    data = bytearray(segment.read_bytes())
    at = data.index(values[5000])
    data[at + 4] ^= 0x10
    segment.write_bytes(bytes(data))

    with dafka.Store(path, towers=tower.towers):
        with dafka.PartitionReader(tower.towers) as reader:
            assert reader.offsets(t) == {partition: (0, 10_000)}
            reader.assign(t, partition, 0, 10_000)
            got = offsets_read(reader, 9_999)
        assert got == [*range(5000), *range(5001, 10_000)]
        with dafka.Consumer([t], towers=tower.towers, offset_reset="earliest") as consumer:
            assert len(offsets_read(consumer, 9_999)) == 9_999
            assert consumer.lost == 1


def test_a_second_store_on_a_directory_is_refused_naming_the_holder(
    tower: dafka.Tower, tmp_path: Path
) -> None:
    with dafka.Store(tmp_path / "s", towers=tower.towers):
        with pytest.raises(dafka.StorageError) as info:
            dafka.Store(tmp_path / "s", towers=tower.towers)
        assert f"process {os.getpid()}" in str(info.value)
        assert str(tmp_path / "s") in str(info.value)
    # Released with the store.
    dafka.Store(tmp_path / "s", towers=tower.towers).close()


def test_a_consumer_past_the_stores_end_says_so(
    tower: dafka.Tower, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    t = topic()
    with (
        dafka.Store(tmp_path / "s", towers=tower.towers),
        dafka.Producer(t, towers=tower.towers) as producer,
    ):
        producer.send_many([b"r"] * 10)
        producer.flush(timeout=20)
        start = {(t, producer.partition): 50}
        with dafka.Consumer([t], towers=tower.towers, start_offsets=start) as consumer:
            deadline = time.monotonic() + 10
            said: list[str] = []
            while not said and time.monotonic() < deadline:
                consumer.poll(timeout=0.2)
                said = [
                    r.getMessage()
                    for r in caplog.records
                    if "past the end the stores hold" in r.getMessage()
                ]
            assert said, "no warning for a position past the stores' end"


# The record damaged on the only store, then read by a PartitionReader whose logging handler
# does something when the reader logs the skip. Before the fix the node logged while holding
# the reader's state lock: Python's logging needs the GIL, so a thread that held the GIL and
# waited for that lock (`position`, as a Spark task calls it between polls) and the node's
# thread waited for each other forever (the Spark test of such a record hung so, past
# pytest's timeout: its SIGALRM handler never ran).
_SKIP_LOGGED = """
import faulthandler, logging, sys, tempfile, threading, time
from pathlib import Path
import dafka

faulthandler.dump_traceback_later(30, exit=True)  # a deadlock: say where, and fail
SCENARIO = sys.argv[1]
values = [b"%099d" % i for i in range(1000)]
path = Path(tempfile.mkdtemp())
reader = part = None
logged = threading.Event()
seen = []

class OnSkip(logging.Handler):
    def emit(self, record):
        if "skipped" not in record.getMessage():
            return
        if SCENARIO == "handler_reads_the_position":
            seen.append(reader.position("t", part))
        else:  # lets go of the GIL while the main thread asks for the position
            logged.set()
            time.sleep(0.5)

logging.getLogger("dafka_node").addHandler(OnSkip())
with dafka.Tower(sub="tcp://127.0.0.1:0") as tower:
    with dafka.Store(path, towers=tower.towers):
        with dafka.Producer("t", towers=tower.towers) as p:
            p.send_many(values)
            p.flush(timeout=30)
            part = p.partition
    segment = path / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[data.index(values[500]) + 7] ^= 0x01
    segment.write_bytes(bytes(data))
    with dafka.Store(path, towers=tower.towers), dafka.PartitionReader(tower.towers) as r:
        reader = r
        assert reader.offsets("t") == {part: (0, 1000)}
        reader.assign("t", part, 0, 1000)
        if SCENARIO == "main_thread_reads_it":
            # Not in a poll (which lets go of the GIL) when the skip is logged.
            assert logged.wait(timeout=20), "the skip was not logged"
            seen.append(reader.position("t", part))
        got, deadline = [], time.monotonic() + 20
        while len(got) < 999 and time.monotonic() < deadline:
            got += reader.poll(max_records=1000, timeout=0.05).column("offset").to_pylist()
        assert got == [*range(500), *range(501, 1000)], got[495:505]
        assert seen and all(s > 500 for s in seen), seen  # read after the skip
print("read")
"""


@pytest.mark.parametrize("scenario", ["handler_reads_the_position", "main_thread_reads_it"])
def test_a_handler_of_the_skip_log_does_not_deadlock_the_reader(scenario: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SKIP_LOGGED, scenario], capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0 and done.stdout.strip() == "read", done.stderr
