"""Nodes left open when the interpreter exits (issue 21, item 7d): no Rust panic at exit.

A Tower and a Producer never closed are dropped while Python finalizes; their runtime
threads then log their shutdown, and handing that to Python `logging` once the interpreter
was no longer initialized panicked ("The Python interpreter is not initialized") in every
run. Each script runs several times: the panic depended on thread timing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

RUNS = 5

LEFT_OPEN = {
    "tower_and_producer": """
        import dafka
        t = dafka.Tower("tcp://127.0.0.1:0")
        p = dafka.Producer("exit-topic", t.towers)
        p.send(b"x")
    """,
    # Everything Rust logs reaches Python's logging, so every shutdown line is forwarded.
    "with_debug_logging": """
        import logging
        logging.basicConfig(level=logging.DEBUG)
        import dafka
        t = dafka.Tower("tcp://127.0.0.1:0")
        p = dafka.Producer("exit-topic", t.towers)
        p.send(b"x")
        c = dafka.Consumer("exit-topic", t.towers)
    """,
}


@pytest.mark.parametrize("script", sorted(LEFT_OPEN))
def test_exit_without_close_does_not_panic(script: str) -> None:
    code = textwrap.dedent(LEFT_OPEN[script])
    for run in range(RUNS):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, (run, done.stderr)
        assert "panic" not in done.stderr, (run, done.stderr)
