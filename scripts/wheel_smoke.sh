#!/usr/bin/env bash
# Install a wheel into another Python and run the smoke subset of the tests there.
#
#   scripts/wheel_smoke.sh WHEEL PYTHON
#
# PYTHON is a command that runs the interpreter: a DIR/python of scripts/debian_python.sh (a
# Debian CPython of another version or architecture) or a venv's. This venv's pip installs the
# wheel with the pinned pyarrow, pyzmq, pytest and pytest-timeout of requirements-dev.txt into
# smoke-site/ beside PYTHON (first on that interpreter's path), choosing their wheels for its
# version, architecture and glibc, as pip on that machine would. Then that interpreter runs
# the tests marked `smoke` from the source tree's tests/ (pyproject.toml's pytest settings):
# import and version, ZMTP PUSH/PULL with libzmq (pyzmq's wheel), CURVE and PLAIN with
# libzmq, a LocalCluster round trip into Arrow, a flush acknowledged by a store that
# fdatasyncs, a ZRE pair on loopback (beacons to 127.255.255.255 only).
set -euo pipefail
cd "$(dirname "$0")/.."

wheel="$(realpath "${1:?WHEEL}")"
python="${2:?PYTHON}"
site="$(cd "$(dirname "$python")" && pwd)/smoke-site"
pip=(.venv/bin/python -m pip)

read -r version machine glibc < <("$python" -c '
import platform, sys
print("%d.%d" % sys.version_info[:2], platform.machine(), platform.libc_ver()[1])')
# manylinux_2_17 up to this glibc: every manylinux wheel this Python's pip would take, and
# linux_ARCH, the tag of a wheel built on that machine (from the sdist).
platforms=(--platform "linux_$machine")
for minor in $(seq 17 "${glibc#2.}"); do platforms+=(--platform "manylinux_2_${minor}_$machine"); done
pins=()
for name in pyarrow pyzmq pytest pytest-timeout; do
  pins+=("$(grep -E "^$name==" requirements-dev.txt)")
done

echo "smoke: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) on Python $version, $machine, glibc $glibc"
rm -rf "$site"
"${pip[@]}" install --quiet --disable-pip-version-check --target "$site" \
  --only-binary=:all: --implementation cp --python-version "$version" "${platforms[@]}" \
  "$wheel" "${pins[@]}"
export PYTHONPATH="$site"
"$python" - "$site" <<'PY'
import platform
import struct
import sys

import dafka
import pyarrow
import zmq

assert dafka.__file__.startswith(sys.argv[1]), dafka.__file__
print("smoke: dafka", dafka.__version__, "from", dafka.__file__)
print("smoke: pyarrow", pyarrow.__version__, "pyzmq", zmq.__version__, "libzmq", zmq.zmq_version(),
      "with CURVE" if zmq.has("curve") else "without CURVE")
if platform.machine() == "aarch64":
    # What the (emulated) processor offers, from the auxiliary vector: the run-time choices of
    # SIMD code in OpenSSL, libsodium and crc32c follow these bits.
    auxv = open("/proc/self/auxv", "rb").read()
    words = struct.unpack(f"{len(auxv) // 8}Q", auxv)
    hwcap = dict(zip(words[::2], words[1::2])).get(16, 0)  # AT_HWCAP
    bits = {1: "asimd", 3: "aes", 4: "pmull", 6: "sha2", 7: "crc32", 8: "lse-atomics",
            17: "sha3", 21: "sha512", 22: "sve"}
    print("smoke: aarch64 hwcap:", " ".join(n for b, n in bits.items() if hwcap >> b & 1))
PY
files=$(grep -l 'pytest.mark.smoke' tests/test_*.py)
# No bytecode or cache written into the source tree by another interpreter.
PYTHONDONTWRITEBYTECODE=1 "$python" -m pytest -p no:cacheprovider -m smoke -q $files
