"""Shared fixtures: repository paths and the project's pinned metadata."""

from __future__ import annotations

import os
import sys
import threading
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator
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
