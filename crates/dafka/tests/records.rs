//! Records with keys, headers and timestamps through real nodes over loopback TCP: kept by a
//! store and served back the same, found by time (TIME-QUERY over the engine's time index on
//! a partition of several segments), the topics a store holds (TOPICS-QUERY).

use bytes::Bytes;
mod support;

use dafka_node::{
    ConsumerNode, ConsumerOptions, Header, MetaParts, OffsetReset, ProducerNode, ProducerRecord,
    RecordMeta, StoreNode, SyncPolicy, TimestampType, TowerAddress,
};
use support::{PATIENCE, collect, fast, producer_options, store_with, tower};

const T0: i64 = 1_764_000_000_000_000;

async fn store(dir: &std::path::Path, towers: &[TowerAddress], segment: u64) -> StoreNode {
    let mut engine = dafka_store::Config::with_sync(SyncPolicy::Never);
    engine.segment_bytes = segment;
    engine.max_record_bytes = (4 << 20).min(segment as usize / 2);
    store_with(dir, towers, engine).await
}

fn record(
    value: &str,
    key: Option<&[u8]>,
    headers: Option<Vec<Header>>,
    ts: i64,
) -> ProducerRecord {
    ProducerRecord {
        value: Bytes::copy_from_slice(value.as_bytes()),
        key: key.map(Bytes::copy_from_slice),
        headers,
        timestamp: Some(ts),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_serves_each_record_with_the_metadata_it_was_sent_with() {
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path(), &towers, 128 << 20).await;
    let big = Bytes::from(vec![0xA5; 1 << 20]);
    let sent = vec![
        record("absent", None, None, T0),
        record("empty", Some(b""), Some(vec![]), 0),
        record(
            "headers",
            Some(b"user-1"),
            Some(vec![
                Header::new("trace", Some(Bytes::from_static(b"t-1"))),
                Header::new("null", None),
                Header::new("empty", Some(Bytes::new())),
            ]),
            -1,
        ),
        record("big-key", Some(&big), None, T0 + 1),
        record(
            "big-header",
            None,
            Some(vec![Header::new("blob", Some(big.clone()))]),
            T0 + 2,
        ),
    ];
    let producer = ProducerNode::start(
        "meta",
        fast(&towers),
        producer_options().with_max_record(4 << 20),
    )
    .await
    .unwrap();
    let partition = producer.partition();
    producer.send_many(sent.clone()).await.unwrap();
    producer.flush(Some(PATIENCE)).await.unwrap();
    producer.close().await;
    // The producer is gone: the records come from the store alone.
    let consumer = ConsumerNode::start(
        &["meta"],
        fast(&towers),
        ConsumerOptions::default().with_offset_reset(OffsetReset::Earliest),
    )
    .await
    .unwrap();
    let got = collect(&consumer, sent.len()).await;
    assert_eq!(got.len(), sent.len());
    for (r, s) in got.iter().zip(&sent) {
        assert_eq!(r.partition, partition);
        assert_eq!(r.value, s.value);
        let want = RecordMeta::from(MetaParts {
            key: s.key.clone(),
            headers: s.headers.clone(),
            ..MetaParts::created(s.timestamp.unwrap())
        });
        assert_eq!(r.meta, want, "offset {}", r.offset);
        assert_eq!(r.meta.timestamp_type(), TimestampType::CreateTime);
    }
    consumer.close().await;
    s.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_for_time_finds_the_first_record_at_or_after_a_time_over_several_segments() {
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    // 64 KiB segments: 3,000 records of about 100 bytes span several.
    let s = store(dir.path(), &towers, 64 << 10).await;
    let producer = ProducerNode::start("times", fast(&towers), producer_options())
        .await
        .unwrap();
    let partition = producer.partition();
    // Offset i stamped T0 + 10 i, but offsets 1000..1010 stamped far in the past (a producer
    // clock stepping back): "first at or after" is by offset, not by time order.
    let ts = |i: i64| {
        if (1000..1010).contains(&i) {
            T0 - 1_000_000
        } else {
            T0 + 10 * i
        }
    };
    // Sent in parts of 250 (about 32 KiB), each flushed before the next: the store writes
    // what arrives together as one batch and a batch never straddles two segments, so one
    // send of all 3,000 could land in one or two oversized segments, depending on timing.
    for part in (0..3000).collect::<Vec<i64>>().chunks(250) {
        let records: Vec<ProducerRecord> = part
            .iter()
            .map(|&i| record(&format!("{i:0100}"), None, None, ts(i)))
            .collect();
        producer.send_many(records).await.unwrap();
        producer.flush(Some(PATIENCE)).await.unwrap();
    }
    let reader = ConsumerNode::start(
        &[],
        fast(&towers),
        ConsumerOptions::default().with_offset_reset(OffsetReset::Assigned),
    )
    .await
    .unwrap();
    let at = |o: Vec<(dafka_node::NodeId, dafka_proto::TimeOffset)>| {
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].0, partition);
        assert_eq!(o[0].1.end, 3000);
        o[0].1.offset
    };
    let ask = |t: i64| reader.offsets_for_time("times", t, PATIENCE);
    assert_eq!(at(ask(i64::MIN).await.unwrap()), Some(0));
    assert_eq!(at(ask(T0).await.unwrap()), Some(0));
    assert_eq!(at(ask(T0 + 1).await.unwrap()), Some(1));
    assert_eq!(at(ask(T0 + 25_000).await.unwrap()), Some(2500));
    assert_eq!(
        at(ask(T0 + 10_005).await.unwrap()),
        Some(1010),
        "past the stepped-back ones"
    );
    assert_eq!(at(ask(T0 - 1_000_000).await.unwrap()), Some(0));
    assert_eq!(at(ask(T0 + 10 * 2999).await.unwrap()), Some(2999));
    assert_eq!(
        at(ask(T0 + 10 * 2999 + 1).await.unwrap()),
        None,
        "none that recent"
    );
    let segments = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert!(
        segments >= 5,
        "the partition spans several segments: {segments}"
    );
    // The topics the store holds.
    let other = ProducerNode::start("times-2", fast(&towers), producer_options())
        .await
        .unwrap();
    other.send(Bytes::from_static(b"x")).await.unwrap();
    other.flush(Some(PATIENCE)).await.unwrap();
    let topics: Vec<String> = reader
        .topics(PATIENCE)
        .await
        .unwrap()
        .iter()
        .map(|t| t.to_string())
        .collect();
    assert_eq!(topics, vec!["times".to_owned(), "times-2".to_owned()]);
    other.close().await;
    reader.close().await;
    producer.close().await;
    s.close().await;
    tower.close().await;
}
