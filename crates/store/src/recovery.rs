//! Opening a store: every segment is read record by record and the index rebuilt from
//! it (no checkpoint: see `docs/storage.md`).
//!
//! Rules:
//! - A damaged entry (bad CRC, impossible length, unknown kind) in the **last batch**
//!   of the **last segment**, i.e. with fewer than two whole batch commits after it, is
//!   a torn write: the file is truncated there, keeping exactly the whole entries before
//!   it, and the cut is logged. Nothing after that point was acknowledged under
//!   `always`: its batch's `fdatasync` had not returned.
//! - A damaged entry followed by at least two commits (its own batch's and a later
//!   one: so it was acknowledged and the disk damaged it afterwards), or anywhere in an
//!   earlier segment, is reported and skipped, and its record never served.
//! - An entry whose length is impossible cannot be stepped over: in the last segment
//!   it is a torn tail (truncated); in an earlier one the rest of that segment is
//!   reported and never read.

use std::collections::{HashMap, VecDeque};

use crate::chunk::ChunkReader;
use crate::error::OpenError;
use crate::file::{Dir, SegmentFile};
use crate::format::{
    self, ENTRY_PREFIX_LEN, Entry, FormatError, HEADER_LEN, MIN_BODY_LEN, RECORD_FIXED_LEN,
    SegmentHeader,
};
use crate::store::{Config, MAX_RECORD_BYTES_LIMIT, Partition, Segment};
use crate::{PartitionId, PartitionKey};

/// What opening the store found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments read.
    pub segments: usize,
    /// Records recovered.
    pub records: u64,
    /// Bytes cut from the end of the last segment (a torn or corrupt tail).
    pub truncated_bytes: u64,
    /// Damage found and stepped over (never served).
    pub damage: Vec<Damage>,
}

/// One damaged place in a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The segment file.
    pub file: String,
    /// File offset of the damaged entry.
    pub position: u64,
    /// What was wrong.
    pub kind: DamageKind,
}

/// What was wrong at a [`Damage`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DamageKind {
    /// An entry failed to decode (usually its CRC); it was skipped.
    BadEntry(FormatError),
    /// The rest of a sealed segment cannot be parsed (an impossible length); these
    /// bytes are never read.
    UnreadableRest {
        /// Bytes not read.
        bytes: u64,
    },
    /// A record of a partition that was never declared.
    UndeclaredPartition(PartitionId),
    /// A record whose offset is already stored.
    RepeatedOffset {
        /// The partition.
        partition: PartitionId,
        /// The offset.
        offset: u64,
    },
    /// Offsets missing before a record (their records were damaged).
    Gap {
        /// The partition.
        partition: PartitionId,
        /// First offset missing.
        from: u64,
        /// The record's offset.
        to: u64,
    },
    /// A declaration that contradicts an earlier one (id or key bound elsewhere).
    ConflictingDeclaration(PartitionId),
}

pub(crate) struct Recovered {
    pub(crate) partitions: HashMap<u32, Partition>,
    pub(crate) by_key: HashMap<PartitionKey, u32>,
    pub(crate) next_id: u32,
    pub(crate) segments: VecDeque<Segment>,
    pub(crate) report: RecoveryReport,
}

/// One step of the walk through a segment.
enum Item {
    Good {
        pos: u64,
        entry: Entry,
        size: usize,
    },
    /// A damaged entry that can be stepped over (its length is plausible).
    Bad {
        pos: u64,
        error: FormatError,
    },
    /// A damaged entry that cannot be stepped over; the walk stops.
    Stop {
        pos: u64,
        error: FormatError,
    },
}

const SCAN_CHUNK: usize = 1 << 20;
const MAX_BODY_LEN: usize = RECORD_FIXED_LEN + MAX_RECORD_BYTES_LIMIT;

fn io_err(op: &'static str, file: &str) -> impl FnOnce(std::io::Error) -> OpenError {
    let file = file.to_owned();
    move |source| OpenError::Io { op, file, source }
}

/// Walks a segment's entries from after the header to `end`.
fn walk(file: &dyn SegmentFile, name: &str, end: u64) -> Result<Vec<Item>, OpenError> {
    let mut reader = ChunkReader::new(file, end, SCAN_CHUNK);
    let mut items = Vec::new();
    let mut pos = HEADER_LEN as u64;
    while pos < reader.end() {
        let Some(prefix) = reader
            .get(pos, ENTRY_PREFIX_LEN)
            .map_err(io_err("read", name))?
        else {
            items.push(Item::Stop {
                pos,
                error: FormatError::BadLength(0),
            });
            break;
        };
        let prefix = match format::decode_prefix(&prefix[..]) {
            Ok(p) => p,
            Err(error) => {
                items.push(Item::Stop { pos, error });
                break;
            }
        };
        if !(MIN_BODY_LEN..=MAX_BODY_LEN).contains(&prefix.body_len) {
            items.push(Item::Stop {
                pos,
                error: FormatError::BadLength(prefix.body_len),
            });
            break;
        }
        let size = prefix.entry_len();
        let Some(bytes) = reader.get(pos, size).map_err(io_err("read", name))? else {
            items.push(Item::Stop {
                pos,
                error: FormatError::BadLength(prefix.body_len),
            });
            break;
        };
        match format::decode_entry(bytes) {
            // Keep no value: it would hold its whole read chunk until the segment is done.
            Ok(Entry::Record(mut r)) => {
                r.value = bytes::Bytes::new();
                items.push(Item::Good {
                    pos,
                    entry: Entry::Record(r),
                    size,
                });
            }
            Ok(entry) => items.push(Item::Good { pos, entry, size }),
            Err(error) => items.push(Item::Bad { pos, error }),
        }
        pos += size as u64;
    }
    Ok(items)
}

pub(crate) fn recover(dir: &dyn Dir, config: &Config) -> Result<Recovered, OpenError> {
    let mut bases: Vec<(u64, String)> = dir
        .list()
        .map_err(io_err("list", "store directory"))?
        .into_iter()
        .filter_map(|name| format::parse_segment_file_name(&name).map(|b| (b, name)))
        .collect();
    bases.sort();
    let mut out = Recovered {
        partitions: HashMap::new(),
        by_key: HashMap::new(),
        next_id: 0,
        segments: VecDeque::new(),
        report: RecoveryReport::default(),
    };
    let count = bases.len();
    let mut prev_end = 0u64;
    for (i, (base, name)) in bases.into_iter().enumerate() {
        let tail = i + 1 == count;
        let file = dir.open(&name).map_err(io_err("open", &name))?;
        let mut len = file.size().map_err(io_err("stat", &name))?;
        let mut header = [0u8; HEADER_LEN];
        let header_read = len >= HEADER_LEN as u64
            && file
                .read_at(&mut header, 0)
                .map_err(io_err("read", &name))?
                == HEADER_LEN;
        if tail && (!header_read || header == [0u8; HEADER_LEN]) {
            // Created but never written whole: nothing in it was acknowledged.
            tracing::warn!(segment = %name, bytes = len, "torn segment header rewritten");
            out.report.truncated_bytes += len;
            file.set_len(0).map_err(io_err("truncate", &name))?;
            file.write_all_at(&SegmentHeader { base }.encode(), 0)
                .map_err(io_err("write", &name))?;
            file.sync_data().map_err(io_err("fdatasync", &name))?;
            len = HEADER_LEN as u64;
        } else {
            let decoded = SegmentHeader::decode(bytes::Bytes::copy_from_slice(
                &header[..if header_read { HEADER_LEN } else { 0 }],
            ))
            .map_err(|source| OpenError::BadHeader {
                file: name.clone(),
                source,
            })?;
            if decoded.base != base {
                return Err(OpenError::Inconsistent {
                    file: name,
                    what: "the header's base position differs from the file name",
                });
            }
        }
        if base < prev_end {
            return Err(OpenError::Inconsistent {
                file: name,
                what: "the segment overlaps the previous one",
            });
        }
        let items = walk(&*file, &name, len)?;
        // Commits after each item, to tell the last batch from earlier ones.
        let mut commits_after = vec![0usize; items.len()];
        let mut seen = 0;
        for (j, item) in items.iter().enumerate().rev() {
            commits_after[j] = seen;
            if matches!(
                item,
                Item::Good {
                    entry: Entry::Commit,
                    ..
                }
            ) {
                seen += 1;
            }
        }
        let mut segment = Segment {
            base,
            name: name.clone(),
            file: file.clone(),
            len,
            max_ts: 0,
            start_heads: Vec::new(),
        };
        for (j, item) in items.into_iter().enumerate() {
            match item {
                Item::Good { pos, entry, size } => {
                    apply(&mut out, &mut segment, config, pos, entry, size);
                }
                Item::Bad { pos, error } if !tail || commits_after[j] >= 2 => {
                    tracing::warn!(segment = %name, position = pos, error = %error,
                        "damaged entry in the middle of the log skipped");
                    out.report.damage.push(Damage {
                        file: name.clone(),
                        position: pos,
                        kind: DamageKind::BadEntry(error),
                    });
                }
                Item::Bad { pos, error } | Item::Stop { pos, error } => {
                    if tail {
                        let cut = len - pos;
                        tracing::warn!(segment = %name, position = pos, bytes = cut, error = %error,
                            "torn or corrupt tail truncated");
                        file.set_len(pos).map_err(io_err("truncate", &name))?;
                        file.sync_data().map_err(io_err("fdatasync", &name))?;
                        out.report.truncated_bytes += cut;
                    } else {
                        tracing::warn!(segment = %name, position = pos, bytes = len - pos, error = %error,
                            "rest of a sealed segment unreadable, never served");
                        out.report.damage.push(Damage {
                            file: name.clone(),
                            position: pos,
                            kind: DamageKind::UnreadableRest { bytes: len - pos },
                        });
                    }
                    segment.len = pos;
                    break;
                }
            }
        }
        prev_end = base + segment.len;
        out.report.segments += 1;
        out.segments.push_back(segment);
    }
    out.next_id = out
        .partitions
        .keys()
        .max()
        .map_or(0, |&m| m.saturating_add(1));
    Ok(out)
}

fn damage(out: &mut Recovered, segment: &Segment, pos: u64, kind: DamageKind) {
    tracing::warn!(segment = %segment.name, position = pos, ?kind, "inconsistent entry skipped");
    out.report.damage.push(Damage {
        file: segment.name.clone(),
        position: pos,
        kind,
    });
}

fn apply(
    out: &mut Recovered,
    segment: &mut Segment,
    config: &Config,
    pos: u64,
    entry: Entry,
    size: usize,
) {
    match entry {
        Entry::Commit => {}
        Entry::Declare {
            partition,
            next_offset,
            producer,
            topic,
        } => {
            let key = PartitionKey { topic, producer };
            match (out.partitions.get_mut(&partition), out.by_key.get(&key)) {
                (Some(p), Some(&bound)) if bound == partition => {
                    p.accepted = p.accepted.max(next_offset);
                    p.durable = p.accepted;
                }
                (None, None) => {
                    out.partitions
                        .insert(partition, Partition::new(key.clone(), next_offset, true));
                    out.by_key.insert(key, partition);
                }
                _ => {
                    damage(
                        out,
                        segment,
                        pos,
                        DamageKind::ConflictingDeclaration(PartitionId(partition)),
                    );
                    return;
                }
            }
            if !segment.start_heads.iter().any(|&(id, _)| id == partition) {
                segment.start_heads.push((partition, next_offset));
            }
        }
        Entry::Record(r) => {
            let Some(p) = out.partitions.get_mut(&r.partition) else {
                damage(
                    out,
                    segment,
                    pos,
                    DamageKind::UndeclaredPartition(PartitionId(r.partition)),
                );
                return;
            };
            if r.offset < p.accepted {
                damage(
                    out,
                    segment,
                    pos,
                    DamageKind::RepeatedOffset {
                        partition: PartitionId(r.partition),
                        offset: r.offset,
                    },
                );
                return;
            }
            let gap = (r.offset > p.accepted).then_some(p.accepted);
            p.accepted = r.offset + 1;
            p.durable = p.accepted;
            if p.index_due(size, config.index_interval_bytes) {
                p.index.push((r.offset, segment.base + pos));
            }
            segment.max_ts = segment.max_ts.max(r.timestamp_ms);
            out.report.records += 1;
            if let Some(from) = gap {
                damage(
                    out,
                    segment,
                    pos,
                    DamageKind::Gap {
                        partition: PartitionId(r.partition),
                        from,
                        to: r.offset,
                    },
                );
            }
        }
    }
}
