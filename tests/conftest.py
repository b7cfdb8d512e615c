"""Shared fixtures: repository paths and the project's pinned metadata."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dafka.zmtp import Socket

REPO = Path(__file__).resolve().parent.parent

# Spark and the tests' subprocesses must stay on loopback and use this interpreter.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A dafka.LocalCluster (tower and store, no fsync) per test module."""
    import dafka

    with dafka.LocalCluster(sync="never") as c:
        yield c


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A tower and a store (no fsync) taking records of up to 4 MiB (value, key and headers:
    a 1 MiB key with a 1 MiB value is over the default 1 MiB); yields the towers."""
    import dafka

    with (
        dafka.Tower(sub="tcp://127.0.0.1:0") as tower,
        dafka.Store(
            tmp_path_factory.mktemp("big"),
            towers=tower.towers,
            sync="never",
            max_record_bytes=4 << 20,
        ),
    ):
        yield tower.towers


RETAINED = 80_000


@dataclass
class Retained:
    """A partition of which retention dropped the first records: offsets ``low..end`` held."""

    towers: str
    topic: str
    partition: str
    low: int
    end: int
    # Another partition of the topic, written first: every one of its records is gone.
    gone: str
    gone_end: int


@pytest.fixture(scope="module")
def retained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Retained]:
    """A tower and a store keeping about 4 MiB in 2 MiB segments, one partition of 1000
    records of 100 B written to it, then another of RETAINED: retention dropped the whole
    first partition and the first records of the second (the store's log is shared)."""
    import dafka
    from dafka._native import Store, Tower

    path = tmp_path_factory.mktemp("retained")
    with Tower(sub="tcp://127.0.0.1:0") as tower:
        towers = tower.towers
        with Store(
            str(path), towers=towers, sync="never", segment_bytes=2 << 20, retention_bytes=4 << 20
        ):
            topic = unique_topic("ret")
            with dafka.Producer(topic, towers=towers) as p:
                p.send_many([b"%099d" % i for i in range(1000)])
                p.flush(timeout=30)
                gone = p.partition
            with dafka.Producer(topic, towers=towers) as p:
                for chunk in range(0, RETAINED, 10_000):
                    p.send_many([b"%099d" % i for i in range(chunk, chunk + 10_000)])
                    p.flush(timeout=30)
                partition = p.partition
            with dafka.PartitionReader(towers) as reader:
                # The writer applies retention after acknowledging the batch that rolled a
                # segment: wait until the low-water mark is above 0 and stays put.
                deadline = time.monotonic() + 20
                seen = None
                while time.monotonic() < deadline:
                    bounds = reader.offsets(topic)[partition]
                    if bounds[0] > 0 and bounds == seen:
                        break
                    seen = bounds
                    time.sleep(0.3)
                bounds = reader.offsets(topic)
            low, end = bounds[partition]
            assert 0 < low < end == RETAINED, bounds
            assert bounds[gone] == (1000, 1000), bounds
            yield Retained(towers, topic, partition, low, end, gone, 1000)


def unique_topic(prefix: str) -> str:
    """A topic no other test writes."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for every Spark test module (start-up costs ~5 s)."""
    import dafka.spark

    session = dafka.spark.local_session("dafka-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release wheel users install: the one `make` built (DAFKA_WHEEL_DIR), or one built
    here when pytest runs alone."""
    wheel_dir = os.environ.get("DAFKA_WHEEL_DIR")
    if wheel_dir:
        found = sorted(Path(wheel_dir).glob("dafka-*.whl"))
        if found:
            return found[-1]
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "maturin",
            "build",
            "--release",
            "--locked",
            "--quiet",
            "--out",
            str(out),
        ],
        cwd=REPO,
        check=True,
        timeout=1200,
    )
    return sorted(out.glob("dafka-*.whl"))[-1]


@pytest.fixture(scope="session")
def cargo_version() -> str:
    with (REPO / "Cargo.toml").open("rb") as f:
        version = tomllib.load(f)["workspace"]["package"]["version"]
    assert isinstance(version, str)
    return version


@pytest.fixture
def pair() -> Iterator[tuple[Socket, Socket]]:
    """A connected PUSH -> PULL pair on loopback, closed after the test."""
    pull = Socket("PULL", linger=0)
    push = Socket("PUSH", linger=0)
    push.connect(pull.bind("tcp://127.0.0.1:0"))
    yield push, pull
    push.close()
    pull.close()


def ticks_while(blocking: Callable[[], object]) -> int:
    """How many times another Python thread ran (sleeping 1 ms a turn) while `blocking`
    ran: a call that holds the GIL leaves it near 0."""
    ticks = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    t.start()
    try:
        blocking()
    finally:
        stop.set()
        t.join()
    return ticks


def beacon_endpoints(towers: str, within: float = 5.0) -> set[str]:
    """The publisher endpoints the tower forwards in its beacons for `within` seconds."""
    host, port = towers.rsplit(":", 1)
    seen = set()
    with Socket("SUB", linger=0) as sub:
        sub.subscribe(b"B")
        sub.connect(f"{host}:{int(port) + 1}")
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                frames = sub.recv_multipart(timeout=0.2)
            except TimeoutError:
                continue
            if len(frames) == 3:
                seen.add(frames[2].decode())
    return seen
