//! The producer state machine under a virtual clock (an `Instant` advanced by hand).

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use dafka_proto::message::{DirectMetaRecords, MetaRecord};
use dafka_proto::record::{Header, MetaParts, RecordMeta};
use dafka_proto::{
    Ack, CallerError, Fetch, Limits, Message, NodeId, PeerError, Producer, ProducerConfig,
    SendError, Topic,
};

use common::{C1, C2, P1, S1_WRITER, S2_READER, S2_WRITER, id, topic};
use dafka_proto::{Kind, subscription};

fn golden() -> Topic {
    common::topic("golden")
}

fn config() -> ProducerConfig {
    ProducerConfig::new(id(P1), golden())
}

fn drain(p: &mut Producer) -> Vec<Message> {
    std::iter::from_fn(|| p.poll_transmit()).collect()
}

/// A producer with `cfg` that has sent `n` records (`golden-r000`, ...) as RECORDs.
fn with_sent(cfg: ProducerConfig, n: u64) -> Producer {
    let t0 = Instant::now();
    let mut p = Producer::new(cfg).unwrap();
    for i in 0..n {
        p.send(value(i), RecordMeta::created(0), t0).unwrap();
    }
    assert_eq!(drain(&mut p).len(), n as usize);
    p
}

/// Drains the producer, which must only have DIRECT-RECORDs to send: (to, offset, content).
fn directs(p: &mut Producer) -> Vec<(NodeId, u64, Bytes)> {
    drain(p)
        .into_iter()
        .map(|m| match m {
            Message::DirectRecord(d) => (d.to, d.record.sequence, d.record.content),
            other => panic!("expected a DIRECT-RECORD, got {other:?}"),
        })
        .collect()
}

fn offsets(answers: &[(NodeId, u64, Bytes)]) -> Vec<u64> {
    answers.iter().map(|a| a.1).collect()
}

fn ack(seq: u64) -> Ack {
    Ack {
        producer: id(P1),
        topic: golden(),
        sequence: seq,
    }
}

fn fetch(from: &str, seq: u64, count: u32) -> Fetch {
    Fetch {
        producer: id(P1),
        sender: id(from),
        topic: golden(),
        sequence: seq,
        count,
    }
}

fn value(i: u64) -> Bytes {
    Bytes::from(format!("golden-r{i:03}"))
}

#[test]
fn records_get_offsets_from_zero_and_go_out_in_order() {
    let t0 = Instant::now();
    let mut p = Producer::new(config()).unwrap();
    for i in 0..3 {
        assert_eq!(
            p.send(value(i), RecordMeta::created(1000 + i as i64), t0),
            Ok(i)
        );
    }
    let out = drain(&mut p);
    assert_eq!(out.len(), 3);
    for (i, m) in out.iter().enumerate() {
        // Each with its own metadata, as META-RECORD.
        let Message::MetaRecord(MetaRecord { record: r, meta }) = m else {
            panic!("{m:?}")
        };
        assert_eq!((r.sequence, &r.content), (i as u64, &value(i as u64)));
        assert_eq!((r.producer, &r.topic), (id(P1), &golden()));
        assert_eq!(meta, &RecordMeta::created(1000 + i as i64));
    }
    assert_eq!(p.next_offset(), 3);
    assert_eq!(p.unacked_records(), 3);
}

#[test]
fn a_resumed_partition_continues_at_its_first_offset() {
    let t0 = Instant::now();
    let mut cfg = config();
    cfg.first_offset = 42;
    let mut p = Producer::new(cfg).unwrap();
    assert_eq!(p.send(value(0), RecordMeta::created(0), t0), Ok(42));
    let Some(Message::MetaRecord(MetaRecord { record: r, .. })) = p.poll_transmit() else {
        panic!()
    };
    assert_eq!(r.sequence, 42);
    // Offsets below 42 belong to the previous incarnation: never answered, never acked here.
    p.handle_fetch(&fetch(C1, 0, 42)).unwrap();
    assert_eq!(p.poll_transmit(), None);
    assert_eq!(
        p.handle_ack(&ack(42), None),
        Ok(()),
        "the resumed offset is acknowledged normally"
    );
    assert!(p.is_flushed());
}

#[test]
fn head_every_interval_after_the_first_record_even_when_idle() {
    let t0 = Instant::now();
    let second = Duration::from_secs(1);
    let mut p = Producer::new(config()).unwrap();
    // No record yet: no HEAD, no timer.
    assert_eq!(p.poll_timeout(), None);
    p.handle_timeout(t0 + 10 * second);
    assert_eq!(p.poll_transmit(), None);

    p.send(value(0), RecordMeta::created(0), t0).unwrap();
    p.send(value(1), RecordMeta::created(0), t0).unwrap();
    drain(&mut p);
    assert_eq!(p.poll_timeout(), Some(t0 + second));
    // Not before its time.
    p.handle_timeout(t0 + second - Duration::from_millis(1));
    assert_eq!(p.poll_transmit(), None);
    for k in 1..=3u32 {
        p.handle_timeout(t0 + k * second);
        let heads = drain(&mut p);
        assert_eq!(heads.len(), 1, "one HEAD at {k} s");
        let Message::Head(h) = &heads[0] else {
            panic!("{heads:?}")
        };
        assert_eq!(h.sequence, 1);
        assert_eq!(p.poll_timeout(), Some(t0 + (k + 1) * second));
    }
    // A driver waking 10 s late gets one HEAD, and the next one an interval later.
    p.handle_timeout(t0 + 14 * second);
    assert_eq!(drain(&mut p).len(), 1);
    assert_eq!(p.poll_timeout(), Some(t0 + 15 * second));
}

#[test]
fn announce_head_sends_one_head_at_once_only_after_a_record() {
    let t0 = Instant::now();
    let mut p = Producer::new(config()).unwrap();
    p.announce_head();
    assert_eq!(p.poll_transmit(), None, "nothing sent: nothing to announce");
    for i in 0..3 {
        p.send(value(i), RecordMeta::created(0), t0).unwrap();
    }
    drain(&mut p);
    p.announce_head();
    let heads = drain(&mut p);
    assert_eq!(heads.len(), 1);
    let Message::Head(h) = &heads[0] else {
        panic!("{heads:?}")
    };
    assert_eq!(h.sequence, 2);
    // The interval is unchanged.
    assert_eq!(p.poll_timeout(), Some(t0 + Duration::from_secs(1)));
}

#[test]
fn fetch_is_answered_with_the_right_contents_past_256_unacked_records() {
    // The reference producer serves offset 256 with the content of offset 0 (captured in
    // producer-fetch-bug.json). Ours serves every offset its own content.
    let t0 = Instant::now();
    let mut p = Producer::new(config()).unwrap();
    for i in 0..300 {
        p.send(
            Bytes::from(format!("bug-r{i:04}")),
            RecordMeta::created(0),
            t0,
        )
        .unwrap();
    }
    drain(&mut p);
    p.handle_fetch(&fetch(S1_WRITER, 0, 100_000)).unwrap();
    let expected: Vec<(NodeId, u64, Bytes)> = (0..300)
        .map(|i| (id(S1_WRITER), i, Bytes::from(format!("bug-r{i:04}"))))
        .collect();
    assert_eq!(
        directs(&mut p),
        expected,
        "ascending, each with its own content"
    );
    // After a partial ACK (the reference's second bug), answers still carry their own content.
    p.handle_ack(&ack(99), None).unwrap();
    p.handle_fetch(&fetch(C1, 250, 10)).unwrap();
    let expected: Vec<(NodeId, u64, Bytes)> = (250..260)
        .map(|i| (id(C1), i, Bytes::from(format!("bug-r{i:04}"))))
        .collect();
    assert_eq!(directs(&mut p), expected);
}

#[test]
fn fetch_answers_only_what_is_held() {
    let t0 = Instant::now();
    let mut p = Producer::new(config()).unwrap();
    for i in 0..10 {
        p.send(value(i), RecordMeta::created(0), t0).unwrap();
    }
    // Not yet sent as RECORDs: a FETCH for them waits for the RECORDs instead.
    p.handle_fetch(&fetch(C1, 0, 5)).unwrap();
    let out = drain(&mut p);
    assert!(out.iter().all(|m| matches!(m, Message::MetaRecord(_))));
    p.handle_ack(&ack(3), None).unwrap();
    // 0..=3 released; 4..=5 answered; count 0 and ranges past the head answer nothing.
    p.handle_fetch(&fetch(C1, 0, 6)).unwrap();
    p.handle_fetch(&fetch(S1_WRITER, 7, 0)).unwrap();
    p.handle_fetch(&fetch(S2_WRITER, 10, 100)).unwrap();
    assert_eq!(offsets(&directs(&mut p)), vec![4, 5]);
    // A record released while its answer is pending is skipped.
    p.handle_fetch(&fetch(C1, 4, 6)).unwrap();
    let Some(Message::DirectRecord(first)) = p.poll_transmit() else {
        panic!()
    };
    assert_eq!(first.record.sequence, 4);
    p.handle_ack(&ack(7), None).unwrap();
    assert_eq!(offsets(&directs(&mut p)), vec![8, 9]);
}

#[test]
fn repeated_fetches_merge_and_pending_answers_are_bounded() {
    let mut cfg = config();
    cfg.max_pending_fetches = 2;
    let mut p = with_sent(cfg, 4);
    // The same requester twice: one answer covering both ranges.
    p.handle_fetch(&fetch(C1, 0, 2)).unwrap();
    p.handle_fetch(&fetch(C1, 1, 3)).unwrap();
    p.handle_fetch(&fetch(S1_WRITER, 0, 1)).unwrap();
    // A third requester while two answers are pending is dropped (it retries).
    p.handle_fetch(&fetch(S2_WRITER, 0, 4)).unwrap();
    assert_eq!(p.dropped_fetches(), 1);
    let to: Vec<(NodeId, u64)> = directs(&mut p).into_iter().map(|a| (a.0, a.1)).collect();
    assert_eq!(
        to,
        vec![
            (id(C1), 0),
            (id(C1), 1),
            (id(C1), 2),
            (id(C1), 3),
            (id(S1_WRITER), 0)
        ]
    );
}

#[test]
fn acks_are_cumulative_and_release_records_and_bytes() {
    let mut p = with_sent(config(), 10);
    assert_eq!(p.unacked_bytes(), 10 * 11);
    p.handle_ack(&ack(5), None).unwrap();
    assert_eq!((p.unacked_records(), p.unacked_bytes()), (4, 4 * 11));
    assert_eq!(p.acked_through(), Some(5));
    // An older ACK changes nothing.
    p.handle_ack(&ack(2), None).unwrap();
    assert_eq!(p.unacked_records(), 4);
    assert!(!p.is_flushed());
    p.handle_ack(&ack(9), None).unwrap();
    assert!(p.is_flushed());
    assert_eq!(p.unacked_bytes(), 0);
}

#[test]
fn min_acks_counts_distinct_stores() {
    let mut cfg = config();
    cfg.min_acks = 2;
    let mut p = with_sent(cfg, 10);
    p.handle_ack(&ack(9), Some(id(S1_WRITER))).unwrap();
    // The same store again does not count twice.
    p.handle_ack(&ack(9), Some(id(S1_WRITER))).unwrap();
    assert_eq!(p.acked_through(), None);
    assert_eq!(p.unacked_records(), 10);
    p.handle_ack(&ack(4), Some(id(S2_WRITER))).unwrap();
    assert_eq!(p.acked_through(), Some(4));
    assert_eq!(p.unacked_records(), 5);
    // ACKs that name no store (the reference's) count as one more store.
    p.handle_ack(&ack(9), None).unwrap();
    assert_eq!(p.acked_through(), Some(9));
    assert!(p.is_flushed());
}

#[test]
fn the_unacked_buffer_is_bounded_in_records_and_bytes() {
    let t0 = Instant::now();
    let mut cfg = config();
    cfg.max_unacked_records = 3;
    cfg.max_unacked_bytes = 25;
    cfg.max_record = 12;
    let mut p = Producer::new(cfg).unwrap();
    p.send(value(0), RecordMeta::created(0), t0).unwrap();
    p.send(value(1), RecordMeta::created(0), t0).unwrap();
    // 22 bytes held; 11 more would make 33 > 25.
    assert_eq!(
        p.send(value(2), RecordMeta::created(0), t0),
        Err(SendError::Full {
            records: 2,
            bytes: 22,
            max_records: 3,
            max_bytes: 25
        })
    );
    p.send(Bytes::from_static(b"abc"), RecordMeta::created(0), t0)
        .unwrap();
    assert!(matches!(
        p.send(Bytes::new(), RecordMeta::created(0), t0),
        Err(SendError::Full { records: 3, .. })
    ));
    assert_eq!(
        p.send(Bytes::from(vec![0; 13]), RecordMeta::created(0), t0),
        Err(SendError::Caller(CallerError::RecordTooLarge {
            len: 13,
            max: 12
        }))
    );
    drain(&mut p);
    p.handle_ack(&ack(1), None).unwrap();
    assert_eq!(p.send(value(3), RecordMeta::created(0), t0), Ok(3));
}

#[test]
fn messages_for_others_are_refused_without_changing_state() {
    let t0 = Instant::now();
    let mut p = Producer::new(config()).unwrap();
    p.send(value(0), RecordMeta::created(0), t0).unwrap();
    drain(&mut p);
    let mut other = ack(0);
    other.producer = id(C1);
    assert_eq!(
        p.handle_ack(&other, None),
        Err(PeerError::NotForUs {
            kind: "ACK",
            to: id(C1)
        })
    );
    let mut other = fetch(C1, 0, 1);
    other.topic = Topic::try_from("golden2").unwrap();
    assert_eq!(
        p.handle_fetch(&other),
        Err(PeerError::WrongTopic {
            kind: "FETCH",
            got: "golden2".into(),
            ours: "golden".into()
        })
    );
    assert_eq!(
        p.handle_ack(&ack(1), None),
        Err(PeerError::AckBeyondHead { acked: 1, next: 1 })
    );
    assert_eq!(p.poll_transmit(), None);
    assert_eq!(p.unacked_records(), 1);
}

#[test]
fn invalid_configurations_are_refused() {
    for (edit, reason) in [
        (
            (|c: &mut ProducerConfig| c.min_acks = 0) as fn(&mut ProducerConfig),
            "min_acks must be at least 1",
        ),
        (
            |c: &mut ProducerConfig| c.min_acks = c.max_stores + 1,
            "min_acks must not exceed max_stores",
        ),
        (
            |c: &mut ProducerConfig| c.max_unacked_records = 0,
            "the unacknowledged buffer must hold a record",
        ),
        (
            |c: &mut ProducerConfig| c.head_interval = Duration::ZERO,
            "head_interval must not be zero",
        ),
    ] {
        let mut cfg = config();
        edit(&mut cfg);
        assert_eq!(Producer::new(cfg).err(), Some(CallerError::Config(reason)));
    }
}

/// The reference scenario: P1 writes r000-r002 before any subscriber is there (the RECORDs are
/// lost), its HEAD 1 s later leads S1's writer to FETCH, and P1's answers and S1's ACK follow.
/// Every message our producer emits is byte-for-byte the one the reference P1 sent.
#[test]
fn the_captured_head_fetch_ack_exchange() {
    let t0 = Instant::now();
    let limits = Limits::DEFAULT;
    let mut p = Producer::new(config()).unwrap();
    let mut captured_record = Vec::new();
    for i in 0..3 {
        p.send(value(i), RecordMeta::created(0), t0).unwrap();
    }
    for m in drain(&mut p) {
        captured_record.push(m.to_frames()); // Lost on the wire: nobody subscribed yet.
    }
    assert_eq!(captured_record.len(), 3);

    p.handle_timeout(t0 + Duration::from_secs(1));
    let head = drain(&mut p);
    assert_eq!(head.len(), 1);
    let captured = common::find("HEAD", &[("address", P1), ("sequence", "2")]);
    assert_eq!(head[0].to_frames(), captured.frames);

    let fetch = common::find("FETCH", &[("address", S1_WRITER), ("sequence", "0")]);
    let fetch = Message::decode(&fetch.frames, &limits).unwrap();
    p.handle_message(&fetch, None).unwrap();
    let answers = drain(&mut p);
    assert_eq!(answers.len(), 3);
    for (i, m) in answers.iter().enumerate() {
        let seq = i.to_string();
        let captured = common::find(
            "DIRECT-RECORD",
            &[("topic_prefix", S1_WRITER), ("sequence", &seq)],
        );
        assert_eq!(m.to_frames(), captured.frames, "DIRECT-RECORD {i}");
    }

    let ack = common::find("ACK", &[("topic_prefix", P1), ("sequence", "2")]);
    let ack = Message::decode(&ack.frames, &limits).unwrap();
    p.handle_message(&ack, None).unwrap();
    assert!(p.is_flushed());
}

fn direct_head(producer: &str, seq: u64) -> Message {
    Message::DirectHead(dafka_proto::DirectHead {
        to: id(P1),
        head: dafka_proto::Head {
            producer: id(producer),
            topic: golden(),
            sequence: seq,
        },
    })
}

#[test]
fn resuming_asks_the_stores_and_starts_past_the_highest_head() {
    let t0 = Instant::now();
    let mut p = Producer::new(config()).unwrap();
    assert_eq!(p.resume_subscription(), format!("E{P1}").as_bytes());
    p.start_resume(t0);
    let asked = |p: &mut Producer| {
        drain(p)
            .into_iter()
            .filter(|m| matches!(m, Message::GetHeads(g) if g.consumer == id(P1) && g.topic == golden()))
            .count()
    };
    assert_eq!(asked(&mut p), 1);
    // Asked again on the timer until a store answers.
    assert_eq!(p.poll_timeout(), Some(t0 + Duration::from_millis(200)));
    p.handle_timeout(t0 + Duration::from_millis(200));
    assert_eq!(asked(&mut p), 1);
    // Another partition of the topic is not ours; two stores answer, one behind.
    p.handle_message(&direct_head(C1, 50), None).unwrap();
    p.handle_message(&direct_head(P1, 41), None).unwrap();
    p.handle_message(&direct_head(P1, 99), None).unwrap();
    p.handle_message(&direct_head(P1, 70), None).unwrap();
    assert_eq!(p.finish_resume(), Some(99));
    assert_eq!(p.poll_timeout(), None);
    assert_eq!(p.send(value(0), RecordMeta::created(0), t0).unwrap(), 100);
    // After the first record a late DIRECT-HEAD changes nothing.
    p.handle_message(&direct_head(P1, 500), None).unwrap();
    assert_eq!(p.send(value(1), RecordMeta::created(0), t0).unwrap(), 101);
    assert!(matches!(
        drain(&mut p).first(),
        Some(Message::MetaRecord(MetaRecord { record: r, .. })) if r.sequence == 100
    ));
}

/// STORE-REFUSAL (extension): a "too large" refusal is kept until taken (the flush reports
/// it once); a "failed" one until the acknowledgements move on; both are polled for the log.
#[test]
fn store_refusals_are_kept_until_taken_or_acknowledged_past() {
    let t0 = Instant::now();
    let mut p =
        dafka_proto::Producer::new(dafka_proto::ProducerConfig::new(id(P1), topic("golden")))
            .unwrap();
    assert!(p.subscriptions().contains(&dafka_proto::subscription::node(
        dafka_proto::Kind::StoreRefusal,
        &id(P1)
    )));
    for i in 0..4 {
        p.send(Bytes::from(format!("r{i}")), RecordMeta::created(0), t0)
            .unwrap();
    }
    let refusal = |sequence, reason| {
        Message::StoreRefusal(dafka_proto::StoreRefusal {
            producer: id(P1),
            store: id(S2_WRITER),
            topic: topic("golden"),
            sequence,
            reason,
            detail: Bytes::from_static(b"why"),
        })
    };
    p.handle_message(&refusal(1, dafka_proto::RefusalReason::TooLarge), None)
        .unwrap();
    p.handle_message(&refusal(2, dafka_proto::RefusalReason::Failed), None)
        .unwrap();
    assert_eq!(std::iter::from_fn(|| p.poll_refusal()).count(), 2);
    assert_eq!(p.failure().map(|r| r.sequence), Some(2));
    let skipped = p.take_skipped();
    assert_eq!(skipped.iter().map(|r| r.sequence).collect::<Vec<_>>(), [1]);
    assert!(p.take_skipped().is_empty());
    // Another store acknowledges: the failure no longer holds the producer up.
    let ack = Message::Ack(dafka_proto::Ack {
        producer: id(P1),
        topic: topic("golden"),
        sequence: 3,
    });
    p.handle_message(&ack, None).unwrap();
    assert!(p.failure().is_none());
    // Addressed to another producer: refused.
    let mut other = refusal(0, dafka_proto::RefusalReason::Failed);
    if let Message::StoreRefusal(r) = &mut other {
        r.producer = id(S2_READER);
    }
    assert!(p.handle_message(&other, None).is_err());
}

#[test]
fn fetches_from_a_node_taking_metadata_are_answered_with_it() {
    let t0 = Instant::now();
    let mut p = Producer::new(config()).unwrap();
    let keyed = RecordMeta::from(MetaParts {
        key: Some(Bytes::from_static(b"user-1")),
        headers: Some(vec![Header::new("trace", None)]),
        ..MetaParts::created(77)
    });
    p.send(value(0), keyed.clone(), t0).unwrap();
    p.send(value(1), RecordMeta::created(78), t0).unwrap();
    drain(&mut p);
    // C1 subscribed to 'V' + its id; C2 did not (a reference consumer).
    p.handle_subscription(&subscription::node(Kind::DirectMetaRecords, &id(C1)));
    p.handle_fetch(&fetch(C1, 0, 2)).unwrap();
    p.handle_fetch(&fetch(C2, 0, 1)).unwrap();
    let out = drain(&mut p);
    let metas: Vec<_> = out
        .iter()
        .filter_map(|m| match m {
            Message::DirectMetaRecords(DirectMetaRecords { run, metas }) => {
                assert_eq!(run.to, id(C1));
                Some(metas[0].clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(metas, vec![keyed, RecordMeta::created(78)]);
    assert!(out.iter().any(
        |m| matches!(m, Message::DirectRecord(d) if d.to == id(C2) && d.record.sequence == 0)
    ));
    // Its subscription gone, C1 gets values only.
    p.handle_unsubscription(&subscription::node(Kind::DirectMetaRecords, &id(C1)));
    p.handle_fetch(&fetch(C1, 1, 1)).unwrap();
    assert!(matches!(&drain(&mut p)[..], [Message::DirectRecord(_)]));
}

#[test]
fn key_and_headers_count_against_the_record_limit() {
    let t0 = Instant::now();
    let mut cfg = config();
    cfg.max_record = 10;
    let mut p = Producer::new(cfg).unwrap();
    let meta = RecordMeta::from(MetaParts {
        key: Some(Bytes::from_static(b"12345")),
        ..MetaParts::created(0)
    });
    assert!(
        p.send(Bytes::from_static(b"12345"), meta.clone(), t0)
            .is_ok()
    );
    assert!(matches!(
        p.send(Bytes::from_static(b"123456"), meta, t0),
        Err(SendError::Caller(CallerError::RecordTooLarge {
            len: 11,
            max: 10
        }))
    ));
}
