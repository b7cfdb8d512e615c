"""`dafka.spark.warm_up`: the Python workers it starts are the ones the next read runs in.

Spark keeps a Python worker for later tasks only among tasks of the same kind (the same
interpreter, worker module and environment): a Python UDF's or an RDD's workers are never
used by a data source's read. The application runs in a process of its own (a fresh driver
JVM: this pytest process may hold a session whose workers are warm already) and looks at the
processes Spark started: the executor's Python daemon and the workers it forked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from dafka import _spark_dafka
from dafka.errors import InvalidArgumentError

APP = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path

    import pyarrow as pa

    import dafka
    import dafka.spark

    def workers():
        # The Python workers of this application's executor (local mode: the driver JVM's):
        # children of a daemon whose worker module is pyspark.worker (the planning daemons
        # run pyspark.sql.worker.*), below this process.
        procs = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    cmd = (d / "cmdline").read_bytes().split(b"\\0")
                    ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError):
                    continue
                procs[int(d.name)] = (ppid, [c.decode(errors="replace") for c in cmd])

        def below_us(pid):
            while pid > 1:
                if pid == os.getpid():
                    return True
                pid = procs.get(pid, (1, []))[0]
            return False

        def executor_side(cmd):  # a daemon of pyspark.worker, or a worker it forked
            daemon = "pyspark.daemon" in cmd or "dafka.spark_daemon" in cmd
            return daemon and "pyspark.worker" in cmd

        daemons = {
            p for p, (pp, cmd) in procs.items()
            if executor_side(cmd) and not executor_side(procs.get(pp, (0, []))[1]) and below_us(p)
        }
        return sorted(p for p, (pp, _) in procs.items() if pp in daemons), sorted(daemons)

    spark = dafka.spark.local_session("warm-up", "local[2]")
    with dafka.LocalCluster(sys.argv[1], sync="never") as cluster:
        for _ in range(4):
            with dafka.Producer("t", towers=cluster.towers) as p:
                p.send_many(pa.array([b"%04d" % i for i in range(200)], pa.binary()))
                p.flush(timeout=60)
        out = {"before": workers()}
        dafka.spark.warm_up(spark, cluster.towers, wait=True)
        out["warm"] = workers()
        sc = spark.sparkContext
        out["group_after_wait"] = sc.getLocalProperty("spark.jobGroup.id")
        df = spark.read.format("dafka").option("towers", cluster.towers).option("subscribe", "t")
        out["rows"] = df.load().count()
        out["after"] = workers()
        # A streaming query's tasks run in them too (the demo's first read is one).
        query = (
            spark.readStream.format("dafka")
            .options(towers=cluster.towers, subscribe="t", startingOffsets="earliest")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(Path(sys.argv[1]).with_name("ckpt")))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(timeout=300)
        out["stream_rows"] = sum(p["numInputRows"] for p in query.recentProgress)
        out["after_stream"] = workers()
        # In the background: the call returns at once, a read queued behind it still works.
        thread = dafka.spark.warm_up(spark, cluster.towers)
        out["background_rows"] = df.load().count()
        thread.join(timeout=120)
        out["background_done"] = not thread.is_alive()
        tracker = sc.statusTracker()
        out["warm_up_jobs"] = [
            tracker.getJobInfo(j).status for j in tracker.getJobIdsForGroup("dafka-warm-up")
        ]
    spark.stop()
    print("RESULT " + json.dumps(out), flush=True)
    """
)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("warm-up")
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON",)}
    env["PYSPARK_PYTHON"] = sys.executable
    out = subprocess.run(
        [sys.executable, "-c", APP, str(work / "store")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=work,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    result: dict[str, Any] = json.loads(line[len("RESULT ") :])
    return result


@pytest.mark.slow
def test_a_read_after_warm_up_runs_in_the_workers_it_started(app: dict[str, Any]) -> None:
    before_workers, _ = app["before"]
    warm_workers, warm_daemons = app["warm"]
    after_workers, after_daemons = app["after"]
    assert before_workers == [], app  # a new application: no Python worker yet
    assert len(warm_workers) == 2, app  # local[2]: one per core
    assert app["rows"] == 800
    # No daemon or worker started for the read: it ran in the warm-up's.
    assert (after_workers, after_daemons) == (warm_workers, warm_daemons), app
    assert app["stream_rows"] == 800
    assert app["after_stream"] == app["warm"], app


@pytest.mark.slow
def test_warm_up_in_the_background_lets_a_read_queue_behind_it(app: dict[str, Any]) -> None:
    assert app["background_rows"] == 800
    assert app["background_done"]
    # Both warm-ups ran, as one job each in their group, and succeeded; the reads (the
    # caller's jobs) are in no group, not even after warm_up(wait=True) ran in their thread.
    assert app["warm_up_jobs"] == ["SUCCEEDED", "SUCCEEDED"], app
    assert app["group_after_wait"] is None


def test_bad_warm_up_arguments_raise_at_the_call() -> None:
    import dafka.spark

    no_session: Any = None  # never reached: the checks come first
    with pytest.raises(InvalidArgumentError, match=r"takes only towers.*subscribe"):
        dafka.spark.warm_up(no_session, tasks=2, options={"subscribe": "t"})
    with pytest.raises(InvalidArgumentError, match="option warmUp must be > 0"):
        dafka.spark.warm_up(no_session, tasks=0)
    with pytest.raises(InvalidArgumentError, match="option towers"):
        dafka.spark.warm_up(no_session, "udp://h:1", tasks=1)
    with pytest.raises(InvalidArgumentError, match="towers is empty"):
        dafka.spark.warm_up(no_session, " ", tasks=1)


def test_warm_up_options_are_checked() -> None:
    assert _spark_dafka._warm_up_options({"towers": "tcp://h:1"}) is None
    warm = _spark_dafka._warm_up_options({"warmUp": "3", "towers": "tcp://h:1"})
    assert warm is not None and (warm.tasks, warm.towers) == (3, "tcp://h:1")
    none = _spark_dafka._warm_up_options({"warmup": "2"})
    assert none is not None and none.towers is None
    with pytest.raises(InvalidArgumentError, match=r"takes only towers.*subscribe"):
        _spark_dafka._warm_up_options({"warmUp": "2", "subscribe": "t"})
    for bad in ("0", "-1", "x", "100000"):
        with pytest.raises(InvalidArgumentError, match="option warmUp"):
            _spark_dafka._warm_up_options({"warmUp": bad})
    with pytest.raises(InvalidArgumentError, match="option towers"):
        _spark_dafka._warm_up_options({"warmUp": "1", "towers": "udp://h:1"})


def test_warm_up_is_in_the_options_help() -> None:
    assert "warmUp" in (_spark_dafka.DafkaDataSource.__doc__ or "")
    assert "warmUp" in (_spark_dafka.DafkaBatchReader.__doc__ or "")
