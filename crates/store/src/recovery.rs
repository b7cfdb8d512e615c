//! Opening a store: every segment is read record by record and the index rebuilt from
//! it. The durable point (`durable.point`, see [`format`]) says how far the log had been
//! synced, which tells a torn write from damage to bytes that may have been acknowledged.
//!
//! Rules:
//! - Every file named `*.log` must be a segment (`{position:020}.log`), and the segments
//!   must follow each other without a hole: a missing or misnamed segment stops the open
//!   with an error naming it, rather than serving a log with records silently gone.
//! - A damaged entry (bad CRC, impossible length, unknown kind) at or past the durable
//!   point in the **last batch** of the **last segment** (fewer than two whole batch
//!   commits after it) is a torn write: the file is truncated there, keeping exactly the
//!   whole entries before it, and the cut is logged. Nothing after that point was
//!   acknowledged under `always`: its batch's `fdatasync` had not returned.
//! - Any other damaged entry (below the durable point, followed by at least two commits, or
//!   in an earlier segment) hit bytes that were synced and may have been acknowledged: it
//!   is never cut. Exactly the damaged bytes are skipped: the walk goes on at the next
//!   place where a whole entry, and the one after it, check out (its own length first,
//!   then byte by byte). Each such place is logged once, with its segment and file
//!   offset, counted, and the offsets of the records it held become a hole of their
//!   partition (reads of it answer [`ReadError::Lost`](crate::ReadError::Lost)).
//! - A damaged segment header is reported and the segment read anyway (its base is in its
//!   name); only an all-zero or short header of a last segment that starts at or past the
//!   durable point is a torn creation, and rewritten.

use std::collections::{HashMap, VecDeque};

use crate::chunk::ChunkReader;
use crate::error::OpenError;
use crate::file::{Dir, SegmentFile};
use crate::format::{
    self, DURABLE_POINT_FILE, DURABLE_POINT_LEN, DurablePoint, ENTRY_PREFIX_LEN, Entry,
    FormatError, HEADER_LEN, KIND_COMMIT, KIND_DECLARE, KIND_RECORD, KIND_RECORD_V1, KIND_SKIP,
    MAX_RECORD_BODY_LEN, MIN_BODY_LEN, RECORD_FIXED_LEN, RECORD_V1_FIXED_LEN, SKIP_LEN,
    SegmentHeader,
};
use crate::types::{Config, Partition, Segment};
use crate::{PartitionId, PartitionKey};
use dafka_proto::record::RecordMeta;

/// What opening the store found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments read.
    pub segments: usize,
    /// Records recovered.
    pub records: u64,
    /// Bytes cut from the end of the last segment (a torn or corrupt tail).
    pub truncated_bytes: u64,
    /// The durable point found (every log byte below it had been synced), if any.
    pub durable_point: Option<u64>,
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
    /// An entry failed to decode (its CRC, length or kind); the bytes up to the next whole
    /// entry were skipped.
    BadEntry {
        /// What was wrong.
        error: FormatError,
        /// Bytes skipped.
        bytes: u64,
    },
    /// No whole entry follows a damaged one up to the end of the segment: these bytes are
    /// never read.
    UnreadableRest {
        /// Bytes not read.
        bytes: u64,
    },
    /// The segment header is damaged; the entries after it were read.
    BadHeader(FormatError),
    /// A record of a partition that was never declared.
    UndeclaredPartition(PartitionId),
    /// A record whose offset is already stored.
    RepeatedOffset {
        /// The partition.
        partition: PartitionId,
        /// The offset.
        offset: u64,
    },
    /// Offsets missing before a record or a declaration (their records were damaged): a
    /// hole in the partition, never served by this store.
    Gap {
        /// The partition.
        partition: PartitionId,
        /// First offset missing.
        from: u64,
        /// First offset after them.
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
    /// The durable-point file, to be rewritten after every sync.
    pub(crate) point: std::sync::Arc<dyn SegmentFile>,
}

/// One step of the walk through a segment.
enum Item {
    Good {
        pos: u64,
        entry: Entry,
        size: usize,
    },
    /// A damaged entry: the bytes `pos..next` do not hold whole entries (`next` is the end of
    /// the segment when no whole entry follows).
    Bad {
        pos: u64,
        next: u64,
        error: FormatError,
    },
}

const SCAN_CHUNK: usize = 1 << 20;
const MAX_BODY_LEN: usize = MAX_RECORD_BODY_LEN;

fn io_err(op: &'static str, file: &str) -> impl FnOnce(std::io::Error) -> OpenError {
    let file = file.to_owned();
    move |source| OpenError::Io { op, file, source }
}

/// The whole entry at `pos` if it checks out (plausible length for its kind, within `end`,
/// CRC), and its size.
fn entry_at(
    reader: &mut ChunkReader<'_>,
    pos: u64,
) -> std::io::Result<Result<(Entry, usize), FormatError>> {
    let Some(prefix) = reader.peek(pos, ENTRY_PREFIX_LEN + 1)? else {
        return Ok(Err(FormatError::BadLength(0)));
    };
    let prefix_bytes = prefix;
    let prefix = match format::decode_prefix(prefix_bytes) {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    if !(MIN_BODY_LEN..=MAX_BODY_LEN).contains(&prefix.body_len) {
        return Ok(Err(FormatError::BadLength(prefix.body_len)));
    }
    // Cheap plausibility before a CRC over a length that may be garbage.
    let plausible = match prefix_bytes[ENTRY_PREFIX_LEN] {
        KIND_RECORD => prefix.body_len >= RECORD_FIXED_LEN,
        KIND_RECORD_V1 => prefix.body_len >= RECORD_V1_FIXED_LEN,
        KIND_DECLARE => prefix.body_len >= format::DECLARE_FIXED_LEN,
        KIND_COMMIT => prefix.body_len == 1,
        KIND_SKIP => prefix.body_len == SKIP_LEN,
        kind => return Ok(Err(FormatError::UnknownKind(kind))),
    };
    if !plausible {
        return Ok(Err(FormatError::BadLength(prefix.body_len)));
    }
    let size = prefix.entry_len();
    let Some(bytes) = reader.get(pos, size)? else {
        return Ok(Err(FormatError::BadLength(prefix.body_len)));
    };
    Ok(format::decode_entry(bytes).map(|e| (e, size)))
}

/// Whether a walk may go on at `pos`: a whole entry is there, and after it the end of the
/// segment or another whole entry (two CRCs in a row: a value that happens to hold bytes
/// looking like one entry does not pass for the log).
fn resumes_at(reader: &mut ChunkReader<'_>, pos: u64) -> std::io::Result<bool> {
    let Ok((_, size)) = entry_at(reader, pos)? else {
        return Ok(false);
    };
    let after = pos + size as u64;
    Ok(after == reader.end() || entry_at(reader, after)?.is_ok())
}

/// Where the walk goes on after damage at `pos`: the end of the damaged entry if its length
/// field is intact, else the first later byte where entries check out again, else the end.
fn resync(reader: &mut ChunkReader<'_>, pos: u64) -> std::io::Result<u64> {
    if let Some(prefix) = reader.peek(pos, ENTRY_PREFIX_LEN)?
        && let Ok(prefix) = format::decode_prefix(prefix)
        && let Some(after) = pos.checked_add(prefix.entry_len() as u64)
        && after <= reader.end()
        && (after == reader.end() || resumes_at(reader, after)?)
    {
        return Ok(after);
    }
    let mut at = pos + 1;
    while at + (ENTRY_PREFIX_LEN + MIN_BODY_LEN) as u64 <= reader.end() {
        if resumes_at(reader, at)? {
            return Ok(at);
        }
        at += 1;
    }
    Ok(reader.end())
}

/// Walks a segment's entries from after the header to `end`.
fn walk(file: &dyn SegmentFile, name: &str, end: u64) -> Result<Vec<Item>, OpenError> {
    let mut reader = ChunkReader::new(file, end, SCAN_CHUNK);
    let mut items = Vec::new();
    let mut pos = HEADER_LEN as u64;
    while pos < reader.end() {
        match entry_at(&mut reader, pos).map_err(io_err("read", name))? {
            // Keep no value, key or headers: they would hold their whole read chunk until the
            // segment is done (the timestamp is all recovery needs of a record's metadata).
            Ok((Entry::Record(mut r), size)) => {
                r.value = bytes::Bytes::new();
                r.meta = RecordMeta::new(r.meta.timestamp, r.meta.timestamp_type(), None, None);
                items.push(Item::Good {
                    pos,
                    entry: Entry::Record(r),
                    size,
                });
                pos += size as u64;
            }
            Ok((entry, size)) => {
                items.push(Item::Good { pos, entry, size });
                pos += size as u64;
            }
            Err(error) => {
                let next = resync(&mut reader, pos).map_err(io_err("read", name))?;
                items.push(Item::Bad { pos, next, error });
                pos = next;
            }
        }
    }
    Ok(items)
}

/// The durable point in the directory (0 when there is none or it is unreadable), and its
/// file, created if absent.
fn durable_point(
    dir: &dyn Dir,
    names: &[String],
) -> Result<(Option<u64>, std::sync::Arc<dyn SegmentFile>), OpenError> {
    if !names.iter().any(|n| n == DURABLE_POINT_FILE) {
        let file = dir
            .create(DURABLE_POINT_FILE)
            .map_err(io_err("create", DURABLE_POINT_FILE))?;
        return Ok((None, file));
    }
    let file = dir
        .open(DURABLE_POINT_FILE)
        .map_err(io_err("open", DURABLE_POINT_FILE))?;
    let mut buf = [0u8; DURABLE_POINT_LEN];
    let n = file
        .read_at(&mut buf, 0)
        .map_err(io_err("read", DURABLE_POINT_FILE))?;
    match DurablePoint::decode(bytes::Bytes::copy_from_slice(&buf[..n])) {
        Ok(p) => Ok((Some(p.position), file)),
        Err(e) => {
            // Written in place after syncs and never synced itself: a power cut can tear
            // it. Then recovery falls back on the batch commits alone.
            tracing::warn!(file = DURABLE_POINT_FILE, error = %e,
                "durable point unreadable; torn tails told by batch commits alone");
            Ok((None, file))
        }
    }
}

/// The segments in the directory by base position; a `.log` file that is not a segment
/// name is an error naming it.
fn segment_names(names: &[String]) -> Result<Vec<(u64, String)>, OpenError> {
    let mut bases = Vec::new();
    for name in names.iter().filter(|n| n.ends_with(".log")) {
        match format::parse_segment_file_name(name) {
            Some(base) => bases.push((base, name.clone())),
            None => return Err(OpenError::BadFileName { file: name.clone() }),
        }
    }
    bases.sort();
    Ok(bases)
}

pub(crate) fn recover(dir: &dyn Dir, config: &Config) -> Result<Recovered, OpenError> {
    let names = dir.list().map_err(io_err("list", "store directory"))?;
    let bases = segment_names(&names)?;
    let (point, point_file) = durable_point(dir, &names)?;
    let mut out = Recovered {
        partitions: HashMap::new(),
        by_key: HashMap::new(),
        next_id: 0,
        segments: VecDeque::new(),
        report: RecoveryReport {
            durable_point: point,
            ..RecoveryReport::default()
        },
        point: point_file,
    };
    let point = point.unwrap_or(0);
    let count = bases.len();
    let mut prev_end: Option<u64> = None;
    for (i, (base, name)) in bases.into_iter().enumerate() {
        let tail = i + 1 == count;
        if let Some(end) = prev_end {
            if base > end {
                return Err(OpenError::MissingSegment {
                    file: format::segment_file_name(end),
                    from: end,
                    to: base,
                });
            }
            if base < end {
                return Err(OpenError::Inconsistent {
                    file: name,
                    what: "the segment overlaps the previous one",
                });
            }
        }
        let file = dir.open(&name).map_err(io_err("open", &name))?;
        let mut len = file.size().map_err(io_err("stat", &name))?;
        prev_end = Some(base + len);
        if tail && base + len < point {
            return Err(OpenError::MissingSegment {
                file: format::segment_file_name(base + len),
                from: base + len,
                to: point,
            });
        }
        let mut header = [0u8; HEADER_LEN];
        let header_read = len >= HEADER_LEN as u64
            && file
                .read_at(&mut header, 0)
                .map_err(io_err("read", &name))?
                == HEADER_LEN;
        let mut segment = Segment::new(base, name.clone(), file.clone(), len);
        if tail && base >= point && (!header_read || header == [0u8; HEADER_LEN]) {
            // Created but never written whole: nothing in it was acknowledged.
            tracing::warn!(segment = %name, bytes = len, "torn segment header rewritten");
            out.report.truncated_bytes += len;
            file.set_len(0).map_err(io_err("truncate", &name))?;
            file.write_all_at(&SegmentHeader::new(base).encode(), 0)
                .map_err(io_err("write", &name))?;
            file.sync_data().map_err(io_err("fdatasync", &name))?;
            len = HEADER_LEN as u64;
            segment.len = len;
        } else {
            let bytes = &header[..if header_read { HEADER_LEN } else { 0 }];
            match SegmentHeader::decode(bytes::Bytes::copy_from_slice(bytes)) {
                Ok(decoded) if decoded.base != base => {
                    return Err(OpenError::Inconsistent {
                        file: name,
                        what: "the header's base position differs from the file name",
                    });
                }
                Ok(decoded) => segment.version = Some(decoded.version),
                Err(source @ FormatError::UnsupportedVersion(_)) => {
                    return Err(OpenError::BadHeader { file: name, source });
                }
                // The base is in the name; the entries after the header are read as usual
                // (either record kind: the version is not known).
                Err(error) => {
                    segment.version = None;
                    damage(&mut out, &segment, 0, DamageKind::BadHeader(error));
                }
            }
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
        for (j, item) in items.into_iter().enumerate() {
            match item {
                Item::Good { pos, entry, size } => {
                    apply(&mut out, &mut segment, config, pos, entry, size);
                }
                Item::Bad { pos, error, .. }
                    if tail && base + pos >= point && commits_after[j] < 2 =>
                {
                    let cut = len - pos;
                    tracing::warn!(segment = %name, position = pos, bytes = cut, error = %error,
                        "torn or corrupt tail truncated");
                    file.set_len(pos).map_err(io_err("truncate", &name))?;
                    file.sync_data().map_err(io_err("fdatasync", &name))?;
                    out.report.truncated_bytes += cut;
                    segment.len = pos;
                    break;
                }
                Item::Bad { pos, next, error } => {
                    let bytes = next - pos;
                    let kind = if next == len {
                        DamageKind::UnreadableRest { bytes }
                    } else {
                        DamageKind::BadEntry { error, bytes }
                    };
                    damage(&mut out, &segment, pos, kind);
                    segment.skips.push((pos, next));
                }
            }
        }
        out.report.segments += 1;
        out.segments.push_back(segment);
    }
    if count == 0 && point > 0 {
        return Err(OpenError::MissingSegment {
            file: format::segment_file_name(0),
            from: 0,
            to: point,
        });
    }
    // What is left of the log is whole: synced now, all of it is durable.
    if let Some(last) = out.segments.back() {
        last.file
            .sync_data()
            .map_err(io_err("fdatasync", &last.name))?;
        let end = DurablePoint {
            position: last.base + last.len,
        };
        out.point
            .write_all_at(&end.encode(), 0)
            .map_err(io_err("write", DURABLE_POINT_FILE))?;
        out.point
            .sync_data()
            .map_err(io_err("fdatasync", DURABLE_POINT_FILE))?;
        dir.sync()
            .map_err(io_err("directory fsync", "store directory"))?;
    }
    out.next_id = out
        .partitions
        .keys()
        .max()
        .map_or(0, |&m| m.saturating_add(1));
    Ok(out)
}

/// Logs (once, here) and reports a damaged place.
fn damage(out: &mut Recovered, segment: &Segment, pos: u64, kind: DamageKind) {
    tracing::warn!(segment = %segment.name, position = pos, ?kind,
        "damaged entry skipped: never served by this store");
    out.report.damage.push(Damage {
        file: segment.name.clone(),
        position: pos,
        kind,
    });
}

/// Offsets `from..to` of a partition are not in this store: a hole (reads answer `Lost`).
fn hole(out: &mut Recovered, segment: &Segment, pos: u64, partition: u32, from: u64, to: u64) {
    if let Some(p) = out.partitions.get_mut(&partition) {
        p.holes.insert(from, to, false);
    }
    damage(
        out,
        segment,
        pos,
        DamageKind::Gap {
            partition: PartitionId(partition),
            from,
            to,
        },
    );
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
                    // A redeclaration names the head when it was written: offsets below it
                    // and above the last record read were in damaged entries.
                    let gap = (next_offset > p.accepted).then_some(p.accepted);
                    p.accepted = p.accepted.max(next_offset);
                    p.durable = p.accepted;
                    if let Some(from) = gap {
                        hole(out, segment, pos, partition, from, next_offset);
                    }
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
        Entry::Skip {
            partition,
            offset,
            count,
        } => {
            let Some(p) = out.partitions.get_mut(&partition) else {
                damage(
                    out,
                    segment,
                    pos,
                    DamageKind::UndeclaredPartition(PartitionId(partition)),
                );
                return;
            };
            let Some(end) = offset.checked_add(count).filter(|_| offset >= p.accepted) else {
                damage(
                    out,
                    segment,
                    pos,
                    DamageKind::RepeatedOffset {
                        partition: PartitionId(partition),
                        offset,
                    },
                );
                return;
            };
            let gap = (offset > p.accepted).then_some(p.accepted);
            p.accepted = end;
            p.durable = end;
            p.holes.insert(offset, end, true);
            if let Some(from) = gap {
                hole(out, segment, pos, partition, from, offset);
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
            if r.offset < p.accepted && p.holes.fillable(r.offset) {
                // Filled from another store after the damage was found.
                p.holes.remove(r.offset);
                p.fills.insert(r.offset, segment.base + pos);
                p.index.fill(r.offset, r.meta.timestamp);
                segment.max_ts = segment.max_ts.max(r.meta.timestamp);
                out.report.records += 1;
                return;
            }
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
            let ts = r.meta.timestamp;
            if p.index_due(size, config.index_interval_bytes) {
                p.index.push(r.offset, segment.base + pos, ts);
            } else {
                p.index.extend_last(ts);
            }
            segment.max_ts = segment.max_ts.max(ts);
            out.report.records += 1;
            if let Some(from) = gap {
                hole(out, segment, pos, r.partition, from, r.offset);
            }
        }
    }
}
