"""The pip-installed wheel is how users get dafka: install it into a brand-new
venv and import it from outside the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest


def _wheel(repo: Path, tmp: Path) -> Path:
    wheel_dir = os.environ.get("DAFKA_WHEEL_DIR")
    if wheel_dir:
        found = sorted(Path(wheel_dir).glob("dafka-*.whl"))
        if found:
            return found[-1]
    out = tmp / "dist"
    subprocess.run(
        [sys.executable, "-m", "maturin", "build", "--release", "--quiet", "--out", str(out)],
        cwd=repo,
        check=True,
        timeout=1200,
    )
    return sorted(out.glob("dafka-*.whl"))[-1]


@pytest.mark.slow
def test_wheel_installs_into_an_empty_venv(repo: Path, tmp_path: Path, cargo_version: str) -> None:
    wheel = _wheel(repo, tmp_path)
    # abi3 for CPython 3.11+ (the buffer protocol of zero-copy frames needs the
    # 3.11 stable ABI): one wheel per platform serves every later Python.
    assert "-cp311-abi3-" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert "dafka/py.typed" in names
    assert "dafka/_native.pyi" in names
    assert any(n.startswith("dafka/_native") and n.endswith(".so") for n in names), names
    # What Spark 4 imports to register the source by itself (docs/spark.md, Registration).
    assert "pyspark_dafka/__init__.py" in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "--no-index", str(wheel)],
        check=True,
        timeout=300,
    )
    # Run from an empty directory so the source tree's python/ cannot be imported.
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # pyspark_dafka imports without pyarrow and pyspark (none here), registering nothing:
    # Spark's lookup imports every pyspark_* module and gives up on all when one fails.
    code = (
        "import dafka, pyspark_dafka; print(dafka.__version__); print(dafka.__file__); "
        "print(hasattr(pyspark_dafka, 'DefaultSource'))"
    )
    out = subprocess.run(
        [str(py), "-c", code],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    version, location, registers = out.stdout.split()
    assert version == cargo_version
    assert Path(location).is_relative_to(venv), location
    assert registers == "False"
