//! The producer node: [`dafka_proto::Producer`] on an XPUB publisher (the reference's is a
//! PUB; ours hears `'V'` + id subscriptions, for DIRECT-META-RECORDS) and a SUB subscribed to
//! `'K'` and `'F'` + its id.
//!
//! Every record carries a timestamp (the caller's, or the producer's clock when it is sent,
//! in microseconds UTC) and may carry a key and headers ([`ProducerRecord`]). It goes out as
//! META-RECORD, and also as RECORD (the value only) while a peer subscribed to RECORDs of the
//! topic and not to META-RECORDs: a reference consumer or store ([`watch_subscribers`] tells).
//!
//! [`ProducerNode::send`] assigns the offset and publishes the RECORD from the caller's task,
//! under the lock of the state machine (so records leave in offset order);
//! [`ProducerNode::try_send`] only assigns it and leaves the RECORD for the node's task to
//! publish with the others queued meanwhile (one wake-up per batch, not per record); the task
//! handles ACKs and FETCHes, publishes HEADs when due and FETCH answers in chunks of
//! [`TRANSMIT_CHUNK`](crate::node) messages.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use dafka_proto::{
    Header, Kind, Message, NodeId, PeerError, Producer, ProducerConfig, RecordMeta, RefusalReason,
    SendError, StoreRefusal, TimestampType, Topic, record::payload_len, subscription,
};
use dafka_zmtp::{Monitor, Socket, SocketEvent, SocketType};

use crate::error::Error;
use crate::node::{
    Control, LogLimiter, NodeConfig, NodeStats, NodeTask, Outbox, Plumbing, Role, TRANSMIT_CHUNK,
    TowerWait, log_refused, new_node_id, now, publish_with, take_up_to, wait_until,
};

/// Settings of a [`ProducerNode`] beyond those every node has.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProducerOptions {
    /// A saved partition id to resume (`None`: a new one).
    pub partition: Option<NodeId>,
    /// The state machine's settings: the first offset (when resuming: one past the highest
    /// the stores hold), `min_acks` (distinct stores that must acknowledge a record), the HEAD
    /// interval, the unacknowledged buffer's limits, the largest record, the FETCH and store
    /// limits. Its `id` and `topic` are replaced by the node's. The default holds at most
    /// the publisher's send HWM of records unacknowledged ([`NodeConfig::sndhwm`], 100 000):
    /// records in flight to a store are unacknowledged, so with at most that many a store
    /// that keeps up never loses a RECORD at the HWM (which it would FETCH again), and the
    /// acknowledgement latency stays near the time a store takes for that many records
    /// rather than ten times more (see BENCHMARKS.md).
    pub protocol: ProducerConfig,
    /// How long `send` waits for room in a full unacknowledged buffer.
    pub send_timeout: Duration,
    /// With a saved [`partition`](Self::partition): how long [`ProducerNode::start`] waits
    /// for a store to report the partition's head (GET-HEADS -> DIRECT-HEAD) before failing
    /// with [`Error::ResumeTimeout`]; `None` starts at the protocol's `first_offset` without
    /// asking.
    pub resume_timeout: Option<Duration>,
}

impl Default for ProducerOptions {
    /// The state machine's defaults (see [`ProducerConfig::new`]) except 100 000 unacknowledged
    /// records at most, a new partition, and a send timeout of 30 s.
    fn default() -> Self {
        let mut protocol = ProducerConfig::new(
            NodeId::from_bytes([0; 16]),
            Topic::new(Bytes::new()).unwrap_or_else(|_| unreachable!("the empty topic is valid")),
        );
        protocol.max_unacked_records = protocol
            .max_unacked_records
            .min(DEFAULT_MAX_UNACKED_RECORDS);
        ProducerOptions {
            partition: None,
            protocol,
            send_timeout: Duration::from_secs(30),
            resume_timeout: Some(Duration::from_secs(10)),
        }
    }
}

macro_rules! setters {
    ($($($field:ident).+ / $with:ident: $ty:ty),* $(,)?) => {
        impl ProducerOptions {
            $(
                #[doc = concat!("Sets `", stringify!($($field).+), "`.")]
                #[must_use]
                pub fn $with(mut self, value: $ty) -> Self {
                    self.$($field).+ = value;
                    self
                }
            )*
        }
    };
}

setters! {
    partition / with_partition: Option<NodeId>,
    protocol.first_offset / with_first_offset: u64,
    protocol.min_acks / with_min_acks: usize,
    protocol.head_interval / with_head_interval: Duration,
    protocol.max_unacked_records / with_max_unacked_records: usize,
    protocol.max_unacked_bytes / with_max_unacked_bytes: usize,
    protocol.max_record / with_max_record: usize,
    send_timeout / with_send_timeout: Duration,
    resume_timeout / with_resume_timeout: Option<Duration>,
}

/// A record to send: its value, and optionally a key, headers and a timestamp. A plain
/// [`Bytes`] converts into one with the value only.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerRecord {
    /// The value.
    pub value: Bytes,
    /// The key (`Some` of an empty one is an empty key, not none).
    pub key: Option<Bytes>,
    /// The headers (`Some` of an empty list is an empty list, not none).
    pub headers: Option<Vec<Header>>,
    /// Microseconds since the Unix epoch, UTC; `None`: the producer's clock when the record
    /// is sent.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record with `value` only.
    pub fn new(value: Bytes) -> Self {
        ProducerRecord {
            value,
            ..ProducerRecord::default()
        }
    }

    /// The record with its extras encoded at the end of `buf` when given (records encoded one
    /// after the other share its blocks), else in a buffer of their own.
    fn encode(self, buf: Option<&mut BytesMut>) -> EncodedRecord {
        let (t, key, headers) = (
            self.timestamp.unwrap_or(0),
            self.key.as_deref(),
            self.headers.as_deref(),
        );
        let create = TimestampType::CreateTime;
        let meta = match buf {
            Some(buf) => RecordMeta::encode_in(buf, t, create, key, headers),
            None => RecordMeta::new(t, create, key, headers),
        };
        EncodedRecord {
            value: self.value,
            meta,
            timestamped: self.timestamp.is_some(),
        }
    }

    /// Bytes it takes in the unacknowledged buffer: value, key and headers.
    fn len(&self) -> usize {
        self.value.len() + payload_len(self.key.as_deref(), self.headers.as_deref())
    }
}

impl From<Bytes> for ProducerRecord {
    fn from(value: Bytes) -> Self {
        ProducerRecord::new(value)
    }
}

/// A record with its metadata already encoded (see [`RecordMeta::encode_refs_in`]): what
/// [`ProducerNode::send_many_encoded`] takes from a caller that holds keys and headers in
/// its own form (Arrow columns) and encodes them straight, with no [`Header`] list per record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedRecord {
    /// The value.
    pub value: Bytes,
    /// Timestamp, key and headers.
    pub meta: RecordMeta,
    /// Whether `meta.timestamp` is the record's: when false, the producer's clock stamps it as
    /// it is queued.
    pub timestamped: bool,
}

impl EncodedRecord {
    /// Bytes it takes in the unacknowledged buffer: value, key and headers.
    fn len(&self) -> usize {
        self.value.len() + self.meta.payload_len()
    }

    /// Its value and metadata, stamped `now_us` unless it has its timestamp.
    fn stamped(self, now_us: i64) -> (Bytes, RecordMeta) {
        let mut meta = self.meta;
        if !self.timestamped {
            meta.timestamp = now_us;
        }
        (self.value, meta)
    }
}

/// Microseconds since the Unix epoch, UTC: a record's default timestamp.
pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The default [`ProducerOptions::max_unacked_records`]: the default send HWM.
const DEFAULT_MAX_UNACKED_RECORDS: usize = 100_000;

/// How long a resuming producer keeps listening after the first store reported its head.
pub const RESUME_GRACE: Duration = Duration::from_millis(300);

struct Shared {
    producer: Mutex<Producer>,
    publisher: Socket,
    control: Arc<Control>,
    send_timeout: Duration,
    /// RECORDs queued by `try_send` since the task last took the queue: set (and the task
    /// woken) by the first, cleared by the task under the state machine's lock.
    queued: AtomicBool,
    /// When a store's failure (STORE-REFUSAL) was first and last heard since the
    /// acknowledgements last moved on.
    failure_heard: Mutex<Option<(tokio::time::Instant, tokio::time::Instant)>>,
    /// Store writers that hear the producer now ([`watch_subscribers`]).
    stores: Arc<AtomicUsize>,
    /// Peers whose subscriptions pass this topic's RECORDs ([`watch_subscribers`]).
    readers: Arc<AtomicUsize>,
    /// Some of them take RECORDs and not META-RECORDs ([`watch_subscribers`]): each record
    /// goes out both ways.
    plain_readers: Arc<AtomicBool>,
    /// The producer's patience with its towers.
    towers: TowerWait,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Producer> {
        self.producer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes the RECORDs `send` queued (they come first out of `poll_transmit`), and wakes
    /// the task when the HEAD timer just started or answers wait. Returns `publish`'s refusal,
    /// for [`log_refused`] once the lock is released.
    #[must_use]
    fn publish_records(
        &self,
        producer: &mut Producer,
        had_timer: bool,
    ) -> Option<dafka_zmtp::Error> {
        let plain = self.plain();
        let refused = publish_with(&self.publisher, |out| {
            if !plain {
                // The records, each encoded from the producer's buffer (no message per record).
                while let Some(r) = producer.poll_record() {
                    out.push_record(r);
                }
            }
            while let Some(m) = producer.poll_transmit() {
                let record = matches!(m, Message::MetaRecord(_));
                push_with_plain(out, m, plain);
                if !record {
                    // A HEAD or FETCH answer: the task sends the rest.
                    self.control.wake.notify_one();
                    break;
                }
            }
        });
        if !had_timer {
            self.control.wake.notify_one();
        }
        refused
    }

    fn closed(&self) -> bool {
        self.control.stopping()
    }

    /// Whether a peer takes RECORDs only (a reference consumer or store): then every
    /// META-RECORD is followed by the same record as RECORD ([`push_with_plain`]).
    fn plain(&self) -> bool {
        self.plain_readers.load(Ordering::Relaxed)
    }
}

/// Queues `m` and, when it is a META-RECORD and `plain` (a peer takes RECORDs only), the same
/// record as RECORD after it. Our nodes subscribed to both take the first and drop the second
/// as a duplicate.
#[inline]
fn push_with_plain(out: &mut Outbox<'_>, m: Message, plain: bool) {
    let record = match &m {
        Message::MetaRecord(r) if plain => Some(Message::Record(r.record.clone())),
        _ => None,
    };
    out.push(m);
    if let Some(r) = record {
        out.push(r);
    }
}

/// A running producer. Dropping it stops the node; [`close`](Self::close) also waits for its
/// task and flushes the publisher for [`NodeConfig::linger`].
pub struct ProducerNode {
    shared: Arc<Shared>,
    port: u16,
    task: NodeTask,
}

impl std::fmt::Debug for ProducerNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProducerNode")
            .field("partition", &self.partition())
            .finish_non_exhaustive()
    }
}

impl ProducerNode {
    /// Starts a producer of `topic` on the current tokio runtime.
    ///
    /// With a saved [`ProducerOptions::partition`] and a
    /// [`ProducerOptions::resume_timeout`], it first learns the partition's head from the
    /// stores, so a restarted producer continues at the next offset: it waits for the first
    /// DIRECT-HEAD, then [`RESUME_GRACE`] more for other stores (one behind the rest must
    /// not set the offset), and starts one past the highest head heard.
    pub async fn start(
        topic: &str,
        node: NodeConfig,
        options: ProducerOptions,
    ) -> Result<ProducerNode, Error> {
        let topic = Topic::try_from(topic)?;
        let id = options.partition.map_or_else(new_node_id, Ok)?;
        let mut config = options.protocol;
        let config_topic = topic.clone();
        (config.id, config.topic) = (id, topic);
        let mut producer = Producer::new(config)?;
        let plumbing = Plumbing::open(id, node, SocketType::Xpub).await?;
        // Before any beacon goes out: no peer can have subscribed yet.
        let stores = Arc::new(AtomicUsize::new(0));
        let readers = Arc::new(AtomicUsize::new(0));
        let plain_readers = Arc::new(AtomicBool::new(false));
        tokio::spawn(watch_subscribers(
            plumbing.publisher.monitor(SUBSCRIBER_EVENTS),
            config_topic,
            stores.clone(),
            Readers {
                count: readers.clone(),
                plain: plain_readers.clone(),
            },
        ));
        for s in producer.subscriptions() {
            plumbing.subscriber.subscribe(&s)?;
        }
        let resume = options
            .resume_timeout
            .filter(|_| options.partition.is_some());
        if resume.is_some() {
            plumbing
                .subscriber
                .subscribe(&producer.resume_subscription())?;
            producer.start_resume(now());
        }
        let control = Arc::new(Control::default());
        let shared = Arc::new(Shared {
            producer: Mutex::new(producer),
            publisher: plumbing.publisher.clone(),
            control: control.clone(),
            send_timeout: options.send_timeout,
            queued: AtomicBool::new(false),
            failure_heard: Mutex::new(None),
            stores,
            readers,
            plain_readers,
            towers: plumbing.tower_wait(),
        });
        let port = plumbing.port();
        let role = ProducerRole {
            shared: shared.clone(),
            refusal_log: LogLimiter::default(),
        };
        let node = ProducerNode {
            shared,
            port,
            task: NodeTask::spawn(plumbing, role, control),
        };
        if let Some(timeout) = resume {
            let shared = &node.shared;
            let deadline = tokio::time::Instant::now() + timeout;
            let heard = wait_until(&shared.control.changed, Some(deadline), || {
                shared.lock().resume_heard().is_some()
            })
            .await;
            if !heard {
                node.close().await;
                return Err(Error::ResumeTimeout { waited: timeout });
            }
            tokio::time::sleep(RESUME_GRACE).await;
            shared.lock().finish_resume();
        }
        Ok(node)
    }

    /// The partition: the producer's id (32 upper-case hex characters on the wire).
    pub fn partition(&self) -> NodeId {
        self.shared.lock().config().id
    }

    /// The port of the node's publisher.
    pub fn publisher_port(&self) -> u16 {
        self.port
    }

    /// Sends one record (a [`ProducerRecord`], or a value as [`Bytes`]) and returns its
    /// offset. Waits up to [`ProducerOptions::send_timeout`] while the unacknowledged buffer
    /// is full, then fails with [`Error::SendTimeout`].
    pub async fn send(&self, record: impl Into<ProducerRecord>) -> Result<u64, Error> {
        let mut first = None;
        let encoded = record.into().encode(None);
        self.send_each(std::iter::once(encoded), &mut first).await?;
        first.ok_or(Error::Closed)
    }

    /// Sends one record without waiting: `Ok(Ok(offset))` once its offset is assigned, the
    /// RECORD left for the node's task to publish with every other one queued until it runs
    /// (the first queued wakes it, the rest ride along: a cheap call for a caller sending one
    /// record at a time); `Ok(Err(record))` hands the record back when the unacknowledged
    /// buffer is full (then [`send`](Self::send) waits for room). Records leave in offset
    /// order, whichever of `send` and `try_send` queued them.
    pub fn try_send(
        &self,
        record: impl Into<ProducerRecord>,
    ) -> Result<Result<u64, ProducerRecord>, Error> {
        self.shared.towers.check()?;
        self.try_send_locked(self.shared.lock(), record.into())
    }

    /// [`try_send`](Self::try_send) without waiting for the state machine's lock either:
    /// `Ok(Err(record))` also when another thread holds it (then call `try_send`, or `send`,
    /// where blocking is safe). The node's task holds that lock while it publishes up to
    /// 4096 messages: a caller that must not block there (a Python thread holding the GIL)
    /// tries this first.
    pub fn try_send_uncontended(
        &self,
        record: ProducerRecord,
    ) -> Result<Result<u64, ProducerRecord>, Error> {
        self.shared.towers.check()?;
        match self.shared.producer.try_lock() {
            Ok(producer) => self.try_send_locked(producer, record),
            Err(std::sync::TryLockError::Poisoned(e)) => {
                self.try_send_locked(e.into_inner(), record)
            }
            Err(std::sync::TryLockError::WouldBlock) => Ok(Err(record)),
        }
    }

    fn try_send_locked(
        &self,
        mut producer: MutexGuard<'_, Producer>,
        record: ProducerRecord,
    ) -> Result<Result<u64, ProducerRecord>, Error> {
        let shared = &self.shared;
        if shared.closed() {
            return Err(Error::Closed);
        }
        if !fits(&producer, record.len()) {
            return Ok(Err(record));
        }
        let (value, meta) = record.encode(None).stamped(now_us());
        let offset = match producer.send(value, meta, now()) {
            Ok(offset) => offset,
            Err(SendError::Caller(e)) => return Err(e.into()),
            Err(e) => return Err(Error::Refused(e)),
        };
        drop(producer);
        if !shared.queued.swap(true, Ordering::AcqRel) {
            shared.control.wake.notify_one();
        }
        Ok(Ok(offset))
    }

    /// Sends every record (or value) in order and returns the offset of the first (the next
    /// offset when there is none). Every record's size and headers are checked first: one too
    /// large sends none ([`Error::Caller`]). Waits for room as [`send`](Self::send) does; on a
    /// later error (closed, a send timeout), the records before it were sent. Records without a timestamp are stamped
    /// with the clock once per batch taken under the lock.
    pub async fn send_many<R: Into<ProducerRecord>>(
        &self,
        records: impl IntoIterator<Item = R>,
    ) -> Result<u64, Error> {
        // Every record is checked before the first is sent: a bad one sends none.
        let records: Vec<ProducerRecord> = records.into_iter().map(Into::into).collect();
        {
            let producer = self.shared.lock();
            for r in &records {
                producer.check(r.value.len(), r.key.as_deref(), r.headers.as_deref())?;
            }
        }
        // Each record's extras encoded as it is sent, into blocks shared by them all.
        let mut buf = BytesMut::new();
        self.send_checked(records.into_iter().map(|r| r.encode(Some(&mut buf))))
            .await
    }

    /// [`send_many`](Self::send_many) of records whose metadata is encoded already. Every
    /// record's size and headers are checked first: one too large sends none.
    pub async fn send_many_encoded(&self, records: Vec<EncodedRecord>) -> Result<u64, Error> {
        {
            let producer = self.shared.lock();
            for r in &records {
                producer.check_meta(r.value.len(), &r.meta)?;
            }
        }
        self.send_checked(records.into_iter()).await
    }

    /// Sends records already checked; the offset of the first (the next offset when there is
    /// none).
    async fn send_checked(
        &self,
        records: impl Iterator<Item = EncodedRecord>,
    ) -> Result<u64, Error> {
        let mut first = None;
        self.send_each(records, &mut first).await?;
        Ok(match first {
            Some(f) => f,
            None => self.shared.lock().next_offset(),
        })
    }

    async fn send_each(
        &self,
        mut values: impl Iterator<Item = EncodedRecord>,
        first: &mut Option<u64>,
    ) -> Result<(), Error> {
        let shared = &self.shared;
        shared.towers.check()?;
        let mut pending = values.next();
        while pending.is_some() {
            // Queue as many as fit under one lock, then publish them.
            let (refused, outcome) = {
                let mut producer = shared.lock();
                let had_timer = producer.poll_timeout().is_some();
                // One read of each clock per batch (the monotonic one only starts the HEAD
                // timer; the wall clock stamps the records that have no timestamp).
                let t = now();
                let stamp = now_us();
                let mut queued = 0;
                let mut outcome = Ok(());
                while let Some(r) = pending.take() {
                    if shared.closed() {
                        return Err(Error::Closed);
                    }
                    if !fits(&producer, r.len()) {
                        pending = Some(r);
                        break;
                    }
                    let (value, meta) = r.stamped(stamp);
                    match producer.send(value, meta, t) {
                        Ok(offset) => {
                            first.get_or_insert(offset);
                            pending = values.next();
                        }
                        Err(SendError::Caller(e)) => {
                            outcome = Err(e.into());
                            break;
                        }
                        Err(e) => {
                            outcome = Err(Error::Refused(e));
                            break;
                        }
                    }
                    queued += 1;
                    if queued == TRANSMIT_CHUNK {
                        break;
                    }
                }
                (shared.publish_records(&mut producer, had_timer), outcome)
            };
            log_refused(refused);
            outcome?;
            let Some(value) = pending.as_ref() else {
                break;
            };
            let deadline = tokio::time::Instant::now() + shared.send_timeout;
            let fits = wait_until(&shared.control.changed, Some(deadline), || {
                shared.closed() || fits(&shared.lock(), value.len())
            })
            .await;
            if shared.closed() {
                return Err(Error::Closed);
            }
            if !fits {
                let producer = shared.lock();
                return Err(Error::SendTimeout {
                    records: producer.unacked_records(),
                    bytes: producer.unacked_bytes(),
                    waited: shared.send_timeout,
                });
            }
        }
        Ok(())
    }

    /// Waits until every record sent so far is acknowledged by `min_acks` distinct stores, for
    /// at most `timeout` (`None`: no limit), then fails with [`Error::FlushTimeout`].
    ///
    /// Fails with [`Error::StoreRefused`], with the store's reason, when a store said it can no
    /// longer write and no acknowledgement moved on for [`REFUSAL_GRACE`] after (another store
    /// may still acknowledge), or once, after the acknowledgements, when a store skipped
    /// records as too large; with [`Error::NoTower`] when no tower answered within
    /// [`NodeConfig::connect_timeout`] (then, not at `timeout`).
    pub async fn flush(&self, timeout: Option<Duration>) -> Result<(), Error> {
        let shared = &self.shared;
        let started = tokio::time::Instant::now();
        let deadline = timeout.map(|t| started + t);
        let heard = || {
            *shared
                .failure_heard
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        };
        loop {
            // A failure counts once a store repeated it during this flush (a store restarted
            // since no longer does), after a grace for other stores' acknowledgements.
            let seen = heard();
            let settle = seen
                .filter(|&(_, last)| last >= started)
                .map(|(first, _)| first.max(started) + REFUSAL_GRACE);
            let wake = [deadline, settle, shared.towers.pending()]
                .into_iter()
                .flatten()
                .min();
            let ready = wait_until(&shared.control.changed, wake, || {
                shared.closed() || shared.lock().is_flushed() || heard() != seen
            })
            .await;
            if heard() != seen && !shared.closed() && !shared.lock().is_flushed() {
                continue;
            }
            if !ready {
                shared.towers.check()?;
            }
            let now = tokio::time::Instant::now();
            if ready || settle.is_some_and(|s| now >= s) || deadline.is_some_and(|d| now >= d) {
                break;
            }
        }
        let mut producer = shared.lock();
        if producer.is_flushed() {
            producer.announce_head();
            let refused = shared.publish_records(&mut producer, true);
            let skipped = producer.take_skipped();
            drop(producer);
            log_refused(refused);
            return match skipped.into_iter().next() {
                Some(r) => Err(store_refused(&r, 0)),
                None => Ok(()),
            };
        }
        if shared.closed() {
            return Err(Error::Closed);
        }
        let unacked = producer.unacked_records();
        if let Some(r) = producer.failure() {
            return Err(store_refused(r, unacked));
        }
        let config = producer.config();
        Err(Error::FlushTimeout {
            unacked,
            waited: timeout.unwrap_or_default(),
            topic: config.topic.clone(),
            stores: shared.stores.load(Ordering::Relaxed),
            min_acks: config.min_acks,
        })
    }

    /// Waits until every record below `offset` is acknowledged by `min_acks` stores (what
    /// [`flush`](Self::flush) does for all records sent so far), for one record's
    /// acknowledgement latency without waiting for those sent after it. Cancel-safe.
    pub async fn wait_acknowledged(&self, offset: u64) -> Result<(), Error> {
        let shared = &self.shared;
        let acked = || shared.lock().acknowledged() >= offset;
        wait_until(&shared.control.changed, None, || shared.closed() || acked()).await;
        if acked() {
            return Ok(());
        }
        Err(Error::Closed)
    }

    /// The offset the next record gets.
    pub fn next_offset(&self) -> u64 {
        self.shared.lock().next_offset()
    }

    /// Records not yet acknowledged by `min_acks` stores.
    pub fn unacked_records(&self) -> usize {
        self.shared.lock().unacked_records()
    }

    /// Records acknowledged by `min_acks` stores so far: every offset below this.
    pub fn acknowledged_records(&self) -> u64 {
        self.shared.lock().acknowledged()
    }

    /// Store writers that hear this producer now: peers of its publisher subscribed to every
    /// RECORD, as store writers (ours and the reference's) are; a consumer's subscription
    /// names its topic. Whether they also reach it back with their ACKs is not known here.
    pub fn stores_reachable(&self) -> usize {
        self.shared.stores.load(Ordering::Relaxed)
    }

    /// Peers that receive this producer's RECORDs as they are published: those whose
    /// subscriptions to its publisher pass its topic (store writers and live consumers). A
    /// RECORD published before a peer's subscription arrived does not reach it (that peer
    /// FETCHes it after the next HEAD); what waits for "a consumer is listening" waits for this.
    pub fn live_readers(&self) -> usize {
        self.shared.readers.load(Ordering::Relaxed)
    }

    /// Input the node dropped.
    pub fn stats(&self) -> &NodeStats {
        &self.task.stats
    }

    /// Stops the node: pending calls fail with [`Error::Closed`]; what was queued and a final
    /// HEAD go out as the task stops (`ProducerRole::on_stop`, every way out), and the
    /// publisher keeps flushing for [`NodeConfig::linger`] in the background.
    pub async fn close(mut self) {
        self.task.close().await;
    }
}

/// Events queued on the publisher's monitor for [`watch_subscribers`]; read as they come,
/// past it the oldest would be dropped (subscriptions and connections: a few per peer).
const SUBSCRIBER_EVENTS: usize = 1024;

/// Peers of a publisher with at least one subscription that `covers`, by whatever names
/// them (a peer may hold several: it counts once, until its last one goes; a publisher keeps
/// a peer's subscriptions as a set, so a repeated one is one).
#[derive(Debug)]
struct Subscribers<K> {
    covers: fn(&[u8], &[u8]) -> bool,
    /// What `covers` is asked about (a prefix or a message's first bytes).
    of: Bytes,
    peers: HashMap<K, HashSet<Bytes>>,
}

impl<K: Eq + Hash> Subscribers<K> {
    /// Peers subscribed to exactly `prefix`.
    fn to(prefix: Bytes) -> Self {
        Subscribers {
            covers: |prefix, of| prefix == of,
            of: prefix,
            peers: HashMap::new(),
        }
    }

    /// Peers with a subscription that passes messages starting with `start`.
    fn passing(start: Bytes) -> Self {
        Subscribers {
            covers: |prefix, start| start.starts_with(prefix),
            of: start,
            peers: HashMap::new(),
        }
    }

    fn subscribed(&mut self, peer: K, prefix: &[u8]) {
        if (self.covers)(prefix, &self.of) {
            let prefix = Bytes::copy_from_slice(prefix);
            self.peers.entry(peer).or_default().insert(prefix);
        }
    }

    fn unsubscribed(&mut self, peer: &K, prefix: &[u8]) {
        if let Some(held) = self.peers.get_mut(peer) {
            held.remove(prefix);
            if held.is_empty() {
                self.peers.remove(peer);
            }
        }
    }

    fn gone(&mut self, peer: &K) {
        self.peers.remove(peer);
    }

    fn count(&self) -> usize {
        self.peers.len()
    }

    fn peers(&self) -> impl Iterator<Item = &K> {
        self.peers.keys()
    }

    fn has(&self, peer: &K) -> bool {
        self.peers.contains_key(peer)
    }
}

/// What [`watch_subscribers`] says of the peers that read the topic.
struct Readers {
    /// Peers whose subscriptions pass this topic's RECORDs or META-RECORDs.
    count: Arc<AtomicUsize>,
    /// Whether one of them passes RECORDs and not META-RECORDs (a reference consumer or store).
    plain: Arc<AtomicBool>,
}

/// Counts the peers subscribed to the producer's publisher until it closes: the store writers
/// (`'M'`: every RECORD; what [`Error::FlushTimeout`] says) into `stores`, and every peer whose
/// subscriptions pass this topic's records (store writers and consumers) into `readers`.
async fn watch_subscribers(
    mut events: Monitor,
    topic: Topic,
    stores: Arc<AtomicUsize>,
    readers: Readers,
) {
    let mut writers = Subscribers::to(subscription::all(Kind::Record));
    let mut plain = Subscribers::passing(subscription::topic_exact(Kind::Record, &topic));
    let mut metas = Subscribers::passing(subscription::topic_exact(Kind::MetaRecord, &topic));
    while let Some(event) = events.recv().await {
        for set in [&mut writers, &mut plain, &mut metas] {
            match &event {
                SocketEvent::Subscribed { peer, prefix } => set.subscribed(*peer, prefix),
                SocketEvent::Unsubscribed { peer, prefix } => set.unsubscribed(peer, prefix),
                SocketEvent::Disconnected { peer, .. } => set.gone(peer),
                _ => {}
            }
        }
        if matches!(event, SocketEvent::Closed) {
            break;
        }
        stores.store(writers.count(), Ordering::Relaxed);
        let only_plain = plain.peers().filter(|p| !metas.has(p)).count();
        readers
            .count
            .store(metas.count() + only_plain, Ordering::Relaxed);
        readers.plain.store(only_plain > 0, Ordering::Relaxed);
    }
}

/// How long [`ProducerNode::flush`] still waits for acknowledgements after a store said it can
/// no longer write (another store may acknowledge).
pub const REFUSAL_GRACE: Duration = Duration::from_secs(1);

fn store_refused(r: &StoreRefusal, unacked: usize) -> Error {
    Error::StoreRefused {
        store: r.store,
        offset: r.sequence,
        reason: r.reason,
        detail: r.detail_text().into_owned(),
        unacked,
    }
}

/// Whether a record of `len` bytes (value, key and headers) fits in the unacknowledged buffer
/// now.
fn fits(producer: &Producer, len: usize) -> bool {
    let c = producer.config();
    producer.unacked_records() < c.max_unacked_records
        && producer.unacked_bytes() + len <= c.max_unacked_bytes
}

struct ProducerRole {
    shared: Arc<Shared>,
    /// Refusals are logged at most this often (a failed store repeats its every second).
    refusal_log: LogLimiter,
}

impl Role for ProducerRole {
    fn on_subscription(&mut self, prefix: &[u8], _now: Instant) {
        self.shared.lock().handle_subscription(prefix);
    }

    fn on_unsubscription(&mut self, prefix: &[u8]) {
        self.shared.lock().handle_unsubscription(prefix);
    }

    fn on_message(&mut self, message: Message, _now: Instant) -> Result<(), PeerError> {
        let (result, refusals, failing) = {
            let mut producer = self.shared.lock();
            let result = producer.handle_message(&message, None);
            let refusals: Vec<StoreRefusal> =
                std::iter::from_fn(|| producer.poll_refusal()).collect();
            (result, refusals, producer.failure().is_some())
        };
        let mut newly_failing = {
            let mut heard = self
                .shared
                .failure_heard
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let now = tokio::time::Instant::now();
            let failed_now = refusals.iter().any(|r| r.reason != RefusalReason::TooLarge);
            match (failing, *heard) {
                (true, None) => {
                    *heard = Some((now, now));
                    true
                }
                (true, Some((first, _))) if failed_now => {
                    *heard = Some((first, now));
                    false
                }
                (false, Some(_)) => {
                    *heard = None;
                    false
                }
                _ => false,
            }
        };
        for r in refusals {
            // A failed store repeats its refusal every second: said once per failure.
            let say = match r.reason {
                RefusalReason::TooLarge => self.refusal_log.allow(Instant::now()),
                _ => std::mem::take(&mut newly_failing),
            };
            if say {
                tracing::warn!(store = %r.store, offset = r.sequence, reason = ?r.reason,
                    detail = %r.detail_text(), "a store refused records of this partition");
            }
        }
        if matches!(
            message,
            Message::Ack(_)
                | Message::StoreAck(_)
                | Message::DirectHead(_)
                | Message::StoreRefusal(_)
        ) {
            self.shared.control.changed.notify_waiters();
        }
        result
    }

    fn on_timeout(&mut self, now: Instant) {
        self.shared.lock().handle_timeout(now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.shared.lock().poll_timeout()
    }

    fn transmit(&mut self, out: &mut Vec<Message>, max: usize) -> bool {
        let (more, refused) = {
            let mut producer = self.shared.lock();
            // Under the lock: a `try_send` after this sees the flag clear and wakes the task.
            self.shared.queued.store(false, Ordering::Release);
            let more = take_up_to(out, max, || producer.poll_transmit());
            // Published under the lock too, as `send` publishes: RECORDs queued by `try_send`
            // and taken here must not leave after newer ones a `send` takes and publishes
            // meanwhile (a store drops a RECORD ahead of the next offset it expects and FETCHes
            // it again a retry later: seen as 0.2-0.3 s stalls of a Python send loop).
            let refused = if out.is_empty() {
                None
            } else {
                let plain = self.shared.plain();
                publish_with(&self.shared.publisher, |o| {
                    for m in out.drain(..) {
                        push_with_plain(o, m, plain);
                    }
                })
            };
            (more, refused)
        };
        log_refused(refused);
        more
    }

    fn on_stop(&mut self) {
        // Stopped (closed, dropped, or a socket closed): the RECORDs queued since the last turn
        // still go out. `try_send` checks for the stop under the lock this
        // takes, so none is queued after the drain. Then a HEAD, closed or dropped: a node that
        // is gone sends no periodic HEAD any more, so a consumer or store that lost the last
        // RECORDs would never learn they exist.
        self.shared.lock().announce_head();
        let mut out = Vec::new();
        while self.transmit(&mut out, TRANSMIT_CHUNK) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_writers_are_the_peers_subscribed_to_every_record() {
        let mut writers = Subscribers::to(subscription::all(Kind::Record));
        writers.subscribed(1, b"M");
        writers.subscribed(2, b"Mweather\0");
        writers.subscribed(3, b"H");
        writers.subscribed(4, b"");
        assert_eq!(
            writers.count(),
            1,
            "only the bare 'M' of a store writer counts"
        );
        writers.subscribed(5, b"M");
        writers.subscribed(5, b"M");
        assert_eq!(writers.count(), 2);
        writers.unsubscribed(&5, b"Mweather\0");
        assert_eq!(writers.count(), 2);
        writers.unsubscribed(&5, b"M");
        writers.gone(&1);
        assert_eq!(writers.count(), 0);
    }

    #[test]
    fn live_readers_are_the_peers_whose_subscriptions_pass_the_topic() {
        let topic = Topic::try_from("weather").unwrap();
        let mut live = Subscribers::passing(subscription::topic_exact(Kind::Record, &topic));
        live.subscribed(1, b"M"); // a store writer
        live.subscribed(2, b"Mweather\0"); // a consumer of the topic (ours)
        live.subscribed(3, b"Mweath"); // a reference consumer of a prefix
        live.subscribed(4, b""); // everything
        live.subscribed(5, b"Mweather2\0");
        live.subscribed(6, b"Hweather");
        assert_eq!(live.count(), 4);
        // One peer with two that pass counts once, until both went.
        live.subscribed(2, b"M");
        assert_eq!(live.count(), 4);
        live.unsubscribed(&2, b"Mweather\0");
        assert_eq!(live.count(), 4);
        live.unsubscribed(&2, b"M");
        live.gone(&3);
        assert_eq!(live.count(), 2);
    }
}
