"""The dafka source on a Spark standalone cluster: a master and two workers of one core each
(`spark-class` from the pip package, on loopback), executors in JVMs of their own.

One application (a driver process of its own: this pytest process may hold a local[2]
session already) runs a batch read and a streaming query into Parquet with a checkpoint,
stopped and restarted from it with records written in between
(benches/spark_cluster.py's `check`): every record exactly once, tasks on both executors.
Spark runs `dafka-spark-python` as its Python there (the other Spark tests run
`dafka.spark_daemon` through `local_session`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benches" / "spark_cluster.py"
BATCH = (4, 500)  # producers (Dafka partitions), records each
STREAM_RECORDS = 300  # per producer; two producers before each of the query's two runs


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_spark_cluster", BENCH)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["bench_spark_cluster"] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@pytest.fixture(scope="module")
def result(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The application's results: one standalone cluster and one driver for the module."""
    import pyarrow as pa

    import dafka

    bench = _bench()
    work = tmp_path_factory.mktemp("standalone")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for _ in range(BATCH[0]):
        with dafka.Producer("batch", towers=cluster.towers) as p:
            p.send_many(pa.array([b"%06d" % i for i in range(BATCH[1])], pa.binary()))
            p.flush(timeout=60)
    args = argparse.Namespace(
        work_dir=work, reads=1, stream_seconds=0, size=0, partitions=0, window=0,
        daemon="dafka-spark-python", stream_records=STREAM_RECORDS,
    )  # fmt: skip
    with bench.StandaloneCluster(work / "spark") as spark_cluster:
        yield bench.run_app(args, spark_cluster, "check", towers=cluster.towers, topic="batch")


@pytest.mark.slow
def test_batch_read_on_both_executors(result: dict[str, Any]) -> None:
    got = Counter((p, o) for p, o in result["batch"])
    assert len(got) == BATCH[0] * BATCH[1], len(got)
    assert set(got.values()) == {1}
    assert {o for _, o in got} == set(range(BATCH[1]))
    assert result["batch_executors"] == ["0", "1"]


@pytest.mark.slow
def test_streaming_query_restarted_from_its_checkpoint_exactly_once(
    result: dict[str, Any],
) -> None:
    got = Counter((p, o) for p, o in result["stream"])
    assert len({p for p, _ in got}) == 4  # two producers before each run
    assert len(got) == 4 * STREAM_RECORDS, len(got)
    assert set(got.values()) == {1}, [k for k, n in got.items() if n > 1][:5]
    assert result["stream_executors"] == ["0", "1"]


def _zip(path: Path, version: str) -> str:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pyspark/version.py", f"__version__: str = '{version}'\n")
    return str(path)


def test_installed_pyspark_first_only_for_the_zips_own_version(tmp_path: Path) -> None:
    """dafka.spark_daemon moves Spark's zips behind an installed pyspark of their version,
    and leaves the path alone otherwise (another version installed, or none)."""
    import pyspark

    from dafka.spark_daemon import installed_pyspark_first

    site = str(Path(pyspark.__file__).parent.parent)
    same = _zip(tmp_path / "pyspark.zip", pyspark.__version__)
    py4j = _zip(tmp_path / "py4j-0.10.9.9-src.zip", "0")
    assert installed_pyspark_first([same, py4j, site]) == [site, same, py4j]
    other = (
        _zip(tmp_path / "other" / "pyspark.zip", "3.0.0")
        if (tmp_path / "other").mkdir() is None
        else ""
    )
    assert installed_pyspark_first([other, py4j, site]) == [other, py4j, site]
    assert installed_pyspark_first([same, str(tmp_path)]) == [same, str(tmp_path)]
    assert installed_pyspark_first([site]) == [site]
