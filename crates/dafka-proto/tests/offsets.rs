//! The consumer's offsets query (GET-HEADS -> DIRECT-LOW-WATER, DIRECT-HEAD) against real store
//! readers over an in-memory log.

mod common;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Instant;

use dafka_proto::{
    Bounds, Consumer, ConsumerConfig, GroupOffset, Kind, Listing, LogRead, Message, NodeId,
    OffsetReset, StoreHello, StoreLog, StoreReader, StoreReaderConfig, TimeOffset, Topic,
    group::GroupName, subscription,
};

use common::{C1, P1, S1_WRITER, S2_READER, S2_WRITER, id, topic};

const P2: &str = "0123456789ABCDEF0123456789ABCDEF";
const S1_READER: &str = "FEDCBA9876543210FEDCBA9876543210";

/// Partitions of one topic: producer -> (low water, head).
struct MapLog(BTreeMap<NodeId, (u64, u64)>, Topic, common::MemOffsets);

fn map_log(parts: BTreeMap<NodeId, (u64, u64)>, topic: Topic) -> MapLog {
    MapLog(parts, topic, common::MemOffsets::default())
}

impl StoreLog for MapLog {
    type Error = Infallible;

    fn commit_offsets(
        &self,
        group: &GroupName,
        offsets: &[GroupOffset],
        seek: bool,
    ) -> Result<Vec<GroupOffset>, Infallible> {
        let holds = |t: &Topic, p: &NodeId| self.bounds(t, p).is_some();
        Ok(self.2.commit(group, offsets, seek, holds))
    }

    fn committed(&self, group: &GroupName, partitions: &[(Topic, NodeId)]) -> Vec<GroupOffset> {
        self.2.committed(group, partitions)
    }

    fn groups(&self) -> Vec<GroupName> {
        self.2.groups()
    }

    fn bounds(&self, t: &Topic, producer: &NodeId) -> Option<(u64, u64)> {
        (t == &self.1)
            .then(|| self.0.get(producer).copied())
            .flatten()
    }

    fn partitions_of(&self, t: &Topic) -> Vec<(NodeId, u64, u64)> {
        if t != &self.1 {
            return Vec::new();
        }
        self.0.iter().map(|(p, &(l, h))| (*p, l, h)).collect()
    }

    fn topics(&self) -> Vec<Topic> {
        if self.0.is_empty() {
            return Vec::new();
        }
        vec![self.1.clone()]
    }

    /// The record at offset `o` was created at `o` microseconds after the epoch.
    fn offset_for_time(&self, t: &Topic, producer: &NodeId, time: i64) -> Option<u64> {
        let (low, head) = self.bounds(t, producer)?;
        let first = u64::try_from(time).unwrap_or(0).max(low);
        (first < head).then_some(first)
    }

    fn read(&self, _: &Topic, _: &NodeId, _: u64, _: usize) -> Result<LogRead, Infallible> {
        Ok(LogRead::Records(Vec::new()))
    }
}

fn reader(me: &str, writer: &str) -> StoreReader {
    StoreReader::new(StoreReaderConfig::new(id(me), id(writer))).unwrap()
}

/// Hands every message `from` publishes to `to` (the subscriptions would let them through:
/// GET-HEADS to every reader, DIRECT-* addressed to the consumer).
fn to_reader(c: &mut Consumer, r: &mut StoreReader, log: &MapLog) {
    while let Some(m) = c.poll_transmit() {
        if matches!(m, Message::GetHeads(_) | Message::HeadsQuery(_)) {
            r.handle_message(&m, log).unwrap();
        }
    }
}

fn to_consumer(r: &mut StoreReader, log: &MapLog, c: &mut Consumer, now: Instant) {
    while let Some(m) = r.poll_transmit(log) {
        c.handle_message(&m, now).unwrap();
    }
}

/// Makes reader `r` reachable both ways: its `'W'` + id subscription reaches the consumer, the
/// consumer's `'L'` + id reaches it (STORE-HELLO back).
fn connect(c: &mut Consumer, r: &mut StoreReader, me: &str, log: &MapLog, now: Instant) {
    c.handle_subscription(
        &subscription::node(dafka_proto::Kind::ConsumerHello, &id(me)),
        Instant::now(),
    );
    r.handle_subscription(&subscription::node(dafka_proto::Kind::StoreHello, &id(C1)));
    to_consumer(r, log, c, now);
}

/// The consumer's SUB subscriptions that carry the answers reach reader `r`'s XPUB.
fn listen(r: &mut StoreReader, kinds: &[Kind]) {
    for &k in kinds {
        r.handle_subscription(&subscription::node(k, &id(C1)));
    }
}

const ANSWERS: [Kind; 3] = [Kind::DirectHead, Kind::DirectLowWater, Kind::HeadsEnd];

#[test]
fn a_query_is_answered_once_every_reachable_store_sent_heads_end() {
    let now = Instant::now();
    let golden = topic("golden");
    let log1 = map_log(BTreeMap::from([(id(P1), (0, 10))]), golden.clone());
    let log2 = map_log(BTreeMap::from([(id(P2), (3, 7))]), golden.clone());
    let mut c = Consumer::new(ConsumerConfig::new(id(C1))).unwrap();
    let (mut r1, mut r2) = (reader(S1_READER, S1_WRITER), reader(S2_READER, S2_WRITER));
    listen(&mut r1, &ANSWERS);
    listen(&mut r2, &ANSWERS);
    connect(&mut c, &mut r1, S1_READER, &log1, now);
    connect(&mut c, &mut r2, S2_READER, &log2, now);
    while c.poll_transmit().is_some() {}
    assert!(!c.query_answered(&golden), "no query runs");
    c.query_offsets(golden.clone());
    assert!(!c.query_answered(&golden));
    let asked: Vec<Message> = std::iter::from_fn(|| c.poll_transmit()).collect();
    for m in &asked {
        r1.handle_message(m, &log1).unwrap();
        r2.handle_message(m, &log2).unwrap();
    }
    to_consumer(&mut r1, &log1, &mut c, now);
    assert!(
        !c.query_answered(&golden),
        "the second reachable store has not ended yet"
    );
    // Its answers come before its HEADS-END: all in when the query is answered.
    let mut last = None;
    while let Some(m) = r2.poll_transmit(&log2) {
        assert!(!c.query_answered(&golden));
        c.handle_message(&m, now).unwrap();
        last = Some(m.kind());
    }
    assert_eq!(last, Some(Kind::HeadsEnd));
    assert!(c.query_answered(&golden));
    assert_eq!(
        c.finish_query(&golden).unwrap(),
        BTreeMap::from([
            (id(P1), Bounds { low: 0, end: 10 }),
            (id(P2), Bounds { low: 3, end: 7 }),
        ])
    );
    assert!(!c.query_answered(&golden), "the query ended");
}

#[test]
fn a_heads_end_of_an_earlier_query_does_not_answer_the_next() {
    let now = Instant::now();
    let golden = topic("golden");
    let log = map_log(BTreeMap::from([(id(P1), (0, 10))]), golden.clone());
    let mut c = Consumer::new(ConsumerConfig::new(id(C1))).unwrap();
    let mut r = reader(S1_READER, S1_WRITER);
    listen(&mut r, &ANSWERS);
    connect(&mut c, &mut r, S1_READER, &log, now);
    while c.poll_transmit().is_some() {}
    c.query_offsets(golden.clone());
    to_reader(&mut c, &mut r, &log);
    // The first query's answers are still on their way when the query starts again.
    c.query_offsets(golden.clone());
    to_consumer(&mut r, &log, &mut c, now);
    assert!(
        !c.query_answered(&golden),
        "the HEADS-END answered the earlier query"
    );
    to_reader(&mut c, &mut r, &log);
    to_consumer(&mut r, &log, &mut c, now);
    assert!(c.query_answered(&golden));
}

#[test]
fn a_store_sending_no_heads_end_keeps_the_query_unanswered() {
    // A reference store (no HEADS-QUERY: it answers GET-HEADS only), or one of ours whose
    // XPUB may still filter out the answers (the consumer's 'E' not seen yet).
    let now = Instant::now();
    let golden = topic("golden");
    let log = map_log(BTreeMap::from([(id(P1), (0, 10))]), golden.clone());
    for heard in [
        &[][..],
        &[Kind::DirectLowWater, Kind::HeadsEnd][..],
        &ANSWERS[..],
    ] {
        let mut c = Consumer::new(ConsumerConfig::new(id(C1))).unwrap();
        let mut r = reader(S1_READER, S1_WRITER);
        listen(&mut r, heard);
        if heard.len() == ANSWERS.len() {
            // ... and one that heard them all, then lost the consumer's 'E' (cancelled).
            r.handle_unsubscription(&subscription::node(Kind::DirectHead, &id(C1)));
        }
        connect(&mut c, &mut r, S1_READER, &log, now);
        c.query_offsets(golden.clone());
        to_reader(&mut c, &mut r, &log);
        to_consumer(&mut r, &log, &mut c, now);
        assert_eq!(c.offsets(&golden).unwrap().len(), 1, "it answered");
        assert!(!c.query_answered(&golden), "subscriptions heard: {heard:?}");
    }
}

#[test]
fn a_query_learns_every_partition_with_its_bounds_without_subscribing() {
    let now = Instant::now();
    let golden = topic("golden");
    let log = map_log(
        BTreeMap::from([
            (id(P1), (0, 10)),
            (id(P2), (40, 100)),
            (id(S1_WRITER), (0, 0)),
        ]),
        golden.clone(),
    );
    let mut c = Consumer::new(ConsumerConfig::new(id(C1))).unwrap();
    let mut r = reader(S1_READER, S1_WRITER);
    assert_eq!(c.stores_reachable(), 0);
    c.query_offsets(golden.clone());
    // Sent before the reader could hear it: lost, as a PUB drops it.
    while c.poll_transmit().is_some() {}
    connect(&mut c, &mut r, S1_READER, &log, now);
    assert_eq!(c.stores_reachable(), 1);
    // Reachable: the query goes out again (with the CONSUMER-HELLO), and is answered.
    to_reader(&mut c, &mut r, &log);
    to_consumer(&mut r, &log, &mut c, now);
    let heard = c.finish_query(&golden).unwrap();
    assert_eq!(
        heard,
        BTreeMap::from([
            (id(P1), Bounds { low: 0, end: 10 }),
            (id(P2), Bounds { low: 40, end: 100 }),
        ]),
        "an empty partition (head 0) is not reported"
    );
    // Not subscribed: nothing was delivered and no position created.
    assert_eq!(c.positions().count(), 0);
    assert!(c.poll_record().is_none());
    assert!(c.offsets(&golden).is_none(), "the query ended");
}

#[test]
fn two_stores_give_the_highest_head_and_low_water() {
    let now = Instant::now();
    let golden = topic("golden");
    let log1 = map_log(BTreeMap::from([(id(P1), (0, 10))]), golden.clone());
    let log2 = map_log(BTreeMap::from([(id(P1), (5, 12))]), golden.clone());
    let mut c = Consumer::new(ConsumerConfig::new(id(C1))).unwrap();
    let (mut r1, mut r2) = (reader(S1_READER, S1_WRITER), reader(S2_READER, S2_WRITER));
    c.query_offsets(golden.clone());
    connect(&mut c, &mut r1, S1_READER, &log1, now);
    let pending: Vec<Message> = std::iter::from_fn(|| c.poll_transmit()).collect();
    for m in &pending {
        if matches!(m, Message::GetHeads(_)) {
            r1.handle_message(m, &log1).unwrap();
            r2.handle_message(m, &log2).unwrap();
        }
    }
    to_consumer(&mut r1, &log1, &mut c, now);
    assert_eq!(
        c.offsets(&golden).unwrap()[&id(P1)],
        Bounds { low: 0, end: 10 }
    );
    to_consumer(&mut r2, &log2, &mut c, now);
    assert_eq!(
        c.offsets(&golden).unwrap()[&id(P1)],
        Bounds { low: 5, end: 12 }
    );
}

#[test]
fn reachable_needs_both_directions_and_answers_to_others_are_refused() {
    let now = Instant::now();
    let mut c = Consumer::new(ConsumerConfig::new(id(C1))).unwrap();
    c.handle_subscription(
        &subscription::node(dafka_proto::Kind::ConsumerHello, &id(S1_READER)),
        Instant::now(),
    );
    assert_eq!(
        c.stores_reachable(),
        0,
        "it hears us, we do not hear it yet"
    );
    let hello_to = |consumer: &str| {
        Message::StoreHello(StoreHello {
            consumer: id(consumer),
            store: id(S1_READER),
        })
    };
    assert!(c.handle_message(&hello_to(P1), now).is_err());
    assert_eq!(c.stores_reachable(), 0);
    c.handle_message(&hello_to(C1), now).unwrap();
    assert_eq!(c.stores_reachable(), 1);
}

#[test]
fn a_store_reader_whose_subscription_is_cancelled_is_no_longer_reachable() {
    let now = Instant::now();
    let golden = topic("golden");
    let log = map_log(BTreeMap::from([(id(P1), (0, 10))]), golden.clone());
    let mut c = Consumer::new(ConsumerConfig::new(id(C1))).unwrap();
    let mut r = reader(S1_READER, S1_WRITER);
    connect(&mut c, &mut r, S1_READER, &log, now);
    assert_eq!(c.stores_reachable(), 1);
    // Another cancellation (not a store reader's 'W') changes nothing.
    c.handle_unsubscription(&subscription::node(dafka_proto::Kind::StoreHello, &id(C1)));
    assert_eq!(c.stores_reachable(), 1);
    // Its connection ended: the XPUB hands up the cancelled `'W'` + id.
    c.handle_unsubscription(&subscription::node(
        dafka_proto::Kind::ConsumerHello,
        &id(S1_READER),
    ));
    assert_eq!(c.stores_reachable(), 0, "a dead store is forgotten");
    // It reconnects: its `'W'` comes back and it counts again (its hello was heard before).
    c.query_offsets(golden.clone());
    while c.poll_transmit().is_some() {}
    c.handle_subscription(
        &subscription::node(dafka_proto::Kind::ConsumerHello, &id(S1_READER)),
        Instant::now(),
    );
    assert_eq!(c.stores_reachable(), 1);
    // And the running query is sent again to it.
    to_reader(&mut c, &mut r, &log);
    to_consumer(&mut r, &log, &mut c, now);
    assert_eq!(
        c.finish_query(&golden).unwrap(),
        BTreeMap::from([(id(P1), Bounds { low: 0, end: 10 })])
    );
}

/// Issue 22: `dafka consume evnets --from-beginning` (a typo) printed "processed 0 records" and
/// exited 0. A subscription asks the stores whether they hold the topic; once every reachable
/// store answered and none holds it, the consumer says so.
#[test]
fn a_topic_no_store_holds_is_known_once_every_reachable_store_answered() {
    let now = Instant::now();
    let golden = topic("golden");
    let typo = topic("gloden");
    let log1 = map_log(BTreeMap::from([(id(P1), (0, 10))]), golden.clone());
    let log2 = map_log(BTreeMap::new(), golden.clone());
    for reset in [OffsetReset::Earliest, OffsetReset::Latest] {
        let mut cfg = ConsumerConfig::new(id(C1));
        cfg.offset_reset = reset;
        let mut c = Consumer::new(cfg).unwrap();
        let (mut r1, mut r2) = (reader(S1_READER, S1_WRITER), reader(S2_READER, S2_WRITER));
        listen(&mut r1, &ANSWERS);
        listen(&mut r2, &ANSWERS);
        c.subscribe(golden.clone());
        c.subscribe(typo.clone());
        // Asked before any store could hear: lost. Nothing is claimed.
        while c.poll_transmit().is_some() {}
        assert!(c.topics_not_held().is_empty());
        // The first store becomes reachable: asked again, it answers.
        connect(&mut c, &mut r1, S1_READER, &log1, now);
        to_reader(&mut c, &mut r1, &log1);
        to_consumer(&mut r1, &log1, &mut c, now);
        assert_eq!(c.topics_not_held(), vec![typo.clone()], "{reset:?}");
        assert_eq!(c.poll_not_held(), Some(typo.clone()));
        assert_eq!(c.poll_not_held(), None, "said once");
        // A second store becomes reachable: not claimed again until it answered too.
        connect(&mut c, &mut r2, S2_READER, &log2, now);
        assert!(c.topics_not_held().is_empty());
        let asked: Vec<Message> = std::iter::from_fn(|| c.poll_transmit()).collect();
        assert!(
            asked.iter().all(|m| match m {
                Message::GetHeads(g) => g.topic == typo,
                Message::HeadsQuery(q) => q.topic == typo,
                _ => true,
            }),
            "a topic a store holds is not asked about again: {asked:?}"
        );
        for m in &asked {
            r2.handle_message(m, &log2).unwrap();
        }
        to_consumer(&mut r2, &log2, &mut c, now);
        assert_eq!(c.topics_not_held(), vec![typo.clone()]);
        assert_eq!(c.poll_not_held(), None);
        // A record of it comes (a producer started): no longer claimed.
        let record = Message::Record(dafka_proto::Record {
            producer: id(P2),
            topic: typo.clone(),
            sequence: 0,
            content: bytes::Bytes::from_static(b"x"),
        });
        c.handle_message(&record, now).unwrap();
        assert!(c.topics_not_held().is_empty());
        // Unsubscribed: forgotten.
        c.unsubscribe(&typo);
        assert!(c.topics_not_held().is_empty());
    }
}

#[test]
fn a_store_sending_no_heads_end_never_has_a_topic_claimed_not_held() {
    // A reference store answers GET-HEADS and sends no HEADS-END: whether it holds a topic is
    // never known, so nothing is claimed.
    let now = Instant::now();
    let log = map_log(BTreeMap::new(), topic("golden"));
    let mut cfg = ConsumerConfig::new(id(C1));
    cfg.offset_reset = OffsetReset::Earliest;
    let mut c = Consumer::new(cfg).unwrap();
    let mut r = reader(S1_READER, S1_WRITER);
    listen(&mut r, &[Kind::DirectHead, Kind::DirectLowWater]);
    c.subscribe(topic("gloden"));
    connect(&mut c, &mut r, S1_READER, &log, now);
    to_reader(&mut c, &mut r, &log);
    to_consumer(&mut r, &log, &mut c, now);
    assert!(c.topics_not_held().is_empty());
    assert_eq!(c.poll_not_held(), None);
}

#[test]
fn an_assigned_consumer_asks_nothing_when_it_subscribes() {
    let mut cfg = ConsumerConfig::new(id(C1));
    cfg.offset_reset = OffsetReset::Assigned;
    let mut c = Consumer::new(cfg).unwrap();
    c.subscribe(topic("golden"));
    assert!(c.poll_transmit().is_none());
}

/// Hands every message the consumer sends to both readers.
fn to_readers(c: &mut Consumer, readers: &mut [(&mut StoreReader, &MapLog)]) {
    let asked: Vec<Message> = std::iter::from_fn(|| c.poll_transmit()).collect();
    for m in &asked {
        for (r, log) in readers.iter_mut() {
            r.handle_message(m, *log).unwrap();
        }
    }
}

#[test]
fn a_time_query_takes_the_lowest_offset_any_store_holds_at_or_after_the_time() {
    let now = Instant::now();
    let golden = topic("golden");
    // S1 holds offsets 0..10 of P1; S2 holds 5..20 of P1 (its first ones gone) and P2's 0..4.
    let log1 = map_log(BTreeMap::from([(id(P1), (0, 10))]), golden.clone());
    let log2 = map_log(
        BTreeMap::from([(id(P1), (5, 20)), (id(P2), (0, 4))]),
        golden.clone(),
    );
    let mut c = Consumer::new(ConsumerConfig::new(id(C1))).unwrap();
    let (mut r1, mut r2) = (reader(S1_READER, S1_WRITER), reader(S2_READER, S2_WRITER));
    for r in [&mut r1, &mut r2] {
        listen(r, &[Kind::DirectTimeOffset, Kind::HeadsEnd]);
    }
    connect(&mut c, &mut r1, S1_READER, &log1, now);
    connect(&mut c, &mut r2, S2_READER, &log2, now);
    while c.poll_transmit().is_some() {}
    let mut ask = |time: i64| {
        c.query_time(golden.clone(), time);
        to_readers(&mut c, &mut [(&mut r1, &log1), (&mut r2, &log2)]);
        to_consumer(&mut r1, &log1, &mut c, now);
        assert!(!c.time_answered(&golden), "S2 has not ended yet");
        to_consumer(&mut r2, &log2, &mut c, now);
        assert!(c.time_answered(&golden));
        c.finish_time_query(&golden).unwrap()
    };
    let at = |offset, end| TimeOffset { offset, end };
    // Time 3: S1 has offset 3, S2 only from 5: the lowest. P2's 3 is at 3.
    assert_eq!(
        ask(3),
        BTreeMap::from([(id(P1), at(Some(3), 20)), (id(P2), at(Some(3), 4))])
    );
    // Time 15: S1 has nothing that recent (it says its end, 10, which is no offset).
    assert_eq!(
        ask(15),
        BTreeMap::from([(id(P1), at(Some(15), 20)), (id(P2), at(None, 4))])
    );
    // Past every record: none.
    assert_eq!(
        ask(99),
        BTreeMap::from([(id(P1), at(None, 20)), (id(P2), at(None, 4))])
    );
}

#[test]
fn a_time_query_without_the_answers_subscription_gets_no_heads_end() {
    let now = Instant::now();
    let golden = topic("golden");
    let log = map_log(BTreeMap::from([(id(P1), (0, 10))]), golden.clone());
    let mut c = Consumer::new(ConsumerConfig::new(id(C1))).unwrap();
    let mut r = reader(S1_READER, S1_WRITER);
    // 'R' seen, 'Z' not yet: the XPUB may still drop the answers, so no end marker.
    listen(&mut r, &[Kind::HeadsEnd]);
    connect(&mut c, &mut r, S1_READER, &log, now);
    while c.poll_transmit().is_some() {}
    c.query_time(golden.clone(), 0);
    to_readers(&mut c, &mut [(&mut r, &log)]);
    let sent: Vec<Kind> = std::iter::from_fn(|| r.poll_transmit(&log))
        .map(|m| m.kind())
        .collect();
    assert_eq!(sent, vec![Kind::DirectTimeOffset]);
}

/// The names a list query heard, once ended.
fn finished(c: &mut Consumer, what: Listing) -> Vec<Topic> {
    let names = c.finish_names_query(what).expect("a query was running");
    names.into_iter().collect()
}

#[test]
fn a_topics_query_is_answered_once_every_reachable_store_listed_its_topics() {
    let now = Instant::now();
    let log1 = map_log(BTreeMap::from([(id(P1), (0, 10))]), topic("golden"));
    let log2 = map_log(BTreeMap::from([(id(P2), (0, 1))]), topic("silver"));
    let mut c = Consumer::new(ConsumerConfig::new(id(C1))).unwrap();
    let (mut r1, mut r2) = (reader(S1_READER, S1_WRITER), reader(S2_READER, S2_WRITER));
    connect(&mut c, &mut r1, S1_READER, &log1, now);
    while c.poll_transmit().is_some() {}
    c.query_names(Listing::Topics);
    to_readers(&mut c, &mut [(&mut r1, &log1)]);
    to_consumer(&mut r1, &log1, &mut c, now);
    assert!(c.names_answered(Listing::Topics));
    // A second store becomes reachable: asked again, and awaited.
    connect(&mut c, &mut r2, S2_READER, &log2, now);
    assert!(!c.names_answered(Listing::Topics));
    to_readers(&mut c, &mut [(&mut r2, &log2)]);
    to_consumer(&mut r2, &log2, &mut c, now);
    assert!(c.names_answered(Listing::Topics));
    let topics = finished(&mut c, Listing::Topics);
    assert_eq!(topics, vec![topic("golden"), topic("silver")]);
    assert!(!c.names_answered(Listing::Topics), "the query ended");
}

#[test]
fn a_groups_query_lists_every_group_with_offsets_committed_in_any_reachable_store() {
    let now = Instant::now();
    let golden = topic("golden");
    let log1 = map_log(BTreeMap::from([(id(P1), (0, 10))]), golden.clone());
    let log2 = map_log(BTreeMap::from([(id(P2), (0, 10))]), golden.clone());
    let at = |partition: &str| GroupOffset {
        topic: golden.clone(),
        partition: id(partition),
        offset: 3,
    };
    let group = |name: &str| GroupName::new(name.as_bytes().to_vec()).unwrap();
    log1.commit_offsets(&group("billing"), &[at(P1)], false)
        .unwrap();
    log1.commit_offsets(&group("audit"), &[at(P1)], false)
        .unwrap();
    log2.commit_offsets(&group("billing"), &[at(P2)], false)
        .unwrap();
    log2.commit_offsets(&group("zeta"), &[at(P2)], false)
        .unwrap();
    let mut c = Consumer::new(ConsumerConfig::new(id(C1))).unwrap();
    let (mut r1, mut r2) = (reader(S1_READER, S1_WRITER), reader(S2_READER, S2_WRITER));
    connect(&mut c, &mut r1, S1_READER, &log1, now);
    connect(&mut c, &mut r2, S2_READER, &log2, now);
    while c.poll_transmit().is_some() {}
    // A topics query running at the same time is its own: neither answers the other.
    c.query_names(Listing::Topics);
    c.query_names(Listing::Groups);
    to_readers(&mut c, &mut [(&mut r1, &log1), (&mut r2, &log2)]);
    to_consumer(&mut r1, &log1, &mut c, now);
    assert!(
        !c.names_answered(Listing::Groups),
        "one of two stores answered"
    );
    to_consumer(&mut r2, &log2, &mut c, now);
    assert!(c.names_answered(Listing::Groups));
    let groups = finished(&mut c, Listing::Groups);
    assert_eq!(
        groups,
        vec![topic("audit"), topic("billing"), topic("zeta")]
    );
    assert!(c.names_answered(Listing::Topics));
    let topics = finished(&mut c, Listing::Topics);
    assert_eq!(topics, vec![golden]);
}

#[test]
fn a_group_commit_is_answered_once_every_reachable_store_has_it_and_sent_to_a_new_one() {
    let now = Instant::now();
    let golden = topic("golden");
    // Both stores hold P1's partition; only the first holds P2's.
    let log1 = map_log(
        BTreeMap::from([(id(P1), (0, 10)), (id(P2), (0, 5))]),
        golden.clone(),
    );
    let log2 = map_log(BTreeMap::from([(id(P1), (0, 10))]), golden.clone());
    let mut c = Consumer::new(ConsumerConfig::new(id(C1))).unwrap();
    let (mut r1, mut r2) = (reader(S1_READER, S1_WRITER), reader(S2_READER, S2_WRITER));
    connect(&mut c, &mut r1, S1_READER, &log1, now);
    while c.poll_transmit().is_some() {}
    let group = GroupName::new("billing").unwrap();
    let at = |p: &str, offset: u64| GroupOffset {
        topic: golden.clone(),
        partition: id(p),
        offset,
    };
    c.commit_offsets(group.clone(), vec![at(P1, 7), at(P2, 3)], false);
    assert!(!c.group_answered());
    to_readers(&mut c, &mut [(&mut r1, &log1)]);
    to_consumer(&mut r1, &log1, &mut c, now);
    assert!(c.group_answered());
    // A second store becomes reachable while the commit runs: sent to it too, and awaited.
    connect(&mut c, &mut r2, S2_READER, &log2, now);
    assert!(!c.group_answered());
    to_readers(&mut c, &mut [(&mut r2, &log2)]);
    to_consumer(&mut r2, &log2, &mut c, now);
    assert!(c.group_answered());
    let heard = c.finish_group_ask().unwrap();
    assert_eq!(
        heard,
        BTreeMap::from([((golden.clone(), id(P1)), 7), ((golden.clone(), id(P2)), 3)])
    );
    assert!(
        log2.2.committed(&group, &[]) == vec![at(P1, 7)],
        "the second store has the partition it holds"
    );
    // A query gets the largest offset any store holds: the first store is ahead.
    log1.2.commit(&group, &[at(P1, 9)], false, |_, _| true);
    c.query_committed(group.clone(), Vec::new());
    to_readers(&mut c, &mut [(&mut r1, &log1), (&mut r2, &log2)]);
    to_consumer(&mut r1, &log1, &mut c, now);
    to_consumer(&mut r2, &log2, &mut c, now);
    assert!(c.group_answered());
    assert_eq!(
        c.group_heard().unwrap().get(&(golden.clone(), id(P1))),
        Some(&9)
    );
    // An answer to an earlier request counts for nothing.
    let stale = Message::DirectCommitted(dafka_proto::DirectCommitted {
        to: id(C1),
        store: id(S1_READER),
        request: 0,
        group: group.clone(),
        offsets: vec![at(P1, 100)],
    });
    c.handle_message(&stale, now).unwrap();
    assert_eq!(
        c.finish_group_ask().unwrap().get(&(golden, id(P1))),
        Some(&9)
    );
}
