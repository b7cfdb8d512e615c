"""A Dafka cluster over CURVE from Python (issue 13): `dafka.ClusterKeys` handed to
LocalCluster (tower and store), Producer, Consumer and PartitionReader as `curve=`. The
encrypted cluster passes the produce -> consume round trip; a consumer without keys, and
one whose member key is not allowed, receive nothing, and the refusals are logged."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from test_dafka import collect

import dafka
from dafka.zmtp import curve_keypair


def secret() -> str:
    return curve_keypair()[1]


def test_cluster_keys_shape() -> None:
    cluster, member = curve_keypair(), curve_keypair()
    keys = dafka.ClusterKeys(cluster[1], member[1], [member[0]])
    assert (keys.cluster_publickey, keys.member_publickey) == (cluster[0], member[0])
    assert keys.allowed_keys == [member[0]]
    assert cluster[1] not in repr(keys) and member[1] not in repr(keys)
    with pytest.raises(ValueError, match="member_secretkey"):
        dafka.ClusterKeys(cluster[1], "short", [])
    with pytest.raises(ValueError, match="allowed_keys"):
        dafka.ClusterKeys(cluster[1], member[1], ["not a key"])


def test_encrypted_cluster_round_trip_and_outsiders_get_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    cluster_secret = secret()
    server_public, server_secret = curve_keypair()  # the tower's and the store's own key
    producer_public, producer_secret = curve_keypair()
    consumer_public, consumer_secret = curve_keypair()
    allowed = [server_public, producer_public, consumer_public]

    def keys(member: str) -> dafka.ClusterKeys:
        return dafka.ClusterKeys(cluster_secret, member, allowed)

    t = f"t-{uuid.uuid4().hex[:12]}"
    with (
        dafka.LocalCluster(curve=keys(server_secret)) as cluster,
        dafka.Producer(t, towers=cluster.towers, curve=keys(producer_secret)) as producer,
        dafka.Consumer(
            [t], towers=cluster.towers, offset_reset="earliest", curve=keys(consumer_secret)
        ) as consumer,
        # Outsiders: no keys at all; the cluster's keys with a member key nobody allowed.
        dafka.Consumer([t], towers=cluster.towers, offset_reset="earliest") as plaintext,
        dafka.Consumer(
            [t],
            towers=cluster.towers,
            offset_reset="earliest",
            curve=dafka.ClusterKeys(cluster_secret, secret(), allowed),
        ) as stranger,
    ):
        values = [f"secret-{i}".encode() for i in range(100)]
        producer.send_many(values)
        producer.flush(timeout=20)
        table = collect(consumer, len(values))
        assert table.column("value").to_pylist() == values
        assert table.column("offset").to_pylist() == list(range(len(values)))

        # The store holds them: an authorised reader gets their offsets.
        with dafka.PartitionReader(cluster.towers, curve=keys(consumer_secret)) as reader:
            assert reader.offsets(t, timeout=20) == {producer.partition: (0, len(values))}

        # The outsiders: nothing, even from the start, after a while.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert plaintext.poll(timeout=0.2).num_rows == 0
            assert stranger.poll(timeout=0.2).num_rows == 0

    logged = [r.getMessage() for r in caplog.records]
    # The stranger's key was refused by the authenticator, the plaintext consumer by the
    # mechanism check; both logged.
    assert any("authentication refused" in m for m in logged), logged
    assert any("security mechanism" in m for m in logged), logged
