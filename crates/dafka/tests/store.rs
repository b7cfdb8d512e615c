//! The store node over real loopback TCP (127.0.0.1, ports 0) with producers and consumers,
//! and its durability across SIGKILL (the store in a child process: this test binary
//! re-invoked).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
mod support;

use dafka_node::{
    ConsumerNode, ConsumerOptions, Error, NodeId, OffsetReset, ProducerNode, StoreNode, SyncPolicy,
    TowerAddress,
};
use support::{
    PATIENCE, check_exactly_once, collect, fast, producer_options, store_with, tower, until,
};

async fn store(dir: &Path, towers: &[TowerAddress]) -> StoreNode {
    store_with(
        dir,
        towers,
        dafka_store::Config::with_sync(SyncPolicy::Always),
    )
    .await
}

/// Every record of `partition` in the store directory `dir`, read by the engine alone.
fn on_disk(dir: &Path, topic: &str, partition: NodeId) -> Vec<(u64, Bytes)> {
    let engine = dafka_store::Store::open_path(dir, dafka_store::Config::default()).unwrap();
    let key = dafka_store::PartitionKey::new(topic, *partition.as_bytes());
    let Some(id) = engine.lookup(&key) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    loop {
        let next = out.len() as u64;
        let chunk = engine.read(id, next, 10_000, 64 << 20).unwrap();
        if chunk.is_empty() {
            break;
        }
        out.extend(chunk.into_iter().map(|r| (r.offset, r.value)));
    }
    engine.close();
    out
}

/// Flips a bit in the stored value `value` (found by its bytes) in the first segment of the
/// stopped store in `dir`.
fn damage(dir: &Path, value: &[u8]) {
    let segment = dir.join(dafka_store::format::segment_file_name(0));
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes.windows(value.len()).position(|w| w == value).unwrap();
    bytes[at + 3] ^= 0x10;
    std::fs::write(&segment, bytes).unwrap();
}

fn values(prefix: &str, n: usize) -> Vec<Bytes> {
    (0..n)
        .map(|i| Bytes::from(format!("{prefix}-{i:06}")))
        .collect()
}

fn earliest() -> ConsumerOptions {
    ConsumerOptions::default()
        .with_offset_reset(OffsetReset::Earliest)
        .with_fetch_retry(Duration::from_millis(50), Duration::from_millis(400))
}

/// `flush` returns only once a store acknowledged, and what it acknowledged is in its directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_returns_when_a_store_acknowledged_and_the_records_are_on_disk() {
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let producer = ProducerNode::start("acked", fast(&towers), producer_options())
        .await
        .unwrap();
    let sent = values("acked", 500);
    producer.send_many(sent.clone()).await.unwrap();
    // No store: nothing acknowledges.
    assert!(matches!(
        producer.flush(Some(Duration::from_millis(300))).await,
        Err(Error::FlushTimeout { unacked: 500, .. })
    ));
    // Nothing to wait for below offset 0; offset 1 waits for a store.
    producer.wait_acknowledged(0).await.unwrap();
    let first = tokio::time::timeout(Duration::from_millis(200), producer.wait_acknowledged(1));
    assert!(first.await.is_err());
    let store = store(dir.path(), &towers).await;
    tokio::time::timeout(PATIENCE, producer.wait_acknowledged(250))
        .await
        .unwrap()
        .unwrap();
    producer.flush(Some(PATIENCE)).await.unwrap();
    assert_eq!(producer.unacked_records(), 0);
    let partition = producer.partition();
    producer.close().await;
    store.close().await;
    let disk = on_disk(dir.path(), "acked", partition);
    assert_eq!(disk.len(), 500);
    for (i, (offset, value)) in disk.iter().enumerate() {
        assert_eq!((*offset, value), (i as u64, &sent[i]));
    }
    tower.close().await;
}

/// An "earliest" consumer started after the producer is gone gets every record from the
/// store (GET-HEADS / CONSUMER-HELLO -> DIRECT-HEAD, then FETCH answered by the store reader).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn earliest_consumer_reads_everything_from_a_store_after_the_producer_is_gone() {
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), &towers).await;
    let producer = ProducerNode::start("history", fast(&towers), producer_options())
        .await
        .unwrap();
    let sent = values("history", 3000);
    producer.send_many(sent.clone()).await.unwrap();
    producer.flush(Some(PATIENCE)).await.unwrap();
    let partition = producer.partition();
    producer.close().await;
    let consumer = ConsumerNode::start(&["history"], fast(&towers), earliest())
        .await
        .unwrap();
    let got = collect(&consumer, 3000).await;
    check_exactly_once(&got, &BTreeMap::from([(partition, sent)]));
    // Nothing twice.
    assert!(
        consumer
            .poll(10, Duration::from_millis(300))
            .await
            .unwrap()
            .is_empty()
    );
    consumer.close().await;
    store.close().await;
    tower.close().await;
}

/// A producer of `topic` whose first `n` records a store acknowledged.
async fn stored(towers: &[TowerAddress], topic: &str, n: usize) -> ProducerNode {
    let producer = ProducerNode::start(topic, fast(towers), producer_options())
        .await
        .unwrap();
    producer.send_many(values(topic, n)).await.unwrap();
    producer.flush(Some(PATIENCE)).await.unwrap();
    producer
}

/// Waits until the store holds `n` durable records of `partition`.
async fn wait_for_head(store: &StoreNode, topic: &str, partition: NodeId, n: u64) {
    let key = dafka_store::PartitionKey::new(topic, *partition.as_bytes());
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let head = store
            .engine()
            .lookup(&key)
            .and_then(|id| store.engine().head(id));
        if head == Some(n) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "store head {head:?}, want {n}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A second store started after the producer's records were acknowledged (and released by
/// the producer) gets them from the first store's reader: both hold the same data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_store_catches_up_from_the_first() {
    let (tower, towers) = tower().await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let s1 = store(d1.path(), &towers).await;
    let producer = ProducerNode::start("replicated", fast(&towers), producer_options())
        .await
        .unwrap();
    let sent = values("replicated", 2000);
    producer.send_many(sent.clone()).await.unwrap();
    producer.flush(Some(PATIENCE)).await.unwrap();
    let partition = producer.partition();
    // The producer's HEADs tell the new store what exists; only S1 holds the records now.
    let s2 = store(d2.path(), &towers).await;
    wait_for_head(&s2, "replicated", partition, 2000).await;
    producer.close().await;
    s1.close().await;
    s2.close().await;
    let a = on_disk(d1.path(), "replicated", partition);
    let b = on_disk(d2.path(), "replicated", partition);
    assert_eq!(a.len(), 2000);
    assert_eq!(a, b);
    assert!(a.iter().zip(&sent).all(|((_, v), s)| v == s));
    tower.close().await;
}

/// Three producers, two stores, two consumers: every record exactly once per consumer, in
/// order per partition; both stores end with every partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_to_end_producers_two_stores_consumers() {
    let (tower, towers) = tower().await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let s1 = store(d1.path(), &towers).await;
    let s2 = store(d2.path(), &towers).await;
    let mut consumers = Vec::new();
    for _ in 0..2 {
        consumers.push(
            ConsumerNode::start(&["e2e"], fast(&towers), earliest())
                .await
                .unwrap(),
        );
    }
    let mut producers = Vec::new();
    for _ in 0..3 {
        producers.push(
            ProducerNode::start("e2e", fast(&towers), producer_options())
                .await
                .unwrap(),
        );
    }
    let mut sent = BTreeMap::new();
    for round in 0..4 {
        for (i, p) in producers.iter().enumerate() {
            let v = values(&format!("p{i}"), 4000);
            let chunk = v[round * 1000..(round + 1) * 1000].to_vec();
            p.send_many(chunk).await.unwrap();
            sent.insert(p.partition(), v);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for p in &producers {
        p.flush(Some(PATIENCE)).await.unwrap();
    }
    for c in &consumers {
        let got = collect(c, 12_000).await;
        check_exactly_once(&got, &sent);
    }
    for p in producers {
        let partition = p.partition();
        for s in [&s1, &s2] {
            wait_for_head(s, "e2e", partition, 4000).await;
        }
        p.close().await;
    }
    for c in consumers {
        c.close().await;
    }
    s1.close().await;
    s2.close().await;
    tower.close().await;
}

/// The store of the durability test, run in a child process (this binary re-invoked with the
/// directory and towers in the environment) until it is killed.
#[test]
#[ignore = "run by store_killed_repeatedly_keeps_every_acknowledged_record as a child"]
fn child_store() {
    let (Ok(dir), Ok(towers)) = (
        std::env::var("DAFKA_TEST_STORE_DIR"),
        std::env::var("DAFKA_TEST_TOWERS"),
    ) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let towers = TowerAddress::parse_list(&towers).unwrap();
        let _store = store(Path::new(&dir), &towers).await;
        println!("store ready");
        std::future::pending::<()>().await;
    });
}

/// A child store process, SIGKILLed when dropped.
struct ChildStore(Child);

impl ChildStore {
    fn spawn(dir: &Path, towers: &str) -> ChildStore {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["child_store", "--exact", "--ignored", "--nocapture"])
            .env("DAFKA_TEST_STORE_DIR", dir)
            .env("DAFKA_TEST_TOWERS", towers)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        ChildStore(child)
    }

    /// SIGKILL (std's `kill` on Unix), then reap.
    fn kill(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for ChildStore {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The store process SIGKILLed five times during a sustained produce and restarted on its
/// directory each time: after the producer's flush, every record it sent (all acknowledged)
/// is in the directory, in order, read by the engine alone with the producer gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_killed_repeatedly_keeps_every_acknowledged_record() {
    let (tower, towers) = tower().await;
    let towers_arg = tower.towers();
    let dir = tempfile::tempdir().unwrap();
    let producer = std::sync::Arc::new(
        ProducerNode::start("durable", fast(&towers), producer_options())
            .await
            .unwrap(),
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let p = producer.clone();
    let s = stop.clone();
    let sending = tokio::spawn(async move {
        let mut n = 0u64;
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            let batch: Vec<Bytes> = (n..n + 50)
                .map(|i| Bytes::from(format!("durable-{i:08}")))
                .collect();
            let first = p.send_many(batch).await.unwrap();
            assert_eq!(first, n);
            n += 50;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        n
    });
    let mut acked_before_kill = Vec::new();
    for round in 0..5u64 {
        let child = ChildStore::spawn(dir.path(), &towers_arg);
        tokio::time::sleep(Duration::from_millis(600 + 150 * round)).await;
        child.kill();
        acked_before_kill.push(producer.acknowledged_records());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = sending.await.unwrap();
    let child = ChildStore::spawn(dir.path(), &towers_arg);
    producer.flush(Some(PATIENCE)).await.unwrap();
    assert_eq!(producer.next_offset(), sent);
    let partition = producer.partition();
    child.kill();
    std::sync::Arc::into_inner(producer).unwrap().close().await;
    // Some records were acknowledged while the stores were being killed.
    assert!(
        acked_before_kill.iter().any(|&a| a > 0),
        "{acked_before_kill:?}"
    );
    eprintln!("sent {sent} records; acknowledged at each kill: {acked_before_kill:?}");
    let disk = on_disk(dir.path(), "durable", partition);
    assert_eq!(disk.len() as u64, sent);
    for (i, (offset, value)) in disk.iter().enumerate() {
        assert_eq!(*offset, i as u64);
        assert_eq!(value, format!("durable-{i:08}").as_bytes());
    }
    tower.close().await;
}

/// A producer dropped without a word and started again with its partition id learns the
/// stores' head and continues at the next offset; a consumer gets every record once. A
/// partition no store holds cannot be resumed (the producer does not guess an offset).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_producer_continues_at_the_next_offset() {
    let (tower, towers) = tower().await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let s1 = store(d1.path(), &towers).await;
    let s2 = store(d2.path(), &towers).await;
    let first = ProducerNode::start("resumed", fast(&towers), producer_options())
        .await
        .unwrap();
    let sent = values("resumed", 1500);
    first.send_many(sent[..1000].to_vec()).await.unwrap();
    first.flush(Some(PATIENCE)).await.unwrap();
    let partition = first.partition();
    drop(first);
    let second = ProducerNode::start(
        "resumed",
        fast(&towers),
        producer_options().with_partition(Some(partition)),
    )
    .await
    .unwrap();
    assert_eq!(second.next_offset(), 1000);
    assert_eq!(second.send_many(sent[1000..].to_vec()).await.unwrap(), 1000);
    second.flush(Some(PATIENCE)).await.unwrap();
    let consumer = ConsumerNode::start(&["resumed"], fast(&towers), earliest())
        .await
        .unwrap();
    let got = collect(&consumer, 1500).await;
    check_exactly_once(&got, &BTreeMap::from([(partition, sent)]));
    let unknown = ProducerNode::start(
        "resumed",
        fast(&towers),
        producer_options()
            .with_partition(Some(NodeId::from_bytes([7; 16])))
            .with_resume_timeout(Some(Duration::from_millis(500))),
    )
    .await;
    assert!(matches!(unknown, Err(Error::ResumeTimeout { .. })));
    consumer.close().await;
    second.close().await;
    s1.close().await;
    s2.close().await;
    tower.close().await;
}

/// After retention dropped the first segments, an "earliest" consumer starts at the store's
/// low-water mark (DIRECT-LOW-WATER, an extension) and gets every record from there once, in
/// order, with the producer gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn earliest_consumer_after_retention_starts_at_the_low_water_mark() {
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let mut engine = dafka_store::Config::with_sync(SyncPolicy::Always);
    engine.segment_bytes = 16 << 10;
    engine.max_record_bytes = 1024;
    engine.retention.max_bytes = Some(64 << 10);
    let s = store_with(dir.path(), &towers, engine).await;
    let producer = ProducerNode::start("retained", fast(&towers), producer_options())
        .await
        .unwrap();
    let sent = values("retained", 5000);
    for chunk in sent.chunks(500) {
        producer.send_many(chunk.to_vec()).await.unwrap();
        producer.flush(Some(PATIENCE)).await.unwrap();
    }
    let partition = producer.partition();
    producer.close().await;
    let key = dafka_store::PartitionKey::new("retained", *partition.as_bytes());
    let id = s.engine().lookup(&key).unwrap();
    // The writer thread applies retention after it acknowledges the batch that rolled a
    // segment, so the mark may still move once flush has returned: settle it here (this
    // call takes the engine's lock, so it also waits out a pass already running).
    s.engine().apply_retention(dafka_store::now_us());
    let low = s.engine().low_water(id).unwrap();
    assert!(low > 0 && low < 5000, "low-water mark {low}");
    let consumer = ConsumerNode::start(&["retained"], fast(&towers), earliest())
        .await
        .unwrap();
    let want = 5000 - low as usize;
    let got = collect(&consumer, want).await;
    let offsets: Vec<u64> = got.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (low..5000).collect::<Vec<_>>());
    assert!(got.iter().all(|r| r.value == sent[r.offset as usize]));
    consumer.close().await;
    s.close().await;
    tower.close().await;
}

/// `min_acks` 2: one store is not enough (flush times out), two distinct stores are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_acks_two_needs_two_distinct_stores() {
    let (tower, towers) = tower().await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let s1 = store(d1.path(), &towers).await;
    let producer = ProducerNode::start("twice", fast(&towers), producer_options().with_min_acks(2))
        .await
        .unwrap();
    producer.send_many(values("twice", 200)).await.unwrap();
    wait_for_head(&s1, "twice", producer.partition(), 200).await;
    assert!(matches!(
        producer.flush(Some(Duration::from_millis(500))).await,
        Err(Error::FlushTimeout { unacked: 200, .. })
    ));
    let s2 = store(d2.path(), &towers).await;
    // No deadline inside flush: a lost wake-up fails here instead of passing at the deadline.
    tokio::time::timeout(PATIENCE, producer.flush(None))
        .await
        .expect("flush woken by the second store's STORE-ACK")
        .unwrap();
    producer.close().await;
    s1.close().await;
    s2.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_leave_in_offset_order_when_try_send_and_send_mix() {
    use dafka_proto::{Limits, Message};
    use dafka_zmtp::{Options, Socket, SocketType};
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), &towers).await;
    // A small window: the buffer fills often, and `send` then publishes what it queues while
    // the node's task may be publishing what `try_send` queued before.
    let producer = ProducerNode::start(
        "o",
        fast(&towers),
        producer_options().with_max_unacked_records(500),
    )
    .await
    .unwrap();
    // A raw SUB on the producer's publisher sees the RECORDs as they go on the wire.
    let sub = Socket::new(SocketType::Sub, Options::default()).unwrap();
    sub.subscribe(b"").unwrap();
    let endpoint = format!("tcp://127.0.0.1:{}", producer.publisher_port());
    sub.connect(&endpoint).await.unwrap();
    // Its subscription and the store writer's reached the publisher.
    assert!(until(|| producer.live_readers() == 2).await);
    let n = 40_000u64;
    let sending = async {
        // What Python's `send` does: try_send, and send (waiting for room) when full.
        for i in 0..n {
            let v = Bytes::from(i.to_be_bytes().to_vec());
            let offset = match producer.try_send(v).unwrap() {
                Ok(offset) => offset,
                Err(v) => producer.send(v).await.unwrap(),
            };
            assert_eq!(offset, i);
        }
        producer.flush(Some(PATIENCE)).await.unwrap();
    };
    let watching = async {
        let limits = Limits::default();
        let (mut last, mut seen) = (None::<u64>, 0u64);
        let mut batch = Vec::new();
        // Until the last record, or (a SUB over its HWM loses some) nothing for a second.
        while last != Some(n - 1) {
            batch.clear();
            let got = tokio::time::timeout(Duration::from_secs(1), sub.recv_many(1024, &mut batch));
            if got.await.is_err() {
                break;
            }
            for m in &batch {
                let r = match Message::decode(m.frames(), &limits) {
                    Ok(Message::MetaRecord(m)) => m.record,
                    Ok(Message::Record(r)) => r,
                    _ => continue,
                };
                {
                    assert!(
                        last.is_none_or(|l| r.sequence > l),
                        "RECORD {} went out after {last:?}",
                        r.sequence
                    );
                    last = Some(r.sequence);
                    seen += 1;
                }
            }
        }
        seen
    };
    let ((), seen) = tokio::join!(sending, watching);
    assert!(seen > n / 2, "the raw SUB saw {seen} of {n} RECORDs");
    sub.close().await;
    producer.close().await;
    s.close().await;
    tower.close().await;
}

/// Issue 21: one flipped bit in the value of offset 5000 of a store's only segment; the store
/// restarted. An "earliest" consumer received 0..4999 and then waited forever (every FETCH
/// retry logged the damage again). Now the store answers DIRECT-MISSING for 5000 and goes on:
/// the consumer skips that one offset (counted in `lost`) and receives every other record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_record_is_skipped_not_waited_for() {
    const N: usize = 20_000;
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), &towers).await;
    let producer = ProducerNode::start("damaged", fast(&towers), producer_options())
        .await
        .unwrap();
    let sent = values("damaged", N);
    producer.send_many(sent.clone()).await.unwrap();
    producer.flush(Some(PATIENCE)).await.unwrap();
    let partition = producer.partition();
    producer.close().await;
    s.close().await;

    damage(dir.path(), &sent[5000]);

    let s = store(dir.path(), &towers).await;
    let report = s.engine().recovery_report().clone();
    assert_eq!(report.truncated_bytes, 0);
    assert!(!report.damage.is_empty());
    let consumer = ConsumerNode::start(&["damaged"], fast(&towers), earliest())
        .await
        .unwrap();
    let got = collect(&consumer, N - 1).await;
    let offsets: Vec<u64> = got.iter().map(|r| r.offset).collect();
    let want: Vec<u64> = (0..5000).chain(5001..N as u64).collect();
    assert_eq!(
        offsets.len(),
        want.len(),
        "received {} of {}",
        offsets.len(),
        want.len()
    );
    assert_eq!(offsets, want);
    assert!(got.iter().all(|r| r.value == sent[r.offset as usize]));
    assert_eq!(got[0].partition, partition);
    assert_eq!(consumer.lost(), 1);
    // The damage was logged and counted once, at open; reads since answered from the hole.
    assert_eq!(s.engine().stats().damaged, report.damage.len() as u64);
    consumer.close().await;
    s.close().await;
    tower.close().await;
}

/// Issue 21: one record over the store's limit (the producer allowed more) wedged its
/// partition for good: refused and FETCHed again forever, nothing after it stored or
/// acknowledged. Now the store skips it and says so: the partition goes on, `flush` fails
/// once with the store's reason, the next `flush` succeeds, and a consumer gets every other
/// record (the skipped offset counted as lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_over_the_store_limit_is_refused_and_the_partition_flows() {
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let mut engine = dafka_store::Config::with_sync(SyncPolicy::Always);
    engine.max_record_bytes = 1024;
    let s = store_with(dir.path(), &towers, engine).await;
    let producer = ProducerNode::start(
        "big",
        fast(&towers),
        producer_options().with_max_record(4096),
    )
    .await
    .unwrap();
    let mut sent = values("big", 10);
    sent[4] = Bytes::from(vec![b'x'; 2000]);
    producer.send_many(sent.clone()).await.unwrap();
    let e = producer.flush(Some(PATIENCE)).await.unwrap_err();
    match &e {
        Error::StoreRefused {
            offset: 4,
            reason: dafka_node::RefusalReason::TooLarge,
            detail,
            ..
        } => assert!(
            detail.contains("2000 bytes") && detail.contains("1024"),
            "{detail}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("refused"), "{e}");
    // Said once; the partition flows on.
    producer.send_many(values("big-more", 5)).await.unwrap();
    producer.flush(Some(PATIENCE)).await.unwrap();
    let partition = producer.partition();
    wait_for_head(&s, "big", partition, 15).await;
    producer.close().await;
    let consumer = ConsumerNode::start(&["big"], fast(&towers), earliest())
        .await
        .unwrap();
    let got = collect(&consumer, 14).await;
    let offsets: Vec<u64> = got.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);
    assert_eq!(consumer.lost(), 1);
    consumer.close().await;
    s.close().await;
    tower.close().await;
}

/// Issue 21: on a full disk the store is poisoned, and the producer saw only "5000 records
/// still unacknowledged after 5s". The store now tells it why (STORE-REFUSAL): `flush` fails
/// with the store's reason, long before its timeout. The store's directory is a 1 MiB tmpfs
/// (root is needed to mount it: the test says so and passes without it only where it cannot
/// mount).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_reported_to_the_producer() {
    let mount = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(mount.path())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("SKIPPED: cannot mount a tmpfs here (needs root)");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            // Lazy: a store still open after a failed assertion must not keep it mounted.
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(self.0)
                .status();
        }
    }
    let _unmount = Unmount(mount.path());
    let (tower, towers) = tower().await;
    let s = store(mount.path(), &towers).await;
    let producer = ProducerNode::start("full", fast(&towers), producer_options())
        .await
        .unwrap();
    // 2 MiB of records into 1 MiB.
    let sent: Vec<Bytes> = (0..2048)
        .map(|i| Bytes::from(vec![b'a' + (i % 26) as u8; 1024]))
        .collect();
    producer.send_many(sent).await.unwrap();
    let started = std::time::Instant::now();
    let e = producer
        .flush(Some(Duration::from_secs(60)))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    match &e {
        Error::StoreRefused {
            reason: dafka_node::RefusalReason::Failed,
            detail,
            unacked,
            ..
        } => {
            assert!(detail.contains("No space left on device"), "{detail}");
            assert!(*unacked > 0);
        }
        other => panic!("{other:?}"),
    }
    assert!(waited < Duration::from_secs(30), "told after {waited:?}");
    // Room again (the operator freed space): a restarted store recovers what is there, FETCHes
    // the rest from the producer, which holds it unacknowledged, and acknowledges everything.
    s.close().await;
    let grown = std::process::Command::new("mount")
        .args(["-o", "remount,size=16m"])
        .arg(mount.path())
        .status()
        .unwrap();
    assert!(grown.success());
    let s = store(mount.path(), &towers).await;
    producer.flush(Some(PATIENCE)).await.unwrap();
    let partition = producer.partition();
    wait_for_head(&s, "full", partition, 2048).await;
    producer.close().await;
    s.close().await;
    tower.close().await;
}

/// Issue 21: a store with a hole (a record damaged on its disk) fills it from another store
/// that holds the record: after a restart its writer FETCHes the hole, the other store's
/// reader answers, and the record is served by the damaged store again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hole_is_filled_from_another_store() {
    let (tower, towers) = tower().await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let s1 = store(d1.path(), &towers).await;
    let s2 = store(d2.path(), &towers).await;
    let producer = ProducerNode::start(
        "repaired",
        fast(&towers),
        producer_options().with_min_acks(2),
    )
    .await
    .unwrap();
    let sent = values("repaired", 3000);
    producer.send_many(sent.clone()).await.unwrap();
    producer.flush(Some(PATIENCE)).await.unwrap();
    let partition = producer.partition();
    producer.close().await;
    wait_for_head(&s1, "repaired", partition, 3000).await;
    s1.close().await;

    damage(d1.path(), &sent[1234]);

    let s1 = store(d1.path(), &towers).await;
    let key = dafka_store::PartitionKey::new("repaired", *partition.as_bytes());
    let id = s1.engine().lookup(&key).unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    // `holes()` leaves out a hole as soon as its fill is appended; the record is readable
    // once the fill's batch is acknowledged (it read as `Lost` in between, under load).
    let got = loop {
        match s1.engine().read(id, 1234, 1, 1 << 20) {
            Ok(got) => break got,
            Err(dafka_store::ReadError::Lost { .. }) => {
                assert!(tokio::time::Instant::now() < deadline, "hole never filled");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("reading the filled offset: {e}"),
        }
    };
    assert!(s1.engine().holes(id).is_empty());
    assert_eq!((got[0].offset, &got[0].value), (1234, &sent[1234]));
    s1.close().await;
    s2.close().await;
    let disk = on_disk(d1.path(), "repaired", partition);
    assert_eq!(disk.len(), 3000, "every record served after a reopen");
    assert!(disk.iter().all(|(o, v)| *v == sent[*o as usize]));
    tower.close().await;
}

/// Issue 22: a producer with no store running reported "10 records still unacknowledged after
/// 5s", with no hint that no store was up. The flush's error says how many stores hear it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_flush_says_how_many_stores_are_reachable() {
    let (tower, towers) = tower().await;
    let producer =
        ProducerNode::start("lonely", fast(&towers), producer_options().with_min_acks(2))
            .await
            .unwrap();
    producer.send_many(values("lonely", 10)).await.unwrap();
    let e = producer
        .flush(Some(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "10 records still unacknowledged after 0.3 s: no store is reachable for topic 'lonely' \
         (is one running, on the same towers?)"
    );
    let dir = tempfile::tempdir().unwrap();
    let s1 = store(dir.path(), &towers).await;
    assert!(until(|| producer.stores_reachable() > 0).await);
    assert_eq!(producer.stores_reachable(), 1);
    wait_for_head(&s1, "lonely", producer.partition(), 10).await;
    let e = producer
        .flush(Some(Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "10 records still unacknowledged after 0.1 s: 1 store reachable for topic 'lonely', \
         2 must acknowledge"
    );
    // A consumer of the topic is not a store.
    let consumer = ConsumerNode::start(&["lonely"], fast(&towers), earliest())
        .await
        .unwrap();
    assert_eq!(collect(&consumer, 10).await.len(), 10);
    assert_eq!(producer.stores_reachable(), 1);
    // The store gone: no longer counted.
    s1.close().await;
    assert!(until(|| producer.stores_reachable() == 0).await);
    consumer.close().await;
    producer.close().await;
    tower.close().await;
}

/// Issue 22: `dafka consume evnets --from-beginning` (a typo) printed "processed 0 records".
/// Once the stores answered, the consumer knows they do not hold the topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_knows_when_no_store_holds_a_topic() {
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let s1 = store(dir.path(), &towers).await;
    let producer = stored(&towers, "events", 3).await;
    for reset in [OffsetReset::Earliest, OffsetReset::Latest] {
        let consumer = ConsumerNode::start(
            &["events", "evnets"],
            fast(&towers),
            ConsumerOptions::default().with_offset_reset(reset),
        )
        .await
        .unwrap();
        assert!(
            consumer.topics_not_held().is_empty(),
            "not before an answer"
        );
        until(|| !consumer.topics_not_held().is_empty()).await;
        let names: Vec<String> = consumer
            .topics_not_held()
            .iter()
            .map(|t| t.to_string())
            .collect();
        assert_eq!(names, ["evnets"], "{reset:?}");
        consumer.close().await;
    }
    producer.close().await;
    s1.close().await;
    tower.close().await;
}

/// Issue 22: `dafka consume` without `--from-beginning` printed the last record stored of each
/// partition, though its help says only new records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latest_consumer_gets_only_records_written_after_it_came() {
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let s1 = store(dir.path(), &towers).await;
    let producer = stored(&towers, "live", 5).await;
    let consumer = ConsumerNode::start(&["live"], fast(&towers), ConsumerOptions::default())
        .await
        .unwrap();
    // Met the partition (the store's DIRECT-HEAD, the producer's HEADs): positioned after it.
    assert!(until(|| !consumer.positions().is_empty()).await);
    assert_eq!(consumer.positions()[0].next, 5);
    // The store writer's subscription and the consumer's reached the producer.
    assert!(until(|| producer.live_readers() == 2).await);
    producer.send(Bytes::from_static(b"new")).await.unwrap();
    let got = collect(&consumer, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].offset, &got[0].value[..]), (5, &b"new"[..]));
    assert!(
        consumer
            .poll(10, Duration::from_millis(300))
            .await
            .unwrap()
            .is_empty()
    );
    consumer.close().await;
    producer.close().await;
    s1.close().await;
    tower.close().await;
}

/// A raw consumer group member: a PUB the store reader connects to once the tower announces
/// it (for its OFFSET-COMMITs and COMMITTED-QUERYs), and a SUB connected to every publisher
/// the tower announces (for the DIRECT-COMMITTED answers).
struct RawMember {
    id: NodeId,
    publ: dafka_zmtp::Socket,
    sub: dafka_zmtp::Socket,
    beacon: dafka_zmtp::Socket,
    announced: dafka_zmtp::Socket,
    connected: std::collections::HashSet<String>,
}

impl RawMember {
    async fn start(towers: &[TowerAddress], id: NodeId) -> RawMember {
        use dafka_zmtp::{Options, Socket, SocketType};
        let publ = Socket::new(SocketType::Pub, Options::default()).unwrap();
        let endpoint = publ.bind("tcp://127.0.0.1:0").await.unwrap();
        let port: u16 = endpoint.rsplit(':').next().unwrap().parse().unwrap();
        let beacon = support::announce(towers, id, port).await;
        let sub = Socket::new(SocketType::Sub, Options::default()).unwrap();
        sub.subscribe(&dafka_proto::subscription::node(
            dafka_proto::Kind::DirectCommitted,
            &id,
        ))
        .unwrap();
        let announced = Socket::new(SocketType::Sub, Options::default()).unwrap();
        announced.subscribe(dafka_proto::BEACON_TOPIC).unwrap();
        announced.connect(&towers[0].publ).await.unwrap();
        RawMember {
            id,
            publ,
            sub,
            beacon,
            announced,
            connected: Default::default(),
        }
    }

    /// Sends `request` until a DIRECT-COMMITTED answers it (the first ones go out before
    /// anyone is connected or subscribed); connects to newly announced publishers meanwhile.
    async fn ask(&mut self, request: dafka_proto::Message) -> dafka_proto::DirectCommitted {
        let number = match &request {
            dafka_proto::Message::OffsetCommit(c) => c.request,
            dafka_proto::Message::CommittedQuery(q) => q.request,
            _ => unreachable!(),
        };
        let limits = dafka_proto::Limits::default();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while tokio::time::Instant::now() < deadline {
            let mut got = Vec::new();
            while let Ok(Ok(_)) = tokio::time::timeout(
                Duration::from_millis(1),
                self.announced.recv_many(64, &mut got),
            )
            .await
            {}
            for m in &got {
                if let Ok(dafka_proto::BeaconMessage::Tower(b)) =
                    dafka_proto::BeaconMessage::decode(m.frames(), &limits)
                    && b.node != self.id
                    && self.connected.insert(b.endpoint.clone())
                {
                    self.sub.connect(&b.endpoint).await.unwrap();
                }
            }
            let _ = self.publ.try_send(request.to_frames().into());
            let mut answers = Vec::new();
            if let Ok(Ok(_)) = tokio::time::timeout(
                Duration::from_millis(200),
                self.sub.recv_many(16, &mut answers),
            )
            .await
            {
                for a in &answers {
                    if let Ok(dafka_proto::Message::DirectCommitted(d)) =
                        dafka_proto::Message::decode(a.frames(), &limits)
                        && d.request == number
                    {
                        return d;
                    }
                }
            }
        }
        panic!("no DIRECT-COMMITTED answered request {number}");
    }

    async fn close(self) {
        self.beacon.close().await;
        self.announced.close().await;
        self.sub.close().await;
        self.publ.close().await;
    }
}

/// A group's committed offsets: a store holding the partition answers a commit once it is on
/// its disk (partitions it does not hold left out, a forward commit never going back), and
/// after a SIGKILL and a restart on the same directory it answers a query with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_are_answered_and_survive_a_store_sigkill() {
    use dafka_proto::{
        CommittedQuery, GroupOffset, Message, OffsetCommit, Topic, group::GroupName,
    };
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let child = ChildStore::spawn(dir.path(), &tower.towers());
    let producer = ProducerNode::start("g", fast(&towers), producer_options())
        .await
        .unwrap();
    producer
        .send_many((0..3).map(|i| Bytes::from(format!("r{i}"))))
        .await
        .unwrap();
    producer.flush(Some(PATIENCE)).await.unwrap();
    let partition = producer.partition();
    let group = GroupName::new("billing").unwrap();
    let topic = Topic::try_from("g").unwrap();
    let at = |partition: NodeId, offset: u64| GroupOffset {
        topic: topic.clone(),
        partition,
        offset,
    };
    let unknown: NodeId = "00112233445566778899AABBCCDDEEFF".parse().unwrap();
    let commit = |request: u64, offsets: Vec<GroupOffset>| {
        Message::OffsetCommit(OffsetCommit {
            group: group.clone(),
            member: "0123456789ABCDEF0123456789ABCDEF".parse().unwrap(),
            request,
            seek: false,
            offsets,
        })
    };
    let mut member =
        RawMember::start(&towers, "0123456789ABCDEF0123456789ABCDEF".parse().unwrap()).await;
    let d = member
        .ask(commit(1, vec![at(partition, 2), at(unknown, 9)]))
        .await;
    assert_eq!(d.offsets, [at(partition, 2)], "only the partition it holds");
    let d = member.ask(commit(2, vec![at(partition, 1)])).await;
    assert_eq!(
        d.offsets,
        [at(partition, 2)],
        "a forward commit never goes back"
    );
    child.kill();
    let _child = ChildStore::spawn(dir.path(), &tower.towers());
    let query = Message::CommittedQuery(CommittedQuery {
        group: group.clone(),
        member: member.id,
        request: 3,
        partitions: Vec::new(),
    });
    let d = member.ask(query).await;
    assert_eq!(d.offsets, [at(partition, 2)], "kept across the SIGKILL");
    member.close().await;
    producer.close().await;
    tower.close().await;
}

/// The consumer's side of group offsets: `commit_offsets` returns once the stores have them on
/// disk (a partition no store holds is an error, as is a bad group name or an empty commit),
/// and `committed_offsets` reads them back after the store was SIGKILLed and restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_commits_group_offsets_and_reads_them_back_after_a_store_sigkill() {
    use dafka_proto::Topic;
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let child = ChildStore::spawn(dir.path(), &tower.towers());
    let producer = ProducerNode::start("g2", fast(&towers), producer_options())
        .await
        .unwrap();
    producer
        .send_many((0..5).map(|i| Bytes::from(format!("r{i}"))))
        .await
        .unwrap();
    producer.flush(Some(PATIENCE)).await.unwrap();
    let partition = producer.partition();
    let consumer = ConsumerNode::start(
        &["g2"],
        fast(&towers),
        ConsumerOptions::default().with_offset_reset(OffsetReset::Earliest),
    )
    .await
    .unwrap();
    let topic = Topic::try_from("g2").unwrap();
    let key = (topic.clone(), partition);
    let done = consumer
        .commit_offsets("billing", &[(topic.clone(), partition, 4)], false, PATIENCE)
        .await
        .unwrap();
    assert_eq!(done.get(&key), Some(&4));
    let done = consumer
        .commit_offsets("billing", &[(topic.clone(), partition, 2)], false, PATIENCE)
        .await
        .unwrap();
    assert_eq!(done.get(&key), Some(&4), "never backwards without seek");
    // Past the partition's end (5 records: offsets up to 5 are offsets to read next): refused,
    // and the stored offset is unchanged.
    let err = consumer
        .commit_offsets("billing", &[(topic.clone(), partition, 6)], true, PATIENCE)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("past the partition's end"),
        "{err}"
    );
    let unknown: NodeId = "00112233445566778899AABBCCDDEEFF".parse().unwrap();
    let err = consumer
        .commit_offsets("billing", &[(topic.clone(), unknown, 1)], false, PATIENCE)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotCommitted { .. }), "{err}");
    assert!(
        err.to_string().contains("00112233445566778899AABBCCDDEEFF"),
        "{err}"
    );
    let err = consumer
        .commit_offsets("", &[(topic.clone(), partition, 1)], false, PATIENCE)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::GroupName(_)), "{err}");
    let err = consumer
        .commit_offsets("billing", &[], false, PATIENCE)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("0 group offsets"), "{err}");
    consumer
        .commit_offsets("audit", &[(topic.clone(), partition, 1)], false, PATIENCE)
        .await
        .unwrap();
    let names = |groups: Vec<dafka_proto::group::GroupName>| -> Vec<String> {
        groups.iter().map(|g| g.to_string()).collect()
    };
    assert_eq!(
        names(consumer.groups(PATIENCE).await.unwrap()),
        ["audit", "billing"],
        "the groups with offsets committed, in name order"
    );
    child.kill();
    let _child = ChildStore::spawn(dir.path(), &tower.towers());
    // The restarted store is reachable again once it said hello: until then the query waits.
    let got = consumer
        .committed_offsets("billing", &[], PATIENCE)
        .await
        .unwrap();
    assert_eq!(got.get(&key), Some(&4), "kept across the SIGKILL: {got:?}");
    let got = consumer
        .committed_offsets("other", std::slice::from_ref(&key), PATIENCE)
        .await
        .unwrap();
    assert!(got.is_empty(), "another group's: {got:?}");
    assert_eq!(
        names(consumer.groups(PATIENCE).await.unwrap()),
        ["audit", "billing"],
        "listed again by the restarted store"
    );
    consumer.close().await;
    producer.close().await;
    tower.close().await;
}

/// Two stores hold a partition: a commit returns once both have it; with one of them
/// SIGKILLed, the other still serves it; the restarted one serves it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_are_served_by_the_other_store_when_one_is_down() {
    use dafka_proto::Topic;
    let (tower, towers) = tower().await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = ChildStore::spawn(d1.path(), &tower.towers());
    let second = store(d2.path(), &towers).await;
    let producer = ProducerNode::start("g3", fast(&towers), producer_options().with_min_acks(2))
        .await
        .unwrap();
    producer
        .send_many((0..4).map(|i| Bytes::from(format!("r{i}"))))
        .await
        .unwrap();
    producer.flush(Some(PATIENCE)).await.unwrap();
    let partition = producer.partition();
    let consumer = ConsumerNode::start(&["g3"], fast(&towers), ConsumerOptions::default())
        .await
        .unwrap();
    let topic = Topic::try_from("g3").unwrap();
    let key = (topic.clone(), partition);
    let done = consumer
        .commit_offsets("ops", &[(topic.clone(), partition, 3)], false, PATIENCE)
        .await
        .unwrap();
    assert_eq!(done.get(&key), Some(&3));
    // Both stores have it on disk: the one in this process reads it from its own file.
    let on_second = dafka_store::GroupOffsets::open(
        std::sync::Arc::new(dafka_store::FsDir::new(d2.path()).unwrap()),
        dafka_store::OffsetsConfig::default(),
    );
    let (offsets, _) = on_second.unwrap();
    assert_eq!(offsets.all().count(), 1);
    first.kill();
    let got = consumer
        .committed_offsets("ops", std::slice::from_ref(&key), PATIENCE)
        .await
        .unwrap();
    assert_eq!(got.get(&key), Some(&3), "served by the store still up");
    consumer.close().await;
    producer.close().await;
    second.close().await;
    tower.close().await;
}
