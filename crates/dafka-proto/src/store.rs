//! The store state machines, split as the reference splits a store into two nodes.
//!
//! * [`StoreWriter`] (the reference's writer node, a PUB): subscribes to every RECORD and
//!   HEAD (`'M'`, `'H'`) and to DIRECT-RECORDs sent to it (`'D'` + its id). It replicates
//!   every partition it hears of: a record at the partition's next offset becomes an
//!   [`Append`] for the driver; a record ahead of it, or a HEAD beyond it, opens a gap that
//!   is FETCHed at once (from whoever answers: the producer or another store's reader) and
//!   again on a timer with exponential backoff until it closes. Records ahead of the next
//!   offset are dropped and come back through FETCH, as the reference does.
//! * An ACK goes out only for records the engine reports durable: the driver appends, waits
//!   for the group commit and then calls [`StoreWriter::durable`]. ACKs are cumulative, one
//!   per partition and durability report, each followed by a STORE-ACK (an extension naming
//!   the writer, for producers with `min_acks > 1`). A HEAD at or below the durable head is answered
//!   with an ACK of that HEAD (so a producer whose ACK was lost is released at its next
//!   HEAD).
//! * [`StoreReader`] (the reader node, an XPUB): subscribes to every FETCH and GET-HEADS
//!   (`'F'`, `'G'`) and to CONSUMER-HELLOs sent to it (`'W'` + its id). It answers FETCH with
//!   DIRECT-RECORDs in ascending order, read from the engine lazily in chunks of
//!   [`StoreReaderConfig::read_chunk`] records (so an answer of a million records holds one
//!   chunk in memory); a node whose `'B'` + id subscription reached the XPUB (ours, not the
//!   reference's) gets them as DIRECT-RECORDS instead, runs of records of at most
//!   [`StoreReaderConfig::batch_bytes`] of content each. GET-HEADS and CONSUMER-HELLO with
//!   one DIRECT-HEAD per partition of the topic it holds (preceded by a DIRECT-LOW-WATER, an
//!   extension, when retention dropped the partition's first records), HEADS-QUERY (an
//!   extension, `'Q'`) the same way followed by a HEADS-END, and a `'L'` + consumer
//!   subscription reaching its XPUB with STORE-HELLO. It ignores FETCHes from its own writer
//!   (the reference does too).
//!
//! # Engine access
//!
//! Writes leave the writer as outputs ([`StoreWriter::poll_append`]) and their durability
//! comes back as an input ([`StoreWriter::durable`]), because a group commit completes later
//! and the ACK must wait for it: the machine never sees a disk and a test decides when (and
//! whether) a write becomes durable. Reads go through the small [`StoreLog`] trait, passed
//! into each call: an answer is shaped by what the log holds at that moment (its head, its
//! low-water mark, the records), and a synchronous lookup keeps the answer in the same turn
//! without a round of read requests and replies. The node implements it over `dafka-store`;
//! the tests over a `BTreeMap`.
//!
//! Time is passed in; the driver calls `handle_timeout` at `poll_timeout`, and publishes
//! every `poll_transmit` message on the node's publisher.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::error::{CallerError, PeerError};
use crate::group::GroupName;
use crate::id::{NodeId, Topic};
use crate::message::{
    Ack, DirectCommitted, DirectGroups, DirectHead, DirectLowWater, DirectMetaRecords,
    DirectMissing, DirectRecord, DirectRecords, DirectTimeOffset, DirectTopics, Fetch, GroupOffset,
    Head, HeadsEnd, Kind, Limits, Message, Record, RefusalReason, StoreAck, StoreHello,
    StoreRefusal,
};
use crate::record::RecordMeta;
use crate::retry::{self, Ask, Gapped, Partitions, Retry};
use crate::subscription;

/// A partition: its topic and its producer.
pub type PartitionKey = (Topic, NodeId);

/// What the reader needs of the storage engine. Offsets are those of the partition; `head` is
/// the next offset after the last durable record.
pub trait StoreLog {
    /// Why a read failed (disk errors; logged by the driver, the requester asks again).
    type Error: std::fmt::Display;

    /// The partition's `(low_water, head)`: its first offset still held and the offset after
    /// its last durable record; `None` for a partition the store does not hold.
    fn bounds(&self, topic: &Topic, producer: &NodeId) -> Option<(u64, u64)>;

    /// Every partition of `topic` (exactly that topic) with its `(low_water, head)`.
    fn partitions_of(&self, topic: &Topic) -> Vec<(NodeId, u64, u64)>;

    /// Every topic of which the store holds a partition.
    fn topics(&self) -> Vec<Topic>;

    /// The first offset of the partition held whose record's timestamp is at or after
    /// `time` (microseconds since the epoch, UTC); `None` when no record held is that recent.
    fn offset_for_time(&self, topic: &Topic, producer: &NodeId, time: i64) -> Option<u64>;

    /// Commits `offsets` of `group` for the partitions of the list the store holds, written
    /// durably before it returns (the others are left out); with `seek` an offset is set,
    /// else the larger of the stored and the committed one is kept. Returns each kept
    /// partition's offset after the commit, in the order given.
    fn commit_offsets(
        &self,
        group: &GroupName,
        offsets: &[GroupOffset],
        seek: bool,
    ) -> Result<Vec<GroupOffset>, Self::Error>;

    /// The committed offsets of `group` the store holds among `partitions` (all of the
    /// group's when empty).
    fn committed(&self, group: &GroupName, partitions: &[(Topic, NodeId)]) -> Vec<GroupOffset>;

    /// Every group with a committed offset in the store, in name order.
    fn groups(&self) -> Vec<GroupName>;

    /// Durable records of the partition from offset `from`, ascending, at most `max`; or, when
    /// the records at `from` are not held though below the head (damaged), where they end.
    fn read(
        &self,
        topic: &Topic,
        producer: &NodeId,
        from: u64,
        max: usize,
    ) -> Result<LogRead, Self::Error>;
}

/// What [`StoreLog::read`] found at the offset asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRead {
    /// Records from the offset asked for, ascending (none: nothing there any more): offset,
    /// value, metadata.
    Records(Vec<(u64, Bytes, RecordMeta)>),
    /// The offsets from the one asked for up to `to` (exclusive) are not held: their records
    /// were damaged on disk. The answer goes on at `to`.
    Missing {
        /// The first offset held again.
        to: u64,
    },
}

/// Settings of a [`StoreWriter`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreWriterConfig {
    /// The writer's id (the sender of its FETCHes, the prefix of DIRECT-RECORDs to it).
    pub id: NodeId,
    /// First FETCH retry delay.
    pub fetch_retry: Duration,
    /// Longest FETCH retry delay (the backoff doubles up to it).
    pub fetch_retry_max: Duration,
    /// Most partitions held; records of further partitions are refused.
    pub max_partitions: usize,
    /// Most appends waiting for the driver; records past it are dropped and FETCHed again.
    pub max_pending_appends: usize,
}

impl StoreWriterConfig {
    /// Defaults: FETCH retried after 200 ms doubling up to 5 s, 65 536 partitions, 65 536
    /// appends waiting.
    pub fn new(id: NodeId) -> Self {
        StoreWriterConfig {
            id,
            fetch_retry: Duration::from_millis(200),
            fetch_retry_max: Duration::from_secs(5),
            max_partitions: 65_536,
            max_pending_appends: 65_536,
        }
    }

    fn validate(&self) -> Result<(), CallerError> {
        retry::validate(self.fetch_retry, self.fetch_retry_max)?;
        if self.max_pending_appends == 0 {
            return Err(CallerError::Config("max_pending_appends must be positive"));
        }
        Ok(())
    }
}

/// A record for the driver to append to the engine, in offset order per partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    /// The record.
    pub record: Record,
    /// Its metadata; `None` for a record that came without (RECORD or DIRECT-RECORD, from a
    /// reference producer or store): the driver stamps it with the append time.
    pub meta: Option<RecordMeta>,
}

#[derive(Debug)]
struct WriterPartition {
    /// The next offset to append.
    accepted: u64,
    /// The offset after the last durable record.
    durable: u64,
    /// The highest offset known to exist.
    head: Option<u64>,
    retry: Option<Retry>,
    /// An ACK for this partition is queued in `acks`.
    ack_queued: bool,
    /// When the partition's producer was last told the store failed (STORE-REFUSAL).
    told_failed: Option<Instant>,
    /// Offsets below `accepted` the engine lost to damage, `from..to` ascending: FETCHed from
    /// the other stores (and the producer) until they come ([`StoreWriter::poll_fill`]).
    holes: Vec<(u64, u64)>,
    /// The last [`REPEATED_REFUSALS`] records skipped as too large (offset, detail), oldest
    /// first. A refusal goes out with the ACK that covers its offset, in one batch, and again
    /// with every ACK a HEAD brings back: a PUB drops what it publishes before a subscription
    /// reaches it, and a refusal published alone could be lost where the ACK after it is not.
    too_large: VecDeque<(u64, Bytes)>,
    /// How many of `too_large` (the newest) have not gone out yet.
    too_large_unsent: usize,
}

impl WriterPartition {
    fn new(next: u64) -> Self {
        WriterPartition {
            accepted: next,
            durable: next,
            head: None,
            retry: None,
            ack_queued: false,
            told_failed: None,
            holes: Vec::new(),
            too_large: VecDeque::new(),
            too_large_unsent: 0,
        }
    }

    /// Takes `offset` out of the holes; whether it was in one.
    fn unhole(&mut self, offset: u64) -> bool {
        let Some(i) = self
            .holes
            .iter()
            .position(|&(f, t)| f <= offset && offset < t)
        else {
            return false;
        };
        let (from, to) = self.holes.remove(i);
        if offset + 1 < to {
            self.holes.insert(i, (offset + 1, to));
        }
        if from < offset {
            self.holes.insert(i, (from, offset));
        }
        true
    }
}

/// Most holes a [`StoreWriter`] keeps per partition to fill (the engine keeps every one; the
/// rest are asked for after a restart).
pub const MAX_HOLES: usize = 64;

/// Least time between two STORE-REFUSALs of a failed store to one partition's producer.
pub const FAILED_REFUSAL_EVERY: Duration = Duration::from_secs(1);

/// How many of a partition's last "too large" refusals a [`StoreWriter`] repeats when a HEAD
/// is answered with an ACK (a producer ignores the ones it has heard).
pub const REPEATED_REFUSALS: usize = 8;

impl Gapped for WriterPartition {
    fn gap(&self) -> Option<(u64, u64)> {
        let end = self.head?.checked_add(1)?;
        (end > self.accepted).then_some((self.accepted, end))
    }

    fn retry(&mut self) -> &mut Option<Retry> {
        &mut self.retry
    }

    fn retry_at(&self) -> Option<Instant> {
        self.retry.map(|r| r.at)
    }
}

/// The store writer state machine. See the [module docs](self).
#[derive(Debug)]
pub struct StoreWriter {
    config: StoreWriterConfig,
    partitions: Partitions<WriterPartition>,
    appends: VecDeque<Append>,
    acks: VecDeque<PartitionKey>,
    transmit: VecDeque<Message>,
    /// STORE-REFUSALs of a failed store, and "too large" ones that no ACK will carry.
    refusals: VecDeque<Message>,
    /// Messages that go out together, in order: an ACK with the "too large" refusals it
    /// covers before it (a producer hears of a skipped record before the ACK that covers it,
    /// or its flush would end without it) and its STORE-ACK after it.
    ready: VecDeque<Message>,
    dropped: u64,
    /// Why the store can no longer write ([`StoreWriter::fail`]), as told to producers.
    failed: Option<Bytes>,
    /// Records that fill holes, for the driver ([`StoreWriter::poll_fill`]).
    fills: VecDeque<Append>,
    /// When the holes are FETCHed again, and the delay after that.
    holes_at: Option<(Instant, Duration)>,
}

impl StoreWriter {
    /// A writer with `config`, or the reason the configuration is invalid.
    pub fn new(config: StoreWriterConfig) -> Result<Self, CallerError> {
        config.validate()?;
        Ok(StoreWriter {
            config,
            partitions: Partitions::default(),
            appends: VecDeque::new(),
            acks: VecDeque::new(),
            transmit: VecDeque::new(),
            refusals: VecDeque::new(),
            ready: VecDeque::new(),
            dropped: 0,
            failed: None,
            fills: VecDeque::new(),
            holes_at: None,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &StoreWriterConfig {
        &self.config
    }

    /// The subscriptions of the writer's SUB: `'T'` (every topic) and `'V'` + its id (our
    /// producers and store readers answer its FETCHes with DIRECT-META-RECORDS, reference ones
    /// with DIRECT-RECORDs), then `'D'` + its id, `'H'` and `'M'` (every topic) as the
    /// reference's.
    ///
    /// The order matters: a publisher takes a connection's subscriptions in order, so by the
    /// time a producer's RECORD or HEAD reaches this writer (and it FETCHes what it missed),
    /// the producer has taken `'T'` and `'V'` too and sends it records with their metadata. In
    /// the other order a producer could, for a moment, see this writer as a reader of plain
    /// RECORDs only and answer its FETCH with DIRECT-RECORDs: records stored without key,
    /// headers or timestamp.
    pub fn subscriptions(&self) -> [Bytes; 5] {
        [
            subscription::all(Kind::MetaRecord),
            subscription::node(Kind::DirectMetaRecords, &self.config.id),
            subscription::node(Kind::DirectRecord, &self.config.id),
            subscription::all(Kind::Head),
            subscription::all(Kind::Record),
        ]
    }

    /// A partition the engine already holds (at start), with the offset after its last
    /// durable record. Also used when the engine refused an append, to take its word for the
    /// next offset.
    pub fn restore(&mut self, key: PartitionKey, next: u64) {
        let p = self
            .partitions
            .entry(key)
            .or_insert_with(|| WriterPartition::new(next));
        p.accepted = next;
    }

    /// Offsets `holes` (`from..to`, ascending) below the partition's head that the engine
    /// lost to damage: they are FETCHed from the other stores (and the producer, if it still
    /// holds them) now and then on a timer with backoff, until they come. At most
    /// [`MAX_HOLES`] per partition.
    pub fn restore_holes(&mut self, key: PartitionKey, holes: &[(u64, u64)], now: Instant) {
        let p = self
            .partitions
            .entry(key)
            .or_insert_with(|| WriterPartition::new(0));
        p.holes = holes
            .iter()
            .copied()
            .filter(|&(f, t)| f < t && t <= p.accepted)
            .take(MAX_HOLES)
            .collect();
        if !p.holes.is_empty() && self.holes_at.is_none() {
            self.holes_at = Some((now, self.config.fetch_retry));
        }
    }

    /// The next record to write into a hole (an engine `fill`).
    pub fn poll_fill(&mut self) -> Option<Append> {
        self.fills.pop_front()
    }

    /// FETCHes every hole (a window of each) if due.
    fn fetch_holes(&mut self, now: Instant) {
        let Some((at, delay)) = self.holes_at else {
            return;
        };
        if now < at {
            return;
        }
        let mut any = false;
        for ((topic, producer), p) in self.partitions.iter() {
            for &(from, to) in &p.holes {
                any = true;
                self.transmit.push_back(Message::Fetch(Fetch {
                    producer: *producer,
                    sender: self.config.id,
                    topic: topic.clone(),
                    sequence: from,
                    count: u32::try_from((to - from).min(crate::FETCH_WINDOW)).unwrap_or(u32::MAX),
                }));
            }
        }
        self.holes_at = any.then(|| {
            let next = (delay * 2).min(self.config.fetch_retry_max);
            (now + delay, next)
        });
    }

    /// Handles a message from the writer's SUB: RECORD, META-RECORD, DIRECT-RECORD and
    /// DIRECT-META-RECORDS to it, HEAD. Anything else is not for a writer and is ignored.
    /// [`handle`](Self::handle) taking the message: what it keeps is cloned.
    pub fn handle_message(&mut self, message: &Message, now: Instant) -> Result<(), PeerError> {
        self.handle(message.clone(), now)
    }

    /// [`handle_message`](Self::handle_message) taking the message: the records move into
    /// the appends (no reference count taken and dropped per record).
    pub fn handle(&mut self, message: Message, now: Instant) -> Result<(), PeerError> {
        match message {
            Message::Record(r) => self.on_record(r, None, now),
            Message::MetaRecord(m) => self.on_record(m.record, Some(m.meta), now),
            Message::DirectRecord(d) => {
                self.check_to(Kind::DirectRecord, &d.to)?;
                self.on_record(d.record, None, now)
            }
            Message::DirectMetaRecords(DirectMetaRecords { run, metas }) => {
                self.check_to(Kind::DirectMetaRecords, &run.to)?;
                let records = (run.first..).zip(run.contents).zip(metas);
                for ((offset, content), meta) in records {
                    let record = Record {
                        producer: run.producer,
                        topic: run.topic.clone(),
                        sequence: offset,
                        content,
                    };
                    self.on_record(record, Some(meta), now)?;
                }
                Ok(())
            }
            Message::Head(h) => self.on_head(&h, now),
            _ => Ok(()),
        }
    }

    fn check_to(&self, kind: Kind, to: &NodeId) -> Result<(), PeerError> {
        if *to != self.config.id {
            return Err(PeerError::NotForUs {
                kind: kind.name(),
                to: *to,
            });
        }
        Ok(())
    }

    fn partition(&mut self, key: &PartitionKey) -> Result<&mut WriterPartition, PeerError> {
        if !self.partitions.contains_key(key) {
            if self.partitions.len() >= self.config.max_partitions {
                return Err(PeerError::PartitionLimit {
                    max: self.config.max_partitions,
                });
            }
            self.partitions.insert(key.clone(), WriterPartition::new(0));
        }
        self.partitions
            .get_mut(key)
            .ok_or(PeerError::PartitionLimit {
                max: self.config.max_partitions,
            })
    }

    fn on_record(
        &mut self,
        record: Record,
        meta: Option<RecordMeta>,
        now: Instant,
    ) -> Result<(), PeerError> {
        let key = (record.topic.clone(), record.producer);
        if self.failed.is_some() {
            self.dropped += 1;
            return self.tell_failed(key, now);
        }
        let full = self.appends.len() >= self.config.max_pending_appends;
        let max = self.config.max_partitions;
        let p = retry::partition_entry(&mut self.partitions, key, max, || WriterPartition::new(0))
            .ok_or(PeerError::PartitionLimit { max })?;
        p.head = Some(p.head.map_or(record.sequence, |h| h.max(record.sequence)));
        let sequence = record.sequence;
        let into = if sequence == p.accepted && !full {
            p.accepted += 1;
            Some(&mut self.appends)
        } else if sequence < p.accepted && !full && p.unhole(sequence) {
            // A record the engine lost to damage, from another store (or its producer).
            Some(&mut self.fills)
        } else {
            // Behind: a duplicate. Ahead (or no room): dropped, FETCHed again below.
            self.dropped += 1;
            None
        };
        let part = (&record.topic, record.producer);
        let fetch = (self.config.fetch_retry, self.config.id);
        retry::refetch_in(p, part, now, fetch, &mut self.transmit);
        if let Some(queue) = into {
            queue.push_back(Append { record, meta });
        }
        Ok(())
    }

    fn on_head(&mut self, head: &Head, now: Instant) -> Result<(), PeerError> {
        let key = (head.topic.clone(), head.producer);
        if self.failed.is_some() && self.partition(&key)?.durable <= head.sequence {
            return self.tell_failed(key, now);
        }
        let p = self.partition(&key)?;
        p.head = Some(p.head.map_or(head.sequence, |h| h.max(head.sequence)));
        if head.sequence < p.durable {
            // Everything the producer has is durable here: say so again, in case the ACK
            // was lost, with the records skipped on the way, in case their refusals were.
            p.too_large_unsent = 0;
            let skipped = p.too_large.clone();
            self.push_ack(&key, head.sequence, skipped);
        }
        self.refetch(&key, now);
        Ok(())
    }

    /// After a partition changed: FETCH a gap not asked for yet at once; forget the retry once
    /// the gap closed.
    fn refetch(&mut self, key: &PartitionKey, now: Instant) {
        let (first, id) = (self.config.fetch_retry, self.config.id);
        retry::refetch(
            &mut self.partitions,
            key,
            now,
            first,
            id,
            &mut self.transmit,
        );
    }

    /// The engine refused the record at `sequence` of the partition for `reason` and skipped
    /// it (it holds no record there, and goes on with the next one): the producer is told
    /// (STORE-REFUSAL, the extension).
    pub fn refuse(
        &mut self,
        key: &PartitionKey,
        sequence: u64,
        reason: RefusalReason,
        detail: &str,
    ) {
        let detail = StoreRefusal::detail_of(detail);
        let Some(p) = self.partitions.get_mut(key) else {
            return self.queue_refusal(key, sequence, reason, detail);
        };
        if reason != RefusalReason::TooLarge {
            return self.queue_refusal(key, sequence, reason, detail);
        }
        // Held for the ACK that covers it. The list keeps the last REPEATED_REFUSALS: the
        // oldest goes, and goes out alone if it was never sent.
        let mut unsent_oldest = None;
        if p.too_large.len() == REPEATED_REFUSALS {
            let oldest = p.too_large.pop_front();
            if p.too_large_unsent == REPEATED_REFUSALS {
                p.too_large_unsent -= 1;
                unsent_oldest = oldest;
            }
        }
        p.too_large.push_back((sequence, detail));
        p.too_large_unsent += 1;
        if let Some((sequence, detail)) = unsent_oldest {
            self.queue_refusal(key, sequence, reason, detail);
        }
    }

    /// Queues an ACK of the partition up to `sequence` in `ready`: the "too large" refusals
    /// of `skipped` it covers, the ACK, its STORE-ACK.
    fn push_ack(&mut self, key: &PartitionKey, sequence: u64, skipped: VecDeque<(u64, Bytes)>) {
        for (offset, detail) in skipped {
            if offset <= sequence {
                self.ready.push_back(Message::StoreRefusal(StoreRefusal {
                    producer: key.1,
                    store: self.config.id,
                    topic: key.0.clone(),
                    sequence: offset,
                    reason: RefusalReason::TooLarge,
                    detail,
                }));
            }
        }
        let ack = Ack {
            producer: key.1,
            topic: key.0.clone(),
            sequence,
        };
        self.ready.push_back(Message::Ack(ack.clone()));
        self.ready.push_back(Message::StoreAck(StoreAck {
            store: self.config.id,
            ack,
        }));
    }

    fn queue_refusal(
        &mut self,
        key: &PartitionKey,
        sequence: u64,
        reason: RefusalReason,
        detail: Bytes,
    ) {
        self.refusals.push_back(Message::StoreRefusal(StoreRefusal {
            producer: key.1,
            store: self.config.id,
            topic: key.0.clone(),
            sequence,
            reason,
            detail,
        }));
    }

    /// The engine can no longer write (a failed write or sync: see `docs/storage.md`,
    /// poisoning): from now on nothing is appended or FETCHed, and the producer of every
    /// partition whose RECORDs or HEADs still arrive is told why (STORE-REFUSAL, at most once
    /// per [`FAILED_REFUSAL_EVERY`]) instead of waiting for ACKs that cannot come.
    pub fn fail(&mut self, detail: &str) {
        if self.failed.is_some() {
            return;
        }
        self.failed = Some(StoreRefusal::detail_of(detail));
        self.dropped += (self.appends.len() + self.fills.len()) as u64;
        self.appends.clear();
        self.fills.clear();
        self.holes_at = None;
        self.transmit.retain(|m| !matches!(m, Message::Fetch(_)));
        for (_, p) in self.partitions.iter_mut() {
            p.retry = None;
        }
    }

    /// Whether [`fail`](Self::fail) was called.
    pub fn failed(&self) -> bool {
        self.failed.is_some()
    }

    fn tell_failed(&mut self, key: PartitionKey, now: Instant) -> Result<(), PeerError> {
        let every = FAILED_REFUSAL_EVERY;
        let p = self.partition(&key)?;
        if p.told_failed.is_some_and(|at| now < at + every) {
            return Ok(());
        }
        p.told_failed = Some(now);
        let sequence = p.durable;
        let detail = self.failed.clone().unwrap_or_default();
        self.queue_refusal(&key, sequence, RefusalReason::Failed, detail);
        Ok(())
    }

    /// Retries every FETCH whose time has come, doubling its backoff.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.failed.is_some() {
            return;
        }
        self.fetch_holes(now);
        let ask = Ask::Due {
            max: self.config.fetch_retry_max,
        };
        let id = self.config.id;
        retry::fetch_gaps(&mut self.partitions, now, ask, id, &mut self.transmit);
    }

    /// The earliest FETCH retry.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.failed.is_some() {
            return None;
        }
        let holes = self.holes_at.map(|(at, _)| at);
        [retry::earliest(&self.partitions), holes]
            .into_iter()
            .flatten()
            .min()
    }

    /// The next record to append to the engine.
    pub fn poll_append(&mut self) -> Option<Append> {
        self.appends.pop_front()
    }

    /// The engine made the partition's records durable up to (not including) `next`: an ACK
    /// of `next - 1` is queued.
    pub fn durable(&mut self, key: &PartitionKey, next: u64) {
        let Some(p) = self.partitions.get_mut(key) else {
            return;
        };
        if next <= p.durable {
            return;
        }
        p.durable = next;
        if !p.ack_queued {
            p.ack_queued = true;
            self.acks.push_back(key.clone());
        }
    }

    /// The next message to publish: STORE-REFUSALs, then ACKs (each after the "too large"
    /// refusals it covers and before its STORE-ACK, the extension that names this writer),
    /// then FETCHes.
    pub fn poll_transmit(&mut self) -> Option<Message> {
        if let Some(m) = self.ready.pop_front() {
            return Some(m);
        }
        if let Some(m) = self.refusals.pop_front() {
            return Some(m);
        }
        while let Some(key) = self.acks.pop_front() {
            let Some(p) = self.partitions.get_mut(&key) else {
                continue;
            };
            p.ack_queued = false;
            let Some(sequence) = p.durable.checked_sub(1) else {
                continue;
            };
            // The refusals not sent yet that this ACK covers (a skip is durable with the
            // records after it, so all of them in practice).
            let unsent = p.too_large_unsent;
            let first = p.too_large.len() - unsent;
            let covered = p.too_large.iter().skip(first);
            let n = covered
                .take_while(|(offset, _)| *offset <= sequence)
                .count();
            p.too_large_unsent -= n;
            let skipped = p.too_large.range(first..first + n).cloned().collect();
            self.push_ack(&key, sequence, skipped);
            return self.ready.pop_front();
        }
        self.transmit.pop_front()
    }

    /// The offset after the partition's last durable record, if it is known.
    pub fn durable_head(&self, key: &PartitionKey) -> Option<u64> {
        self.partitions.get(key).map(|p| p.durable)
    }

    /// Records dropped: duplicates, records ahead of a gap, no room to append.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// Settings of a [`StoreReader`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreReaderConfig {
    /// The reader's id (in STORE-HELLO, the prefix of CONSUMER-HELLOs to it).
    pub id: NodeId,
    /// Its writer's id: FETCHes from it are ignored.
    pub writer: NodeId,
    /// Records read from the engine at a time for one FETCH answer.
    pub read_chunk: usize,
    /// Most FETCH answers pending; further FETCHes are dropped (their senders retry).
    pub max_pending_answers: usize,
    /// Most messages (DIRECT-HEADs, STORE-HELLOs) queued; further requests are dropped.
    pub max_queued: usize,
    /// Most content bytes in one DIRECT-RECORDS (a larger record goes alone). What is queued
    /// towards one consumer is bounded by what it FETCHes ([`crate::FETCH_WINDOW`] records per
    /// partition at a time, see `docs/dafka.md`), not by the publisher's HWM, which counts
    /// messages whatever they carry.
    pub batch_bytes: usize,
}

impl StoreReaderConfig {
    /// Defaults: chunks of 1024 records, 256 pending answers, 65 536 queued messages,
    /// DIRECT-RECORDS of at most 16 KiB of content.
    pub fn new(id: NodeId, writer: NodeId) -> Self {
        StoreReaderConfig {
            id,
            writer,
            read_chunk: 1024,
            max_pending_answers: 256,
            max_queued: 65_536,
            batch_bytes: 16 << 10,
        }
    }
}

/// A DIRECT-RECORDS (or, with metadata, DIRECT-META-RECORDS) being filled from a chunk read
/// for an [`Answer`].
#[derive(Debug, Default)]
struct Run {
    bytes: usize,
    contents: Vec<Bytes>,
    /// Empty when the requester takes DIRECT-RECORDS (values only).
    metas: Vec<RecordMeta>,
}

impl Run {
    /// The DIRECT-RECORDS or DIRECT-META-RECORDS of the records gathered, the last of them
    /// just before offset `next`; the run is left empty.
    fn take(&mut self, answer: &Answer, next: u64) -> Message {
        self.bytes = 0;
        let run = DirectRecords {
            to: answer.to,
            producer: answer.producer,
            topic: answer.topic.clone(),
            first: next - self.contents.len() as u64,
            contents: std::mem::take(&mut self.contents),
        };
        if self.metas.is_empty() {
            Message::DirectRecords(run)
        } else {
            let metas = std::mem::take(&mut self.metas);
            Message::DirectMetaRecords(DirectMetaRecords { run, metas })
        }
    }
}

#[derive(Debug, Clone)]
struct Answer {
    to: NodeId,
    topic: Topic,
    producer: NodeId,
    next: u64,
    end: u64,
}

/// The store reader state machine. See the [module docs](self).
#[derive(Debug)]
pub struct StoreReader {
    config: StoreReaderConfig,
    answers: VecDeque<Answer>,
    /// DIRECT-RECORDs read for the front answer, not yet sent.
    chunk: VecDeque<Message>,
    transmit: VecDeque<Message>,
    dropped: u64,
    read_errors: u64,
    commit_errors: u64,
    /// Per consumer, which of `'E'`, `'O'`, `'R'`, `'B'`, `'V'`, `'Z'` + its id reached the
    /// XPUB (bits 0 to 5): a HEADS-END goes only to a consumer that receives the answers it
    /// follows, DIRECT-RECORDS and DIRECT-META-RECORDS only to one that receives them.
    listening: HashMap<NodeId, u8>,
}

/// Most consumers a [`StoreReader`] tracks the subscriptions of (HEADS-END); past it, new
/// consumers get no HEADS-END and wait for late answers instead.
pub const MAX_LISTENING: usize = 4096;
/// `'E'`, `'O'` and `'R'`: every answer to a HEADS-QUERY.
const LISTENS_HEADS: u8 = 0b0111;
/// `'B'`: DIRECT-RECORDS.
const LISTENS_RUNS: u8 = 0b1000;
/// `'V'`: DIRECT-META-RECORDS.
const LISTENS_METAS: u8 = 0b1_0000;
/// `'Z'` and `'R'`: every answer to a TIME-QUERY.
const LISTENS_TIMES: u8 = 0b10_0100;

fn listen_bit(kind: Kind) -> Option<u8> {
    match kind {
        Kind::DirectHead => Some(0b0001),
        Kind::DirectLowWater => Some(0b0010),
        Kind::HeadsEnd => Some(0b0100),
        Kind::DirectRecords => Some(LISTENS_RUNS),
        Kind::DirectMetaRecords => Some(LISTENS_METAS),
        Kind::DirectTimeOffset => Some(0b10_0000),
        _ => None,
    }
}

impl StoreReader {
    /// A reader with `config`, or the reason the configuration is invalid.
    pub fn new(config: StoreReaderConfig) -> Result<Self, CallerError> {
        if config.read_chunk == 0 || config.max_pending_answers == 0 {
            return Err(CallerError::Config(
                "read_chunk and max_pending_answers must be positive",
            ));
        }
        Ok(StoreReader {
            config,
            answers: VecDeque::new(),
            chunk: VecDeque::new(),
            transmit: VecDeque::new(),
            dropped: 0,
            read_errors: 0,
            commit_errors: 0,
            listening: HashMap::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &StoreReaderConfig {
        &self.config
    }

    /// The subscriptions of the reader's SUB: `'F'`, `'G'` (every one), `'W'` + its id (as
    /// the reference's), then the extensions' `'Q'`, `'Y'`, `'S'`, `'P'`, `'I'` and `'s'`
    /// (every HEADS-QUERY, TIME-QUERY, TOPICS-QUERY, OFFSET-COMMIT, COMMITTED-QUERY and
    /// GROUPS-QUERY).
    pub fn subscriptions(&self) -> [Bytes; 9] {
        [
            subscription::all(Kind::Fetch),
            subscription::all(Kind::GetHeads),
            subscription::node(Kind::ConsumerHello, &self.config.id),
            subscription::all(Kind::HeadsQuery),
            subscription::all(Kind::TimeQuery),
            subscription::all(Kind::TopicsQuery),
            subscription::all(Kind::OffsetCommit),
            subscription::all(Kind::CommittedQuery),
            subscription::all(Kind::GroupsQuery),
        ]
    }

    /// Handles FETCH, GET-HEADS, HEADS-QUERY, TIME-QUERY, TOPICS-QUERY, CONSUMER-HELLO,
    /// OFFSET-COMMIT, COMMITTED-QUERY and GROUPS-QUERY; anything else is ignored.
    pub fn handle_message<L: StoreLog>(
        &mut self,
        message: &Message,
        log: &L,
    ) -> Result<(), PeerError> {
        match message {
            Message::Fetch(f) => {
                self.on_fetch(f, log);
                Ok(())
            }
            Message::GetHeads(g) => {
                self.heads(&g.topic, g.consumer, log);
                Ok(())
            }
            Message::HeadsQuery(q) => {
                // The end marker tells the consumer it has every answer: never send it when
                // one of them was dropped (queue full), or when the XPUB may still filter the
                // answers out (the consumer's `'E'` and `'O'` subscriptions not seen yet while
                // its `'R'` is: a new connection's subscriptions arrive in any order), so it
                // then waits as for a reference store.
                let dropped = self.dropped;
                self.heads(&q.topic, q.consumer, log);
                self.end_query(q.consumer, &q.topic, q.query, LISTENS_HEADS, dropped);
                Ok(())
            }
            Message::TimeQuery(q) => {
                // Answered as HEADS-QUERY is: per partition, then HEADS-END when every answer
                // was queued and the consumer receives them.
                let dropped = self.dropped;
                for (producer, _, end) in log.partitions_of(&q.topic) {
                    let offset = log
                        .offset_for_time(&q.topic, &producer, q.time)
                        .map_or(end, |o| o.min(end));
                    self.queue(Message::DirectTimeOffset(DirectTimeOffset {
                        to: q.consumer,
                        producer,
                        topic: q.topic.clone(),
                        offset,
                        end,
                    }));
                }
                self.end_query(q.consumer, &q.topic, q.query, LISTENS_TIMES, dropped);
                Ok(())
            }
            Message::TopicsQuery(q) => {
                let mut topics = log.topics();
                topics.truncate(Limits::DEFAULT.max_topics);
                self.queue(Message::DirectTopics(DirectTopics {
                    to: q.consumer,
                    store: self.config.id,
                    query: q.query,
                    topics,
                }));
                Ok(())
            }
            Message::GroupsQuery(_) | Message::OffsetCommit(_) | Message::CommittedQuery(_) => {
                let answer = group_answer(self.config.id, message, log);
                self.push_group_answer(answer);
                Ok(())
            }
            Message::ConsumerHello(h) => {
                if h.store != self.config.id {
                    return Err(PeerError::NotForUs {
                        kind: Kind::ConsumerHello.name(),
                        to: h.store,
                    });
                }
                for topic in &h.topics {
                    self.heads(topic, h.consumer, log);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A subscription that reached the reader's XPUB: `'L'` + consumer asks for STORE-HELLO;
    /// `'E'`, `'O'` and `'R'` + consumer are noted (HEADS-END), and `'B'` + consumer
    /// (DIRECT-RECORDS).
    pub fn handle_subscription(&mut self, prefix: &[u8]) {
        match subscription::parse_node(prefix) {
            Some((Kind::StoreHello, consumer)) => self.queue(Message::StoreHello(StoreHello {
                consumer,
                store: self.config.id,
            })),
            Some((kind, consumer)) => {
                if let Some(bit) = listen_bit(kind)
                    && (self.listening.len() < MAX_LISTENING
                        || self.listening.contains_key(&consumer))
                {
                    *self.listening.entry(consumer).or_insert(0) |= bit;
                }
            }
            None => {}
        }
    }

    /// A subscription cancelled on the reader's XPUB (every subscriber of it gone): a consumer
    /// no longer receiving `'E'`, `'O'` or `'R'` gets no HEADS-END, one no longer receiving
    /// `'B'` DIRECT-RECORDs again.
    pub fn handle_unsubscription(&mut self, prefix: &[u8]) {
        if let Some((kind, consumer)) = subscription::parse_node(prefix)
            && let Some(bit) = listen_bit(kind)
            && let Some(bits) = self.listening.get_mut(&consumer)
        {
            *bits &= !bit;
            if *bits == 0 {
                self.listening.remove(&consumer);
            }
        }
    }

    /// The HEADS-END of query `query` to `consumer`, when it listens to every answer (`bits`)
    /// and none was dropped since the count was `dropped`.
    fn end_query(&mut self, consumer: NodeId, topic: &Topic, query: u64, bits: u8, dropped: u64) {
        let listens = self
            .listening
            .get(&consumer)
            .is_some_and(|b| b & bits == bits);
        if listens && self.dropped == dropped {
            self.queue(Message::HeadsEnd(HeadsEnd {
                to: consumer,
                store: self.config.id,
                topic: topic.clone(),
                query,
            }));
        }
    }

    fn queue(&mut self, message: Message) {
        if self.transmit.len() >= self.config.max_queued {
            self.dropped += 1;
        } else {
            self.transmit.push_back(message);
        }
    }

    fn on_fetch<L: StoreLog>(&mut self, fetch: &Fetch, log: &L) {
        if fetch.sender == self.config.writer {
            return;
        }
        let Some((low, head)) = log.bounds(&fetch.topic, &fetch.producer) else {
            return;
        };
        if fetch.sequence < low && low < head {
            // Extension: retention dropped the first record asked for. A consumer that fell
            // that far behind is told where the partition now starts (as GET-HEADS answers
            // tell a new one), skips there and FETCHes the rest, instead of retrying for
            // records nobody holds; a FETCH from anyone else (a store's writer) does not
            // subscribe to DIRECT-LOW-WATER and never sees it.
            self.queue(Message::DirectLowWater(DirectLowWater {
                to: fetch.sender,
                low: Head {
                    producer: fetch.producer,
                    topic: fetch.topic.clone(),
                    sequence: low,
                },
            }));
            return;
        }
        // "A store answers FETCH only if the first requested record exists" (NOTES.md).
        if fetch.sequence < low || fetch.sequence >= head {
            return;
        }
        let end = fetch
            .sequence
            .saturating_add(u64::from(fetch.count))
            .min(head);
        if let Some(a) = self.answers.iter_mut().find(|a| {
            a.to == fetch.sender && a.producer == fetch.producer && a.topic == fetch.topic
        }) {
            a.next = a.next.min(fetch.sequence);
            a.end = a.end.max(end);
            return;
        }
        if self.answers.len() >= self.config.max_pending_answers {
            self.dropped += 1;
            return;
        }
        self.answers.push_back(Answer {
            to: fetch.sender,
            topic: fetch.topic.clone(),
            producer: fetch.producer,
            next: fetch.sequence,
            end,
        });
    }

    fn heads<L: StoreLog>(&mut self, topic: &Topic, to: NodeId, log: &L) {
        for (producer, low, head) in log.partitions_of(topic) {
            let Some(sequence) = head.checked_sub(1) else {
                continue;
            };
            if low > 0 {
                // Extension: the first records are gone (retention); an "earliest" consumer
                // starts here instead of FETCHing offsets nobody holds.
                self.queue(Message::DirectLowWater(DirectLowWater {
                    to,
                    low: Head {
                        producer,
                        topic: topic.clone(),
                        sequence: low,
                    },
                }));
            }
            self.queue(Message::DirectHead(DirectHead {
                to,
                head: Head {
                    producer,
                    topic: topic.clone(),
                    sequence,
                },
            }));
        }
    }

    /// The next message to publish: STORE-HELLOs and DIRECT-HEADs, then FETCH answers, read
    /// from `log` a chunk at a time, in ascending offset order per answer; pending answers
    /// take turns, one chunk each.
    pub fn poll_transmit<L: StoreLog>(&mut self, log: &L) -> Option<Message> {
        if let Some(m) = self.transmit.pop_front() {
            return Some(m);
        }
        loop {
            if let Some(m) = self.chunk.pop_front() {
                return Some(m);
            }
            let answer = self.answers.front_mut()?;
            if answer.next >= answer.end {
                self.answers.pop_front();
                continue;
            }
            let want = usize::try_from(answer.end - answer.next)
                .unwrap_or(usize::MAX)
                .min(self.config.read_chunk);
            match log.read(&answer.topic, &answer.producer, answer.next, want) {
                Ok(LogRead::Missing { to }) if to > answer.next => {
                    // Extension: the requester learns these offsets are not here (and asks
                    // another store, or skips them) instead of retrying for them forever.
                    let to_offset = to.min(answer.end);
                    self.chunk.push_back(Message::DirectMissing(DirectMissing {
                        to: answer.to,
                        store: self.config.id,
                        producer: answer.producer,
                        topic: answer.topic.clone(),
                        from: answer.next,
                        to_offset,
                    }));
                    answer.next = to_offset;
                    if answer.next < answer.end {
                        self.answers.rotate_left(1);
                    }
                }
                Ok(LogRead::Missing { .. }) => {
                    self.answers.pop_front();
                }
                Ok(LogRead::Records(records)) => {
                    let bits = self.listening.get(&answer.to).copied().unwrap_or(0);
                    let metas = bits & LISTENS_METAS != 0;
                    let runs = metas || bits & LISTENS_RUNS != 0;
                    let mut run = Run::default();
                    let mut expected = answer.next;
                    // Room for a run's records at its start: as many as fit in a batch if all
                    // were the size of the first.
                    let first_len = records.first().map_or(1, |(_, c, _)| c.len().max(1));
                    let per_run = records.len().min(self.config.batch_bytes / first_len + 1);
                    for (offset, content, meta) in records {
                        // Only the contiguous run from the offset asked for: an answer never
                        // skips a record.
                        if offset != expected || offset >= answer.end {
                            break;
                        }
                        expected += 1;
                        if !runs {
                            self.chunk.push_back(Message::DirectRecord(DirectRecord {
                                to: answer.to,
                                record: Record {
                                    producer: answer.producer,
                                    topic: answer.topic.clone(),
                                    sequence: offset,
                                    content,
                                },
                            }));
                            continue;
                        }
                        if !run.contents.is_empty()
                            && run.bytes + content.len() > self.config.batch_bytes
                        {
                            self.chunk.push_back(run.take(answer, offset));
                        }
                        if run.contents.is_empty() {
                            run.contents.reserve(per_run);
                            if metas {
                                run.metas.reserve(per_run);
                            }
                        }
                        run.bytes += content.len();
                        run.contents.push(content);
                        if metas {
                            run.bytes += meta.payload_len();
                            run.metas.push(meta);
                        }
                    }
                    if !run.contents.is_empty() {
                        self.chunk.push_back(run.take(answer, expected));
                    }
                    if expected == answer.next {
                        // Nothing there (retention went past it): give up on the rest.
                        self.answers.pop_front();
                    } else {
                        answer.next = expected;
                        // Round robin, a chunk at a time: consumers reading at once (Spark's
                        // tasks) are served side by side, not one whole range after another.
                        if answer.next < answer.end {
                            self.answers.rotate_left(1);
                        }
                    }
                }
                Err(_) => {
                    self.read_errors += 1;
                    self.answers.pop_front();
                }
            }
        }
    }

    /// Requests dropped for want of room (FETCHes, DIRECT-HEADs, STORE-HELLOs).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// FETCH answers abandoned because the log could not be read.
    pub fn read_errors(&self) -> u64 {
        self.read_errors
    }

    /// OFFSET-COMMITs not answered because the log could not write them.
    pub fn commit_errors(&self) -> u64 {
        self.commit_errors
    }

    /// Queues the answer to a consumer group request ([`group_answer`]), or counts a commit
    /// that could not be written (`None`: not answered, the member's commit waits for this
    /// store, then fails or retries). A driver that writes commits off its task (a commit is
    /// an `fdatasync`) hands the answers back through this.
    pub fn push_group_answer(&mut self, answer: Option<Message>) {
        match answer {
            Some(m) => self.queue(m),
            None => self.commit_errors += 1,
        }
    }
}

/// Whether `message` is a consumer group request a store reader answers from its committed
/// offsets: OFFSET-COMMIT, COMMITTED-QUERY or GROUPS-QUERY.
pub fn is_group_request(message: &Message) -> bool {
    matches!(
        message,
        Message::OffsetCommit(_) | Message::CommittedQuery(_) | Message::GroupsQuery(_)
    )
}

/// Store reader `store`'s answer to a consumer group request, from `log`: a DIRECT-COMMITTED
/// once an OFFSET-COMMIT's offsets are on the disk (`None` when they could not be written),
/// a DIRECT-COMMITTED for a COMMITTED-QUERY, a DIRECT-GROUPS for a GROUPS-QUERY. `None` for
/// any other message. Pure but for the log: a driver may run it off its reader's task (see
/// [`StoreReader::push_group_answer`]).
pub fn group_answer<L: StoreLog>(store: NodeId, message: &Message, log: &L) -> Option<Message> {
    match message {
        Message::GroupsQuery(q) => {
            let mut groups = log.groups();
            groups.truncate(Limits::DEFAULT.max_topics);
            Some(Message::DirectGroups(DirectGroups {
                to: q.consumer,
                store,
                query: q.query,
                groups,
            }))
        }
        Message::OffsetCommit(c) => {
            let offsets = log.commit_offsets(&c.group, &c.offsets, c.seek).ok()?;
            Some(Message::DirectCommitted(DirectCommitted {
                to: c.member,
                store,
                request: c.request,
                group: c.group.clone(),
                offsets,
            }))
        }
        Message::CommittedQuery(q) => {
            let mut offsets = log.committed(&q.group, &q.partitions);
            offsets.truncate(Limits::DEFAULT.max_offsets);
            Some(Message::DirectCommitted(DirectCommitted {
                to: q.member,
                store,
                request: q.request,
                group: q.group.clone(),
                offsets,
            }))
        }
        _ => None,
    }
}
