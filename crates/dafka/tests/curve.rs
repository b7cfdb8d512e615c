//! A Dafka cluster over CURVE (tower, producer, consumer on loopback) passes the same
//! exactly-once test as in plaintext; a consumer without the cluster's key, and one whose key
//! is not allowed, see nothing of it.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
mod support;

use dafka_node::{ClusterKeys, ConsumerNode, ConsumerOptions, ProducerNode, Tower, TowerConfig};
use dafka_zmtp::CurveKeyPair;
use support::{check_exactly_once, collect, fast, producer_options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_over_curve_and_outsiders_see_nothing() {
    let cluster = CurveKeyPair::generate();
    let (producer_key, consumer_key, tower_key) = (
        CurveKeyPair::generate(),
        CurveKeyPair::generate(),
        CurveKeyPair::generate(),
    );
    let allowed = [
        *producer_key.public(),
        *consumer_key.public(),
        *tower_key.public(),
    ];
    let member = |key: &CurveKeyPair| Some(ClusterKeys::new(cluster.clone(), key.clone(), allowed));
    let tower =
        Tower::start(TowerConfig::new("tcp://127.0.0.1:0").with_security(member(&tower_key)))
            .await
            .unwrap();
    let towers = vec![tower.address().clone()];

    let producer = ProducerNode::start(
        "secret",
        fast(&towers).with_security(member(&producer_key)),
        producer_options(),
    )
    .await
    .unwrap();
    let from_start =
        || ConsumerOptions::default().with_start_offset("secret", producer.partition(), 0);
    let consumer = ConsumerNode::start(
        &["secret"],
        fast(&towers).with_security(member(&consumer_key)),
        from_start(),
    )
    .await
    .unwrap();
    // Outsiders: no keys at all, and the cluster's public key with a key nobody allowed.
    let plaintext = ConsumerNode::start(&["secret"], fast(&towers), from_start())
        .await
        .unwrap();
    let stranger = ConsumerNode::start(
        &["secret"],
        fast(&towers).with_security(Some(ClusterKeys::new(
            cluster.clone(),
            CurveKeyPair::generate(),
            allowed,
        ))),
        from_start(),
    )
    .await
    .unwrap();

    let values: Vec<Bytes> = (0..200).map(|n| Bytes::from(format!("r{n:04}"))).collect();
    producer
        .send_many(values[..100].iter().cloned())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for v in &values[100..] {
        producer.send(v.clone()).await.unwrap();
    }
    let got = collect(&consumer, 200).await;
    check_exactly_once(&got, &BTreeMap::from([(producer.partition(), values)]));
    for outsider in [&plaintext, &stranger] {
        assert!(
            outsider
                .poll(10, Duration::from_millis(1500))
                .await
                .unwrap()
                .is_empty(),
            "an outsider received records"
        );
    }
    for c in [consumer, plaintext, stranger] {
        c.close().await;
    }
    producer.close().await;
    tower.close().await;
}
