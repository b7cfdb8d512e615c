//! Errors, typed by fault: the caller's misuse (a gap, a repeat, a record too large),
//! the disk (I/O, a poisoned store), damaged files found when opening.

use std::io;
use std::sync::Arc;

use thiserror::Error;

use crate::PartitionId;
use crate::format::FormatError;

/// Why the store refuses every write: a write or `fdatasync` failed. After a failed
/// `fdatasync` the kernel may have dropped the dirty pages and cleared the error, so a
/// retry could "succeed" over lost data (PostgreSQL's fsyncgate); the store stops
/// instead, and nothing written after the failure is ever acknowledged.
#[derive(Debug, Error)]
#[error("{op} of segment {file} failed: {source}")]
pub struct PoisonCause {
    /// The operation that failed (`write`, `fdatasync`, `create`).
    pub op: &'static str,
    /// The segment file.
    pub file: String,
    /// The error the OS returned.
    #[source]
    pub source: io::Error,
}

/// An append refused. Nothing of a refused call is stored.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum AppendError {
    /// The offset is past the partition's head: it would leave a gap.
    #[error("offset {offset} of partition {partition} would leave a gap: the head is {head}")]
    Gap {
        /// The partition.
        partition: PartitionId,
        /// The offset asked for.
        offset: u64,
        /// The next offset the partition accepts.
        head: u64,
    },
    /// The offset is below the partition's head: it is already stored.
    #[error("offset {offset} of partition {partition} is already stored: the head is {head}")]
    Repeat {
        /// The partition.
        partition: PartitionId,
        /// The offset asked for.
        offset: u64,
        /// The next offset the partition accepts.
        head: u64,
    },
    /// A record's value, key and header bytes together are more than the configured
    /// maximum.
    #[error("record of {size} bytes exceeds the maximum record size of {max} bytes")]
    RecordTooLarge {
        /// Value, key and header bytes.
        size: usize,
        /// Configured maximum.
        max: usize,
    },
    /// A record has more headers than a store keeps
    /// ([`format::MAX_HEADERS`](crate::format::MAX_HEADERS)).
    #[error("record has {count} headers, more than the {max} a store keeps")]
    TooManyHeaders {
        /// Headers of the record.
        count: usize,
        /// The most a store keeps.
        max: usize,
    },
    /// A header name is not UTF-8 (it would not read back).
    #[error("record header name is not UTF-8")]
    HeaderNameNotUtf8,
    /// The partition id was never declared in this store.
    #[error("unknown partition {0}")]
    UnknownPartition(PartitionId),
    /// A topic longer than 255 bytes.
    #[error("topic of {0} bytes exceeds 255 bytes")]
    TopicTooLong(usize),
    /// A write or sync failed earlier; the store accepts nothing more.
    #[error("the store is poisoned: {0}")]
    Poisoned(#[source] Arc<PoisonCause>),
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
}

/// A durability ticket that will never be honoured.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum DurabilityError {
    /// The write or sync covering these records failed (or one before it did).
    #[error("the records were not made durable: {0}")]
    Poisoned(#[source] Arc<PoisonCause>),
    /// The store was closed before the records were written.
    #[error("the store closed before the records were written")]
    Closed,
    /// [`Ticket::wait`](crate::Ticket::wait) timed out; the records may still become
    /// durable.
    #[error("timed out waiting for durability")]
    Timeout,
}

/// A read refused.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The partition id was never declared in this store.
    #[error("unknown partition {0}")]
    UnknownPartition(PartitionId),
    /// The records asked for were dropped by retention.
    #[error("offset {offset} is below the low-water mark {low_water}")]
    BelowLowWater {
        /// The offset asked for.
        offset: u64,
        /// The partition's first offset still stored.
        low_water: u64,
    },
    /// The offset is past the partition's durable head.
    #[error("offset {offset} is past the head {head}")]
    BeyondHead {
        /// The offset asked for.
        offset: u64,
        /// The partition's durable head.
        head: u64,
    },
    /// Records were found damaged (bad CRC) when the store was opened or read, and are
    /// never served; the next readable offset is `to`.
    #[error("offsets {from}..{to} were lost to damage on disk")]
    Lost {
        /// First offset lost.
        from: u64,
        /// First offset after the loss.
        to: u64,
    },
    /// Reading a segment failed.
    #[error("reading segment {file} failed: {source}")]
    Io {
        /// The segment file.
        file: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Opening a store failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OpenError {
    /// An I/O error on the directory or a segment.
    #[error("{op} of {file} failed: {source}")]
    Io {
        /// The operation (`list`, `open`, `read`, `truncate`, ...).
        op: &'static str,
        /// The file (or the directory).
        file: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A segment header is damaged or from an unknown version: the store is not
    /// opened, so nothing is truncated or rewritten by mistake.
    #[error("segment {file} has a bad header: {source}")]
    BadHeader {
        /// The segment file.
        file: String,
        /// What is wrong.
        #[source]
        source: FormatError,
    },
    /// Segment files whose names disagree with their headers or overlap.
    #[error("segment {file} is inconsistent: {what}")]
    Inconsistent {
        /// The segment file.
        file: String,
        /// What disagrees.
        what: &'static str,
    },
    /// A file named like a segment (`*.log`) whose name is not 20 decimal digits of a log
    /// position that fits 64 bits.
    #[error(
        "{file} is not a segment name (20 decimal digits of a log position, then .log): rename or remove it"
    )]
    BadFileName {
        /// The file.
        file: String,
    },
    /// Log positions that no segment file holds: a segment was removed or cut short (the
    /// next segment, or the durable point, says they were written).
    #[error(
        "segment {file} is missing: log positions {from}..{to} are in no segment file (removed or cut short)"
    )]
    MissingSegment {
        /// The name the first missing segment would have.
        file: String,
        /// First position missing.
        from: u64,
        /// First position held again.
        to: u64,
    },
    /// Another store (this process or another) has the directory open.
    #[error("store directory {dir} is in use by another store{}", holder.map(|p| format!(" (process {p})")).unwrap_or_default())]
    Locked {
        /// The directory.
        dir: String,
        /// The holder's process id, as it wrote it in the lock file.
        holder: Option<u32>,
    },
    /// The store path, or a directory on the way to it, is a file.
    #[error("store path {}{file} is a file, not a directory", if path == file { String::new() } else { format!("{path}: ") })]
    NotADirectory {
        /// The store path as given.
        path: String,
        /// The file: the path itself (without a trailing `/`), or one of its parents.
        file: String,
    },
    /// The configuration is unusable.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
}
