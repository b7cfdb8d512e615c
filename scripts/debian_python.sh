#!/usr/bin/env bash
# A Debian CPython for the wheel smoke tests, unpacked into a folder of its own: no chroot, no
# change to this machine's dpkg, its architectures or its Python.
#
#   scripts/debian_python.sh ARCH SUITE VERSION DIR      e.g. arm64 bookworm 3.11 DIR
#
# apt, with a private state and an empty package database, downloads pythonVERSION and every
# package it depends on (libc6 included) from Debian's SUITE for ARCH; each .deb is unpacked
# into DIR/root (dpkg-deb -x: no maintainer script runs). DIR/python then runs that interpreter
# with that root's own glibc and libraries:
#   amd64  through the root's dynamic loader (--library-path: the root's libraries first);
#   arm64  under qemu-aarch64-static -L DIR/root (user-mode emulation, installed when absent).
# Both run one process: a subprocess of sys.executable would not find its loader or emulator,
# so what runs there (scripts/wheel_smoke.sh) stays in one process.
#
# Idempotent: a second call with the same arguments returns at once.
set -euo pipefail

arch="${1:?ARCH (amd64 or arm64)}"
suite="${2:?SUITE (bookworm, sid, ...)}"
version="${3:?VERSION (3.11, ...)}"
dir="${4:?DIR}"

stamp="$dir/.done-$arch-$suite-$version"
[ -f "$stamp" ] && [ -x "$dir/python" ] && exit 0
rm -rf "$dir"
mkdir -p "$dir/apt/lists/partial" "$dir/apt/archives/partial" "$dir/root"
dir="$(cd "$dir" && pwd)"

need=()
command -v dpkg-deb >/dev/null || need+=(dpkg)
if [ "$arch" = arm64 ]; then command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static); fi
if [ ${#need[@]} -gt 0 ]; then
  echo "debian-python: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
echo "deb [signed-by=$keyring] http://deb.debian.org/debian $suite main" >"$dir/apt/sources.list"
touch "$dir/apt/status"
apt_opts=(
  -o "Dir::Etc::SourceList=$dir/apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
  -o "Dir::State::Lists=$dir/apt/lists" -o "Dir::State::status=$dir/apt/status"
  -o "Dir::Cache=$dir/apt" -o "Dir::Cache::archives=$dir/apt/archives"
  -o "APT::Architecture=$arch" -o "APT::Architectures::=$arch"
  -o Debug::NoLocking=1 -o Acquire::Languages=none -o APT::Install-Recommends=false
)
echo "debian-python: Python $version from Debian $suite ($arch) into $dir/root"
apt-get "${apt_opts[@]}" update -qq
# python3.X's stdlib and C modules; libstdc++ and libgcc for wheels that link them (pyarrow,
# pyzmq), which manylinux allows a wheel to expect from the system.
DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y -qq --download-only \
  "python$version" libstdc++6 libgcc-s1 >/dev/null

# Merged /usr (as Debian now installs it), so packages of either layout land in one tree.
root="$dir/root"
mkdir -p "$root/usr/bin" "$root/usr/lib" "$root/usr/lib64" "$root/usr/sbin" "$root/tmp"
for d in bin lib lib64 sbin; do ln -s "usr/$d" "$root/$d"; done
for deb in "$dir"/apt/archives/*.deb; do
  dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$root"
done
rm -rf "$dir/apt/archives" "$dir/apt/lists"

exe="$root/usr/bin/python$version"
[ -x "$exe" ] || { echo "debian-python: no $exe after unpacking" >&2; exit 1; }
case "$arch" in
  amd64)
    multiarch=x86_64-linux-gnu
    loader="$(ls "$root"/usr/lib/$multiarch/ld-linux-x86-64.so.2 "$root"/usr/lib64/ld-linux-x86-64.so.2 \
      2>/dev/null | head -1)"
    run="exec \"$loader\" --library-path \"$root/usr/lib/$multiarch\" \"$exe\" \"\$@\""
    ;;
  arm64)
    run="exec qemu-aarch64-static -L \"$root\" \"$exe\" \"\$@\""
    ;;
  *) echo "debian-python: ARCH must be amd64 or arm64, not $arch" >&2; exit 1 ;;
esac
printf '#!/bin/sh\n# Debian %s python%s (%s), unpacked by scripts/debian_python.sh\n%s\n' \
  "$suite" "$version" "$arch" "$run" >"$dir/python"
chmod +x "$dir/python"
"$dir/python" -c 'import sys, platform, ssl; print("debian-python:", sys.version.split()[0], platform.machine(), platform.libc_ver()[1] and "glibc " + platform.libc_ver()[1])'
touch "$stamp"
