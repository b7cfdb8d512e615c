"""Dafka without towers: `towers="zre://CLUSTER?..."` makes a store, a producer and a
consumer find each other through ZRE (crates/dafka/src/zre_discovery.rs). On loopback here;
across three network namespaces in tests/test_zre_netns.py."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from zre_util import free_udp_port

import dafka


def zre_towers(port: int) -> str:
    return f"zre://c-{secrets.token_hex(4)}?interface=lo&port={port}&interval=0.1"


def test_store_producer_consumer_meet_through_zre(tmp_path: Path) -> None:
    towers = zre_towers(free_udp_port())
    with (
        dafka.Store(tmp_path / "store", towers=towers, sync="never"),
        dafka.Producer("zt", towers=towers) as producer,
    ):
        values = [f"record-{i}".encode() for i in range(200)]
        producer.send_many(values)
        # Acknowledged by the store: the producer found it through ZRE alone.
        producer.flush(timeout=20)
        with dafka.Consumer("zt", towers=towers, offset_reset="earliest") as consumer:
            got: list[bytes] = []
            for _ in range(200):
                batch = consumer.poll(timeout=0.2)
                got.extend(batch.column("value").to_pylist())
                if len(got) >= len(values):
                    break
            assert got == values


def test_other_clusters_are_not_joined(tmp_path: Path) -> None:
    port = free_udp_port()
    with (
        dafka.Store(tmp_path / "store", towers=zre_towers(port), sync="never"),
        dafka.Producer("zt", towers=zre_towers(port)) as producer,
    ):
        producer.send(b"alone")
        # Same beacon port, another cluster name: no store acknowledges.
        with pytest.raises(TimeoutError):
            producer.flush(timeout=1.5)


@pytest.mark.parametrize(
    "towers",
    ["zre://", "zre://c?port=x", "zre://c?bogus=1", "zre://c?interface=no-such-if0"],
)
def test_bad_zre_towers_are_refused(towers: str) -> None:
    with pytest.raises(dafka.InvalidArgumentError):
        dafka.Producer("zt", towers=towers)
