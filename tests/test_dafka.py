"""The Dafka Python API: LocalCluster, Tower, Store, Producer, Consumer, on loopback."""

from __future__ import annotations

import gc
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import beacon_endpoints, ticks_while

import dafka
import dafka.zmtp

SCHEMA = pa.schema(
    [
        pa.field("topic", pa.utf8(), nullable=True),
        pa.field("partition", pa.utf8(), nullable=True),
        pa.field("offset", pa.int64(), nullable=True),
        pa.field("value", pa.binary(), nullable=True),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=True),
        pa.field("timestampType", pa.int32(), nullable=True),
        pa.field("key", pa.binary(), nullable=True),
        pa.field(
            "headers",
            pa.list_(
                pa.field(
                    "element",
                    pa.struct([pa.field("key", pa.utf8()), pa.field("value", pa.binary())]),
                )
            ),
            nullable=True,
        ),
    ]
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[dafka.LocalCluster]:
    with dafka.LocalCluster() as c:
        yield c


def topic() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def collect(consumer: dafka.Consumer, n: int, within: float = 20.0) -> pa.Table:
    """Polls until `n` rows arrived (or `within` seconds passed)."""
    batches = []
    rows = 0
    deadline = time.monotonic() + within
    while rows < n and time.monotonic() < deadline:
        batch = consumer.poll(max_records=10000, timeout=0.2)
        assert isinstance(batch, pa.RecordBatch)
        assert batch.schema == SCHEMA
        rows += batch.num_rows
        batches.append(batch)
    return pa.Table.from_batches(batches, schema=SCHEMA)


@pytest.mark.smoke
def test_round_trip_through_a_local_cluster_has_the_exact_arrow_schema(
    cluster: dafka.LocalCluster,
) -> None:
    t = topic()
    before = time.time()
    with (
        dafka.Producer(t, towers=cluster.towers) as producer,
        dafka.Consumer([t], towers=cluster.towers, offset_reset="earliest") as consumer,
    ):
        assert len(producer.partition) == 32
        assert producer.partition == producer.partition.upper()
        assert producer.send(b"hello") == 0
        assert producer.send(b"world") == 1
        producer.flush(timeout=20)
        table = collect(consumer, 2)
    assert table.schema == SCHEMA
    assert table.column("value").to_pylist() == [b"hello", b"world"]
    assert table.column("offset").to_pylist() == [0, 1]
    assert set(table.column("topic").to_pylist()) == {t}
    assert set(table.column("partition").to_pylist()) == {producer.partition}
    stamps = [ts.timestamp() for ts in table.column("timestamp").to_pylist()]
    assert all(before - 1 <= s <= time.time() + 1 for s in stamps)


def test_poll_returns_an_empty_batch_not_none(cluster: dafka.LocalCluster) -> None:
    with dafka.Consumer(topic(), towers=cluster.towers) as consumer:
        batch = consumer.poll(timeout=0.05)
    assert batch is not None
    assert batch.num_rows == 0
    assert batch.schema == SCHEMA


def test_earliest_reads_stored_records_latest_only_new_ones(cluster: dafka.LocalCluster) -> None:
    t = topic()
    with dafka.Producer(t, towers=cluster.towers) as producer:
        producer.send_many([b"old-0", b"old-1", b"old-2"])
        producer.flush(timeout=20)
        with (
            dafka.Consumer(t, towers=cluster.towers, offset_reset="earliest") as early,
            dafka.Consumer(t, towers=cluster.towers, offset_reset="latest") as late,
        ):
            got = collect(early, 3).column("value").to_pylist()
            assert got == [b"old-0", b"old-1", b"old-2"]
            # Let the late consumer meet the producer, then send one more. As in the
            # reference, "latest" starts at the head the first HEAD reports (offset 2,
            # the last record sent), never before it.
            seen = collect(late, 1, within=2.5).column("value").to_pylist()
            assert producer.send(b"new") == 3
            seen += collect(late, 1).column("value").to_pylist()
            assert seen in ([b"new"], [b"old-2", b"new"]), seen
            assert collect(early, 1).column("value").to_pylist() == [b"new"]


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda v: v, id="list"),
        pytest.param(lambda v: pa.array(v, pa.binary()), id="binary-array"),
        pytest.param(lambda v: pa.array(v, pa.large_binary()), id="large-binary-array"),
        pytest.param(lambda v: pa.array([x.decode() for x in v], pa.utf8()), id="string-array"),
        pytest.param(lambda v: pa.array(v, pa.binary()).slice(0), id="sliced-array"),
    ],
)
def test_send_many_from_a_list_and_from_pyarrow_arrays(cluster: dafka.LocalCluster, make) -> None:
    t = topic()
    values = [f"v{i}".encode() * (i % 5) for i in range(1000)]
    with (
        dafka.Producer(t, towers=cluster.towers) as producer,
        dafka.Consumer(t, towers=cluster.towers, offset_reset="earliest") as consumer,
    ):
        assert producer.send(b"first") == 0
        assert producer.send_many(make(values)) == 1
        assert producer.send_many([]) == 1 + len(values)
        producer.flush(timeout=20)
        table = collect(consumer, 1 + len(values))
    assert table.column("value").to_pylist() == [b"first", *values]
    assert table.column("offset").to_pylist() == list(range(1 + len(values)))


def test_send_many_of_a_sliced_arrow_array_sends_only_the_slice(
    cluster: dafka.LocalCluster,
) -> None:
    t = topic()
    arr = pa.array([b"a", b"bb", b"ccc", b"dddd"], pa.binary()).slice(1, 2)
    with (
        dafka.Producer(t, towers=cluster.towers) as producer,
        dafka.Consumer(t, towers=cluster.towers, offset_reset="earliest") as consumer,
    ):
        producer.send_many(arr)
        producer.flush(timeout=20)
        assert collect(consumer, 2).column("value").to_pylist() == [b"bb", b"ccc"]


def test_send_many_refuses_nulls_and_other_types(cluster: dafka.LocalCluster) -> None:
    with dafka.Producer(topic(), towers=cluster.towers) as producer:
        with pytest.raises(dafka.InvalidArgumentError, match="null"):
            producer.send_many(pa.array([b"a", None], pa.binary()))
        with pytest.raises(dafka.InvalidArgumentError, match="binary or string"):
            producer.send_many(pa.array([1, 2], pa.int64()))
        with pytest.raises(dafka.InvalidArgumentError, match="bytes"):
            producer.send_many([b"a", 3])


@pytest.mark.smoke
def test_flush_returns_only_once_a_store_acknowledged(tmp_path: Path) -> None:
    with dafka.Tower(sub="tcp://127.0.0.1:0") as tower:
        with dafka.Producer(topic(), towers=tower.towers) as producer:
            assert producer.acknowledged == 0
            producer.send(b"x")
            producer.send_many([b"y", b"z"])
            # No store: nothing acknowledges, flush runs out of time.
            with pytest.raises(dafka.TimeoutError, match="unacknowledged"):
                producer.flush(timeout=0.5)
            assert producer.acknowledged == 0
            with dafka.Store(tmp_path / "store", towers=tower.towers, sync="always"):
                producer.flush(timeout=20)
                assert producer.acknowledged == 3


def test_positions_give_the_next_offset_per_partition(cluster: dafka.LocalCluster) -> None:
    t = topic()
    with (
        dafka.Producer(t, towers=cluster.towers) as producer,
        dafka.Consumer(t, towers=cluster.towers, offset_reset="earliest") as consumer,
    ):
        producer.send_many([b"a", b"b", b"c"])
        producer.flush(timeout=20)
        assert collect(consumer, 3).num_rows == 3
        assert consumer.positions()[(t, producer.partition)] == 3


def test_start_offsets_skip_what_comes_before(cluster: dafka.LocalCluster) -> None:
    t = topic()
    with dafka.Producer(t, towers=cluster.towers) as producer:
        producer.send_many([b"a", b"b", b"c"])
        producer.flush(timeout=20)
        start = {(t, producer.partition): 2}
        with dafka.Consumer(t, towers=cluster.towers, start_offsets=start) as consumer:
            assert collect(consumer, 1).column("value").to_pylist() == [b"c"]


def test_subscribe_later_and_iterate_over_batches(cluster: dafka.LocalCluster) -> None:
    t = topic()
    with (
        dafka.Producer(t, towers=cluster.towers) as producer,
        dafka.Consumer(topic(), towers=cluster.towers, offset_reset="earliest") as consumer,
    ):
        producer.send(b"late")
        producer.flush(timeout=20)
        consumer.subscribe(t)
        batch = next(iter(consumer))
        assert batch.column("value").to_pylist() == [b"late"]
        consumer.unsubscribe(t)


def test_context_managers_close_everything(tmp_path: Path) -> None:
    with dafka.LocalCluster() as cluster:
        tmp = cluster.path
        assert tmp.is_dir()
        with dafka.Producer(topic(), towers=cluster.towers) as producer:
            pass
        with dafka.Consumer(topic(), towers=cluster.towers) as consumer:
            pass
    assert cluster.closed
    assert not tmp.exists(), "the temporary store directory is removed on close"
    assert producer.closed and consumer.closed
    with pytest.raises(dafka.ClosedError):
        producer.send(b"x")
    with pytest.raises(dafka.ClosedError):
        consumer.poll()
    assert list(consumer) == []
    producer.close()  # closing twice is fine

    kept = tmp_path / "kept"
    with dafka.LocalCluster(kept) as cluster:
        pass
    assert kept.is_dir(), "a directory given by the caller stays"


def test_every_node_class_has_one_lifecycle(tmp_path: Path) -> None:
    """close() / closed / with, the same for every node class, the ZRE node's included."""
    from dafka.zre import Node

    with dafka.LocalCluster() as cluster:
        makers = {
            "Tower": lambda: dafka.Tower(sub="tcp://127.0.0.1:0"),
            "Store": lambda: dafka.Store(tmp_path / "s", towers=cluster.towers),
            "Producer": lambda: dafka.Producer(topic(), towers=cluster.towers),
            "Consumer": lambda: dafka.Consumer(topic(), towers=cluster.towers),
            "PartitionReader": lambda: dafka.PartitionReader(cluster.towers),
            "LocalCluster": dafka.LocalCluster,
            "zre.Node": lambda: Node(interface="127.0.0.1", beacons=False),
        }
        for name, make in makers.items():
            with make() as node:
                assert not node.closed, name
            assert node.closed, name
            node.close()  # closing twice does nothing
            assert node.closed, name
            node = make()
            if name == "zre.Node":
                node.start()  # `with` starts a ZRE node, as pyre's does
            node.close()
            assert node.closed, name


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda c: dafka.Producer("t", towers="nonsense"), "tcp://host:port"),
        (lambda c: dafka.Producer("t", towers=""), "towers is empty"),
        (lambda c: dafka.Producer("t", towers=c.towers, partition="xyz"), "32 hexadecimal"),
        (lambda c: dafka.Consumer("t", towers=c.towers, offset_reset="middle"), "offset_reset"),
        (lambda c: dafka.Consumer(42, towers=c.towers), "topics"),
        (
            lambda c: dafka.Consumer("t", towers=c.towers, start_offsets={"t": 1}),
            "start_offsets",
        ),
        (lambda c: dafka.Store("/nonexistent/x", towers=c.towers, sync="sometimes"), "sync"),
        (lambda c: dafka.Producer("t" * 300, towers=c.towers), "at most 255"),
    ],
)
def test_bad_arguments_raise_clear_errors(cluster: dafka.LocalCluster, make, match: str) -> None:
    with pytest.raises(dafka.InvalidArgumentError, match=match) as info:
        make(cluster)
    assert isinstance(info.value, dafka.DafkaError)
    assert isinstance(info.value, ValueError)


def test_bad_calls_raise_clear_errors(cluster: dafka.LocalCluster, tmp_path: Path) -> None:
    with dafka.Producer(topic(), towers=cluster.towers) as producer:
        with pytest.raises(dafka.InvalidArgumentError, match="bytes"):
            producer.send(3)  # type: ignore[arg-type]
        with pytest.raises(dafka.InvalidArgumentError, match="timeout"):
            producer.flush(timeout=-1)
    with dafka.Consumer(topic(), towers=cluster.towers) as consumer:
        with pytest.raises(dafka.InvalidArgumentError, match="max_records"):
            consumer.poll(max_records=0)
    a_file = tmp_path / "file"
    a_file.write_bytes(b"not a directory")
    with pytest.raises(dafka.StorageError) as info:
        dafka.Store(a_file, towers=cluster.towers)
    assert isinstance(info.value, OSError)


def test_blocking_calls_release_the_gil(cluster: dafka.LocalCluster) -> None:
    with dafka.Consumer(topic(), towers=cluster.towers) as consumer:
        ticks = ticks_while(lambda: consumer.poll(timeout=0.5))
    assert ticks > 50, f"the other thread ran only {ticks} times during a 0.5 s poll"


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_poll_is_interruptible(cluster: dafka.LocalCluster) -> None:
    import signal

    with dafka.Consumer(topic(), towers=cluster.towers) as consumer:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        old = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
        try:
            start = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                consumer.poll(timeout=30)
            assert time.monotonic() - start < 5
        finally:
            signal.signal(signal.SIGALRM, old)


def test_records_sent_before_a_producer_is_dropped_without_close_reach_the_store(
    cluster: dafka.LocalCluster,
) -> None:
    t = topic()
    n = 3000
    producer = dafka.Producer(t, towers=cluster.towers)
    # Let the producer meet the store first: records published before the store subscribed
    # come to it only through a later HEAD, which a dropped producer never sends.
    time.sleep(1.0)
    for i in range(n):
        producer.send(b"v%d" % i)
    # No close(): the records queued since the node's task last ran still go out.
    del producer
    gc.collect()
    with dafka.Consumer(t, towers=cluster.towers, offset_reset="earliest") as consumer:
        got = collect(consumer, n).column("value").to_pylist()
    assert got == [b"v%d" % i for i in range(n)]


# --- errors that say what to do (issue 22) -----------------------------------------------

# Nothing listens on port 1 of loopback (nor on 2, its XPUB): a tower that never answers.
DEAD_TOWERS = "tcp://127.0.0.1:1"


def test_a_consumer_whose_towers_never_answer_says_so() -> None:
    with dafka.Consumer(["x"], towers=DEAD_TOWERS, connect_timeout=0.5) as consumer:
        start = time.monotonic()
        with pytest.raises(
            dafka.TimeoutError, match=r"no tower answered within 0\.5 s at tcp://127\.0\.0\.1:1"
        ):
            while time.monotonic() - start < 10:
                consumer.poll(timeout=0.1)
        assert time.monotonic() - start < 5
        # Still so on the next poll, at once.
        with pytest.raises(dafka.TimeoutError, match="no tower answered"):
            consumer.poll(timeout=5)


def test_by_default_a_consumer_gives_its_towers_five_seconds() -> None:
    with dafka.Consumer(["x"], towers=DEAD_TOWERS) as consumer:
        start = time.monotonic()
        # One long poll: it ends when the towers' time is up, not after its own timeout.
        with pytest.raises(dafka.TimeoutError, match=r"no tower answered within 5 s"):
            consumer.poll(timeout=30)
        assert 4.5 <= time.monotonic() - start < 15


def test_connect_timeout_none_waits_for_the_towers_silently() -> None:
    with dafka.Consumer(["x"], towers=DEAD_TOWERS, connect_timeout=None) as consumer:
        assert consumer.poll(timeout=0.3).num_rows == 0
    with pytest.raises(dafka.InvalidArgumentError, match="connect_timeout"):
        dafka.Consumer(["x"], towers=DEAD_TOWERS, connect_timeout=-1)


def test_a_producer_whose_towers_never_answer_says_so() -> None:
    with dafka.Producer("x", towers=DEAD_TOWERS, connect_timeout=0.5) as producer:
        assert producer.send(b"queued while the towers may still answer") == 0
        start = time.monotonic()
        with pytest.raises(dafka.TimeoutError, match=r"no tower answered within 0\.5 s"):
            producer.flush(timeout=20)
        assert time.monotonic() - start < 5
        with pytest.raises(dafka.TimeoutError, match="no tower answered"):
            producer.send(b"refused: nothing would ever carry it")
        with pytest.raises(dafka.TimeoutError, match="no tower answered"):
            producer.send_many([b"a", b"b"])


def test_nodes_with_a_live_tower_are_not_affected_by_connect_timeout(
    cluster: dafka.LocalCluster,
) -> None:
    t = topic()
    with (
        dafka.Producer(t, towers=cluster.towers, connect_timeout=0.5) as producer,
        dafka.Consumer(
            t, towers=cluster.towers, offset_reset="earliest", connect_timeout=0.5
        ) as consumer,
    ):
        time.sleep(0.8)
        producer.send(b"v")
        producer.flush(timeout=20)
        assert collect(consumer, 1).column("value").to_pylist() == [b"v"]


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_a_consumer_learns_that_no_store_holds_a_topic(
    cluster: dafka.LocalCluster, reset: str
) -> None:
    held, missing = topic(), topic()
    with dafka.Producer(held, towers=cluster.towers) as producer:
        producer.send(b"kept")
        producer.flush(timeout=20)
    with dafka.Consumer([held, missing], towers=cluster.towers, offset_reset=reset) as consumer:
        assert consumer.topics_not_held == []  # nobody answered yet: not claimed
        deadline = time.monotonic() + 10
        while consumer.topics_not_held != [missing] and time.monotonic() < deadline:
            consumer.poll(timeout=0.1)
        assert consumer.topics_not_held == [missing]
        # Written after all: a partition of it is known, the claim is withdrawn.
        with dafka.Producer(missing, towers=cluster.towers) as late:
            deadline = time.monotonic() + 10
            while consumer.topics_not_held and time.monotonic() < deadline:
                late.send(b"now it exists")
                consumer.poll(timeout=0.1)
        assert consumer.topics_not_held == []


def test_an_earliest_consumer_warns_of_a_topic_no_store_holds(
    cluster: dafka.LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.WARNING)
    missing = topic()
    with dafka.Consumer(missing, towers=cluster.towers, offset_reset="earliest") as consumer:
        deadline = time.monotonic() + 10
        while not consumer.topics_not_held and time.monotonic() < deadline:
            consumer.poll(timeout=0.1)
        consumer.poll(timeout=0.2)
    said = [r.getMessage() for r in caplog.records if "no store holds topic" in r.getMessage()]
    assert len(said) == 1, said
    assert missing in said[0]


def test_an_unacknowledged_flush_says_how_many_stores_are_reachable(tmp_path: Path) -> None:
    t = topic()
    with dafka.Tower(sub="tcp://127.0.0.1:0") as tower:
        with dafka.Producer(t, towers=tower.towers, min_acks=2) as producer:
            producer.send(b"x")
            with pytest.raises(
                dafka.TimeoutError,
                match=rf"1 records still unacknowledged after 0\.5 ?s: no store is reachable "
                rf"for topic '{t}'",
            ):
                producer.flush(timeout=0.5)
            with dafka.Store(tmp_path / "store", towers=tower.towers, sync="never"):
                deadline = time.monotonic() + 10
                message = ""
                while "1 store reachable" not in message and time.monotonic() < deadline:
                    try:
                        producer.flush(timeout=0.3)
                    except dafka.TimeoutError as e:
                        message = str(e)
                assert f"1 store reachable for topic '{t}', 2 must acknowledge" in message


def test_a_store_path_that_is_a_file_is_named_as_such(
    cluster: dafka.LocalCluster, tmp_path: Path
) -> None:
    a_file = tmp_path / "file"
    a_file.write_bytes(b"not a directory")
    for path in (str(a_file), f"{a_file}/", str(a_file / "sub")):
        with pytest.raises(dafka.StorageError) as info:
            dafka.Store(path, towers=cluster.towers)
        message = str(info.value)
        assert f"{a_file} is a file, not a directory" in message, message
        assert "os error" not in message, message


def test_host_is_what_a_store_and_a_producer_announce(tmp_path: Path) -> None:
    t = topic()
    with (
        dafka.Tower(sub="tcp://127.0.0.1:0") as tower,
        dafka.Store(tmp_path / "s", towers=tower.towers, sync="never", host="127.0.0.2"),
        dafka.Producer(t, towers=tower.towers, host="127.0.0.3") as producer,
    ):
        endpoints = beacon_endpoints(tower.towers, within=2.5)
        hosts = {e.rsplit(":", 1)[0] for e in endpoints}
        assert {"tcp://127.0.0.2", "tcp://127.0.0.3"} <= hosts, endpoints
        assert "tcp://127.0.0.1" not in hosts, endpoints
        # Consumers connect to what is announced: the records travel through 127.0.0.2
        # (stored) and 127.0.0.3 (live), where alone the nodes listen.
        producer.send_many([b"a", b"b"])
        producer.flush(timeout=20)
        with dafka.Consumer(t, towers=tower.towers, offset_reset="earliest") as consumer:
            assert collect(consumer, 2).column("value").to_pylist() == [b"a", b"b"]


def test_bind_sets_the_listening_address_apart_from_the_announced_one(tmp_path: Path) -> None:
    with (
        dafka.Tower(sub="tcp://127.0.0.1:0") as tower,
        dafka.Store(
            tmp_path / "s", towers=tower.towers, sync="never", host="127.0.0.2", bind="127.0.0.1"
        ),
    ):
        # The store's two nodes (writer and reader) announce themselves.
        endpoints = beacon_endpoints(tower.towers, within=2.5)
        assert len(endpoints) == 2, endpoints
        assert all(e.startswith("tcp://127.0.0.2:") for e in endpoints), endpoints
        port = min(endpoints).rsplit(":", 1)[1]
        # Listening on the bound address and the announced port: a ZMTP peer answers there.
        with dafka.zmtp.Socket("SUB", linger=0) as sub:
            monitor = sub.monitor()
            sub.connect(f"tcp://127.0.0.1:{port}")
            events = []
            while not events or events[-1]["event"] != "handshake_succeeded":
                event = monitor.recv(timeout=5)
                assert event is not None, events
                events.append(event)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "*", ""])
def test_host_must_be_an_address_peers_can_reach(cluster: dafka.LocalCluster, host: str) -> None:
    with pytest.raises(dafka.InvalidArgumentError, match="host"):
        dafka.Producer("t", towers=cluster.towers, host=host)
