#!/usr/bin/env bash
# What a user without a fitting wheel gets: pip builds dafka from the sdist. This makes the
# sdist, then in a clean venv of the machine's python3 `pip wheel` builds it as pip would (an
# isolated build environment with maturin from PyPI, a fresh cargo target directory inside the
# unpacked sdist, OpenSSL and libsodium from source: none of make's settings), and the wheel
# it made passes the smoke tests in that venv (scripts/wheel_smoke.sh).
#
#   scripts/sdist_wheel.sh DIR
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${1:?DIR}"
rm -rf "$dir"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

.venv/bin/python -m maturin sdist --out "$dir/sdist"
sdist="$(ls "$dir"/sdist/dafka-*.tar.gz)"
python3 -m venv "$dir/venv"
"$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip

echo "sdist-wheel: building $(basename "$sdist") from scratch (minutes: OpenSSL and libsodium too)"
(
  unset OPENSSL_NO_VENDOR OPENSSL_STATIC OPENSSL_LIB_DIR OPENSSL_INCLUDE_DIR SODIUM_LIB_DIR
  unset CARGO_TARGET_DIR VIRTUAL_ENV PYTHONPATH
  cd "$dir"
  time "$dir/venv/bin/python" -m pip wheel --no-deps --disable-pip-version-check \
    --wheel-dir "$dir/wheel" "$sdist"
)
wheel="$(ls "$dir"/wheel/dafka-*.whl)"
bash scripts/wheel_smoke.sh "$wheel" "$dir/venv/bin/python"
