#!/usr/bin/env python3
"""The soak (`make soak`, not part of `make test`): produce -> two stores -> live consumers and
a Spark streaming query for SOAK_SECONDS (30 minutes), with a fault every minute, then checks
that no acknowledged record was lost and rewrites the "Soak" section of BENCHMARKS.md.

    python3 benches/soak.py --seconds 1800          # what `make soak` runs (needs root)
    python3 benches/soak.py --seconds 300           # a short one: one fault of each kind

Processes (every one a child of this script): a tower (`dafka tower`), two stores (Python
processes around `dafka.Store`, sync "always", small segments), two producers sending a known
sequence (value = the offset in 12 decimal digits, padded to 100 B) at a fixed rate and
calling `flush` every second (every record sent before a `flush` that returned is
acknowledged), two live `dafka.Consumer`s ("earliest") and a Spark structured streaming
query (`format("dafka")` into a Parquet sink, local[2]).

Each store runs in its own network namespace, joined to this host by a veth pair, on its own
ext4 filesystem (a loop-mounted image). Dafka nodes found through a tower announce
127.0.0.1, so both ends of each veth rewrite addresses (iptables NAT; `route_localnet` on the
veth ends): in the namespace, 127.0.0.1 outside the store's own port range leads to the host's
loopback; on the host, 127.0.0.1 in that range leads to the store. Nothing leaves the
namespaces and loopback; no UDP is sent.

Faults, one every --fault-interval seconds, in turn (the store alternates):
  kill    SIGKILL a store, restart it on the same directory 2 s later;
  link    `ip link set <veth> down` in the store's namespace for --fault-seconds, then up;
  disk    fill the store's filesystem (fallocate) for --fault-seconds, free it, restart the
          store (a failed write or fdatasync poisons it until reopened, docs/storage.md);
  damage  SIGKILL a store, flip one byte of a sealed segment (not the last), restart it.

RSS and open file descriptors of every process (Spark's JVM and its Python workers
included) are sampled every --sample-interval seconds. At the end: the producers flush, the
consumers and the query are given the acknowledged ends, then each store is started alone and
read back. Exit status 1 if an acknowledged record is in no store or did not reach a consumer
or the Spark sink, or a process this script did not kill died.
"""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import hashlib
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location(
    "bench_e2e", Path(__file__).with_name("dafka_e2e.py")
)
e2e = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules["bench_e2e"] = e2e
_spec.loader.exec_module(e2e)  # type: ignore[union-attr]
run = e2e.run
REPO = run.REPO
sys.path.insert(0, str(REPO / "tests"))
from netns import Lab, Proc, ip  # noqa: E402

TOPIC = "soak"
SIZE = 100
DIGITS = 12  # the offset, in decimal, at the start of every value
TAG = 2  # then "|" and the producer's tag ("p0", "p1"), then "." up to SIZE
FS_MIB = 512
SEGMENT_BYTES = 4 << 20
KINDS = ("kill", "link", "disk", "damage")
MAX_RUNS = 10_000  # missing runs listed per partition
ROLE_DEADLINE = 6 * 3600  # seconds: a role process stops by then whatever happens
COMMENT = "dafka-soak"
SUBNET = "10.231"


def emit(kind: str, **fields: Any) -> None:
    """A line for the orchestrator: KIND then JSON."""
    print(kind, json.dumps(fields), flush=True)


def stdin_lines() -> Callable[[float], str | None]:
    """The orchestrator's lines, read on a thread: `next_line(timeout)`. "STOP" at the end of
    input, and after ROLE_DEADLINE seconds whatever happens, so no role outlives its run."""
    import queue

    lines: queue.Queue[str] = queue.Queue()
    timer = threading.Timer(ROLE_DEADLINE, lambda: lines.put("STOP"))
    timer.daemon = True
    timer.start()

    def read() -> None:
        for line in sys.stdin:
            lines.put(line.rstrip("\n"))
        lines.put("STOP")

    threading.Thread(target=read, daemon=True).start()

    def next_line(timeout: float) -> str | None:
        try:
            return lines.get(timeout=timeout)
        except queue.Empty:
            return None

    return next_line


def value_of(offset: int, tag: bytes) -> bytes:
    return (b"%0*d|" % (DIGITS, offset) + tag).ljust(SIZE, b".")


# --------------------------------------------------------------------------- roles


def role_store(args: argparse.Namespace) -> int:
    import dafka

    next_line = stdin_lines()
    with dafka.Store(args.path, towers=args.towers, sync="always", segment_bytes=SEGMENT_BYTES):
        emit("READY", pid=os.getpid())
        while next_line(3600) != "STOP":
            pass
    return 0


def role_producer(args: argparse.Namespace) -> int:
    import dafka

    next_line = stdin_lines()
    tag = args.tag.encode()
    with dafka.Producer(TOPIC, towers=args.towers) as p:
        emit("READY", partition=p.partition)
        sent = acked = failures = 0
        started = time.monotonic()
        last_flush = started
        while next_line(0.05) is None:
            due = int((time.monotonic() - started) * args.rate)
            if due > sent:
                n = min(due - sent, max(1, args.rate))
                first = p.send_many([value_of(sent + i, tag) for i in range(n)])
                if first != sent:
                    emit("ERROR", error=f"send_many gave offset {first}, expected {sent}")
                    return 1
                sent += n
            if time.monotonic() - last_flush >= 1.0:
                last_flush = time.monotonic()
                upto = sent
                try:
                    p.flush(timeout=args.flush_timeout)
                    acked = upto
                except dafka.DafkaError as e:
                    failures += 1
                    emit("FLUSH_FAILED", error=str(e)[:200])
                emit("PROGRESS", sent=sent, acked=acked, failures=failures)
        try:
            p.flush(timeout=120)
            acked = sent
        except dafka.DafkaError as e:
            emit("FLUSH_FAILED", error=str(e)[:200])
        emit("FINAL", partition=p.partition, sent=sent, acked=acked, flush_failures=failures)
    return 0


class Seen:
    """Offsets delivered per partition: a bitmap each, duplicates and bad values counted."""

    def __init__(self) -> None:
        self.bits: dict[str, bytearray] = {}
        self.count = 0
        self.duplicates = 0
        self.bad_values = 0

    def add(self, partition: str, offset: int, value: bytes | None) -> None:
        bits = self.bits.setdefault(partition, bytearray())
        if offset >= len(bits):
            bits.extend(b"\0" * (offset + 1 - len(bits) + 65536))
        if bits[offset]:
            self.duplicates += 1
        bits[offset] = 1
        self.count += 1
        if value is None or value != value_of(offset, value[DIGITS + 1 : DIGITS + 1 + TAG]):
            self.bad_values += 1

    def add_batch(self, batch: Any) -> int:
        cols = batch.to_pydict()
        for partition, offset, value in zip(
            cols["partition"], cols["offset"], cols["value"], strict=True
        ):
            self.add(partition, offset, value)
        return batch.num_rows

    def has_all(self, ends: dict[str, int]) -> bool:
        for p, end in ends.items():
            bits = self.bits.get(p, bytearray())
            if len(bits) < end or bits.count(0, 0, end):
                return False
        return True

    def missing(self, partition: str, end: int) -> list[list[int]]:
        """Runs [from, to) of offsets below `end` not delivered (at most MAX_RUNS)."""
        bits = self.bits.get(partition, bytearray())
        bits = bits + b"\0" * max(0, end - len(bits))
        runs: list[list[int]] = []
        at = bits.find(0, 0, end)
        while at >= 0 and len(runs) < MAX_RUNS:
            stop = bits.find(1, at, end)
            stop = end if stop < 0 else stop
            runs.append([at, stop])
            at = bits.find(0, stop, end)
        return runs

    def report(self, acked: dict[str, int], sent: dict[str, int]) -> dict[str, Any]:
        lost = {p: self.missing(p, end) for p, end in acked.items()}
        unsent = {p: self.missing(p, end) for p, end in sent.items()}
        return {
            "delivered": self.count,
            "duplicates": self.duplicates,
            "bad_values": self.bad_values,
            "acked_missing": sum(b - a for runs in lost.values() for a, b in runs),
            "acked_missing_runs": {p: r for p, r in lost.items() if r},
            "sent_missing": sum(b - a for runs in unsent.values() for a, b in runs),
        }


def read_until(poll: Callable[[], Any], seen: Seen, ends: dict[str, int], idle: float) -> None:
    """Polls until every offset below `ends` was delivered, `idle` seconds pass without one, or
    ten minutes in all."""
    last = started = time.monotonic()
    while not seen.has_all(ends):
        now = time.monotonic()
        if now - last >= idle or now - started >= 600:
            return
        if seen.add_batch(poll()):
            last = time.monotonic()


def role_consumer(args: argparse.Namespace) -> int:
    import dafka

    next_line = stdin_lines()
    seen = Seen()
    with dafka.Consumer(TOPIC, towers=args.towers, offset_reset="earliest") as c:
        emit("READY")
        last_report = time.monotonic()
        while True:
            seen.add_batch(c.poll(max_records=10_000, timeout=0.2))
            if time.monotonic() - last_report >= 5:
                last_report = time.monotonic()
                emit("PROGRESS", delivered=seen.count, duplicates=seen.duplicates)
            line = next_line(0)
            if line is None:
                continue
            if line == "STOP":
                return 0
            ends = json.loads(line.split(" ", 1)[1])
            read_until(lambda: c.poll(max_records=10_000, timeout=0.5), seen, ends["sent"], 90)
            # Consumer.lost (offsets skipped as held by no store) is newer than this script.
            lost = getattr(c, "lost", None)
            emit("FINAL", consumer_lost=lost, **seen.report(ends["acked"], ends["sent"]))
            return 0


def role_verify(args: argparse.Namespace) -> int:
    """What one store alone serves of [0, end) of every partition (the only store running)."""
    import dafka

    ends = json.loads(args.ends)
    seen = Seen()
    with dafka.PartitionReader(args.towers) as r:
        bounds = r.offsets(TOPIC, timeout=30)
        for partition, end in ends.items():
            r.assign(TOPIC, partition, 0, end)
            read_until(lambda: r.poll(max_records=10_000, timeout=0.5), seen, {partition: end}, 30)
            r.unassign(TOPIC, partition)
    emit("FINAL", bounds=bounds, **seen.report(ends, ends))
    return 0


def spark_rows(query: Any, read: dict[int, int]) -> int:
    for p in query.recentProgress:
        read[p["batchId"]] = p["numInputRows"]
    return sum(read.values())


def spark_ends(query: Any) -> dict[str, int]:
    """The committed end offsets of the query's last batch, {partition: next}."""
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return {}
    end = progress["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    return {p: int(o) for p, o in (end or {}).get(TOPIC, {}).items()}


def sink_report(spark: Any, sink: str, acked: dict[str, int], sent: dict[str, int]) -> dict:
    """Every row of the Parquet sink (Spark reads only committed files, _spark_metadata)."""
    from pyspark.sql import functions as F

    df = spark.read.parquet(sink)
    expected = F.concat(
        F.lpad(F.col("offset").cast("string"), DIGITS, "0").cast("binary"),
        F.lit("|").cast("binary"),
        F.substring(F.col("value"), DIGITS + 2, TAG),
        F.lit("." * (SIZE - DIGITS - 1 - TAG)).cast("binary"),
    )
    bad = df.where(F.col("value") != expected).count()
    table = df.select("partition", "offset").toArrow()
    seen = Seen()
    for partition, offset in zip(
        table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True
    ):
        seen.add(partition, offset, value_of(offset, b"p0"))
    out = seen.report(acked, sent)
    out["bad_values"] = bad
    return out


def role_spark(args: argparse.Namespace) -> int:
    import dafka.spark

    next_line = stdin_lines()
    spark = dafka.spark.local_session("dafka-soak")
    query = (
        spark.readStream.format("dafka")
        .option("towers", args.towers)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .load()
        .select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", args.sink)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime="5 seconds")
        .start()
    )
    emit("READY", pid=os.getpid())
    read: dict[int, int] = {}
    while True:
        line = next_line(5)
        if not query.isActive:
            emit("ERROR", error=str(query.exception())[:2000])
            return 1
        if line is None:
            emit("PROGRESS", rows=spark_rows(query, read))
            continue
        if line == "STOP":
            query.stop()
            return 0
        ends = json.loads(line.split(" ", 1)[1])
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and query.isActive:
            got = spark_ends(query)
            if all(got.get(p, 0) >= end for p, end in ends["sent"].items()):
                break
            time.sleep(2)
        query.stop()
        try:
            report = sink_report(spark, args.sink, ends["acked"], ends["sent"])
        except Exception as e:  # reported to the orchestrator, which fails the run
            emit("ERROR", error=f"reading the sink: {e}"[:2000])
            return 1
        emit("FINAL", rows_committed=spark_rows(query, read), **report)
        spark.stop()
        return 0


ROLES = {
    "store": role_store,
    "producer": role_producer,
    "consumer": role_consumer,
    "verify": role_verify,
    "spark": role_spark,
}


# --------------------------------------------------------------------------- the host side


def sh(*argv: str) -> str:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True).stdout


def purge_stale_rules() -> None:
    """Removes NAT rules a killed earlier soak left (their comment names a dead pid)."""
    for line in sh("iptables", "-t", "nat", "-S").splitlines():
        if f"{COMMENT}-" not in line or not line.startswith("-A "):
            continue
        pid = int(line.split(f"{COMMENT}-")[1].split()[0].strip('"'))
        if not Path(f"/proc/{pid}").exists():
            subprocess.run(["iptables", "-t", "nat", "-D", *line.split()[1:]], check=False)


class StoreHost:
    """A store's namespace, veth, NAT, filesystem and process."""

    def __init__(self, lab: Lab, work: Path, index: int) -> None:
        self.name = "store-" + "ab"[index]
        self.lab, self.index = lab, index
        self.ns = lab.namespace()
        self.host_if, self.ns_if = f"sk{os.getpid() % 100000}h{index}", f"skn{index}"
        self.ports = (61000 + 500 * index, 61499 + 500 * index)
        self.rules: list[list[str]] = []
        self.image = work / f"{self.name}.img"
        self.mnt = work / f"{self.name}-fs"
        self.path = self.mnt / "store"
        self.proc: Proc | None = None
        self.log = work / f"{self.name}.log"

    def setup(self) -> None:
        """Wires the namespace and makes the filesystem (`unwire` undoes what was done)."""
        self._wire()
        self._filesystem()

    def _wire(self) -> None:
        net, h, n = f"{SUBNET}.{self.index}", self.host_if, self.ns_if
        ip("link", "add", h, "type", "veth", "peer", "name", n, "netns", self.ns)
        ip("addr", "add", f"{net}.1/30", "dev", h)
        ip("link", "set", h, "up")
        ip("-n", self.ns, "addr", "add", f"{net}.2/30", "dev", n)
        ip("-n", self.ns, "link", "set", n, "up")
        lo, hi = self.ports
        sh("sysctl", "-qw", f"net.ipv4.conf.{h}.route_localnet=1")
        inside = ["ip", "netns", "exec", self.ns]
        sh(*inside, "sysctl", "-qw", f"net.ipv4.ip_local_port_range={lo} {hi}")
        sh(*inside, "sysctl", "-qw", f"net.ipv4.conf.{n}.route_localnet=1")
        tag = ["-m", "comment", "--comment", f"{COMMENT}-{os.getpid()}"]
        tcp_lo = ["-d", "127.0.0.1/32", "-p", "tcp"]
        sh("sysctl", "-qw", f"net.ipv4.conf.{h}.forwarding=1")
        ports = ["--dport", f"{lo}:{hi}"]
        # From the host: 127.0.0.1 in the store's range is the store. From the other store's
        # namespace (through the host, forwarded): the same. From this store: the host's
        # loopback (the catch-all, after every store's forwarding rule, which go first).
        from_ns = ["!", "-i", h, "-d", f"{SUBNET}.0.0/16", "-p", "tcp", *ports]
        rules = [
            ["-A", "OUTPUT", *tcp_lo, *ports, "-j", "DNAT", "--to", f"{net}.2", *tag],
            ["-A", "POSTROUTING", "-o", h, "-j", "SNAT", "--to-source", f"{net}.1", *tag],
            ["-I", "PREROUTING", *from_ns, "-j", "DNAT", "--to", f"{net}.2", *tag],
            ["-A", "PREROUTING", "-i", h, "-p", "tcp", "-j", "DNAT", "--to", "127.0.0.1", *tag],
        ]
        for rule in rules:
            sh("iptables", "-t", "nat", *rule)
            self.rules.append(rule)
        for rule in (
            ["OUTPUT", *tcp_lo, "!", "--dport", f"{lo}:{hi}", "-j", "DNAT", "--to", f"{net}.1"],
            ["POSTROUTING", "-o", n, "-j", "SNAT", "--to-source", f"{net}.2"],
            ["PREROUTING", "-i", n, "-p", "tcp", "-j", "DNAT", "--to", "127.0.0.1"],
        ):
            sh(*inside, "iptables", "-t", "nat", "-A", *rule)

    def _filesystem(self) -> None:
        with open(self.image, "wb") as f:
            f.truncate(FS_MIB << 20)
        sh("mkfs.ext4", "-q", "-F", "-m", "0", str(self.image))
        self.mnt.mkdir()
        sh("mount", "-o", "loop", str(self.image), str(self.mnt))

    def unwire(self) -> None:
        for rule in self.rules:
            subprocess.run(["iptables", "-t", "nat", "-D", *rule[1:]], check=False)
        self.rules = []
        if self.mnt.is_mount():
            subprocess.run(["umount", str(self.mnt)], check=False)

    def start(self, towers: str, alone: bool = False) -> float:
        """Starts the store (in its namespace unless `alone`); seconds until it was READY."""
        argv = role_argv("store", towers, "--path", str(self.path))
        started = time.monotonic()
        if alone:
            self.proc = spawn(argv, self.log)
        else:
            self.proc = self.lab.run(self.ns, logged(argv, self.log))
        self.proc.expect(lambda w: w[0] == "READY", timeout=120)
        return time.monotonic() - started

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.proc.kill()
            self.proc.proc.wait()

    def link(self, up: bool) -> None:
        self.lab.link(self.ns, self.ns_if, up)

    def fill(self) -> int:
        """Fills the filesystem with one preallocated file; returns the bytes still free."""
        fd = os.open(self.mnt / "filler", os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            st = os.statvfs(self.mnt)
            chunk, at = st.f_bfree * st.f_frsize, 0
            while chunk >= 4096:
                try:
                    os.posix_fallocate(fd, at, chunk)
                    at += chunk
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    chunk //= 2
        finally:
            os.close(fd)
        st = os.statvfs(self.mnt)
        return st.f_bfree * st.f_frsize

    def free(self) -> None:
        (self.mnt / "filler").unlink(missing_ok=True)

    def damage(self, rng: random.Random) -> dict[str, Any]:
        """Flips one byte of a sealed segment (any but the last) past its header."""
        segments = sorted(self.path.glob("*.log"))
        if len(segments) < 2:
            return {"damaged": None, "why": f"{len(segments)} segment(s): none sealed yet"}
        seg = rng.choice(segments[:-1])
        size = seg.stat().st_size
        pos = rng.randrange(20, size)
        with open(seg, "r+b") as f:
            f.seek(pos)
            old = f.read(1)[0]
            new = old ^ rng.randrange(1, 256)
            f.seek(pos)
            f.write(bytes([new]))
        return {"damaged": seg.name, "position": pos, "old": old, "new": new, "size": size}


def role_argv(role: str, towers: str, *extra: str) -> list[str]:
    script = str(Path(__file__).resolve())
    return [sys.executable, script, "--role", role, "--towers", towers, *extra]


def logged(argv: list[str], log: Path) -> list[str]:
    """`argv` with its stderr appended to `log` (the pid stays the process's: exec)."""
    return ["sh", "-c", 'exec "$@" 2>>"$0"', str(log), *argv]


def spawn(argv: list[str], log: Path) -> Proc:
    return Proc(logged(argv, log))


def logged_lost(log: Path) -> int:
    """Offsets a consumer's log says it skipped, held by no store (``from=A to=B`` lines)."""
    lost = 0
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        if "held by no store" in line:
            fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
            lost += int(fields.get("to", 0)) - int(fields.get("from", 0))
    return lost


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class Soak:
    """The orchestration: processes, faults, samples, the end checks."""

    def __init__(
        self, args: argparse.Namespace, lab: Lab, work: Path, hosts: list[StoreHost]
    ) -> None:
        self.args, self.lab, self.work = args, lab, work
        self.rng = random.Random(args.seed)
        self.t0 = time.monotonic()
        self.events: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []
        self.deaths: list[dict[str, Any]] = []
        self.progress: dict[str, dict[str, Any]] = {}
        self.procs: dict[str, Proc] = {}
        self.stores = hosts  # filled one by one, so a failure half-way is still cleaned up
        for i in range(2):
            hosts.append(StoreHost(lab, work, i))
            hosts[-1].setup()
        self.towers = ""

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    def log(self, text: str) -> None:
        print(f"[{self.now():7.1f} s] {text}", flush=True)

    def start_proc(self, name: str, argv: list[str]) -> Proc:
        p = spawn(argv, self.work / f"{name}.log")
        self.lab.procs.append(p)
        self.procs[name] = p
        return p

    def start(self) -> None:
        tower = self.start_proc(
            "tower", [sys.executable, "-m", "dafka.cli", "tower", "--sub", "tcp://127.0.0.1:0"]
        )
        self.towers = tower.expect(lambda w: w[0].startswith("tcp://"), timeout=30)[0]
        for s in self.stores:
            s.start(self.towers)
            self.lab.procs.append(s.proc)
        for i in range(self.args.producers):
            argv = role_argv("producer", self.towers, "--tag", f"p{i}", "--rate")
            argv.append(str(self.args.rate // self.args.producers))
            self.start_proc(f"producer-{i}", argv).expect(lambda w: w[0] == "READY")
        for i in range(self.args.consumers):
            self.start_proc(f"consumer-{i}", role_argv("consumer", self.towers))
            self.procs[f"consumer-{i}"].expect(lambda w: w[0] == "READY")
        spark = ["--sink", str(self.work / "sink"), "--checkpoint", str(self.work / "ckpt")]
        self.start_proc("spark-driver", role_argv("spark", self.towers, *spark))
        self.procs["spark-driver"].expect(lambda w: w[0] == "READY", timeout=180)
        self.t0 = time.monotonic()
        self.log(f"started: towers {self.towers}, stores in {[s.ns for s in self.stores]}")

    # ---- faults

    def event(self, kind: str, store: StoreHost, **detail: Any) -> None:
        self.events.append({"t_s": self.now(), "kind": kind, "store": store.name, **detail})
        self.log(f"{kind} {store.name} {json.dumps(detail) if detail else ''}")

    def restart(self, store: StoreHost, why: str) -> None:
        try:
            secs = store.start(self.towers)
            self.lab.procs.append(store.proc)
            self.event("restarted", store, after=why, ready_s=round(secs, 2))
        except AssertionError as e:
            self.event("restart-failed", store, after=why, error=str(e)[:300])
            self.deaths.append({"t_s": self.now(), "process": store.name, "why": "no restart"})

    def fault(self, k: int) -> tuple[float, Callable[[], None]] | None:
        """Starts fault `k`; returns (when, what) to end it, if it lasts."""
        kind = KINDS[k % len(KINDS)]
        store = self.stores[(k + k // len(KINDS)) % 2]
        hold = self.args.fault_seconds
        if kind == "kill":
            store.kill()
            self.event("kill", store)
            return 2.0, lambda: self.restart(store, "kill")
        if kind == "link":
            store.link(False)
            self.event("link-down", store)

            def up() -> None:
                store.link(True)
                self.event("link-up", store)

            return hold, up
        if kind == "disk":
            seen = store.log.stat().st_size if store.log.exists() else 0
            self.event("disk-full", store, free_bytes=store.fill())

            def free() -> None:
                store.free()
                with open(store.log, "rb") as f:
                    f.seek(seen)
                    poisoned = b"store poisoned" in f.read()
                self.event("disk-freed", store, poisoned=poisoned)
                assert store.proc is not None
                rc = store.proc.stop(timeout=15)
                self.event("stopped", store, rc=rc)
                self.restart(store, "disk-full")

            return hold, free
        store.kill()
        self.event("damage", store, **store.damage(self.rng))
        self.restart(store, "damage")
        return None

    # ---- samples

    def sample(self) -> None:
        row: dict[str, Any] = {"t_s": self.now()}
        for name, p in self.owned():
            row[name] = {"rss_kib": e2e.rss_kib(p.proc.pid), "fds": fds(p.proc.pid)}
        spark = self.procs.get("spark-driver")
        if spark is not None:
            workers = {"rss_kib": 0, "fds": 0, "count": 0}
            for pid in descendants(spark.proc.pid):
                rss, n = e2e.rss_kib(pid), fds(pid)
                if rss is None or n is None:
                    continue
                if "java" in cmdline(pid).split(" ", 1)[0]:
                    row["spark-jvm"] = {"rss_kib": rss, "fds": n}
                else:
                    workers["rss_kib"] += rss
                    workers["fds"] += n
                    workers["count"] += 1
            row["spark-py-workers"] = workers
        self.samples.append(row)

    def owned(self) -> list[tuple[str, Proc]]:
        named = list(self.procs.items())
        return named + [(s.name, s.proc) for s in self.stores if s.proc is not None]

    def check_deaths(self, expected: set[int]) -> None:
        for name, p in self.owned():
            rc = p.proc.poll()
            if rc is not None and p.proc.pid not in expected:
                expected.add(p.proc.pid)
                self.deaths.append({"t_s": self.now(), "process": name, "rc": rc})
                self.log(f"DIED: {name} (pid {p.proc.pid}, status {rc}): see its log")

    def drain(self) -> None:
        for name, p in self.procs.items():
            while not p.lines.empty():
                words = p.lines.get_nowait().split(" ", 1)
                if words[0] in ("PROGRESS", "ERROR", "FLUSH_FAILED") and len(words) == 2:
                    self.progress.setdefault(name, {}).update(json.loads(words[1]))
                    if words[0] != "PROGRESS":
                        self.log(f"{name}: {words[0]} {words[1]}")

    # ---- the run

    def loop(self) -> None:
        a = self.args
        pending: list[tuple[float, Callable[[], None]]] = []
        expected: set[int] = set()
        next_fault, next_sample, k = a.fault_interval, 0.0, 0
        while self.now() < a.seconds:
            t = self.now()
            for item in [x for x in pending if x[0] <= t]:
                pending.remove(item)
                item[1]()
            if t >= next_fault and not pending:
                pids = {s.proc.proc.pid for s in self.stores if s.proc is not None}
                end = self.fault(k)
                expected |= pids
                if end is not None:
                    pending.append((self.now() + end[0], end[1]))
                next_fault, k = next_fault + a.fault_interval, k + 1
            if t >= next_sample:
                self.sample()
                self.check_deaths(expected)
                next_sample += a.sample_interval
            self.drain()
            time.sleep(0.2)
        for _, end in pending:
            end()
        self.sample()
        self.check_deaths(expected)

    def finish(self) -> dict[str, Any]:
        """Producers flush; consumers, the query and then each store alone are checked."""
        finals: dict[str, dict[str, Any]] = {}
        for name in [n for n in self.procs if n.startswith("producer")]:
            self.procs[name].send("STOP")
            finals[name] = self.final(name, 180)
        acked = {f["partition"]: f["acked"] for f in finals.values() if "partition" in f}
        sent = {f["partition"]: f["sent"] for f in finals.values() if "partition" in f}
        self.log(f"producers done: acked {acked}, sent {sent}")
        ends = "END " + json.dumps({"acked": acked, "sent": sent})
        for name in [n for n in self.procs if n.startswith(("consumer", "spark"))]:
            self.procs[name].send(ends)
        for name in [n for n in self.procs if n.startswith(("consumer", "spark"))]:
            finals[name] = self.final(name, 420)
            finals[name]["logged_lost"] = logged_lost(self.work / f"{name}.log")
            self.log(f"{name}: {json.dumps(finals[name])}")
        for s in self.stores:
            assert s.proc is not None
            s.proc.stop(timeout=30)
        self.procs["tower"].proc.terminate()
        self.procs["tower"].proc.wait(timeout=30)
        for s in self.stores:
            finals[s.name] = self.verify(s, acked)
            self.log(f"{s.name} alone: {json.dumps(finals[s.name])}")
        return {"acked": acked, "sent": sent, "finals": finals}

    def final(self, name: str, timeout: float) -> dict[str, Any]:
        try:
            words = self.procs[name].expect(lambda w: w[0] in ("FINAL", "ERROR"), timeout)
        except AssertionError as e:
            return {"error": str(e)[-500:]}
        out = json.loads(" ".join(words[1:]))
        return out if words[0] == "FINAL" else {"error": out.get("error")}

    def verify(self, store: StoreHost, acked: dict[str, int]) -> dict[str, Any]:
        tower = spawn(
            [sys.executable, "-m", "dafka.cli", "tower", "--sub", "tcp://127.0.0.1:0"],
            self.work / "verify-tower.log",
        )
        self.lab.procs.append(tower)
        try:
            towers = tower.expect(lambda w: w[0].startswith("tcp://"), timeout=30)[0]
            store.start(towers, alone=True)
            self.lab.procs.append(store.proc)
            v = spawn(
                role_argv("verify", towers, "--ends", json.dumps(acked)),
                self.work / "verify.log",
            )
            self.lab.procs.append(v)
            words = v.expect(lambda w: w[0] == "FINAL", timeout=600)
            return json.loads(" ".join(words[1:]))
        except AssertionError as e:
            return {"error": str(e)[-500:]}
        finally:
            if store.proc is not None:
                store.proc.stop(timeout=30)
            tower.proc.terminate()
            tower.proc.wait(timeout=30)


# --------------------------------------------------------------------------- report


def verdict(data: dict[str, Any]) -> list[str]:
    """Why the run failed (empty: it passed)."""
    finals, acked = data["finals"], data["acked"]
    why = [
        f"{n}: {f['error'][:200]}"
        for n, f in finals.items()
        if n.startswith("producer") and "error" in f
    ]
    if not acked:
        why.append("no producer reported acknowledged records")
    stores = [v for k, v in finals.items() if k.startswith("store")]
    lost_everywhere = 0
    for partition, end in acked.items():
        runs = [s.get("acked_missing_runs", {}).get(partition, []) for s in stores]
        if any("error" in s for s in stores):
            why.append("a store could not be read back alone")
            break
        holes = [set(o for a, b in r for o in range(a, b)) for r in runs]
        lost_everywhere += len(set.intersection(*holes)) if holes else end
    data["acked_lost_from_stores"] = lost_everywhere
    if lost_everywhere:
        why.append(f"{lost_everywhere} acknowledged records are in no store")
    for name, f in finals.items():
        if name.startswith(("consumer", "spark")):
            if "error" in f:
                why.append(f"{name}: {f['error'][:200]}")
            elif f["acked_missing"]:
                why.append(f"{name} did not get {f['acked_missing']} acknowledged records")
    for d in data["deaths"]:
        why.append(f"{d['process']} died unexpectedly at {d['t_s']} s")
    return why


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = data["samples"]
    names = sorted({k for s in samples for k in s if k != "t_s"})
    fig, (rss_ax, fd_ax) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    t = [s["t_s"] / 60 for s in samples]
    rss_ax.set_prop_cycle(color=plt.get_cmap("tab20").colors[: len(names)])
    fd_ax.set_prop_cycle(color=plt.get_cmap("tab20").colors[: len(names)])
    for name in names:
        rss = [(s.get(name) or {}).get("rss_kib") for s in samples]
        n = [(s.get(name) or {}).get("fds") for s in samples]
        rss_ax.plot(t, [None if v is None else v / 1024 for v in rss], label=name, lw=1)
        fd_ax.plot(t, n, label=name, lw=1)
    colors = {"kill": "#d62728", "link-down": "#1f77b4", "disk-full": "#ff7f0e", "damage": "k"}
    for e in data["events"]:
        if e["kind"] in colors:
            for ax in (rss_ax, fd_ax):
                ax.axvline(e["t_s"] / 60, color=colors[e["kind"]], lw=0.8, ls="--", alpha=0.6)
    for kind, color in colors.items():
        rss_ax.plot([], [], color=color, ls="--", label=f"fault: {kind}")
    rss_ax.set_ylabel("RSS (MiB)")
    fd_ax.set_ylabel("open fds")
    fd_ax.set_xlabel("minutes")
    rss_ax.set_yscale("log")
    rss_ax.set_title(f"dafka soak: {data['seconds'] / 60:.0f} min, {len(data['events'])} events")
    rss_ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1))
    for ax in (rss_ax, fd_ax):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def span(samples: list[dict[str, Any]], name: str, key: str) -> tuple[Any, Any, Any]:
    """First, last and peak value of `key` for process `name`."""
    xs = [s[name][key] for s in samples if s.get(name) and s[name].get(key) is not None]
    return (xs[0], xs[-1], max(xs)) if xs else (None, None, None)


HOW = [
    "- *Acknowledged*: sent before a `flush()` that returned (`min_acks` 1: one store has it "
    "on disk, fdatasync'd). Producers send at a fixed rate and flush every second.",
    "- *Network*: each store runs in its own network namespace behind a veth pair. Nodes "
    "found through a tower announce 127.0.0.1, so both ends rewrite addresses (iptables NAT, "
    "`route_localnet`): the store's port range on the host's loopback leads to it, and "
    "127.0.0.1 outside that range in its namespace leads to the host. *Link down* is "
    "`ip link set` on the namespace's end.",
    "- *Disk full*: `fallocate` of every free block of the store's ext4 (about 10 MiB of "
    "reserved clusters stay, which writes cannot use); its next write fails with ENOSPC and "
    "poisons the store (`poisoned` below: its log said so). The file is removed after the "
    "fault's seconds and the store stopped (`close`) and started again on the same "
    "directory, as docs/storage.md says a poisoned store needs.",
    "- *Damage*: the store is SIGKILLed, one byte of a random sealed segment (any but the "
    "last, past the 20-byte header) is XORed with a random non-zero byte, the store restarted.",
    "- *Each store alone*: after the run, each store is started alone with a tower and a "
    "`PartitionReader` reads `[0, acknowledged end)` of every partition from it. Consumers and "
    "the sink check every value byte for byte; the sink is read back through Spark (committed "
    "files only). *Skipped as held by no store*: the consumer's own log lines saying so.",
]


def render(data: dict[str, Any]) -> str:
    begin, end = run.SECTIONS["soak"]
    m, finals = data["machine"], data["finals"]
    why = data["verdict"]
    L = [
        begin,
        "## Soak",
        "",
        f"`make soak SOAK_SECONDS={data['seconds']}` ({data['date']}, commit `{m['commit']}`, "
        f"extension `{data['wheel']['native']}` built {data['wheel']['built']}, sha256 "
        f"`{data['wheel']['sha256']}`; "
        f"{m['cpu']}, {m['cores']} cores, {m['ram_gib']:.0f} GiB, Linux {m['kernel']}, load "
        f"{' '.join(m['load'])} at the start). {data['producers']} producers at "
        f"{data['rate']:,} records/s of {SIZE} B in all, 2 stores (sync always, "
        f"{SEGMENT_BYTES >> 20} MiB segments, each on its own {FS_MIB} MiB ext4 in its own "
        f"network namespace), {data['consumers']} live consumers and a Spark streaming query "
        "(local[2], Parquet sink); a fault every "
        f"{data['fault_interval']} s (kill, link down {data['fault_seconds']} s, disk full "
        f"{data['fault_seconds']} s then a restart, a flipped byte in a sealed segment).",
        "",
        *HOW,
        "",
        f"**Verdict: {'PASS' if not why else 'FAIL: ' + '; '.join(why)}.**",
        "",
        "| | records |",
        "|---|---:|",
        f"| sent | {sum(data['sent'].values()):,} |",
        f"| acknowledged (a `flush` returned after them) | {sum(data['acked'].values()):,} |",
        f"| acknowledged and in no store (must be 0) | {data['acked_lost_from_stores']:,} |",
    ]
    for name in [n for n in finals if n.startswith("store")]:
        f = finals[name]
        L.append(
            f"| {name} alone: acknowledged it does not serve | "
            f"{f.get('acked_missing', f.get('error', '?'))} |"
        )
    for name in [n for n in finals if n.startswith(("consumer", "spark"))]:
        f = finals[name]
        if "error" in f:
            L.append(f"| {name}: error | {f['error'][:200]} |")
            continue
        L.append(
            f"| {name}: delivered / duplicates / acknowledged missing / bad values / "
            f"skipped as held by no store (its log) | {f['delivered']:,} / {f['duplicates']:,}"
            f" / {f['acked_missing']:,} / {f['bad_values']:,} / {f.get('logged_lost', 0):,}"
            + ("" if f.get("consumer_lost") is None else f" (`lost`: {f['consumer_lost']:,})")
            + " |"
        )
    L += [
        "",
        "| process | RSS MiB first / last / peak | fds first / last / peak |",
        "|---|---|---|",
    ]
    names = sorted({k for s in data["samples"] for k in s if k != "t_s"})
    for name in names:
        r, f = span(data["samples"], name, "rss_kib"), span(data["samples"], name, "fds")
        mib = " / ".join("—" if v is None else f"{v / 1024:,.0f}" for v in r)
        label = name
        if name == "spark-py-workers":
            n = span(data["samples"], name, "count")
            label = f"{name} (sum over Spark's Python processes: {n[0]} / {n[1]} / {n[2]})"
        L.append(f"| {label} | {mib} | {' / '.join('—' if v is None else str(v) for v in f)} |")
    L += ["", "Faults and restarts (seconds from the start):", ""]
    for e in data["events"]:
        rest = {k: v for k, v in e.items() if k not in ("t_s", "kind", "store")}
        L.append(f"- {e['t_s']:.0f} s {e['kind']} {e['store']} {json.dumps(rest) if rest else ''}")
    L += ["", "![soak: RSS and fds over time](docs/bench/soak.png)", "", end]
    return "\n".join(L) + "\n"


def pin_package(work: Path) -> dict[str, Any]:
    """Copies the installed dafka package into `work` and puts it first on every child's
    PYTHONPATH, so that a wheel reinstalled during the run does not mix versions (restarted
    stores, new Spark workers); returns what identifies the copy."""
    spec = importlib.util.find_spec("dafka")
    assert spec is not None and spec.submodule_search_locations, "dafka is not installed"
    src = Path(next(iter(spec.submodule_search_locations)))
    shutil.copytree(src, work / "pkg" / "dafka", ignore=shutil.ignore_patterns("__pycache__"))
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(work / "pkg") + (os.pathsep + old if old else "")
    native = next(src.glob("_native*.so"))
    digest = hashlib.sha256(native.read_bytes()).hexdigest()[:16]
    mtime = dt.datetime.fromtimestamp(native.stat().st_mtime, dt.UTC)
    return {"native": native.name, "sha256": digest, "built": f"{mtime:%Y-%m-%d %H:%M} UTC"}


def interrupt(*_: object) -> None:
    """SIGTERM ends the run as Ctrl-C does: every namespace, rule and mount is removed."""
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", choices=sorted(ROLES), help=argparse.SUPPRESS)
    for hidden in ("--towers", "--path", "--tag", "--sink", "--checkpoint", "--ends"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--flush-timeout", type=float, default=5.0, help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=int, default=1800)
    ap.add_argument("--rate", type=int, default=1000, help="records/s over all producers")
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--fault-interval", type=int, default=60)
    ap.add_argument("--fault-seconds", type=int, default=20)
    ap.add_argument("--sample-interval", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    ap.add_argument("--raw-json", default=str(REPO / "bench-out/soak.json"))
    ap.add_argument("--plot", default=str(REPO / "docs/bench/soak.png"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    if args.role:
        return ROLES[args.role](args)
    if os.geteuid() != 0:
        print("soak: needs root (network namespaces, iptables, loop mounts)", file=sys.stderr)
        return 2
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    signal.signal(signal.SIGTERM, interrupt)
    purge_stale_rules()
    (REPO / "target").mkdir(exist_ok=True)
    work = REPO / "target" / f"soak-{os.getpid()}"
    work.mkdir()
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    data: dict[str, Any] = {"machine": run.machine_info({}), "date": date}
    data["wheel"] = pin_package(work)
    data.update({k: getattr(args, k) for k in ("seconds", "rate", "producers", "consumers")})
    data.update(fault_interval=args.fault_interval, fault_seconds=args.fault_seconds)
    soak: Soak | None = None
    hosts: list[StoreHost] = []
    try:
        with Lab() as lab:
            try:
                soak = Soak(args, lab, work, hosts)
                soak.start()
                soak.loop()
                data.update(soak.finish())
            finally:
                for host in hosts:
                    host.kill()
                    host.unwire()
    finally:
        if not args.keep and not any(h.mnt.is_mount() for h in hosts):
            shutil.rmtree(work, ignore_errors=True)
    assert soak is not None
    data.update(events=soak.events, samples=soak.samples, deaths=soak.deaths)
    data["producer_progress"] = soak.progress
    data["verdict"] = verdict(data)
    plot(data, Path(args.plot))
    run.rewrite_section(Path(args.out), "soak", render(data), Path(args.raw_json), data)
    print("soak:", "PASS" if not data["verdict"] else "FAIL: " + "; ".join(data["verdict"]))
    return 1 if data["verdict"] else 0


if __name__ == "__main__":
    sys.exit(main())
