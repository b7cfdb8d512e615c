//! The producer state machine: one topic, one partition (named by the producer's id).
//!
//! * [`Producer::send`] gives a record the next offset (from [`ProducerConfig::first_offset`],
//!   0 for a new partition) and queues a RECORD.
//! * After the first record, a HEAD with the last offset is due every
//!   [`ProducerConfig::head_interval`], forever (as the reference does, so a consumer or store
//!   that missed the tail learns of it).
//! * Records stay in a bounded unacknowledged buffer ([`ProducerConfig::max_unacked_records`],
//!   [`ProducerConfig::max_unacked_bytes`]); a full buffer refuses [`Producer::send`] with
//!   [`SendError::Full`] (the driver waits for ACKs up to its timeout, then raises).
//! * Each record carries its [`RecordMeta`] (timestamp, key, headers) and goes out as
//!   META-RECORD; the driver also sends it as RECORD (the value only) when a peer subscribed
//!   to RECORDs of the topic and not to META-RECORDs (a reference consumer or store).
//! * FETCH is answered from that buffer (DIRECT-META-RECORDS to a node whose `'V'` + id
//!   subscription reached the producer's XPUB, else DIRECT-RECORDs), in ascending order, each carrying
//!   the content of its own offset (the reference serves wrong contents past its first 256
//!   unacknowledged records; `tests/producer.rs` checks ours does not). Answers are generated
//!   lazily from at most [`ProducerConfig::max_pending_fetches`] pending ranges, so a flood of
//!   FETCHes costs no memory beyond that.
//! * ACKs are cumulative. Records are released once [`ProducerConfig::min_acks`] distinct stores
//!   have acknowledged them. A reference ACK names no store, so with `min_acks` 1 the producer
//!   takes ACKs (`'K'`) from any store, and with `min_acks` > 1 it takes only STORE-ACKs
//!   (`'A'`, an extension our stores send beside each ACK, naming the store writer): distinct
//!   stores of ours are counted, reference stores not at all.
//!
//! * Resuming a saved partition id ([`Producer::start_resume`]): the producer asks the stores
//!   for its partition's head with GET-HEADS (its own id in the consumer field; a store reader
//!   answers any node with DIRECT-HEADs, so no new message is needed), again every
//!   [`ProducerConfig::resume_retry`] while the driver waits, and takes the highest DIRECT-HEAD
//!   heard before its first record: its first offset is one past it.
//!
//! Time is passed in; the driver calls [`Producer::handle_timeout`] at
//! [`Producer::poll_timeout`] and publishes every message [`Producer::poll_transmit`] returns
//! on its PUB socket.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::error::{CallerError, PeerError, SendError};
use crate::id::{NodeId, Topic};
use crate::message::{
    Ack, DirectHead, DirectMetaRecords, DirectRecord, DirectRecords, Fetch, GetHeads, Head, Kind,
    Limits, Message, MetaRecord, MetaRecordRef, Record, RefusalReason, StoreRefusal,
};
use crate::record::{Header, RecordMeta, payload_len};
use crate::subscription;

/// Settings of a [`Producer`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProducerConfig {
    /// The producer's id, which names its partition.
    pub id: NodeId,
    /// The one topic it produces to.
    pub topic: Topic,
    /// The offset of the first record: 0 for a new partition, one past the highest offset the
    /// stores hold when resuming a saved partition id.
    pub first_offset: u64,
    /// Interval between HEADs (the reference: 1 s).
    pub head_interval: Duration,
    /// Most records held unacknowledged.
    pub max_unacked_records: usize,
    /// Most content bytes held unacknowledged.
    pub max_unacked_bytes: usize,
    /// Largest record accepted by [`Producer::send`].
    pub max_record: usize,
    /// Distinct stores that must acknowledge a record before it is released.
    pub min_acks: usize,
    /// Most FETCH answers waiting to be sent; further FETCHes are dropped (their senders retry).
    pub max_pending_fetches: usize,
    /// Most distinct stores whose ACK positions are tracked.
    pub max_stores: usize,
    /// Interval between GET-HEADS while resuming.
    pub resume_retry: Duration,
}

impl ProducerConfig {
    /// Defaults: offset 0, HEAD every second, 1 000 000 records or 256 MiB unacknowledged,
    /// records up to 1 MiB, one ACK suffices, 64 pending FETCH answers, 64 stores.
    pub fn new(id: NodeId, topic: Topic) -> Self {
        ProducerConfig {
            id,
            topic,
            first_offset: 0,
            head_interval: Duration::from_secs(1),
            max_unacked_records: 1_000_000,
            max_unacked_bytes: 256 << 20,
            // The store engine's default limit (`dafka_store::Config::max_record_bytes`): one
            // limit for the cluster, so a record a store would not keep is refused at `send`.
            max_record: 1 << 20,
            min_acks: 1,
            max_pending_fetches: 64,
            max_stores: 64,
            resume_retry: Duration::from_millis(200),
        }
    }

    fn validate(&self) -> Result<(), CallerError> {
        if self.min_acks == 0 {
            return Err(CallerError::Config("min_acks must be at least 1"));
        }
        if self.min_acks > self.max_stores {
            return Err(CallerError::Config("min_acks must not exceed max_stores"));
        }
        if self.max_unacked_records == 0 || self.max_unacked_bytes == 0 {
            return Err(CallerError::Config(
                "the unacknowledged buffer must hold a record",
            ));
        }
        if self.head_interval.is_zero() {
            return Err(CallerError::Config("head_interval must not be zero"));
        }
        Ok(())
    }
}

/// A FETCH answer still being sent: DIRECT-RECORDs `next..end` to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Answer {
    to: NodeId,
    next: u64,
    end: u64,
}

/// The producer state machine. See the [module docs](self).
#[derive(Debug)]
pub struct Producer {
    config: ProducerConfig,
    /// Contents and metadata of offsets `base..next_offset`, oldest first.
    unacked: VecDeque<(Bytes, RecordMeta)>,
    unacked_bytes: usize,
    /// The lowest offset still held.
    base: u64,
    /// Offsets below this have gone out as RECORDs.
    sent_upto: u64,
    /// The offset the next record gets.
    next_offset: u64,
    /// When the next HEAD is due; `None` until the first record.
    next_head: Option<Instant>,
    head_due: bool,
    answers: VecDeque<Answer>,
    dropped_fetches: u64,
    /// Highest offset each store acknowledged (`None`: a store that did not say who it is).
    store_acks: Vec<(Option<NodeId>, u64)>,
    /// While resuming: when the next GET-HEADS is due.
    resume_at: Option<Instant>,
    get_heads_due: bool,
    /// The highest partition head a store reported while resuming.
    resume_heard: Option<u64>,
    /// STORE-REFUSALs not yet polled by the driver (to log), at most [`MAX_REFUSALS`].
    refusals: VecDeque<StoreRefusal>,
    /// The last "store failed" refusal heard since the acknowledgements last moved on.
    failure: Option<StoreRefusal>,
    /// Records stores skipped as too large, not yet reported ([`Producer::take_skipped`]),
    /// at most [`MAX_REFUSALS`].
    skipped: Vec<StoreRefusal>,
    /// The "too large" refusals already heard (store, offset), the last [`MAX_REFUSALS`]:
    /// a store repeats its last ones with the ACKs it sends for HEADs, in case they were
    /// lost, and a record is reported once.
    heard_too_large: VecDeque<(NodeId, u64)>,
    /// Nodes whose `'V'` + id subscription reached the producer's XPUB (at most
    /// [`MAX_LISTENING`]): FETCHes from them are answered with DIRECT-META-RECORDS.
    meta_listeners: HashSet<NodeId>,
}

/// Most nodes a [`Producer`] remembers as taking DIRECT-META-RECORDS; past it, a new one is
/// answered with DIRECT-RECORDs (values only) until one leaves.
pub const MAX_LISTENING: usize = 4096;

/// Most STORE-REFUSALs a [`Producer`] keeps of each sort until they are taken.
pub const MAX_REFUSALS: usize = 64;

impl Producer {
    /// A producer with `config`, or the reason the configuration is invalid.
    pub fn new(config: ProducerConfig) -> Result<Self, CallerError> {
        config.validate()?;
        let first = config.first_offset;
        Ok(Producer {
            config,
            unacked: VecDeque::new(),
            unacked_bytes: 0,
            base: first,
            sent_upto: first,
            next_offset: first,
            next_head: None,
            head_due: false,
            answers: VecDeque::new(),
            dropped_fetches: 0,
            store_acks: Vec::new(),
            resume_at: None,
            get_heads_due: false,
            resume_heard: None,
            refusals: VecDeque::new(),
            failure: None,
            skipped: Vec::new(),
            heard_too_large: VecDeque::new(),
            meta_listeners: HashSet::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ProducerConfig {
        &self.config
    }

    /// The subscriptions of the producer's SUB socket: `'K'` (with `min_acks` 1) or `'A'`
    /// (STORE-ACK, the extension that names the store, with `min_acks` > 1), `'F'` and
    /// `'X'` (STORE-REFUSAL, the extension) + its id.
    pub fn subscriptions(&self) -> [Bytes; 3] {
        let acks = if self.config.min_acks > 1 {
            Kind::StoreAck
        } else {
            Kind::Ack
        };
        [
            subscription::node(acks, &self.config.id),
            subscription::node(Kind::Fetch, &self.config.id),
            subscription::node(Kind::StoreRefusal, &self.config.id),
        ]
    }

    /// The subscription that brings DIRECT-HEADs while resuming: `'E'` + its id.
    pub fn resume_subscription(&self) -> Bytes {
        subscription::node(Kind::DirectHead, &self.config.id)
    }

    /// Starts asking the stores for the partition's head (GET-HEADS now and every
    /// [`ProducerConfig::resume_retry`]) until [`finish_resume`](Self::finish_resume).
    pub fn start_resume(&mut self, now: Instant) {
        self.get_heads_due = true;
        self.resume_at = Some(now + self.config.resume_retry);
    }

    /// Stops asking; returns the highest head heard (`None`: no store answered).
    pub fn finish_resume(&mut self) -> Option<u64> {
        self.resume_at = None;
        self.get_heads_due = false;
        self.resume_heard
    }

    /// The highest head a store reported while resuming.
    pub fn resume_heard(&self) -> Option<u64> {
        self.resume_heard
    }

    /// A store's DIRECT-HEAD: before the first record, the next offset moves past it.
    fn on_direct_head(&mut self, dh: &DirectHead) -> Result<(), PeerError> {
        if dh.to != self.config.id {
            return Err(PeerError::NotForUs {
                kind: Kind::DirectHead.name(),
                to: dh.to,
            });
        }
        // A store lists every partition of the topic: only ours matters.
        if dh.head.producer != self.config.id || dh.head.topic != self.config.topic {
            return Ok(());
        }
        let seq = dh.head.sequence;
        if self.resume_at.is_some() {
            self.resume_heard = Some(self.resume_heard.map_or(seq, |h| h.max(seq)));
        }
        let untouched = self.unacked.is_empty() && self.sent_upto == self.next_offset;
        if untouched && self.next_head.is_none() && seq >= self.next_offset {
            self.next_offset = seq + 1;
            self.base = self.next_offset;
            self.sent_upto = self.next_offset;
        }
        Ok(())
    }

    /// Queues a record with its metadata and returns its offset. The record's size is its
    /// value, key and headers ([`RecordMeta::payload_len`]), checked against
    /// [`ProducerConfig::max_record`].
    pub fn send(
        &mut self,
        content: Bytes,
        meta: RecordMeta,
        now: Instant,
    ) -> Result<u64, SendError> {
        let len = self.check_meta(content.len(), &meta)?;
        if self.unacked.len() >= self.config.max_unacked_records
            || self.unacked_bytes + len > self.config.max_unacked_bytes
        {
            return Err(SendError::Full {
                records: self.unacked.len(),
                bytes: self.unacked_bytes,
                max_records: self.config.max_unacked_records,
                max_bytes: self.config.max_unacked_bytes,
            });
        }
        let offset = self.next_offset;
        self.unacked_bytes += len;
        self.unacked.push_back((content, meta));
        self.next_offset += 1;
        if self.next_head.is_none() {
            // 46/DAFKA: "After the producer published its first record it SHALL send HEAD
            // commands at a fixed interval."
            self.next_head = Some(now + self.config.head_interval);
        }
        Ok(offset)
    }

    /// Whether a record of `content_len` bytes with `key` and `headers` may be sent: its size
    /// (value, key and headers) within [`ProducerConfig::max_record`], its headers within what
    /// readers take ([`Limits::DEFAULT`]'s `max_headers`). Returns the size. What
    /// [`send`](Self::send) checks, for a caller that checks a whole batch before sending any.
    pub fn check(
        &self,
        content_len: usize,
        key: Option<&[u8]>,
        headers: Option<&[Header]>,
    ) -> Result<usize, CallerError> {
        self.check_sizes(
            content_len + payload_len(key, headers),
            headers.map_or(0, <[Header]>::len),
        )
    }

    /// [`check`](Self::check) of a record of `content_len` bytes with `meta`.
    pub fn check_meta(&self, content_len: usize, meta: &RecordMeta) -> Result<usize, CallerError> {
        self.check_sizes(
            content_len + meta.payload_len(),
            meta.header_count().unwrap_or(0),
        )
    }

    /// [`check`](Self::check) of a record of `len` bytes (value, key and headers) with `count`
    /// headers.
    fn check_sizes(&self, len: usize, count: usize) -> Result<usize, CallerError> {
        if len > self.config.max_record {
            return Err(CallerError::RecordTooLarge {
                len,
                max: self.config.max_record,
            });
        }
        let max = Limits::DEFAULT.max_headers;
        if count > max {
            return Err(CallerError::TooManyHeaders { count, max });
        }
        Ok(len)
    }

    /// Handles a message from the producer's SUB socket (ACK or FETCH; anything else is not for
    /// a producer and is ignored). `store` is the ACK's sender when the driver knows it.
    pub fn handle_message(
        &mut self,
        message: &Message,
        store: Option<NodeId>,
    ) -> Result<(), PeerError> {
        match message {
            // With min_acks > 1 only STORE-ACKs count: a reference ACK cannot say which store
            // sent it, and counting both forms would count one of our stores twice.
            Message::Ack(ack) if self.config.min_acks == 1 => self.handle_ack(ack, store),
            Message::StoreAck(a) => self.handle_ack(&a.ack, Some(a.store)),
            Message::Fetch(fetch) => self.handle_fetch(fetch),
            Message::DirectHead(dh) => self.on_direct_head(dh),
            Message::StoreRefusal(r) => self.on_refusal(r),
            _ => Ok(()),
        }
    }

    /// A store refused records of this partition: a record too large for it (skipped there:
    /// kept for [`take_skipped`](Self::take_skipped)), or it can no longer write (kept as
    /// [`failure`](Self::failure) until the acknowledgements move on).
    fn on_refusal(&mut self, r: &StoreRefusal) -> Result<(), PeerError> {
        self.check_addressed(Kind::StoreRefusal, &r.producer, &r.topic)?;
        if r.reason == RefusalReason::TooLarge {
            let heard = (r.store, r.sequence);
            if self.heard_too_large.contains(&heard) {
                return Ok(());
            }
            if self.heard_too_large.len() >= MAX_REFUSALS {
                self.heard_too_large.pop_front();
            }
            self.heard_too_large.push_back(heard);
        }
        if self.refusals.len() >= MAX_REFUSALS {
            self.refusals.pop_front();
        }
        self.refusals.push_back(r.clone());
        match r.reason {
            RefusalReason::TooLarge => {
                if self.skipped.len() < MAX_REFUSALS {
                    self.skipped.push(r.clone());
                }
            }
            _ => self.failure = Some(r.clone()),
        }
        Ok(())
    }

    /// The next STORE-REFUSAL heard, for the driver to log.
    pub fn poll_refusal(&mut self) -> Option<StoreRefusal> {
        self.refusals.pop_front()
    }

    /// The last refusal of a store that can no longer write, heard since the
    /// acknowledgements last moved on (with `min_acks` 1 a healthy store's ACKs clear it).
    pub fn failure(&self) -> Option<&StoreRefusal> {
        self.failure.as_ref()
    }

    /// Records stores skipped as too large since the last call.
    pub fn take_skipped(&mut self) -> Vec<StoreRefusal> {
        std::mem::take(&mut self.skipped)
    }

    /// A store acknowledges every offset up to `ack.sequence`.
    pub fn handle_ack(&mut self, ack: &Ack, store: Option<NodeId>) -> Result<(), PeerError> {
        self.check_addressed(Kind::Ack, &ack.producer, &ack.topic)?;
        if ack.sequence >= self.next_offset {
            return Err(PeerError::AckBeyondHead {
                acked: ack.sequence,
                next: self.next_offset,
            });
        }
        match self.store_acks.iter_mut().find(|(s, _)| *s == store) {
            Some((_, seq)) => *seq = (*seq).max(ack.sequence),
            None => {
                if self.store_acks.len() >= self.config.max_stores {
                    // Forget the store furthest behind: it counts least towards min_acks.
                    if let Some(i) =
                        (0..self.store_acks.len()).min_by_key(|&i| self.store_acks[i].1)
                    {
                        self.store_acks.swap_remove(i);
                    }
                }
                self.store_acks.push((store, ack.sequence));
            }
        }
        if let Some(acked) = self.acked_through() {
            if acked >= self.base {
                // Records are being stored again: a store's failure no longer holds us up.
                self.failure = None;
            }
            self.release_through(acked);
        }
        Ok(())
    }

    /// A consumer or store asks for `fetch.count` records from `fetch.sequence` on. Records
    /// still held (sent and not yet released) are answered, lazily, by
    /// [`poll_transmit`](Self::poll_transmit).
    pub fn handle_fetch(&mut self, fetch: &Fetch) -> Result<(), PeerError> {
        self.check_addressed(Kind::Fetch, &fetch.producer, &fetch.topic)?;
        let next = fetch.sequence.max(self.base);
        let end = fetch
            .sequence
            .saturating_add(u64::from(fetch.count))
            .min(self.sent_upto);
        if next >= end {
            return Ok(());
        }
        // The same requester asking again (the reference retries on every HEAD and RECORD):
        // widen the pending answer instead of queueing a second copy.
        if let Some(a) = self.answers.iter_mut().find(|a| a.to == fetch.sender) {
            a.next = a.next.min(next);
            a.end = a.end.max(end);
            return Ok(());
        }
        if self.answers.len() >= self.config.max_pending_fetches {
            self.dropped_fetches += 1;
            return Ok(());
        }
        self.answers.push_back(Answer {
            to: fetch.sender,
            next,
            end,
        });
        Ok(())
    }

    fn check_addressed(
        &self,
        kind: Kind,
        producer: &NodeId,
        topic: &Topic,
    ) -> Result<(), PeerError> {
        if *producer != self.config.id {
            return Err(PeerError::NotForUs {
                kind: kind.name(),
                to: *producer,
            });
        }
        if *topic != self.config.topic {
            return Err(PeerError::WrongTopic {
                kind: kind.name(),
                got: topic.to_string(),
                ours: self.config.topic.to_string(),
            });
        }
        Ok(())
    }

    /// Marks a HEAD (or, while resuming, a GET-HEADS) due when its time has come.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(at) = self.resume_at
            && now >= at
        {
            self.get_heads_due = true;
            self.resume_at = Some(now + self.config.resume_retry);
        }
        if let Some(due) = self.next_head
            && now >= due
        {
            self.head_due = true;
            let next = due + self.config.head_interval;
            // A driver that woke late does not get a burst of HEADs.
            self.next_head = Some(if next > now {
                next
            } else {
                now + self.config.head_interval
            });
        }
    }

    /// Makes a HEAD due now, if a record was sent: a consumer that lost the partition's last
    /// records learns where it ends without waiting for the next interval. The node sends one
    /// when `flush` returns and when it closes, so the tail of a producer that stops right
    /// after its last records is FETCHed (from the stores) rather than never noticed.
    pub fn announce_head(&mut self) {
        if self.next_head.is_some() && self.next_offset > 0 {
            self.head_due = true;
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due: the next HEAD or GET-HEADS.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.next_head, self.resume_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next record to publish as META-RECORD, borrowed: what [`poll_transmit`]
    /// returns first, for a caller that encodes it straight into frames
    /// ([`MetaRecordRef::frames_with`]) with no [`Message`] built per record.
    ///
    /// [`poll_transmit`]: Self::poll_transmit
    pub fn poll_record(&mut self) -> Option<MetaRecordRef<'_>> {
        if self.sent_upto >= self.next_offset {
            return None;
        }
        let offset = self.sent_upto;
        self.sent_upto += 1;
        let (content, meta) = self.unacked_at(offset)?;
        Some(MetaRecordRef {
            producer: &self.config.id,
            topic: &self.config.topic,
            sequence: offset,
            content,
            meta,
        })
    }

    /// The next message to publish: RECORDs in offset order (as META-RECORD), then a due
    /// HEAD, then FETCH answers.
    pub fn poll_transmit(&mut self) -> Option<Message> {
        if self.sent_upto < self.next_offset {
            let offset = self.sent_upto;
            self.sent_upto += 1;
            let (record, meta) = self.record(offset)?;
            return Some(Message::MetaRecord(MetaRecord { record, meta }));
        }
        if self.get_heads_due {
            self.get_heads_due = false;
            return Some(Message::GetHeads(GetHeads {
                topic: self.config.topic.clone(),
                consumer: self.config.id,
            }));
        }
        if self.head_due {
            self.head_due = false;
            return Some(Message::Head(Head {
                producer: self.config.id,
                topic: self.config.topic.clone(),
                sequence: self.next_offset - 1,
            }));
        }
        while let Some(answer) = self.answers.front_mut() {
            // Records released since the FETCH are skipped: the stores that acked them answer.
            let offset = answer.next.max(self.base);
            if offset >= answer.end {
                self.answers.pop_front();
                continue;
            }
            answer.next = offset + 1;
            let to = answer.to;
            if answer.next >= answer.end {
                self.answers.pop_front();
            }
            let (record, meta) = self.record(offset)?;
            if !self.meta_listeners.contains(&to) {
                return Some(Message::DirectRecord(DirectRecord { to, record }));
            }
            return Some(Message::DirectMetaRecords(DirectMetaRecords {
                run: DirectRecords {
                    to,
                    producer: record.producer,
                    topic: record.topic,
                    first: record.sequence,
                    contents: vec![record.content],
                },
                metas: vec![meta],
            }));
        }
        None
    }

    /// A subscription that reached the producer's XPUB: `'V'` + a node's id means FETCHes
    /// from that node are answered with DIRECT-META-RECORDS. Every other one is ignored.
    pub fn handle_subscription(&mut self, prefix: &[u8]) {
        if let Some((Kind::DirectMetaRecords, node)) = subscription::parse_node(prefix)
            && self.meta_listeners.len() < MAX_LISTENING
        {
            self.meta_listeners.insert(node);
        }
    }

    /// A subscription cancelled on the producer's XPUB (its last subscriber gone).
    pub fn handle_unsubscription(&mut self, prefix: &[u8]) {
        if let Some((Kind::DirectMetaRecords, node)) = subscription::parse_node(prefix) {
            self.meta_listeners.remove(&node);
        }
    }

    /// The unacknowledged record at `offset`, if still held.
    fn unacked_at(&self, offset: u64) -> Option<&(Bytes, RecordMeta)> {
        self.unacked
            .get(usize::try_from(offset.checked_sub(self.base)?).ok()?)
    }

    fn record(&self, offset: u64) -> Option<(Record, RecordMeta)> {
        let (content, meta) = self.unacked_at(offset)?;
        let record = Record {
            producer: self.config.id,
            topic: self.config.topic.clone(),
            sequence: offset,
            content: content.clone(),
        };
        Some((record, meta.clone()))
    }

    fn release_through(&mut self, acked: u64) {
        while self.base <= acked {
            let Some((content, meta)) = self.unacked.pop_front() else {
                break;
            };
            self.unacked_bytes -= content.len() + meta.payload_len();
            self.base += 1;
        }
        // An ACK can only cover records already sent, but keep the invariant base <= sent_upto.
        self.sent_upto = self.sent_upto.max(self.base);
    }

    /// The highest offset acknowledged by at least `min_acks` distinct stores.
    pub fn acked_through(&self) -> Option<u64> {
        let mut seqs: Vec<u64> = self.store_acks.iter().map(|&(_, s)| s).collect();
        if seqs.len() < self.config.min_acks {
            return None;
        }
        seqs.sort_unstable_by(|a, b| b.cmp(a));
        seqs.get(self.config.min_acks - 1).copied()
    }

    /// Whether every record sent so far is acknowledged by `min_acks` stores (what `flush`
    /// waits for).
    pub fn is_flushed(&self) -> bool {
        self.unacked.is_empty()
    }

    /// The offset the next record gets.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Offsets acknowledged by `min_acks` stores: every one below this (acknowledgements are
    /// cumulative; the records held unacknowledged are the last ones sent).
    pub fn acknowledged(&self) -> u64 {
        self.next_offset - self.unacked.len() as u64
    }

    /// Records held unacknowledged.
    pub fn unacked_records(&self) -> usize {
        self.unacked.len()
    }

    /// Content bytes held unacknowledged.
    pub fn unacked_bytes(&self) -> usize {
        self.unacked_bytes
    }

    /// FETCHes dropped because [`ProducerConfig::max_pending_fetches`] answers were pending.
    pub fn dropped_fetches(&self) -> u64 {
        self.dropped_fetches
    }
}
