# dafka: the two commands are `make demo` and `make test`. Everything else is a
# building block of those two, or `make bench` / `make fuzz` for maintainers.
#
# Every target bootstraps what it needs: a .venv with the pinned Python tools
# (requirements-dev.txt), the Debian packages a test needs (only if absent),
# and the extension module built in release mode and installed from its wheel.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(abspath $(VENV))/bin/python
CARGO ?= cargo
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)
DIST := dist
FUZZ_SECONDS ?= 30

# Spark must stay on loopback and run its workers with the venv's interpreter.
export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(PY)
export PYSPARK_DRIVER_PYTHON := $(PY)

.PHONY: help demo test bench bench-zmtp bench-store bench-python bench-security bench-spark bench-zre bench-dafka bench-groups soak fuzz fuzz-build venv sysdeps wheel develop lint-rust test-rust test-python clean \
  wheel-aarch64 wheel-x86_64 test-aarch64 test-x86_64 test-sdist check-macos

help:
	@echo "make demo   - run the main job end to end on embedded defaults"
	@echo "make test   - run every test (fmt, clippy, cargo test, fuzz build, wheel, ruff, pytest)"
	@echo "make bench  - run the side-by-side benchmarks and rewrite BENCHMARKS.md"
	@echo "make bench-zmtp - ZMTP from Rust against libzmq, zmq.rs and raw TCP"
	@echo "make bench-store - the storage engine against raw write+fdatasync (BENCHMARKS.md, Storage)"
	@echo "make bench-python - only the Python-level pairing (dafka.zmtp against pyzmq)"
	@echo "make bench-spark - rows/s into Spark: format(\"dafka\") vs createDataFrame, local[2] and a standalone cluster"
	@echo "make bench-zre - ZRE: start to ENTER, 100 nodes in one process, WHISPER/SHOUT vs pyre"
	@echo "make bench-groups - consumer groups: three members vs one consumer, take-over after SIGKILL, commit cost"
	@echo "make bench-dafka - Dafka end to end: producer -> store (fdatasync) -> consumer, Rust and Python"
	@echo "make soak   - SOAK_SECONDS (1800) of produce -> 2 stores -> consumers + Spark, a fault a minute (root)"
	@echo "make fuzz   - run each fuzz target for FUZZ_SECONDS (needs cargo-fuzz and nightly)"
	@echo "make wheel-aarch64 / wheel-x86_64 - a release wheel (manylinux_2_28, vendored crypto), checked by auditwheel"
	@echo "make test-aarch64 - the aarch64 wheel's smoke tests in Debian's arm64 Python under qemu (slow)"
	@echo "make test-x86_64 - the x86_64 release wheel's smoke tests in Debian's Python 3.11 and 3.15"
	@echo "make test-sdist - a wheel built from the sdist in a clean venv passes the smoke tests (slow)"
	@echo "make check-macos - cargo check of every crate for macOS, arm64 and x86_64"

# --- bootstrap -------------------------------------------------------------

$(VENV)/.stamp: requirements-dev.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

venv: $(VENV)/.stamp

# Debian packages, installed only when absent: libzmq for the Rust benchmark
# and interop tests against the real libzmq, a JRE for Spark, OpenSSL 3 and
# libsodium to link (so the first build does not compile them from source).
# The fragment says how this machine builds them (scripts/sysdeps.sh); make
# writes it before anything else, then reads it.
SYSDEPS_MK := $(TARGET_DIR)/sysdeps.mk
ifneq ($(filter-out help clean,$(or $(MAKECMDGOALS),help)),)
include $(SYSDEPS_MK)
endif
$(SYSDEPS_MK): scripts/sysdeps.sh
	@bash scripts/sysdeps.sh --makefile $@

sysdeps:
	@bash scripts/sysdeps.sh

# --- build -------------------------------------------------------------------

# One release build of the extension: the wheel users install. It is installed
# into .venv, and tests/test_wheel.py installs the same file into a fresh venv.
# Built and installed again only when a file it is made of changed (a second
# `make demo` starts the demo at once); cargo prints each crate as it compiles.
WHEEL_INPUTS := $(shell find crates python -type f -not -path '*/__pycache__/*' 2>/dev/null) \
  Cargo.toml Cargo.lock pyproject.toml README.md
$(DIST)/.installed: $(VENV)/.stamp $(WHEEL_INPUTS)
	@echo "wheel: release build of the extension with $(CRYPTO)"
	@echo "wheel: a first build takes a few minutes; later ones rebuild only what changed"
	rm -rf $(DIST)
	$(PY) -m maturin build --release --locked --out $(DIST)
	$(PY) -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps $(DIST)/dafka-*.whl
	@touch $@

wheel: $(DIST)/.installed

develop: wheel

# --- the two commands ------------------------------------------------------

demo: venv sysdeps wheel
	$(PY) spark/demo.py

test: venv sysdeps lint-rust test-rust fuzz-build wheel test-python
	@echo "make test: all green"

lint-rust:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

test-rust:
	$(CARGO) test --workspace --locked

test-python:
	$(PY) -m ruff check python tests spark benches scripts
	$(PY) -m ruff format --check python tests spark benches scripts
	DAFKA_WHEEL_DIR=$(abspath $(DIST)) $(PY) -m pytest

# --- maintainers ---------------------------------------------------------------

fuzz-build:
	@# Shares the main target directory, so the proto crate and its dependencies
	@# are not built twice.
	$(CARGO) build --manifest-path fuzz/Cargo.toml --locked --target-dir $(TARGET_DIR)
	@# Replay every seed input once: each target asserts its invariants on them.
	@for t in greeting frame_decoder command connection dafka_message dafka_meta store_open zre_message zre_beacon \
	    plain_server plain_client curve_server curve_client; do \
	  $(TARGET_DIR)/debug/$$t fuzz/corpus/$$t/* >$(TARGET_DIR)/fuzz-$$t.log 2>&1 \
	    || { cat $(TARGET_DIR)/fuzz-$$t.log; echo "fuzz $$t: a seed input failed"; exit 1; }; \
	  echo "fuzz $$t: $$(ls fuzz/corpus/$$t | wc -l) seed inputs replayed, invariants held"; done

fuzz:
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	@# New inputs go to a scratch corpus under the target dir; the checked-in
	@# seeds in fuzz/corpus/ are read, never rewritten (minimise before adding).
	cd fuzz && for t in $$($(CARGO) fuzz list); do \
	  mkdir -p $(abspath $(TARGET_DIR))/fuzz-corpus/$$t && \
	  $(CARGO) +nightly fuzz run $$t $(abspath $(TARGET_DIR))/fuzz-corpus/$$t corpus/$$t \
	    -- -max_total_time=$(FUZZ_SECONDS) || exit 1; done

# Every layer's benchmark, each rewriting its own part of BENCHMARKS.md.
bench: bench-zmtp bench-python bench-store bench-dafka bench-security bench-spark bench-zre bench-groups

# ZMTP from Rust: dafka against libzmq, zmq.rs and raw TCP (rewrites BENCHMARKS.md,
# keeping the sections the other targets own).
bench-zmtp: venv sysdeps
	$(CARGO) build --release --locked -p dafka-benches
	$(PY) benches/run.py --bin $(TARGET_DIR)/release/dafka-bench

# The Python-level pairing alone: dafka.zmtp against pyzmq through their Python
# APIs (the release wheel installed in .venv), rewriting its section of BENCHMARKS.md.
bench-python: venv wheel
	$(PY) benches/run.py --python

# CURVE against NULL and libzmq CURVE: PUSH/PULL 128 B and 64 KiB, handshakes/s
# (rewrites its section of BENCHMARKS.md).
bench-security: venv sysdeps
	$(CARGO) build --release --locked -p dafka-benches
	$(PY) benches/security.py --bin $(TARGET_DIR)/release/dafka-bench

# Spark: format("dafka") against createDataFrame(pyarrow.Table) and (list of rows) for the
# same 1,000,000 records of 100 B, and a streaming query's rows/s and latency, in local[2];
# then on a standalone cluster (master + 2 workers of 1 core, started and stopped by the
# script): cold and warm reads of new applications, streaming, task start to first batch.
bench-spark: venv sysdeps wheel
	$(PY) benches/spark.py
	$(PY) benches/spark_cluster.py

# ZRE: start to ENTER, nodes in one process, WHISPER/SHOUT against pyre (its own
# section of BENCHMARKS.md; raises RLIMIT_NOFILE for the 100-node mesh).
bench-zre: venv wheel
	$(CARGO) build --release --locked -p dafka-zre --example zre_mesh
	$(PY) benches/zre.py --bin $(TARGET_DIR)/release/examples/zre_mesh

# Consumer groups: a group of three against one consumer alone, a member's take-over after
# a SIGKILL, the cost of a commit (issue 26).
bench-groups: venv wheel
	$(PY) benches/groups.py

# The storage engine: 3 s per case, then a memory run of STORE_MEMORY_SECONDS (10 min).
STORE_MEMORY_SECONDS ?= 600
bench-store: venv
	$(CARGO) build --release --locked -p dafka-benches
	$(PY) benches/store.py --bin $(TARGET_DIR)/release/dafka-bench \
	  --memory-seconds $(STORE_MEMORY_SECONDS)

# Dafka end to end (three processes: producer -> store with sync="always" -> consumer, and the
# Python cases again in one process, a LocalCluster), from
# Rust and through the Python API, then a memory run of DAFKA_MEMORY_SECONDS (10 min).
DAFKA_MEMORY_SECONDS ?= 600
bench-dafka: venv wheel
	$(CARGO) build --release --locked -p dafka-benches
	$(PY) benches/dafka_e2e.py --bin $(TARGET_DIR)/release/dafka-bench \
	  --memory-seconds $(DAFKA_MEMORY_SECONDS)

# The soak (issue 21), not part of `make test`: SOAK_SECONDS of produce -> two stores ->
# consumers and a Spark streaming query, with a fault every minute (store SIGKILL, link down
# in a network namespace, disk full, a flipped byte in a sealed segment). Needs root: network
# namespaces, iptables NAT and loop-mounted ext4 images, all made and removed by the script.
# Rewrites the Soak section of BENCHMARKS.md; fails if an acknowledged record was lost or a
# process it did not kill died. `make soak SOAK_SECONDS=300` runs a short one.
SOAK_SECONDS ?= 1800
soak: venv sysdeps wheel
	@command -v iptables >/dev/null || { echo "soak: installing iptables"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iptables >/dev/null; }
	$(PY) benches/soak.py --seconds $(SOAK_SECONDS)

# --- release wheels (issue 27; none of this is in `make test`) -------------------------

# The wheels .github/workflows/wheels.yml builds for Linux, built here for either architecture
# (zig as cross compiler and linker, OpenSSL and libsodium from source): scripts/release_wheel.sh.
# Then installed into Debian's CPython of that architecture (unpacked under the target dir by
# scripts/debian_python.sh; arm64 runs under qemu-user) and the tests marked `smoke` run there
# (scripts/wheel_smoke.sh). Each entry is SUITE:VERSION; QEMU_CPUS are the emulated processors
# aarch64 runs on: `max` (every extension qemu has: LSE atomics, SVE2, SHA-3, ...) and the
# Cortex-A72 (ARMv8.0-A: Raspberry Pi 4, AWS Graviton 1), so both sides of each run-time choice
# of SIMD code are taken.
RELEASE_WHEELS := $(TARGET_DIR)/release-wheels
DEBIAN_PYTHONS := $(TARGET_DIR)/debian-python
AARCH64_PYTHONS ?= bookworm:3.11
X86_64_PYTHONS ?= bookworm:3.11 sid:3.15
QEMU_CPUS ?= max cortex-a72

$(RELEASE_WHEELS)/%/.built: $(VENV)/.stamp $(WHEEL_INPUTS) requirements-release.txt scripts/release_wheel.sh
	bash scripts/release_wheel.sh $* $(@D)
	@touch $@

wheel-aarch64: $(RELEASE_WHEELS)/aarch64/.built
wheel-x86_64: $(RELEASE_WHEELS)/x86_64/.built

test-aarch64: wheel-aarch64
	@for spec in $(AARCH64_PYTHONS); do \
	  dir=$(DEBIAN_PYTHONS)/arm64-$${spec/:/-}; \
	  bash scripts/debian_python.sh arm64 $${spec%%:*} $${spec##*:} $$dir; \
	  for cpu in $(QEMU_CPUS); do \
	    echo "test-aarch64: qemu-aarch64 -cpu $$cpu"; \
	    QEMU_CPU=$$cpu bash scripts/wheel_smoke.sh $(RELEASE_WHEELS)/aarch64/dafka-*.whl $$dir/python; \
	  done; done
	@echo "make test-aarch64: all green"

test-x86_64: wheel-x86_64
	@for spec in $(X86_64_PYTHONS); do \
	  dir=$(DEBIAN_PYTHONS)/amd64-$${spec/:/-}; \
	  bash scripts/debian_python.sh amd64 $${spec%%:*} $${spec##*:} $$dir; \
	  bash scripts/wheel_smoke.sh $(RELEASE_WHEELS)/x86_64/dafka-*.whl $$dir/python; \
	done
	@echo "make test-x86_64: all green"

# The sdist: `pip wheel` builds it from scratch in a clean venv (no make settings, its own cargo
# target directory: slow, about as long as a first `make wheel` with OpenSSL and libsodium from
# source) and the wheel passes the smoke tests. tests/test_sdist.py checks in seconds, as part
# of `make test`, that such a build resolves to the pinned crates.
test-sdist: venv
	bash scripts/sdist_wheel.sh $(TARGET_DIR)/sdist-test
	@echo "make test-sdist: all green"

# macOS, checked from here: cargo clippy -D warnings of every crate and its tests for both Mac
# targets, OpenSSL and libsodium built for macOS by zig; nothing linked or run (what only a macOS
# runner checks: docs/install.md).
check-macos: venv
	bash scripts/check_macos.sh $(TARGET_DIR)/zig-macos

clean:
	$(CARGO) clean
	rm -rf $(VENV) $(DIST) .pytest_cache .ruff_cache .mypy_cache
