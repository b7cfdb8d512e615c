"""The pip-installed wheel is how users get dafka: install it into a brand-new
venv and import it from outside the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest


@pytest.mark.slow
def test_wheel_installs_into_an_empty_venv(wheel: Path, tmp_path: Path, cargo_version: str) -> None:
    # abi3 for CPython 3.11+ (the buffer protocol of zero-copy frames needs the
    # 3.11 stable ABI): one wheel per platform serves every later Python.
    assert "-cp311-abi3-" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert "dafka/py.typed" in names
    assert "dafka/_native.pyi" in names
    native = [n for n in names if n.startswith("dafka/_native") and n.endswith(".so")]
    assert native, names
    # Self-contained: OpenSSL and libsodium are linked statically (built from source, or the
    # system's static libraries where `make` found them), so the extension needs nothing
    # outside glibc and libgcc, and no library is bundled beside it.
    assert not [n for n in names if ".libs/" in n], names
    with zipfile.ZipFile(wheel) as zf:
        (tmp_path / "native.so").write_bytes(zf.read(native[0]))
    dynamic = subprocess.run(
        ["readelf", "-d", str(tmp_path / "native.so")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    needed = {line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line}
    assert needed <= {"libc.so.6", "libm.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2"}, needed
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
