#!/usr/bin/env python3
"""Spark on a standalone cluster (`make bench-spark`, after benches/spark.py): a master and
two workers of one core each, started with `spark-class` from the pip pyspark package on
loopback, started and stopped here. Each Spark application is a new driver process (this
script with --driver), so its executors and their Python workers start cold:

- batch: the first read of a new application (cold) and the reads after it (warm) of the
  same records through format("dafka") and createDataFrame(pyarrow.Table), applications of
  the two paths alternating;
- streaming: a query's rows/s with producers writing as fast as it reads;
- task start (Spark's launch time of the task) to its first Arrow batch, cold and warm.

Rewrites the "Spark, standalone cluster" section of BENCHMARKS.md.

    python3 benches/spark_cluster.py                        # 400,000 rows, 4 partitions
    python3 benches/spark_cluster.py --rows 100000 --apps 1 --stream-seconds 5   # a check

`StandaloneCluster` is also what tests/test_spark_standalone.py runs its cluster with.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Self

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from ports import free_tcp_port as free_port  # outside the ephemeral range: see tests/ports.py

REPO = Path(__file__).resolve().parent.parent
SECTION = (
    "<!-- spark-cluster:begin (benches/spark_cluster.py) -->",
    "<!-- spark-cluster:end -->",
)


def _bench_module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", Path(__file__).with_name(name))
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[f"bench_{name}"] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _get_json(url: str, timeout: float = 60.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


class StandaloneCluster:
    """A Spark standalone master and `workers` workers (`cores` each) on 127.0.0.1, their
    JVMs started with the pip package's `spark-class`, their work and logs under `work`.
    `start()` returns once every worker is registered; `stop()` ends the JVMs it started."""

    def __init__(self, work: Path, workers: int = 2, cores: int = 1, memory: str = "2g") -> None:
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.work = work
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.ui_port = free_port()
        self.master = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(self.home),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.work / "logs"),
            PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
        )
        return env

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.work / f"{name}.log").open("wb")
        cmd = [str(self.home / "bin" / "spark-class"), *args]
        # Its own process group, so stop() ends spark-class's JVM child with it.
        p = subprocess.Popen(
            cmd, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs.append(p)

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--webui-port", str(self.ui_port),
        )  # fmt: skip
        for i in range(self.workers):
            self._spawn(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                self.master,
                "--host", "127.0.0.1",
                "--cores", str(self.cores),
                "--memory", self.memory,
                "--webui-port", str(free_port()),
                "--work-dir", str(self.work / f"worker{i}"),
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"a Spark JVM exited ({p.args}); see {self.work}")
            with contextlib.suppress(OSError, ValueError):
                state = _get_json(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5.0)
                if sum(w["state"] == "ALIVE" for w in state["workers"]) >= self.workers:
                    return self
            time.sleep(0.3)
        self.stop()
        raise TimeoutError(f"the standalone cluster did not start within {timeout} s")

    def stop(self) -> None:
        for p in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def session(
    master: str, app: str, ui_port: int, timing: str | None = None, daemon: str | None = None
) -> Any:
    """A driver on `master` (dafka.spark.local_session's loopback settings), its UI (the REST
    API of task launch times) on `ui_port`; `timing` reaches the executors' Python workers
    (DAFKA_SPARK_TIMING); `daemon`: spark.python.daemon.module."""
    import dafka.spark

    config = {
        "spark.driver.memory": "2g",
        "spark.executor.memory": "1g",
        "spark.ui.enabled": "true",
        "spark.ui.port": str(ui_port),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # The session starts once both executors are registered: a read then runs on both.
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
    }
    if timing:
        config["spark.executorEnv.DAFKA_SPARK_TIMING"] = timing
    if daemon:
        config["spark.python.daemon.module"] = daemon
    return dafka.spark.local_session(app, master, config)


def task_launches(spark: Any) -> dict[tuple[int, int], dict[str, Any]]:
    """Every task of this application from the driver's REST API: (stage, index of the
    task in the stage) -> launch time (s since the epoch), executor id, host."""
    ui = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    out = {}
    for stage in _get_json(f"{ui}/api/v1/applications/{app}/stages"):
        sid, attempt = stage["stageId"], stage["attemptId"]
        tasks = _get_json(
            f"{ui}/api/v1/applications/{app}/stages/{sid}/{attempt}/taskList?length=10000"
        )
        for t in tasks:
            launched = dt.datetime.strptime(t["launchTime"], "%Y-%m-%dT%H:%M:%S.%f%Z")
            out[(sid, t["index"], t["attempt"])] = {
                "launch": launched.replace(tzinfo=dt.UTC).timestamp(),
                "executor": t["executorId"],
                "stage": sid,
                "duration_ms": t.get("duration"),
            }
    return out


def _epoch(stamp: str) -> float:
    at = dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%Z")
    return at.replace(tzinfo=dt.UTC).timestamp()


def jobs(spark: Any) -> list[dict[str, Any]]:
    """Every job of the application: submission and completion (s since the epoch), and
    its tasks' launch, deserialization, run and duration."""
    ui = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    base = f"{ui}/api/v1/applications/{app}"
    out = []
    for j in _get_json(f"{base}/jobs"):
        job = {
            "id": j["jobId"],
            "submitted": _epoch(j["submissionTime"]),
            "completed": _epoch(j["completionTime"]) if j.get("completionTime") else None,
            "group": j.get("jobGroup"),
            "tasks": [],
        }
        for sid in j["stageIds"]:
            for st in _get_json(f"{base}/stages/{sid}"):
                for t in _get_json(f"{base}/stages/{sid}/{st['attemptId']}/taskList?length=10000"):
                    m = t.get("taskMetrics", {})
                    job["tasks"].append(
                        {
                            "stage": sid,
                            "index": t["index"],
                            "executor": t["executorId"],
                            "launch": _epoch(t["launchTime"]),
                            "duration_ms": t.get("duration"),
                            "deserialize_ms": m.get("executorDeserializeTime"),
                            "run_ms": m.get("executorRunTime"),
                            "scheduler_delay_ms": t.get("schedulerDelay"),
                        }
                    )
        out.append(job)
    return sorted(out, key=lambda j: j["id"])


def first_batches(spark: Any, timing: Path) -> list[dict[str, Any]]:
    """The timing events of the dafka tasks (DAFKA_SPARK_TIMING lines), each with the task's
    launch time from Spark: `launch_to_first_s` is task start (Spark's) to the first batch,
    `first_batch_s` the part of it inside the source's read()."""
    events = [json.loads(x) for x in timing.read_text().splitlines()] if timing.exists() else []
    launches = task_launches(spark)
    for e in events:
        t = launches.get((e.get("stage"), e.get("task"), e.get("attempt")))
        if t is not None and "at" in e:
            e["launch"] = t["launch"]
            e["launch_to_first_s"] = e["at"] - t["launch"]
            e["executor"] = t["executor"]
    return events


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """pid -> (what it is, CPU seconds so far) of every process of this benchmark's Spark
    cluster, its Python workers and its store: those run from this venv (other work on the
    machine may run Spark too)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kind = None
        if sys.prefix not in cmd:
            continue
        if "org.apache.spark.executor" in cmd:
            kind = "executor JVM"
        elif "deploy.master.Master" in cmd or "deploy.worker.Worker" in cmd:
            kind = "master/worker JVMs"
        elif "org.apache.spark.deploy.SparkSubmit" in cmd:
            kind = "driver JVM"
        elif "spark_cluster.py" in cmd:
            kind = "driver python" if "--driver" in cmd else "store (bench)"
        elif "pyspark.daemon" in cmd or "pyspark.sql.worker" in cmd or "pyspark.worker" in cmd:
            # The driver's planning workers (lookup, creation, planning of the source) or
            # the executors' (the tasks).
            kind = "Python (driver)" if "pyspark.sql.worker" in cmd else "Python (executors)"
        if kind:
            out[int(d.name)] = (kind, (int(fields[11]) + int(fields[12])) / tick)
    return out


def cpu_delta(before: dict, after: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for pid, (kind, cpu) in after.items():
        out[kind] = out.get(kind, 0.0) + cpu - before.get(pid, (kind, 0.0))[1]
    return {k: round(v, 2) for k, v in sorted(out.items())}


def executors_of(spark: Any, stages: set[int] | None = None) -> list[str]:
    """The executors that ran tasks of this application (of `stages` only, if given)."""
    return sorted(
        {
            t["executor"]
            for t in task_launches(spark).values()
            if t["executor"] != "driver" and (stages is None or t["stage"] in stages)
        }
    )


def check(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    """tests/test_spark_standalone.py's application: a batch read of `args.topic` (every
    (partition, offset) it returned, and the executors of its tasks), then a streaming query
    into Parquet with a checkpoint, stopped and restarted from it with records written
    between (the offsets the sink holds, and the executors)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import dafka

    out: dict[str, Any] = {}
    df = spark.read.format("dafka").option("towers", args.towers).option("subscribe", args.topic)
    rows = df.load().select("partition", "offset").collect()
    out["batch"] = [[r.partition, r.offset] for r in rows]
    out["batch_executors"] = executors_of(spark)
    seen = {t["stage"] for t in task_launches(spark).values()}

    stream_topic = f"{args.topic}-stream"
    work = Path(args.work)

    def produce(n: int) -> None:
        for _ in range(2):
            with dafka.Producer(stream_topic, towers=args.towers) as p:
                p.send_many(pa.array([b"%06d" % i for i in range(n)], pa.binary()))
                p.flush(timeout=60)

    def run_query() -> None:
        query = (
            spark.readStream.format("dafka")
            .options(
                towers=args.towers,
                subscribe=stream_topic,
                startingOffsets="earliest",
                minPartitions="4",  # 4 tasks a micro-batch: both executors read
            )
            .load()
            .select("partition", "offset")
            .writeStream.format("parquet")
            .option("path", str(work / "sink"))
            .option("checkpointLocation", str(work / "ckpt"))
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    produce(args.stream_records)
    run_query()
    produce(args.stream_records)  # new partitions, written while the query is stopped
    run_query()
    table = pq.read_table(str(work / "sink"))
    out["stream"] = [
        list(x)
        for x in zip(*(table.column(c).to_pylist() for c in ("partition", "offset")), strict=True)
    ]
    out["stream_executors"] = executors_of(
        spark, {t["stage"] for t in task_launches(spark).values()} - seen
    )
    return out


def driver(args: argparse.Namespace) -> int:
    """One application: `args.case` read `args.reads` times (the first is cold), a streaming
    run, or the test's `check`; prints one JSON line of results."""
    timing = Path(args.work) / f"timing-{args.case}-{time.time_ns()}.jsonl"
    os.environ["DAFKA_SPARK_TIMING"] = str(timing)  # the driver's planning workers
    t0 = time.perf_counter()
    spark = session(args.master, f"bench-{args.case}", free_port(), str(timing), args.daemon)
    out: dict[str, Any] = {"case": args.case, "session_s": time.perf_counter() - t0}
    if args.warm_up:
        import dafka.spark

        dafka.spark.warm_up(spark, args.towers)  # in the background; the first read follows
    try:
        if args.case == "dafka":

            def read() -> None:
                (
                    spark.read.format("dafka")
                    .option("towers", args.towers)
                    .option("subscribe", args.topic)
                    .load()
                    .write.format("noop")
                    .mode("overwrite")
                    .save()
                )

        elif args.case == "arrow":
            import pyarrow as pa

            with pa.memory_map(args.table) as f:
                table = pa.ipc.open_file(f).read_all()

            def read() -> None:
                spark.createDataFrame(table).write.format("noop").mode("overwrite").save()

        if args.case == "check":
            out.update(check(spark, args))
        elif args.case in ("dafka", "arrow"):
            times, spans, cpu = [], [], []
            for _ in range(args.reads):
                t, at, before = time.perf_counter(), time.time(), cpu_by_process()
                read()
                times.append(time.perf_counter() - t)
                spans.append((at, time.time()))
                cpu.append(cpu_delta(before, cpu_by_process()))
            out["cpu"] = cpu
            out["seconds"] = times
            out["spans"] = spans
        else:
            spark_bench = _bench_module("spark.py")
            spark_bench.PARTITIONS = args.partitions
            # An untimed query first (the application's cold start, the JIT), as in
            # benches/spark.py; then the timed one.
            for key, seconds in (
                ("stream_warmup", args.stream_seconds / 2),
                ("stream", args.stream_seconds),
            ):
                out[key] = spark_bench.stream_case(
                    spark, args.towers, args.size, seconds, 0, args.window,
                    Path(args.work), observe=False,
                )  # fmt: skip
        if args.case != "check":
            out["first_batch"] = first_batches(spark, timing)
            out["jobs"] = jobs(spark)
            out["executors"] = executors_of(spark)
    finally:
        spark.stop()
    print("RESULT " + json.dumps(out), flush=True)
    return 0


WRAPPER = "dafka-spark-python"
WARM_UP = "warm_up"
# spark.python.daemon.module of the variants that are not one
DAEMON_OF = {WRAPPER: "pyspark.daemon", WARM_UP: "pyspark.daemon"}
# The ways a dafka application is run: Spark's defaults, spark.python.daemon.module set to
# dafka's, Spark's Python (PYSPARK_PYTHON) being dafka-spark-python.
VARIANTS = {
    "pyspark.daemon": "Spark's defaults",
    "dafka.spark_daemon": "`spark.python.daemon.module=dafka.spark_daemon`",
    WRAPPER: "`PYSPARK_PYTHON` and `PYSPARK_DRIVER_PYTHON` `=dafka-spark-python`",
    WARM_UP: "`dafka-spark-python` as above, and `dafka.spark.warm_up(spark, towers)` at "
    "session start (in the background; the read follows at once)",
}


def run_app(args: argparse.Namespace, cluster: StandaloneCluster, case: str, **kw: Any) -> dict:
    """One application (a driver process) of `case`, with the variant `kw["daemon"]`."""
    variant = kw.get("daemon", args.daemon)
    env = cluster.env()
    if variant in (WRAPPER, WARM_UP):
        # Both: the driver's Python workers (the source's lookup, creation, planning) run
        # PYSPARK_DRIVER_PYTHON, and a source Spark found by its lookup keeps that Python
        # for the executors' tasks too.
        wrapper = str(Path(sys.executable).with_name(WRAPPER))
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = wrapper
    cmd = [
        sys.executable, __file__, "--driver", "--case", case,
        "--master", cluster.master, "--work", str(args.work_dir),
        "--towers", kw["towers"], "--topic", kw.get("topic", ""),
        "--table", kw.get("table", ""), "--reads", str(args.reads),
        "--stream-seconds", str(args.stream_seconds), "--size", str(args.size),
        "--partitions", str(args.partitions), "--window", str(args.window),
        "--daemon", DAEMON_OF.get(variant, variant),
        *(["--warm-up"] if variant == WARM_UP else []),
        "--stream-records", str(getattr(args, "stream_records", 0)),
    ]  # fmt: skip
    t = time.perf_counter()
    # Its own process group: a driver that fails or is interrupted takes its JVM with it.
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    ) as p:  # fmt: skip
        try:
            stdout, stderr = p.communicate(timeout=900)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
    if p.returncode != 0:
        raise RuntimeError(f"driver {case} failed:\n{stdout[-3000:]}\n{stderr[-5000:]}")
    line = next(x for x in stdout.splitlines() if x.startswith("RESULT "))
    res = json.loads(line[len("RESULT ") :])
    res["executors_used"] = len(res.get("executors", []))
    res["process_s"] = time.perf_counter() - t
    res["load"] = os.getloadavg()[0]
    res["daemon"] = variant
    print(case, json.dumps({k: v for k, v in res.items() if k != "first_batch"}), flush=True)
    return res


def preload(towers: str, topic: str, rows: int, size: int, partitions: int) -> Any:
    """`rows` records of `size` bytes over `partitions` producers, acknowledged; returns them
    read back as a pyarrow.Table (what the createDataFrame path ships)."""
    spark_bench = _bench_module("spark.py")
    spark_bench.PARTITIONS = partitions
    spark_bench.preload(towers, topic, rows, size)
    table = spark_bench.read_back(towers, topic)
    assert table.num_rows == rows // partitions * partitions, (table.num_rows, rows)
    return table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--apps", type=int, default=3, help="applications per batch path")
    ap.add_argument("--reads", type=int, default=4, help="reads per application (1 cold)")
    ap.add_argument("--stream-seconds", type=float, default=15.0)
    ap.add_argument("--stream-apps", type=int, default=1)
    ap.add_argument("--window", type=int, default=1_000_000)
    ap.add_argument("--note", default="")
    ap.add_argument(
        "--no-ab-daemon",
        dest="ab_daemon",
        action="store_false",
        help="run the dafka applications only with --daemon, not in every variant",
    )
    ap.add_argument(
        "--daemon",
        default=WRAPPER,
        choices=list(VARIANTS),
        help="how the dafka applications run (and the only way with --no-ab-daemon): "
        "spark.python.daemon.module pyspark.daemon (Spark's defaults) or dafka.spark_daemon, "
        "or PYSPARK_PYTHON=dafka-spark-python; warm_up: dafka-spark-python and "
        "dafka.spark.warm_up at session start",
    )
    ap.add_argument("--out", default=str(REPO / "BENCHMARKS.md"))
    ap.add_argument("--raw-json", default=str(REPO / "bench-out/spark_cluster.json"))
    ap.add_argument("--render-only", action="store_true")
    # One application (internal: the driver process the benchmark starts).
    ap.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--towers", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--table", help=argparse.SUPPRESS)
    ap.add_argument("--stream-records", type=int, default=300, help=argparse.SUPPRESS)
    ap.add_argument("--warm-up", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.driver:
        return driver(args)
    run = _bench_module("run.py")
    if args.render_only:
        data = json.loads(Path(args.raw_json).read_text())
        out = Path(args.out)
        text = out.read_text() if out.exists() else "# Benchmarks\n"
        out.write_text(run.splice_section(text, "spark_cluster", render(data)))
        return 0

    import pyarrow as pa
    import pyspark

    import dafka

    (REPO / "target").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dafka-bench-cluster-", dir=REPO / "target"))
    args.work_dir = work
    data: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "rows": args.rows,
        "size": args.size,
        "partitions": args.partitions,
        "spark": pyspark.__version__,
        "load_start": os.getloadavg(),
        "note": args.note,
        "command": "python3 benches/spark_cluster.py " + " ".join(sys.argv[1:]),
        "apps": [],
        "reads_per_app": args.reads,
    }
    try:
        with dafka.LocalCluster(work / "store", sync="never") as dc:
            table = preload(dc.towers, "bench", args.rows, args.size, args.partitions)
            table_path = work / "table.arrow"
            with pa.OSFile(str(table_path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
                w.write_table(table)
            with StandaloneCluster(work / "spark") as cluster:
                # (case, variant): dafka's ways (VARIANTS), pyarrow.
                cases = [("dafka", args.daemon), ("arrow", args.daemon)]
                if args.ab_daemon:
                    cases[1:1] = [("dafka", v) for v in VARIANTS if v != args.daemon]
                for i in range(args.apps):
                    # Rotated, so no path always runs first (or last) in a round.
                    for case, daemon in cases[i % len(cases) :] + cases[: i % len(cases)]:
                        data["apps"].append(
                            run_app(
                                args,
                                cluster,
                                case,
                                towers=dc.towers,
                                topic="bench",
                                table=str(table_path),
                                daemon=daemon,
                            )
                        )
                for _ in range(args.stream_apps):
                    data["apps"].append(run_app(args, cluster, "stream", towers=dc.towers))
    finally:
        data["load_end"] = os.getloadavg()
        raw = Path(args.raw_json)
        raw.parent.mkdir(parents=True, exist_ok=True)
        raw.write_text(json.dumps(data, indent=1))
        shutil.rmtree(work, ignore_errors=True)
    out = Path(args.out)
    text = out.read_text() if out.exists() else "# Benchmarks\n"
    out.write_text(run.splice_section(text, "spark_cluster", render(data)))
    print(f"wrote {out}")
    return 0


def _med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _range(xs: list[float], digits: int = 1) -> str:
    if not xs:
        return "n/a"
    return f"{statistics.median(xs):.{digits}f} ({min(xs):.{digits}f}-{max(xs):.{digits}f})"


def first_read_tasks(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The read tasks' first-batch events of one application (not a warm-up's), each marked
    `cold` when it is the first task on its executor of the application's first read."""
    tasks = [e for e in events if "launch_to_first_s" in e and not e.get("warm_up")]
    if not tasks:
        return []
    first_stage = min(e["stage"] for e in tasks)
    seen: set[str] = set()
    for e in sorted(tasks, key=lambda e: e["launch"]):
        e["cold"] = e["stage"] == first_stage and e["executor"] not in seen
        if e["cold"]:
            seen.add(e["executor"])
    return tasks


def summary(d: dict[str, Any]) -> dict[str, Any]:
    """Per path: cold and warm read seconds, cold CPU by process kind, first-batch times;
    the cold and warm ratios of each dafka application to the pyarrow one of its round."""
    rows = d["rows"]
    out: dict[str, Any] = {}
    for a in d["apps"]:
        if a["case"] == "stream":
            continue
        key = a["case"] if a["case"] == "arrow" else f"dafka/{a['daemon']}"
        p = out.setdefault(key, {"cold": [], "warm": [], "cpu": [], "first": [], "plan": []})
        p["cold"].append(a["seconds"][0])
        p["warm"].append(statistics.median(a["seconds"][1:]) if len(a["seconds"]) > 1 else None)
        p["cpu"].append(a["cpu"][0])
        start = a["spans"][0][0]
        reads = [j for j in a.get("jobs", []) if j.get("group") != "dafka-warm-up"]
        p["plan"].append(reads[0]["submitted"] - start if reads else None)
        p["first"] += first_read_tasks(a["first_batch"])
    for p in out.values():
        p["warm"] = [w for w in p["warm"] if w is not None]
        p["warm_rows_per_s"] = rows / statistics.median(p["warm"]) if p["warm"] else None
    return out


def render(d: dict[str, Any]) -> str:
    s = summary(d)
    arrow = s.get("arrow", {"cold": [], "warm": []})
    labels = {f"dafka/{v}": f'`format("dafka")`, {text}' for v, text in VARIANTS.items()}
    labels["arrow"] = "`createDataFrame(pyarrow.Table)` (same rows, in the driver)"
    lines = [
        SECTION[0],
        "## Spark, standalone cluster",
        "",
        f"`make bench-spark` (`benches/spark_cluster.py`), {d['date']}: a Spark "
        f"{d['spark']} standalone cluster started by the benchmark with `spark-class` from the "
        "pip package on loopback (a master and 2 workers of 1 core each, executors of 1 GiB), "
        f"{d['rows']:,} records of {d['size']} B in {d['partitions']} Dafka partitions on a "
        "`dafka.LocalCluster` in the benchmark's process (sync `never`), every read forced "
        "with the `noop` sink. Each application is a new driver process: its first read "
        "(cold) starts the executors' Python workers and the driver's Python planning "
        f"workers; {d['reads_per_app'] - 1} more reads follow (warm, median taken). "
        "Applications of the paths alternate (rotated each round). "
        f"{d.get('note', '')} Load average (1 min) at the start {d['load_start'][0]:.1f}, at "
        f"the end {d['load_end'][0]:.1f}; per application in the raw JSON.",
        "",
        "| path (applications) | first read, cold: s median (range) | later reads, warm: "
        "s median (range) | warm rows/s | driver: read() to job submitted, cold, s |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, label in labels.items():
        if key not in s:
            continue
        p = s[key]
        plan = [x for x in p["plan"] if x is not None]
        rps = p["warm_rows_per_s"]
        lines.append(
            f"| {label} ({len(p['cold'])}) | {_range(p['cold'])} | {_range(p['warm'], 2)} | "
            f"{'n/a' if rps is None else f'{rps:,.0f}'} | {_range(plan)} |"
        )
    # Ratios within a round: each dafka application against the pyarrow one of its round.
    ratios: dict[str, dict[str, list[float]]] = {}
    rounds: list[list[dict]] = []
    per_round = len(s)
    batch_apps = [a for a in d["apps"] if a["case"] != "stream"]
    for i in range(0, len(batch_apps), per_round):
        rounds.append(batch_apps[i : i + per_round])
    for r in rounds:
        ref = next((a for a in r if a["case"] == "arrow"), None)
        if ref is None:
            continue
        for a in r:
            if a["case"] != "dafka":
                continue
            q = ratios.setdefault(a["daemon"], {"cold": [], "warm": []})
            q["cold"].append(a["seconds"][0] / ref["seconds"][0])
            if len(a["seconds"]) > 1 and len(ref["seconds"]) > 1:
                q["warm"].append(
                    statistics.median(a["seconds"][1:]) / statistics.median(ref["seconds"][1:])
                )
    lines += [
        "",
        "| dafka / pyarrow.Table, same round | cold: median (range) | warm: median (range) |",
        "|---|---:|---:|",
    ]
    for daemon, q in ratios.items():
        lines.append(f"| `{daemon}` | {_range(q['cold'], 2)}x | {_range(q['warm'], 2)}x |")
    kinds = sorted({k for p in s.values() for c in p["cpu"] for k in c})
    lines += [
        "",
        "CPU seconds of the first read (cold), median over the applications, by process "
        "(the Python processes of the driver are Spark's planning workers: the lookup of "
        "`pyspark_*` modules, the source's creation, the read's planning; each is a "
        "`pyspark.daemon` and the worker it forks):",
        "",
        "| path | " + " | ".join(kinds) + " |",
        "|---|" + "---:|" * len(kinds),
    ]
    for key, label in labels.items():
        if key in s:
            cells = [_med([c.get(k, 0.0) for c in s[key]["cpu"]]) for k in kinds]
            lines.append(f"| {label} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")

    def part(es: list[dict], a: str, b: str, warmed: bool) -> str:
        # With a warm-up, 0 where the second came first: a worker started before the task.
        xs = [e[b] - e[a] for e in es if e.get(a) and e.get(b)]
        return _range([max(0.0, x) for x in xs] if warmed else xs, 2)

    lines += [
        "",
        "Task start (Spark's launch time of the task) to its first Arrow batch, every batch "
        "read; cold: the first task on each executor of the application's first read (for "
        "the paths without a warm-up, the first task of the executor's Python worker), "
        "warm: the tasks after it. Then where a cold task's time goes: launch to the "
        "executor's Python daemon started (the JVM deserializes the task, starts the "
        "daemon), daemon to the worker forked, forked to the source's module imported "
        "(pyspark's worker, the task's command from the JVM, unpickled; 0 where a warm-up "
        "had started the worker before the task), in `read()`: the reader started and a "
        "store reached, then the first batch (s, median (range)):",
        "",
        "| path | cold tasks | cold: launch -> first batch | warm tasks | warm: launch -> "
        "first batch | cold: launch -> daemon | daemon -> fork | fork -> imported | reader "
        "| read() -> first batch |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, label in labels.items():
        if key not in s or not s[key]["first"]:
            continue
        cold = [e for e in s[key]["first"] if e["cold"]]
        warm = [e for e in s[key]["first"] if not e["cold"]]
        warmed = key == f"dafka/{WARM_UP}"
        lines.append(
            f"| {label} | {len(cold)} | {_range([e['launch_to_first_s'] for e in cold], 2)} | "
            f"{len(warm)} | {_range([e['launch_to_first_s'] for e in warm], 2)} | "
            f"{part(cold, 'launch', 'parent_start', warmed)} | "
            f"{part(cold, 'parent_start', 'process_start', warmed)} | "
            f"{part(cold, 'process_start', 'imported', warmed)} | "
            f"{_range([e['reader_s'] for e in cold], 2)} | "
            f"{part(cold, 'read_start', 'at', warmed)} |"
        )
    stream = [a for a in d["apps"] if a["case"] == "stream"]
    if stream:
        st, cold_st = stream[-1]["stream"], stream[-1].get("stream_warmup")
        warm_arrow = arrow.get("warm_rows_per_s")
        lines += [
            "",
            "| streaming: producers as fast as the query reads, "
            f"{st['seconds']:.0f} s, `noop` sink, a new application | value |",
            "|---|---:|",
            f"| records sent / rows the query read | {st['produced']:,} / {st['consumed']:,} |",
            f"| rows/s, first trigger to last commit ({st['batches']} micro-batches) | "
            f"{st['rows_per_s'] or 0:,.0f} |",
            "| before it, an untimed query of the same kind, the application's first "
            f"(cold): rows/s | {(cold_st or {}).get('rows_per_s') or 0:,.0f} |",
            "| `createDataFrame(pyarrow.Table)` of the same cluster, warm batch rows/s "
            f"(above) | {'n/a' if warm_arrow is None else f'{warm_arrow:,.0f}'} |",
        ]

    def verdict(ok: bool) -> str:
        return "met" if ok else "not met"

    targets = []
    for variant, q in ratios.items():
        key = f"dafka/{variant}"
        cold_ratio, warm_ratio = _med(q["cold"]), _med(q["warm"])
        cf = _med([e["launch_to_first_s"] for e in s[key]["first"] if e["cold"]])
        targets.append(
            f"- {VARIANTS.get(variant, variant)}: first read of a new application at most "
            f"1.5x `createDataFrame(pyarrow.Table)` cold: "
            f"{'n/a' if cold_ratio is None else f'{cold_ratio:.2f}x'}, "
            f"{verdict(cold_ratio is not None and cold_ratio <= 1.5)}; warm reads at least as "
            f"fast as the `pyarrow.Table` path: "
            f"{'n/a' if warm_ratio is None else f'{warm_ratio:.2f}x'} its time, "
            f"{verdict(warm_ratio is not None and warm_ratio <= 1.0)}; task start to first "
            f"batch under 0.5 s cold: {'n/a' if cf is None else f'{cf:.2f} s'}, "
            f"{verdict(cf is not None and cf < 0.5)}."
        )
    if targets:
        lines += ["", "Targets (issue 23), medians of the ratios within a round:", "", *targets]
    lines.append(SECTION[1])
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
