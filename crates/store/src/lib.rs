//! Dafka's storage engine: one append-only log shared by every partition of a store,
//! that acknowledges only what is on disk.
//!
//! - **One log**, segmented into files named by their first global position
//!   ([`format`] has the byte tables). A partition, identified in Dafka by topic and
//!   producer UUID ([`PartitionKey`]), gets a compact [`PartitionId`] declared once in
//!   the log (and again at the start of every later segment).
//! - **Group commit.** [`Store::append`] encodes records into the batch being formed
//!   and returns a [`Ticket`]; a dedicated writer thread writes the whole batch with
//!   one `write` and covers it with one `fdatasync`, whatever the number of
//!   partitions, then acknowledges it. A failed write or sync poisons the store.
//! - **Records** carry their metadata ([`RecordMeta`]: a timestamp in microseconds, a key
//!   and headers), stored in the byte layout the wire uses (`dafka_proto::record`).
//! - **Reads** ([`Store::read`]) use a sparse per-partition index, return records in
//!   offset order with values as zero-copy [`bytes::Bytes`] slices of the read buffer,
//!   and run while appends continue. The same index keeps how late each stretch of a
//!   partition is stamped: [`Store::offset_for_time`] finds the first record at or after a
//!   time without reading the partition.
//! - **Recovery** on open verifies every record, truncates a torn tail, skips and
//!   reports damage in the middle ([`RecoveryReport`]).
//! - **Retention** by age (of the records' own timestamps) and total size drops whole
//!   segments and advances low-water marks.
//!
//! No networking and no async runtime: [`Ticket`] is a plain [`std::future::Future`]
//! as well as a blocking wait. Files are behind [`Dir`] / [`SegmentFile`] ([`FsDir`]
//! for real disks, [`MemDir`] in memory). See `docs/storage.md`.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod chunk;
pub mod error;
pub mod file;
pub mod format;
mod holes;
mod index;
pub mod offsets;
mod recovery;
mod store;
mod types;

use std::fmt;

pub use dafka_proto::record::{Header, HeaderRef, MetaParts, RecordMeta, TimestampType};
pub use error::{AppendError, DurabilityError, OpenError, PoisonCause, ReadError};
pub use file::{Dir, DirLock, FsDir, LOCK_FILE, MemDir, MemFile, SegmentFile};
pub use offsets::{
    CommitMode, GroupOffsets, OffsetKey, OffsetsConfig, OffsetsError, OffsetsReport,
};
pub use recovery::{Damage, DamageKind, RecoveryReport};
pub use store::{Store, Ticket, now_us};
pub use types::{
    AppendRecord, Config, MAX_RECORD_BYTES_LIMIT, PartitionInfo, Record, Retention, Stats,
    SyncPolicy,
};

/// A partition's compact id within one store, assigned when it is declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId(pub u32);

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A Dafka partition: a topic and the UUID of the producer that writes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionKey {
    /// Topic (at most 255 bytes of UTF-8).
    pub topic: String,
    /// Producer UUID.
    pub producer: [u8; 16],
}

impl PartitionKey {
    /// A key from a topic and a producer UUID.
    pub fn new(topic: impl Into<String>, producer: [u8; 16]) -> Self {
        PartitionKey {
            topic: topic.into(),
            producer,
        }
    }
}

/// `topic/UUID`, the UUID as 32 upper-case hex digits (as Dafka shows it).
impl fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/", self.topic)?;
        for b in self.producer {
            write!(f, "{b:02X}")?;
        }
        Ok(())
    }
}
