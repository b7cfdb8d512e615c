//! Helpers of the node tests: a tower on a free loopback port, fast beacons, polling until
//! enough records came, a bare beacon announcing a raw peer.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use dafka_node::{
    ConsumerNode, ConsumerRecord, NodeConfig, NodeId, ProducerOptions, StoreNode, StoreOptions,
    Tower, TowerAddress, TowerConfig,
};
use dafka_proto::{BeaconMessage, NodeBeacon};
use dafka_zmtp::{Options, Socket, SocketType};

pub const PATIENCE: Duration = Duration::from_secs(20);

pub async fn tower() -> (Tower, Vec<TowerAddress>) {
    let tower = Tower::start(TowerConfig::new("tcp://127.0.0.1:0"))
        .await
        .unwrap();
    let towers = vec![tower.address().clone()];
    (tower, towers)
}

pub fn fast(towers: &[TowerAddress]) -> NodeConfig {
    NodeConfig::new(towers.to_vec()).with_beacon_interval(Duration::from_millis(200))
}

pub fn producer_options() -> ProducerOptions {
    ProducerOptions::default().with_head_interval(Duration::from_millis(100))
}

/// Waits until `holds()` (checked every 20 ms), or the patience runs out; returns whether it
/// holds.
pub async fn until(mut holds: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !holds() {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// Polls until `n` records came (or the patience runs out).
pub async fn collect(consumer: &ConsumerNode, n: usize) -> Vec<ConsumerRecord> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while got.len() < n && tokio::time::Instant::now() < deadline {
        got.extend(
            consumer
                .poll(n - got.len(), Duration::from_millis(200))
                .await
                .unwrap(),
        );
    }
    got
}

/// A bare beacon PUB announcing `node` at `127.0.0.1:port` to the first tower every 50 ms
/// until it is closed.
pub async fn announce(towers: &[TowerAddress], node: NodeId, port: u16) -> Socket {
    let beacon = Socket::new(
        SocketType::Pub,
        Options::default().with_linger(Some(Duration::ZERO)),
    )
    .unwrap();
    beacon.connect(&towers[0].sub).await.unwrap();
    let frames = BeaconMessage::Node(NodeBeacon {
        node,
        host: "127.0.0.1".to_owned(),
        port,
    })
    .to_frames();
    let b = beacon.clone();
    tokio::spawn(async move {
        while b.try_send(frames.clone().into()).is_ok() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    beacon
}

/// Every partition's offsets are 0.. in order, each once, and each value is what was sent.
pub fn check_exactly_once(got: &[ConsumerRecord], sent: &BTreeMap<NodeId, Vec<Bytes>>) {
    let mut per: BTreeMap<NodeId, Vec<&ConsumerRecord>> = BTreeMap::new();
    for r in got {
        per.entry(r.partition).or_default().push(r);
    }
    assert_eq!(per.len(), sent.len(), "partitions");
    for (partition, values) in sent {
        let records = &per[partition];
        let offsets: Vec<u64> = records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (0..values.len() as u64).collect::<Vec<_>>());
        for r in records {
            assert_eq!(r.value, values[r.offset as usize]);
        }
    }
}

/// A store node in `dir` whose engine has `engine`'s settings, FETCHing gaps every 50 ms.
pub async fn store_with(
    dir: &std::path::Path,
    towers: &[TowerAddress],
    engine: dafka_store::Config,
) -> StoreNode {
    StoreNode::open(
        dir,
        fast(towers),
        StoreOptions::default()
            .with_engine(engine)
            .with_fetch_retry(Duration::from_millis(50)),
    )
    .await
    .unwrap()
}
