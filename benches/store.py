#!/usr/bin/env python3
"""The storage engine's benchmark: runs `dafka-bench store` and writes the "Storage"
section of BENCHMARKS.md (between the storage markers, which benches/run.py keeps when it
rewrites the rest of the file) and docs/bench/store-memory.png.

    python3 benches/store.py --bin target/release/dafka-bench            # cases + 10 min memory run
    python3 benches/store.py --seconds 1 --memory-seconds 0              # short run, memory kept
    python3 benches/store.py --memory-only --memory-seconds 600          # memory run only

The raw measurements go to bench-out/store.json; a run that skips the cases or the memory
run takes them from there (so the memory run can be redone alone).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_spec = importlib.util.spec_from_file_location("bench_run", Path(__file__).with_name("run.py"))
run = importlib.util.module_from_spec(_spec)
sys.modules["bench_run"] = run
_spec.loader.exec_module(run)

REPO = run.REPO


def bench(binary: str, args: list[str], timeout: float) -> list[dict]:
    """Runs `dafka-bench store`, returns its JSON lines."""
    p = subprocess.run(
        [binary, "store", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    failed = [line for line in lines if line.get("ok") is False]
    if p.returncode != 0 or failed:
        sys.exit(f"dafka-bench store failed ({p.returncode}): {failed or p.stderr[-2000:]}")
    return lines


def fmt_mb(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e6:,.1f}"


def render(data: dict) -> str:
    """The Markdown of the Storage section (markers included)."""
    m = data["machine"]
    L = [
        run.STORAGE_BEGIN,
        "## Storage",
        "",
        "The storage engine (`crates/store`, sync policy `always`: a record is acknowledged only "
        "after the `fdatasync` covering its batch returned) against the disk's own limit, measured "
        "in the same run by `dafka-bench store` (`make bench-store`; `benches/store.py`).",
        "",
        f"- Date: {data['date']}; command: `{data['command']}` at commit `{m['commit']}`",
        f"- Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']:.1f} GiB RAM, "
        f"Linux {m['kernel']}; store directory on `{data['fs']}`",
        f"- Load average at start: {' '.join(m['load'])}. **{data['note']}**",
        "",
        "Each case appends for the stated time, one record per `append` call, round-robin over "
        "the partitions, never waiting for a ticket (group commit batches whatever arrives during "
        "the previous `write` + `fdatasync`). *Raw* writes the engine's mean batch size (record "
        "headers and commit entries included) with `write` + `fdatasync` into a fresh file for the "
        "same time: the disk's limit at that batch size. Engine and raw runs alternate, three of "
        "each per case, and the medians are shown (single runs on this shared, virtualised disk "
        "swung between 0.5x and 4x). *Ratio* is the engine's disk bytes/s over raw's. On this "
        "machine `fdatasync` is cheap (a profile puts most of the time in the kernel's copy into "
        "the page cache and ext4 block allocation, not in the sync), so raw is bound by memory "
        "copies in one thread, and the engine, which encodes on the appender's thread while its "
        "writer writes and syncs, can exceed it. "
        "Ack latency: append call to acknowledgement, every 16th record. CPU: user + system "
        "time of the whole process (appender, writer, waiter) per record.",
        "",
        "| record | partitions | records/s | payload MB/s | disk MB/s | raw MB/s | ratio | "
        "ack p50 | ack p99 | CPU/record | records/batch |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in data["cases"]:
        L.append(
            f"| {run.human_size(c['size'])} | {c['partitions']:,} | {c['records_per_s']:,.0f} | "
            f"{c['payload_mb_per_s']:,.1f} | {fmt_mb(c['disk_bytes_per_s'])} | "
            f"{fmt_mb(c['raw_bytes_per_s'])} | {c['ratio_to_raw']:.2f} | "
            f"{c.get('ack_p50_us', 0) / 1000:.2f} ms | {c.get('ack_p99_us', 0) / 1000:.2f} ms | "
            f"{c.get('cpu_ns_per_record', 0) / 1000:.2f} us | {c['records_per_batch']:,.0f} |"
        )
    L += [
        "",
        "Sequential read of one partition, start to end, right after writing it (page cache), "
        "values as `Bytes` slices of 1 MiB read buffers, CRC checked on every record:",
        "",
        "| record | records | GB/s | records/s |",
        "|---:|---:|---:|---:|",
    ]
    for r in data["reads"]:
        L.append(
            f"| {run.human_size(r['size'])} | {r['records']:,} | {r['gb_per_s']:.2f} | "
            f"{r['records_per_s']:,.0f} |"
        )
    L.append("")
    mem = data.get("memory") or []
    if mem:
        rss = [s["rss_kib"] / 1024 for s in mem]
        third = max(1, len(rss) // 3)
        L += [
            f"Memory over a {mem[-1]['t_s']:.0f} s append run (1 KiB records, 16 partitions, "
            "`always`, 100,000 records/s, 64 MiB segments, size retention 1 GiB): RSS "
            f"{rss[0]:.1f} MiB at start, {max(rss[third:]):.1f} MiB at most after the first "
            f"third, {rss[-1]:.1f} MiB at the end; {mem[-1]['records']:,} records appended, "
            f"{mem[-1]['segments_dropped']} segments dropped by retention. "
            f"({data.get('memory_note', '')})",
            "",
            "![store memory](docs/bench/store-memory.png)",
            "",
        ]
    else:
        L += ["The memory-over-time run has not been made yet.", ""]
    L.append(run.STORAGE_END)
    return "\n".join(L)


def plot_memory(mem: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.plot([s["t_s"] for s in mem], [s["rss_kib"] / 1024 for s in mem], color="#d62728")
    ax.set_xlabel("seconds")
    ax.set_ylabel("RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.set_title("dafka-store: RSS while appending 1 KiB records (always, 1 GiB retention)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=str(REPO / "target/release/dafka-bench"))
    ap.add_argument("--dir", default=None, help="where the stores go (default: under target/)")
    ap.add_argument("--seconds", type=float, default=2.0, help="append time per run")
    ap.add_argument("--memory-seconds", type=int, default=600)
    ap.add_argument("--memory-only", action="store_true")
    ap.add_argument(
        "--note",
        default="Taken on a shared 2-core machine while other work was compiling: "
        "the figures are lower bounds, noisy, not for judging small differences.",
    )
    ap.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    ap.add_argument("--raw-json", default=str(REPO / "bench-out/store.json"))
    args = ap.parse_args()

    raw = Path(args.raw_json)
    old = json.loads(raw.read_text()) if raw.exists() else {}
    (REPO / "target").mkdir(exist_ok=True)
    workdir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(dir=REPO / "target"))
    fs = subprocess.run(
        ["df", "--output=fstype", str(workdir)], capture_output=True, text=True, check=False
    ).stdout.split()[-1:] or ["?"]
    info = json.loads(subprocess.run([args.bin, "info"], capture_output=True, text=True).stdout)
    data = dict(old)
    data.update(
        machine=run.machine_info(info),
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        command="python3 benches/store.py " + " ".join(sys.argv[1:]),
        fs=fs[0],
        note=args.note,
    )
    if not args.memory_only:
        lines = bench(
            args.bin,
            ["--dir", str(workdir), "--seconds", str(args.seconds)],
            timeout=120 + args.seconds * 120,
        )
        data["cases"] = [line for line in lines if line.get("mode") == "engine"]
        data["reads"] = [line for line in lines if line.get("mode") == "read"]
    if args.memory_seconds > 0:
        started = time.time()
        data["memory"] = bench(
            args.bin,
            ["--dir", str(workdir), "--no-cases", "--memory-seconds", str(args.memory_seconds)],
            timeout=120 + args.memory_seconds * 2,
        )
        data["memory"] = [line for line in data["memory"] if line.get("mode") == "memory"]
        at = dt.datetime.fromtimestamp(started, dt.UTC)
        data["memory_note"] = f"run at {at:%Y-%m-%d %H:%M} UTC"
        plot_memory(data["memory"], REPO / "docs/bench/store-memory.png")
    if "cases" not in data:
        sys.exit("no engine cases measured yet: run without --memory-only first")
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(data, indent=1))
    out = Path(args.out)
    text = out.read_text() if out.exists() else "# Benchmarks\n"
    out.write_text(run.splice_storage_section(text, render(data)))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
