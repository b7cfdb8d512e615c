//! The types the engine's modules share: the configuration, the public record and
//! partition types, and the in-memory partition and segment that recovery builds and the
//! engine (`store.rs`) serves from. Their own module, so that recovery and the engine each
//! depend on it and not on each other.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dafka_proto::record::RecordMeta;

use crate::error::OpenError;
use crate::file::SegmentFile;
use crate::format::{self, HEADER_LEN};
use crate::holes::Holes;
use crate::index::SparseIndex;
use crate::{PartitionId, PartitionKey};

/// The hard ceiling on [`Config::max_record_bytes`]; recovery treats a longer entry as
/// damage (beyond [`format::MAX_RECORD_BODY_LEN`]), so a record this size can never be
/// mistaken for garbage.
pub const MAX_RECORD_BYTES_LIMIT: usize = 64 << 20;

/// When appended records are acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SyncPolicy {
    /// Acknowledge a batch after its `fdatasync` returned (the default): an
    /// acknowledged record survives a power cut.
    #[default]
    Always,
    /// Acknowledge after the `write`; `fdatasync` at most this often. A process crash
    /// loses nothing acknowledged, a power cut up to one interval.
    Interval(Duration),
    /// Acknowledge after the `write`; never sync (the OS writes back when it likes).
    Never,
}

/// Retention: whole segments are dropped, oldest first, never the one being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retention {
    /// Drop a segment once its newest record (by the records' own timestamps: the largest
    /// in the segment) is older than this.
    pub max_age: Option<Duration>,
    /// Drop the oldest segments while the log is larger than this.
    pub max_bytes: Option<u64>,
}

/// Store settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// When appends are acknowledged.
    pub sync: SyncPolicy,
    /// A new segment is started before a batch would take the current one past this.
    pub segment_bytes: u64,
    /// The largest record accepted: its value, key and header bytes together
    /// ([`RecordMeta::payload_len`] beside the value).
    pub max_record_bytes: usize,
    /// Appends block while the batch being formed is larger than this (the writer is
    /// busy with the previous one).
    pub max_pending_bytes: usize,
    /// A sparse index entry per partition every this many bytes of its records.
    pub index_interval_bytes: usize,
    /// Retention limits.
    pub retention: Retention,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sync: SyncPolicy::Always,
            segment_bytes: 128 << 20,
            max_record_bytes: 1 << 20,
            max_pending_bytes: 8 << 20,
            index_interval_bytes: 4096,
            retention: Retention::default(),
        }
    }
}

impl Config {
    /// The default configuration with another sync policy.
    pub fn with_sync(sync: SyncPolicy) -> Self {
        Config {
            sync,
            ..Config::default()
        }
    }

    pub(crate) fn check(&self) -> Result<(), OpenError> {
        if self.max_record_bytes > MAX_RECORD_BYTES_LIMIT {
            return Err(OpenError::Config("max_record_bytes is above 64 MiB"));
        }
        if self.segment_bytes < (HEADER_LEN + format::record_size(self.max_record_bytes)) as u64 {
            return Err(OpenError::Config(
                "segment_bytes cannot hold one record of max_record_bytes",
            ));
        }
        if self.index_interval_bytes == 0 {
            return Err(OpenError::Config("index_interval_bytes is zero"));
        }
        Ok(())
    }
}

/// One record to append.
#[derive(Debug, Clone, Copy)]
pub struct AppendRecord<'a> {
    /// Its partition.
    pub partition: PartitionId,
    /// Its offset: the partition's head (offsets are contiguous from 0).
    pub offset: u64,
    /// Its timestamp (microseconds since the Unix epoch, UTC: the producer's create time, or
    /// the time it was appended for a record that came without one), key and headers, stored
    /// with it. Retention by age and [`Store::offset_for_time`](crate::Store::offset_for_time)
    /// go by the timestamp.
    pub meta: &'a RecordMeta,
    /// Its value.
    pub value: &'a [u8],
}

/// One record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Offset within its partition.
    pub offset: u64,
    /// Its timestamp, key and headers as appended (key and headers share the value's
    /// buffer). A record written by format version 1 has its receive time as a log-append
    /// timestamp (milliseconds × 1000), no key and no headers.
    pub meta: RecordMeta,
    /// The value: a slice of the buffer the segment was read into.
    pub value: Bytes,
}

/// What [`Store::partitions`] lists for each partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Compact id.
    pub id: PartitionId,
    /// Topic and producer.
    pub key: PartitionKey,
    /// First offset still stored.
    pub low_water: u64,
    /// Next offset after the last acknowledged record.
    pub head: u64,
}

/// Counters since the store was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Group-commit batches written (one `write` each).
    pub batches: u64,
    /// Bytes written, segment headers and commit entries included.
    pub bytes_written: u64,
    /// `fdatasync` calls on segments.
    pub syncs: u64,
    /// Records acknowledged.
    pub records: u64,
    /// Segments dropped by retention.
    pub segments_dropped: u64,
    /// Damaged places in the log: found when the store was opened (each in
    /// [`RecoveryReport::damage`]) or later by a read. Their records are never served.
    pub damaged: u64,
}

pub(crate) struct Partition {
    pub(crate) key: PartitionKey,
    /// Next offset an append must carry.
    pub(crate) accepted: u64,
    /// Next offset after the last acknowledged record.
    pub(crate) durable: u64,
    pub(crate) low_water: u64,
    /// Whether its declaration is acknowledged (then later segments redeclare it).
    pub(crate) declared_durable: bool,
    /// Sparse index: where offsets are in the log, and how late each interval is stamped.
    pub(crate) index: SparseIndex,
    /// Record bytes since the last index entry (`None`: no entry yet).
    pub(crate) since_index: Option<usize>,
    /// The batch that last touched the partition, and where in its `touched` list.
    pub(crate) touched: (u64, usize),
    /// The batch whose index candidates include the partition's latest, and where in its
    /// `index` list.
    pub(crate) indexed: (u64, usize),
    /// Offsets not held below the head: damaged on disk, or skipped (reads of them answer
    /// [`ReadError::Lost`]).
    pub(crate) holes: Holes,
    /// Records that filled holes, by offset: their global positions (they lie later in the
    /// log than the sparse index says).
    pub(crate) fills: BTreeMap<u64, u64>,
    /// Offsets being filled (in a batch not yet acknowledged).
    pub(crate) filling: BTreeSet<u64>,
}

impl Partition {
    pub(crate) fn new(key: PartitionKey, next_offset: u64, declared_durable: bool) -> Self {
        Partition {
            key,
            accepted: next_offset,
            durable: next_offset,
            low_water: next_offset,
            declared_durable,
            index: SparseIndex::default(),
            since_index: None,
            touched: (u64::MAX, 0),
            indexed: (u64::MAX, 0),
            holes: Holes::default(),
            fills: BTreeMap::new(),
            filling: BTreeSet::new(),
        }
    }

    /// Whether a record of `size` bytes gets an index entry.
    pub(crate) fn index_due(&mut self, size: usize, interval: usize) -> bool {
        match self.since_index {
            Some(n) if n + size < interval => {
                self.since_index = Some(n + size);
                false
            }
            _ => {
                self.since_index = Some(0);
                true
            }
        }
    }
}

pub(crate) struct Segment {
    pub(crate) base: u64,
    pub(crate) name: String,
    pub(crate) file: Arc<dyn SegmentFile>,
    /// Readable (acknowledged, undamaged) length of the file.
    pub(crate) len: u64,
    /// Format version of its header (`None`: the header is damaged).
    pub(crate) version: Option<u16>,
    /// Largest record timestamp, microseconds (`i64::MIN`: no record).
    pub(crate) max_ts: i64,
    /// The first declaration of each partition in this segment: (id, next offset).
    pub(crate) start_heads: Vec<(u32, u64)>,
    /// Damaged file ranges `[from, to)` that hold no whole entry, ascending: reads jump over
    /// them (a damaged length cannot be stepped over).
    pub(crate) skips: Vec<(u64, u64)>,
}

impl Segment {
    pub(crate) fn new(base: u64, name: String, file: Arc<dyn SegmentFile>, len: u64) -> Self {
        Segment {
            base,
            name,
            file,
            len,
            version: Some(format::FORMAT_VERSION),
            max_ts: i64::MIN,
            start_heads: Vec::new(),
            skips: Vec::new(),
        }
    }
}
