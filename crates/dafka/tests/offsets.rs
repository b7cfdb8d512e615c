//! `ConsumerNode::offsets` over real loopback TCP: the partitions of a topic and their bounds,
//! asked of a running store, and a bounded failure when no store can be reached.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dafka_node::{
    Bounds, ConsumerNode, ConsumerOptions, ConsumerRecord, Error, OffsetReset, ProducerNode,
    StoreNode, StoreOptions, SyncPolicy, TowerAddress,
};

mod support;

use support::{PATIENCE, fast, producer_options, tower};

async fn store(dir: &tempfile::TempDir, towers: &[TowerAddress]) -> StoreNode {
    let options = StoreOptions::with_sync(SyncPolicy::Never);
    StoreNode::open(dir.path(), fast(towers), options)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_lists_every_partition_of_a_topic_with_its_bounds() {
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, &towers).await;
    let mut want = BTreeMap::new();
    let mut producers = Vec::new();
    for n in [300u64, 500] {
        let p = ProducerNode::start("planned", fast(&towers), producer_options())
            .await
            .unwrap();
        let values: Vec<_> = (0..n)
            .map(|i| bytes::Bytes::from(format!("v{i}")))
            .collect();
        p.send_many(values).await.unwrap();
        p.flush(Some(PATIENCE)).await.unwrap();
        want.insert(p.partition(), Bounds { low: 0, end: n });
        producers.push(p);
    }
    // Another topic's partition is not listed.
    let other = ProducerNode::start("planned2", fast(&towers), producer_options())
        .await
        .unwrap();
    other.send(bytes::Bytes::from("x")).await.unwrap();
    other.flush(Some(PATIENCE)).await.unwrap();

    // Subscribed to nothing: the query needs no subscription.
    let admin = ConsumerNode::start(&[], fast(&towers), ConsumerOptions::default())
        .await
        .unwrap();
    let got: BTreeMap<_, _> = admin
        .offsets("planned", PATIENCE)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(got, want);
    // Asked again on the same node (a cached consumer), with more records written.
    producers[0].send(bytes::Bytes::from("more")).await.unwrap();
    producers[0].flush(Some(PATIENCE)).await.unwrap();
    let again: BTreeMap<_, _> = admin
        .offsets("planned", PATIENCE)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(
        again[&producers[0].partition()],
        Bounds { low: 0, end: 301 }
    );
    // A topic nobody wrote: no partition, and no error (a store answered nothing).
    assert!(admin.offsets("empty", PATIENCE).await.unwrap().is_empty());
    // Nothing delivered: the admin subscribed to no topic.
    assert!(
        admin
            .poll(10, Duration::from_millis(50))
            .await
            .unwrap()
            .is_empty()
    );
    admin.close().await;
    for p in producers {
        p.close().await;
    }
    other.close().await;
    store.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_fails_in_bounded_time_without_a_store() {
    // A tower but no store.
    let (tower, towers) = tower().await;
    let admin = ConsumerNode::start(&[], fast(&towers), ConsumerOptions::default())
        .await
        .unwrap();
    let started = Instant::now();
    let r = admin.offsets("planned", Duration::from_millis(700)).await;
    assert!(matches!(r, Err(Error::NoStore { .. })), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    admin.close().await;
    tower.close().await;

    // A tower address nothing listens on (below the ephemeral range: no connection of the
    // node's can take it as its source port and connect to itself).
    let port = dafka_testkit::free_tcp_port();
    let nowhere = vec![TowerAddress::new(
        format!("tcp://127.0.0.1:{port}"),
        format!("tcp://127.0.0.1:{}", port + 1),
    )];
    let admin = ConsumerNode::start(&[], fast(&nowhere), ConsumerOptions::default())
        .await
        .unwrap();
    let started = Instant::now();
    let r = admin.offsets("planned", Duration::from_millis(700)).await;
    let msg = r
        .as_ref()
        .map(|_| String::new())
        .unwrap_or_else(|e| e.to_string());
    assert!(matches!(r, Err(Error::NoStore { .. })), "{msg}");
    assert!(msg.contains("towers"), "{msg}");
    assert!(started.elapsed() < Duration::from_secs(3));
    admin.close().await;
}

/// Every store died after a query succeeded: the next query fails with `NoStore` within its
/// timeout (the dead store is no longer counted as reachable) instead of settling on an empty
/// answer; a store back on the same directory is found again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_fails_once_every_store_died() {
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir, &towers).await;
    let p = ProducerNode::start("dying", fast(&towers), producer_options())
        .await
        .unwrap();
    p.send_many([bytes::Bytes::from("a"), bytes::Bytes::from("b")])
        .await
        .unwrap();
    p.flush(Some(PATIENCE)).await.unwrap();
    let partition = p.partition();
    p.close().await;
    let admin = ConsumerNode::start(&[], fast(&towers), ConsumerOptions::default())
        .await
        .unwrap();
    let got = admin.offsets("dying", PATIENCE).await.unwrap();
    assert_eq!(got, vec![(partition, Bounds { low: 0, end: 2 })]);
    s.close().await;
    let started = Instant::now();
    let r = admin.offsets("dying", Duration::from_millis(700)).await;
    assert!(matches!(r, Err(Error::NoStore { .. })), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    let s = store(&dir, &towers).await;
    let got = admin.offsets("dying", PATIENCE).await.unwrap();
    assert_eq!(got, vec![(partition, Bounds { low: 0, end: 2 })]);
    admin.close().await;
    s.close().await;
    tower.close().await;
}

/// An "assigned" consumer reads one offset range of one partition from the store, with the
/// producers gone (no HEAD will ever come: the range is FETCHed at once), and nothing else:
/// no other partition, nothing past the range's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assign_reads_a_range_of_one_partition_from_the_store_only() {
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, &towers).await;
    let mut partitions = Vec::new();
    for name in ["a", "b"] {
        let p = ProducerNode::start("ranges", fast(&towers), producer_options())
            .await
            .unwrap();
        let values: Vec<_> = (0..400)
            .map(|i| bytes::Bytes::from(format!("{name}{i}")))
            .collect();
        p.send_many(values).await.unwrap();
        p.flush(Some(PATIENCE)).await.unwrap();
        partitions.push(p.partition());
        p.close().await;
    }
    let options = ConsumerOptions::default().with_offset_reset(OffsetReset::Assigned);
    let reader = ConsumerNode::start(&[], fast(&towers), options)
        .await
        .unwrap();
    let bounds = reader.offsets("ranges", PATIENCE).await.unwrap();
    assert_eq!(bounds.len(), 2);
    for (round, (&p, name)) in partitions.iter().zip(["a", "b"]).enumerate() {
        let (start, end) = (100 + round as u64, 300);
        reader.assign("ranges", p, start, Some(end)).unwrap();
        let mut got = Vec::new();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !got.iter().any(|r: &ConsumerRecord| r.offset + 1 >= end)
            && tokio::time::Instant::now() < deadline
        {
            got.extend(reader.poll(1000, Duration::from_millis(100)).await.unwrap());
        }
        assert!(
            got.iter().all(|r| r.partition == p),
            "only the assigned partition"
        );
        // The range and nothing past its end.
        let offsets: Vec<u64> = got.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (start..end).collect::<Vec<_>>());
        assert!(
            got.iter()
                .all(|r| r.value == format!("{name}{}", r.offset).as_bytes())
        );
        reader.unassign("ranges", p).unwrap();
        // Unassigned: nothing more of it is delivered.
        let late = reader.poll(1000, Duration::from_millis(200)).await.unwrap();
        assert!(late.is_empty(), "{} records after unassign", late.len());
    }
    reader.close().await;
    store.close().await;
    tower.close().await;
}

/// A node that hears of a new peer from a tower beacons soon after (not at its next periodic
/// beacon): with beacons every 30 s, a reader started after the store still reaches it (both
/// ways: the offsets query needs the store's STORE-HELLO) within a few seconds, and reads a
/// range at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_reaches_a_store_long_before_its_next_beacon() {
    let (tower, towers) = tower().await;
    let slow = || {
        dafka_node::NodeConfig::new(towers.to_vec())
            .with_beacon_interval(Duration::from_secs(30))
            .with_peer_timeout(Duration::from_secs(60))
    };
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions::with_sync(SyncPolicy::Never);
    let store = StoreNode::open(dir.path(), slow(), options).await.unwrap();
    let p = ProducerNode::start("newcomer", fast(&towers), producer_options())
        .await
        .unwrap();
    p.send_many((0..10u8).map(|i| bytes::Bytes::from(vec![i])))
        .await
        .unwrap();
    p.flush(Some(PATIENCE)).await.unwrap();
    let partition = p.partition();
    p.close().await;
    // The store's first beacons are long gone when the reader arrives.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let options = ConsumerOptions::default().with_offset_reset(OffsetReset::Assigned);
    let reader = ConsumerNode::start(&[], slow(), options).await.unwrap();
    let started = Instant::now();
    let bounds = reader
        .offsets("newcomer", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(bounds, vec![(partition, Bounds { low: 0, end: 10 })]);
    reader.assign("newcomer", partition, 0, Some(10)).unwrap();
    let got = reader.poll(10, Duration::from_secs(5)).await.unwrap();
    assert_eq!(got.len(), 10);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    reader.close().await;
    store.close().await;
    tower.close().await;
}
