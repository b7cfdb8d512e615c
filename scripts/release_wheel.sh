#!/usr/bin/env bash
# A release wheel for Linux ARCH (aarch64 or x86_64) built on this machine, whatever its own
# architecture, the way .github/workflows/wheels.yml's linux job builds it: abi3, manylinux_2_28,
# OpenSSL and libsodium built from the sources inside their crates and linked statically.
#
#   scripts/release_wheel.sh ARCH OUTDIR
#
# zig (PyPI's ziglang, through maturin --zig) is the C compiler and linker: it targets ARCH and
# glibc 2.28 from any host, so neither a cross gcc nor a manylinux container is needed. Then
# auditwheel must find the wheel consistent with manylinux_2_28_ARCH with no shared library
# outside the manylinux policy (so nothing to bundle), and the extension must need no library
# but glibc's and libgcc_s.
set -euo pipefail
cd "$(dirname "$0")/.."

arch="${1:?ARCH (aarch64 or x86_64)}"
out="${2:?OUTDIR}"
target="$arch-unknown-linux-gnu"
manylinux=manylinux_2_28
py=.venv/bin/python

"$py" -m pip install --quiet --disable-pip-version-check -r requirements-release.txt
rustup target list --installed | grep -qx "$target" || rustup target add "$target"

# Release wheels vendor OpenSSL and libsodium: drop what scripts/sysdeps.sh set for dev builds
# (the system's x86_64 static libraries), which would also be wrong for another architecture.
unset OPENSSL_NO_VENDOR OPENSSL_STATIC OPENSSL_LIB_DIR OPENSSL_INCLUDE_DIR SODIUM_LIB_DIR
# maturin finds zig as `python -m ziglang` of the first python on PATH: this venv's.
export PATH="$PWD/.venv/bin:$PATH"

rm -rf "$out"
mkdir -p "$out"
echo "release-wheel: $target, $manylinux, OpenSSL and libsodium from source (a first build takes minutes)"
"$py" -m maturin build --release --locked --zig --target "$target" --compatibility "$manylinux" \
  --out "$out"
wheel="$(ls "$out"/dafka-*.whl)"

report="$("$py" -m auditwheel show "$wheel")"
echo "$report"
report="$(tr -s '\n ' '  ' <<<"$report")" # auditwheel wraps its sentences
tag="${manylinux}_$arch"
grep -q "consistent with the following platform tag: \"$tag\"" <<<"$report" \
  || { echo "release-wheel: auditwheel does not find $(basename "$wheel") consistent with $tag" >&2; exit 1; }
if grep -q "external shared libraries are required" <<<"$report"; then
  echo "release-wheel: the wheel needs shared libraries outside the manylinux policy" >&2
  exit 1
fi
case "$(basename "$wheel")" in
  *-cp311-abi3-"$tag".whl) ;;
  *) echo "release-wheel: expected a cp311-abi3 $tag wheel, got $(basename "$wheel")" >&2; exit 1 ;;
esac
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$py" -m zipfile -e "$wheel" "$tmp"
needed="$(readelf -d "$tmp"/dafka/_native*.so | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')"
for lib in $needed; do
  case "$lib" in
    libc.so.6 | libm.so.6 | libgcc_s.so.1 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux-*) ;;
    *) echo "release-wheel: the extension needs $lib" >&2; exit 1 ;;
  esac
done
echo "release-wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB, needs: $needed"
