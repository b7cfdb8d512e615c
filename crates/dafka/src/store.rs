//! The store node: [`dafka_proto::StoreWriter`] and [`dafka_proto::StoreReader`] over the
//! storage engine `dafka-store`, as two nodes the way the reference runs a store (two ids, two
//! publishers, two beacons).
//!
//! | node | publisher | subscriber | does |
//! |---|---|---|---|
//! | writer | PUB | `'M'`, `'H'`, `'D'` + its id | appends, FETCHes gaps, ACKs durable records |
//! | reader | XPUB | `'F'`, `'G'`, `'W'` + its id | FETCH, GET-HEADS, CONSUMER-HELLO, STORE-HELLO |
//!
//! The writer's task takes the appends its state machine asks for after each batch of input,
//! hands them to the engine in one call per partition run (group commit forms one batch of
//! them) and passes the engine's ticket to an acknowledgement task. That task awaits the
//! ticket (the engine's writer thread wakes it once the batch is durable under the sync
//! policy), reports the durable heads to the state machine and wakes the writer, which
//! publishes the ACKs. So an ACK never leaves before its records are durable. The reader
//! answers from the engine's durable records only (reads from disk, in chunks).
//!
//! The engine calls are synchronous: an append blocks the writer's task while the engine's
//! forming batch is over its `max_pending_bytes` (8 MiB: the disk is behind), and a read is a
//! `pread`. Both run on the runtime's worker; a store node wants a multi-threaded runtime.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dafka_proto::group::GroupName;
use dafka_proto::store::Append;
use dafka_proto::{
    GroupOffset, LogRead, Message, NodeId, PeerError, RecordMeta, RefusalReason, StoreLog,
    StoreReader, StoreReaderConfig, StoreWriter, StoreWriterConfig, Topic,
};
use dafka_store::{
    AppendError, AppendRecord, CommitMode, FsDir, GroupOffsets, OffsetKey, OffsetsConfig,
    PartitionId, PartitionKey, SyncPolicy, Ticket, now_us,
};
use dafka_zmtp::SocketType;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error::Error;
use crate::node::{
    Control, LogLimiter, NodeConfig, NodeStats, NodeTask, Plumbing, Role, new_node_id, now,
    take_up_to,
};

/// Settings of a [`StoreNode`] beyond those every node has.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreOptions {
    /// The engine's settings (sync policy, segment size, retention, ...).
    pub engine: dafka_store::Config,
    /// First FETCH retry delay for a gap.
    pub fetch_retry: Duration,
    /// Longest FETCH retry delay.
    pub fetch_retry_max: Duration,
    /// Records read from the engine at a time for a FETCH answer.
    pub read_chunk: usize,
    /// Most partitions held.
    pub max_partitions: usize,
}

impl StoreOptions {
    /// The defaults with the sync policy `sync`.
    pub fn with_sync(sync: SyncPolicy) -> Self {
        StoreOptions {
            engine: dafka_store::Config::with_sync(sync),
            ..StoreOptions::default()
        }
    }

    /// Sets [`fetch_retry`](Self::fetch_retry).
    #[must_use]
    pub fn with_fetch_retry(mut self, retry: Duration) -> Self {
        self.fetch_retry = retry;
        self
    }

    /// Sets [`engine`](Self::engine).
    #[must_use]
    pub fn with_engine(mut self, engine: dafka_store::Config) -> Self {
        self.engine = engine;
        self
    }
}

impl Default for StoreOptions {
    /// The engine's defaults (sync `always`), the state machines' defaults.
    fn default() -> Self {
        let w = StoreWriterConfig::new(NodeId::from_bytes([0; 16]));
        let r = StoreReaderConfig::new(NodeId::from_bytes([0; 16]), NodeId::from_bytes([0; 16]));
        StoreOptions {
            engine: dafka_store::Config::default(),
            fetch_retry: w.fetch_retry,
            fetch_retry_max: w.fetch_retry_max,
            read_chunk: r.read_chunk,
            max_partitions: w.max_partitions,
        }
    }
}

/// A running store. Dropping it stops both nodes; [`close`](Self::close) also waits for them
/// and for the engine to write what it was given.
pub struct StoreNode {
    writer_id: NodeId,
    reader_id: NodeId,
    engine: dafka_store::Store,
    writer: NodeTask,
    reader: NodeTask,
    acks: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for StoreNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreNode")
            .field("writer", &self.writer_id)
            .field("reader", &self.reader_id)
            .finish_non_exhaustive()
    }
}

fn key_of(p: &dafka_store::PartitionInfo) -> Option<(Topic, NodeId)> {
    let topic = Topic::new(Bytes::from(p.key.topic.clone().into_bytes())).ok()?;
    Some((topic, NodeId::from_bytes(p.key.producer)))
}

fn engine_key(topic: &Topic, producer: &NodeId) -> Option<PartitionKey> {
    let topic = std::str::from_utf8(topic.as_bytes()).ok()?;
    Some(PartitionKey::new(topic, *producer.as_bytes()))
}

impl StoreNode {
    /// Opens (or creates) the store directory `path`, recovers it, and starts the writer and
    /// reader nodes on the current tokio runtime. The writer's publisher binds
    /// [`NodeConfig::port`], the reader's the next port (both any free port when it is 0).
    pub async fn open(
        path: impl AsRef<Path>,
        node: NodeConfig,
        options: StoreOptions,
    ) -> Result<StoreNode, Error> {
        let path = path.as_ref();
        let engine = dafka_store::Store::open_path(path, options.engine.clone())?;
        // The consumer groups' committed offsets, beside the segments (the engine made the
        // directory and holds its lock).
        let dir = FsDir::new(path).map_err(|e| Error::Offsets(e.into()))?;
        let (offsets, report) = GroupOffsets::open(Arc::new(dir), OffsetsConfig::default())?;
        if report.damaged > 0 || report.torn_bytes > 0 {
            tracing::warn!(
                damaged = report.damaged,
                torn_bytes = report.torn_bytes,
                "committed offsets recovered from damage"
            );
        }
        let writer_id = new_node_id()?;
        let reader_id = new_node_id()?;
        let mut wc = StoreWriterConfig::new(writer_id);
        wc.fetch_retry = options.fetch_retry;
        wc.fetch_retry_max = options.fetch_retry_max;
        wc.max_partitions = options.max_partitions;
        let mut writer = StoreWriter::new(wc)?;
        let mut ids = HashMap::new();
        let started = now();
        for p in engine.partitions() {
            if let Some(key) = key_of(&p) {
                writer.restore(key.clone(), p.head);
                // Records lost to damage: asked for from the other stores.
                writer.restore_holes(key.clone(), &engine.holes(p.id), started);
                ids.insert(key, p.id);
            }
        }
        let mut rc = StoreReaderConfig::new(reader_id, writer_id);
        rc.read_chunk = options.read_chunk;
        let reader = StoreReader::new(rc)?;

        let reader_node = match node.port {
            0 => node.clone(),
            p => node
                .clone()
                .with_port(p.checked_add(1).ok_or(Error::Endpoint {
                    endpoint: format!("port {p}"),
                    reason: "the reader's port (the next one) is out of range",
                })?),
        };
        let wplumbing = Plumbing::open(writer_id, node, SocketType::Pub).await?;
        for s in writer.subscriptions() {
            wplumbing.subscriber.subscribe(&s)?;
        }
        let rplumbing = Plumbing::open(reader_id, reader_node, SocketType::Xpub).await?;
        for s in reader.subscriptions() {
            rplumbing.subscriber.subscribe(&s)?;
        }

        let shared = Arc::new(Mutex::new(writer));
        let wcontrol = Arc::new(Control::default());
        let (tx, rx) = mpsc::unbounded_channel();
        let acks = tokio::spawn(acknowledge(rx, shared.clone(), wcontrol.clone()));
        let wrole = WriterRole {
            writer: shared,
            engine: engine.clone(),
            ids,
            tickets: tx,
            log: LogLimiter::default(),
        };
        let log = Arc::new(EngineLog {
            engine: engine.clone(),
            offsets: Mutex::new(offsets),
        });
        let rcontrol = Arc::new(Control::default());
        let rrole = ReaderRole {
            reader,
            committer: Committer::start(reader_id, log.clone(), rcontrol.clone())?,
            log,
        };
        Ok(StoreNode {
            writer_id,
            reader_id,
            engine,
            writer: NodeTask::spawn(wplumbing, wrole, wcontrol),
            reader: NodeTask::spawn(rplumbing, rrole, rcontrol),
            acks: Some(acks),
        })
    }

    /// The writer node's id (the sender of its FETCHes).
    pub fn writer_id(&self) -> NodeId {
        self.writer_id
    }

    /// The reader node's id (in its STORE-HELLOs).
    pub fn reader_id(&self) -> NodeId {
        self.reader_id
    }

    /// The engine underneath (heads, low-water marks, reads of what is durable).
    pub fn engine(&self) -> &dafka_store::Store {
        &self.engine
    }

    /// Input the writer node dropped.
    pub fn writer_stats(&self) -> &NodeStats {
        &self.writer.stats
    }

    /// Input the reader node dropped.
    pub fn reader_stats(&self) -> &NodeStats {
        &self.reader.stats
    }

    /// Stops both nodes, then the engine (after writing and syncing what it was given).
    pub async fn close(mut self) {
        self.writer.close().await;
        self.reader.close().await;
        if let Some(acks) = self.acks.take() {
            let _ = acks.await;
        }
        let engine = self.engine.clone();
        drop(self);
        // Joining the engine's writer thread blocks: off the runtime's worker.
        let _ = tokio::task::spawn_blocking(move || engine.close()).await;
    }
}

type Key = (Topic, NodeId);

/// Durable heads to report once a ticket completes.
type Pending = (Ticket, Vec<(Key, u64)>);

/// Awaits each ticket and reports durability to the writer, then wakes its task (the ACKs).
/// Tickets complete in order, so only the last of a batch of them is awaited.
async fn acknowledge(
    mut rx: mpsc::UnboundedReceiver<Pending>,
    writer: Arc<Mutex<StoreWriter>>,
    control: Arc<Control>,
) {
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, 1024).await > 0 {
        let outcome = match batch.last() {
            Some((ticket, _)) => ticket.clone().await,
            None => continue,
        };
        let all_ok = outcome.is_ok();
        {
            let mut w = lock(&writer);
            for (ticket, heads) in batch.drain(..) {
                // After a failure (a poisoned store) only batches durable before it count.
                if all_ok || ticket.wait(Duration::ZERO).is_ok() {
                    for (key, next) in heads {
                        w.durable(&key, next);
                    }
                }
            }
        }
        if let Err(e @ dafka_store::DurabilityError::Poisoned(_)) = outcome {
            let detail = format!("store failed, restart it: {e}");
            tracing::error!("{detail}; records after the failure are not acknowledged");
            // Producers are told why instead of waiting for ACKs that cannot come.
            lock(&writer).fail(&detail);
        }
        control.wake.notify_one();
    }
}

/// The committed offsets; a panic while they were held left them as they were after their
/// last whole commit (a commit changes the map only after its write and sync).
fn lock_offsets(offsets: &Mutex<GroupOffsets>) -> MutexGuard<'_, GroupOffsets> {
    offsets
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn lock(writer: &Mutex<StoreWriter>) -> MutexGuard<'_, StoreWriter> {
    writer.lock().unwrap_or_else(|e| e.into_inner())
}

struct WriterRole {
    writer: Arc<Mutex<StoreWriter>>,
    engine: dafka_store::Store,
    ids: HashMap<Key, PartitionId>,
    tickets: mpsc::UnboundedSender<Pending>,
    log: LogLimiter,
}

impl WriterRole {
    fn id(&mut self, key: &Key) -> Option<PartitionId> {
        if let Some(&id) = self.ids.get(key) {
            return Some(id);
        }
        let ekey = engine_key(&key.0, &key.1)?;
        match self.engine.declare(&ekey) {
            Ok(id) => {
                self.ids.insert(key.clone(), id);
                Some(id)
            }
            Err(e) => {
                if self.log.allow(now()) {
                    tracing::warn!(error = %e, partition = %ekey, "cannot declare partition");
                }
                None
            }
        }
    }

    /// Writes the records that fill holes (from another store) into the engine.
    fn fill(&mut self, writer: &mut StoreWriter) {
        // Called on every turn of the task; fills are rare: the clock only when there is one.
        let mut stamp = None;
        while let Some(a) = writer.poll_fill() {
            let r = &a.record;
            // A record that came without metadata (from a reference node): stamped here.
            let stamp = &*stamp.get_or_insert_with(|| RecordMeta::log_append(now_us()));
            let meta = a.meta.as_ref().unwrap_or(stamp);
            let Some(&id) = self.ids.get(&(r.topic.clone(), r.producer)) else {
                continue;
            };
            let record = AppendRecord {
                partition: id,
                offset: r.sequence,
                meta,
                value: &r.content,
            };
            match self.engine.fill(&[record]) {
                Ok(_) => tracing::debug!(partition = %r.producer, offset = r.sequence,
                    "a record lost to damage filled from another node"),
                Err(e) => {
                    if self.log.allow(now()) {
                        tracing::warn!(error = %e, offset = r.sequence, "filling a hole refused");
                    }
                }
            }
        }
    }

    /// Appends what the state machine asks for, one engine call per run of one partition.
    fn append(&mut self, writer: &mut StoreWriter) {
        self.fill(writer);
        let records: Vec<_> = std::iter::from_fn(|| writer.poll_append()).collect();
        if records.is_empty() {
            return;
        }
        // Records that came without metadata (from a reference producer or store) are stamped
        // with the time they are appended here, one clock read a batch.
        let stamp = RecordMeta::log_append(now_us());
        let mut last = None;
        let mut heads = Vec::new();
        let same = |a: &Append, b: &Append| {
            a.record.producer == b.record.producer && a.record.topic == b.record.topic
        };
        for run in records.chunk_by(same) {
            let key = (run[0].record.topic.clone(), run[0].record.producer);
            let Some(id) = self.id(&key) else {
                // A topic the engine cannot name (not UTF-8): not stored, never acknowledged.
                continue;
            };
            // Records the engine would refuse as too large take their offset as a skip: the
            // partition goes on, and the producer is told (STORE-REFUSAL).
            let max = self.engine.max_record_bytes();
            let size = |a: &Append| {
                a.record.content.len() + a.meta.as_ref().map_or(0, RecordMeta::payload_len)
            };
            let big = |a: &Append| size(a) > max;
            for piece in run.chunk_by(|a, b| big(a) == big(b)) {
                let result = if big(&piece[0]) {
                    piece.iter().try_fold(None, |_, a| {
                        let r = &a.record;
                        let detail = format!(
                            "record of {} bytes (value, key and headers) is over this store's \
                             limit of {max} bytes: not stored",
                            size(a)
                        );
                        if self.log.allow(now()) {
                            tracing::warn!(partition = %r.producer, topic = %r.topic,
                                offset = r.sequence, "{detail}");
                        }
                        writer.refuse(&key, r.sequence, RefusalReason::TooLarge, &detail);
                        self.engine.skip(id, r.sequence).map(Some)
                    })
                } else {
                    let batch: Vec<AppendRecord<'_>> = piece
                        .iter()
                        .map(|a| AppendRecord {
                            partition: id,
                            offset: a.record.sequence,
                            meta: a.meta.as_ref().unwrap_or(&stamp),
                            value: &a.record.content,
                        })
                        .collect();
                    self.engine.append(&batch).map(Some)
                };
                match result {
                    Ok(ticket) => {
                        let next = piece[piece.len() - 1].record.sequence + 1;
                        heads.push((key.clone(), next));
                        last = ticket.or(last);
                    }
                    Err(AppendError::Poisoned(cause)) => {
                        // Nothing can be stored any more: producers are told why, the writer
                        // stops FETCHing (it spun on refused appends, logging each).
                        let detail = format!("store failed, restart it: {cause}");
                        tracing::error!("{detail}");
                        writer.fail(&detail);
                        break;
                    }
                    Err(e) => {
                        if self.log.allow(now()) {
                            tracing::warn!(error = %e, "append refused");
                        }
                        // Take the engine's word for where the partition stands.
                        if let Some(next) = self.engine.next_offset(id) {
                            writer.restore(key.clone(), next);
                        }
                        break;
                    }
                }
            }
        }
        if let Some(ticket) = last {
            let _ = self.tickets.send((ticket, heads));
        }
    }
}

impl Role for WriterRole {
    fn on_message(&mut self, message: Message, now: Instant) -> Result<(), PeerError> {
        lock(&self.writer).handle(message, now)
    }

    fn on_timeout(&mut self, now: Instant) {
        lock(&self.writer).handle_timeout(now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        lock(&self.writer).poll_timeout()
    }

    fn transmit(&mut self, out: &mut Vec<Message>, max: usize) -> bool {
        let writer = self.writer.clone();
        let mut w = lock(&writer);
        self.append(&mut w);
        take_up_to(out, max, || w.poll_transmit())
    }
}

/// The engine as the reader's [`StoreLog`]: durable records only, and the consumer groups'
/// committed offsets of the partitions it holds.
struct EngineLog {
    engine: dafka_store::Store,
    /// Written (and synced) by the reader's [`Committer`] thread, not on the reader's task:
    /// a commit's `fdatasync` takes milliseconds (hundreds while the disk is busy), during
    /// which the reader would serve no FETCH.
    offsets: Mutex<GroupOffsets>,
}

/// Why the reader could not serve a request from its log.
#[derive(Debug, thiserror::Error)]
enum LogError {
    #[error(transparent)]
    Read(#[from] dafka_store::ReadError),
    #[error(transparent)]
    Offsets(#[from] dafka_store::OffsetsError),
}

fn offset_key(group: &GroupName, topic: &Topic, partition: &NodeId) -> OffsetKey {
    OffsetKey {
        group: group.clone(),
        topic: topic.clone(),
        partition: *partition,
    }
}

impl EngineLog {
    fn id(&self, topic: &Topic, producer: &NodeId) -> Option<PartitionId> {
        self.engine.lookup(&engine_key(topic, producer)?)
    }
}

/// Most value bytes read from the engine for one chunk of a FETCH answer.
const READ_BYTES: usize = 4 << 20;

impl StoreLog for EngineLog {
    type Error = LogError;

    fn commit_offsets(
        &self,
        group: &GroupName,
        offsets: &[GroupOffset],
        seek: bool,
    ) -> Result<Vec<GroupOffset>, LogError> {
        // Partitions held only, and offsets at most their head (the next offset to read can
        // be the head itself: everything read): a commit past it would make every later
        // owner skip records never written. Left out of the answer, so the member's commit
        // fails for them.
        let held: Vec<&GroupOffset> = offsets
            .iter()
            .filter(|o| {
                self.id(&o.topic, &o.partition)
                    .and_then(|id| self.engine.head(id))
                    .is_some_and(|head| o.offset <= head)
            })
            .collect();
        let keys: Vec<(OffsetKey, u64)> = held
            .iter()
            .map(|o| (offset_key(group, &o.topic, &o.partition), o.offset))
            .collect();
        let mode = if seek {
            CommitMode::Seek
        } else {
            CommitMode::Forward
        };
        let after = lock_offsets(&self.offsets)
            .commit(&keys, mode)
            .inspect_err(|e| tracing::warn!(error = %e, group = %group, "commit not written"))?;
        Ok(held
            .into_iter()
            .zip(after)
            .map(|(o, offset)| GroupOffset {
                offset,
                ..o.clone()
            })
            .collect())
    }

    fn committed(&self, group: &GroupName, partitions: &[(Topic, NodeId)]) -> Vec<GroupOffset> {
        let offsets = lock_offsets(&self.offsets);
        let found = |key: &OffsetKey, offset: u64| GroupOffset {
            topic: key.topic.clone(),
            partition: key.partition,
            offset,
        };
        if partitions.is_empty() {
            return offsets.group(group).map(|(k, o)| found(k, o)).collect();
        }
        partitions
            .iter()
            .filter_map(|(t, p)| {
                let key = offset_key(group, t, p);
                offsets.get(&key).map(|o| found(&key, o))
            })
            .collect()
    }

    fn groups(&self) -> Vec<GroupName> {
        lock_offsets(&self.offsets).groups()
    }

    fn bounds(&self, topic: &Topic, producer: &NodeId) -> Option<(u64, u64)> {
        let id = self.id(topic, producer)?;
        Some((self.engine.low_water(id)?, self.engine.head(id)?))
    }

    fn partitions_of(&self, topic: &Topic) -> Vec<(NodeId, u64, u64)> {
        let Ok(name) = std::str::from_utf8(topic.as_bytes()) else {
            return Vec::new();
        };
        self.engine
            .partitions()
            .into_iter()
            .filter(|p| p.key.topic == name)
            .map(|p| (NodeId::from_bytes(p.key.producer), p.low_water, p.head))
            .collect()
    }

    fn topics(&self) -> Vec<Topic> {
        let mut names: Vec<String> = self
            .engine
            .partitions()
            .into_iter()
            .map(|p| p.key.topic)
            .collect();
        names.sort_unstable();
        names.dedup();
        names
            .iter()
            .filter_map(|n| Topic::try_from(n.as_str()).ok())
            .collect()
    }

    fn offset_for_time(&self, topic: &Topic, producer: &NodeId, time: i64) -> Option<u64> {
        let id = self.id(topic, producer)?;
        match self.engine.offset_for_time(id, time) {
            Ok(offset) => offset,
            Err(e) => {
                tracing::warn!(error = %e, partition = %producer, "time index read failed");
                None
            }
        }
    }

    fn read(
        &self,
        topic: &Topic,
        producer: &NodeId,
        from: u64,
        max: usize,
    ) -> Result<LogRead, Self::Error> {
        let Some(id) = self.id(topic, producer) else {
            return Ok(LogRead::Records(Vec::new()));
        };
        match self.engine.read(id, from, max, READ_BYTES) {
            Ok(records) => Ok(LogRead::Records(
                records
                    .into_iter()
                    .map(|r| (r.offset, r.value, r.meta))
                    .collect(),
            )),
            // Damaged on disk (logged once by the engine): the requester is told.
            Err(dafka_store::ReadError::Lost { to, .. }) => Ok(LogRead::Missing { to }),
            Err(e) => Err(e.into()),
        }
    }
}

struct ReaderRole {
    reader: StoreReader,
    log: Arc<EngineLog>,
    committer: Committer,
}

/// Most consumer group requests waiting for the committer; further ones are dropped (their
/// members ask again).
const MAX_GROUP_REQUESTS: usize = 1024;

/// The store reader's consumer group requests (commits, committed offsets, groups), answered
/// in order on a thread of their own: a commit is written and synced before its answer, and
/// the reader's task goes on serving FETCHes meanwhile. The answers go back to the reader
/// (`done`), which is woken to send them.
struct Committer {
    requests: Option<std::sync::mpsc::SyncSender<Message>>,
    done: Arc<Mutex<Vec<Option<Message>>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Requests dropped because the queue was full.
    dropped: u64,
}

impl Committer {
    fn start(store: NodeId, log: Arc<EngineLog>, control: Arc<Control>) -> Result<Self, Error> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Message>(MAX_GROUP_REQUESTS);
        let done: Arc<Mutex<Vec<Option<Message>>>> = Arc::default();
        let answers = done.clone();
        let thread = std::thread::Builder::new()
            .name("dafka-commit".into())
            .spawn(move || {
                for request in rx {
                    let answer = dafka_proto::store::group_answer(store, &request, &*log);
                    answers
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(answer);
                    control.wake.notify_one();
                }
            })
            .map_err(|e| Error::Offsets(e.into()))?;
        Ok(Committer {
            requests: Some(tx),
            done,
            thread: Some(thread),
            dropped: 0,
        })
    }

    fn submit(&mut self, request: Message) {
        let sent = (self.requests.as_ref()).is_some_and(|tx| tx.try_send(request).is_ok());
        if !sent {
            self.dropped += 1;
            if self.dropped.is_power_of_two() {
                tracing::warn!(
                    dropped = self.dropped,
                    "consumer group requests dropped: the offsets file is behind"
                );
            }
        }
    }

    fn take_answers(&self) -> Vec<Option<Message>> {
        std::mem::take(&mut *self.done.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for Committer {
    /// The store closes: the requests queued are written first (a commit half done when the
    /// offsets file closes would be lost).
    fn drop(&mut self) {
        self.requests.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Role for ReaderRole {
    fn on_message(&mut self, message: Message, _now: Instant) -> Result<(), PeerError> {
        if dafka_proto::store::is_group_request(&message) {
            self.committer.submit(message);
            return Ok(());
        }
        self.reader.handle_message(&message, &*self.log)
    }

    fn on_subscription(&mut self, prefix: &[u8], _now: Instant) {
        self.reader.handle_subscription(prefix);
    }

    fn on_unsubscription(&mut self, prefix: &[u8]) {
        self.reader.handle_unsubscription(prefix);
    }

    fn on_timeout(&mut self, _now: Instant) {}

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn transmit(&mut self, out: &mut Vec<Message>, max: usize) -> bool {
        for answer in self.committer.take_answers() {
            self.reader.push_group_answer(answer);
        }
        let (reader, log) = (&mut self.reader, &*self.log);
        take_up_to(out, max, || reader.poll_transmit(log))
    }
}
