#!/usr/bin/env python3
"""End-to-end Dafka benchmark: producer -> store (sync="always") -> consumer, three processes.

For each record size (100 B and 1 KiB) and each producer (Rust `send_many`, Python `send` in
a loop, Python `send_many` of a pyarrow array): a store process (with the tower) on a fresh
directory, an "earliest" consumer, then the producer; the producer reports records/s and
MB/s until its last record was acknowledged durable, and (Rust) the acknowledgement latency;
the consumer its rate; then a second consumer catches up from the store alone (producer
gone). Peak RSS of every process. Rust consumers receive record batches, Python consumers
`pyarrow.RecordBatch`es built in Rust.

`--memory-seconds N` instead runs the three Rust processes for N seconds with RSS sampled
every second (store retention bounds the disk), and plots docs/bench/dafka-memory.png.

Rewrites only its section of BENCHMARKS.md (run.py's SECTIONS["dafka"]).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("bench_run", Path(__file__).with_name("run.py"))
run = importlib.util.module_from_spec(_spec)
sys.modules["bench_run"] = run
_spec.loader.exec_module(run)

REPO = run.REPO
SIZES = [100, 1024]
PRODUCERS = ["rust", "py-send", "py-send_many", "rust-keyed", "py-send_many-keyed"]
# The keyed shapes: each record with a 16-byte key and two headers (a trace id, a schema id),
# measured at the smallest size only, where the metadata weighs most.
KEYED = {"rust-keyed": "rust", "py-send_many-keyed": "py-send_many"}
LABELS = {
    "rust": "Rust `send_many` (10 000 a call)",
    "py-send": "Python `send` in a loop",
    "py-send_many": "Python `send_many` (pyarrow array of 10 000)",
    "rust-keyed": "Rust `send_many`, 16-byte key + 2 headers",
    "py-send_many-keyed": "Python `send_many` (RecordBatch: value, 16-byte key, 2 headers)",
}
KEY = b"0123456789abcdef"
HEADERS = [("trace-id", b"4bf92f3577b34da6"), ("schema", b"v1.2")]


# --------------------------------------------------------------------------- Python roles


def send_all(p: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Sends `args.records` values of `args.size` bytes after a warm-up record (its flush: a
    store is there); records/s until the last is acknowledged durable."""
    import pyarrow as pa

    p.send(b"\0" * args.size)
    p.flush(timeout=30)
    value = b"\7" * args.size
    start = time.perf_counter()
    if args.mode == "send":
        send = p.send
        for _ in range(args.records):
            send(value)
    else:
        chunk = pa.array([value] * 10_000, pa.binary())
        if args.mode == "send_many-keyed":
            headers = pa.array(
                [[{"key": k, "value": v} for k, v in HEADERS]] * 10_000,
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            )
            chunk = pa.RecordBatch.from_pydict(
                {"value": chunk, "key": pa.array([KEY] * 10_000), "headers": headers}
            )
        left = args.records
        while left > 0:
            n = min(10_000, left)
            p.send_many(chunk if n == 10_000 else chunk.slice(0, n))
            left -= n
    p.flush(timeout=120)
    secs = time.perf_counter() - start
    rate = args.records / secs
    return {
        "role": "producer",
        "records": args.records,
        "size": args.size,
        "secs": secs,
        "records_per_s": rate,
        "mb_per_s": rate * args.size / 1e6,
        "ok": True,
    }


def consume_all(c: Any, records: int) -> dict[str, Any]:
    """Polls `records` records in offset order; the rate from the first batch to the last."""
    import pyarrow.compute as pc

    got = 0
    nbytes = 0
    first = last = None
    while got < records:
        batch = c.poll(max_records=100_000, timeout=0.1)
        if batch.num_rows == 0:
            continue
        now = time.perf_counter()
        first = first or now
        last = now
        # One partition, delivered in order: the batch is the next run of offsets.
        mm = pc.min_max(batch.column("offset")).as_py()
        if mm["min"] != got or mm["max"] != got + batch.num_rows - 1:
            return {"ok": False, "error": f"offsets {mm} after {got}"}
        got += batch.num_rows
        nbytes += batch.column("value").nbytes
    secs = (last or 0) - (first or 0)
    return {
        "role": "consumer",
        "records": got,
        "secs": secs,
        "records_per_s": got / max(secs, 1e-9),
        "mb_per_s": nbytes / max(secs, 1e-9) / 1e6,
        "ok": True,
    }


def py_producer(args: argparse.Namespace) -> dict[str, Any]:
    import dafka

    with dafka.Producer("bench", towers=args.towers) as p:
        out = send_all(p, args)
    return {**out, "peak_rss_kib": peak_rss_kib(), "cpu_s": cpu_s()}


def py_consumer(args: argparse.Namespace) -> dict[str, Any]:
    import dafka

    with dafka.Consumer("bench", towers=args.towers, offset_reset="earliest") as c:
        out = consume_all(c, args.records)
    return {**out, "peak_rss_kib": peak_rss_kib(), "cpu_s": cpu_s()}


def py_one_process(args: argparse.Namespace) -> dict[str, Any]:
    """Everything in this process, as a notebook or the demo runs it: a `dafka.LocalCluster`
    (tower and store, sync="always"), the producer, then a catch-up consumer once the producer
    is closed. The same records and the same code as the three-process Python roles."""
    import dafka

    with tempfile.TemporaryDirectory(dir=args.dir) as d, dafka.LocalCluster(d) as cluster:
        with dafka.Producer("bench", towers=cluster.towers) as p:
            prod = send_all(p, args)
        with dafka.Consumer("bench", towers=cluster.towers, offset_reset="earliest") as c:
            catch = consume_all(c, args.records + 1)
    return {
        "ok": prod["ok"] and catch["ok"],
        "producer": prod,
        "catchup": catch,
        "peak_rss_kib": peak_rss_kib(),
        "cpu_s": cpu_s(),
    }


def cpu_s() -> float:
    """User + system CPU seconds of this process so far (as the Rust roles report)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return round(r.ru_utime + r.ru_stime, 3)


def peak_rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


# --------------------------------------------------------------------------- orchestration


class Store:
    """The store process (with the tower); `towers` from its first JSON line."""

    def __init__(self, binary: str, directory: Path, timeout: float, extra: list[str]) -> None:
        self.proc = subprocess.Popen(
            [binary, "dafka", "store", "--dir", str(directory), "--timeout", str(timeout), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        first = json.loads(self.proc.stdout.readline() or "{}")
        if "towers" not in first:
            self.stop()
            raise RuntimeError(f"the store did not start: {self.proc.stderr.read()[-2000:]}")
        self.towers: str = first["towers"]

    def stop(self) -> dict[str, Any]:
        out, err = run.communicate(self.proc, 30)
        return run.parse_json_line(out) or {"ok": False, "error": err[-500:]}


def role_cmd(binary: str, producer: str, role: str, towers: str, records: int, size: int):
    if producer in ("rust", "rust-keyed") or role == "catchup-rust":
        r = "producer" if role == "producer" else "consumer"
        cmd = [binary, "dafka", r, "--towers", towers, "--records", str(records)]
        if r == "producer":
            cmd += ["--size", str(size), "--keyed", "1" if producer == "rust-keyed" else "0"]
        return [*cmd, "--timeout", "300"]
    mode = producer.removeprefix("py-")
    r = "py-producer" if role == "producer" else "py-consumer"
    return [
        sys.executable,
        __file__,
        "--role",
        r,
        "--towers",
        towers,
        "--records",
        str(records),
        "--size",
        str(size),
        "--mode",
        mode,
    ]


def start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(p: subprocess.Popen, timeout: float) -> dict[str, Any]:
    out, err = run.communicate(p, timeout)
    js = run.parse_json_line(out)
    if not js.get("ok"):
        js = {"ok": False, "error": js.get("error") or err.strip()[-500:] or "no output"}
    return js


def one_case(binary: str, workdir: Path, producer: str, size: int, records: int) -> dict:
    directory = Path(tempfile.mkdtemp(dir=workdir))
    store = Store(binary, directory / "store", 600, [])
    try:
        # Warm-up record + the measured ones.
        consumer = start(role_cmd(binary, producer, "consumer", store.towers, records + 1, size))
        time.sleep(0.5)
        cmd = role_cmd(binary, producer, "producer", store.towers, records, size)
        prod = result(start(cmd), 300)
        cons = result(consumer, 300)
        # The producer is gone: a new consumer catches up from the store alone.
        catchup_kind = "catchup-rust" if producer in ("rust", "rust-keyed") else "consumer"
        cmd = role_cmd(binary, producer, catchup_kind, store.towers, records + 1, size)
        catch = result(start(cmd), 300)
    finally:
        st = store.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "producer_kind": producer,
        "size": size,
        "producer": prod,
        "consumer": cons,
        "catchup": catch,
        "store": st,
    }


def one_process_case(workdir: Path, producer: str, size: int, records: int) -> dict[str, Any]:
    """`py_one_process` in a fresh interpreter (as a user's script starts)."""
    mode = producer.removeprefix("py-")
    cmd = [sys.executable, __file__, "--role", "py-one-process", "--records", str(records)]
    cmd += ["--size", str(size), "--mode", mode, "--dir", str(workdir)]
    return result(start(cmd), 600)


def memory_run(binary: str, workdir: Path, seconds: int, size: int) -> dict:
    directory = Path(tempfile.mkdtemp(dir=workdir))
    store = Store(binary, directory / "store", seconds + 300, ["--retention-mib", "1024"])
    samples = []
    try:
        limit = ["--timeout", str(seconds + 200)]
        consumer = start(
            [binary, "dafka", "consumer", "--towers", store.towers, "--idle", "10", *limit]
        )
        time.sleep(0.5)
        sending = ["--seconds", str(seconds), "--size", str(size), *limit]
        producer = start([binary, "dafka", "producer", "--towers", store.towers, *sending])
        t0 = time.monotonic()
        procs = {"producer": producer, "store": store.proc, "consumer": consumer}
        while producer.poll() is None:
            row = {"t_s": round(time.monotonic() - t0, 1)}
            for name, p in procs.items():
                row[name] = rss_kib(p.pid)
            samples.append(row)
            time.sleep(1.0)
        prod = result(producer, 60)
        cons = result(consumer, 60)
    finally:
        st = store.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "seconds": seconds,
        "size": size,
        "samples": samples,
        "producer": prod,
        "consumer": cons,
        "store": st,
    }


# --------------------------------------------------------------------------- report


def fmt_rate(v: float | None) -> str:
    return "—" if v is None else f"{v:,.0f}"


def fmt_mib(kib: int | None) -> str:
    return "—" if not kib else f"{kib / 1024:,.0f}"


MEMORY_HEADING = "### Memory over time"


def kept_memory(markdown: str) -> str:
    """The memory subsection of the Dafka section of a BENCHMARKS.md text (heading to the end
    marker, exclusive), or "": what a run without `--memory-seconds` and without the raw JSON
    of an earlier memory run carries over, so a short run keeps the 10-minute run's text."""
    block = run.section(markdown, "dafka")
    start = block.find(MEMORY_HEADING)
    if start < 0:
        return ""
    return block[start : block.rfind(run.SECTIONS["dafka"][1])].strip("\n")


def render(data: dict, kept: str = "") -> str:
    """The Dafka section of BENCHMARKS.md; the memory subsection from `data["memory"]`, or
    else `kept` verbatim (see `kept_memory`)."""
    begin, end = run.SECTIONS["dafka"]
    m = data.get("machine", {})
    L = [
        begin,
        "## Dafka end to end",
        "",
        'Producer -> store (`sync="always"`: acknowledged only after the `fdatasync` of its '
        "batch) -> consumer, three processes on loopback, the tower inside the store's process "
        "(`make bench-dafka`, `benches/dafka_e2e.py`; `dafka-bench dafka` for the Rust "
        "processes). Records/s and MB/s of the producer run until its last record was "
        "acknowledged durable; acknowledgement latency of one record per `send_many` call "
        "(send returned -> ACK seen by the producer); the live consumer's rate from its first "
        "record to its last; the catch-up consumer reads everything back from the store alone "
        "after the producer exited. Rust consumers take record batches; Python consumers "
        "`pyarrow.RecordBatch`es.",
        "",
        f"Run {data.get('date', '?')} on {m.get('cpu', '?')} ({m.get('cores', '?')} cores), "
        f"`{data.get('command', '')}`. {data.get('note', '')}",
        "",
        "| producer | size | records | records/s (durable) | MB/s | ack p50 | ack p99 "
        "| consumer records/s | catch-up records/s | peak RSS producer / store / consumer (MiB) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in data.get("cases", []):
        p, co, ca, st = c["producer"], c["consumer"], c["catchup"], c["store"]
        if not p.get("ok"):
            L.append(f"| {LABELS[c['producer_kind']]} | {c['size']} B | failed: {p.get('error')} |")
            continue
        p50 = p.get("ack_p50_us")
        p99 = p.get("ack_p99_us")
        lat = (
            (f"{p50 / 1000:,.1f} ms", f"{p99 / 1000:,.1f} ms")
            if p50 is not None and p99 is not None
            else ("—", "—")
        )
        L.append(
            f"| {LABELS[c['producer_kind']]} | {run.human_size(c['size'])} | {p['records']:,} "
            f"| {fmt_rate(p.get('records_per_s'))} | {p.get('mb_per_s', 0):,.1f} "
            f"| {lat[0]} | {lat[1]} "
            f"| {fmt_rate(co.get('records_per_s')) if co.get('ok') else 'failed'} "
            f"| {fmt_rate(ca.get('records_per_s')) if ca.get('ok') else 'failed'} "
            f"| {fmt_mib(p.get('peak_rss_kib'))} / {fmt_mib(st.get('peak_rss_kib'))} "
            f"/ {fmt_mib(co.get('peak_rss_kib'))} |"
        )
    L += one_process_table(data.get("cases", []))
    L += ["", *data.get("targets", [])]
    mem = data.get("memory")
    if mem:
        L += [
            "",
            f"### Memory over time ({mem['seconds']} s run, {mem['size']} B records, "
            f"{mem.get('note', '')})",
            "",
            f"Rust producer sending continuously for {mem['seconds']} s "
            f"({mem['producer'].get('records', 0):,} records, "
            f"{fmt_rate(mem['producer'].get('records_per_s'))}/s), the store with 1 GiB "
            'retention, a live "earliest" consumer (it received '
            f"{mem['consumer'].get('records', 0):,} records, skipped "
            f"{mem['consumer'].get('skipped', 0):,} dropped by retention before it read them"
            + (
                f"; {mem['consumer']['error']}"
                if mem["consumer"].get("error")
                else ", stopping 10 s after the last"
            )
            + "); RSS of each process sampled every second.",
            "",
            "![RSS over time](docs/bench/dafka-memory.png)",
        ]
    elif kept:
        L += ["", kept]
    L.append(end)
    return "\n".join(L)


def one_process_rates(c: dict) -> tuple[float | None, ...]:
    """(durable, catch-up) records/s in one process and in three, for a case."""
    one = c.get("one_process") or {}

    def rate(d: dict) -> float | None:
        return d.get("records_per_s") if d.get("ok") else None

    return (
        rate(one.get("producer", {})),
        rate(c["producer"]),
        rate(one.get("catchup", {})),
        rate(c["catchup"]),
    )


def ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or not b else f"{a / b:.0%}"


def one_process_table(cases: list[dict]) -> list[str]:
    rows = [c for c in cases if "one_process" in c]
    if not rows:
        return []
    L = [
        "",
        "### One process against three",
        "",
        "The same Python producer and consumer code and the same records, with the tower, the "
        'store (`sync="always"`), the producer and then the catch-up consumer all in one '
        "Python process (`dafka.LocalCluster`, as a notebook, a test suite or the demo runs "
        "them), run right after the three-process case above.",
        "",
        "| producer | size | durable records/s, one process | three processes | one / three "
        "| catch-up records/s, one process | three processes | one / three |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in rows:
        one_p, three_p, one_c, three_c = one_process_rates(c)
        err = (c["one_process"].get("error") or "") if not c["one_process"].get("ok") else ""
        L.append(
            f"| {LABELS[c['producer_kind']]} | {run.human_size(c['size'])} "
            f"| {fmt_rate(one_p)} | {fmt_rate(three_p)} | {ratio(one_p, three_p)} "
            f"| {fmt_rate(one_c)} | {fmt_rate(three_c)} | {ratio(one_c, three_c)} |"
            + (f" failed: {err}" if err else "")
        )
    return L


def targets(cases: list[dict]) -> list[str]:
    def rate(kind: str, size: int) -> float | None:
        for c in cases:
            if c["producer_kind"] == kind and c["size"] == size and c["producer"].get("ok"):
                return c["producer"]["records_per_s"]
        return None

    def catchup(kind: str, size: int) -> float | None:
        for c in cases:
            if c["producer_kind"] == kind and c["size"] == size and c["catchup"].get("ok"):
                return c["catchup"]["records_per_s"]
        return None

    rust, many, loop = rate("rust", 100), rate("py-send_many", 100), rate("py-send", 100)
    keyed = {k: (rate(k, 100), rate(v, 100)) for k, v in KEYED.items()}
    keyed_catchup = {k: (catchup(k, 100), catchup(v, 100)) for k, v in KEYED.items()}
    rows = ["| target | verdict | measured |", "|---|---|---|"]

    def row(name: str, ok: bool | None, got: str) -> None:
        rows.append(f"| {name} | {'—' if ok is None else ('met' if ok else 'not met')} | {got} |")

    row(
        "Rust, 100 B, durable: >= 1,000,000 records/s",
        None if rust is None else rust >= 1e6,
        fmt_rate(rust),
    )
    row(
        "Python `send_many`: >= 70% of Rust",
        None if rust is None or many is None else many >= 0.7 * rust,
        "—" if rust is None or many is None else f"{many / rust:.0%}",
    )
    row(
        "Python `send` loop: >= 500,000 records/s",
        None if loop is None else loop >= 5e5,
        fmt_rate(loop),
    )
    for k, (with_meta, plain) in keyed.items():
        row(
            f"{LABELS[k]}, 100 B: >= 80% of the value-only records/s",
            None if with_meta is None or not plain else with_meta >= 0.8 * plain,
            ratio(with_meta, plain),
        )
    for k, (with_meta, plain) in keyed_catchup.items():
        row(
            f"{LABELS[k]}, 100 B, catch-up: >= 80% of the value-only catch-up records/s",
            None if with_meta is None or not plain else with_meta >= 0.8 * plain,
            ratio(with_meta, plain),
        )
    for c in cases:
        if "one_process" not in c:
            continue
        one_p, three_p, one_c, three_c = one_process_rates(c)
        what = f"{LABELS[c['producer_kind']]}, {run.human_size(c['size'])}"
        for kind, one, three in (("durable", one_p, three_p), ("catch-up", one_c, three_c)):
            row(
                f"One process, {what}, {kind}: >= 80% of three processes",
                None if one is None or not three else one >= 0.8 * three,
                ratio(one, three),
            )
    return rows


def plot_memory(mem: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    t = [s["t_s"] for s in mem["samples"]]
    for name, color in (("producer", "#1f77b4"), ("store", "#d62728"), ("consumer", "#2ca02c")):
        ax.plot(t, [(s.get(name) or 0) / 1024 for s in mem["samples"]], label=name, color=color)
    ax.set_xlabel("seconds")
    ax.set_ylabel("RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"dafka end to end: RSS per process, {mem['seconds']} s, {mem['size']} B records")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--role", choices=["py-producer", "py-consumer", "py-one-process"], help=argparse.SUPPRESS
    )
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--towers", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="send_many", help=argparse.SUPPRESS)
    ap.add_argument("--bin", default=str(REPO / "target/release/dafka-bench"))
    ap.add_argument("--records", type=int, default=None, help="records per run (default 2M/500k)")
    ap.add_argument("--size", type=int, action="append", default=[], help="only these sizes")
    ap.add_argument("--producer", action="append", default=[], choices=PRODUCERS)
    ap.add_argument("--memory-seconds", type=int, default=0)
    ap.add_argument("--memory-only", action="store_true")
    ap.add_argument(
        "--note",
        default="Taken on a shared 2-core machine while other work was compiling: "
        "the figures are lower bounds, noisy, not for judging small differences.",
    )
    ap.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    ap.add_argument("--raw-json", default=str(REPO / "bench-out/dafka.json"))
    args = ap.parse_args()
    if args.role:
        args.size = args.size[0] if args.size else 100
        fn = {
            "py-producer": py_producer,
            "py-consumer": py_consumer,
            "py-one-process": py_one_process,
        }[args.role]
        print(json.dumps(fn(args)), flush=True)
        return 0

    raw = Path(args.raw_json)
    old = json.loads(raw.read_text()) if raw.exists() else {}
    (REPO / "target").mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(dir=REPO / "target", prefix="dafka-e2e-"))
    info = json.loads(subprocess.run([args.bin, "info"], capture_output=True, text=True).stdout)
    data = dict(old)
    data.update(
        machine=run.machine_info(info),
        date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        command="python3 benches/dafka_e2e.py " + " ".join(sys.argv[1:]),
        note=args.note,
    )
    try:
        if not args.memory_only:
            cases = []
            for size in args.size or SIZES:
                for producer in args.producer or PRODUCERS:
                    if producer in KEYED and size != min(args.size or SIZES):
                        continue
                    records = args.records or (
                        (2_000_000 if size <= 100 else 500_000)
                        if producer != "py-send"
                        else (1_000_000 if size <= 100 else 250_000)
                    )
                    c = one_case(args.bin, workdir, producer, size, records)
                    if producer in ("py-send", "py-send_many"):
                        # The same records in one process, right after (alternating shapes).
                        c["one_process"] = one_process_case(workdir, producer, size, records)
                    p = c["producer"]
                    print(
                        f"{producer:<13} {size:>5} B: producer {fmt_rate(p.get('records_per_s'))}"
                        f"/s {p.get('error', '')} consumer "
                        f"{fmt_rate(c['consumer'].get('records_per_s'))}/s catch-up "
                        f"{fmt_rate(c['catchup'].get('records_per_s'))}/s",
                        flush=True,
                    )
                    if "one_process" in c:
                        one = c["one_process"]
                        print(
                            f"{'':<13} {'':>5}   one process: durable "
                            f"{fmt_rate(one.get('producer', {}).get('records_per_s'))}/s "
                            f"catch-up {fmt_rate(one.get('catchup', {}).get('records_per_s'))}/s "
                            f"{one.get('error', '')}",
                            flush=True,
                        )
                    cases.append(c)
            data["cases"] = cases
            data["targets"] = targets(cases)
        if args.memory_seconds > 0:
            started = dt.datetime.now(dt.UTC)
            mem = memory_run(args.bin, workdir, args.memory_seconds, 100)
            mem["note"] = f"run at {started:%Y-%m-%d %H:%M} UTC"
            data["memory"] = mem
            plot_memory(mem, REPO / "docs/bench/dafka-memory.png")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    kept = "" if "memory" in data else kept_memory(run.read(args.out))
    run.rewrite_section(Path(args.out), "dafka", render(data, kept), raw, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
