#!/usr/bin/env python3
"""CURVE against NULL, dafka against libzmq: PUSH/PULL throughput at 128 B and 64 KiB and
handshakes per second, each pairing run as two `dafka-bench` processes over loopback TCP
(`--curve` makes the binding side the CURVE server). Interleaves every pairing, repeats it,
keeps the median, and rewrites the security section of BENCHMARKS.md.

Run by `make bench-security` (after `cargo build --release -p dafka-benches`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import REPO, SECTIONS, fmt_rate, fmt_ratio, free_port, run_processes, splice_section

IMPLS = ["dafka", "libzmq"]
MECHS = ["null", "curve"]
SIZES = [128, 65536]
# Messages per run (about a second each on the shared 2-core machine) and connections per
# handshake run.
COUNTS = {128: 300_000, 65536: 8_000}
HANDSHAKES = 400


@dataclass(frozen=True)
class Case:
    impl: str
    mech: str
    test: str  # "pushpull" or "handshake"
    size: int


def command(
    binary: str, role: str, case: Case, endpoint: str, count: int, warmup: int
) -> list[str]:
    args = [binary, role, "--impl", case.impl, "--endpoint", endpoint, "--size", str(case.size)]
    args += ["--count", str(count), "--warmup", str(warmup), "--timeout", "60"]
    return args + (["--curve"] if case.mech == "curve" else [])


def run_case(binary: str, case: Case, scale: float) -> float | None:
    """One run: messages per second (PUSH/PULL) or handshakes per second; None on failure."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    if case.test == "pushpull":
        count = max(1000, int(COUNTS[case.size] * scale))
        warmup = count // 10
        starts = [
            ("pull", command(binary, "pull", case, endpoint, count, warmup)),
            ("push", [*command(binary, "push", case, endpoint, count, warmup), "--hold"]),
        ]
        pair = run_processes(starts, "pull", "push", 65)
        key = "msgs_per_s"
    else:
        count = max(20, int(HANDSHAKES * scale))
        warmup = count // 10
        starts = [
            ("rep", [*command(binary, "rep", case, endpoint, count, warmup), "--hold"]),
            ("handshake", command(binary, "handshake", case, endpoint, count, warmup)),
        ]
        pair = run_processes(starts, "handshake", "rep", 65, settle=0.2)
        key = "handshakes_per_s"
    if not pair.ok:
        print(f"  {case}: FAILED {pair.error}", file=sys.stderr)
        return None
    value = pair.measured.get(key)
    return float(value) if value is not None else None


def fmt(v: float | None, unit: str = "") -> str:
    return "failed" if v is None else fmt_rate(v) + unit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="the dafka-bench binary (release)")
    ap.add_argument(
        "--reps",
        type=int,
        default=15,
        help="runs per pairing (median kept); 15, as the CURVE/NULL ratio at 64 KiB moved "
        "0.47-0.52x between two runs of 5 a minute apart",
    )
    ap.add_argument("--quick", action="store_true", help="a tenth of the counts, 1 rep")
    ap.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    ap.add_argument("--note", default="", help="a line about the machine's load")
    args = ap.parse_args()
    scale = 0.1 if args.quick else 1.0
    reps = 1 if args.quick else args.reps
    cases = [Case(i, m, "pushpull", s) for s in SIZES for m in MECHS for i in IMPLS]
    cases += [Case(i, m, "handshake", 1) for m in MECHS for i in IMPLS]
    results: dict[Case, list[float]] = {c: [] for c in cases}
    for rep in range(reps):
        for case in cases:
            v = run_case(args.bin, case, scale)
            print(
                f"rep {rep + 1}/{reps} {case.impl:6} {case.mech:5} {case.test:9} "
                f"{case.size:6}: {fmt(v)}",
                file=sys.stderr,
            )
            if v is not None:
                results[case].append(v)
    med = {c: (statistics.median(v) if v else None) for c, v in results.items()}

    def get(impl: str, mech: str, test: str, size: int) -> float | None:
        return med[Case(impl, mech, test, size)]

    begin, end = SECTIONS["security"]
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        begin,
        "## CURVE (security)",
        "",
        f"`make bench-security` ({when}, median of {reps} runs per pairing, each pairing two "
        "`dafka-bench` processes over loopback TCP, interleaved; the binding side is the "
        "CURVE server). " + (args.note or ""),
        "",
        "| PUSH/PULL | dafka NULL | dafka CURVE | libzmq NULL | libzmq CURVE | "
        "dafka/libzmq CURVE | dafka CURVE/NULL |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in SIZES:
        dn, dc = get("dafka", "null", "pushpull", s), get("dafka", "curve", "pushpull", s)
        ln, lc = get("libzmq", "null", "pushpull", s), get("libzmq", "curve", "pushpull", s)
        label = "128 B" if s == 128 else "64 KiB"

        def cell(v: float | None, size: int = s) -> str:
            return f"{fmt(v, ' msg/s')} ({v * size / 1e6:.0f} MB/s)" if v else "failed"

        lines.append(
            f"| {label} | {cell(dn)} | {cell(dc)} | {cell(ln)} | {cell(lc)} | "
            f"{fmt_ratio(dc, lc)} | {fmt_ratio(dc, dn)} |"
        )
    dn, dc = get("dafka", "null", "handshake", 1), get("dafka", "curve", "handshake", 1)
    ln, lc = get("libzmq", "null", "handshake", 1), get("libzmq", "curve", "handshake", 1)
    lines += [
        "",
        "| Handshakes/s (new REQ, connect, handshake, 1-byte round trip, close) | NULL | CURVE |",
        "|---|---|---|",
        f"| dafka | {fmt(dn, '/s')} | {fmt(dc, '/s')} |",
        f"| libzmq | {fmt(ln, '/s')} | {fmt(lc, '/s')} |",
        f"| dafka/libzmq | {fmt_ratio(dn, ln)} | {fmt_ratio(dc, lc)} |",
        "",
        end,
    ]
    out = Path(args.out)
    text = out.read_text() if out.exists() else "# Benchmarks\n"
    out.write_text(splice_section(text, "security", "\n".join(lines)))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
