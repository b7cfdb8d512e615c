#!/usr/bin/env python3
"""Side-by-side benchmarks of dafka's ZMTP sockets against libzmq, zmq.rs and raw TCP.

Runs `dafka-bench` (built beforehand: `cargo build --release -p dafka-benches`, which
`make bench` does) as two processes per measurement over loopback TCP, interleaves every
(backend, test, size) pairing so machine noise hits all backends alike, repeats each one
and keeps the median, then rewrites BENCHMARKS.md and the plots under docs/bench/.

Needs python3 and matplotlib only. Every child process is bounded by its own --timeout and,
as a backstop, killed by this script if it outlives that.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
# Free ports outside the ephemeral range (see tests/ports.py), re-exported to the other benches.
from ports import free_tcp_port as free_port
from ports import free_udp_port  # noqa: F401

REPO = Path(__file__).resolve().parent.parent

# Every backend the report knows about, in table order. Ours first.
ALL_BACKENDS = ["dafka", "libzmq", "zmqrs", "raw"]
PEERS = ["libzmq", "zmqrs"]
LABELS = {
    "dafka": "dafka (ours)",
    "libzmq": "libzmq",
    "zmqrs": "zmq.rs",
    "raw": "raw TCP",
}
SIZES = [16, 128, 1024, 8192, 262144]
LATENCY_SIZE = 64
TESTS = ["pushpull", "reqrep"]

# Why a backend can be missing from a build.
UNAVAILABLE_NOTES = {
    "dafka": "not built yet: the `dafka` backend is added once `dafka_zmtp::Socket` "
    "(branch `driver`) does PUSH/PULL and REQ/REP over tcp",
}
# Peers we would like to compare with but cannot build here.
NOT_PACKAGED = [
    "omq: not published on crates.io, so it cannot be built here and is not compared",
]


def human_size(n: int) -> str:
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} B"


def parse_size(tok: str) -> int | None:
    m = re.fullmatch(r"(\d+)\s*(k|kib|kb)?", tok.strip().lower())
    if not m:
        return None
    return int(m.group(1)) * (1024 if m.group(2) else 1)


# --------------------------------------------------------------------------- running


@dataclass
class Pair:
    """The result of one two-process run."""

    ok: bool
    measured: dict = field(default_factory=dict)  # JSON of the measuring side
    other: dict = field(default_factory=dict)  # JSON of the other side
    error: str = ""


def parse_json_line(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return {}


def run_pair(
    binary: str,
    backend: str,
    test: str,
    size: int,
    count: int,
    warmup: int,
    timeout: float,
    workers: int = 0,
) -> Pair:
    """Starts the binding side, then the connecting side. The side that does not measure
    gets --hold: it keeps its socket open until this script closes its stdin, which happens
    once the measuring side has exited."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    binder, connector = ("pull", "push") if test == "pushpull" else ("rep", "req")
    measuring_role = "pull" if test == "pushpull" else "req"

    other_role = connector if measuring_role == binder else binder

    def cmd(role: str) -> list[str]:
        args = [
            binary,
            role,
            "--impl",
            backend,
            "--endpoint",
            endpoint,
            "--size",
            str(size),
            "--count",
            str(count),
            "--warmup",
            str(warmup),
            "--timeout",
            f"{timeout:g}",
            "--workers",
            str(workers),
        ]
        return args + (["--hold"] if role == other_role else [])

    return run_processes(
        [(role, cmd(role)) for role in (binder, connector)],
        measuring_role,
        other_role,
        timeout + 5,
    )


def run_processes(
    starts: list[tuple[str, list[str]]],
    measuring_role: str,
    other_role: str,
    timeout: float,
    settle: float = 0.0,
) -> Pair:
    """Starts one process per (role, command), in order (`settle` seconds after the first,
    so it is bound before the next connects), waits up to `timeout` for the measuring side,
    then for the other side (released from its --hold), and reads one JSON line from each."""
    procs = {}
    try:
        for i, (role, command) in enumerate(starts):
            procs[role] = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            if i == 0 and settle:
                time.sleep(settle)
        m_out, m_err = communicate(procs[measuring_role], timeout)
        # The measuring side is done: release the other side's --hold.
        o_out, o_err = communicate(procs[other_role], 15)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    measured, other = parse_json_line(m_out), parse_json_line(o_out)
    ok = bool(measured.get("ok")) and bool(other.get("ok"))
    error = "; ".join(
        f"{role}: {js.get('error') or err.strip()[-200:] or 'no output'}"
        for role, js, err in ((measuring_role, measured, m_err), (other_role, other, o_err))
        if not js.get("ok")
    )
    return Pair(ok, measured, other, error)


def communicate(p: subprocess.Popen, timeout: float) -> tuple[str, str]:
    try:
        return p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return out, err + "\n(killed by run.py after its timeout)"


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Case:
    backend: str
    test: str
    size: int


@dataclass
class Settings:
    target_s: float  # wanted measured duration of one run
    reps: int
    timeout_s: float
    workers: int  # tokio worker threads for the async backends; 0 = current-thread runtime


def initial_count(test: str, size: int, target_s: float) -> int:
    """A deliberately small first guess; the calibration run replaces it."""
    if test == "reqrep":
        return 2000
    guess_rate = min(5e6, 1.5e9 / size)
    return max(1000, int(guess_rate * target_s * 0.15))


def count_for(test: str, pair: Pair, target_s: float) -> int:
    if test == "pushpull":
        rate = pair.measured.get("msgs_per_s") or 0
        return int(min(50_000_000, max(1000, rate * target_s)))
    # From the median round trip: one stall in a short calibration run would skew the mean.
    p50 = pair.measured.get("p50_us") or 0
    rate = 1e6 / p50 if p50 > 0 else 0
    # At least 20k samples so p99 rests on 200 of them even if calibration hit a noisy moment.
    return int(min(300_000, max(20_000, rate * target_s)))


def warmup_for(count: int) -> int:
    return max(100, count // 20)


# --------------------------------------------------------------------------- machine


# Sections of BENCHMARKS.md owned by other commands, by their markers: benches/store.py
# (`make bench-store`) writes "storage", `run.py --python` (`make bench-python`) writes
# "python", benches/spark.py (`make bench-spark`) writes "spark", benches/security.py
# (`make bench-security`) writes "security", benches/zre.py (`make bench-zre`) writes "zre",
# benches/dafka_e2e.py (`make bench-dafka`) writes "dafka".
# Each owner replaces only its own section; the Rust run, which rewrites the whole file,
# carries every one of them over unchanged.
SECTIONS = {
    "storage": ("<!-- storage:begin (benches/store.py) -->", "<!-- storage:end -->"),
    "python": (
        "<!-- python-bench: rewritten by benches/run.py --python -->",
        "<!-- /python-bench -->",
    ),
    "security": (
        "<!-- security-bench: rewritten by benches/security.py -->",
        "<!-- /security-bench -->",
    ),
    "spark": ("<!-- spark:begin (benches/spark.py) -->", "<!-- spark:end -->"),
    "spark_cluster": (
        "<!-- spark-cluster:begin (benches/spark_cluster.py) -->",
        "<!-- spark-cluster:end -->",
    ),
    "zre": ("<!-- zre-bench:begin (benches/zre.py) -->", "<!-- zre-bench:end -->"),
    "dafka": ("<!-- dafka-e2e:begin (benches/dafka_e2e.py) -->", "<!-- dafka-e2e:end -->"),
    "soak": ("<!-- soak:begin (benches/soak.py) -->", "<!-- soak:end -->"),
    "groups": ("<!-- groups:begin (benches/groups.py) -->", "<!-- groups:end -->"),
}


def section(text: str, name: str) -> str:
    """Section `name` of a BENCHMARKS.md text (markers included), or ""."""
    begin, end = SECTIONS[name]
    start = text.find(begin)
    stop = text.find(end, start)
    if start < 0 or stop < 0:
        return ""
    return text[start : stop + len(end)]


def splice_section(text: str, name: str, block: str) -> str:
    """`text` with section `name` replaced by `block` (markers included; appended if absent)."""
    old = section(text, name)
    if old:
        return text.replace(old, block.rstrip("\n"))
    return text.rstrip("\n") + "\n\n" + block.rstrip("\n") + "\n"


def rewrite_section(out: Path, name: str, block: str, raw: Path, data: dict) -> None:
    """Saves `data` as JSON to `raw`, and replaces section `name` of the markdown file `out`
    with `block` (what every section owner does at the end of its run)."""
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(data, indent=1))
    text = out.read_text() if out.exists() else "# Benchmarks\n"
    out.write_text(splice_section(text, name, block))
    print(f"wrote {out}")


def carry_sections(previous: str, text: str) -> str:
    """`text` with every owned section of `previous` carried over."""
    for name in SECTIONS:
        kept = section(previous, name)
        if kept:
            text = splice_section(text, name, kept)
    return text


def read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def machine_info(binary_info: dict) -> dict:
    cpu = "unknown"
    for line in read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = 0
    for line in read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    try:
        rustc = subprocess.run(
            ["rustc", "-V"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rustc = "unknown"
    lock = read(str(REPO / "Cargo.lock"))

    def crate_version(name: str) -> str:
        m = re.search(r'name = "' + re.escape(name) + r'"\nversion = "([^"]+)"', lock)
        return m.group(1) if m else "?"

    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""

    return {
        "commit": commit or "unknown",
        "cpu": cpu,
        "cores": os.cpu_count() or 0,
        "ram_gib": mem_kib / 1024 / 1024,
        "kernel": platform.release(),
        "rustc": rustc,
        "libzmq": binary_info.get("libzmq_version", "?"),
        "zmq_crate": crate_version("zmq"),
        "zeromq_crate": crate_version("zeromq"),
        "load": read("/proc/loadavg").split()[:3],
    }


# --------------------------------------------------------------------------- report


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt_rate(v: float | None) -> str:
    if v is None:
        return "—"
    if v >= 1e6:
        return f"{v / 1e6:.2f} M"
    if v >= 1e3:
        return f"{v / 1e3:.1f} k"
    return f"{v:.0f}"


def fmt_num(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def fmt_cpu_us(ns: float | None) -> str:
    return "—" if ns is None else f"{ns / 1000:.1f}"


def fmt_ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "—"
    return f"{a / b:.2f}×"


def cpu_ns_per_msg(p: Pair) -> float | None:
    a, b = p.measured.get("cpu_s"), p.other.get("cpu_s")
    n = (p.measured.get("count") or 0) + (p.measured.get("warmup") or 0)
    if a is None or b is None or n == 0:
        return None
    return (a + b) / n * 1e9


def summarize(results: dict[Case, list[Pair]]) -> dict[Case, dict]:
    out = {}
    for case, pairs in results.items():
        good = [p for p in pairs if p.ok]
        s: dict = {
            "runs": len(pairs),
            "ok_runs": len(good),
            "errors": [p.error for p in pairs if not p.ok],
        }
        # CPU seconds of both processes per message (or round trip), warm-up included, since
        # each process reports its whole CPU time. Far less sensitive to a busy machine than
        # wall-clock rates.
        s["cpu_ns_per_msg"] = median([ns for p in good if (ns := cpu_ns_per_msg(p)) is not None])
        if case.test == "pushpull":
            rates = [
                p.measured["msgs_per_s"] for p in good if p.measured.get("msgs_per_s") is not None
            ]
            s["msgs_per_s"] = median(rates)
            # Half the min-max range over the repetitions, relative to the median.
            s["spread"] = (
                (max(rates) - min(rates)) / 2 / s["msgs_per_s"]
                if len(rates) > 1 and s["msgs_per_s"]
                else None
            )
            s["mb_per_s"] = median(
                [p.measured["mb_per_s"] for p in good if p.measured.get("mb_per_s") is not None]
            )
            s["rss_recv_kib"] = max([p.measured.get("peak_rss_kib", 0) for p in good], default=None)
            s["rss_send_kib"] = max([p.other.get("peak_rss_kib", 0) for p in good], default=None)
            s["count"] = max([p.measured.get("count", 0) for p in good], default=None)
        else:
            for k in ("p50_us", "p99_us", "mean_us"):
                s[k] = median([p.measured[k] for p in good if p.measured.get(k) is not None])
            s["rss_req_kib"] = max([p.measured.get("peak_rss_kib", 0) for p in good], default=None)
            s["rss_rep_kib"] = max([p.other.get("peak_rss_kib", 0) for p in good], default=None)
            s["count"] = max([p.measured.get("count", 0) for p in good], default=None)
        out[case] = s
    return out


def evaluate_targets(
    summary: dict[Case, dict], backends: list[str], sizes: list[int], do_latency: bool
) -> list[tuple[str, str, str]]:
    """(target, verdict, detail) rows. Nothing is judged without measurements of ours."""
    rows = []
    missing = "not evaluated: the dafka backend is not available in this build"

    def tp(b: str, s: int) -> float | None:
        return summary.get(Case(b, "pushpull", s), {}).get("msgs_per_s")

    def mbps(b: str, s: int) -> float | None:
        return summary.get(Case(b, "pushpull", s), {}).get("mb_per_s")

    peers = [p for p in PEERS if p in backends]
    ours = "dafka" in backends

    name = "Ahead of every peer at every size (PUSH/PULL msgs/s)"
    if not ours:
        rows.append((name, "—", missing))
    else:
        behind = []
        for s in sizes:
            for p in peers:
                a, b = tp("dafka", s), tp(p, s)
                if a is None or b is None:
                    behind.append(f"{human_size(s)} vs {p}: no data")
                elif a <= b:
                    behind.append(f"{human_size(s)} vs {LABELS[p]}: {a / b:.2f}×")
        rows.append(
            (
                name,
                "met" if not behind else "NOT met",
                "ahead everywhere" if not behind else "; ".join(behind),
            )
        )

    name = ">= 2× libzmq at <= 128 B"
    small = [s for s in sizes if s <= 128]
    if not ours or "libzmq" not in backends or not small:
        rows.append((name, "—", missing if not ours else "libzmq or small sizes not run"))
    else:
        details, ok = [], True
        for s in small:
            a, b = tp("dafka", s), tp("libzmq", s)
            if a is None or b is None:
                ok = False
                details.append(f"{human_size(s)}: no data")
            else:
                ok &= a >= 2 * b
                details.append(f"{human_size(s)}: {a / b:.2f}×")
        rows.append((name, "met" if ok else "NOT met", "; ".join(details)))

    name = ">= 70% of raw TCP bandwidth at 256 KiB"
    if not ours or "raw" not in backends or 262144 not in sizes:
        rows.append((name, "—", missing if not ours else "raw or 256 KiB not run"))
    else:
        a, b = mbps("dafka", 262144), mbps("raw", 262144)
        if a is None or b is None:
            rows.append((name, "NOT met", "no data"))
        else:
            rows.append((name, "met" if a >= 0.7 * b else "NOT met", f"{100 * a / b:.0f}% of raw"))

    name = f"REQ/REP round-trip p50 no worse than the best peer ({LATENCY_SIZE} B)"
    if not ours or not do_latency:
        rows.append((name, "—", missing if not ours else "latency not run"))
    else:
        mine = summary.get(Case("dafka", "reqrep", LATENCY_SIZE), {}).get("p50_us")
        best = [(summary.get(Case(p, "reqrep", LATENCY_SIZE), {}).get("p50_us"), p) for p in peers]
        best = [(v, p) for v, p in best if v is not None]
        if mine is None or not best:
            rows.append((name, "NOT met", "no data"))
        else:
            v, p = min(best)
            rows.append(
                (
                    name,
                    "met" if mine <= v else "NOT met",
                    f"{mine:.1f} µs vs {LABELS[p]} {v:.1f} µs",
                )
            )
    return rows


def plot(
    summary: dict[Case, dict],
    backends: list[str],
    sizes: list[int],
    do_latency: bool,
    plot_dir: Path,
) -> tuple[list[str], str]:
    """Writes the PNGs; returns their paths relative to the repo and a note if skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return [], "matplotlib is not installed, so no plots were drawn"
    plot_dir.mkdir(parents=True, exist_ok=True)
    written = []
    colors = {"dafka": "#d62728", "libzmq": "#1f77b4", "zmqrs": "#2ca02c", "raw": "#7f7f7f"}
    markers = {"dafka": "o", "libzmq": "s", "zmqrs": "^", "raw": "D"}

    if sizes:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
        for b in backends:
            xs, ys, mbs = [], [], []
            for s in sizes:
                d = summary.get(Case(b, "pushpull", s), {})
                if d.get("msgs_per_s") is not None:
                    xs.append(s)
                    ys.append(d["msgs_per_s"])
                    mbs.append(d["mb_per_s"])
            if xs:
                style = dict(
                    label=LABELS[b],
                    color=colors[b],
                    marker=markers[b],
                    linestyle="--" if b == "raw" else "-",
                    linewidth=2,
                )
                ax1.plot(xs, ys, **style)
                ax2.plot(xs, mbs, **style)
        for ax, title, ylabel in (
            (ax1, "PUSH/PULL throughput (messages/s)", "messages / s"),
            (ax2, "PUSH/PULL throughput (MB/s)", "MB / s (10^6 bytes)"),
        ):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(sizes, [human_size(s) for s in sizes])
            ax.set_xlabel("message size")
            ax.set_ylabel(ylabel)
            ax.set_title(title)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
        fig.suptitle("One sender and one receiver process over TCP loopback; median of runs")
        fig.tight_layout()
        path = plot_dir / "throughput.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    base = "libzmq" if "libzmq" in backends else None
    if sizes and base and len(backends) > 1:
        fig, ax = plt.subplots(figsize=(8, 4.8))
        for b in backends:
            xs, ys = [], []
            for s in sizes:
                a = summary.get(Case(b, "pushpull", s), {}).get("msgs_per_s")
                r = summary.get(Case(base, "pushpull", s), {}).get("msgs_per_s")
                if a is not None and r:
                    xs.append(s)
                    ys.append(a / r)
            if xs:
                ax.plot(
                    xs,
                    ys,
                    label=LABELS[b],
                    color=colors[b],
                    marker=markers[b],
                    linestyle="--" if b == "raw" else "-",
                    linewidth=2,
                )
        ax.axhline(1.0, color="black", linewidth=0.8)
        if "dafka" in backends:
            ax.axhline(
                2.0,
                color="#d62728",
                linewidth=0.8,
                linestyle=":",
                label="target for dafka at <= 128 B (2×)",
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xticks(sizes, [human_size(s) for s in sizes])
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}×"))
        ax.set_xlabel("message size")
        ax.set_ylabel("messages/s relative to libzmq")
        ax.set_title("PUSH/PULL throughput relative to libzmq (above 1× is faster)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = plot_dir / "relative.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    if do_latency:
        rows = [(b, summary.get(Case(b, "reqrep", LATENCY_SIZE), {})) for b in backends]
        rows = [(b, d) for b, d in rows if d.get("p50_us") is not None]
        if rows:
            fig, ax = plt.subplots(figsize=(7, 4.5))
            xs = range(len(rows))
            w = 0.38
            p50 = [d["p50_us"] for _, d in rows]
            p99 = [d["p99_us"] for _, d in rows]
            bars1 = ax.bar(
                [x - w / 2 for x in xs], p50, w, label="p50", color=[colors[b] for b, _ in rows]
            )
            bars2 = ax.bar(
                [x + w / 2 for x in xs],
                p99,
                w,
                label="p99",
                color=[colors[b] for b, _ in rows],
                alpha=0.45,
            )
            ax.bar_label(bars1, fmt="%.1f", fontsize=8)
            ax.bar_label(bars2, fmt="%.1f", fontsize=8)
            ax.set_xticks(list(xs), [LABELS[b] for b, _ in rows])
            ax.set_ylabel("round trip (µs)")
            ax.set_title(f"REQ/REP round trip, {LATENCY_SIZE} B (solid p50, light p99)")
            ax.grid(True, axis="y", alpha=0.3)
            fig.tight_layout()
            path = plot_dir / "latency.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return [str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p) for p in written], ""


def write_markdown(
    out: Path,
    *,
    machine: dict,
    settings: Settings,
    quick: bool,
    backends: list[str],
    skipped: dict[str, str],
    sizes: list[int],
    do_latency: bool,
    summary: dict[Case, dict],
    plots: list[str],
    plot_note: str,
    started: float,
    argv: list[str],
) -> None:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    L: list[str] = []
    L += [
        "# Benchmarks",
        "",
        "dafka's ZMTP sockets side by side with libzmq, zmq.rs and plain TCP. "
        "This file is rewritten by `benches/run.py`; do not edit it by hand.",
        "",
    ]
    L += [
        f"- Date: {now} (run took {time.time() - started:.0f} s)",
        f"- Mode: {'`--quick`' if quick else 'full'}: {settings.reps} repetition(s) per pairing, "
        f"median reported; each run sized to ~{settings.target_s:g} s of measured traffic",
        f"- Command: `{' '.join(['python3', 'benches/run.py', *argv])}` at commit "
        f"`{machine['commit']}`",
        f"- Machine: {machine['cpu']}, {machine['cores']} cores, "
        f"{machine['ram_gib']:.1f} GiB RAM, Linux {machine['kernel']}",
        f"- Load average (1, 5, 15 min) at start: {' '.join(machine['load'])}, at end: "
        f"{' '.join(read('/proc/loadavg').split()[:3])} (a shared machine with {machine['cores']} "
        "cores: other work adds noise, which hits all backends alike because runs are "
        "interleaved)",
        f"- Toolchain: {machine['rustc']}; libzmq {machine['libzmq']} (Debian, via the `zmq` "
        f"crate {machine['zmq_crate']}); zmq.rs = crate `zeromq` {machine['zeromq_crate']} "
        "(tokio runtime)",
        "",
    ]
    L += [
        "## How to reproduce",
        "",
        "```sh",
        "make bench   # installs libzmq3-dev + pkg-config if absent, builds dafka-bench",
        "             # in release, runs benches/run.py in .venv (about 9 minutes)",
        "",
        "# by hand (Debian: apt-get install -y libzmq3-dev pkg-config; python3 with matplotlib):",
        "cargo build --release -p dafka-benches",
        "python3 benches/run.py                        # this report",
        "python3 benches/run.py --quick                # ~20 s smoke run, 1 short repetition",
        "python3 benches/run.py --only dafka,libzmq --only 16,128   # filter backends/tests/sizes",
        "```",
        "",
        "Each measurement is two `dafka-bench` processes on TCP loopback (`127.0.0.1`): the "
        "receiving (PULL) or replying (REP) side binds, the other connects. The PULL side times "
        "from the first to the last measured message after a warm-up of 5% of the count; message "
        "counts are calibrated per backend and size from a short first run. REQ/REP records every "
        "round trip of one outstanding request. Peak RSS is `VmHWM` of each process at exit. All "
        "backends run with default socket options (libzmq HWM 1000). "
        + (
            "The tokio backends (dafka, zmq.rs, raw) run on a current-thread runtime; libzmq "
            "uses its own I/O thread. "
            if settings.workers == 0
            else f"The tokio backends (dafka, zmq.rs, raw) run on a multi-thread runtime with "
            f"{settings.workers} workers; libzmq uses its own I/O thread. "
        )
        + "All pairings are interleaved: every repetition runs every "
        "backend at every size before the next repetition starts.",
        "",
    ]

    L += ["## Backends", ""]
    for b in ALL_BACKENDS:
        if b in backends:
            L.append(f"- **{LABELS[b]}**: measured")
        else:
            L.append(f"- **{LABELS[b]}**: skipped: {skipped.get(b, 'not selected')}")
    for note in NOT_PACKAGED:
        L.append(f"- {note}")
    if "raw" in backends:
        L.append(
            "- raw TCP moves the same bodies behind a 1-byte (or 0xFF + 8-byte) length prefix "
            "with batched writes and zero-copy reads: the ceiling for a message protocol on "
            "this machine."
        )
    L.append("")

    if plots:
        L += ["## Plots", ""]
        for p in plots:
            rel = os.path.relpath(REPO / p, out.parent)
            L.append(f"![{Path(p).stem}]({rel})")
            L.append("")
    elif plot_note:
        L += ["## Plots", "", plot_note, ""]

    if sizes:
        L += [
            "## PUSH/PULL throughput",
            "",
            "Messages per second (median; ± is half the min-max range of the repetitions):",
            "",
        ]

        def pushpull(backend: str, size: int) -> dict:
            return summary.get(Case(backend, "pushpull", size), {})

        def size_table(headers: list[str], columns: list, cell: Callable[[Any, int], str]) -> None:
            """One row per message size, one column per entry of `columns`."""
            L.append("| size | " + " | ".join(headers) + " |")
            L.append("|---|" + "---:|" * len(columns))
            for s in sizes:
                L.append(f"| {human_size(s)} | " + " | ".join(cell(c, s) for c in columns) + " |")

        def rate_with_spread(b: str, s: int) -> str:
            d = pushpull(b, s)
            cell = fmt_rate(d.get("msgs_per_s"))
            if d.get("spread") is not None:
                cell += f" ±{100 * d['spread']:.0f}%"
            return cell

        def rss(b: str, s: int) -> str:
            d = pushpull(b, s)
            if d.get("rss_send_kib") is None:
                return "—"
            return f"{d['rss_send_kib'] / 1024:.1f} / {d['rss_recv_kib'] / 1024:.1f}"

        labels = [LABELS[b] for b in backends]
        size_table(labels, backends, rate_with_spread)
        L += ["", "MB/s (10^6 bytes of message body per second, median):", ""]
        size_table(labels, backends, lambda b, s: fmt_num(pushpull(b, s).get("mb_per_s")))
        L.append("")

        ratio_cols = []
        if "dafka" in backends:
            ratio_cols += [("dafka", p) for p in [*PEERS, "raw"] if p in backends]
        ratio_cols += [(p, "raw") for p in PEERS if p in backends and "raw" in backends]
        if ratio_cols:
            L += ["Ratios of messages per second (above 1× means the first is faster):", ""]
            size_table(
                [f"{LABELS[a]} / {LABELS[b]}" for a, b in ratio_cols],
                ratio_cols,
                lambda ab, s: fmt_ratio(
                    pushpull(ab[0], s).get("msgs_per_s"), pushpull(ab[1], s).get("msgs_per_s")
                ),
            )
            L.append("")

        L += ["Peak RSS in MiB, sender / receiver (largest over repetitions):", ""]
        size_table(labels, backends, rss)
        L.append("")

        L += [
            "CPU time per message in ns, sender + receiver (user + system time of both "
            "processes, all threads, over all messages including warm-up; median). Less "
            "sensitive to other load on the machine than the rates above:",
            "",
        ]
        size_table(labels, backends, lambda b, s: fmt_num(pushpull(b, s).get("cpu_ns_per_msg"), 0))
        L.append("")

    if do_latency:
        L += [f"## REQ/REP round trip ({LATENCY_SIZE} B)", ""]
        L.append(
            "| backend | p50 (µs) | p99 (µs) | mean (µs) | p50 vs best peer | "
            "CPU µs per round trip (both) | round trips | peak RSS req / rep (MiB) |"
        )
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        peer_p50 = [
            summary.get(Case(p, "reqrep", LATENCY_SIZE), {}).get("p50_us")
            for p in PEERS
            if p in backends
        ]
        peer_p50 = [v for v in peer_p50 if v is not None]
        best = min(peer_p50) if peer_p50 else None
        for b in backends:
            d = summary.get(Case(b, "reqrep", LATENCY_SIZE), {})
            rss = (
                "—"
                if d.get("rss_req_kib") is None
                else f"{d['rss_req_kib'] / 1024:.1f} / {d['rss_rep_kib'] / 1024:.1f}"
            )
            L.append(
                f"| {LABELS[b]} | {fmt_num(d.get('p50_us'))} | {fmt_num(d.get('p99_us'))} | "
                f"{fmt_num(d.get('mean_us'))} | {fmt_ratio(d.get('p50_us'), best)} | "
                f"{fmt_cpu_us(d.get('cpu_ns_per_msg'))} | {d.get('count') or '—'} | {rss} |"
            )
        L += ["", "(p50 vs best peer: below 1× is faster than the best of libzmq and zmq.rs.)", ""]

    L += ["## Targets", ""]
    L.append("| target | verdict | detail |")
    L.append("|---|---|---|")
    for name, verdict, detail in evaluate_targets(summary, backends, sizes, do_latency):
        L.append(f"| {name} | {verdict} | {detail} |")
    L.append("")

    failures = [(c, e) for c, d in summary.items() for e in d["errors"]]
    if failures:
        L += [
            "## Failed runs",
            "",
            "These runs produced no numbers; they are left out of the medians above.",
            "",
        ]
        for c, e in failures:
            L.append(f"- {LABELS[c.backend]} {c.test} {human_size(c.size)}: {e}")
        L.append("")
    out.write_text("\n".join(L))


# --------------------------------------------------------------------------- python


PY_IMPLS = ["dafka", "pyzmq"]
PY_SIZES = [64, 1024, 65536, 262144]
PY_MODES = ["copy", "nocopy"]  # copy=True, copy=False on both sides
PY_SECTION_START, PY_SECTION_END = SECTIONS["python"]


@dataclass(frozen=True)
class PyCase:
    impl: str
    mode: str
    size: int


def run_python_pair(python: str, case: PyCase, count: int, warmup: int, timeout: float) -> Pair:
    """PUSH/PULL through the Python API: two `benches/pybench.py` processes, the PULL side
    binding and measuring, the PUSH side held open until the PULL side is done."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    script = str(REPO / "benches" / "pybench.py")

    def cmd(role: str) -> list[str]:
        args = [python, script, role, "--impl", case.impl, "--endpoint", endpoint]
        args += ["--size", str(case.size), "--count", str(count), "--warmup", str(warmup)]
        args += ["--copy", "true" if case.mode == "copy" else "false"]
        return args + (["--hold"] if role == "push" else [])

    # The PULL side binds and measures; it is given 0.2 s to bind before the PUSH connects.
    return run_processes(
        [(role, cmd(role)) for role in ("pull", "push")], "pull", "push", timeout, settle=0.2
    )


def python_section(
    results: dict[PyCase, list[Pair]], sizes: list[int], reps: int, python: str
) -> list[str]:
    def rate(case: PyCase) -> float | None:
        return median([p.measured["msgs_per_s"] for p in results.get(case, []) if p.ok])

    def paired_ratios(size: int, mode: str) -> list[float]:
        """dafka/pyzmq of the runs made back to back in the same repetition."""
        ours, theirs = (
            results.get(PyCase("dafka", mode, size), []),
            results.get(PyCase("pyzmq", mode, size), []),
        )
        return [
            a.measured["msgs_per_s"] / b.measured["msgs_per_s"]
            for a, b in zip(ours, theirs, strict=False)
            if a.ok and b.ok
        ]

    L = [
        PY_SECTION_START,
        "## Through Python: dafka.zmtp against pyzmq",
        "",
        f"- Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; "
        f"load average at end {' '.join(read('/proc/loadavg').split()[:3])} "
        f"({os.cpu_count()} cores, shared: other work adds noise to both sides alike)",
        f"- Command: `python3 benches/run.py --python` (`make bench-python`), {reps} "
        f"repetition(s); interpreter {platform.python_version()} (`{python}`)",
        "",
        "Two processes on TCP loopback, PUSH/PULL through each library's Python API "
        "(`benches/pybench.py`): the PULL side binds and times `recv()` of the measured "
        "messages after a warm-up, the PUSH side loops on `send()`. Default socket options "
        "(HWM 1000). `copy=True`: `bytes` in and out; `copy=False`: `send(..., copy=False)` "
        "and `recv(copy=False)` returning frames on both sides. dafka and pyzmq run back to "
        "back in each repetition (order alternating), and the ratio is the median of those "
        "paired ratios, so load on the shared machine hits both alike.",
        "",
        "| size | mode | dafka msg/s | pyzmq msg/s | dafka / pyzmq (paired median) | "
        "min-max of paired ratios |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for size in sizes:
        for mode in PY_MODES:
            ratios = paired_ratios(size, mode)
            r = median(ratios)
            spread = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "n/a"
            L.append(
                f"| {human_size(size)} | copy={'True' if mode == 'copy' else 'False'} | "
                f"{fmt_rate(rate(PyCase('dafka', mode, size)))} | "
                f"{fmt_rate(rate(PyCase('pyzmq', mode, size)))} | "
                f"{'n/a' if r is None else f'{r:.2f}x'} | {spread} |"
            )
    failed = [
        f"{c.impl} {c.mode} {human_size(c.size)}: {p.error}"
        for c, pairs in results.items()
        for p in pairs
        if not p.ok
    ]
    if failed:
        L += ["", "Failed runs:", ""] + [f"- {f}" for f in failed]
    L += ["", PY_SECTION_END]
    return L


def replace_python_section(out: Path, lines: list[str]) -> None:
    text = out.read_text() if out.exists() else "# Benchmarks\n"
    out.write_text(splice_section(text, "python", "\n".join(lines)))


def python_main(args: argparse.Namespace) -> int:
    python = args.python_bin or sys.executable
    sizes = [s for s in PY_SIZES if not args.py_sizes or s in args.py_sizes]
    reps = args.reps or (1 if args.quick else 5)
    target_s = 0.3 if args.quick else 1.0
    started = time.time()
    cases = [PyCase(i, m, s) for s in sizes for m in PY_MODES for i in PY_IMPLS]

    def one(case: PyCase, count: int, label: str) -> Pair:
        pair = run_python_pair(python, case, count, max(200, count // 20), 120.0)
        shown = (
            f"{fmt_rate(pair.measured.get('msgs_per_s'))} msg/s"
            if pair.ok
            else f"FAILED: {pair.error}"
        )
        print(
            f"[{time.time() - started:6.1f}s] {label:<9} {case.impl:<6} {case.mode:<7} "
            f"{human_size(case.size):>8} n={count:<8} {shown}",
            flush=True,
        )
        return pair

    counts: dict[PyCase, int] = {}
    for case in cases:
        first = max(2000, min(200_000, int(2e8 / case.size)) // 10)
        pair = one(case, first, "calibrate")
        rate = pair.measured.get("msgs_per_s") if pair.ok else None
        counts[case] = int(min(2_000_000, max(2000, (rate or 0) * target_s)))
    results: dict[PyCase, list[Pair]] = {c: [] for c in cases}
    for rep in range(reps):
        for size in sizes:
            for mode in PY_MODES:
                impls = PY_IMPLS if rep % 2 == 0 else PY_IMPLS[::-1]
                # Both sides of a pairing get the same message count.
                n = max(counts[PyCase(i, mode, size)] for i in impls)
                for impl in impls:
                    case = PyCase(impl, mode, size)
                    results[case].append(one(case, n, f"rep {rep + 1}/{reps}"))
    out = Path(args.out)
    replace_python_section(out, python_section(results, sizes, reps, python))
    print(f"wrote the Python section of {out}")
    return 0


# --------------------------------------------------------------------------- main


def parse_only(tokens: list[str]) -> tuple[set[str], set[str], set[int]]:
    backends, tests, sizes = set(), set(), set()
    aliases = {
        "throughput": "pushpull",
        "latency": "reqrep",
        "push": "pushpull",
        "pull": "pushpull",
        "req": "reqrep",
        "rep": "reqrep",
    }
    for raw in tokens:
        for tok in filter(None, (t.strip().lower() for t in raw.split(","))):
            if tok in ALL_BACKENDS:
                backends.add(tok)
            elif tok in TESTS or tok in aliases:
                tests.add(aliases.get(tok, tok))
            elif (n := parse_size(tok)) is not None and n in SIZES:
                sizes.add(n)
            else:
                raise SystemExit(
                    f"--only: unknown token {tok!r} (backends {ALL_BACKENDS}, "
                    f"tests {TESTS}, sizes {[human_size(s) for s in SIZES]})"
                )
    return backends, tests, sizes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--bin",
        default=str(REPO / "target" / "release" / "dafka-bench"),
        help="the dafka-bench binary (default: target/release/dafka-bench)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="one repetition of ~0.4 s runs (a smoke run, about 20 seconds)",
    )
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TOKENS",
        help="comma-separated filters: backends (dafka,libzmq,zmqrs,raw), tests "
        "(pushpull,reqrep), sizes (16,128,1k,8k,256k); repeatable",
    )
    ap.add_argument("--reps", type=int, help="repetitions per pairing (default 7, quick 1)")
    ap.add_argument(
        "--workers",
        type=int,
        default=0,
        help="tokio worker threads for dafka, zmq.rs and raw (default 0: a current-thread runtime)",
    )
    ap.add_argument("--out", default=str(REPO / "BENCHMARKS.md"), help="markdown to rewrite")
    ap.add_argument("--plots", default=str(REPO / "docs" / "bench"), help="directory for PNGs")
    ap.add_argument(
        "--raw-json",
        default=str(REPO / "bench-out" / "results.json"),
        help="every run's JSON lines, for inspection (not committed)",
    )
    ap.add_argument(
        "--python",
        action="store_true",
        help="run the Python-level pairing (dafka.zmtp against pyzmq) instead, and rewrite "
        "only its section of --out",
    )
    ap.add_argument(
        "--python-bin", dest="python_bin", help="interpreter for --python (default: this)"
    )
    ap.add_argument(
        "--py-size",
        dest="py_sizes",
        type=int,
        action="append",
        default=[],
        help="with --python: only these sizes in bytes (repeatable)",
    )
    args = ap.parse_args()
    if args.python:
        return python_main(args)

    binary = args.bin
    if not Path(binary).is_file():
        print(
            f"error: {binary} not found; run `cargo build --release -p dafka-benches` "
            "(or `make bench`) first",
            file=sys.stderr,
        )
        return 2
    info = json.loads(
        subprocess.run(
            [binary, "info"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    )
    built = set(filter(None, info.get("backends", "").split(",")))

    only_b, only_t, only_s = parse_only(args.only)
    wanted = [b for b in ALL_BACKENDS if not only_b or b in only_b]
    backends = [b for b in wanted if b in built]
    skipped = {
        b: UNAVAILABLE_NOTES.get(b, "not compiled into this dafka-bench")
        for b in wanted
        if b not in built
    }
    skipped.update({b: "excluded by --only" for b in ALL_BACKENDS if b not in wanted})
    tests = [t for t in TESTS if not only_t or t in only_t]
    sizes = [s for s in SIZES if not only_s or s in only_s] if "pushpull" in tests else []
    do_latency = "reqrep" in tests
    if not backends:
        print("error: no selected backend is available in this build", file=sys.stderr)
        return 2

    settings = Settings(
        target_s=0.4 if args.quick else 1.5,
        reps=args.reps or (1 if args.quick else 7),
        timeout_s=30.0,
        workers=args.workers,
    )
    cases = [Case(b, "pushpull", s) for s in sizes for b in backends]
    if do_latency:
        cases += [Case(b, "reqrep", LATENCY_SIZE) for b in backends]

    machine = machine_info(info)
    started = time.time()
    log = []

    def one(case: Case, count: int, label: str) -> Pair:
        pair = run_pair(
            binary,
            case.backend,
            case.test,
            case.size,
            count,
            warmup_for(count),
            settings.timeout_s,
            settings.workers,
        )
        log.append(
            {
                "case": case.__dict__,
                "label": label,
                "count": count,
                "ok": pair.ok,
                "measured": pair.measured,
                "other": pair.other,
                "error": pair.error,
            }
        )
        if pair.ok and case.test == "pushpull":
            shown = f"{fmt_rate(pair.measured.get('msgs_per_s'))} msg/s"
        elif pair.ok:
            shown = f"p50 {pair.measured.get('p50_us', 0):.1f} µs"
        else:
            shown = f"FAILED: {pair.error}"
        print(
            f"[{time.time() - started:6.1f}s] {label:<9} {LABELS[case.backend]:<13} "
            f"{case.test:<8} {human_size(case.size):>8} n={count:<9} {shown}",
            flush=True,
        )
        return pair

    # Calibration: one short run per case sizes the measured runs (and warms caches).
    counts = {}
    for case in cases:
        pair = one(case, initial_count(case.test, case.size, settings.target_s), "calibrate")
        counts[case] = count_for(case.test, pair, settings.target_s) if pair.ok else None

    results: dict[Case, list[Pair]] = {c: [] for c in cases}
    for rep in range(settings.reps):
        # Rotate the backend order each repetition so none always runs first.
        order = sorted(
            cases,
            key=lambda c: (
                TESTS.index(c.test),
                c.size,
                (backends.index(c.backend) + rep) % len(backends),
            ),
        )
        for case in order:
            if counts[case] is None:
                results[case].append(Pair(False, error="calibration run failed"))
                continue
            results[case].append(one(case, counts[case], f"rep {rep + 1}/{settings.reps}"))

    summary = summarize(results)
    raw_json = Path(args.raw_json)
    raw_json.parent.mkdir(parents=True, exist_ok=True)
    raw_json.write_text(json.dumps({"machine": machine, "runs": log}, indent=1))
    plots, plot_note = plot(summary, backends, sizes, do_latency, Path(args.plots))
    out = Path(args.out)
    previous = out.read_text() if out.exists() else ""
    write_markdown(
        out,
        machine=machine,
        settings=settings,
        quick=args.quick,
        backends=backends,
        skipped=skipped,
        sizes=sizes,
        do_latency=do_latency,
        summary=summary,
        plots=plots,
        plot_note=plot_note,
        started=started,
        argv=sys.argv[1:],
    )
    out.write_text(carry_sections(previous, out.read_text()))
    print(f"wrote {out}" + "".join(f", {p}" for p in plots))
    return 0


if __name__ == "__main__":
    sys.exit(main())
