"""Shared fixtures: repository paths and the project's pinned metadata."""

from __future__ import annotations

import os
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dafka.zmtp import Socket

REPO = Path(__file__).resolve().parent.parent

# Spark and the tests' subprocesses must stay on loopback and use this interpreter.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


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
