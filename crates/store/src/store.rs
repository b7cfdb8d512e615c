//! The engine: appends, group commit on the writer thread, reads, retention.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use dafka_proto::record::{RecordMeta, is_header_name};

use crate::chunk::{ChunkPool, ChunkReader};
use crate::error::{AppendError, DurabilityError, OpenError, PoisonCause, ReadError};
use crate::file::{Dir, FsDir, SegmentFile};
use crate::format::{
    self, ENTRY_PREFIX_LEN, HEADER_LEN, KIND_RECORD, KIND_RECORD_V1, MAX_HEADERS, MAX_TOPIC_LEN,
    RECORD_V1_FIXED_LEN, SegmentHeader,
};
use crate::recovery::{self, RecoveryReport};
use crate::types::{
    AppendRecord, Config, Partition, PartitionInfo, Record, Segment, Stats, SyncPolicy,
};
use crate::{PartitionId, PartitionKey};

/// Largest piece of a segment [`Store::read`] reads at once (a record larger than it is
/// read whole). A read of 1024 records of 100 B needs about 130 KiB of log: 1 MiB pieces
/// read eight times that for nothing, into fresh pages the kernel zeroed on every read (6% of
/// a store's CPU serving Spark, in `clear_page` under `pread`; gone from the profile with
/// 256 KiB pieces).
const READ_CHUNK_MAX: usize = 256 << 10;

/// The batch being formed by appenders.
struct Pending {
    seq: u64,
    buf: BytesMut,
    /// Index candidates: (partition, offset, position in `buf`, largest timestamp of the
    /// interval's records in this batch).
    index: Vec<(u32, u64, u32, i64)>,
    /// Records filling holes: (partition, offset, position in `buf`, timestamp).
    fills: Vec<(u32, u64, u32, i64)>,
    /// Partitions with records in the batch, their head after it, and the largest timestamp
    /// of the records that go on the interval open before the batch (`i64::MIN`: none).
    touched: Vec<(u32, u64, i64)>,
    /// Partitions first declared in the batch.
    declared: Vec<u32>,
    records: u64,
    /// Largest record timestamp (`i64::MIN`: no record).
    max_ts: i64,
}

impl Pending {
    fn new(seq: u64, buf: BytesMut) -> Self {
        Pending {
            seq,
            buf,
            index: Vec::new(),
            fills: Vec::new(),
            touched: Vec::new(),
            declared: Vec::new(),
            records: 0,
            max_ts: i64::MIN,
        }
    }
}

pub(crate) struct State {
    pub(crate) partitions: HashMap<u32, Partition>,
    pub(crate) by_key: HashMap<PartitionKey, u32>,
    pub(crate) next_id: u32,
    pub(crate) segments: VecDeque<Segment>,
    pending: Pending,
    /// The buffer of the batch written last, emptied, for the batch after next: reusing
    /// it spares a fresh allocation (page faults) and its growth by doubling per batch.
    spare: Option<BytesMut>,
    /// The last batch acknowledged.
    durable_seq: u64,
    poisoned: Option<Arc<PoisonCause>>,
    closing: bool,
    writer_done: bool,
    wakers: Vec<(u64, Waker)>,
    stats: Stats,
    /// Places a read found damaged since open (logged once each; at most
    /// [`MAX_DAMAGE_LOGGED`]).
    damage_seen: HashSet<(String, u64)>,
}

/// What [`Store::append_entries`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Records at the partitions' heads.
    Records,
    /// Skip entries at the heads.
    Skip,
    /// Records into holes.
    Fill,
}

/// `from..to` without the offsets in `taken`.
fn split_around(from: u64, to: u64, taken: &BTreeSet<u64>) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut start = from;
    for &t in taken.range(from..to) {
        if t > start {
            out.push((start, t));
        }
        start = t + 1;
    }
    if start < to {
        out.push((start, to));
    }
    out
}

/// Reads the records that filled holes, at their positions: consecutive offsets, stopping once
/// `max_bytes` of values are gathered (at least one record).
fn read_fills(
    positions: &[(u64, u64)],
    segments: &[(u64, String, Arc<dyn SegmentFile>, u64)],
    max_bytes: usize,
) -> Result<Vec<Record>, ReadError> {
    let mut out = Vec::new();
    let mut bytes = 0;
    for &(offset, pos) in positions {
        let Some((base, name, file, len)) = segments.iter().rev().find(|(base, ..)| *base <= pos)
        else {
            break;
        };
        let io = |source| ReadError::Io {
            file: name.clone(),
            source,
        };
        let mut reader = ChunkReader::new(&**file, *len, ENTRY_PREFIX_LEN);
        let at = pos - base;
        let Some(prefix) = reader.peek(at, ENTRY_PREFIX_LEN).map_err(io)? else {
            break;
        };
        let Ok(prefix) = format::decode_prefix(prefix) else {
            break;
        };
        let Some(entry) = reader.get(at, prefix.entry_len()).map_err(io)? else {
            break;
        };
        let Ok(Some(r)) = format::decode_record(&entry) else {
            break;
        };
        match format::record_parts(&entry, 0..entry.len(), &r) {
            Ok((meta, value)) if r.offset == offset => {
                bytes += entry.len() - r.layout.payload_at();
                out.push(Record {
                    offset,
                    meta,
                    value,
                });
            }
            _ => break,
        }
        if bytes >= max_bytes {
            break;
        }
    }
    Ok(out)
}

/// Most damaged places found by reads that are remembered (and so logged only once).
const MAX_DAMAGE_LOGGED: usize = 4096;

struct Shared {
    state: Mutex<State>,
    /// The writer waits here for work.
    work: Condvar,
    /// Tickets and blocked appenders wait here.
    done: Condvar,
    config: Config,
    dir: Arc<dyn Dir>,
    recovery: RecoveryReport,
    /// The durable-point file (see [`format::DurablePoint`]).
    point: Arc<dyn SegmentFile>,
    /// Read chunks to reuse ([`Store::read`]).
    chunks: ChunkPool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Stops the writer when the last [`Store`] handle goes.
struct Owner {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// The directory's lock, held while the store is open ([`Store::open_path`]).
    _lock: Option<crate::file::DirLock>,
}

impl Owner {
    fn close(&self) {
        self.shared.lock().closing = true;
        self.shared.work.notify_all();
        let handle = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            // The writer does not panic; if it did, its tickets already fail as Closed.
            let _ = handle.join();
        }
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.close();
    }
}

/// A store: one segmented log shared by every partition. Cheap to clone; the writer
/// thread stops (after writing what was appended) when the last clone is dropped or
/// [`Store::close`] is called.
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
    owner: Arc<Owner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

/// The first of `path` and its parents that exists and is not a directory.
fn file_on_the_way(path: &std::path::Path) -> Option<std::path::PathBuf> {
    // `components` drops a trailing `/`, with which a file's metadata fails (ENOTDIR).
    let path: std::path::PathBuf = path.components().collect();
    path.ancestors()
        .find(|p| std::fs::metadata(p).is_ok_and(|m| !m.is_dir()))
        .map(std::path::Path::to_path_buf)
}

/// Microseconds since the Unix epoch, UTC, now: the unit of record timestamps
/// ([`RecordMeta::timestamp`]) and of [`Store::apply_retention`].
pub fn now_us() -> i64 {
    let us = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(after) => us(after),
        Err(before) => -us(before.duration()),
    }
}

impl Store {
    /// Opens (or creates) the store in the directory at `path`, locking it: a second
    /// store on the same directory, in this process or another, fails with
    /// [`OpenError::Locked`] until this one is closed.
    pub fn open_path(path: impl AsRef<std::path::Path>, config: Config) -> Result<Self, OpenError> {
        let path = path.as_ref();
        let dir = FsDir::new(path).map_err(|source| match file_on_the_way(path) {
            // Creating it failed with EEXIST (the path is a file: `file/` skips the check
            // `create_dir_all` makes) or ENOTDIR (a parent is one): say which file.
            Some(file) => {
                // `file/` is named `file`, once.
                let whole = path.components().collect::<std::path::PathBuf>() == file;
                OpenError::NotADirectory {
                    path: if whole { &file } else { path }.display().to_string(),
                    file: file.display().to_string(),
                }
            }
            None => OpenError::Io {
                op: "create directory",
                file: path.display().to_string(),
                source,
            },
        })?;
        let lock = dir.lock()?;
        Self::open_locked(Arc::new(dir), config, Some(lock))
    }

    /// Opens (or creates) the store in `dir`, recovering what is there: see
    /// [`RecoveryReport`] and `docs/storage.md`. The directory is not locked: the caller
    /// makes sure no other store uses it ([`Store::open_path`] locks it).
    pub fn open(dir: Arc<dyn Dir>, config: Config) -> Result<Self, OpenError> {
        Self::open_locked(dir, config, None)
    }

    fn open_locked(
        dir: Arc<dyn Dir>,
        config: Config,
        lock: Option<crate::file::DirLock>,
    ) -> Result<Self, OpenError> {
        config.check()?;
        let recovered = recovery::recover(&*dir, &config)?;
        let state = State {
            partitions: recovered.partitions,
            by_key: recovered.by_key,
            next_id: recovered.next_id,
            segments: recovered.segments,
            pending: Pending::new(1, BytesMut::new()),
            spare: None,
            durable_seq: 0,
            poisoned: None,
            closing: false,
            writer_done: false,
            wakers: Vec::new(),
            stats: Stats {
                damaged: recovered.report.damage.len() as u64,
                ..Stats::default()
            },
            damage_seen: HashSet::new(),
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            work: Condvar::new(),
            done: Condvar::new(),
            config,
            dir,
            recovery: recovered.report,
            point: recovered.point,
            chunks: ChunkPool::default(),
        });
        let writer_shared = shared.clone();
        let writer = std::thread::Builder::new()
            .name("dafka-store-writer".into())
            .spawn(move || Writer::new(writer_shared).run())
            .map_err(|source| OpenError::Io {
                op: "spawn writer thread",
                file: String::new(),
                source,
            })?;
        let owner = Arc::new(Owner {
            shared: shared.clone(),
            writer: Mutex::new(Some(writer)),
            _lock: lock,
        });
        Ok(Store { shared, owner })
    }

    /// What recovery found and did when the store was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.shared.recovery
    }

    /// The id of `key`'s partition, declaring it (offsets from 0) if it is new. The
    /// declaration is written with the next batch, before any of its records.
    pub fn declare(&self, key: &PartitionKey) -> Result<PartitionId, AppendError> {
        if key.topic.len() > MAX_TOPIC_LEN {
            return Err(AppendError::TopicTooLong(key.topic.len()));
        }
        let mut st = self.shared.lock();
        if let Some(&id) = st.by_key.get(key) {
            return Ok(PartitionId(id));
        }
        usable(&st)?;
        let id = st.next_id;
        st.next_id = id
            .checked_add(1)
            .ok_or(AppendError::UnknownPartition(PartitionId(id)))?;
        let was_empty = st.pending.buf.is_empty();
        format::encode_declare(&mut st.pending.buf, id, 0, &key.producer, &key.topic);
        st.pending.declared.push(id);
        st.partitions
            .insert(id, Partition::new(key.clone(), 0, false));
        st.by_key.insert(key.clone(), id);
        drop(st);
        if was_empty {
            self.shared.work.notify_one();
        }
        Ok(PartitionId(id))
    }

    /// The id of `key`'s partition, if declared.
    pub fn lookup(&self, key: &PartitionKey) -> Option<PartitionId> {
        self.shared
            .lock()
            .by_key
            .get(key)
            .map(|&id| PartitionId(id))
    }

    /// Appends `records` (of any partitions, each partition's in ascending offset
    /// order) to the batch being formed. All or nothing: a refused record refuses the
    /// call. The returned ticket completes when the records are acknowledged under the
    /// sync policy. Blocks while the batch being formed is over
    /// [`Config::max_pending_bytes`].
    pub fn append(&self, records: &[AppendRecord<'_>]) -> Result<Ticket, AppendError> {
        self.append_entries(records, Mode::Records)
    }

    /// Appends records for offsets in the partition's holes of damaged records (fetched from
    /// another store that holds them): each offset must be in such a hole, and not filled or
    /// being filled already (else [`AppendError::Repeat`]). Once acknowledged they are read as
    /// any other record. All or nothing; the ticket completes as [`append`](Self::append)'s.
    pub fn fill(&self, records: &[AppendRecord<'_>]) -> Result<Ticket, AppendError> {
        self.append_entries(records, Mode::Fill)
    }

    /// The partition's holes of damaged records not yet filled (nor being filled), ascending:
    /// what another store may fill ([`fill`](Self::fill)).
    pub fn holes(&self, partition: PartitionId) -> Vec<(u64, u64)> {
        let st = self.shared.lock();
        let Some(p) = st.partitions.get(&partition.0) else {
            return Vec::new();
        };
        p.holes
            .damaged()
            .into_iter()
            .flat_map(|(from, to)| split_around(from, to, &p.filling))
            .collect()
    }

    /// Gives the partition's next offset a place without keeping a record there (a record
    /// the store refuses, such as one over [`Config::max_record_bytes`]): the offsets after
    /// it go on, and reads of it answer [`ReadError::Lost`]. Written as a skip entry in the
    /// next batch; the ticket completes as [`append`](Self::append)'s.
    pub fn skip(&self, partition: PartitionId, offset: u64) -> Result<Ticket, AppendError> {
        let record = AppendRecord {
            partition,
            offset,
            meta: &RecordMeta::created(0), // not written
            value: &[],
        };
        self.append_entries(&[record], Mode::Skip)
    }

    /// Appends records at the head, skip entries at the head, or records into holes.
    fn append_entries(
        &self,
        records: &[AppendRecord<'_>],
        mode: Mode,
    ) -> Result<Ticket, AppendError> {
        if mode != Mode::Skip {
            check_records(records, self.shared.config.max_record_bytes)?;
        }
        let mut st = self.shared.lock();
        usable(&st)?;
        while st.pending.buf.len() > self.shared.config.max_pending_bytes {
            st = self
                .shared
                .done
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
            usable(&st)?;
        }
        // Check every offset first, moving heads forward; undo on a refusal.
        for (i, r) in records.iter().enumerate() {
            let refusal = match st.partitions.get_mut(&r.partition.0) {
                None => Some(AppendError::UnknownPartition(r.partition)),
                Some(p) if mode == Mode::Fill => {
                    let free = r.offset < p.accepted
                        && p.holes.fillable(r.offset)
                        && !p.fills.contains_key(&r.offset);
                    (!free || !p.filling.insert(r.offset)).then_some(AppendError::Repeat {
                        partition: r.partition,
                        offset: r.offset,
                        head: p.accepted,
                    })
                }
                Some(p) if r.offset == p.accepted => {
                    p.accepted += 1;
                    None
                }
                Some(p) => Some(if r.offset > p.accepted {
                    AppendError::Gap {
                        partition: r.partition,
                        offset: r.offset,
                        head: p.accepted,
                    }
                } else {
                    AppendError::Repeat {
                        partition: r.partition,
                        offset: r.offset,
                        head: p.accepted,
                    }
                }),
            };
            if let Some(refusal) = refusal {
                for done in records[..i].iter().rev() {
                    if let Some(p) = st.partitions.get_mut(&done.partition.0) {
                        if mode == Mode::Fill {
                            p.filling.remove(&done.offset);
                        } else {
                            p.accepted = done.offset;
                        }
                    }
                }
                return Err(refusal);
            }
        }
        let st = &mut *st;
        let was_empty = st.pending.buf.is_empty();
        let interval = self.shared.config.index_interval_bytes;
        let pending = &mut st.pending;
        for r in records {
            let pos = pending.buf.len() as u32;
            let Some(p) = st.partitions.get_mut(&r.partition.0) else {
                continue; // checked above
            };
            let ts = r.meta.timestamp;
            match mode {
                Mode::Skip => {
                    format::encode_skip(&mut pending.buf, r.partition.0, r.offset, 1);
                    p.holes.insert(r.offset, r.offset + 1, true);
                }
                Mode::Records | Mode::Fill => {
                    format::encode_record(
                        &mut pending.buf,
                        r.partition.0,
                        r.offset,
                        r.meta,
                        r.value,
                    );
                    pending.max_ts = pending.max_ts.max(ts);
                }
            }
            if mode == Mode::Fill {
                // Below the head: no index entry (the index follows the log's order), no move
                // of the head; its position is kept apart once acknowledged.
                pending.fills.push((r.partition.0, r.offset, pos, ts));
                continue;
            }
            if p.touched.0 != pending.seq {
                p.touched = (pending.seq, pending.touched.len());
                pending
                    .touched
                    .push((r.partition.0, r.offset + 1, i64::MIN));
            }
            let touched = &mut pending.touched[p.touched.1];
            touched.1 = r.offset + 1;
            if mode == Mode::Skip {
                continue;
            }
            let size = pending.buf.len() - pos as usize;
            if p.index_due(size, interval) {
                p.indexed = (pending.seq, pending.index.len());
                pending.index.push((r.partition.0, r.offset, pos, ts));
            } else if p.indexed.0 == pending.seq {
                let candidate = &mut pending.index[p.indexed.1].3;
                *candidate = (*candidate).max(ts);
            } else {
                touched.2 = touched.2.max(ts);
            }
        }
        if mode != Mode::Skip {
            pending.records += records.len() as u64;
        }
        let ticket = Ticket {
            shared: self.shared.clone(),
            seq: pending.seq,
        };
        if was_empty {
            self.shared.work.notify_one();
        }
        Ok(ticket)
    }

    /// The largest record value this store keeps ([`Config::max_record_bytes`]).
    pub fn max_record_bytes(&self) -> usize {
        self.shared.config.max_record_bytes
    }

    /// Next offset after the partition's last acknowledged record.
    pub fn head(&self, partition: PartitionId) -> Option<u64> {
        self.shared
            .lock()
            .partitions
            .get(&partition.0)
            .map(|p| p.durable)
    }

    /// The offset the partition's next append must carry (acknowledged or not).
    pub fn next_offset(&self, partition: PartitionId) -> Option<u64> {
        self.shared
            .lock()
            .partitions
            .get(&partition.0)
            .map(|p| p.accepted)
    }

    /// The partition's first offset still stored (retention moves it forward).
    pub fn low_water(&self, partition: PartitionId) -> Option<u64> {
        self.shared
            .lock()
            .partitions
            .get(&partition.0)
            .map(|p| p.low_water)
    }

    /// Every partition the store holds, by id.
    pub fn partitions(&self) -> Vec<PartitionInfo> {
        let st = self.shared.lock();
        let mut out: Vec<PartitionInfo> = st
            .partitions
            .iter()
            .map(|(&id, p)| PartitionInfo {
                id: PartitionId(id),
                key: p.key.clone(),
                low_water: p.low_water,
                head: p.durable,
            })
            .collect();
        out.sort_by_key(|p| p.id);
        out
    }

    /// Counters since open.
    pub fn stats(&self) -> Stats {
        self.shared.lock().stats
    }

    /// The last batch acknowledged (see [`Ticket::batch`]).
    pub fn durable_batch(&self) -> u64 {
        self.shared.lock().durable_seq
    }

    /// Waits until a batch after `batch` is acknowledged, or `timeout`; returns the
    /// last batch acknowledged (used by benchmarks to time acknowledgements).
    pub fn wait_durable_after(&self, batch: u64, timeout: Duration) -> u64 {
        let st = self.shared.lock();
        let (st, _) = self
            .shared
            .done
            .wait_timeout_while(st, timeout, |st| {
                st.durable_seq <= batch && st.poisoned.is_none() && !st.writer_done
            })
            .unwrap_or_else(PoisonError::into_inner);
        st.durable_seq
    }

    /// The cause, if a failed write or sync poisoned the store.
    pub fn poisoned(&self) -> Option<Arc<PoisonCause>> {
        self.shared.lock().poisoned.clone()
    }

    /// Reads acknowledged records of `partition` from offset `from`, in ascending
    /// order: at most `max_records`, and stopping once `max_bytes` of values are
    /// gathered (at least one record is returned if any is there). Empty at the head.
    pub fn read(
        &self,
        partition: PartitionId,
        from: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Vec<Record>, ReadError> {
        let st = self.shared.lock();
        let p = st
            .partitions
            .get(&partition.0)
            .ok_or(ReadError::UnknownPartition(partition))?;
        if from < p.low_water {
            return Err(ReadError::BelowLowWater {
                offset: from,
                low_water: p.low_water,
            });
        }
        if from > p.durable {
            return Err(ReadError::BeyondHead {
                offset: from,
                head: p.durable,
            });
        }
        let head = p.durable;
        if from == head || max_records == 0 {
            return Ok(Vec::new());
        }
        if p.fills.contains_key(&from) {
            let positions: Vec<(u64, u64)> = p
                .fills
                .range(from..)
                .zip(from..)
                .take_while(|&((&o, _), want)| o == want)
                .take(max_records)
                .map(|((&o, &pos), _)| (o, pos))
                .collect();
            let segments: Vec<(u64, String, Arc<dyn SegmentFile>, u64)> = st
                .segments
                .iter()
                .map(|s| (s.base, s.name.clone(), s.file.clone(), s.len))
                .collect();
            drop(st);
            return read_fills(&positions, &segments, max_bytes);
        }
        if let Some((_, to)) = p.holes.at(from) {
            return Err(ReadError::Lost { from, to });
        }
        let first_base = st.segments.front().map_or(0, |s| s.base);
        let start = p
            .index
            .start_for(from)
            .map_or(first_base, |pos| pos.max(first_base));
        type Piece = (u64, String, Arc<dyn SegmentFile>, u64, Vec<(u64, u64)>);
        let segments: Vec<Piece> = st
            .segments
            .iter()
            .filter(|s| s.base + s.len > start)
            .map(|s| {
                (
                    s.base,
                    s.name.clone(),
                    s.file.clone(),
                    s.len,
                    s.skips.clone(),
                )
            })
            .collect();
        drop(st);

        let chunk = max_bytes.clamp(64 << 10, READ_CHUNK_MAX);
        // Grown as records come (reserving a whole chunk's worth up front took fresh pages
        // from the kernel on every read, a page fault each few records).
        let mut out = Vec::new();
        let mut next = from;
        let mut bytes = 0usize;
        for (base, name, file, len, skips) in segments {
            let io = |source| ReadError::Io {
                file: name.clone(),
                source,
            };
            let mut reader = ChunkReader::pooled(&*file, &name, len, chunk, &self.shared.chunks);
            let mut pos = start.saturating_sub(base).max(HEADER_LEN as u64);
            let wanted = partition.0.to_be_bytes();
            // Damaged bytes found at open, to jump over (they hold no whole entry): one
            // compare per entry against the next one (none: never).
            let first = pos;
            let mut skips = skips.into_iter().filter(|&(_, to)| to > first);
            let none = (u64::MAX, u64::MAX);
            let mut skip = skips.next().unwrap_or(none);
            loop {
                if pos >= skip.0 {
                    pos = pos.max(skip.1);
                    skip = skips.next().unwrap_or(none);
                    continue;
                }
                // A commit entry (the last of every segment) is shorter than this peek.
                let Some(first) = reader.peek(pos, ENTRY_PREFIX_LEN + 5).map_err(io)? else {
                    break;
                };
                let Ok(prefix) = format::decode_prefix(first) else {
                    break;
                };
                // Look at kind and partition before paying for the CRC; whatever is served
                // is checked by `decode_record` (and its extras by `record_parts`). Both
                // record kinds have the partition there, and at least these fixed fields.
                let ours = matches!(
                    first.get(ENTRY_PREFIX_LEN),
                    Some(&(KIND_RECORD | KIND_RECORD_V1))
                ) && prefix.body_len >= RECORD_V1_FIXED_LEN
                    && first.get(9..13) == Some(&wanted[..]);
                let entry_len = prefix.entry_len();
                if !ours {
                    if pos + entry_len as u64 > reader.end() {
                        break;
                    }
                    pos += entry_len as u64;
                    continue;
                }
                let Some((start, end)) = reader.range(pos, entry_len).map_err(io)? else {
                    break; // damage found at open: the segment's readable end is before it
                };
                let at = pos;
                pos += entry_len as u64;
                let chunk = reader.chunk();
                let record = match format::decode_record(&chunk[start..end]) {
                    Ok(Some(r)) => r,
                    Ok(None) => continue,
                    Err(e) => {
                        self.damaged_on_read(&name, at, &e);
                        continue;
                    }
                };
                if record.offset < next {
                    continue;
                }
                if record.offset > next {
                    if out.is_empty() {
                        return Err(self.lost(partition, next, record.offset));
                    }
                    return Ok(out);
                }
                // Without extras (the common case), the record is built here, in place: the
                // one reference count taken per record served is the value's slice.
                let payload = start + record.layout.payload_at();
                let served = match record.plain_meta() {
                    Some(meta) => Record {
                        offset: record.offset,
                        meta,
                        value: chunk.slice(payload..end),
                    },
                    None => match format::record_parts(chunk, start..end, &record) {
                        Ok((meta, value)) => Record {
                            offset: record.offset,
                            meta,
                            value,
                        },
                        Err(e) => {
                            self.damaged_on_read(&name, at, &e);
                            continue;
                        }
                    },
                };
                bytes += end - payload;
                next += 1;
                out.push(served);
                if next >= head || out.len() >= max_records || bytes >= max_bytes {
                    return Ok(out);
                }
            }
        }
        if out.is_empty() {
            return Err(self.lost(partition, next, head));
        }
        Ok(out)
    }

    /// The first (lowest) offset of `partition` whose record is stamped at or after `t_us`
    /// (microseconds since the Unix epoch, as [`RecordMeta::timestamp`]), among the
    /// acknowledged records still held; `None` when every one of them is older (or there is
    /// none). Timestamps need not grow with offsets: the partition's sparse index keeps the
    /// largest timestamp of each of its intervals (`index_interval_bytes` of records) and of
    /// all those before it, so the first interval that can hold such a record is found by
    /// bisection, and only it is read (and, at most, the records before the first index
    /// entry left by retention). Offsets lost to damage are passed over.
    pub fn offset_for_time(
        &self,
        partition: PartitionId,
        t_us: i64,
    ) -> Result<Option<u64>, ReadError> {
        let mut from = 0;
        loop {
            let (start, end) = {
                let st = self.shared.lock();
                let p = (st.partitions.get(&partition.0))
                    .ok_or(ReadError::UnknownPartition(partition))?;
                let (head, from_) = (p.durable, from.max(p.low_water));
                if from_ >= head {
                    return Ok(None);
                }
                match p.index.first_offset() {
                    // Not indexed (its entry went with a dropped segment): read it.
                    Some(first) if from_ < first => (from_, first.min(head)),
                    None => (from_, head),
                    Some(_) => match p.index.next_interval(from_, t_us) {
                        Some((start, end)) => (start, end.map_or(head, |e| e.min(head))),
                        None => return Ok(None),
                    },
                }
            };
            if let Some(offset) = self.first_stamped(partition, start, end, t_us)? {
                return Ok(Some(offset));
            }
            from = end;
        }
    }

    /// The first offset in `start..end` of a record stamped at or after `t_us`, by reading.
    fn first_stamped(
        &self,
        partition: PartitionId,
        start: u64,
        end: u64,
        t_us: i64,
    ) -> Result<Option<u64>, ReadError> {
        // An interval is `index_interval_bytes` (4 KiB) of records: one read, most often, and
        // none past `end` (offsets are contiguous).
        const RECORDS: usize = 1024;
        const BYTES: usize = 64 << 10;
        let mut at = start;
        while at < end {
            let records = usize::try_from(end - at).map_or(RECORDS, |n| n.min(RECORDS));
            match self.read(partition, at, records, BYTES) {
                Ok(records) => {
                    let Some(last) = records.last() else {
                        return Ok(None);
                    };
                    at = last.offset + 1;
                    if let Some(r) = (records.iter())
                        .take_while(|r| r.offset < end)
                        .find(|r| r.meta.timestamp >= t_us)
                    {
                        return Ok(Some(r.offset));
                    }
                }
                Err(ReadError::Lost { to, .. }) => at = to,
                // Retention went past them meanwhile.
                Err(ReadError::BelowLowWater { low_water, .. }) => at = low_water,
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// A read found offsets `from..to` missing (their records damaged since the store was
    /// opened): they become a hole of the partition, answered at once from now on.
    #[cold]
    #[inline(never)]
    fn lost(&self, partition: PartitionId, from: u64, to: u64) -> ReadError {
        if let Some(p) = self.shared.lock().partitions.get_mut(&partition.0) {
            p.holes.insert(from, to, false);
        }
        ReadError::Lost { from, to }
    }

    /// A read met a damaged entry (the disk damaged it after the store was opened): logged
    /// and counted once per place.
    #[cold]
    #[inline(never)]
    fn damaged_on_read(&self, segment: &str, position: u64, error: &format::FormatError) {
        let mut st = self.shared.lock();
        if st.damage_seen.len() >= MAX_DAMAGE_LOGGED
            || !st.damage_seen.insert((segment.to_owned(), position))
        {
            return;
        }
        st.stats.damaged += 1;
        drop(st);
        tracing::warn!(segment, position, %error,
            "damaged entry found while reading: never served by this store");
    }

    /// Drops the oldest segments beyond the retention limits, with `now_us` (microseconds
    /// since the Unix epoch, as record timestamps) as the current time, and advances
    /// low-water marks. The writer also runs this at every new segment with the system clock
    /// ([`now_us`]), and with retention by age as it starts and every quarter of the age limit
    /// (100 ms to 60 s) whether records arrive or not. Returns how many segments were dropped.
    pub fn apply_retention(&self, now_us: i64) -> usize {
        apply_retention(&self.shared, now_us)
    }

    /// Writes what was appended, stops the writer and waits for it.
    pub fn close(self) {
        self.owner.close();
    }
}

/// Refuses the records a store would not read back as they were given: value, key and header
/// bytes over `max` together, more than [`MAX_HEADERS`] headers, a header name that is not
/// UTF-8.
fn check_records(records: &[AppendRecord<'_>], max: usize) -> Result<(), AppendError> {
    for r in records {
        if let Some(headers) = r.meta.headers() {
            if headers.len() > MAX_HEADERS {
                return Err(AppendError::TooManyHeaders {
                    count: headers.len(),
                    max: MAX_HEADERS,
                });
            }
            if headers.into_iter().any(|h| !is_header_name(h.name)) {
                return Err(AppendError::HeaderNameNotUtf8);
            }
        }
        let size = r.value.len() + r.meta.payload_len();
        if size > max {
            return Err(AppendError::RecordTooLarge { size, max });
        }
    }
    Ok(())
}

fn usable(st: &State) -> Result<(), AppendError> {
    if let Some(cause) = &st.poisoned {
        return Err(AppendError::Poisoned(cause.clone()));
    }
    if st.closing || st.writer_done {
        return Err(AppendError::Closed);
    }
    Ok(())
}

fn apply_retention(shared: &Shared, now_us: i64) -> usize {
    let retention = shared.config.retention;
    let max_age = (retention.max_age).map(|age| i64::try_from(age.as_micros()).unwrap_or(i64::MAX));
    let mut st = shared.lock();
    let mut total: u64 = st.segments.iter().map(|s| s.len).sum();
    let mut dropped = Vec::new();
    while st.segments.len() > 1 {
        let first = &st.segments[0];
        // By the records' own timestamps, as Kafka: a segment goes once its newest record is
        // older than the limit, so no record younger than it ever goes (a segment without
        // records, only declarations, is as old as can be).
        let too_old = max_age.is_some_and(|age| first.max_ts.saturating_add(age) < now_us);
        let too_big = retention.max_bytes.is_some_and(|max| total > max);
        if !too_old && !too_big {
            break;
        }
        if let Some(seg) = st.segments.pop_front() {
            total -= seg.len;
            dropped.push(seg);
        }
    }
    if dropped.is_empty() {
        return 0;
    }
    {
        let st = &mut *st;
        if let Some(first) = st.segments.front() {
            for &(id, next) in &first.start_heads {
                if let Some(p) = st.partitions.get_mut(&id) {
                    p.low_water = p.low_water.max(next);
                }
            }
            let base = first.base;
            for p in st.partitions.values_mut() {
                p.index.drop_before(base);
                p.fills.retain(|_, pos| *pos >= base);
            }
        }
        st.stats.segments_dropped += dropped.len() as u64;
    }
    let n = dropped.len();
    let names: Vec<String> = dropped.into_iter().map(|s| s.name).collect();
    drop(st);
    for name in names {
        match shared.dir.remove(&name) {
            Ok(()) => tracing::info!(segment = %name, "segment dropped by retention"),
            Err(e) => {
                tracing::warn!(segment = %name, error = %e, "removing a dropped segment failed")
            }
        }
    }
    n
}

/// A promise that appended records will be acknowledged: wait for it blocking
/// ([`Ticket::wait`]) or `.await` it (it is a [`Future`] that needs no runtime).
#[derive(Clone)]
pub struct Ticket {
    shared: Arc<Shared>,
    seq: u64,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket").field("batch", &self.seq).finish()
    }
}

impl Ticket {
    /// The group-commit batch the records are in.
    pub fn batch(&self) -> u64 {
        self.seq
    }

    fn check(&self, st: &State) -> Option<Result<(), DurabilityError>> {
        if st.durable_seq >= self.seq {
            Some(Ok(()))
        } else if let Some(cause) = &st.poisoned {
            Some(Err(DurabilityError::Poisoned(cause.clone())))
        } else if st.writer_done {
            Some(Err(DurabilityError::Closed))
        } else {
            None
        }
    }

    /// Whether the records are acknowledged already (errors count as done).
    pub fn is_done(&self) -> bool {
        self.check(&self.shared.lock()).is_some()
    }

    /// Blocks until the records are acknowledged, their write failed, or `timeout`.
    pub fn wait(&self, timeout: Duration) -> Result<(), DurabilityError> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        loop {
            if let Some(result) = self.check(&st) {
                return result;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(DurabilityError::Timeout);
            }
            st = self
                .shared
                .done
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Future for Ticket {
    type Output = Result<(), DurabilityError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut st = self.shared.lock();
        if let Some(result) = self.check(&st) {
            return Poll::Ready(result);
        }
        if let Some(slot) = st.wakers.iter_mut().find(|(_, w)| w.will_wake(cx.waker())) {
            slot.0 = slot.0.max(self.seq);
        } else {
            st.wakers.push((self.seq, cx.waker().clone()));
        }
        Poll::Pending
    }
}

/// When the writer syncs, and how many syncs it has not yet counted in [`Stats::syncs`]: the
/// one place the [`SyncPolicy`] is read.
#[derive(Debug)]
struct SyncSchedule {
    policy: SyncPolicy,
    /// Written since the last sync.
    dirty: bool,
    last_sync: Instant,
    /// Syncs done and not yet added to the stats (added under the state's lock).
    uncounted: u64,
}

impl SyncSchedule {
    fn new(policy: SyncPolicy, now: Instant) -> Self {
        SyncSchedule {
            policy,
            dirty: false,
            last_sync: now,
            uncounted: 0,
        }
    }

    /// A batch was written: whether it must be synced before it is acknowledged.
    fn written(&mut self) -> bool {
        match self.policy {
            SyncPolicy::Always => {
                self.dirty = true;
                true
            }
            SyncPolicy::Interval(_) => {
                self.dirty = true;
                false
            }
            SyncPolicy::Never => false,
        }
    }

    /// When the writer, idle, must sync what it wrote (`None`: only when work comes).
    fn deadline(&self) -> Option<Instant> {
        match self.policy {
            SyncPolicy::Interval(every) if self.dirty => Some(self.last_sync + every),
            _ => None,
        }
    }

    /// Whether a new segment's header is synced (with the directory) before it is used.
    fn syncs_segments(&self) -> bool {
        !matches!(self.policy, SyncPolicy::Never)
    }

    /// A sync of everything written is due (something was written since the last).
    fn due(&self) -> bool {
        self.dirty
    }

    fn synced(&mut self, now: Instant) {
        self.dirty = false;
        self.last_sync = now;
        self.uncounted += 1;
    }

    /// Syncs since the last call, for [`Stats::syncs`].
    fn take_count(&mut self) -> u64 {
        std::mem::take(&mut self.uncounted)
    }
}

/// The segment being written.
struct ActiveSegment {
    file: Arc<dyn SegmentFile>,
    name: String,
    /// Its first byte's global position.
    base: u64,
    /// Where the next batch is written in the file.
    pos: u64,
    /// Whether its header says [`format::FORMAT_VERSION`]: the records written now may go in
    /// it (not in a version 1 segment, nor one whose header is damaged).
    current: bool,
}

impl ActiveSegment {
    /// Whether a batch of `len` bytes must start a new segment: this one is of another format
    /// version, or the batch would take it past `segment_bytes` (a segment holding only its
    /// header takes any batch).
    fn is_full_for(&self, len: usize, segment_bytes: u64) -> bool {
        !self.current || (self.pos > HEADER_LEN as u64 && self.pos + len as u64 > segment_bytes)
    }

    /// The global position after the last byte written.
    fn end(&self) -> u64 {
        self.base + self.pos
    }

    fn poison(&self, op: &'static str, source: io::Error) -> PoisonCause {
        PoisonCause {
            op,
            file: self.name.clone(),
            source,
        }
    }

    /// Writes `buf` at the write position; returns where it starts in the file.
    fn write(&mut self, buf: &[u8]) -> Result<u64, PoisonCause> {
        let at = self.pos;
        self.file
            .write_all_at(buf, at)
            .map_err(|e| self.poison("write", e))?;
        self.pos += buf.len() as u64;
        Ok(at)
    }

    fn sync(&self) -> Result<(), PoisonCause> {
        self.file
            .sync_data()
            .map_err(|e| self.poison("fdatasync", e))
    }
}

/// A batch taken from the appenders, with what the writer needs to write it.
struct NextBatch {
    batch: Pending,
    /// It starts a new segment, which redeclares these partitions (id, key, next offset).
    roll: Option<Vec<(u32, PartitionKey, u64)>>,
}

/// Where a batch was written.
struct Written {
    /// The segment the batch started, if it started one.
    rolled: Option<Segment>,
    /// The batch's global position, and the active segment's length after it.
    at: u64,
    segment_len: u64,
}

/// The writer thread: takes the whole pending batch, writes it with one `write` and
/// covers it with one `fdatasync`, then acknowledges it
/// ([`next_batch`](Writer::next_batch), [`write_batch`](Writer::write_batch),
/// [`publish_durable`](Writer::publish_durable)).
struct Writer {
    shared: Arc<Shared>,
    active: Option<ActiveSegment>,
    sync: SyncSchedule,
    /// Writing the durable point failed once already (logged once).
    point_failed: bool,
    /// With retention by age: how often it is applied besides at each new segment, and when
    /// next (a store written to rarely, or not at all, still drops what ages out).
    age_check: Option<(Duration, Instant)>,
}

/// How often a store with retention by age applies it while no segment rolls: a quarter of
/// the age limit, within these bounds (Kafka checks every 5 minutes by default).
const AGE_CHECK_MIN: Duration = Duration::from_millis(100);
const AGE_CHECK_MAX: Duration = Duration::from_secs(60);

impl Writer {
    fn new(shared: Arc<Shared>) -> Self {
        let active = shared.lock().segments.back().map(|s| ActiveSegment {
            file: s.file.clone(),
            name: s.name.clone(),
            base: s.base,
            pos: s.len,
            current: s.version == Some(format::FORMAT_VERSION),
        });
        let now = Instant::now();
        let sync = SyncSchedule::new(shared.config.sync, now);
        // Due at once: segments that aged out while the store was closed go at its start.
        let age_check = (shared.config.retention.max_age)
            .map(|age| ((age / 4).clamp(AGE_CHECK_MIN, AGE_CHECK_MAX), now));
        Writer {
            shared,
            active,
            sync,
            point_failed: false,
            age_check,
        }
    }

    /// Everything written so far is synced: the durable point says so. The point itself is
    /// not synced (an older point on disk after a power cut is still true), and a failure
    /// to write it costs only recovery's precision, so it does not poison the store.
    fn mark_durable(&mut self) {
        let Some(active) = &self.active else {
            return;
        };
        let point = format::DurablePoint {
            position: active.end(),
        };
        if let Err(error) = self.shared.point.write_all_at(&point.encode(), 0)
            && !std::mem::replace(&mut self.point_failed, true)
        {
            tracing::warn!(%error, "writing the durable point failed (logged once): \
                recovery will tell a torn tail from damage by batch commits alone");
        }
    }

    fn run(mut self) {
        let result = self.serve();
        let mut st = self.shared.lock();
        st.stats.syncs += self.sync.take_count();
        if let Err(cause) = result {
            tracing::error!(error = %cause, "store poisoned: no further appends are accepted");
            st.poisoned = Some(Arc::new(cause));
        }
        st.writer_done = true;
        for (_, waker) in st.wakers.drain(..) {
            waker.wake();
        }
        drop(st);
        self.shared.done.notify_all();
        self.shared.work.notify_all();
    }

    fn serve(&mut self) -> Result<(), PoisonCause> {
        while let Some(next) = self.next_batch()? {
            let NextBatch { mut batch, roll } = next;
            let full = roll.is_some();
            let written = self.write_batch(&batch, roll)?;
            self.publish_durable(&mut batch, written);
            if full {
                apply_retention(&self.shared, now_us());
            }
        }
        self.sync_if_dirty()
    }

    /// Waits for a batch, syncing on the schedule while idle; `None` once the store closes
    /// with nothing pending. The batch taken is closed with its commit entry, and the next
    /// one starts empty (in the spare buffer) for the appenders.
    fn next_batch(&mut self) -> Result<Option<NextBatch>, PoisonCause> {
        let mut st = self.shared.lock();
        loop {
            st.stats.syncs += self.sync.take_count();
            if let Some((every, due)) = self.age_check
                && Instant::now() >= due
                && !st.closing
            {
                drop(st);
                apply_retention(&self.shared, now_us());
                self.age_check = Some((every, Instant::now() + every));
                st = self.shared.lock();
                continue;
            }
            if !st.pending.buf.is_empty() {
                break;
            }
            if st.closing {
                return Ok(None);
            }
            let age_due = self.age_check.map(|(_, due)| due);
            let deadline = match (self.sync.deadline(), age_due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match deadline {
                Some(deadline) if Instant::now() >= deadline => {
                    // The sync's (the age check's was handled above).
                    drop(st);
                    self.sync_if_dirty()?;
                    st = self.shared.lock();
                }
                Some(deadline) => {
                    let wait = deadline.saturating_duration_since(Instant::now());
                    st = (self.shared.work.wait_timeout(st, wait))
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                None => {
                    st = self
                        .shared
                        .work
                        .wait(st)
                        .unwrap_or_else(PoisonError::into_inner)
                }
            }
        }
        let buf = st.spare.take().unwrap_or_default();
        let next = Pending::new(st.pending.seq + 1, buf);
        let mut batch = std::mem::replace(&mut st.pending, next);
        format::encode_commit(&mut batch.buf);
        let segment_bytes = self.shared.config.segment_bytes;
        let full =
            (self.active.as_ref()).is_none_or(|a| a.is_full_for(batch.buf.len(), segment_bytes));
        // Partitions acknowledged so far are redeclared at the start of a new segment.
        let roll = full.then(|| {
            let mut v: Vec<_> = (st.partitions.iter())
                .filter(|(_, p)| p.declared_durable)
                .map(|(&id, p)| (id, p.key.clone(), p.durable))
                .collect();
            v.sort_by_key(|e| e.0);
            v
        });
        drop(st);
        self.shared.done.notify_all(); // appenders blocked on a full batch
        Ok(Some(NextBatch { batch, roll }))
    }

    /// Writes the batch (into a new segment if `roll` says so) and syncs it if the schedule
    /// says so.
    fn write_batch(
        &mut self,
        batch: &Pending,
        roll: Option<Vec<(u32, PartitionKey, u64)>>,
    ) -> Result<Written, PoisonCause> {
        let rolled = match roll {
            Some(redeclare) => Some(self.roll(&redeclare)?),
            None => None,
        };
        let Some(active) = self.active.as_mut() else {
            unreachable!("roll() always sets the active segment");
        };
        let at = active.base + active.write(&batch.buf)?;
        let segment_len = active.pos;
        if self.sync.written() {
            self.sync_if_dirty()?;
        }
        Ok(Written {
            rolled,
            at,
            segment_len,
        })
    }

    /// The batch is durable (as the policy defines it): its partitions' heads, index
    /// entries and fills become readable, the stats count it, and its waiters wake.
    fn publish_durable(&mut self, batch: &mut Pending, written: Written) {
        let mut guard = self.shared.lock();
        let st = &mut *guard;
        if let Some(seg) = written.rolled {
            st.segments.push_back(seg);
        }
        let abs = written.at;
        if let Some(seg) = st.segments.back_mut() {
            seg.len = written.segment_len;
            seg.max_ts = seg.max_ts.max(batch.max_ts);
            seg.start_heads
                .extend(batch.declared.iter().map(|&id| (id, 0)));
        }
        for &id in &batch.declared {
            if let Some(p) = st.partitions.get_mut(&id) {
                p.declared_durable = true;
            }
        }
        // The records going on each partition's open interval first, then the intervals the
        // batch starts.
        for &(id, head, ts) in &batch.touched {
            if let Some(p) = st.partitions.get_mut(&id) {
                p.durable = head;
                if ts != i64::MIN {
                    p.index.extend_last(ts);
                }
            }
        }
        for &(id, offset, rel, ts) in &batch.index {
            if let Some(p) = st.partitions.get_mut(&id) {
                p.index.push(offset, abs + u64::from(rel), ts);
            }
        }
        for &(id, offset, rel, ts) in &batch.fills {
            if let Some(p) = st.partitions.get_mut(&id) {
                p.filling.remove(&offset);
                p.holes.remove(offset);
                p.fills.insert(offset, abs + u64::from(rel));
                p.index.fill(offset, ts);
            }
        }
        st.durable_seq = batch.seq;
        let written = batch.buf.len() as u64;
        let mut buf = std::mem::take(&mut batch.buf);
        if buf.capacity() <= 2 * self.shared.config.max_pending_bytes {
            buf.clear();
            st.spare = Some(buf);
        }
        st.stats.batches += 1;
        st.stats.bytes_written += written;
        st.stats.syncs += self.sync.take_count();
        st.stats.records += batch.records;
        let seq = batch.seq;
        st.wakers.retain(|(s, w)| {
            if *s <= seq {
                w.wake_by_ref();
                false
            } else {
                true
            }
        });
        drop(guard);
        self.shared.done.notify_all();
    }

    fn sync_if_dirty(&mut self) -> Result<(), PoisonCause> {
        if !self.sync.due() {
            return Ok(());
        }
        if let Some(active) = &self.active {
            active.sync()?;
        }
        self.mark_durable();
        self.sync.synced(Instant::now());
        Ok(())
    }

    /// Seals the current segment (synced unless the policy is `never`) and starts the
    /// next: header, redeclarations and a commit, written and synced before any batch.
    fn roll(&mut self, redeclare: &[(u32, PartitionKey, u64)]) -> Result<Segment, PoisonCause> {
        let syncs = self.sync.syncs_segments();
        if syncs {
            self.sync_if_dirty()?;
        }
        let base = self.active.as_ref().map_or(0, ActiveSegment::end);
        let name = format::segment_file_name(base);
        let cause = |op, source: io::Error| PoisonCause {
            op,
            file: name.clone(),
            source,
        };
        let file = self
            .shared
            .dir
            .create(&name)
            .map_err(|e| cause("create", e))?;
        let mut buf = BytesMut::from(&SegmentHeader::new(base).encode()[..]);
        for (id, key, next) in redeclare {
            format::encode_declare(&mut buf, *id, *next, &key.producer, &key.topic);
        }
        format::encode_commit(&mut buf);
        file.write_all_at(&buf, 0).map_err(|e| cause("write", e))?;
        if syncs {
            file.sync_data().map_err(|e| cause("fdatasync", e))?;
            self.shared
                .dir
                .sync()
                .map_err(|e| cause("directory fsync", e))?;
        }
        self.active = Some(ActiveSegment {
            file: file.clone(),
            name: name.clone(),
            base,
            pos: buf.len() as u64,
            current: true,
        });
        if syncs {
            self.mark_durable();
        }
        self.shared.lock().stats.bytes_written += buf.len() as u64;
        let mut segment = Segment::new(base, name, file, buf.len() as u64);
        segment.start_heads = redeclare.iter().map(|(id, _, next)| (*id, *next)).collect();
        Ok(segment)
    }
}

#[cfg(test)]
mod sync_schedule_tests {
    use super::*;

    #[test]
    fn always_syncs_every_batch_and_never_waits_idle() {
        let t0 = Instant::now();
        let mut s = SyncSchedule::new(SyncPolicy::Always, t0);
        assert!(!s.due());
        assert!(s.written());
        assert!(s.due());
        s.synced(t0);
        assert!(!s.due());
        assert_eq!(s.deadline(), None);
        assert!(s.written());
        s.synced(t0);
        assert_eq!(s.take_count(), 2);
        assert_eq!(s.take_count(), 0);
        assert!(s.syncs_segments());
    }

    #[test]
    fn interval_syncs_when_idle_past_the_interval_after_a_write() {
        let t0 = Instant::now();
        let every = Duration::from_millis(200);
        let mut s = SyncSchedule::new(SyncPolicy::Interval(every), t0);
        // Nothing written: nothing to wait for.
        assert_eq!(s.deadline(), None);
        assert!(!s.written(), "acknowledged after the write, not the sync");
        assert!(s.due());
        assert_eq!(s.deadline(), Some(t0 + every));
        // Synced later: the next interval counts from then.
        let t1 = t0 + Duration::from_millis(300);
        s.synced(t1);
        assert_eq!(s.deadline(), None);
        assert!(!s.written());
        assert_eq!(s.deadline(), Some(t1 + every));
        assert_eq!(s.take_count(), 1);
        assert!(s.syncs_segments());
    }

    #[test]
    fn never_syncs_nothing() {
        let t0 = Instant::now();
        let mut s = SyncSchedule::new(SyncPolicy::Never, t0);
        assert!(!s.written());
        assert!(!s.due());
        assert_eq!(s.deadline(), None);
        assert!(!s.syncs_segments());
        assert_eq!(s.take_count(), 0);
    }

    #[test]
    fn a_segment_holding_only_its_header_takes_any_batch() {
        let active = ActiveSegment {
            file: Arc::new(crate::file::MemFile::default()),
            name: "00000000000000000000.log".into(),
            base: 0,
            pos: HEADER_LEN as u64,
            current: true,
        };
        assert!(!active.is_full_for(10_000, 100));
        // One of an older format version takes nothing.
        let old = ActiveSegment {
            current: false,
            name: active.name.clone(),
            file: active.file.clone(),
            ..active
        };
        assert!(old.is_full_for(1, 1 << 30));
        let active = ActiveSegment {
            pos: HEADER_LEN as u64 + 1,
            ..active
        };
        assert!(active.is_full_for(100, HEADER_LEN as u64 + 100));
        assert!(!active.is_full_for(99, HEADER_LEN as u64 + 100));
        assert_eq!(active.end(), HEADER_LEN as u64 + 1);
    }
}
