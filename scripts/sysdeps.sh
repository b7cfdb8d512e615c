#!/usr/bin/env bash
# Install the Debian packages the tests, demo and benchmarks need, only when
# they are absent, so a second run costs nothing. Non-Debian machines: install
# the equivalents by hand (libzmq headers + pkg-config, a Java 17+ runtime,
# perl with its core modules for the OpenSSL build).
set -euo pipefail

need=()
have_pkgconfig_zmq() { command -v pkg-config >/dev/null && pkg-config --exists libzmq; }
have_pkgconfig_zmq || need+=(libzmq3-dev pkg-config)
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
# openssl-sys builds OpenSSL from source (feature `vendored`): perl with its core modules.
perl -MIPC::Cmd -e 1 2>/dev/null || need+=(perl)

[ ${#need[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null; then
  echo "sysdeps: missing ${need[*]} and no apt-get here; install them by hand" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "sysdeps: installing ${need[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
