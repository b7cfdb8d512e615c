//! The store state machines (writer and reader) under a virtual clock, alone and in an
//! in-memory cluster with producers and consumers over a lossy network that routes by the
//! nodes' real subscription prefixes.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dafka_proto::record::RecordMeta;
use dafka_proto::store::Append;
use dafka_proto::{
    CommittedQuery, ConsumerConfig, ConsumerHello, DirectCommitted, DirectMissing, DirectRecord,
    Fetch, GetHeads, GroupOffset, Head, LogRead, Message, NodeId, OffsetCommit, OffsetReset,
    PeerError, Producer, ProducerConfig, Record, StoreLog, StoreReader, StoreReaderConfig,
    StoreWriter, StoreWriterConfig, Topic, group::GroupName, subscription,
};

use common::{C1, C2, P1, Rng, S1_WRITER, S2_READER, S2_WRITER, id, topic};

const S1_READER: &str = "C0AE384776F04AE29D3D0738F9CCD7A6";

/// A record held by [`MemLog`]: value and metadata.
type Held = (Bytes, RecordMeta);

/// A log in memory: what the engine would hold, with a low-water mark per partition, and
/// offsets damaged on its disk (`from..to` per partition: never served).
#[derive(Default)]
struct MemLog {
    parts: BTreeMap<(Topic, NodeId), (u64, Vec<Held>)>,
    damaged: Vec<((Topic, NodeId), u64, u64)>,
    /// Committed group offsets.
    offsets: common::MemOffsets,
}

impl MemLog {
    /// Appends at the partition's head (the engine refuses anything else).
    /// A record that came without metadata is stamped at time 0, as the engine's driver
    /// stamps it with the append time.
    fn append(&mut self, a: &Append) {
        let r = &a.record;
        let (low, values) = self.parts.entry((r.topic.clone(), r.producer)).or_default();
        assert_eq!(
            *low + values.len() as u64,
            r.sequence,
            "append out of order"
        );
        let meta = a.meta.clone().unwrap_or(RecordMeta::log_append(0));
        values.push((r.content.clone(), meta));
    }

    fn values(&self, t: &str, p: &str) -> Vec<Bytes> {
        self.parts
            .get(&(topic(t), id(p)))
            .map(|(_, v)| v.iter().map(|(c, _)| c.clone()).collect())
            .unwrap_or_default()
    }
}

impl StoreLog for MemLog {
    type Error = Infallible;

    fn commit_offsets(
        &self,
        group: &GroupName,
        offsets: &[GroupOffset],
        seek: bool,
    ) -> Result<Vec<GroupOffset>, Infallible> {
        let holds = |t: &Topic, p: &NodeId| self.parts.contains_key(&(t.clone(), *p));
        Ok(self.offsets.commit(group, offsets, seek, holds))
    }

    fn committed(&self, group: &GroupName, partitions: &[(Topic, NodeId)]) -> Vec<GroupOffset> {
        self.offsets.committed(group, partitions)
    }

    fn groups(&self) -> Vec<GroupName> {
        self.offsets.groups()
    }

    fn bounds(&self, topic: &Topic, producer: &NodeId) -> Option<(u64, u64)> {
        let (low, values) = self.parts.get(&(topic.clone(), *producer))?;
        Some((*low, *low + values.len() as u64))
    }

    fn partitions_of(&self, t: &Topic) -> Vec<(NodeId, u64, u64)> {
        self.parts
            .iter()
            .filter(|((pt, _), _)| pt == t)
            .map(|((_, p), (low, v))| (*p, *low, low + v.len() as u64))
            .collect()
    }

    fn topics(&self) -> Vec<Topic> {
        let mut topics: Vec<Topic> = self.parts.keys().map(|(t, _)| t.clone()).collect();
        topics.dedup();
        topics
    }

    fn offset_for_time(&self, topic: &Topic, producer: &NodeId, time: i64) -> Option<u64> {
        let (low, values) = self.parts.get(&(topic.clone(), *producer))?;
        let i = values.iter().position(|(_, m)| m.timestamp >= time)?;
        Some(low + i as u64)
    }

    fn read(
        &self,
        topic: &Topic,
        producer: &NodeId,
        from: u64,
        max: usize,
    ) -> Result<LogRead, Infallible> {
        let key = (topic.clone(), *producer);
        let Some((low, values)) = self.parts.get(&key) else {
            return Ok(LogRead::Records(Vec::new()));
        };
        let holes: Vec<(u64, u64)> = self
            .damaged
            .iter()
            .filter(|(k, _, _)| *k == key)
            .map(|&(_, f, t)| (f, t))
            .collect();
        if let Some(&(_, to)) = holes.iter().find(|&&(f, t)| f <= from && from < t) {
            return Ok(LogRead::Missing { to });
        }
        // Up to the next hole, as the engine stops before one.
        let stop = holes.iter().map(|&(f, _)| f).filter(|&f| f > from).min();
        Ok(LogRead::Records(
            values
                .iter()
                .enumerate()
                .map(|(i, (v, m))| (low + i as u64, v.clone(), m.clone()))
                .skip_while(|(o, _, _)| *o < from)
                .take_while(|(o, _, _)| stop.is_none_or(|s| *o < s))
                .take(max)
                .collect(),
        ))
    }
}

fn record(seq: u64) -> Record {
    Record {
        producer: id(P1),
        topic: topic("golden"),
        sequence: seq,
        content: Bytes::from(format!("golden-r{seq:03}")),
    }
}

fn head(seq: u64) -> Message {
    Message::Head(Head {
        producer: id(P1),
        topic: topic("golden"),
        sequence: seq,
    })
}

fn writer() -> StoreWriter {
    StoreWriter::new(StoreWriterConfig::new(id(S1_WRITER))).unwrap()
}

fn reader() -> StoreReader {
    StoreReader::new(StoreReaderConfig::new(id(S1_READER), id(S1_WRITER))).unwrap()
}

fn sent_w(w: &mut StoreWriter) -> Vec<Message> {
    std::iter::from_fn(|| w.poll_transmit()).collect()
}

fn sent_r(r: &mut StoreReader, log: &MemLog) -> Vec<Message> {
    std::iter::from_fn(|| r.poll_transmit(log)).collect()
}

/// Moves the writer's appends into `log` and returns their offsets.
fn append_all(w: &mut StoreWriter, log: &mut MemLog) -> Vec<u64> {
    std::iter::from_fn(|| w.poll_append())
        .map(|a| {
            log.append(&a);
            a.record.sequence
        })
        .collect()
}

fn key() -> (Topic, NodeId) {
    (topic("golden"), id(P1))
}

/// (sequence, count) of every FETCH in `messages`, checking the sender is S1's writer.
fn fetches(messages: &[Message]) -> Vec<(u64, u32)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Fetch(f) => {
                assert_eq!(f.sender, id(S1_WRITER));
                assert_eq!(f.producer, id(P1));
                Some((f.sequence, f.count))
            }
            _ => None,
        })
        .collect()
}

fn acks(messages: &[Message]) -> Vec<u64> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Ack(a) => Some(a.sequence),
            _ => None,
        })
        .collect()
}

#[test]
fn subscriptions_are_the_references() {
    // As captured: S.writer.msg_subscriber subscribes M and H, direct_subscriber D + own id;
    // S.reader.subscriber F, G and W + own id.
    let w = writer();
    let subs: Vec<Bytes> = w.subscriptions().into();
    // The extensions, META-RECORDs and DIRECT-META-RECORDS, come first: by the time a
    // producer sends this writer a RECORD or HEAD, it has taken them too.
    assert_eq!(subs[0], &b"T"[..]);
    assert_eq!(subs[1], format!("V{S1_WRITER}").as_bytes());
    assert_eq!(subs[2], format!("D{S1_WRITER}").as_bytes());
    assert_eq!(subs[3], &b"H"[..]);
    assert_eq!(subs[4], &b"M"[..]);
    let r = reader();
    let subs: Vec<Bytes> = r.subscriptions().into();
    assert_eq!(subs[0], &b"F"[..]);
    assert_eq!(subs[1], &b"G"[..]);
    assert_eq!(subs[2], format!("W{S1_READER}").as_bytes());
    assert_eq!(subs[3], &b"Q"[..], "the extension, after the reference's");
}

#[test]
fn acks_wait_for_durability() {
    let t0 = Instant::now();
    let mut w = writer();
    let mut log = MemLog::default();
    for seq in 0..3 {
        w.handle_message(&Message::Record(record(seq)), t0).unwrap();
    }
    assert_eq!(append_all(&mut w, &mut log), [0, 1, 2]);
    // Appended, not durable: no ACK.
    assert!(acks(&sent_w(&mut w)).is_empty());
    w.durable(&key(), 2);
    w.durable(&key(), 3);
    // Two reports before the driver published: one cumulative ACK of the last durable.
    assert_eq!(acks(&sent_w(&mut w)), [2]);
    // A report that moves nothing forward sends nothing.
    w.durable(&key(), 3);
    assert!(sent_w(&mut w).is_empty());
    assert_eq!(w.durable_head(&key()), Some(3));
}

#[test]
fn a_refusal_goes_out_before_the_ack_that_covers_its_offset() {
    // The driver skips a record too large for its engine (`refuse`), and the sync that makes
    // the skip durable completes before the task publishes: the producer must hear of the
    // skip first, or its flush ends at the ACK without it (seen once in a full test run).
    let t0 = Instant::now();
    let mut w = writer();
    let mut log = MemLog::default();
    for seq in 0..4 {
        w.handle_message(&Message::Record(record(seq)), t0).unwrap();
    }
    assert_eq!(append_all(&mut w, &mut log), [0, 1, 2, 3]);
    w.refuse(
        &key(),
        2,
        dafka_proto::RefusalReason::TooLarge,
        "record of 2000 bytes",
    );
    w.durable(&key(), 4);
    let out = sent_w(&mut w);
    let kinds: Vec<_> = out
        .iter()
        .map(|m| match m {
            Message::StoreRefusal(r) => format!("refusal {}", r.sequence),
            Message::Ack(a) => format!("ack {}", a.sequence),
            Message::StoreAck(a) => format!("store-ack {}", a.ack.sequence),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["refusal 2", "ack 3", "store-ack 3"]);
}

/// The race of issue 21: a store publishes the refusal of a record too large for it before
/// the producer's subscription reached its PUB, so the refusal is lost; the ACKs that HEADs
/// bring back are repeated, and the refusal has to come with them, or the producer's flush
/// ends at an ACK without it. The producer reports each skipped record once however often
/// it hears of it, and a store repeats only its last [`REPEATED_REFUSALS`].
#[test]
fn a_lost_refusal_comes_again_with_the_ack_a_head_brings_back_and_is_reported_once() {
    let t0 = Instant::now();
    let mut p = Producer::new(ProducerConfig::new(id(P1), topic("golden"))).unwrap();
    let mut w = writer();
    let mut log = MemLog::default();
    for i in 0..4 {
        p.send(Bytes::from(format!("r{i}")), RecordMeta::created(0), t0)
            .unwrap();
    }
    let records: Vec<_> = std::iter::from_fn(|| p.poll_transmit()).collect();
    for m in &records {
        w.handle_message(m, t0).unwrap();
    }
    assert_eq!(append_all(&mut w, &mut log), [0, 1, 2, 3]);
    let too_large = dafka_proto::RefusalReason::TooLarge;
    w.refuse(&key(), 2, too_large, "record of 2000 bytes");
    w.durable(&key(), 4);
    // Everything published now is lost: the producer is not subscribed yet.
    assert_eq!(sent_w(&mut w).len(), 3);
    // The producer's next HEAD: the refusal again, before the ACK that covers it.
    p.handle_timeout(t0 + Duration::from_secs(1));
    let head = std::iter::from_fn(|| p.poll_transmit())
        .find(|m| matches!(m, Message::Head(_)))
        .expect("the producer sends a HEAD every head_interval");
    for round in 0..3 {
        w.handle_message(&head, t0 + Duration::from_secs(1 + round))
            .unwrap();
        let out = sent_w(&mut w);
        assert!(
            matches!(&out[..], [Message::StoreRefusal(r), Message::Ack(a), Message::StoreAck(_)]
                if r.sequence == 2 && r.reason == too_large && a.sequence == 3),
            "{out:?}"
        );
        for m in &out {
            p.handle_message(m, None).unwrap();
        }
        let skipped: Vec<_> = p.take_skipped().iter().map(|r| r.sequence).collect();
        assert_eq!(
            skipped,
            if round == 0 { vec![2] } else { vec![] },
            "round {round}"
        );
    }
    assert_eq!(
        std::iter::from_fn(|| p.poll_refusal()).count(),
        1,
        "logged once"
    );
    // Ten more skipped before the next sync: the refusals go out before the ACK, in one
    // batch; the last REPEATED_REFUSALS of them come again with the next HEAD's ACK.
    let n = dafka_proto::REPEATED_REFUSALS as u64 + 2;
    for i in 0..n {
        p.send(Bytes::from(format!("big{i}")), RecordMeta::created(0), t0)
            .unwrap();
    }
    let records: Vec<_> = std::iter::from_fn(|| p.poll_transmit()).collect();
    for m in &records {
        w.handle_message(m, t0).unwrap();
    }
    for seq in append_all(&mut w, &mut log) {
        w.refuse(&key(), seq, too_large, "record of 2000 bytes");
    }
    w.durable(&key(), 4 + n);
    let summary = |out: Vec<Message>| -> Vec<String> {
        out.iter()
            .map(|m| match m {
                Message::StoreRefusal(r) => format!("refusal {}", r.sequence),
                Message::Ack(a) => format!("ack {}", a.sequence),
                Message::StoreAck(a) => format!("store-ack {}", a.ack.sequence),
                other => format!("{other:?}"),
            })
            .collect()
    };
    // Held for the ACK that covers them; the two pushed out of the list unsent went alone.
    let mut expected: Vec<String> = (4..4 + n).map(|s| format!("refusal {s}")).collect();
    expected.extend(["ack 13".into(), "store-ack 13".into()]);
    assert_eq!(summary(sent_w(&mut w)), expected);
    p.handle_timeout(t0 + Duration::from_secs(10));
    let head = std::iter::from_fn(|| p.poll_transmit())
        .find(|m| matches!(m, Message::Head(_)))
        .unwrap();
    w.handle_message(&head, t0 + Duration::from_secs(10))
        .unwrap();
    assert_eq!(summary(sent_w(&mut w)), expected[2..]);
}

#[test]
fn gaps_are_fetched_at_once_then_on_a_timer_with_backoff() {
    let t0 = Instant::now();
    let mut w = writer();
    let mut log = MemLog::default();
    w.handle_message(&Message::Record(record(0)), t0).unwrap();
    w.handle_message(&Message::Record(record(3)), t0).unwrap();
    // 1..=3 missing: FETCH(1, 3) at once; record 3 dropped (no reorder buffer in a store).
    assert_eq!(fetches(&sent_w(&mut w)), [(1, 3)]);
    assert_eq!(append_all(&mut w, &mut log), [0]);
    // The same gap is not asked for again record by record.
    w.handle_message(&Message::Record(record(4)), t0).unwrap();
    assert!(fetches(&sent_w(&mut w)).is_empty());
    assert_eq!(w.poll_timeout(), Some(t0 + Duration::from_millis(200)));
    let mut at = t0;
    let mut gaps = Vec::new();
    for _ in 0..4 {
        at = w.poll_timeout().unwrap();
        w.handle_timeout(at);
        gaps.push((at - t0, fetches(&sent_w(&mut w))));
    }
    let ms = Duration::from_millis;
    assert_eq!(
        gaps,
        [
            (ms(200), vec![(1, 4)]),
            (ms(600), vec![(1, 4)]),
            (ms(1400), vec![(1, 4)]),
            (ms(3000), vec![(1, 4)]),
        ]
    );
    // The answers close the gap: no more retries.
    for seq in 1..=4 {
        w.handle_message(
            &Message::DirectRecord(DirectRecord {
                to: id(S1_WRITER),
                record: record(seq),
            }),
            at,
        )
        .unwrap();
    }
    assert_eq!(append_all(&mut w, &mut log), [1, 2, 3, 4]);
    assert_eq!(w.poll_timeout(), None);
    assert_eq!(log.values("golden", P1).len(), 5);
}

#[test]
fn head_beyond_fetches_from_the_start_head_behind_is_acked() {
    let t0 = Instant::now();
    let mut w = writer();
    let mut log = MemLog::default();
    // A new store hears HEAD(2) of a partition it never saw: FETCH(0, 3), as S2 did.
    w.handle_message(&head(2), t0).unwrap();
    assert_eq!(fetches(&sent_w(&mut w)), [(0, 3)]);
    for seq in 0..3 {
        w.handle_message(
            &Message::DirectRecord(DirectRecord {
                to: id(S1_WRITER),
                record: record(seq),
            }),
            t0,
        )
        .unwrap();
    }
    append_all(&mut w, &mut log);
    w.durable(&key(), 3);
    assert_eq!(acks(&sent_w(&mut w)), [2]);
    // The next HEAD(2): everything durable; the ACK is repeated (the first may be lost).
    w.handle_message(&head(2), t0).unwrap();
    assert_eq!(acks(&sent_w(&mut w)), [2]);
    // A DIRECT-RECORD for another writer is refused.
    let other = Message::DirectRecord(DirectRecord {
        to: id(S2_WRITER),
        record: record(3),
    });
    assert!(matches!(
        w.handle_message(&other, t0),
        Err(PeerError::NotForUs { .. })
    ));
}

#[test]
fn restored_partitions_continue_at_the_engine_head() {
    let t0 = Instant::now();
    let mut w = writer();
    w.restore(key(), 10);
    w.handle_message(&Message::Record(record(9)), t0).unwrap();
    assert!(w.poll_append().is_none());
    w.handle_message(&Message::Record(record(10)), t0).unwrap();
    assert_eq!(w.poll_append().map(|a| a.record.sequence), Some(10));
    // HEAD(9) after a restart: already durable, acked without a FETCH.
    w.handle_message(&head(9), t0).unwrap();
    let out = sent_w(&mut w);
    assert_eq!(acks(&out), [9]);
    assert!(fetches(&out).is_empty());
}

#[test]
fn partitions_are_bounded() {
    let t0 = Instant::now();
    let mut cfg = StoreWriterConfig::new(id(S1_WRITER));
    cfg.max_partitions = 1;
    let mut w = StoreWriter::new(cfg).unwrap();
    w.handle_message(&Message::Record(record(0)), t0).unwrap();
    let mut other = record(0);
    other.producer = id(C1);
    assert!(matches!(
        w.handle_message(&Message::Record(other), t0),
        Err(PeerError::PartitionLimit { max: 1 })
    ));
}

fn fetch(from: &str, seq: u64, count: u32) -> Message {
    Message::Fetch(Fetch {
        producer: id(P1),
        sender: id(from),
        topic: topic("golden"),
        sequence: seq,
        count,
    })
}

fn log_with(n: u64) -> MemLog {
    let mut log = MemLog::default();
    for seq in 0..n {
        log.append(&Append {
            record: record(seq),
            meta: None,
        });
    }
    log
}

fn direct_records(messages: &[Message]) -> Vec<(NodeId, u64)> {
    messages
        .iter()
        .map(|m| match m {
            Message::DirectRecord(d) => {
                assert_eq!(
                    d.record,
                    record(d.record.sequence),
                    "content of its own offset"
                );
                (d.to, d.record.sequence)
            }
            other => panic!("not a DIRECT-RECORD: {other:?}"),
        })
        .collect()
}

/// Issue 21: a store whose disk damaged offsets 4 and 5 answered a FETCH with 0..4 and then
/// nothing (the consumer retried forever). It says DIRECT-MISSING for 4..6 and goes on with
/// 6..10, in order, in the same answer.
#[test]
fn damaged_offsets_are_answered_with_direct_missing_and_the_rest() {
    let mut log = log_with(10);
    log.damaged.push((key(), 4, 6));
    let mut cfg = StoreReaderConfig::new(id(S1_READER), id(S1_WRITER));
    cfg.read_chunk = 3;
    let mut r = StoreReader::new(cfg).unwrap();
    r.handle_message(&fetch(C1, 0, 100), &log).unwrap();
    let out = sent_r(&mut r, &log);
    let mut records = Vec::new();
    let mut missing = Vec::new();
    for (i, m) in out.iter().enumerate() {
        match m {
            Message::DirectRecord(d) => records.push((i, d.record.sequence)),
            Message::DirectMissing(d) => {
                assert_eq!((d.to, d.store, d.producer), (id(C1), id(S1_READER), id(P1)));
                missing.push((i, d.from, d.to_offset));
            }
            other => panic!("{other:?}"),
        }
    }
    let offsets: Vec<u64> = records.iter().map(|&(_, o)| o).collect();
    assert_eq!(offsets, [0, 1, 2, 3, 6, 7, 8, 9]);
    assert_eq!(missing.len(), 1);
    let (at, from, to) = missing[0];
    assert_eq!((from, to), (4, 6));
    assert_eq!(at, 4, "in offset order, between 3 and 6");
    // A FETCH starting inside the hole: the hole's rest, then the records; one ending inside
    // it: the hole up to the FETCH's end.
    r.handle_message(&fetch(C1, 5, 2), &log).unwrap();
    let out = sent_r(&mut r, &log);
    assert!(
        matches!(
            &out[..],
            [
                Message::DirectMissing(DirectMissing {
                    from: 5,
                    to_offset: 6,
                    ..
                }),
                Message::DirectRecord(_)
            ]
        ),
        "{out:?}"
    );
    r.handle_message(&fetch(C1, 3, 2), &log).unwrap();
    let out = sent_r(&mut r, &log);
    assert!(
        matches!(
            &out[..],
            [
                Message::DirectRecord(_),
                Message::DirectMissing(DirectMissing {
                    from: 4,
                    to_offset: 5,
                    ..
                })
            ]
        ),
        "{out:?}"
    );
}

#[test]
fn fetch_is_answered_in_order_from_the_log_in_chunks() {
    let log = log_with(10);
    let mut cfg = StoreReaderConfig::new(id(S1_READER), id(S1_WRITER));
    cfg.read_chunk = 3;
    let mut r = StoreReader::new(cfg).unwrap();
    // The reference's count: 100000 - seq % 100000; the answer stops at the head.
    r.handle_message(&fetch(C1, 2, 99_998), &log).unwrap();
    let got = direct_records(&sent_r(&mut r, &log));
    assert_eq!(got, (2..10).map(|s| (id(C1), s)).collect::<Vec<_>>());
    // count records from seq: FETCH(4, 2) is 4 and 5.
    r.handle_message(&fetch(S2_WRITER, 4, 2), &log).unwrap();
    assert_eq!(
        direct_records(&sent_r(&mut r, &log)),
        [(id(S2_WRITER), 4), (id(S2_WRITER), 5)]
    );
    // Its own writer's FETCH, a FETCH past the head and one of an unknown partition: nothing.
    r.handle_message(&fetch(S1_WRITER, 0, 5), &log).unwrap();
    r.handle_message(&fetch(C1, 10, 5), &log).unwrap();
    let mut unknown = fetch(C1, 0, 5);
    if let Message::Fetch(f) = &mut unknown {
        f.topic = topic("golden2");
    }
    r.handle_message(&unknown, &log).unwrap();
    assert!(sent_r(&mut r, &log).is_empty());
}

/// The runs of records in DIRECT-RECORDS answers: (to, offsets), each content checked.
fn runs(messages: &[Message]) -> Vec<(NodeId, Vec<u64>)> {
    messages
        .iter()
        .map(|m| match m {
            Message::DirectRecords(d) => {
                assert_eq!((d.producer, &d.topic), (id(P1), &topic("golden")));
                let offsets: Vec<u64> = (d.first..).take(d.contents.len()).collect();
                for (&o, c) in offsets.iter().zip(&d.contents) {
                    assert_eq!(*c, record(o).content, "content of its own offset");
                }
                (d.to, offsets)
            }
            other => panic!("not a DIRECT-RECORDS: {other:?}"),
        })
        .collect()
}

/// A node whose `'B'` + id subscription reached the reader's XPUB (our consumers) gets its
/// answers as DIRECT-RECORDS: runs of at most `batch_bytes` of content inside each chunk read,
/// a record larger than that alone. Any other (a reference consumer, a store writer) gets
/// DIRECT-RECORDs, and so does the first once its subscription is cancelled.
#[test]
fn fetch_is_answered_with_runs_to_a_node_that_subscribed_to_them() {
    let log = log_with(10);
    let len = record(0).content.len();
    let mut cfg = StoreReaderConfig::new(id(S1_READER), id(S1_WRITER));
    cfg.read_chunk = 4;
    cfg.batch_bytes = 2 * len + 1;
    let mut r = StoreReader::new(cfg).unwrap();
    let runs_of_c1 = subscription::node(dafka_proto::Kind::DirectRecords, &id(C1));
    r.handle_subscription(&runs_of_c1);
    r.handle_message(&fetch(C1, 1, 100), &log).unwrap();
    let want: Vec<(NodeId, Vec<u64>)> = [&[1, 2][..], &[3, 4], &[5, 6], &[7, 8], &[9]]
        .iter()
        .map(|o| (id(C1), o.to_vec()))
        .collect();
    assert_eq!(runs(&sent_r(&mut r, &log)), want);

    r.handle_message(&fetch(C2, 8, 100), &log).unwrap();
    assert_eq!(
        direct_records(&sent_r(&mut r, &log)),
        [(id(C2), 8), (id(C2), 9)]
    );
    r.handle_unsubscription(&runs_of_c1);
    r.handle_message(&fetch(C1, 9, 1), &log).unwrap();
    assert_eq!(direct_records(&sent_r(&mut r, &log)), [(id(C1), 9)]);

    // Records larger than a run may hold go one by one.
    let mut cfg = StoreReaderConfig::new(id(S1_READER), id(S1_WRITER));
    cfg.batch_bytes = len - 1;
    let mut r = StoreReader::new(cfg).unwrap();
    r.handle_subscription(&runs_of_c1);
    r.handle_message(&fetch(C1, 7, 2), &log).unwrap();
    assert_eq!(
        runs(&sent_r(&mut r, &log)),
        [(id(C1), vec![7]), (id(C1), vec![8])]
    );
}

/// Two consumers' answers pending at once take turns a chunk at a time: the second is not
/// kept waiting until the first's whole range is sent (Spark's tasks read side by side).
#[test]
fn pending_answers_take_turns_a_chunk_at_a_time() {
    let log = log_with(10);
    let mut cfg = StoreReaderConfig::new(id(S1_READER), id(S1_WRITER));
    cfg.read_chunk = 3;
    let mut r = StoreReader::new(cfg).unwrap();
    r.handle_message(&fetch(C1, 0, 10), &log).unwrap();
    r.handle_message(&fetch(S2_WRITER, 2, 5), &log).unwrap();
    let got = direct_records(&sent_r(&mut r, &log));
    let (c1, s2) = (id(C1), id(S2_WRITER));
    let want: Vec<(NodeId, u64)> = [
        (c1, 0..3),
        (s2, 2..5),
        (c1, 3..6),
        (s2, 5..7),
        (c1, 6..9),
        (c1, 9..10),
    ]
    .into_iter()
    .flat_map(|(to, r)| r.map(move |s| (to, s)))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn fetch_below_the_low_water_mark_gets_the_low_water_mark_not_records() {
    let mut log = log_with(0);
    log.parts.insert(
        key(),
        (
            5,
            (5..8)
                .map(|s| (record(s).content, RecordMeta::created(0)))
                .collect::<Vec<_>>(),
        ),
    );
    let mut r = reader();
    r.handle_message(&fetch(C1, 0, 10), &log).unwrap();
    match sent_r(&mut r, &log).as_slice() {
        [Message::DirectLowWater(l)] => {
            assert_eq!((l.to, l.low.sequence), (id(C1), 5));
            assert_eq!((l.low.topic.clone(), l.low.producer), key());
        }
        other => panic!("{other:?}"),
    }
    r.handle_message(&fetch(C1, 5, 10), &log).unwrap();
    assert_eq!(sent_r(&mut r, &log).len(), 3);
}

#[test]
fn pending_answers_are_bounded_and_merged_per_requester() {
    let log = log_with(10);
    let mut cfg = StoreReaderConfig::new(id(S1_READER), id(S1_WRITER));
    cfg.max_pending_answers = 1;
    let mut r = StoreReader::new(cfg).unwrap();
    r.handle_message(&fetch(C1, 3, 2), &log).unwrap();
    // The same requester widens its answer; another one finds no room.
    r.handle_message(&fetch(C1, 1, 2), &log).unwrap();
    r.handle_message(&fetch(S2_WRITER, 0, 2), &log).unwrap();
    assert_eq!(r.dropped(), 1);
    let got = direct_records(&sent_r(&mut r, &log));
    assert_eq!(got, (1..5).map(|s| (id(C1), s)).collect::<Vec<_>>());
}

#[test]
fn get_heads_consumer_hello_and_store_hello() {
    let mut log = log_with(6);
    let mut other = record(0);
    other.topic = topic("golden2");
    log.append(&Append {
        record: other,
        meta: None,
    });
    let mut r = reader();
    r.handle_message(
        &Message::GetHeads(GetHeads {
            topic: topic("golden"),
            consumer: id(C1),
        }),
        &log,
    )
    .unwrap();
    // Exact topic: golden2's partition is not listed (the reference lists it).
    let out = sent_r(&mut r, &log);
    assert_eq!(out.len(), 1);
    let Message::DirectHead(dh) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!((dh.to, dh.head.sequence), (id(C1), 5));
    // CONSUMER-HELLO with two topics: a DIRECT-HEAD for each partition; an empty one: none.
    let hello = |topics: Vec<Topic>| {
        Message::ConsumerHello(ConsumerHello {
            store: id(S1_READER),
            consumer: id(C1),
            topics,
        })
    };
    r.handle_message(&hello(vec![topic("golden"), topic("golden2")]), &log)
        .unwrap();
    assert_eq!(sent_r(&mut r, &log).len(), 2);
    r.handle_message(&hello(Vec::new()), &log).unwrap();
    assert!(sent_r(&mut r, &log).is_empty());
    let mut elsewhere = hello(Vec::new());
    if let Message::ConsumerHello(h) = &mut elsewhere {
        h.store = id(S2_READER);
    }
    assert!(r.handle_message(&elsewhere, &log).is_err());
    // `L` + consumer reaching the XPUB: STORE-HELLO with the reader's id.
    r.handle_subscription(&subscription::node(dafka_proto::Kind::StoreHello, &id(C1)));
    r.handle_subscription(b"Mgolden");
    let out = sent_r(&mut r, &log);
    assert_eq!(out.len(), 1);
    let Message::StoreHello(sh) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!((sh.consumer, sh.store), (id(C1), id(S1_READER)));
}

enum Node {
    Producer(Producer),
    Writer(StoreWriter, usize),
    Reader(StoreReader, usize),
    Consumer(dafka_proto::Consumer),
}

/// Nodes, the subscriptions of each, the logs of the stores, durable-but-unreported appends,
/// and a network that delivers a message to every node with a matching prefix, dropping some.
struct Cluster {
    nodes: Vec<(Node, Vec<Bytes>)>,
    logs: Vec<MemLog>,
    /// Appended, not yet durable: (store, key, next).
    syncing: Vec<(usize, (Topic, NodeId), u64)>,
    alive: Vec<bool>,
    rng: Rng,
    loss: u64,
    now: Instant,
    delivered: HashMap<usize, Vec<(NodeId, u64, Bytes)>>,
    /// DIRECT-RECORDS that reached a node.
    runs: usize,
}

impl Cluster {
    fn step(&mut self) {
        let now = self.now;
        let mut out: Vec<(usize, Message)> = Vec::new();
        for (i, (node, _)) in self.nodes.iter_mut().enumerate() {
            if !self.alive[i] {
                continue;
            }
            match node {
                Node::Producer(p) => {
                    if p.poll_timeout().is_some_and(|d| now >= d) {
                        p.handle_timeout(now);
                    }
                    out.extend(std::iter::from_fn(|| p.poll_transmit()).map(|m| (i, m)));
                }
                Node::Writer(w, s) => {
                    if w.poll_timeout().is_some_and(|d| now >= d) {
                        w.handle_timeout(now);
                    }
                    for a in std::iter::from_fn(|| w.poll_append()) {
                        self.logs[*s].append(&a);
                        let r = a.record;
                        self.syncing
                            .push((*s, (r.topic.clone(), r.producer), r.sequence + 1));
                    }
                    out.extend(std::iter::from_fn(|| w.poll_transmit()).map(|m| (i, m)));
                }
                Node::Reader(r, s) => {
                    let log = &self.logs[*s];
                    out.extend(std::iter::from_fn(|| r.poll_transmit(log)).map(|m| (i, m)));
                }
                Node::Consumer(c) => {
                    if c.poll_timeout().is_some_and(|d| now >= d) {
                        c.handle_timeout(now);
                    }
                    out.extend(std::iter::from_fn(|| c.poll_transmit()).map(|m| (i, m)));
                    let got = self.delivered.entry(i).or_default();
                    got.extend(
                        std::iter::from_fn(|| c.poll_record())
                            .map(|d| (d.partition, d.offset, d.content)),
                    );
                }
            }
        }
        // Group commit: what was appended in this step is durable in the next.
        for (s, key, next) in std::mem::take(&mut self.syncing) {
            for (node, _) in &mut self.nodes {
                if let Node::Writer(w, ws) = node
                    && *ws == s
                {
                    w.durable(&key, next);
                }
            }
        }
        for (from, m) in out {
            let frames = m.to_frames();
            for to in 0..self.nodes.len() {
                if to == from || !self.alive[to] {
                    continue;
                }
                if !self.nodes[to].1.iter().any(|s| frames[0].starts_with(s)) {
                    continue;
                }
                if self.rng.chance(self.loss) {
                    continue;
                }
                let logs = &self.logs;
                match &mut self.nodes[to].0 {
                    Node::Producer(p) => {
                        let _ = p.handle_message(&m, None);
                    }
                    Node::Writer(w, _) => {
                        let _ = w.handle_message(&m, now);
                    }
                    Node::Reader(r, s) => {
                        let _ = r.handle_message(&m, &logs[*s]);
                    }
                    Node::Consumer(c) => {
                        self.runs += usize::from(matches!(m, Message::DirectRecords(_)));
                        let _ = c.handle_message(&m, now);
                    }
                }
            }
        }
        self.now += Duration::from_millis(10);
    }

    fn run(&mut self, until: impl Fn(&Cluster) -> bool) {
        for _ in 0..20_000 {
            if until(self) {
                return;
            }
            self.step();
        }
        panic!("the cluster did not settle");
    }

    fn producer(&mut self, i: usize) -> &mut Producer {
        match &mut self.nodes[i].0 {
            Node::Producer(p) => p,
            _ => unreachable!(),
        }
    }
}

/// Two producers, two stores (writer and reader each), a lossy network (10% of messages
/// dropped): every record is acknowledged, both stores hold the same data, and an "earliest"
/// consumer started after the producers are gone gets every record exactly once, in order,
/// from the stores alone.
#[test]
fn cluster_replicates_and_serves_after_the_producers_are_gone() {
    let t0 = Instant::now();
    let producers = [P1, "0000000000000000000000000000000A"];
    let mut nodes = Vec::new();
    for p in producers {
        let mut cfg = ProducerConfig::new(id(p), topic("golden"));
        cfg.head_interval = Duration::from_millis(100);
        let p = Producer::new(cfg).unwrap();
        let subs = p.subscriptions().into();
        nodes.push((Node::Producer(p), subs));
    }
    for (s, (w, r)) in [(S1_WRITER, S1_READER), (S2_WRITER, S2_READER)]
        .into_iter()
        .enumerate()
    {
        let writer = StoreWriter::new(StoreWriterConfig::new(id(w))).unwrap();
        let subs = writer.subscriptions().into();
        nodes.push((Node::Writer(writer, s), subs));
        let reader = StoreReader::new(StoreReaderConfig::new(id(r), id(w))).unwrap();
        let subs = reader.subscriptions().into();
        nodes.push((Node::Reader(reader, s), subs));
    }
    let alive = vec![true; nodes.len()];
    let mut c = Cluster {
        nodes,
        logs: vec![MemLog::default(), MemLog::default()],
        syncing: Vec::new(),
        alive,
        rng: Rng(0x9E37_79B9_7F4A_7C15),
        loss: 10,
        now: t0,
        delivered: HashMap::new(),
        runs: 0,
    };
    const N: u64 = 300;
    for n in 0..N {
        for i in 0..2 {
            let now = c.now;
            c.producer(i)
                .send(
                    Bytes::from(format!("p{i}-r{n}")),
                    RecordMeta::created(0),
                    now,
                )
                .unwrap();
        }
        if n % 7 == 0 {
            c.step();
        }
    }
    c.run(|c| {
        (0..2).all(|i| match &c.nodes[i].0 {
            Node::Producer(p) => p.is_flushed(),
            _ => false,
        })
    });
    // Replication goes on after the ACKs (one store suffices for an ACK): wait for both.
    c.run(|c| {
        c.logs.iter().all(|l| {
            producers
                .iter()
                .all(|p| l.values("golden", p).len() == N as usize)
        })
    });
    for p in producers {
        assert_eq!(c.logs[0].values("golden", p), c.logs[1].values("golden", p));
    }
    // The producers go; an earliest consumer arrives.
    c.alive[0] = false;
    c.alive[1] = false;
    let mut cfg = ConsumerConfig::new(id(C1));
    cfg.offset_reset = OffsetReset::Earliest;
    let mut consumer = dafka_proto::Consumer::new(cfg).unwrap();
    let mut subs: Vec<Bytes> = consumer.subscriptions().into();
    subs.extend(consumer.subscribe(topic("golden")));
    let ci = c.nodes.len();
    c.nodes.push((Node::Consumer(consumer), subs));
    c.alive.push(true);
    // The readers hear the consumer's `L` subscription (STORE-HELLO -> CONSUMER-HELLO); the
    // first one its `B` too: it answers with runs of records (DIRECT-RECORDS), the other
    // record by record.
    for (node, _) in &mut c.nodes {
        if let Node::Reader(r, s) = node {
            r.handle_subscription(&subscription::node(dafka_proto::Kind::StoreHello, &id(C1)));
            if *s == 0 {
                r.handle_subscription(&subscription::node(
                    dafka_proto::Kind::DirectRecords,
                    &id(C1),
                ));
            }
        }
    }
    c.run(|c| {
        c.delivered
            .get(&ci)
            .is_some_and(|d| d.len() == 2 * N as usize)
    });
    let got = &c.delivered[&ci];
    for p in producers {
        let values: Vec<String> = got
            .iter()
            .filter(|(part, _, _)| *part == id(p))
            .map(|(_, _, v)| String::from_utf8(v.to_vec()).unwrap())
            .collect();
        let i = producers.iter().position(|x| *x == p).unwrap();
        let want: Vec<String> = (0..N).map(|n| format!("p{i}-r{n}")).collect();
        assert_eq!(values, want);
    }
    // Nothing more arrives later (exactly once).
    for _ in 0..200 {
        c.step();
    }
    assert_eq!(c.delivered[&ci].len(), 2 * N as usize);
    assert!(c.runs > 0, "the first reader answered with DIRECT-RECORDS");
}

/// Issue 21: offsets damaged on one store's disk are served by the other store (nothing lost,
/// nothing twice); damaged on both, they are skipped once both said so (counted as lost, the
/// rest delivered), never waited for.
#[test]
fn damaged_offsets_come_from_another_store_or_are_skipped() {
    for both in [false, true] {
        let t0 = Instant::now();
        let mut nodes = Vec::new();
        let mut logs = Vec::new();
        for (s, (w, r)) in [(S1_WRITER, S1_READER), (S2_WRITER, S2_READER)]
            .into_iter()
            .enumerate()
        {
            let reader = StoreReader::new(StoreReaderConfig::new(id(r), id(w))).unwrap();
            let subs = reader.subscriptions().into();
            nodes.push((Node::Reader(reader, s), subs));
            let mut log = log_with(300);
            if s == 0 || both {
                log.damaged.push((key(), 100, 103));
            }
            logs.push(log);
        }
        let mut cfg = ConsumerConfig::new(id(C1));
        cfg.offset_reset = OffsetReset::Earliest;
        let mut consumer = dafka_proto::Consumer::new(cfg).unwrap();
        let mut subs: Vec<Bytes> = consumer.subscriptions().into();
        subs.extend(consumer.subscribe(topic("golden")));
        // Both readers reachable both ways: their 'W' reached the consumer, it hears them.
        for r in [S1_READER, S2_READER] {
            consumer.handle_subscription(
                &subscription::node(dafka_proto::Kind::ConsumerHello, &id(r)),
                t0,
            );
        }
        nodes.push((Node::Consumer(consumer), subs));
        let ci = nodes.len() - 1;
        let alive = vec![true; nodes.len()];
        let mut c = Cluster {
            nodes,
            logs,
            syncing: Vec::new(),
            alive,
            rng: Rng(0x2545_F491_4F6C_DD1D),
            loss: 0,
            now: t0,
            delivered: HashMap::new(),
            runs: 0,
        };
        for (node, _) in &mut c.nodes {
            if let Node::Reader(r, _) = node {
                r.handle_subscription(&subscription::node(dafka_proto::Kind::StoreHello, &id(C1)));
            }
        }
        let want = if both { 297 } else { 300 };
        c.run(|c| c.delivered.get(&ci).is_some_and(|d| d.len() == want));
        for _ in 0..200 {
            c.step();
        }
        let got: Vec<u64> = c.delivered[&ci].iter().map(|(_, o, _)| *o).collect();
        let expected: Vec<u64> = if both {
            (0..100).chain(103..300).collect()
        } else {
            (0..300).collect()
        };
        assert_eq!(got, expected, "both damaged: {both}");
        let Node::Consumer(consumer) = &mut c.nodes[ci].0 else {
            unreachable!()
        };
        assert_eq!(consumer.lost(), if both { 3 } else { 0 });
        let loss = consumer.poll_loss();
        if both {
            let loss = loss.unwrap();
            assert_eq!((loss.partition, loss.from, loss.to), (id(P1), 100, 103));
        } else {
            assert_eq!(loss, None);
        }
    }
}

/// Extension: after retention a store sends DIRECT-LOW-WATER before DIRECT-HEAD, and an
/// "earliest" consumer starts at the low-water mark instead of FETCHing offsets nobody holds.
#[test]
fn earliest_consumer_starts_at_the_low_water_mark() {
    let t0 = Instant::now();
    let mut log = MemLog::default();
    log.parts.insert(
        key(),
        (
            5,
            (5..8)
                .map(|s| (record(s).content, RecordMeta::created(0)))
                .collect::<Vec<_>>(),
        ),
    );
    let mut r = reader();
    let mut cfg = ConsumerConfig::new(id(C1));
    cfg.offset_reset = OffsetReset::Earliest;
    let mut c = dafka_proto::Consumer::new(cfg).unwrap();
    assert!(
        c.subscriptions()
            .iter()
            .any(|s| s == format!("O{C1}").as_bytes())
    );
    c.subscribe(topic("golden"));
    // The GET-HEADS (the HEADS-QUERY after it only asks the same again).
    let get_heads: Vec<Message> = std::iter::from_fn(|| c.poll_transmit())
        .filter(|m| matches!(m, Message::GetHeads(_)))
        .collect();
    for m in &get_heads {
        r.handle_message(m, &log).unwrap();
    }
    let answers = sent_r(&mut r, &log);
    assert!(matches!(
        &answers[..],
        [Message::DirectLowWater(l), Message::DirectHead(h)]
            if l.low.sequence == 5 && h.head.sequence == 7 && l.to == id(C1)
    ));
    // The bytes: DIRECT-HEAD's layout under id 'O'.
    let frames = answers[0].to_frames();
    assert_eq!(&frames[0][..33], format!("O{C1}").as_bytes());
    assert_eq!(
        Message::decode(&frames, &dafka_proto::Limits::DEFAULT).unwrap(),
        answers[0]
    );
    for m in &answers {
        c.handle_message(m, t0).unwrap();
    }
    let fetches: Vec<Message> = std::iter::from_fn(|| c.poll_transmit()).collect();
    assert!(matches!(
        &fetches[..],
        [Message::Fetch(f)] if f.sequence == 5 && f.count == 3
    ));
    for m in &fetches {
        r.handle_message(m, &log).unwrap();
    }
    for m in sent_r(&mut r, &log) {
        c.handle_message(&m, t0).unwrap();
    }
    let got: Vec<u64> = std::iter::from_fn(|| c.poll_record())
        .map(|d| d.offset)
        .collect();
    assert_eq!(got, [5, 6, 7]);
    // A partition already past the mark does not move back; records held beyond it stay.
    let low = Message::DirectLowWater(dafka_proto::DirectLowWater {
        to: id(C1),
        low: Head {
            producer: id(P1),
            topic: topic("golden"),
            sequence: 2,
        },
    });
    c.handle_message(&low, t0).unwrap();
    c.handle_message(&Message::Record(record(8)), t0).unwrap();
    assert_eq!(c.poll_record().map(|d| d.offset), Some(8));
}

/// Extension for `min_acks > 1`: every ACK is followed by a STORE-ACK naming the writer; a
/// producer with `min_acks` 2 subscribes to STORE-ACKs only and counts distinct writers.
#[test]
fn store_acks_name_the_writer_and_count_towards_min_acks() {
    let t0 = Instant::now();
    let mut log = MemLog::default();
    let mut w = writer();
    w.handle_message(&Message::Record(record(0)), t0).unwrap();
    append_all(&mut w, &mut log);
    w.durable(&key(), 1);
    let out = sent_w(&mut w);
    assert!(matches!(
        &out[..],
        [Message::Ack(a), Message::StoreAck(s)]
            if a.sequence == 0 && s.ack == *a && s.store == id(S1_WRITER)
    ));
    let mut cfg = ProducerConfig::new(id(P1), topic("golden"));
    cfg.min_acks = 2;
    let mut p = Producer::new(cfg).unwrap();
    assert_eq!(p.subscriptions()[0], format!("A{P1}").as_bytes());
    p.send(record(0).content, RecordMeta::created(0), t0)
        .unwrap();
    while p.poll_transmit().is_some() {}
    // The reference form does not count, one store twice does not count.
    p.handle_message(&out[0], None).unwrap();
    p.handle_message(&out[1], None).unwrap();
    p.handle_message(&out[1], None).unwrap();
    assert!(!p.is_flushed());
    let mut other = out[1].clone();
    if let Message::StoreAck(s) = &mut other {
        s.store = id(S2_WRITER);
    }
    p.handle_message(&other, None).unwrap();
    assert!(p.is_flushed());
}

/// Issue 21: a store whose engine failed (a full disk) went on FETCHing and appending, and its
/// producers learnt nothing. After `fail` it FETCHes and appends nothing, and the producer of
/// a partition whose RECORDs or HEADs still arrive is told why, at most once a second; what
/// was durable is still acknowledged.
#[test]
fn a_failed_writer_tells_producers_and_stops_fetching() {
    let t0 = Instant::now();
    let mut w = writer();
    let mut log = MemLog::default();
    for seq in 0..3 {
        w.handle_message(&Message::Record(record(seq)), t0).unwrap();
    }
    append_all(&mut w, &mut log);
    w.durable(&key(), 2);
    sent_w(&mut w);
    w.fail("write of segment 0.log failed: No space left on device");
    assert!(w.failed());
    w.handle_message(&Message::Record(record(5)), t0).unwrap();
    let out = sent_w(&mut w);
    assert!(
        matches!(&out[..], [Message::StoreRefusal(r)] if r.sequence == 2
            && r.reason == dafka_proto::RefusalReason::Failed
            && r.producer == id(P1)
            && r.store == id(S1_WRITER)
            && r.detail_text().contains("No space left")),
        "{out:?}"
    );
    assert_eq!(w.poll_append(), None);
    // Within the second: nothing more; no FETCH retry ever.
    w.handle_message(&head(9), t0 + Duration::from_millis(500))
        .unwrap();
    assert_eq!(sent_w(&mut w), []);
    assert_eq!(w.poll_timeout(), None);
    w.handle_timeout(t0 + Duration::from_secs(60));
    assert_eq!(sent_w(&mut w), []);
    // A second on: the HEAD is answered with the refusal again.
    w.handle_message(&head(9), t0 + Duration::from_secs(1))
        .unwrap();
    assert!(matches!(&sent_w(&mut w)[..], [Message::StoreRefusal(_)]));
    // A HEAD of what is durable is still acknowledged.
    w.handle_message(&head(1), t0 + Duration::from_secs(3))
        .unwrap();
    assert!(matches!(
        &sent_w(&mut w)[..],
        [Message::Ack(_), Message::StoreAck(_)]
    ));
}

/// A writer whose engine lost offsets to damage FETCHes them at once and then with backoff
/// until they come; a record that fills one is handed out as a fill (not an append), once.
#[test]
fn holes_are_fetched_until_filled() {
    let t0 = Instant::now();
    let mut w = writer();
    w.restore(key(), 10);
    w.restore_holes(key(), &[(3, 5), (7, 8)], t0);
    assert_eq!(w.poll_timeout(), Some(t0));
    w.handle_timeout(t0);
    assert_eq!(fetches(&sent_w(&mut w)), [(3, 2), (7, 1)]);
    // Backoff: not again before the first retry delay.
    w.handle_timeout(t0 + Duration::from_millis(100));
    assert_eq!(sent_w(&mut w), []);
    let direct = |seq| {
        Message::DirectRecord(DirectRecord {
            to: id(S1_WRITER),
            record: record(seq),
        })
    };
    for seq in [3, 4, 4, 6] {
        w.handle_message(&direct(seq), t0).unwrap();
    }
    let fills: Vec<u64> = std::iter::from_fn(|| w.poll_fill())
        .map(|a| a.record.sequence)
        .collect();
    assert_eq!(fills, [3, 4], "offsets of holes only, each once");
    assert_eq!(w.poll_append(), None);
    w.handle_timeout(t0 + Duration::from_millis(200));
    assert_eq!(fetches(&sent_w(&mut w)), [(7, 1)]);
    w.handle_message(&direct(7), t0).unwrap();
    assert_eq!(w.poll_fill().map(|a| a.record.sequence), Some(7));
    w.handle_timeout(t0 + Duration::from_secs(10));
    assert_eq!(sent_w(&mut w), [], "nothing left to fetch");
    assert_eq!(w.poll_timeout(), None);
}

/// OFFSET-COMMIT and COMMITTED-QUERY: the reader commits through its log and answers with a
/// DIRECT-COMMITTED of the partitions it holds only, as they are after the commit.
#[test]
fn a_reader_commits_group_offsets_and_answers_queries() {
    let mut log = MemLog::default();
    log.parts.insert(key(), (0, Vec::new()));
    let mut r = reader();
    let subs = r.subscriptions();
    assert!(subs.contains(&subscription::all(dafka_proto::Kind::OffsetCommit)));
    assert!(subs.contains(&subscription::all(dafka_proto::Kind::CommittedQuery)));
    let group = GroupName::new("billing").unwrap();
    let (held_topic, held) = key();
    let at = |offset: u64, partition: &str| GroupOffset {
        topic: held_topic.clone(),
        partition: id(partition),
        offset,
    };
    let commit = |request: u64, seek: bool, offsets: Vec<GroupOffset>| {
        Message::OffsetCommit(OffsetCommit {
            group: group.clone(),
            member: id(C1),
            request,
            seek,
            offsets,
        })
    };
    let answer = |request: u64, offsets: Vec<GroupOffset>| {
        Message::DirectCommitted(DirectCommitted {
            to: id(C1),
            store: id(S1_READER),
            request,
            group: group.clone(),
            offsets,
        })
    };
    // P1's partition is held, C2's (as a producer id) is not: left out of the answer.
    r.handle_message(&commit(1, false, vec![at(10, P1), at(5, C2)]), &log)
        .unwrap();
    assert_eq!(sent_r(&mut r, &log), [answer(1, vec![at(10, P1)])]);
    // Forward only: a lower commit answers the stored offset; a seek sets it.
    r.handle_message(&commit(2, false, vec![at(4, P1)]), &log)
        .unwrap();
    assert_eq!(sent_r(&mut r, &log), [answer(2, vec![at(10, P1)])]);
    r.handle_message(&commit(3, true, vec![at(4, P1)]), &log)
        .unwrap();
    assert_eq!(sent_r(&mut r, &log), [answer(3, vec![at(4, P1)])]);
    let query = |request: u64, partitions: Vec<(Topic, NodeId)>, group: &GroupName| {
        Message::CommittedQuery(CommittedQuery {
            group: group.clone(),
            member: id(C1),
            request,
            partitions,
        })
    };
    r.handle_message(&query(4, Vec::new(), &group), &log)
        .unwrap();
    assert_eq!(sent_r(&mut r, &log), [answer(4, vec![at(4, P1)])]);
    r.handle_message(&query(5, vec![(held_topic.clone(), id(C2))], &group), &log)
        .unwrap();
    assert_eq!(sent_r(&mut r, &log), [answer(5, Vec::new())]);
    let other = GroupName::new("other").unwrap();
    r.handle_message(&query(6, vec![(held_topic.clone(), held)], &other), &log)
        .unwrap();
    let Some(Message::DirectCommitted(d)) = sent_r(&mut r, &log).pop() else {
        panic!("no answer")
    };
    assert!(d.offsets.is_empty(), "another group's offsets are its own");
}
