//! The consumer state machine under a virtual clock, alone and wired to a producer in memory.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use dafka_proto::record::RecordMeta;
use dafka_proto::{
    Consumer, ConsumerConfig, Delivery, DirectRecord, Head, Limits, Message, OffsetReset,
    PeerError, Producer, ProducerConfig, Record, StoreHello, subscription,
};

use common::{C1, C2, P1, Rng, S2_READER, id, topic};

/// A consumer subscribed to "golden", with `edit` applied to its default configuration, and
/// the questions subscribing asked the stores (GET-HEADS, HEADS-QUERY) taken.
fn consumer_with(me: &str, edit: impl FnOnce(&mut ConsumerConfig)) -> Consumer {
    let mut cfg = ConsumerConfig::new(id(me));
    edit(&mut cfg);
    let assigned = cfg.offset_reset == OffsetReset::Assigned;
    let mut c = Consumer::new(cfg).unwrap();
    c.subscribe(topic("golden"));
    let asked = sent(&mut c);
    if assigned {
        assert!(asked.is_empty(), "{asked:?}");
    } else {
        assert!(
            matches!(&asked[..], [Message::GetHeads(g), Message::HeadsQuery(q)]
                if g.topic == topic("golden") && q.topic == topic("golden")),
            "{asked:?}"
        );
    }
    c
}

fn consumer(me: &str, reset: OffsetReset) -> Consumer {
    consumer_with(me, |cfg| cfg.offset_reset = reset)
}

/// An "earliest" consumer of "golden" whose GET-HEADS was already sent.
fn earliest() -> Consumer {
    consumer(C1, OffsetReset::Earliest)
}

fn record_in(t: &str, seq: u64) -> Message {
    Message::Record(Record {
        producer: id(P1),
        topic: topic(t),
        sequence: seq,
        content: Bytes::from(format!("{t}-r{seq:03}")),
    })
}

fn record(seq: u64) -> Message {
    record_in("golden", seq)
}

fn head(seq: u64) -> Message {
    Message::Head(Head {
        producer: id(P1),
        topic: topic("golden"),
        sequence: seq,
    })
}

/// Hands the consumer the RECORDs of "golden" with these offsets.
fn feed(c: &mut Consumer, offsets: &[u64], now: Instant) {
    for &seq in offsets {
        c.handle_message(&record(seq), now).unwrap();
    }
}

fn delivered(c: &mut Consumer) -> Vec<u64> {
    std::iter::from_fn(|| c.poll_record())
        .map(|d| d.offset)
        .collect()
}

fn sent(c: &mut Consumer) -> Vec<Message> {
    std::iter::from_fn(|| c.poll_transmit()).collect()
}

/// The FETCHes among the consumer's messages: (sequence, count).
fn fetches(c: &mut Consumer) -> Vec<(u64, u32)> {
    sent(c)
        .into_iter()
        .map(|m| match m {
            Message::Fetch(f) => (f.sequence, f.count),
            other => panic!("expected a FETCH, got {other:?}"),
        })
        .collect()
}

#[test]
fn topics_match_exactly() {
    let t0 = Instant::now();
    let mut c = Consumer::new(ConsumerConfig::new(id(C1))).unwrap();
    let subs = c.subscribe(topic("hello"));
    // The subscriptions end with the prefix's NUL, so the publisher filters exactly too;
    // META-RECORDs first (a producer of ours sends those), RECORDs for reference producers.
    assert_eq!(subs[0].as_ref(), b"Thello\0");
    assert_eq!(subs[1].as_ref(), b"Mhello\0");
    assert_eq!(subs[2].as_ref(), b"Hhello\0");
    // A RECORD of "hello2" that a plain "Mhello" subscription would let through is dropped.
    c.handle_message(&record_in("hello2", 0), t0).unwrap();
    c.handle_message(&record_in("hello", 0), t0).unwrap();
    let got: Vec<Delivery> = std::iter::from_fn(|| c.poll_record()).collect();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].topic, topic("hello"));
    assert_eq!(got[0].content, Bytes::from_static(b"hello-r000"));
    assert_eq!(c.dropped(), 1);
}

#[test]
fn latest_starts_at_the_first_record_seen() {
    let t0 = Instant::now();
    let mut c = consumer(C2, OffsetReset::Latest);
    c.handle_message(&record(5), t0).unwrap();
    c.handle_message(&record(6), t0).unwrap();
    assert_eq!(delivered(&mut c), vec![5, 6]);
    assert!(sent(&mut c).is_empty(), "no FETCH");
    let pos: Vec<_> = c.positions().map(|(t, p, n)| (t.clone(), *p, n)).collect();
    assert_eq!(pos, vec![(topic("golden"), id(P1), 7)]);
}

/// Issue 22: the reference's "latest" consumer starts at the head a HEAD names, FETCHing
/// and delivering that record (captured: C2 sees HEAD(11), FETCHes 11, gets DIRECT-RECORD 11
/// from P1), so `dafka consume` without `--from-beginning` printed the last record written
/// before it came. Ours starts after it: only records written after.
#[test]
fn latest_starts_after_the_head_a_head_names() {
    let t0 = Instant::now();
    let mut c = consumer(C2, OffsetReset::Latest);
    let captured_head = common::find("HEAD", &[("sequence", "11")]);
    let head = Message::decode(&captured_head.frames, &Limits::DEFAULT).unwrap();
    c.handle_message(&head, t0).unwrap();
    assert!(sent(&mut c).is_empty(), "no FETCH of the head record");
    assert_eq!(c.poll_timeout(), None, "no gap, no retry");
    let pos: Vec<_> = c.positions().map(|(_, p, n)| (*p, n)).collect();
    assert_eq!(pos, vec![(id(P1), 12)]);
    // The head record itself, late (a FETCH answer to another consumer): not delivered.
    c.handle_message(&record(11), t0).unwrap();
    c.handle_message(&record(12), t0).unwrap();
    assert_eq!(delivered(&mut c), vec![12]);
}

/// The same from a store's DIRECT-HEAD (the answer to the GET-HEADS a subscription sends).
#[test]
fn latest_starts_after_the_head_a_store_reports() {
    let t0 = Instant::now();
    let mut c = consumer(C2, OffsetReset::Latest);
    let answer = Message::DirectHead(dafka_proto::DirectHead {
        to: id(C2),
        head: dafka_proto::Head {
            producer: id(P1),
            topic: topic("golden"),
            sequence: 4,
        },
    });
    c.handle_message(&answer, t0).unwrap();
    assert!(sent(&mut c).is_empty());
    feed(&mut c, &[4, 5, 6], t0);
    assert_eq!(delivered(&mut c), vec![5, 6]);
}

#[test]
fn earliest_sends_get_heads_and_fetches_from_zero() {
    // As captured: C1 (--from-beginning) sends GET-HEADS, gets DIRECT-HEAD(5) from S1's
    // reader, FETCHes from 0 and receives DIRECT-RECORD 0-5.
    let t0 = Instant::now();
    let limits = Limits::DEFAULT;
    let mut cfg = ConsumerConfig::new(id(C1));
    cfg.offset_reset = OffsetReset::Earliest;
    let mut c = Consumer::new(cfg).unwrap();
    c.subscribe(topic("golden"));
    let out = sent(&mut c);
    assert_eq!(out.len(), 2, "GET-HEADS, then our HEADS-QUERY: {out:?}");
    assert_eq!(out[0].to_frames(), common::find("GET-HEADS", &[]).frames);
    assert!(matches!(&out[1], Message::HeadsQuery(q) if q.topic == topic("golden")));

    let dh = common::find("DIRECT-HEAD", &[("topic_prefix", C1), ("sequence", "5")]);
    c.handle_message(&Message::decode(&dh.frames, &limits).unwrap(), t0)
        .unwrap();
    assert_eq!(fetches(&mut c), vec![(0, 6)]);
    for seq in 0..6 {
        let v = common::find(
            "DIRECT-RECORD",
            &[("topic_prefix", C1), ("sequence", &seq.to_string())],
        );
        c.handle_message(&Message::decode(&v.frames, &limits).unwrap(), t0)
            .unwrap();
    }
    let got: Vec<(u64, Bytes)> = std::iter::from_fn(|| c.poll_record())
        .map(|d| (d.offset, d.content))
        .collect();
    let expected: Vec<(u64, Bytes)> = (0..6)
        .map(|i| (i, Bytes::from(format!("golden-r{i:03}"))))
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn gaps_are_reordered_and_fetched_once_until_the_timer() {
    let t0 = Instant::now();
    let mut c = earliest();
    feed(&mut c, &[0, 2, 3], t0);
    assert_eq!(delivered(&mut c), vec![0]);
    // One FETCH for the gap, not one per out-of-order record.
    assert_eq!(fetches(&mut c), vec![(1, 1)]);
    assert_eq!(c.reorder_bytes(), 2 * 11);
    c.handle_message(&record(1), t0).unwrap();
    assert_eq!(delivered(&mut c), vec![1, 2, 3]);
    assert_eq!(c.reorder_bytes(), 0);
    assert_eq!(c.poll_timeout(), None);
    assert!(sent(&mut c).is_empty());
}

#[test]
fn fetch_is_retried_on_a_timer_with_backoff() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut c = consumer_with(C1, |cfg| {
        cfg.fetch_retry = ms(100);
        cfg.fetch_retry_max = ms(500);
    });
    c.handle_message(&record(0), t0).unwrap();
    c.handle_message(&head(4), t0).unwrap();
    assert_eq!(fetches(&mut c), vec![(1, 4)]);
    // Retries at +100, then 200, 400, 500 (capped), 500 ms apart: no new record needed.
    let mut at = t0;
    for gap in [100, 200, 400, 500, 500] {
        at += ms(gap);
        assert_eq!(c.poll_timeout(), Some(at));
        c.handle_timeout(at - ms(1));
        assert!(sent(&mut c).is_empty(), "not before its time");
        c.handle_timeout(at);
        assert_eq!(fetches(&mut c), vec![(1, 4)]);
    }
    // Progress within the range asked for sends nothing new but restarts the backoff.
    c.handle_message(&record(1), at).unwrap();
    assert!(sent(&mut c).is_empty());
    assert_eq!(c.poll_timeout(), Some(at + ms(100)));
    at += ms(100);
    c.handle_timeout(at);
    assert_eq!(fetches(&mut c), vec![(2, 3)]);
    // A gap beyond what was asked for is fetched at once.
    c.handle_message(&head(6), at).unwrap();
    assert!(
        sent(&mut c).is_empty(),
        "2..=4 still asked for; 5..=6 once they are reached"
    );
    for seq in 2..=4 {
        c.handle_message(&record(seq), at).unwrap();
    }
    assert_eq!(fetches(&mut c), vec![(5, 2)]);
    for seq in 5..=6 {
        c.handle_message(&record(seq), at).unwrap();
    }
    assert_eq!(delivered(&mut c), vec![0, 1, 2, 3, 4, 5, 6]);
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn duplicates_are_dropped() {
    let t0 = Instant::now();
    let mut c = earliest();
    // The same records twice, as from a store's answer and the producer's.
    feed(&mut c, &[0, 2, 0, 2], t0);
    let direct = |seq| {
        let Message::Record(r) = record(seq) else {
            unreachable!()
        };
        Message::DirectRecord(DirectRecord {
            to: id(C1),
            record: r,
        })
    };
    c.handle_message(&direct(1), t0).unwrap();
    c.handle_message(&direct(1), t0).unwrap();
    assert_eq!(delivered(&mut c), vec![0, 1, 2]);
    assert_eq!(c.dropped(), 3);
}

#[test]
fn the_reorder_buffer_is_bounded() {
    let t0 = Instant::now();
    let mut c = consumer_with(C1, |cfg| {
        cfg.offset_reset = OffsetReset::Earliest;
        cfg.max_reorder = 2;
        cfg.max_reorder_bytes = 1000;
    });
    sent(&mut c);
    for seq in [2, 3, 4] {
        c.handle_message(&record(seq), t0).unwrap();
    }
    assert_eq!(c.reorder_bytes(), 2 * 11, "4 found no room");
    assert_eq!(fetches(&mut c), vec![(0, 2)]);
    c.handle_message(&record(0), t0).unwrap();
    c.handle_message(&record(1), t0).unwrap();
    assert_eq!(delivered(&mut c), vec![0, 1, 2, 3]);
    // 4 was dropped but is known to exist: it is fetched.
    assert_eq!(fetches(&mut c), vec![(4, 1)]);

    // The byte bound holds over all partitions.
    let mut c = consumer_with(C1, |cfg| {
        cfg.offset_reset = OffsetReset::Earliest;
        cfg.max_reorder_bytes = 15;
    });
    c.handle_message(&record(1), t0).unwrap();
    c.handle_message(&record(2), t0).unwrap();
    assert_eq!(c.reorder_bytes(), 11);
}

#[test]
fn hellos_list_the_topics() {
    let t0 = Instant::now();
    let mut c = consumer(C1, OffsetReset::Latest);
    // A store reader's subscription W<reader> reaching our XPUB asks for a CONSUMER-HELLO.
    c.handle_subscription(
        &subscription::node(dafka_proto::Kind::ConsumerHello, &id(S2_READER)),
        Instant::now(),
    );
    // As captured: C1 -> S2.reader listing "golden".
    let captured = common::find("CONSUMER-HELLO", &[("topic_prefix", S2_READER)]);
    let out = sent(&mut c);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].to_frames(), captured.frames);
    // STORE-HELLO gets the same answer; other subscriptions get none.
    c.handle_message(
        &Message::StoreHello(StoreHello {
            consumer: id(C1),
            store: id(S2_READER),
        }),
        t0,
    )
    .unwrap();
    c.handle_subscription(b"Mgolden", Instant::now());
    c.handle_subscription(b"", Instant::now());
    let out = sent(&mut c);
    assert_eq!(out[0].to_frames(), captured.frames);
    // The store, now reachable both ways, is asked whether it holds "golden".
    assert!(
        matches!(&out[1..], [Message::GetHeads(_), Message::HeadsQuery(_)]),
        "{out:?}"
    );
}

#[test]
fn messages_for_other_consumers_are_refused() {
    let t0 = Instant::now();
    let mut c = consumer(C1, OffsetReset::Latest);
    let Message::Record(r) = record(0) else {
        unreachable!()
    };
    let other = Message::DirectRecord(DirectRecord {
        to: id(C2),
        record: r,
    });
    assert_eq!(
        c.handle_message(&other, t0),
        Err(PeerError::NotForUs {
            kind: "DIRECT-RECORD",
            to: id(C2)
        })
    );
    assert!(c.poll_record().is_none());
}

#[test]
fn explicit_positions_and_unsubscribe() {
    let t0 = Instant::now();
    let mut c = consumer(C1, OffsetReset::Latest);
    c.set_position(topic("golden"), id(P1), 3);
    c.handle_message(&record(5), t0).unwrap();
    assert_eq!(fetches(&mut c), vec![(3, 2)]);
    assert_eq!(c.reorder_bytes(), 11);
    let cancel = c.unsubscribe(&topic("golden"));
    assert_eq!(cancel[0].as_ref(), b"Tgolden\0");
    assert_eq!(cancel[1].as_ref(), b"Mgolden\0");
    assert_eq!(c.reorder_bytes(), 0);
    assert_eq!(c.positions().count(), 0);
    assert_eq!(c.poll_timeout(), None);
    c.handle_message(&record(6), t0).unwrap();
    assert!(c.poll_record().is_none());
}

#[test]
fn partitions_are_bounded() {
    let t0 = Instant::now();
    let mut c = consumer_with(C1, |cfg| cfg.max_partitions = 1);
    c.handle_message(&record(0), t0).unwrap();
    let mut other = record(0);
    if let Message::Record(r) = &mut other {
        r.producer = id(C2);
    }
    assert_eq!(
        c.handle_message(&other, t0),
        Err(PeerError::PartitionLimit { max: 1 })
    );
    assert_eq!(delivered(&mut c), vec![0]);
}

/// A producer and an "earliest" consumer wired in memory through a network that drops 30% of
/// the messages each way and delivers the rest in a shuffled order, under a virtual clock. The
/// consumer still gets every record exactly once, in order.
#[test]
fn lossy_reordering_network_delivers_everything_once_in_order() {
    for seed in 1..=20u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut now = Instant::now();
        let mut p = Producer::new(ProducerConfig::new(id(P1), topic("golden"))).unwrap();
        let mut c = consumer_with(C1, |cfg| {
            cfg.offset_reset = OffsetReset::Earliest;
            cfg.max_reorder = 8;
        });
        let total = 200u64;
        let mut produced = 0;
        let mut got = Vec::new();
        for _round in 0..20_000 {
            // The producer writes a few records per round.
            for _ in 0..(rng.next() % 4) {
                if produced < total {
                    p.send(
                        Bytes::from(format!("v{produced}")),
                        RecordMeta::created(0),
                        now,
                    )
                    .unwrap();
                    produced += 1;
                }
            }
            let mut to_consumer: Vec<Message> = std::iter::from_fn(|| p.poll_transmit())
                .filter(|_| !rng.chance(30))
                .collect();
            // Shuffle what survived.
            for i in (1..to_consumer.len()).rev() {
                to_consumer.swap(i, (rng.next() % (i as u64 + 1)) as usize);
            }
            for m in &to_consumer {
                c.handle_message(m, now).unwrap();
            }
            for m in std::iter::from_fn(|| c.poll_transmit()) {
                if let Message::Fetch(f) = &m
                    && !rng.chance(30)
                {
                    p.handle_fetch(f).unwrap();
                }
            }
            got.extend(std::iter::from_fn(|| c.poll_record()));
            if got.len() as u64 == total {
                break;
            }
            now += Duration::from_millis(50);
            p.handle_timeout(now);
            c.handle_timeout(now);
        }
        let offsets: Vec<u64> = got.iter().map(|d| d.offset).collect();
        assert_eq!(offsets, (0..total).collect::<Vec<_>>(), "seed {seed}");
        for d in &got {
            assert_eq!(d.content, Bytes::from(format!("v{}", d.offset)));
        }
    }
}

/// An "assigned" consumer, subscribed to nothing.
fn assigned() -> Consumer {
    let mut cfg = ConsumerConfig::new(id(C1));
    cfg.offset_reset = OffsetReset::Assigned;
    Consumer::new(cfg).unwrap()
}

fn direct(seq: u64) -> Message {
    let Message::Record(record) = record(seq) else {
        unreachable!()
    };
    Message::DirectRecord(DirectRecord { to: id(C1), record })
}

/// A range read of an "assigned" consumer (Spark's tasks): no subscription to the topic's live
/// RECORDs and HEADs, the range FETCHed at once, nothing past its end delivered or FETCHed
/// (a DIRECT-HEAD further on, the retry timer), a RECORD of another partition dropped.
#[test]
fn an_assigned_range_is_read_from_the_answers_alone() {
    let t0 = Instant::now();
    let mut c = assigned();
    assert_eq!(c.assign(topic("golden"), id(P1), 10, Some(20), t0), None);
    assert!(c.topics().is_empty());
    let out = sent(&mut c);
    assert!(matches!(
        &out[..],
        [Message::GetHeads(_), Message::Fetch(_)]
    ));
    let Message::Fetch(f) = &out[1] else {
        unreachable!()
    };
    assert_eq!((f.sequence, f.count), (10, 10));

    // The store's head, far past the range: nothing more is asked for.
    let far = Message::DirectHead(dafka_proto::DirectHead {
        to: id(C1),
        head: Head {
            producer: id(P1),
            topic: topic("golden"),
            sequence: 500,
        },
    });
    c.handle_message(&far, t0).unwrap();
    assert_eq!(fetches(&mut c), vec![]);
    // Answers (one ahead of its turn), then records past the end: only 10..20 delivered, none
    // held out of order.
    c.handle_message(&direct(12), t0).unwrap();
    for seq in [10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 25] {
        c.handle_message(&direct(seq), t0).unwrap();
    }
    assert_eq!(delivered(&mut c), (10..20).collect::<Vec<_>>());
    assert_eq!(c.reorder_bytes(), 0);
    assert_eq!(c.dropped(), 3);
    assert_eq!(c.poll_timeout(), None, "the range is complete: no retry");
    c.handle_timeout(t0 + Duration::from_secs(60));
    assert_eq!(fetches(&mut c), vec![]);

    // A live RECORD of a partition not assigned is dropped; the partition is not created.
    let mut other = record(0);
    if let Message::Record(r) = &mut other {
        r.producer = id(C2);
    }
    c.handle_message(&other, t0).unwrap();
    assert_eq!(c.positions().count(), 1);
    assert_eq!(c.dropped(), 4);
}

/// A range cut short by retention: the DIRECT-LOW-WATER answering the assign's GET-HEADS moves
/// the unsubscribed partition up, and the retry asks for the rest of the range only.
#[test]
fn an_assigned_range_follows_the_low_water_mark() {
    let t0 = Instant::now();
    let mut c = range(0, 8, t0);
    let low = head_of(5);
    let low = Message::DirectLowWater(dafka_proto::DirectLowWater { to: id(C1), low });
    c.handle_message(&low, t0).unwrap();
    assert_eq!(fetches(&mut c), vec![(5, 3)]);
    for seq in 5..9 {
        c.handle_message(&direct(seq), t0).unwrap();
    }
    assert_eq!(delivered(&mut c), vec![5, 6, 7]);
}

/// Every other assign subscribes to the topic (once): a consumer reading from a position on
/// (no end), or a subscribing consumer.
#[test]
fn an_open_assign_subscribes() {
    let t0 = Instant::now();
    let mut c = assigned();
    let subs = c.assign(topic("golden"), id(P1), 0, None, t0).unwrap();
    assert_eq!(subs[1].as_ref(), b"Mgolden\0");
    assert_eq!(c.assign(topic("golden"), id(P1), 0, None, t0), None);
    let mut latest = Consumer::new(ConsumerConfig::new(id(C2))).unwrap();
    let subs = latest
        .assign(topic("golden"), id(P1), 0, Some(5), t0)
        .unwrap();
    assert_eq!(subs[2].as_ref(), b"Hgolden\0");
    assert_eq!(latest.topics(), &[topic("golden")]);
}

fn run(to: &str, first: u64, n: u64) -> Message {
    Message::DirectRecords(dafka_proto::DirectRecords {
        to: id(to),
        producer: id(P1),
        topic: topic("golden"),
        first,
        contents: (0..n)
            .map(|i| Bytes::from(format!("golden-r{:03}", first + i)))
            .collect(),
    })
}

/// DIRECT-RECORDS (our stores' answers to a consumer subscribed to `'B'` + its id) are taken
/// as their records one after the other: a run ahead of the next offset is held, one that
/// overlaps what was delivered has its duplicates dropped, a range read stops at its end; each
/// value is that of its offset.
#[test]
fn runs_of_records_are_taken_record_by_record() {
    let t0 = Instant::now();
    let mut c = earliest();
    assert!(c.subscriptions().contains(&subscription::node(
        dafka_proto::Kind::DirectRecords,
        &id(C1)
    )));
    c.handle_message(&run(C1, 3, 3), t0).unwrap();
    assert_eq!(delivered(&mut c), vec![]);
    assert_eq!(fetches(&mut c), vec![(0, 3)]);
    c.handle_message(&run(C1, 0, 4), t0).unwrap();
    let got: Vec<Delivery> = std::iter::from_fn(|| c.poll_record()).collect();
    assert_eq!(
        got.iter().map(|d| d.offset).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4, 5]
    );
    for d in &got {
        assert_eq!(d.content, Bytes::from(format!("golden-r{:03}", d.offset)));
    }
    assert_eq!((c.dropped(), c.reorder_bytes()), (1, 0));
    assert_eq!(
        c.handle_message(&run(C2, 6, 1), t0),
        Err(PeerError::NotForUs {
            kind: "DIRECT-RECORDS",
            to: id(C2)
        })
    );

    let mut a = range(10, 20, t0);
    a.handle_message(&run(C1, 15, 10), t0).unwrap();
    a.handle_message(&run(C1, 8, 7), t0).unwrap();
    assert_eq!(delivered(&mut a), (10..20).collect::<Vec<_>>());
    assert_eq!(a.dropped(), 5 + 2);
    assert_eq!(a.poll_timeout(), None);
}

/// The FETCHes a consumer sends before any store hears it go nowhere: when a store reader
/// becomes reachable both ways (its `'W'` subscription seen, its STORE-HELLO received), every
/// gap is FETCHed again at once with its backoff restarted, not at a retry up to
/// `fetch_retry_max` away.
#[test]
fn gaps_are_fetched_again_when_a_store_becomes_reachable() {
    let t0 = Instant::now();
    let mut c = range(0, 50, t0);
    // Nobody answered: the retries back off to 1.6 s.
    let mut t = t0;
    for _ in 0..4 {
        t = c.poll_timeout().unwrap();
        c.handle_timeout(t);
        assert_eq!(fetches(&mut c), vec![(0, 50)]);
    }
    assert_eq!(c.poll_timeout(), Some(t + Duration::from_millis(3200)));
    let later = t + Duration::from_millis(10);
    c.handle_subscription(
        &subscription::node(dafka_proto::Kind::ConsumerHello, &id(S2_READER)),
        later,
    );
    // 46/DAFKA: no CONSUMER-HELLO without topics, and an assigned range reader has none.
    assert!(sent(&mut c).is_empty());
    let hello = Message::StoreHello(StoreHello {
        consumer: id(C1),
        store: id(S2_READER),
    });
    c.handle_message(&hello, later).unwrap();
    let out = sent(&mut c);
    let [Message::Fetch(f)] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!((f.sequence, f.count), (0, 50));
    assert_eq!(c.poll_timeout(), Some(later + Duration::from_millis(200)));
    // A second store: the gaps are asked for already (of every store), not again at once.
    reach(&mut c, C2, later);
    let out = sent(&mut c);
    assert!(out.is_empty(), "{out:?}");
}

/// A consumer that missed a partition's last records and its producer's last HEAD (the
/// producer gone) asks the stores for the heads again every `heads_refresh` once a store is
/// reachable, and FETCHes the tail their answer reveals.
#[test]
fn heads_are_asked_for_again_so_a_lost_tail_is_found() {
    let t0 = Instant::now();
    let mut c = earliest();
    feed(&mut c, &[0, 1, 2, 3, 4], t0);
    assert_eq!(delivered(&mut c), vec![0, 1, 2, 3, 4]);
    // Records 5..10 and the last HEAD were lost; nothing is due.
    assert_eq!(c.poll_timeout(), None);
    let reachable = t0 + Duration::from_millis(100);
    reach(&mut c, S2_READER, reachable);
    sent(&mut c);
    let due = reachable + Duration::from_secs(5);
    assert_eq!(c.poll_timeout(), Some(due));
    c.handle_timeout(due - Duration::from_millis(1));
    assert!(sent(&mut c).is_empty());
    c.handle_timeout(due);
    let out = sent(&mut c);
    let [Message::GetHeads(g)] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!((&g.topic, g.consumer), (&topic("golden"), id(C1)));
    assert_eq!(c.poll_timeout(), Some(due + Duration::from_secs(5)));
    // The store's answer: the partition ends at 9.
    let last = head_of(9);
    let answer = Message::DirectHead(dafka_proto::DirectHead {
        to: id(C1),
        head: last,
    });
    c.handle_message(&answer, due).unwrap();
    assert_eq!(fetches(&mut c), vec![(5, 5)]);
}

/// A long gap is asked for a window at a time: the first FETCH asks for `FETCH_WINDOW`
/// records, and the next window goes out once half of the last one is in, so at most one and
/// a half windows are on their way (a store answers as fast as it reads).
#[test]
fn a_long_gap_is_fetched_a_window_at_a_time() {
    use dafka_proto::FETCH_WINDOW as W;
    let t0 = Instant::now();
    let mut c = assigned();
    c.assign(topic("golden"), id(P1), 0, Some(3 * W), t0);
    let out = sent(&mut c);
    let [Message::GetHeads(_), Message::Fetch(f)] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!((f.sequence, u64::from(f.count)), (0, W));
    // Just short of half the window: nothing more asked for.
    c.handle_message(&run(C1, 0, W / 2 - 1), t0).unwrap();
    assert_eq!(fetches(&mut c), vec![]);
    c.handle_message(&run(C1, W / 2 - 1, 1), t0).unwrap();
    assert_eq!(fetches(&mut c), vec![(W, W as u32)]);
    c.handle_message(&run(C1, W / 2, W + W / 2), t0).unwrap();
    assert_eq!(fetches(&mut c), vec![(2 * W, W as u32)]);
    // A retry asks again from the next offset, a window at most.
    let retry = c.poll_timeout().unwrap();
    c.handle_timeout(retry);
    assert_eq!(fetches(&mut c), vec![(2 * W, W as u32)]);
    c.handle_message(&run(C1, 2 * W, W), t0).unwrap();
    assert_eq!(delivered(&mut c).len() as u64, 3 * W);
    assert_eq!(c.poll_timeout(), None);
}

/// After a lossy stretch (a gap FETCHed and closed), the heads are asked for `fetch_retry`
/// later, not at the next refresh (the loss may have taken the partition's tail too), and at
/// most once a second.
#[test]
fn heads_are_asked_for_soon_after_a_gap_closes() {
    let t0 = Instant::now();
    let mut c = earliest();
    reach(&mut c, S2_READER, t0);
    sent(&mut c);
    assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_secs(5)));
    feed(&mut c, &[0, 2], t0);
    assert_eq!(fetches(&mut c), vec![(1, 1)]);
    let at = t0 + Duration::from_millis(50);
    c.handle_message(&record(1), at).unwrap();
    assert_eq!(delivered(&mut c), vec![0, 1, 2]);
    let soon = at + Duration::from_millis(200);
    assert_eq!(c.poll_timeout(), Some(soon));
    c.handle_timeout(soon);
    assert!(matches!(&sent(&mut c)[..], [Message::GetHeads(_)]));
    // Another gap closing at once: the heads again only a second after the last time.
    let again = soon + Duration::from_millis(100);
    feed(&mut c, &[3, 5], again);
    sent(&mut c);
    c.handle_message(&record(4), again).unwrap();
    assert_eq!(c.poll_timeout(), Some(soon + Duration::from_secs(1)));
}

/// Records held from an open read of a partition are dropped when it becomes a range read
/// ending below them, and never delivered past the end.
#[test]
fn a_range_drops_what_an_open_read_held_past_its_end() {
    let t0 = Instant::now();
    let mut c = assigned();
    c.assign(topic("golden"), id(P1), 90, None, t0);
    for seq in 100..110 {
        c.handle_message(&record(seq), t0).unwrap();
    }
    assert!(c.reorder_bytes() > 0);
    c.assign(topic("golden"), id(P1), 95, Some(100), t0);
    assert_eq!(c.reorder_bytes(), 0);
    for seq in 95..100 {
        c.handle_message(&direct(seq), t0).unwrap();
    }
    assert_eq!(delivered(&mut c), (95..100).collect::<Vec<_>>());
}

/// Offsets at u64::MAX from a peer: a head there does not stop a range read from FETCHing
/// its range, and a record there is dropped (no offset can follow it), not delivered.
#[test]
fn offsets_at_u64_max_neither_stall_nor_overflow() {
    let t0 = Instant::now();
    let mut c = range(0, 10, t0);
    let far = head_of(u64::MAX);
    let far = Message::DirectHead(dafka_proto::DirectHead {
        to: id(C1),
        head: far,
    });
    c.handle_message(&far, t0).unwrap();
    let retry = c.poll_timeout().expect("the range is still asked for");
    c.handle_timeout(retry);
    assert_eq!(fetches(&mut c), vec![(0, 10)]);

    let mut latest = consumer(C1, OffsetReset::Latest);
    latest.handle_message(&run(C1, u64::MAX, 1), t0).unwrap();
    latest.handle_message(&record(u64::MAX), t0).unwrap();
    assert_eq!(delivered(&mut latest), vec![]);
    assert_eq!(latest.dropped(), 2);
}

/// A store reader becomes reachable both ways: its `'W'` subscription reached the consumer's
/// XPUB, its STORE-HELLO arrived.
fn reach(c: &mut Consumer, store: &str, now: Instant) {
    c.handle_subscription(
        &subscription::node(dafka_proto::Kind::ConsumerHello, &id(store)),
        now,
    );
    let hello = Message::StoreHello(StoreHello {
        consumer: id(C1),
        store: id(store),
    });
    c.handle_message(&hello, now).unwrap();
}

/// An "assigned" consumer reading `start..end` of P1's "golden", its first messages taken.
fn range(start: u64, end: u64, now: Instant) -> Consumer {
    let mut c = assigned();
    c.assign(topic("golden"), id(P1), start, Some(end), now);
    sent(&mut c);
    c
}

/// P1's head of "golden" at `seq`.
fn head_of(seq: u64) -> Head {
    Head {
        producer: id(P1),
        topic: topic("golden"),
        sequence: seq,
    }
}

/// After the driver paused reading (its queue full), `resume` puts every FETCH retry off by
/// `fetch_retry`: the answers may be waiting unread, and a retry would have them sent again.
#[test]
fn resume_puts_the_retries_off() {
    let t0 = Instant::now();
    let mut c = range(0, 100, t0);
    let ms = Duration::from_millis;
    assert_eq!(c.poll_timeout(), Some(t0 + ms(200)));
    // Paused for a second: the retry came due meanwhile, but goes out only later.
    c.resume(t0 + ms(1000));
    assert_eq!(c.poll_timeout(), Some(t0 + ms(1200)));
    c.handle_timeout(t0 + ms(1000));
    assert_eq!(fetches(&mut c), vec![]);
    c.handle_timeout(t0 + ms(1200));
    assert_eq!(fetches(&mut c), vec![(0, 100)]);
    // Its backoff starts again at fetch_retry.
    assert_eq!(c.poll_timeout(), Some(t0 + ms(1600)));
}

/// A store reader's DIRECT-MISSING of P1's "golden" `from..to` to C1.
fn missing(store: &str, from: u64, to: u64) -> Message {
    Message::DirectMissing(dafka_proto::DirectMissing {
        to: id(C1),
        store: id(store),
        producer: id(P1),
        topic: topic("golden"),
        from,
        to_offset: to,
    })
}

const S3_READER: &str = "5555555555555555555555555555555A";

/// Issue 21: offsets damaged on every store were waited for forever. With two stores
/// reachable, one DIRECT-MISSING is not enough (the other may answer); the second store's
/// skips them: counted, reported once, the records held after them delivered.
#[test]
fn offsets_every_reachable_store_lacks_are_skipped() {
    let t0 = Instant::now();
    let mut c = range(0, 10, t0);
    reach(&mut c, S2_READER, t0);
    reach(&mut c, S3_READER, t0);
    sent(&mut c);
    for seq in [0, 1, 5, 6, 7, 8, 9] {
        c.handle_message(&direct(seq), t0).unwrap();
    }
    assert_eq!(delivered(&mut c), [0, 1]);
    c.handle_message(&missing(S2_READER, 2, 5), t0).unwrap();
    assert_eq!(delivered(&mut c), [0u64; 0]);
    assert_eq!(c.lost(), 0);
    // The same store again: still one store of two.
    c.handle_message(&missing(S2_READER, 2, 5), t0).unwrap();
    assert_eq!(c.lost(), 0);
    // The other store lacks fewer: only what both lack is skipped... which here is 2..4; 4
    // is then FETCHed again.
    c.handle_message(&missing(S3_READER, 2, 4), t0).unwrap();
    assert_eq!(c.lost(), 2);
    let loss = c.poll_loss().unwrap();
    assert_eq!(
        (loss.topic, loss.partition, loss.from, loss.to),
        (topic("golden"), id(P1), 2, 4)
    );
    assert_eq!(c.poll_loss(), None);
    assert_eq!(delivered(&mut c), [0u64; 0]);
    assert_eq!(fetches(&mut c), [(4, 1)]);
    c.handle_message(&direct(4), t0).unwrap();
    assert_eq!(delivered(&mut c), [4, 5, 6, 7, 8, 9]);
    c.handle_timeout(t0 + Duration::from_secs(60));
    assert_eq!(fetches(&mut c), [], "the range is complete");
}

/// A DIRECT-MISSING from one store while another delivers the records: nothing is lost; one
/// for offsets past the next one is ignored (they are FETCHed, and so reported, in turn).
#[test]
fn a_store_lacking_records_another_delivers_loses_nothing() {
    let t0 = Instant::now();
    let mut c = range(0, 10, t0);
    reach(&mut c, S2_READER, t0);
    reach(&mut c, S3_READER, t0);
    c.handle_message(&missing(S2_READER, 5, 7), t0).unwrap();
    c.handle_message(&missing(S3_READER, 5, 7), t0).unwrap();
    assert_eq!(c.lost(), 0, "5..7 is not where the partition is");
    c.handle_message(&missing(S2_READER, 0, 3), t0).unwrap();
    for seq in 0..10 {
        c.handle_message(&direct(seq), t0).unwrap();
    }
    assert_eq!(delivered(&mut c), (0..10).collect::<Vec<_>>());
    // A late report of offsets delivered since: ignored.
    c.handle_message(&missing(S3_READER, 0, 3), t0).unwrap();
    assert_eq!(c.lost(), 0);
    assert_eq!(c.poll_loss(), None);
}

/// One store says it lacks the offsets, the other reachable store says nothing (it may not
/// hold the partition): skipped after MISSING_REPORTS reports (the first answer and the
/// answers to the retries), never waited for.
#[test]
fn a_single_store_is_believed_after_its_retries() {
    let t0 = Instant::now();
    let mut c = range(0, 4, t0);
    reach(&mut c, S2_READER, t0);
    reach(&mut c, S3_READER, t0);
    for n in 1..dafka_proto::MISSING_REPORTS {
        c.handle_message(&missing(S2_READER, 0, 2), t0).unwrap();
        assert_eq!(c.lost(), 0, "after {n} reports");
    }
    c.handle_message(&missing(S2_READER, 0, 2), t0).unwrap();
    assert_eq!(c.lost(), 2);
    c.handle_message(&direct(2), t0).unwrap();
    c.handle_message(&direct(3), t0).unwrap();
    assert_eq!(delivered(&mut c), [2, 3]);
}

/// Issue 21 item 7: a consumer started past the head waited silently. A partition positioned
/// past the end every store holds is said once (per position), `fetch_retry` after a store
/// said where it ends (a store that lags is not taken for the end); not when another store
/// holds it, nor when it is at the end.
#[test]
fn a_position_past_the_stores_end_is_said_once() {
    let t0 = Instant::now();
    let retry = Duration::from_millis(200);
    let store_head = |seq| {
        Message::DirectHead(dafka_proto::DirectHead {
            to: id(C1),
            head: head_of(seq),
        })
    };
    let mut c = assigned();
    c.assign(topic("golden"), id(P1), 50, None, t0);
    c.handle_message(&store_head(9), t0).unwrap();
    assert_eq!(c.poll_timeout(), Some(t0 + retry));
    c.handle_timeout(t0 + retry / 2);
    assert_eq!(c.poll_past_end(), None);
    c.handle_timeout(t0 + retry);
    let past = c.poll_past_end().unwrap();
    assert_eq!((past.partition, past.next, past.end), (id(P1), 50, 10));
    c.handle_message(&store_head(9), t0 + retry).unwrap();
    c.handle_timeout(t0 + retry * 4);
    assert_eq!(c.poll_past_end(), None, "once per position");

    // Another store holds up to 60 before the wait is over: nothing said.
    let mut c = assigned();
    c.assign(topic("golden"), id(P1), 50, None, t0);
    c.handle_message(&store_head(9), t0).unwrap();
    c.handle_message(&store_head(59), t0 + retry / 2).unwrap();
    c.handle_timeout(t0 + retry * 2);
    assert_eq!(c.poll_past_end(), None);

    // At the end exactly (the next record to be written): nothing said.
    let mut c = assigned();
    c.assign(topic("golden"), id(P1), 10, None, t0);
    c.handle_message(&store_head(9), t0).unwrap();
    c.handle_timeout(t0 + retry * 2);
    assert_eq!(c.poll_past_end(), None);
}
