#!/usr/bin/env bash
# The macOS wheels' code, checked from Linux: `cargo clippy -D warnings` of every crate and its
# tests for aarch64-apple-darwin and x86_64-apple-darwin. Every cfg(target_os = ...) branch the
# macOS build takes is compiled and linted there (a Linux-only call outside
# cfg(target_os = "linux") fails to compile; code only Linux uses is a dead-code warning), and
# the build scripts build OpenSSL and libsodium from source for macOS, with zig (PyPI's ziglang)
# as the C compiler: it carries macOS's C headers, so no SDK is needed (but for one OpenSSL
# source, below). Nothing is linked or run: what only a macOS runner shows is in
# docs/install.md.
#
#   scripts/check_macos.sh ZIGDIR
set -euo pipefail
cd "$(dirname "$0")/.."

zigdir="${1:?ZIGDIR (for the compiler wrappers)}"
py="$PWD/.venv/bin/python"
"$py" -m pip install --quiet --disable-pip-version-check -r requirements-release.txt
# Release builds vendor OpenSSL and libsodium (scripts/sysdeps.sh's settings are Linux's).
unset OPENSSL_NO_VENDOR OPENSSL_STATIC OPENSSL_LIB_DIR OPENSSL_INCLUDE_DIR SODIUM_LIB_DIR
# The zmq crate (a dev-dependency of the interop tests) asks pkg-config for libzmq: allowed to
# answer with this machine's, since nothing is linked.
export PKG_CONFIG_ALLOW_CROSS=1
mkdir -p "$zigdir"

for arch in aarch64 x86_64; do
  target="$arch-apple-darwin"
  rustup target list --installed | grep -qx "$target" || rustup target add "$target"
  # cc passes Apple's own target flags (-arch, --target=arm64-apple-macosx...): zig takes its
  # target as -target ARCH-macos, so the wrapper drops those.
  cat >"$zigdir/cc-$target" <<EOF
#!/usr/bin/env bash
args=()
skip=0
for a in "\$@"; do
  if [ \$skip = 1 ]; then skip=0; continue; fi
  case "\$a" in
    -arch) skip=1 ;;
    --target=* | -mmacosx-version-min=* | -mmacos-version-min=*) ;;
    *) args+=("\$a") ;;
  esac
done
exec "$py" -m ziglang cc -target $arch-macos.11.0 "\${args[@]}"
EOF
  # And its archiver and ranlib: binutils' take no Mach-O archive.
  for tool in ar ranlib; do
    printf '#!/bin/sh\nexec "%s" -m ziglang %s "$@"\n' "$py" "$tool" >"$zigdir/$tool"
  done
  chmod +x "$zigdir/cc-$target" "$zigdir/ar" "$zigdir/ranlib"
  var="${target//-/_}"
  echo "check-macos: cargo clippy --target $target"
  # OpenSSL's random source on macOS is CommonCrypto's, whose header only the SDK has: this
  # build leaves it out (OPENSSL_NO_APPLE_CRYPTO_RANDOM), the release build on the runner keeps it.
  env "CC_$var=$zigdir/cc-$target" "AR_$var=$zigdir/ar" "RANLIB_$var=$zigdir/ranlib" \
    "CFLAGS_$var=-DOPENSSL_NO_APPLE_CRYPTO_RANDOM" \
    cargo clippy --workspace --exclude dafka-benches --all-targets --locked --target "$target" \
    -- -D warnings
done
echo "check-macos: every crate and its tests compile for macOS with no warning"
