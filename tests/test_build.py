"""What `make` does before the demo and the tests: a second `make demo` starts the demo at once
(nothing rebuilt or reinstalled), and the first one compiles neither OpenSSL nor libsodium
where the system has them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest


@pytest.mark.skipif(
    not os.environ.get("DAFKA_WHEEL_DIR"), reason="run by `make test`, after `make wheel`"
)
def test_the_wheel_make_built_is_up_to_date(repo: Path) -> None:
    # `make -q` runs nothing and exits 0 only when the target is up to date: the wheel the test
    # run installed stays installed until a file it is made of changes.
    out = subprocess.run(
        ["make", "-q", "wheel"], cwd=repo, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, "make would build the wheel again:\n" + out.stdout + out.stderr


def test_sysdeps_links_the_systems_crypto_when_it_is_there(repo: Path, tmp_path: Path) -> None:
    fragment = tmp_path / "sysdeps.mk"
    subprocess.run(
        ["bash", str(repo / "scripts" / "sysdeps.sh"), "--makefile", str(fragment)],
        check=True,
        timeout=600,
    )
    text = fragment.read_text()
    have = subprocess.run(
        ["pkg-config", "--exists", "openssl >= 3.0", "libsodium"], capture_output=True
    )
    if have.returncode == 0:
        for setting in ("OPENSSL_NO_VENDOR", "OPENSSL_STATIC", "OPENSSL_LIB_DIR", "SODIUM_LIB_DIR"):
            assert f"export {setting} := " in text, text
        assert "linked statically" in text
    else:
        assert "export" not in text and "built from source" in text, text


def test_the_architecture_docs_dependency_table_is_cargos(repo: Path) -> None:
    """docs/architecture.md's crate graph, as a table, is what Cargo.toml files say."""
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    packages = json.loads(out)["packages"]
    ours = {p["name"] for p in packages}
    left_out = {"dafka-testkit", "dafka-benches"}
    cargo = {
        p["name"]: sorted(
            {d["name"] for d in p["dependencies"] if d["name"] in ours and d["kind"] is None}
        )
        for p in packages
        if p["name"] not in left_out
    }
    text = (repo / "docs" / "architecture.md").read_text()
    table = text.split("<!-- crate-dependencies -->")[1].split("<!-- /crate-dependencies -->")[0]
    docs = {}
    for line in table.strip().splitlines()[2:]:
        crate, deps = (cell.strip() for cell in line.strip().strip("|").split("|"))
        docs[crate.strip("`")] = sorted(d.strip().strip("`") for d in deps.split(",") if d.strip())
    assert docs == cargo
