"""Interrupting and cancelling Dafka calls loses nothing: Ctrl-C (a signal raising
KeyboardInterrupt) during a blocking poll/flush, asyncio cancellation of poll_async, and the
asyncio forms of send, send_many, flush and poll; plus node ids that never repeat."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pyarrow as pa
import pytest

import dafka

posix_only = pytest.mark.skipif(os.name != "posix", reason="signals and fork")


@pytest.fixture(scope="module")
def cluster() -> Iterator[dafka.LocalCluster]:
    with dafka.LocalCluster() as c:
        yield c


def topic() -> str:
    return f"c-{uuid.uuid4().hex[:12]}"


def wait_queued(consumer: dafka.Consumer, partition: str, t: str, n: int) -> None:
    """Waits until the consumer has received `n` records of the partition (its position
    moves on receipt, before any poll takes them)."""
    deadline = time.monotonic() + 20
    while consumer.positions().get((t, partition)) != n:
        assert time.monotonic() < deadline, f"positions: {consumer.positions()}"
        time.sleep(0.02)


@contextmanager
def interrupt_after(seconds: float) -> Iterator[None]:
    """Raises KeyboardInterrupt in the main thread after `seconds`, as Ctrl-C does."""

    def raise_interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, raise_interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@posix_only
def test_ctrl_c_during_poll_keeps_the_records_already_received(
    cluster: dafka.LocalCluster,
) -> None:
    t = topic()
    with (
        dafka.Producer(t, towers=cluster.towers) as producer,
        dafka.Consumer(t, towers=cluster.towers, offset_reset="earliest") as consumer,
    ):
        values = [f"v{i}".encode() for i in range(10)]
        producer.send_many(values)
        wait_queued(consumer, producer.partition, t, 10)
        # The poll wants 1000: it holds the ten while waiting for more, and is interrupted.
        for _ in range(3):
            with interrupt_after(0.2), pytest.raises(KeyboardInterrupt):
                consumer.poll(max_records=1000, timeout=30)
        batch = consumer.poll(max_records=1000, timeout=0.5)
    assert batch.column("value").to_pylist() == values


@posix_only
def test_ctrl_c_during_flush_leaves_the_producer_usable(tmp_path) -> None:
    with dafka.Tower(sub="tcp://127.0.0.1:0") as tower:
        with dafka.Producer(topic(), towers=tower.towers) as producer:
            assert producer.send(b"a") == 0
            # No store: the flush waits until interrupted.
            start = time.monotonic()
            with interrupt_after(0.2), pytest.raises(KeyboardInterrupt):
                producer.flush()
            assert time.monotonic() - start < 5
            assert producer.send(b"b") == 1
            with dafka.Store(str(tmp_path / "s"), towers=tower.towers):
                producer.flush(timeout=20)


@posix_only
def test_send_waits_on_a_full_buffer_with_the_gil_released_and_ctrl_c_stops_it(
    tmp_path,
) -> None:
    with dafka.Tower(sub="tcp://127.0.0.1:0") as tower:
        with dafka.Producer(topic(), towers=tower.towers) as producer:
            # No store: up to the unacknowledged bound (100 000) each send returns its offset
            # at once.
            assert [producer.send(b"x") for _ in range(100_000)] == list(range(100_000))
            # The next waits for room with the GIL released: another thread runs meanwhile.
            ticks: list[float] = []
            stop = threading.Event()

            def tick() -> None:
                while not stop.is_set():
                    ticks.append(time.monotonic())
                    time.sleep(0.01)

            ticker = threading.Thread(target=tick)
            start = time.monotonic()
            ticker.start()
            try:
                with interrupt_after(0.5), pytest.raises(KeyboardInterrupt):
                    producer.send(b"y")
            finally:
                stop.set()
                ticker.join()
            assert time.monotonic() - start < 5
            assert len(ticks) >= 10, ticks
            # Interrupted before it was queued: once a store acknowledges, the next record
            # takes offset 100 000.
            with dafka.Store(str(tmp_path / "s"), towers=tower.towers):
                assert producer.send(b"z") == 100_000
                producer.flush(timeout=30)


def run(main: Callable[[], object]) -> object:
    return asyncio.run(main())  # type: ignore[arg-type]


def test_asyncio_send_send_many_flush_and_poll(cluster: dafka.LocalCluster) -> None:
    t = topic()

    async def main() -> tuple[list[int], pa.RecordBatch]:
        with (
            dafka.Producer(t, towers=cluster.towers) as producer,
            dafka.Consumer(t, towers=cluster.towers, offset_reset="earliest") as consumer,
        ):
            offsets = [await producer.send_async(b"a"), await producer.send_async("b")]
            offsets.append(await producer.send_many_async([b"c", b"d"]))
            offsets.append(await producer.send_many_async(pa.array([b"e"], pa.binary())))
            await producer.flush_async(timeout=20)
            rows: list[pa.RecordBatch] = []
            deadline = time.monotonic() + 20
            while sum(b.num_rows for b in rows) < 5 and time.monotonic() < deadline:
                rows.append(await consumer.poll_async(max_records=100, timeout=0.2))
            return offsets, pa.Table.from_batches(rows).combine_chunks().to_batches()[0]

    offsets, batch = asyncio.run(main())
    assert offsets == [0, 1, 2, 4]
    assert batch.column("value").to_pylist() == [b"a", b"b", b"c", b"d", b"e"]
    assert batch.column("offset").to_pylist() == [0, 1, 2, 3, 4]


def test_poll_async_lets_the_loop_run_and_returns_an_empty_batch(
    cluster: dafka.LocalCluster,
) -> None:
    async def main() -> tuple[int, pa.RecordBatch]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        ticker = asyncio.ensure_future(tick())
        with dafka.Consumer(topic(), towers=cluster.towers) as consumer:
            batch = await consumer.poll_async(timeout=0.3)
        ticker.cancel()
        return ticks, batch

    ticks, batch = asyncio.run(main())
    assert batch.num_rows == 0
    assert ticks > 30, f"the loop ran only {ticks} times during a 0.3 s poll_async"


def test_cancelled_poll_async_loses_no_record(cluster: dafka.LocalCluster) -> None:
    t = topic()
    n = 2000

    async def main() -> list[int]:
        with (
            dafka.Producer(t, towers=cluster.towers) as producer,
            dafka.Consumer(t, towers=cluster.towers, offset_reset="earliest") as consumer,
        ):
            # Records queued before the first poll, then a stream while polls are cancelled
            # at every stage: while waiting, as the batch completes, right after.
            await producer.send_many_async([b"x%d" % i for i in range(10)])
            await asyncio.to_thread(wait_queued, consumer, producer.partition, t, 10)
            got: list[int] = []
            sent = 10
            delays = [0, 0.0005, 0.001, 0.003, 0.01]
            deadline = time.monotonic() + 30
            i = 0
            while len(got) < n and time.monotonic() < deadline:
                if sent < n:
                    await producer.send_many_async([b"x%d" % k for k in range(sent, sent + 20)])
                    sent += 20
                task = asyncio.ensure_future(consumer.poll_async(max_records=50, timeout=0.05))
                await asyncio.sleep(delays[i % len(delays)])
                i += 1
                if not task.done():
                    task.cancel()
                try:
                    batch = await task
                except asyncio.CancelledError:
                    continue
                got.extend(batch.column("offset").to_pylist())
            return got

    got = asyncio.run(main())
    assert got == list(range(n))


def test_poll_async_cancelled_after_its_batch_completed_loses_no_record(
    cluster: dafka.LocalCluster,
) -> None:
    """The hardest moment: the runtime has the batch ready and the loop has not yet run the
    completion when the await is cancelled. Records are taken only by the completion."""
    t = topic()

    async def main() -> tuple[int, list[bytes]]:
        with (
            dafka.Producer(t, towers=cluster.towers) as producer,
            dafka.Consumer(t, towers=cluster.towers, offset_reset="earliest") as consumer,
        ):
            values = [b"r%d" % i for i in range(30)]
            await producer.send_many_async(values)
            await asyncio.to_thread(wait_queued, consumer, producer.partition, t, 30)
            cancelled = 0
            for _ in range(10):
                task = asyncio.ensure_future(consumer.poll_async(max_records=3, timeout=30))
                await asyncio.sleep(0)  # the task starts and awaits the native future
                time.sleep(0.02)  # blocks the loop: the runtime completes meanwhile
                cancelled += task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            batch = await consumer.poll_async(max_records=100, timeout=0.5)
            return cancelled, batch.column("value").to_pylist()

    cancelled, got = asyncio.run(main())
    assert cancelled == 10
    assert got == [b"r%d" % i for i in range(30)]


def test_cancelled_flush_async_and_a_closed_producer(cluster: dafka.LocalCluster) -> None:
    async def main() -> None:
        with dafka.Tower(sub="tcp://127.0.0.1:0") as tower:
            producer = dafka.Producer(topic(), towers=tower.towers)
            await producer.send_async(b"a")
            # No store: the flush waits; cancelling it stops the wait.
            task = asyncio.ensure_future(producer.flush_async())
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            with pytest.raises(dafka.TimeoutError):
                await producer.flush_async(timeout=0.05)
            producer.close()
            with pytest.raises(dafka.ClosedError):
                producer.send_async(b"b")

    asyncio.run(main())


@posix_only
def test_node_ids_differ_across_fork(cluster: dafka.LocalCluster) -> None:
    """Partition ids come from the kernel's CSPRNG for every id: a forked child (Spark
    workers, multiprocessing) never repeats its parent's next id."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            with dafka.Producer("ids", towers=cluster.towers) as p:
                os.write(write, p.partition.encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with dafka.Producer("ids", towers=cluster.towers) as p:
        parent = p.partition
    child = os.read(read, 64).decode()
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(child) == 32
    assert child != parent
    ids = set()
    for _ in range(20):
        with dafka.Producer("ids", towers=cluster.towers) as p:
            ids.add(p.partition)
    assert len(ids) == 20
