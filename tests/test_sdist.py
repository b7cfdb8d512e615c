"""The sdist: what pip builds a wheel from where no wheel fits. Here only what a build from it
needs is checked (seconds); `make test-sdist` builds and tests a wheel from it in a clean venv,
OpenSSL and libsodium included (minutes)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest


def _locked(lock: Path) -> dict[str, str]:
    return {
        f"{p['name']} {p['version']}": p.get("source", "path")
        for p in tomllib.loads(lock.read_text())["package"]
    }


@pytest.mark.slow
def test_the_sdist_resolves_to_the_pinned_versions(repo: Path, tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "maturin", "sdist", "--out", str(tmp_path)],
        cwd=repo,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (sdist,) = tmp_path.glob("dafka-*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    (root,) = (p for p in tmp_path.iterdir() if p.is_dir())
    for needed in ("pyproject.toml", "Cargo.lock", "README.md", "python/dafka/py.typed"):
        assert (root / needed).is_file(), needed
    # pip builds the sdist with its pyproject.toml: `locked = true` there makes that build fail
    # (the sdist's workspace leaves benches/ out, so its Cargo.lock has entries to drop).
    with (root / "pyproject.toml").open("rb") as f:
        assert not tomllib.load(f)["tool"]["maturin"].get("locked"), "see pyproject.toml"
    pinned = _locked(repo / "Cargo.lock")
    # What cargo resolves at the start of that build (offline: every crate it names is one
    # the pinned lockfile holds, so the registry cache of `make test`'s builds has it).
    subprocess.run(
        ["cargo", "metadata", "--offline", "--format-version", "1"],
        cwd=root,
        check=True,
        capture_output=True,
        timeout=300,
    )
    resolved = _locked(root / "Cargo.lock")
    assert resolved.keys() <= pinned.keys(), sorted(resolved.keys() - pinned.keys())
    # Only benches/ and what it alone used (zeromq, the zmq.rs peer) are gone.
    assert {"dafka-benches 0.1.0", "zeromq 0.7.0"} <= pinned.keys() - resolved.keys()
