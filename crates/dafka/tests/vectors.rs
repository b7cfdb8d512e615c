//! The nodes' bytes against the reference's, over loopback TCP. No reference binary runs here,
//! so raw sockets replay the reference's captured messages (tests/data/dafka/messages.tsv) at
//! our nodes, and what our nodes send is compared byte for byte with what the reference sent
//! in the same situation: a producer with the scenario's id P1 answers the captured FETCH of
//! store writer S1 with the captured DIRECT-RECORDs, resumes a send waiting on its full buffer
//! at the captured ACK, publishes the captured RECORDs and HEAD, and is flushed by the captured
//! ACKs; a consumer with the scenario's id C1 sends the captured
//! CONSUMER-HELLO to store reader S2 and delivers the captured records in order; an "earliest"
//! consumer C1 answers store reader S1's STORE-HELLO, sends the captured GET-HEADS, and
//! FETCHes from 0 after the captured DIRECT-HEAD.

mod support;

#[path = "../../dafka-proto/tests/common/mod.rs"]
mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{C1, P1, S1_WRITER, S2_READER, find, id};
use dafka_node::{
    ConsumerNode, ConsumerOptions, Header, MetaParts, OffsetReset, ProducerNode, ProducerRecord,
    RecordMeta, TimestampType,
};
use dafka_proto::{Kind, Limits, Message, subscription};
use dafka_zmtp::{Options, Socket, SocketType};
use support::{PATIENCE, announce, collect, fast, producer_options, tower};

fn golden(n: u64) -> Bytes {
    Bytes::from(format!("golden-r{n:03}"))
}

fn captured(kind: &str, fields: &[(&str, &str)]) -> Vec<Bytes> {
    find(kind, fields).frames
}

/// Receives on `socket` until a message equal to `frames` arrives, sending `poke` (if any)
/// while waiting; panics after the patience.
async fn expect(socket: &Socket, frames: &[Bytes], poke: Option<(&Socket, &[Bytes])>) {
    expect_all(socket, &[frames.to_vec()], poke).await;
}

/// Receives on `socket` until a message equal to each of `all` arrived (in any order), sending
/// `poke` (if any) while waiting; panics after the patience, or at a CONSUMER-HELLO without
/// topics (46/DAFKA: never sent).
async fn expect_all(socket: &Socket, all: &[Vec<Bytes>], poke: Option<(&Socket, &[Bytes])>) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    let mut missing: Vec<&Vec<Bytes>> = all.iter().collect();
    while tokio::time::Instant::now() < deadline {
        if let Some((s, m)) = poke {
            s.try_send(m.to_vec().into()).unwrap();
        }
        if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(100), socket.recv()).await {
            if let Ok(Message::ConsumerHello(h)) = Message::decode(m.frames(), &Limits::DEFAULT) {
                assert!(!h.topics.is_empty(), "a CONSUMER-HELLO without topics");
            }
            missing.retain(|f| m.frames() != &f[..]);
            if missing.is_empty() {
                return;
            }
            if seen.len() < 8 {
                seen.push(m);
            }
        }
    }
    panic!("never received {missing:02x?}; saw {seen:02x?}");
}

fn port_of(endpoint: &str) -> u16 {
    endpoint.rsplit(':').next().unwrap().parse().unwrap()
}

/// Store reader S1 of the scenario.
const S1_READER: &str = "C0AE384776F04AE29D3D0738F9CCD7A6";

/// The endpoint of `node`'s publisher, from the tower's beacons.
async fn publisher_of(tower_pub: &str, node: dafka_node::NodeId) -> String {
    let listener = Socket::new(SocketType::Sub, Options::default()).unwrap();
    listener.subscribe(b"B").unwrap();
    listener.connect(tower_pub).await.unwrap();
    let endpoint = loop {
        let m = tokio::time::timeout(PATIENCE, listener.recv())
            .await
            .unwrap()
            .unwrap();
        if let Ok(dafka_proto::BeaconMessage::Tower(b)) =
            dafka_proto::BeaconMessage::decode(m.frames(), &Limits::DEFAULT)
            && b.node == node
        {
            break b.endpoint;
        }
    };
    listener.close().await;
    endpoint
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_speaks_the_reference_bytes() {
    let (tower, towers) = tower().await;
    let producer = ProducerNode::start(
        "golden",
        fast(&towers),
        // Room for three unacknowledged records, as many as the scenario has in flight.
        producer_options()
            .with_partition(Some(id(P1)))
            // The scenario's P1 starts at offset 0 with no store to ask.
            .with_resume_timeout(None)
            .with_max_unacked_records(3)
            .with_send_timeout(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    // Store writer S1, raw: its PUB is announced to the tower (the producer's SUB connects to
    // it and subscribes K and F + P1); its SUB connects to the producer's publisher.
    let writer_pub = Socket::new(SocketType::Pub, Options::default()).unwrap();
    let endpoint = writer_pub.bind("tcp://127.0.0.1:0").await.unwrap();
    let beacon = announce(&towers, id(S1_WRITER), port_of(&endpoint)).await;
    let writer_sub = Socket::new(SocketType::Sub, Options::default()).unwrap();
    writer_sub
        .subscribe(&subscription::node(Kind::DirectRecord, &id(S1_WRITER)))
        .unwrap();
    writer_sub.subscribe(b"M").unwrap();
    writer_sub.subscribe(b"H").unwrap();
    writer_sub
        .connect(&format!("tcp://127.0.0.1:{}", producer.publisher_port()))
        .await
        .unwrap();

    // r000-r002 go out before S1 is connected; S1's FETCH(0, 100000) gets them back.
    assert_eq!(producer.send_many((0..3).map(golden)).await.unwrap(), 0);
    let fetch = captured("FETCH", &[("address", S1_WRITER), ("sequence", "0")]);
    expect(
        &writer_sub,
        &captured(
            "DIRECT-RECORD",
            &[("topic_prefix", S1_WRITER), ("sequence", "0")],
        ),
        Some((&writer_pub, &fetch)),
    )
    .await;
    for seq in ["1", "2"] {
        expect(
            &writer_sub,
            &captured(
                "DIRECT-RECORD",
                &[("topic_prefix", S1_WRITER), ("sequence", seq)],
            ),
            None,
        )
        .await;
    }
    // r003 waits: the buffer is full of r000-r002.
    {
        let send3 = producer.send(golden(3));
        tokio::pin!(send3);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut send3)
                .await
                .is_err()
        );
        // Bad input (an ACK cut short, an ACK beyond the head) is dropped, counted, and the
        // producer goes on. Then the reference store's ACK(2) releases r000-r002: r003 goes.
        let mut cut = captured("ACK", &[("topic_prefix", P1), ("sequence", "2")]);
        cut[0] = cut[0].slice(..cut[0].len() - 3);
        writer_pub.try_send(cut.into()).unwrap();
        let beyond = captured("ACK", &[("topic_prefix", P1), ("sequence", "5")]);
        writer_pub.try_send(beyond.into()).unwrap();
        let ack2 = captured("ACK", &[("topic_prefix", P1), ("sequence", "2")]);
        writer_pub.try_send(ack2.into()).unwrap();
        // Woken by the ACK, long before its send timeout.
        let offset = tokio::time::timeout(PATIENCE, send3).await.unwrap();
        assert_eq!(offset.unwrap(), 3);
    }
    assert_eq!(producer.stats().malformed(), 1);
    assert_eq!(producer.stats().refused(), 1);

    // r003-r005 go out live as the captured RECORDs, then the captured HEAD(5): r004 and
    // r005 sent with a key, headers and a timestamp, which a reference store never sees (it
    // subscribes to RECORDs only: it gets the values, byte for byte the captured ones).
    for n in 4..6 {
        let record = ProducerRecord {
            value: golden(n),
            key: Some(Bytes::from_static(b"user-42")),
            headers: Some(vec![Header::new("trace", Some(Bytes::from_static(b"t")))]),
            timestamp: Some(1_764_000_000_000_000),
        };
        assert_eq!(producer.send(record).await.unwrap(), n);
    }
    for seq in ["3", "4", "5"] {
        expect(&writer_sub, &captured("RECORD", &[("sequence", seq)]), None).await;
    }
    expect(
        &writer_sub,
        &captured("HEAD", &[("topic_prefix", "golden"), ("sequence", "5")]),
        None,
    )
    .await;
    assert_eq!(producer.unacked_records(), 3);
    let ack5 = captured("ACK", &[("topic_prefix", P1), ("sequence", "5")]);
    writer_pub.try_send(ack5.into()).unwrap();
    // Woken by the ACK (no flush timeout of its own).
    tokio::time::timeout(PATIENCE, producer.flush(None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(producer.unacked_records(), 0);

    beacon.close().await;
    writer_pub.close().await;
    writer_sub.close().await;
    producer.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_speaks_the_reference_bytes() {
    let (tower, towers) = tower().await;
    let consumer = ConsumerNode::start(
        &["golden"],
        fast(&towers),
        ConsumerOptions::default()
            .with_id(Some(id(C1)))
            .with_start_offset("golden", id(P1), 0)
            .with_fetch_retry(Duration::from_millis(100), Duration::from_millis(400)),
    )
    .await
    .unwrap();
    // Producer P1, raw: a PUB announced to the tower, and a SUB on the consumer's XPUB.
    let p1_pub = Socket::new(SocketType::Pub, Options::default()).unwrap();
    let endpoint = p1_pub.bind("tcp://127.0.0.1:0").await.unwrap();
    let beacon = announce(&towers, id(P1), port_of(&endpoint)).await;

    let consumer_endpoint = publisher_of(&towers[0].publ, id(C1)).await;
    // Store reader S2, raw: its `W` + id subscription reaching the consumer's XPUB asks for
    // CONSUMER-HELLO, which must be the reference's bytes (C1 listing "golden").
    let reader_sub = Socket::new(SocketType::Sub, Options::default()).unwrap();
    reader_sub
        .subscribe(&subscription::node(Kind::ConsumerHello, &id(S2_READER)))
        .unwrap();
    reader_sub.subscribe(b"F").unwrap();
    reader_sub.connect(&consumer_endpoint).await.unwrap();
    expect(
        &reader_sub,
        &captured(
            "CONSUMER-HELLO",
            &[("topic_prefix", S2_READER), ("address", C1)],
        ),
        None,
    )
    .await;

    // The captured live RECORDs 3-5 reach the consumer, which FETCHes 0-2 from P1.
    let records: Vec<Vec<Bytes>> = ["3", "4", "5"]
        .iter()
        .map(|s| captured("RECORD", &[("sequence", s)]))
        .collect();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let fetch = loop {
        assert!(tokio::time::Instant::now() < deadline, "no FETCH");
        for r in &records {
            p1_pub.try_send(r.clone().into()).unwrap();
        }
        if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(100), reader_sub.recv()).await
        {
            break m;
        }
    };
    let Message::Fetch(fetch) = Message::decode(fetch.frames(), &Limits::DEFAULT).unwrap() else {
        panic!("not a FETCH");
    };
    let reference = captured("FETCH", &[("address", C1), ("sequence", "0")]);
    let Message::Fetch(reference) = Message::decode(&reference, &Limits::DEFAULT).unwrap() else {
        panic!("not a FETCH");
    };
    // Same producer, sender, topic and start; the count is the gap (3), where the reference
    // asks for `100000 - sequence % 100000`.
    assert_eq!(
        (fetch.producer, fetch.sender, &fetch.topic, fetch.sequence),
        (
            reference.producer,
            reference.sender,
            &reference.topic,
            reference.sequence
        )
    );
    assert_eq!(fetch.count, 3);
    // P1 answers with the captured DIRECT-RECORDs 0-5 to C1: 0-2 fill the gap, 3-5 are
    // duplicates of the records held in the reorder buffer.
    for seq in 0..6 {
        let d = captured(
            "DIRECT-RECORD",
            &[("topic_prefix", C1), ("sequence", &seq.to_string())],
        );
        p1_pub.try_send(d.into()).unwrap();
    }
    let got = collect(&consumer, 6).await;
    let values: Vec<Bytes> = got.iter().map(|r| r.value.clone()).collect();
    assert_eq!(values, (0..6).map(golden).collect::<Vec<_>>());
    // A reference store keeps no metadata: the records come with the time they were
    // received, as a log-append time, and neither key nor headers.
    assert!(
        got.iter()
            .all(|r| r.meta.timestamp_type() == TimestampType::LogAppendTime
                && r.meta.parts().key.is_none()
                && r.meta.parts().headers.is_none())
    );
    assert!(
        consumer
            .poll(10, Duration::from_millis(300))
            .await
            .unwrap()
            .is_empty()
    );

    beacon.close().await;
    p1_pub.close().await;
    reader_sub.close().await;
    consumer.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn earliest_consumer_follows_the_reference_scenario() {
    let (tower, towers) = tower().await;
    let consumer = ConsumerNode::start(
        &[],
        fast(&towers),
        ConsumerOptions::default()
            .with_id(Some(id(C1)))
            .with_offset_reset(OffsetReset::Earliest),
    )
    .await
    .unwrap();
    // It subscribes before it knows any store: its GET-HEADS then reaches nobody.
    consumer.subscribe("golden").unwrap();
    // Store reader S1, raw: a PUB announced to the tower, a SUB on the consumer's XPUB.
    let reader_pub = Socket::new(SocketType::Pub, Options::default()).unwrap();
    let endpoint = reader_pub.bind("tcp://127.0.0.1:0").await.unwrap();
    let beacon = announce(&towers, id(S1_READER), port_of(&endpoint)).await;
    let reader_sub = Socket::new(SocketType::Sub, Options::default()).unwrap();
    reader_sub.subscribe(b"G").unwrap();
    reader_sub.subscribe(b"F").unwrap();
    reader_sub
        .subscribe(&subscription::node(Kind::ConsumerHello, &id(S1_READER)))
        .unwrap();
    reader_sub
        .connect(&publisher_of(&towers[0].publ, id(C1)).await)
        .await
        .unwrap();
    // The reference reader's STORE-HELLO (and its W subscription) get a CONSUMER-HELLO with
    // the consumer's topic (the reference consumer sends one with none, as captured, which
    // 46/DAFKA forbids; see `expect_all`), and the reader, now reachable, the captured
    // GET-HEADS.
    let store_hello = captured(
        "STORE-HELLO",
        &[("topic_prefix", C1), ("address", S1_READER)],
    );
    let hello = Message::ConsumerHello(dafka_proto::ConsumerHello {
        store: id(S1_READER),
        consumer: id(C1),
        topics: vec![dafka_proto::Topic::try_from("golden").unwrap()],
    })
    .to_frames();
    let get_heads = captured("GET-HEADS", &[("topic_prefix", "golden"), ("address", C1)]);
    expect_all(
        &reader_sub,
        &[hello, get_heads],
        Some((&reader_pub, &store_hello)),
    )
    .await;
    // The captured DIRECT-HEAD(5) makes it FETCH 0-5 from P1 (sent until the consumer's SUB,
    // which connects to S1 when the tower announces it, receives it).
    let head = captured("DIRECT-HEAD", &[("topic_prefix", C1), ("sequence", "5")]);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let fetch = loop {
        assert!(tokio::time::Instant::now() < deadline, "no FETCH");
        reader_pub.try_send(head.clone().into()).unwrap();
        let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(100), reader_sub.recv()).await
        else {
            continue;
        };
        match Message::decode(m.frames(), &Limits::DEFAULT).unwrap() {
            Message::Fetch(f) => break f,
            // More CONSUMER-HELLOs, as the reference sends.
            Message::ConsumerHello(_) => {}
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        (fetch.producer, fetch.sender, fetch.sequence, fetch.count),
        (id(P1), id(C1), 0, 6)
    );
    for seq in 0..6 {
        let d = captured(
            "DIRECT-RECORD",
            &[("topic_prefix", C1), ("sequence", &seq.to_string())],
        );
        reader_pub.try_send(d.into()).unwrap();
    }
    let got = collect(&consumer, 6).await;
    let values: Vec<Bytes> = got.iter().map(|r| r.value.clone()).collect();
    assert_eq!(values, (0..6).map(golden).collect::<Vec<_>>());
    // A reference store keeps no metadata: the records come with the time they were
    // received, as a log-append time, and neither key nor headers.
    assert!(
        got.iter()
            .all(|r| r.meta.timestamp_type() == TimestampType::LogAppendTime
                && r.meta.parts().key.is_none()
                && r.meta.parts().headers.is_none())
    );
    let positions = consumer.positions();
    assert_eq!(positions.len(), 1);
    assert_eq!((positions[0].partition, positions[0].next), (id(P1), 6));

    beacon.close().await;
    reader_pub.close().await;
    reader_sub.close().await;
    consumer.close().await;
    tower.close().await;
}

/// A reference consumer (subscribed to RECORDs and HEADs of the topic, as captured) gets the
/// values of records sent with keys and headers as plain RECORDs; a consumer of ours on the
/// same producer gets each record once, with its metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_consumer_gets_the_values_of_records_with_metadata() {
    let (tower, towers) = tower().await;
    let producer = ProducerNode::start("golden", fast(&towers), producer_options())
        .await
        .unwrap();
    let ours = ConsumerNode::start(
        &["golden"],
        fast(&towers),
        ConsumerOptions::default().with_start_offset("golden", producer.partition(), 0),
    )
    .await
    .unwrap();
    let reference = Socket::new(SocketType::Sub, Options::default()).unwrap();
    reference.subscribe(b"Mgolden").unwrap();
    reference.subscribe(b"Hgolden").unwrap();
    reference
        .connect(&format!("tcp://127.0.0.1:{}", producer.publisher_port()))
        .await
        .unwrap();
    // Both listen: ours (T and M) and the reference (M only).
    assert!(support::until(|| producer.live_readers() == 2).await);
    let meta = |n: i64| {
        RecordMeta::from(MetaParts {
            key: Some(Bytes::from(format!("k{n}"))),
            headers: Some(vec![Header::new("n", Some(Bytes::from(n.to_string())))]),
            ..MetaParts::created(1_764_000_000_000_000 + n)
        })
    };
    for n in 0..5 {
        let m = meta(n);
        let record = ProducerRecord {
            value: golden(n as u64),
            key: m.parts().key,
            headers: m.parts().headers,
            timestamp: Some(m.timestamp),
        };
        producer.send(record).await.unwrap();
    }
    let mut plain = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while plain.len() < 5 && tokio::time::Instant::now() < deadline {
        let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(100), reference.recv()).await
        else {
            continue;
        };
        match Message::decode(m.frames(), &Limits::DEFAULT).unwrap() {
            Message::Record(r) => plain.push((r.sequence, r.content)),
            Message::Head(_) => {}
            other => panic!("a reference consumer got {:?}", other.kind()),
        }
    }
    assert_eq!(
        plain,
        (0..5).map(|n| (n, golden(n))).collect::<Vec<_>>(),
        "every value, as RECORD"
    );
    let got = collect(&ours, 5).await;
    assert_eq!(got.len(), 5);
    for (n, r) in got.iter().enumerate() {
        assert_eq!((r.offset, &r.value), (n as u64, &golden(n as u64)));
        assert_eq!(r.meta, meta(n as i64));
    }
    // The RECORDs our consumer got too were duplicates, dropped.
    assert!(
        ours.poll(10, Duration::from_millis(300))
            .await
            .unwrap()
            .is_empty()
    );
    reference.close().await;
    ours.close().await;
    producer.close().await;
    tower.close().await;
}
