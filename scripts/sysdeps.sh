#!/usr/bin/env bash
# Install the Debian packages the tests, demo and benchmarks need, only when
# they are absent, so a second run costs nothing. Non-Debian machines: install
# the equivalents by hand (libzmq headers + pkg-config, a Java 17+ runtime,
# OpenSSL 3 and libsodium headers with their static libraries).
#
# With `--makefile FILE` it also writes the build settings that follow from what
# is installed, as a make fragment the Makefile includes:
#
#   the system has               the build                            a first build
#   OpenSSL 3 + libsodium (.a)   links both statically from the       about 4 minutes less
#                                system (OPENSSL_NO_VENDOR,           (no C compile of
#                                OPENSSL_STATIC, OPENSSL_LIB_DIR,     either library)
#                                SODIUM_LIB_DIR)
#   not both                     builds both from the sources inside  what release wheels do
#                                their crates (perl needed)
#
# Static either way, so the wheel depends on no shared library outside glibc.
set -euo pipefail

makefile=""
if [ "${1:-}" = "--makefile" ]; then makefile="${2:?--makefile needs a file}"; fi

need=()
have_pkgconfig() { command -v pkg-config >/dev/null && pkg-config --exists "$@"; }
have_pkgconfig libzmq || need+=(libzmq3-dev)
have_pkgconfig 'openssl >= 3.0' || need+=(libssl-dev)
have_pkgconfig libsodium || need+=(libsodium-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v java >/dev/null || need+=(openjdk-17-jre-headless)

if [ ${#need[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "sysdeps: installing ${need[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      "${need[@]}" >/dev/null
  elif [ -z "$makefile" ]; then
    echo "sysdeps: missing ${need[*]} and no apt-get here; install them by hand" >&2
    exit 1
  else
    echo "sysdeps: missing ${need[*]} and no apt-get here; OpenSSL and libsodium will be" \
      "built from source (install them by hand for a faster build)" >&2
  fi
fi

[ -n "$makefile" ] || exit 0
mkdir -p "$(dirname "$makefile")"
{
  echo "# Written by scripts/sysdeps.sh: how this machine builds OpenSSL and libsodium."
  sodium_dir=""
  if have_pkgconfig 'openssl >= 3.0' libsodium; then
    sodium_dir="$(pkg-config --variable=libdir libsodium)"
    ssl_dir="$(pkg-config --variable=libdir libcrypto)"
    [ -f "$sodium_dir/libsodium.a" ] && [ -f "$ssl_dir/libcrypto.a" ] || sodium_dir=""
  fi
  if [ -n "$sodium_dir" ]; then
    # The directories, not pkg-config: the pkg-config crate never links statically from
    # the system's own library directory.
    echo "export OPENSSL_NO_VENDOR := 1"
    echo "export OPENSSL_STATIC := 1"
    echo "export OPENSSL_LIB_DIR := $ssl_dir"
    echo "export OPENSSL_INCLUDE_DIR := $(pkg-config --variable=includedir openssl)"
    echo "export SODIUM_LIB_DIR := $sodium_dir"
    echo "CRYPTO := system OpenSSL $(pkg-config --modversion openssl) and libsodium" \
      "$(pkg-config --modversion libsodium), linked statically"
  else
    # Building OpenSSL from source needs perl with its core modules.
    perl -MIPC::Cmd -e 1 2>/dev/null || echo "sysdeps: OpenSSL's source build needs perl" >&2
    echo "CRYPTO := OpenSSL and libsodium built from source (slow: install libssl-dev and" \
      "libsodium-dev for a faster build)"
  fi
} >"$makefile.tmp"
mv "$makefile.tmp" "$makefile"
