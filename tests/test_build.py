"""What `make` does before the demo and the tests: a second `make demo` starts the demo at once
(nothing rebuilt or reinstalled), and the first one compiles neither OpenSSL nor libsodium
where the system has them."""

from __future__ import annotations

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
