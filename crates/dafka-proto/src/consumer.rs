//! The consumer state machine: in-order, exactly-once delivery per partition.
//!
//! * Topics match exactly: a RECORD of `hello2` reaching a `hello` consumer (ZeroMQ prefix
//!   matching lets it through) is dropped, not delivered as the reference does.
//! * A partition is learnt from its first RECORD, HEAD or DIRECT-HEAD. With
//!   [`OffsetReset::Earliest`] delivery starts at offset 0; with [`OffsetReset::Latest`] at a
//!   RECORD's own offset, or after the offset a HEAD or DIRECT-HEAD names: only records
//!   written after the consumer met the partition. (The reference starts at the head, so its
//!   "latest" consumer delivers the last record written before it came.)
//!   [`Consumer::set_position`] starts a partition at an explicit offset.
//! * Subscribing (but for an [`OffsetReset::Assigned`] consumer) asks the stores for the
//!   topic's heads (GET-HEADS and a HEADS-QUERY, again to every store that becomes
//!   reachable): a topic every reachable store answered for with a HEADS-END and none holds a
//!   partition of, and of which no record or HEAD came, is "not held"
//!   ([`Consumer::topics_not_held`], said once per topic by [`Consumer::poll_not_held`]): a
//!   typo, or a topic nothing was written to yet.
//! * Records arriving ahead of the next offset wait in a bounded reorder buffer
//!   ([`ConsumerConfig::max_reorder`] records per partition, [`ConsumerConfig::max_reorder_bytes`]
//!   overall; past that they are dropped and fetched again later); the gap is FETCHed at once
//!   and FETCHed again on a timer with exponential backoff
//!   ([`ConsumerConfig::fetch_retry`] doubling up to [`ConsumerConfig::fetch_retry_max`]) until
//!   it closes. The reference instead discards such records and retries only when the next
//!   RECORD or HEAD arrives.
//! * Records below the next offset (duplicates from several answerers) are dropped.
//! * A store that does not hold offsets below its head (damaged on its disk) answers a FETCH
//!   of them with DIRECT-MISSING (extension). The FETCH reached every store, so another one
//!   may still answer; the partition skips the offsets (a [`Loss`], counted by
//!   [`Consumer::lost`]) once every reachable store said it lacks them, or once one store
//!   said so [`MISSING_REPORTS`] times (the first answer and the retries after it) and
//!   nobody delivered them meanwhile: it never waits for them forever.
//! * A STORE-HELLO, or a store reader's `'W'` + id subscription reaching the consumer's XPUB, is
//!   answered with CONSUMER-HELLO listing the consumer's topics.
//!
//! * [`Consumer::query_offsets`] asks the stores for the partitions of a topic and their bounds
//!   (the first offset held and one past the last) without subscribing to it: GET-HEADS, sent
//!   again to every store reader that becomes reachable, answered by DIRECT-HEADs and
//!   DIRECT-LOW-WATERs (see [`Consumer::offsets`]), each followed by a HEADS-QUERY (extension)
//!   that our store readers end with a HEADS-END, so the query knows when every reachable
//!   store has answered ([`Consumer::query_answered`]). Spark's source plans offset ranges
//!   with it.
//!
//! Time is passed in; the driver calls [`Consumer::handle_timeout`] at
//! [`Consumer::poll_timeout`], publishes every [`Consumer::poll_transmit`] message on its XPUB
//! and hands every [`Consumer::poll_record`] to the application.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::error::{CallerError, PeerError};
use crate::group::GroupName;
use crate::id::{NodeId, Topic};
use crate::message::{
    CommittedQuery, ConsumerHello, DirectMetaRecords, DirectMissing, GetHeads, GroupOffset,
    GroupsQuery, HeadsQuery, Kind, Message, OffsetCommit, Record, TimeQuery, TopicsQuery,
};
use crate::record::RecordMeta;
use crate::retry::{self, Ask, Gapped, Partitions, Retry};
use crate::subscription;

/// Where a consumer starts in a partition it has no position for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OffsetReset {
    /// From offset 0.
    Earliest,
    /// From the offset of the first RECORD seen, or after the offset of the first HEAD or
    /// DIRECT-HEAD (the reference's default, but for that: it starts at the head).
    #[default]
    Latest,
    /// Nowhere: only partitions given a position ([`Consumer::assign`],
    /// [`Consumer::set_position`]) are delivered; records of the others are dropped.
    Assigned,
}

/// Settings of a [`Consumer`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerConfig {
    /// The consumer's id (DIRECT-RECORDs and DIRECT-HEADs are addressed to it).
    pub id: NodeId,
    /// Where to start in a new partition.
    pub offset_reset: OffsetReset,
    /// Most out-of-order records held per partition.
    pub max_reorder: usize,
    /// Most content bytes held out of order, over all partitions.
    pub max_reorder_bytes: usize,
    /// First FETCH retry delay.
    pub fetch_retry: Duration,
    /// Longest FETCH retry delay (the backoff doubles up to it).
    pub fetch_retry_max: Duration,
    /// Most partitions tracked; messages of further partitions are refused.
    pub max_partitions: usize,
    /// How often a consumer asks the stores for its topics' heads again (GET-HEADS), from the
    /// moment a store is reachable: one that missed a partition's last records and also its
    /// producer's last HEAD (both dropped at a full pipe, the producer gone since) learns of
    /// them from the stores, instead of waiting for a HEAD that never comes. Sooner, after
    /// [`fetch_retry`](Self::fetch_retry), when a gap closes (the stream was lossy). Zero:
    /// never.
    pub heads_refresh: Duration,
}

impl ConsumerConfig {
    /// Defaults: offset reset "latest", 4096 records per partition and 64 MiB held out of
    /// order, FETCH retried after 200 ms doubling up to 5 s, 65 536 partitions, heads asked
    /// again every 5 s.
    pub fn new(id: NodeId) -> Self {
        ConsumerConfig {
            id,
            offset_reset: OffsetReset::Latest,
            max_reorder: 4096,
            max_reorder_bytes: 64 << 20,
            fetch_retry: Duration::from_millis(200),
            fetch_retry_max: Duration::from_secs(5),
            max_partitions: 65_536,
            heads_refresh: Duration::from_secs(5),
        }
    }

    fn validate(&self) -> Result<(), CallerError> {
        retry::validate(self.fetch_retry, self.fetch_retry_max)
    }
}

/// Offsets of a partition that no store answering the consumer holds (damaged on their
/// disks): skipped, never delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    /// The topic.
    pub topic: Topic,
    /// The partition (its producer's id).
    pub partition: NodeId,
    /// The first offset skipped.
    pub from: u64,
    /// The first offset after them (the partition goes on there).
    pub to: u64,
}

/// DIRECT-MISSINGs from one store for the same offset after which the consumer skips them
/// though other reachable stores said nothing (they may not hold the partition at all): the
/// answer to the first FETCH and to two retries, none of which another store answered.
pub const MISSING_REPORTS: u32 = 3;

/// What the stores said of the offsets at a partition's next offset (DIRECT-MISSING).
#[derive(Debug, Clone)]
struct Missing {
    /// The partition's next offset when they said it.
    at: u64,
    /// The first offset after the offsets every report agrees are missing.
    to: u64,
    /// The stores that said so (at most [`MAX_STORES`]).
    stores: HashSet<NodeId>,
    /// How many reports.
    reports: u32,
}

/// A partition positioned past the end the stores hold: it waits for records to be written
/// there (said once per position, so a typo'd start offset does not wait silently).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastEnd {
    /// The topic.
    pub topic: Topic,
    /// The partition (its producer's id).
    pub partition: NodeId,
    /// Where it is positioned.
    pub next: u64,
    /// One past the highest offset the stores said they hold.
    pub end: u64,
}

/// A record delivered in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The topic.
    pub topic: Topic,
    /// The partition (its producer's id).
    pub partition: NodeId,
    /// The record's offset.
    pub offset: u64,
    /// The record's value.
    pub content: Bytes,
    /// The record's timestamp, key and headers; `None` for a record that came as RECORD,
    /// DIRECT-RECORD or DIRECT-RECORDS (from a reference producer or store, which keep no
    /// metadata): the driver stamps it with the time it received it.
    pub meta: Option<RecordMeta>,
}

/// A record held out of order: its value and metadata.
#[derive(Debug)]
struct Held {
    content: Bytes,
    meta: Option<RecordMeta>,
}

impl Held {
    /// Bytes counted against [`ConsumerConfig::max_reorder_bytes`]: value, key and headers.
    fn len(&self) -> usize {
        self.content.len() + self.meta.as_ref().map_or(0, RecordMeta::payload_len)
    }
}

#[derive(Debug)]
struct Partition {
    /// The next offset to deliver.
    next: u64,
    /// The highest offset known to exist (from HEADs and records), if any.
    head: Option<u64>,
    reorder: BTreeMap<u64, Held>,
    retry: Option<Retry>,
    /// One past the last offset to deliver, for a range read ([`Consumer::assign`] with an
    /// end): nothing at or past it is delivered, held or FETCHed.
    until: Option<u64>,
    /// Stores that said they lack the offsets at `next`.
    missing: Option<Missing>,
    /// One past the highest offset a store said it holds (DIRECT-HEAD).
    stores_end: Option<u64>,
    /// When a store's DIRECT-HEAD first showed `next` past the stores' end (to be said once
    /// [`ConsumerConfig::fetch_retry`] later, when every store had time to answer).
    past_since: Option<Instant>,
    /// That was said for the current position.
    said_past: bool,
}

impl Partition {
    fn new(next: u64) -> Self {
        Partition {
            next,
            head: None,
            reorder: BTreeMap::new(),
            retry: None,
            until: None,
            missing: None,
            stores_end: None,
            past_since: None,
            said_past: false,
        }
    }

    /// Content bytes held out of order.
    fn held_bytes(&self) -> usize {
        self.reorder.values().map(Held::len).sum()
    }

    /// Drops the records held below `offset`; returns their bytes.
    fn drop_held_below(&mut self, offset: u64) -> usize {
        let kept = self.reorder.split_off(&offset);
        let below = std::mem::replace(&mut self.reorder, kept);
        below.values().map(Held::len).sum()
    }

    /// Drops the records held at or past `offset`; returns their bytes.
    fn drop_held_from(&mut self, offset: u64) -> usize {
        let past = self.reorder.split_off(&offset);
        past.values().map(Held::len).sum()
    }
}

impl Gapped for Partition {
    fn gap(&self) -> Option<(u64, u64)> {
        let end = match self.reorder.keys().next() {
            Some(&first) => first,
            // A head at u64::MAX (no record can be there: see `on_run`) still leaves the
            // offsets below it to fetch, and a range read its range.
            None => self.head?.saturating_add(1),
        };
        let end = self.until.map_or(end, |u| end.min(u));
        (end > self.next).then_some((self.next, end))
    }

    fn retry(&mut self) -> &mut Option<Retry> {
        &mut self.retry
    }

    fn retry_at(&self) -> Option<Instant> {
        self.retry.map(|r| r.at)
    }
}

/// The consumer state machine. See the [module docs](self).
#[derive(Debug)]
pub struct Consumer {
    config: ConsumerConfig,
    topics: Vec<Topic>,
    partitions: Partitions<Partition>,
    reorder_bytes: usize,
    deliveries: VecDeque<Delivery>,
    transmit: VecDeque<Message>,
    dropped: u64,
    /// Topics with an offsets query running, and what it heard so far.
    queries: HashMap<Topic, Query>,
    /// The number of the next offsets query (HEADS-QUERY, HEADS-END).
    next_query: u64,
    /// Store readers heard from: `'W'` + id seen on the XPUB (it hears us) and STORE-HELLO
    /// received (we hear it). Bounded by [`MAX_STORES`].
    heard_by: HashSet<NodeId>,
    heard_from: HashSet<NodeId>,
    /// When the topics' heads are asked for again ([`ConsumerConfig::heads_refresh`]); set
    /// once a store is reachable.
    next_heads: Option<Instant>,
    /// When they were last asked for.
    heads_asked: Option<Instant>,
    /// Offsets skipped because no store holds them, not yet polled.
    losses: VecDeque<Loss>,
    /// Offsets skipped so far because no store holds them.
    lost: u64,
    /// Partitions found positioned past the stores' end, not yet polled.
    past_end: VecDeque<PastEnd>,
    /// What the stores said of each subscribed topic (not for an "assigned" consumer).
    census: HashMap<Topic, Census>,
    /// Topics found not held, not yet polled.
    not_held: VecDeque<Topic>,
    /// Topics with a time query running (TIME-QUERY), and what it heard so far.
    time_queries: HashMap<Topic, TimeAsk>,
    /// The topics query (TOPICS-QUERY) and the groups query (GROUPS-QUERY) running, if any.
    name_queries: [Option<Box<NamesAsk>>; 2],
    /// The group offsets commit or query running (OFFSET-COMMIT, COMMITTED-QUERY), if any.
    group_ask: Option<Box<GroupAsk>>,
}

/// A running commit or query of a consumer group's offsets.
#[derive(Debug)]
struct GroupAsk {
    /// The OFFSET-COMMIT or COMMITTED-QUERY, sent again to every store reader that becomes
    /// reachable while it runs.
    request: Message,
    number: u64,
    group: GroupName,
    /// Per partition, the largest offset a store answered.
    offsets: BTreeMap<(Topic, NodeId), u64>,
    /// Store readers whose DIRECT-COMMITTED arrived (bounded by [`MAX_STORES`]).
    answered: HashSet<NodeId>,
}

/// A running time query: the first offset of each partition at or after `time`.
#[derive(Debug)]
struct TimeAsk {
    time: i64,
    /// Its number, echoed by the HEADS-ENDs that end its answers.
    number: u64,
    offsets: BTreeMap<NodeId, TimeOffset>,
    /// Store readers whose HEADS-END of it arrived (bounded by [`MAX_STORES`]).
    ended: HashSet<NodeId>,
}

/// What a list query asks the store readers for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// The topics of which they hold a partition (TOPICS-QUERY, answered by DIRECT-TOPICS).
    Topics,
    /// The consumer groups with offsets committed with them (GROUPS-QUERY, answered by
    /// DIRECT-GROUPS; a group name is a topic name that is not empty).
    Groups,
}

impl Listing {
    fn slot(self) -> usize {
        match self {
            Listing::Topics => 0,
            Listing::Groups => 1,
        }
    }
}

/// A running list query.
#[derive(Debug)]
struct NamesAsk {
    number: u64,
    names: BTreeSet<Topic>,
    /// Store readers whose answer arrived (bounded by [`MAX_STORES`]).
    answered: HashSet<NodeId>,
}

/// What the stores said of one partition in answer to a time query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeOffset {
    /// The first offset whose record's timestamp is at or after the time (the lowest any
    /// store holds); `None` when no store holds a record that recent.
    pub offset: Option<u64>,
    /// One past the highest offset a store holds.
    pub end: u64,
}

/// Whether the stores hold a subscribed topic: the HEADS-QUERY asked when it was subscribed.
#[derive(Debug)]
struct Census {
    /// Its number, echoed by the HEADS-ENDs that answer it.
    number: u64,
    /// Store readers whose HEADS-END of it arrived (bounded by [`MAX_STORES`]).
    ended: HashSet<NodeId>,
    /// A store said it holds a partition of the topic (DIRECT-HEAD, DIRECT-LOW-WATER).
    held: bool,
    /// Found not held and said so ([`Consumer::poll_not_held`]).
    said: bool,
}

/// A running offsets query.
#[derive(Debug)]
struct Query {
    /// The bounds heard so far per partition.
    bounds: BTreeMap<NodeId, Bounds>,
    /// Its number, sent in HEADS-QUERY and echoed by the HEADS-ENDs that answer it.
    number: u64,
    /// Store readers whose HEADS-END of this query arrived (bounded by [`MAX_STORES`]).
    ended: HashSet<NodeId>,
}

/// Least time between two GET-HEADS sent because a gap closed.
const HEADS_AFTER_GAP_EVERY: Duration = Duration::from_secs(1);

/// Most store readers [`Consumer`] tracks for [`Consumer::stores_reachable`].
pub const MAX_STORES: usize = 1024;

/// What the stores hold of one partition, as an offsets query learns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The first offset still held (0 unless retention dropped records).
    pub low: u64,
    /// One past the highest offset a store holds: the next offset the partition will write.
    pub end: u64,
}

impl Consumer {
    /// A consumer with `config`, or the reason the configuration is invalid.
    pub fn new(config: ConsumerConfig) -> Result<Self, CallerError> {
        config.validate()?;
        Ok(Consumer {
            config,
            topics: Vec::new(),
            partitions: Partitions::default(),
            reorder_bytes: 0,
            deliveries: VecDeque::new(),
            transmit: VecDeque::new(),
            dropped: 0,
            queries: HashMap::new(),
            next_query: 0,
            heard_by: HashSet::new(),
            heard_from: HashSet::new(),
            next_heads: None,
            heads_asked: None,
            losses: VecDeque::new(),
            lost: 0,
            past_end: VecDeque::new(),
            census: HashMap::new(),
            not_held: VecDeque::new(),
            time_queries: HashMap::new(),
            name_queries: [None, None],
            group_ask: None,
        })
    }

    /// The subscriptions of the consumer's SUB socket that do not depend on its topics:
    /// `'D'`, `'E'`, `'L'` and (the extensions) `'B'`, `'O'`, `'R'` and `'N'` + its id. `'B'`,
    /// reaching one of our store readers, tells it to answer FETCHes with DIRECT-RECORDS.
    pub fn subscriptions(&self) -> [Bytes; 12] {
        let id = &self.config.id;
        [
            subscription::node(Kind::DirectRecord, id),
            // A store reader that has not seen this one yet (a new connection's subscriptions
            // arrive in any order) answers with DIRECT-RECORDs, which are taken as well.
            subscription::node(Kind::DirectRecords, id),
            // Records with their metadata: a producer or store reader that saw it answers
            // FETCHes with DIRECT-META-RECORDS.
            subscription::node(Kind::DirectMetaRecords, id),
            // Answers to time, topics and groups queries.
            subscription::node(Kind::DirectTimeOffset, id),
            subscription::node(Kind::DirectTopics, id),
            subscription::node(Kind::DirectGroups, id),
            subscription::node(Kind::DirectHead, id),
            subscription::node(Kind::StoreHello, id),
            subscription::node(Kind::DirectLowWater, id),
            subscription::node(Kind::HeadsEnd, id),
            subscription::node(Kind::DirectMissing, id),
            // Answers to group offset commits and queries.
            subscription::node(Kind::DirectCommitted, id),
        ]
    }

    /// Subscribes to `topic`; returns the SUB subscriptions to add (`'M'` and `'H'` + topic +
    /// `0x00`: exact). But for an "assigned" consumer, it also asks the stores for the topic's
    /// heads: GET-HEADS (an "earliest" consumer learns its partitions from the answers, a
    /// "latest" one where they end) and a HEADS-QUERY, whose HEADS-ENDs tell whether the
    /// stores hold the topic at all ([`topics_not_held`](Self::topics_not_held)).
    pub fn subscribe(&mut self, topic: Topic) -> [Bytes; 3] {
        let subs = topic_subscriptions(&topic);
        if !self.topics.contains(&topic) {
            if self.config.offset_reset != OffsetReset::Assigned {
                let number = self.new_query_number();
                let census = Census {
                    number,
                    ended: HashSet::new(),
                    held: false,
                    said: false,
                };
                self.census.insert(topic.clone(), census);
                self.ask_heads(topic.clone(), number);
            }
            self.topics.push(topic);
        }
        subs
    }

    /// Unsubscribes from `topic` and forgets its partitions; returns the SUB subscriptions to
    /// cancel.
    pub fn unsubscribe(&mut self, topic: &Topic) -> [Bytes; 3] {
        self.topics.retain(|t| t != topic);
        self.census.remove(topic);
        self.not_held.retain(|t| t != topic);
        let mut freed = 0;
        self.partitions.retain(|(t, _), p| {
            let keep = t != topic;
            if !keep {
                freed += p.held_bytes();
            }
            keep
        });
        self.reorder_bytes -= freed;
        topic_subscriptions(topic)
    }

    /// The topics subscribed.
    pub fn topics(&self) -> &[Topic] {
        &self.topics
    }

    /// Starts (or moves) `partition` of `topic` at offset `next` (explicit start offsets, or a
    /// position saved earlier). A range read ([`assign`](Self::assign) with an end) becomes
    /// an open one; its topic is not subscribed by this (subscribe it, or assign without an
    /// end, to have its new records and HEADs come). A gap up to the known head is fetched
    /// when the partition's next RECORD or HEAD arrives (HEADs come every second).
    pub fn set_position(&mut self, topic: Topic, partition: NodeId, next: u64) {
        let p = self
            .partitions
            .entry((topic, partition))
            .or_insert_with(|| Partition::new(next));
        p.next = next;
        p.retry = None;
        p.until = None;
        p.past_since = None;
        p.said_past = false;
        self.reorder_bytes -= p.drop_held_below(next);
    }

    /// Reads `partition` of `topic` from offset `next`, at once: with `end` (one past the last
    /// offset wanted, e.g. from [`offsets`](Self::offsets)) the partition becomes a range read,
    /// `next..end`: the range is FETCHed now instead of at the partition's next HEAD, and
    /// nothing at or past `end` is delivered, held or FETCHed. GET-HEADS is sent too, so a
    /// store that dropped the first offsets (retention) answers with its low-water mark, which
    /// moves the partition up to it (the caller sees the first offset delivered above `next`).
    ///
    /// Returns the SUB subscriptions to add, as [`subscribe`](Self::subscribe) does: the topic
    /// is subscribed (if it is not yet) unless this is a range read of an
    /// [`OffsetReset::Assigned`] consumer. Such a read needs only the answers addressed to
    /// the consumer (DIRECT-RECORD, DIRECT-LOW-WATER): a range read (Spark's tasks) that also
    /// took every live RECORD of the topic would receive the whole stream to drop it.
    pub fn assign(
        &mut self,
        topic: Topic,
        partition: NodeId,
        next: u64,
        end: Option<u64>,
        now: Instant,
    ) -> Option<[Bytes; 3]> {
        let range_only = end.is_some() && self.config.offset_reset == OffsetReset::Assigned;
        let subscriptions =
            (!range_only && !self.topics.contains(&topic)).then(|| self.subscribe(topic.clone()));
        self.set_position(topic.clone(), partition, next);
        // Records of the partition delivered but not yet polled belong to the read before.
        self.deliveries
            .retain(|d| d.partition != partition || d.topic != topic);
        let key = (topic.clone(), partition);
        if let Some(p) = self.partitions.get_mut(&key) {
            p.until = end;
            if let Some(end) = end {
                // Records held from an earlier, open read of the partition: none past the end.
                self.reorder_bytes -= p.drop_held_from(end);
            }
            if let Some(last) = end.and_then(|e| e.checked_sub(1)) {
                p.head = Some(p.head.map_or(last, |h| h.max(last)));
            }
        }
        self.transmit.push_back(Message::GetHeads(GetHeads {
            topic,
            consumer: self.config.id,
        }));
        self.refetch(&key, now);
        subscriptions
    }

    /// Forgets `partition` of `topic` (its position and the records held out of order): with
    /// [`OffsetReset::Assigned`] its records are no longer delivered.
    pub fn unassign(&mut self, topic: &Topic, partition: &NodeId) {
        if let Some(p) = self.partitions.remove(&(topic.clone(), *partition)) {
            self.reorder_bytes -= p.held_bytes();
        }
    }

    /// The next offset to deliver, per (topic, partition).
    pub fn positions(&self) -> impl Iterator<Item = (&Topic, &NodeId, u64)> {
        self.partitions.iter().map(|((t, n), p)| (t, n, p.next))
    }

    /// [`handle_message`](Self::handle_message) taking the message: the records of RECORD,
    /// META-RECORD, DIRECT-RECORD, DIRECT-RECORDS and DIRECT-META-RECORDS move into the
    /// deliveries (no reference count taken and dropped per record).
    pub fn handle(&mut self, message: Message, now: Instant) -> Result<(), PeerError> {
        match message {
            Message::Record(r) => self.on_record(r, None, now),
            Message::MetaRecord(m) => self.on_record(m.record, Some(m.meta), now),
            Message::DirectRecord(d) => {
                self.check_to(Kind::DirectRecord, &d.to)?;
                self.on_record(d.record, None, now)
            }
            Message::DirectRecords(d) => {
                self.check_to(Kind::DirectRecords, &d.to)?;
                let records = d.contents.into_iter().map(|c| (c, None));
                self.on_run(&d.topic, d.producer, d.first, records, now)
            }
            Message::DirectMetaRecords(DirectMetaRecords { run: d, metas }) => {
                self.check_to(Kind::DirectMetaRecords, &d.to)?;
                let records = d.contents.into_iter().zip(metas.into_iter().map(Some));
                self.on_run(&d.topic, d.producer, d.first, records, now)
            }
            other => self.handle_message(&other, now),
        }
    }

    /// Handles a message from the consumer's SUB socket. [`handle`](Self::handle) taking the
    /// message: the records it delivers are cloned.
    pub fn handle_message(&mut self, message: &Message, now: Instant) -> Result<(), PeerError> {
        match message {
            Message::Record(_)
            | Message::MetaRecord(_)
            | Message::DirectRecord(_)
            | Message::DirectRecords(_)
            | Message::DirectMetaRecords(_) => self.handle(message.clone(), now),
            Message::Head(h) => self.on_head(&h.topic, h.producer, h.sequence, now),
            Message::DirectHead(d) => {
                self.check_to(Kind::DirectHead, &d.to)?;
                let h = &d.head;
                self.answer(&h.topic, h.producer, |b| {
                    b.end = b.end.max(h.sequence.saturating_add(1));
                });
                self.held(&h.topic);
                self.on_head(&h.topic, h.producer, h.sequence, now)?;
                self.on_stores_end(&h.topic, h.producer, h.sequence.saturating_add(1), now);
                Ok(())
            }
            Message::DirectLowWater(d) => {
                self.check_to(Kind::DirectLowWater, &d.to)?;
                let l = &d.low;
                self.answer(&l.topic, l.producer, |b| b.low = b.low.max(l.sequence));
                self.held(&l.topic);
                self.on_low_water(&l.topic, l.producer, l.sequence, now)
            }
            Message::DirectMissing(d) => {
                self.check_to(Kind::DirectMissing, &d.to)?;
                self.on_missing(d, now)
            }
            Message::HeadsEnd(e) => {
                self.check_to(Kind::HeadsEnd, &e.to)?;
                if let Some(q) = self.queries.get_mut(&e.topic)
                    && q.number == e.query
                    && q.ended.len() < MAX_STORES
                {
                    q.ended.insert(e.store);
                }
                if let Some(c) = self.census.get_mut(&e.topic)
                    && c.number == e.query
                    && c.ended.len() < MAX_STORES
                {
                    c.ended.insert(e.store);
                    self.check_census(&e.topic);
                }
                if let Some(q) = self.time_queries.get_mut(&e.topic)
                    && q.number == e.query
                    && q.ended.len() < MAX_STORES
                {
                    q.ended.insert(e.store);
                }
                Ok(())
            }
            Message::DirectTimeOffset(d) => {
                self.check_to(Kind::DirectTimeOffset, &d.to)?;
                let max = self.config.max_partitions;
                if let Some(q) = self.time_queries.get_mut(&d.topic)
                    && (q.offsets.len() < max || q.offsets.contains_key(&d.producer))
                {
                    let heard = q.offsets.entry(d.producer).or_insert(TimeOffset {
                        offset: None,
                        end: 0,
                    });
                    // A store without a record that recent says its end: not an offset.
                    if d.offset < d.end {
                        heard.offset = Some(heard.offset.map_or(d.offset, |o| o.min(d.offset)));
                    }
                    heard.end = heard.end.max(d.end);
                }
                Ok(())
            }
            Message::DirectTopics(d) => {
                self.check_to(Kind::DirectTopics, &d.to)?;
                self.names_heard_from(Listing::Topics, d.store, d.query, d.topics.iter());
                Ok(())
            }
            Message::DirectGroups(d) => {
                self.check_to(Kind::DirectGroups, &d.to)?;
                let names = d.groups.iter().map(GroupName::as_topic);
                self.names_heard_from(Listing::Groups, d.store, d.query, names);
                Ok(())
            }
            Message::DirectCommitted(d) => {
                self.check_to(Kind::DirectCommitted, &d.to)?;
                if let Some(a) = &mut self.group_ask
                    && a.number == d.request
                    && a.group == d.group
                    && a.answered.len() < MAX_STORES
                {
                    a.answered.insert(d.store);
                    for o in &d.offsets {
                        // Bounded: a store lists only partitions it holds, at most
                        // `Limits::max_offsets` a message, at most `MAX_STORES` stores.
                        let at = a
                            .offsets
                            .entry((o.topic.clone(), o.partition))
                            .or_insert(o.offset);
                        *at = (*at).max(o.offset);
                    }
                }
                Ok(())
            }
            Message::StoreHello(s) => {
                self.check_to(Kind::StoreHello, &s.consumer)?;
                self.hello(s.store);
                self.heard(s.store, false, now);
                Ok(())
            }
            // Not for a consumer: the driver's subscriptions never let these through.
            _ => Ok(()),
        }
    }

    /// A subscription reached the consumer's XPUB: `'W'` + a store reader's id asks for a
    /// CONSUMER-HELLO. Every other subscription is ignored.
    pub fn handle_subscription(&mut self, subscription: &[u8], now: Instant) {
        if let Some((Kind::ConsumerHello, store)) = subscription::parse_node(subscription) {
            self.hello(store);
            self.heard(store, true, now);
        }
    }

    /// A subscription was cancelled on the consumer's XPUB (the publisher hands up `0x00` +
    /// prefix when a subscriber cancels it or its connection ends): `'W'` + a store reader's
    /// id means that reader no longer hears this consumer (it stopped or died), so it is no
    /// longer counted by [`stores_reachable`](Self::stores_reachable) and an offsets query
    /// with every store gone fails instead of settling on an empty answer. Its `'W'` coming
    /// back (a reconnect) counts it again. Every other cancellation is ignored.
    pub fn handle_unsubscription(&mut self, subscription: &[u8]) {
        if let Some((Kind::ConsumerHello, store)) = subscription::parse_node(subscription) {
            self.heard_by.remove(&store);
        }
    }

    /// Starts (or restarts, forgetting what was heard) a query of `topic`'s partitions and
    /// their [`Bounds`]: sends GET-HEADS and a HEADS-QUERY with a new number now, and again to
    /// every store reader that becomes reachable (see
    /// [`stores_reachable`](Self::stores_reachable)) while the query runs. The topic need not
    /// be subscribed; the answers do not create positions for it unless it is.
    pub fn query_offsets(&mut self, topic: Topic) {
        let number = self.new_query_number();
        self.queries.insert(
            topic.clone(),
            Query {
                bounds: BTreeMap::new(),
                number,
                ended: HashSet::new(),
            },
        );
        self.ask_heads(topic, number);
    }

    /// Starts (or restarts) a query of the first offset of each partition of `topic` whose
    /// record's timestamp is at or after `time` (microseconds since the epoch, UTC): sends a
    /// TIME-QUERY now, and again to every store reader that becomes reachable while it runs.
    /// Our store readers answer with DIRECT-TIME-OFFSETs and a HEADS-END; reference stores do
    /// not answer it at all.
    pub fn query_time(&mut self, topic: Topic, time: i64) {
        let number = self.new_query_number();
        self.time_queries.insert(
            topic.clone(),
            TimeAsk {
                time,
                number,
                offsets: BTreeMap::new(),
                ended: HashSet::new(),
            },
        );
        self.ask_time(topic, number, time);
    }

    fn ask_time(&mut self, topic: Topic, query: u64, time: i64) {
        self.transmit.push_back(Message::TimeQuery(TimeQuery {
            consumer: self.config.id,
            topic,
            query,
            time,
        }));
    }

    /// Whether every store reader reachable now (at least one) ended its answers to the time
    /// query of `topic`.
    pub fn time_answered(&self, topic: &Topic) -> bool {
        self.time_queries
            .get(topic)
            .is_some_and(|q| self.all_reachable_in(&q.ended))
    }

    /// What the time query of `topic` heard so far, per partition.
    pub fn time_offsets(&self, topic: &Topic) -> Option<&BTreeMap<NodeId, TimeOffset>> {
        self.time_queries.get(topic).map(|q| &q.offsets)
    }

    /// Ends the time query of `topic` and returns what it heard.
    pub fn finish_time_query(&mut self, topic: &Topic) -> Option<BTreeMap<NodeId, TimeOffset>> {
        self.time_queries.remove(topic).map(|q| q.offsets)
    }

    /// Starts (or restarts) a query of the topics the store readers hold, or of the groups
    /// with offsets committed with them: sends a TOPICS-QUERY (GROUPS-QUERY) now, and again
    /// to every store reader that becomes reachable while it runs.
    pub fn query_names(&mut self, what: Listing) {
        let number = self.new_query_number();
        self.name_queries[what.slot()] = Some(Box::new(NamesAsk {
            number,
            names: BTreeSet::new(),
            answered: HashSet::new(),
        }));
        self.ask_names(what, number);
    }

    fn ask_names(&mut self, what: Listing, query: u64) {
        let consumer = self.config.id;
        self.transmit.push_back(match what {
            Listing::Topics => Message::TopicsQuery(TopicsQuery { consumer, query }),
            Listing::Groups => Message::GroupsQuery(GroupsQuery { consumer, query }),
        });
    }

    /// One store reader's answer to a list query.
    fn names_heard_from<'a>(
        &mut self,
        what: Listing,
        store: NodeId,
        query: u64,
        names: impl Iterator<Item = &'a Topic>,
    ) {
        if let Some(q) = &mut self.name_queries[what.slot()]
            && q.number == query
            && q.answered.len() < MAX_STORES
        {
            q.answered.insert(store);
            q.names.extend(names.cloned());
        }
    }

    /// Whether every store reader reachable now (at least one) answered the list query.
    pub fn names_answered(&self, what: Listing) -> bool {
        self.name_queries[what.slot()]
            .as_ref()
            .is_some_and(|q| self.all_reachable_in(&q.answered))
    }

    /// The names heard so far by the running list query (group names as the topics they
    /// are on the wire).
    pub fn names_heard(&self, what: Listing) -> Option<&BTreeSet<Topic>> {
        self.name_queries[what.slot()].as_ref().map(|q| &q.names)
    }

    /// Ends the list query and returns what it heard.
    pub fn finish_names_query(&mut self, what: Listing) -> Option<BTreeSet<Topic>> {
        self.name_queries[what.slot()].take().map(|q| q.names)
    }

    /// Starts a commit of `offsets` of `group` (`seek`: set them even backwards) to every
    /// store reader, now and to every one that becomes reachable while it runs: each answers
    /// once the offsets of the partitions it holds are on its disk. Replaces a commit or query
    /// of group offsets still running.
    pub fn commit_offsets(&mut self, group: GroupName, offsets: Vec<GroupOffset>, seek: bool) {
        let number = self.new_query_number();
        let request = Message::OffsetCommit(OffsetCommit {
            group: group.clone(),
            member: self.config.id,
            request: number,
            seek,
            offsets,
        });
        self.start_group_ask(request, number, group);
    }

    /// Starts a query of `group`'s committed offsets of `partitions` (all of them when
    /// empty), as [`commit_offsets`](Self::commit_offsets) sends a commit.
    pub fn query_committed(&mut self, group: GroupName, partitions: Vec<(Topic, NodeId)>) {
        let number = self.new_query_number();
        let request = Message::CommittedQuery(CommittedQuery {
            group: group.clone(),
            member: self.config.id,
            request: number,
            partitions,
        });
        self.start_group_ask(request, number, group);
    }

    fn start_group_ask(&mut self, request: Message, number: u64, group: GroupName) {
        self.transmit.push_back(request.clone());
        self.group_ask = Some(Box::new(GroupAsk {
            request,
            number,
            group,
            offsets: BTreeMap::new(),
            answered: HashSet::new(),
        }));
    }

    /// Whether every store reader reachable now (at least one) answered the running group
    /// offsets commit or query.
    pub fn group_answered(&self) -> bool {
        self.group_ask
            .as_ref()
            .is_some_and(|a| self.all_reachable_in(&a.answered))
    }

    /// What the stores answered so far to the running group offsets commit or query: per
    /// partition, the largest offset any of them holds (after the commit).
    pub fn group_heard(&self) -> Option<&BTreeMap<(Topic, NodeId), u64>> {
        self.group_ask.as_ref().map(|a| &a.offsets)
    }

    /// Whether a group offsets commit or query runs.
    pub fn group_asking(&self) -> bool {
        self.group_ask.is_some()
    }

    /// Ends the running group offsets commit or query and returns what it heard.
    pub fn finish_group_ask(&mut self) -> Option<BTreeMap<(Topic, NodeId), u64>> {
        self.group_ask.take().map(|a| a.offsets)
    }

    /// The number of a new HEADS-QUERY.
    fn new_query_number(&mut self) -> u64 {
        let number = self.next_query;
        self.next_query = self.next_query.wrapping_add(1);
        number
    }

    /// GET-HEADS (every store answers it) then HEADS-QUERY `number` (ours answer it again,
    /// then end with HEADS-END).
    fn ask_heads(&mut self, topic: Topic, number: u64) {
        self.transmit.push_back(Message::GetHeads(GetHeads {
            topic: topic.clone(),
            consumer: self.config.id,
        }));
        self.transmit.push_back(Message::HeadsQuery(HeadsQuery {
            consumer: self.config.id,
            topic,
            query: number,
        }));
    }

    /// Whether every store reader reachable now (at least one) has ended its answers to the
    /// running query of `topic` with a HEADS-END: then nothing more is coming from the stores
    /// that count, and the query can finish at once. A reference store never sends HEADS-END,
    /// so with one reachable this stays `false` and the caller waits for late answers instead.
    /// A HEADS-END follows its store's answers on the same connection and is sent only when
    /// none of them was dropped, so they are all in when it is.
    pub fn query_answered(&self, topic: &Topic) -> bool {
        self.queries
            .get(topic)
            .is_some_and(|q| self.all_reachable_in(&q.ended))
    }

    /// Whether at least one store reader is reachable now and every one is in `ended`.
    fn all_reachable_in(&self, ended: &HashSet<NodeId>) -> bool {
        let mut reachable = self.heard_by.intersection(&self.heard_from).peekable();
        reachable.peek().is_some() && reachable.all(|s| ended.contains(s))
    }

    /// A store said it holds a partition of `topic`.
    fn held(&mut self, topic: &Topic) {
        if let Some(c) = self.census.get_mut(topic) {
            c.held = true;
        }
    }

    /// Whether `topic` is subscribed and not held: every store reachable now (at least one)
    /// answered its census, none holds a partition of it, and no partition of it is known.
    fn not_held(&self, topic: &Topic) -> bool {
        self.census.get(topic).is_some_and(|c| {
            !c.held
                && self.all_reachable_in(&c.ended)
                && !self.partitions.keys().any(|(t, _)| t == topic)
        })
    }

    /// A HEADS-END of `topic`'s census arrived: says it once if the topic is not held.
    fn check_census(&mut self, topic: &Topic) {
        if self.not_held(topic)
            && let Some(c) = self.census.get_mut(topic)
            && !std::mem::replace(&mut c.said, true)
        {
            self.not_held.push_back(topic.clone());
        }
    }

    /// The subscribed topics no store holds, in subscription order: every store reader
    /// reachable now (at least one) ended its answer to the topic's HEADS-QUERY with a
    /// HEADS-END, none said it holds a partition of it, and no RECORD or HEAD of it came.
    /// Empty while no store answered (none reachable, or only reference stores, which send no
    /// HEADS-END): nothing is claimed before the stores have answered. A topic leaves it as
    /// soon as a partition of it is known.
    pub fn topics_not_held(&self) -> Vec<Topic> {
        self.topics
            .iter()
            .filter(|t| self.not_held(t))
            .cloned()
            .collect()
    }

    /// The next topic found not held (see [`topics_not_held`](Self::topics_not_held)), once
    /// per subscription, for the driver to log.
    pub fn poll_not_held(&mut self) -> Option<Topic> {
        self.not_held.pop_front()
    }

    /// What the query of `topic` heard so far: per partition, the highest low-water mark and
    /// the highest head any store reported. The highest mark, because a consumer that hears
    /// it skips to it too (see [`Consumer::handle_message`] on DIRECT-LOW-WATER): records below
    /// it may be lost to it even if another store still holds them. `None` when no query of
    /// `topic` runs.
    pub fn offsets(&self, topic: &Topic) -> Option<&BTreeMap<NodeId, Bounds>> {
        self.queries.get(topic).map(|q| &q.bounds)
    }

    /// Ends the query of `topic` and returns what it heard.
    pub fn finish_query(&mut self, topic: &Topic) -> Option<BTreeMap<NodeId, Bounds>> {
        self.queries.remove(topic).map(|q| q.bounds)
    }

    /// Store readers known to both hear this consumer (their `'W'` + id subscription reached
    /// its XPUB, so a GET-HEADS reaches them) and be heard by it (their STORE-HELLO arrived,
    /// so their answers reach it). Once one is, a query's answers from it are on their way.
    pub fn stores_reachable(&self) -> usize {
        self.heard_by.intersection(&self.heard_from).count()
    }

    /// Notes a store reader seen through its subscription (`by`: it hears us) or its
    /// STORE-HELLO; once it is both, every running query is sent again so it answers them,
    /// and every gap is FETCHed at once with its backoff restarted: FETCHes sent before any
    /// store heard us went nowhere, and their retry could be up to `fetch_retry_max` away (a
    /// new reader's first range waited 0.6 to 1.4 s for it).
    fn heard(&mut self, store: NodeId, by: bool, now: Instant) {
        if !by && self.heard_from.len() >= MAX_STORES {
            // Full of readers that said hello: forget those that no longer hear us (gone).
            let live = &self.heard_by;
            self.heard_from.retain(|s| live.contains(s));
        }
        let set = if by {
            &mut self.heard_by
        } else {
            &mut self.heard_from
        };
        if set.len() >= MAX_STORES || !set.insert(store) {
            return;
        }
        if self.heard_by.contains(&store) && self.heard_from.contains(&store) {
            let mut again: Vec<(Topic, u64)> = self
                .queries
                .iter()
                .map(|(t, q)| (t.clone(), q.number))
                .collect();
            // The censuses too, but of topics a store already said it holds: whether any store
            // holds a topic is answered only once every reachable one did.
            again.extend(
                self.census
                    .iter()
                    .filter(|(_, c)| !c.held)
                    .map(|(t, c)| (t.clone(), c.number)),
            );
            for (topic, number) in again {
                self.ask_heads(topic, number);
            }
            let times: Vec<(Topic, u64, i64)> = self
                .time_queries
                .iter()
                .map(|(t, q)| (t.clone(), q.number, q.time))
                .collect();
            for (topic, number, time) in times {
                self.ask_time(topic, number, time);
            }
            for what in [Listing::Topics, Listing::Groups] {
                if let Some(number) = self.name_queries[what.slot()].as_ref().map(|q| q.number) {
                    self.ask_names(what, number);
                }
            }
            if let Some(a) = &self.group_ask {
                self.transmit.push_back(a.request.clone());
            }
            // The first store to become reachable gets the FETCHes sent to nobody; a later one
            // is asked as their retries come (all of them at once would ask the stores
            // already answering for the same windows again).
            if self.stores_reachable() == 1 {
                let (ask, id) = (
                    Ask::All {
                        first: self.config.fetch_retry,
                    },
                    self.config.id,
                );
                retry::fetch_gaps(&mut self.partitions, now, ask, id, &mut self.transmit);
            }
            if self.next_heads.is_none() && !self.config.heads_refresh.is_zero() {
                self.next_heads = Some(now + self.config.heads_refresh);
            }
        }
    }

    /// Records an answer to a running query (at most `max_partitions` partitions per topic).
    fn answer(&mut self, topic: &Topic, producer: NodeId, update: impl FnOnce(&mut Bounds)) {
        let max = self.config.max_partitions;
        let Some(query) = self.queries.get_mut(topic).map(|q| &mut q.bounds) else {
            return;
        };
        if !query.contains_key(&producer) && query.len() >= max {
            return;
        }
        let bounds = query.entry(producer).or_insert(Bounds { low: 0, end: 0 });
        update(bounds);
    }

    /// A CONSUMER-HELLO to `store`, when the consumer has topics: 46/DAFKA, "a consumer SHALL
    /// NOT send a CONSUMER-HELLO without topics" (an assigned consumer, as a partition
    /// reader, has none: it asks with GET-HEADS and HEADS-QUERY instead).
    fn hello(&mut self, store: NodeId) {
        if self.topics.is_empty() {
            return;
        }
        self.transmit
            .push_back(Message::ConsumerHello(ConsumerHello {
                store,
                consumer: self.config.id,
                topics: self.topics.clone(),
            }));
    }

    fn check_to(&self, kind: Kind, to: &NodeId) -> Result<(), PeerError> {
        if *to == self.config.id {
            Ok(())
        } else {
            Err(PeerError::NotForUs {
                kind: kind.name(),
                to: *to,
            })
        }
    }

    /// The key of a message's partition, created at `start` if new. `None`: the partition is
    /// not tracked and its topic not subscribed (exact match), so the message is dropped.
    fn partition(
        &mut self,
        topic: &Topic,
        producer: NodeId,
        start: u64,
    ) -> Result<Option<(Topic, NodeId)>, PeerError> {
        let key = (topic.clone(), producer);
        if self.partitions.contains_key(&key) {
            return Ok(Some(key));
        }
        if !self.topics.contains(topic) {
            self.dropped += 1;
            return Ok(None);
        }
        if self.partitions.len() >= self.config.max_partitions {
            return Err(PeerError::PartitionLimit {
                max: self.config.max_partitions,
            });
        }
        let next = match self.config.offset_reset {
            OffsetReset::Earliest => 0,
            OffsetReset::Latest => start,
            OffsetReset::Assigned => {
                self.dropped += 1;
                return Ok(None);
            }
        };
        self.partitions.insert(key.clone(), Partition::new(next));
        Ok(Some(key))
    }

    fn on_head(
        &mut self,
        topic: &Topic,
        producer: NodeId,
        sequence: u64,
        now: Instant,
    ) -> Result<(), PeerError> {
        // "Latest": after the head, which was written before the consumer met the partition.
        let Some(key) = self.partition(topic, producer, sequence.saturating_add(1))? else {
            return Ok(());
        };
        if let Some(p) = self.partitions.get_mut(&key) {
            p.head = Some(p.head.map_or(sequence, |h| h.max(sequence)));
        }
        self.refetch(&key, now);
        Ok(())
    }

    /// A store no longer holds the offsets below `low` (retention): a partition positioned
    /// below it skips to it (nobody can serve the records before), and an "earliest" consumer
    /// starts a new partition there. A "latest" consumer does not learn partitions from it.
    fn on_low_water(
        &mut self,
        topic: &Topic,
        producer: NodeId,
        low: u64,
        now: Instant,
    ) -> Result<(), PeerError> {
        let key = (topic.clone(), producer);
        if !self.partitions.contains_key(&key) && self.config.offset_reset != OffsetReset::Earliest
        {
            return Ok(());
        }
        let Some(key) = self.partition(topic, producer, low)? else {
            return Ok(());
        };
        if self.partitions.get(&key).is_some_and(|p| p.next < low) {
            self.skip_to(key, low, now)?;
        }
        Ok(())
    }

    /// A store lacks offsets `from..to` below its head (DIRECT-MISSING). Only offsets at the
    /// partition's next one count (later ones are FETCHed, and so reported, when it gets
    /// there); skipped once every reachable store said so, or one said so
    /// [`MISSING_REPORTS`] times with nobody delivering them.
    fn on_missing(&mut self, d: &DirectMissing, now: Instant) -> Result<(), PeerError> {
        let key = (d.topic.clone(), d.producer);
        let Some(p) = self.partitions.get_mut(&key) else {
            return Ok(());
        };
        if p.next < d.from || p.next >= d.to_offset {
            return Ok(());
        }
        let to = p.until.map_or(d.to_offset, |u| d.to_offset.min(u));
        let m = match &mut p.missing {
            Some(m) if m.at == p.next => m,
            slot => slot.insert(Missing {
                at: p.next,
                to,
                stores: HashSet::new(),
                reports: 0,
            }),
        };
        m.to = m.to.min(to);
        m.reports += 1;
        if m.stores.len() < MAX_STORES {
            m.stores.insert(d.store);
        }
        // Every store reachable both ways (hello each way) said so.
        let mut reachable = self.heard_by.intersection(&self.heard_from).peekable();
        let all = reachable.peek().is_some() && reachable.all(|s| m.stores.contains(s));
        if !all && m.reports < MISSING_REPORTS {
            return Ok(());
        }
        let (from, to) = (p.next, m.to);
        self.lost += to - from;
        self.losses.push_back(Loss {
            topic: d.topic.clone(),
            partition: d.producer,
            from,
            to,
        });
        self.skip_to(key, to, now)
    }

    /// A store holds the partition up to `end`: a position past the end the stores hold is
    /// noted, to be said once every store had time to answer.
    fn on_stores_end(&mut self, topic: &Topic, producer: NodeId, end: u64, now: Instant) {
        let Some(p) = self.partitions.get_mut(&(topic.clone(), producer)) else {
            return;
        };
        let end = p.stores_end.map_or(end, |e| e.max(end));
        p.stores_end = Some(end);
        if p.next <= end || p.said_past {
            p.past_since = None;
        } else if p.past_since.is_none() {
            p.past_since = Some(now);
        }
    }

    /// Says (once per position) which partitions stayed past the stores' end for
    /// `fetch_retry` after a store said where it ends.
    fn check_past_end(&mut self, now: Instant) {
        let wait = self.config.fetch_retry;
        for ((topic, partition), p) in self.partitions.iter_mut() {
            let (Some(since), Some(end)) = (p.past_since, p.stores_end) else {
                continue;
            };
            if now < since + wait {
                continue;
            }
            p.past_since = None;
            if p.next > end {
                p.said_past = true;
                self.past_end.push_back(PastEnd {
                    topic: topic.clone(),
                    partition: *partition,
                    next: p.next,
                    end,
                });
            }
        }
    }

    /// The next partition found positioned past the end the stores hold (once per position),
    /// for the driver to log: it waits for records to be written there.
    pub fn poll_past_end(&mut self) -> Option<PastEnd> {
        self.past_end.pop_front()
    }

    /// Moves a partition's next offset up to `to` (nobody can serve the offsets before it):
    /// drops what is held below it, delivers what is held from it on, FETCHes the rest.
    fn skip_to(&mut self, key: (Topic, NodeId), to: u64, now: Instant) -> Result<(), PeerError> {
        let Some(p) = self.partitions.get_mut(&key) else {
            return Ok(());
        };
        p.next = to;
        self.reorder_bytes -= p.drop_held_below(to);
        p.retry = None;
        p.missing = None;
        // Records held from `to` on are now next in line.
        if let Some(held) = p.reorder.remove(&to) {
            self.reorder_bytes -= held.len();
            let one = std::iter::once((held.content, held.meta));
            return self.on_run(&key.0, key.1, to, one, now);
        }
        self.refetch(&key, now);
        Ok(())
    }

    fn on_record(
        &mut self,
        record: Record,
        meta: Option<RecordMeta>,
        now: Instant,
    ) -> Result<(), PeerError> {
        let first = record.sequence;
        let one = std::iter::once((record.content, meta));
        self.on_run(&record.topic, record.producer, first, one, now)
    }

    /// Records `first`, `first + 1`, ... of one partition: one (RECORD, META-RECORD,
    /// DIRECT-RECORD) or a run (DIRECT-RECORDS, DIRECT-META-RECORDS), taken as that many
    /// records one after the other, with the partition looked up and its FETCH state updated
    /// once. `metas`, when given, has one entry per content.
    fn on_run(
        &mut self,
        topic: &Topic,
        producer: NodeId,
        first: u64,
        records: impl ExactSizeIterator<Item = (Bytes, Option<RecordMeta>)>,
        now: Instant,
    ) -> Result<(), PeerError> {
        let Some(last) = (records.len() as u64)
            .checked_sub(1)
            .and_then(|n| first.checked_add(n))
        else {
            return Ok(());
        };
        let key = (topic.clone(), producer);
        let max = self.config.max_partitions;
        // A record of a subscribed topic may start a partition (but for an "assigned"
        // consumer); any other record must be of a partition tracked already (an assigned
        // range, read without subscribing).
        let start = match self.config.offset_reset {
            _ if !self.topics.contains(topic) => None,
            OffsetReset::Earliest => Some(0),
            OffsetReset::Latest => Some(first),
            OffsetReset::Assigned => None,
        };
        let p = match start {
            Some(start) => {
                retry::partition_entry(&mut self.partitions, key, max, || Partition::new(start))
                    .ok_or(PeerError::PartitionLimit { max })?
            }
            None => match self.partitions.get_mut(&key) {
                Some(p) => p,
                None => {
                    self.dropped += records.len() as u64;
                    return Ok(());
                }
            },
        };
        p.head = Some(p.head.map_or(last, |h| h.max(last)));
        // Nothing at or past a range's end, nor at u64::MAX (no offset could follow it).
        let end = p.until.unwrap_or(u64::MAX);
        for (seq, (content, meta)) in (first..=last).zip(records) {
            if seq < p.next || seq >= end || p.reorder.contains_key(&seq) {
                self.dropped += 1;
                continue;
            }
            if seq > p.next {
                let room = self.config.max_reorder_bytes - self.reorder_bytes;
                let held = Held { content, meta };
                if p.reorder.len() < self.config.max_reorder && held.len() <= room {
                    self.reorder_bytes += held.len();
                    p.reorder.insert(seq, held);
                } else {
                    // No room: it is fetched again once the gap before it closes.
                    self.dropped += 1;
                }
                continue;
            }
            let mut next = Held { content, meta };
            loop {
                self.deliveries.push_back(Delivery {
                    topic: topic.clone(),
                    partition: producer,
                    offset: p.next,
                    content: next.content,
                    meta: next.meta,
                });
                p.next += 1;
                match p.reorder.first_entry() {
                    // Nothing at or past `end` is ever held.
                    Some(entry) if *entry.key() == p.next => {
                        next = entry.remove();
                        self.reorder_bytes -= next.len();
                    }
                    _ => break,
                }
            }
        }
        let fetch = (self.config.fetch_retry, self.config.id);
        let had_gap = p.retry.is_some();
        retry::refetch_in(p, (topic, producer), now, fetch, &mut self.transmit);
        if had_gap && p.retry.is_none() && p.head.is_some_and(|h| p.next > h) {
            // A gap just closed up to the known head: the stream was lossy, and what was lost
            // may include the partition's last records and its producer's last HEAD. Ask for
            // the heads soon rather than at the next refresh (at most once a second).
            let mut soon = now + self.config.fetch_retry;
            if let Some(asked) = self.heads_asked {
                soon = soon.max(asked + HEADS_AFTER_GAP_EVERY);
            }
            self.next_heads = self.next_heads.map(|at| at.min(soon));
        }
        Ok(())
    }

    /// After a partition changed: FETCH a gap not asked for yet at once; forget the retry once
    /// the gap closed.
    fn refetch(&mut self, key: &(Topic, NodeId), now: Instant) {
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

    /// Retries every FETCH whose time has come, doubling its backoff; asks the stores for the
    /// topics' heads again when that is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        let ask = Ask::Due {
            max: self.config.fetch_retry_max,
        };
        let id = self.config.id;
        retry::fetch_gaps(&mut self.partitions, now, ask, id, &mut self.transmit);
        self.check_past_end(now);
        if self.next_heads.is_some_and(|at| now >= at) {
            self.next_heads = Some(now + self.config.heads_refresh);
            self.heads_asked = Some(now);
            for topic in &self.topics {
                self.transmit.push_back(Message::GetHeads(GetHeads {
                    topic: topic.clone(),
                    consumer: id,
                }));
            }
        }
    }

    /// The driver reads again after a pause (its queue of records was full): every FETCH
    /// retry is put off to [`fetch_retry`](ConsumerConfig::fetch_retry) from `now`, so that
    /// what the stores sent meanwhile, still unread, can arrive first (a retry makes a store
    /// send it again).
    pub fn resume(&mut self, now: Instant) {
        retry::put_off_all(&mut self.partitions, now, self.config.fetch_retry);
    }

    /// The earliest FETCH retry, the next time the topics' heads are asked for, or when a
    /// position past the stores' end is to be said.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let past = self
            .partitions
            .values()
            .filter_map(|p| p.past_since)
            .min()
            .map(|since| since + self.config.fetch_retry);
        [retry::earliest(&self.partitions), self.next_heads, past]
            .into_iter()
            .flatten()
            .min()
    }

    /// The next message to publish (FETCH, GET-HEADS, CONSUMER-HELLO).
    pub fn poll_transmit(&mut self) -> Option<Message> {
        self.transmit.pop_front()
    }

    /// The next record, in offset order per partition.
    pub fn poll_record(&mut self) -> Option<Delivery> {
        self.deliveries.pop_front()
    }

    /// Records dropped: duplicates, other topics (prefix matches), no room to reorder.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The next run of offsets skipped because no store that answers holds them (damaged on
    /// disk; see [`MISSING_REPORTS`]), for the driver to log and the application to learn of.
    pub fn poll_loss(&mut self) -> Option<Loss> {
        self.losses.pop_front()
    }

    /// Offsets skipped so far because no store that answers holds them.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Content bytes held out of order.
    pub fn reorder_bytes(&self) -> usize {
        self.reorder_bytes
    }
}

/// `'T'` first: a producer that sees a peer subscribed to META-RECORDs of the topic sends
/// them, and RECORDs only to peers subscribed to those alone (a reference consumer); RECORD
/// stays subscribed for reference producers.
fn topic_subscriptions(topic: &Topic) -> [Bytes; 3] {
    [
        subscription::topic_exact(Kind::MetaRecord, topic),
        subscription::topic_exact(Kind::Record, topic),
        subscription::topic_exact(Kind::Head, topic),
    ]
}
