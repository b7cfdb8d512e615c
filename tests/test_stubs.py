"""The hand-written .pyi stubs match the compiled module (they cannot drift)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_stubtest_agrees_with_the_built_module(repo: Path) -> None:
    allowlist = repo / "tests" / "stubtest-allowlist.txt"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy.stubtest",
            "dafka",
            "--allowlist",
            str(allowlist),
            "--mypy-config-file",
            str(repo / "pyproject.toml"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=repo / "tests",
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_package_type_checks_strictly(repo: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(repo / "pyproject.toml"),
            "python/dafka",
            "python/pyspark_dafka",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=repo,
    )
    assert out.returncode == 0, out.stdout + out.stderr
