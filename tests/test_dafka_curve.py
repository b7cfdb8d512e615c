"""A Dafka cluster over CURVE from Python (issue 13): `dafka.ClusterKeys` handed to
LocalCluster (tower and store), Producer, Consumer and PartitionReader as `curve=`. The
encrypted cluster passes the produce -> consume round trip; a consumer without keys, and
one whose member key is not allowed, receive nothing, and the refusals are logged."""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

import pytest
from test_dafka import collect
from zre_util import free_udp_port

import dafka
from dafka.zmtp import curve_keypair
from dafka.zre import Node


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
    with pytest.raises(ValueError, match="allowed_keys holds None"):
        dafka.ClusterKeys(cluster[1], member[1], [member[0], None])


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


def test_encrypted_cluster_over_zre_discovery(tmp_path: Path) -> None:
    """`towers="zre://..."` with keys: the ZRE discovery runs in CURVE mode with the member
    keys and the cluster's allow-list, so the store, producer and consumer meet; a plaintext
    producer on the same beacon port finds no store (its beacons are 22-byte ones), nor does
    one with the cluster's keys and a member key nobody allowed."""
    cluster_secret = secret()
    pairs = [curve_keypair() for _ in range(3)]
    allowed = [p for p, _ in pairs]
    store_key, producer_key, consumer_key = (
        dafka.ClusterKeys(cluster_secret, s, allowed) for _, s in pairs
    )
    port = free_udp_port()
    towers = f"zre://c-{uuid.uuid4().hex[:8]}?interface=lo&port={port}&interval=0.1"
    with (
        dafka.Store(tmp_path / "store", towers=towers, sync="never", curve=store_key),
        dafka.Producer("zt", towers=towers, curve=producer_key) as producer,
    ):
        values = [f"z-{i}".encode() for i in range(50)]
        producer.send_many(values)
        producer.flush(timeout=20)
        with dafka.Consumer(
            "zt", towers=towers, offset_reset="earliest", curve=consumer_key
        ) as consumer:
            assert collect(consumer, len(values)).column("value").to_pylist() == values
        # The discovery itself is out of reach: a ZRE node without an allowed key (plaintext,
        # or CURVE with another key) hears no ENTER, so no publisher endpoint.
        for curve in ({}, {"curve_secretkey": secret()}):
            with Node("spy", interface="lo", port=port, interval=0.1, **curve) as spy:
                heard = []
                deadline = time.monotonic() + 1.5
                while (left := deadline - time.monotonic()) > 0:
                    try:
                        heard.append(spy.recv(timeout=left))
                    except TimeoutError:
                        break
                assert [e for e in heard if e.type == "ENTER"] == [], heard
        unallowed = dafka.ClusterKeys(cluster_secret, secret(), allowed)
        for keys in (None, unallowed):
            with dafka.Producer("zt", towers=towers, curve=keys) as outsider:
                outsider.send(b"let me in")
                with pytest.raises(TimeoutError):
                    outsider.flush(timeout=1.5)
    with pytest.raises(ValueError, match="CURVE"):
        dafka.Producer("zt", towers=towers + "&known=tcp://127.0.0.1:1", curve=producer_key)
