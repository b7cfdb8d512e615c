"""`make demo` is the first thing a user runs: its three stages run and check themselves.

The demo at a twentieth of its size (DAFKA_DEMO_SCALE=0.05): the same stages, the same
checks (every reading sent counted once in its window, every partition's offsets from 0
without a gap), in its own process as `make demo` runs it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_runs_its_three_stages_and_checks_the_result(repo: Path) -> None:
    env = {**os.environ, "DAFKA_DEMO_SCALE": "0.05"}
    out = subprocess.run(
        [sys.executable, str(repo / "spark" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    for stage in ("[1/3] producers -> store", "[2/3] store -> Spark streaming", "[3/3] the result"):
        assert stage in text, text
    # Stage 1: the backlog acknowledged durable, with its rate.
    assert re.search(r"50,000 records durable in [\d.]+ s: [\d,]+ records/s", text), text
    # Stage 2: a line per micro-batch with rows, seconds, rows/s and the lag after it.
    batches = re.findall(r"^\s+\d+\s+[\d,]+\s+[\d.]+\s+[\d,]+\s+[\d,]+", text, re.MULTILINE)
    assert len(batches) >= 2, text
    # Stage 3: every partition read back whole.
    assert len(re.findall(r"partition [0-9A-F]{32}: [\d,]+ records, offsets 0\.\.", text)) == 4
    assert "demo OK" in text.splitlines()[-1], text
