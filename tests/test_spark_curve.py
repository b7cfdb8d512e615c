"""The ``dafka`` Spark source and sink on an encrypted cluster (issue 13): the ``curve.*``
options carry the job's ``ClusterKeys`` to every reader and producer, batch and streaming;
without them a read fails within the offsets timeout with a message that names them; a bad
key fails at once naming the option, never showing a secret; the secrets are redacted from
the plan."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import unique_topic

import dafka
from dafka.zmtp import curve_keypair

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@dataclass
class Encrypted:
    cluster: dafka.LocalCluster
    # The job's options: the cluster secret, the job's member secret, the allow-list.
    options: dict[str, str]
    # For the test's own producer and consumer.
    keys: dafka.ClusterKeys


@pytest.fixture(scope="module")
def encrypted() -> Iterator[Encrypted]:
    cluster_secret = curve_keypair()[1]
    server_public, server_secret = curve_keypair()  # the tower's and the store's
    job_public, job_secret = curve_keypair()  # the Spark job's (and this test's) member key
    allowed = [server_public, job_public]
    with dafka.LocalCluster(
        sync="never", curve=dafka.ClusterKeys(cluster_secret, server_secret, allowed)
    ) as cluster:
        yield Encrypted(
            cluster,
            {
                "curve.clusterSecretKey": cluster_secret,
                "curve.memberSecretKey": job_secret,
                "curve.allowedKeys": ",".join(allowed),
            },
            dafka.ClusterKeys(cluster_secret, job_secret, allowed),
        )


def _read(spark: Any, e: Encrypted, topic: str, **options: str) -> Any:
    return (
        spark.read.format("dafka")
        .option("towers", e.cluster.towers)
        .option("subscribe", topic)
        .options(**options)
        .load()
    )


def _stream(spark: Any, e: Encrypted, topic: str) -> Any:
    """A streaming read of ``topic`` from the start, with the keys."""
    return (
        spark.readStream.format("dafka")
        .option("towers", e.cluster.towers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .options(**e.options)
        .load()
    )


def _values(df: Any) -> list[str]:
    return sorted(r["v"] for r in df.selectExpr("cast(value as string) v").collect())


def test_batch_and_streaming_read_and_the_sink_with_keys(
    spark: Any, encrypted: Encrypted, tmp_path: Path
) -> None:
    e = encrypted
    t, u, w = unique_topic("sc"), unique_topic("sc"), unique_topic("sc")
    values = [f"secret-{i}" for i in range(2000)]
    with dafka.Producer(t, towers=e.cluster.towers, curve=e.keys) as p:
        p.send_many([v.encode() for v in values])
        p.flush(timeout=30)

    # Batch read.
    assert _values(_read(spark, e, t, **e.options)) == sorted(values)

    # Streaming read (t -> memory).
    query = (
        _stream(spark, e, t)
        .writeStream.format("memory")
        .queryName("curve_stream")
        .option("checkpointLocation", str(tmp_path / "ckpt-read"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert _values(spark.table("curve_stream")) == sorted(values)

    # Batch sink (-> u), then the streaming sink (t -> w); each read back with the keys.
    (
        spark.createDataFrame([(v,) for v in values], "value string")
        .repartition(2)
        .write.format("dafka")
        .option("towers", e.cluster.towers)
        .option("topic", u)
        .options(**e.options)
        .mode("append")
        .save()
    )
    assert _values(_read(spark, e, u, **e.options)) == sorted(values)
    query = (
        _stream(spark, e, t)
        .selectExpr(f"'{w}' as topic", "value")
        .writeStream.format("dafka")
        .option("towers", e.cluster.towers)
        .option("checkpointLocation", str(tmp_path / "ckpt-write"))
        .options(**e.options)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert _values(_read(spark, e, w, **e.options)) == sorted(values)
    # The sink's records are in the store: this test's own keyed reader sees them.
    with dafka.PartitionReader(e.cluster.towers, curve=e.keys) as reader:
        assert sum(end - low for low, end in reader.offsets(w, timeout=20).values()) == 2000


def test_without_keys_a_read_fails_within_the_offsets_timeout(
    spark: Any, encrypted: Encrypted
) -> None:
    started = time.monotonic()
    with pytest.raises(Exception, match=r"no store answered within.*curve\.\* options"):
        _read(spark, encrypted, unique_topic("sc"), offsetsTimeout="2").collect()
    assert time.monotonic() - started < 30
    # A member key the cluster does not allow: the same.
    stranger = dict(encrypted.options, **{"curve.memberSecretKey": curve_keypair()[1]})
    started = time.monotonic()
    with pytest.raises(Exception, match="no store answered within"):
        _read(spark, encrypted, unique_topic("sc"), offsetsTimeout="2", **stranger).collect()
    assert time.monotonic() - started < 30


def test_bad_key_options_fail_at_once_naming_the_option(spark: Any, encrypted: Encrypted) -> None:
    good = encrypted.options
    secret = good["curve.memberSecretKey"]
    cases = [
        ({**good, "curve.memberSecretKey": secret[:-1]}, r"option curve\.memberSecretKey must"),
        ({**good, "curve.clusterSecretKey": "x"}, r"option curve\.clusterSecretKey must"),
        ({**good, "curve.allowedKeys": "not-a-key"}, r"option curve\.allowedKeys must"),
        (
            {k: v for k, v in good.items() if k != "curve.allowedKeys"},
            r"option curve\.allowedKeys is missing",
        ),
        ({"curve.memberSecretKey": secret}, r"option curve\.clusterSecretKey is missing"),
    ]
    for options, message in cases:
        started = time.monotonic()
        with pytest.raises(Exception, match=message) as info:
            _read(spark, encrypted, "x", **options).collect()
        assert time.monotonic() - started < 30
        assert secret[:-1] not in str(info.value), "a secret in an error message"
    # The sink checks them alike.
    with pytest.raises(Exception, match=r"option curve\.memberSecretKey must"):
        spark.createDataFrame([("a",)], "value string").write.format("dafka").option(
            "towers", encrypted.cluster.towers
        ).option("topic", "x").options(**{**good, "curve.memberSecretKey": "short"}).mode(
            "append"
        ).save()


def test_spark_redacts_the_secret_options(spark: Any, encrypted: Encrypted) -> None:
    # Spark's own redaction of data source options (SQLConf.redactOptions: the default
    # spark.redaction.regex matches "secret"), as applied where it shows options.
    conf = spark._jsparkSession.sessionState().conf()
    options = spark._jvm.PythonUtils.toScalaMap(encrypted.options)
    shown = conf.redactOptions(options).toString()
    for name in ("curve.clusterSecretKey", "curve.memberSecretKey"):
        assert encrypted.options[name] not in shown, shown
        assert f"{name} -> *********(redacted)" in shown, shown
    assert encrypted.options["curve.allowedKeys"] in shown, "public keys stay readable"
    # Spark 4 shows a Python data source's options in no plan; should it start to, no secret.
    df = _read(spark, encrypted, unique_topic("sc"), **encrypted.options)
    plan = df._jdf.queryExecution().toString()
    assert "BatchScan dafka" in plan, plan
    assert encrypted.options["curve.memberSecretKey"] not in plan
