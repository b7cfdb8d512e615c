//! Consumer groups' committed offsets (issue 26): for each group, topic and partition, the
//! next offset the group reads, kept durably beside the store's segments.
//!
//! A commit is written and `fdatasync`'d before [`GroupOffsets::commit`] returns, so a store
//! acknowledges only what survives a crash. A commit moves an offset forward only (the store
//! keeps the larger of the stored and the committed offset), unless it is a *seek*, which
//! sets it. The offsets live in memory (at most [`OffsetsConfig::max_offsets`] of them) and
//! in one append-only file, which is rewritten with only the current offsets when it has
//! grown to several times their size.
//!
//! # Files
//!
//! `offsets-{generation:020}.grp` (not `*.log`: every `*.log` is a segment). A generation
//! starts with a snapshot (one entry per offset, then a SNAPSHOT-END entry), then the
//! commits made since, in order. A new generation is written, synced and made durable in
//! the directory before the old one is removed, so a crash at any point leaves one whole
//! snapshot: on open, the newest generation whose SNAPSHOT-END is there is used, and every
//! other generation file is removed.
//!
//! Entries have the segments' prefix (see [`format`](crate::format)): body length (4),
//! CRC-32C (4) of the length field and the body, then the body:
//!
//! | size | field |
//! | --- | --- |
//! | 1 | kind: `0x06` offset, `0x07` snapshot end |
//!
//! An offset (`0x06`), in a snapshot or a commit:
//!
//! | size | field |
//! | --- | --- |
//! | 1 | flags: `0x01` seek (sets the offset, even backwards); other bits 0 |
//! | 1 | group name length `g` (1-255) |
//! | g | group name (no `0x00`) |
//! | 1 | topic length `t` (0-255) |
//! | t | topic (no `0x00`) |
//! | 16 | partition: its producer's UUID |
//! | 8 | next offset, big-endian |
//!
//! A snapshot end (`0x07`): the number of offsets in the snapshot (8, big-endian).
//!
//! Opening replays the entries in order with the rules of a commit, so it rebuilds exactly
//! the offsets that were acknowledged. A damaged entry (bad CRC, impossible length, unknown
//! kind or field) is skipped: the walk goes on at the next byte where a whole entry, and
//! the one after it (or the end of the file), check out. When no entry checks out after it,
//! the damage is a torn tail (a commit whose `fdatasync` had not returned: not
//! acknowledged) and the file is cut there. Both are logged and counted in
//! [`OffsetsReport`]. A damaged commit loses that commit only: the group resumes from its
//! previous one (at least once).

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use dafka_proto::group::GroupName;
use dafka_proto::{NodeId, Topic};
use thiserror::Error;

use crate::file::{Dir, SegmentFile, read_exact_at};
use crate::format::{self, ENTRY_PREFIX_LEN};

/// Entry kind: a committed offset.
pub const KIND_OFFSET: u8 = 0x06;
/// Entry kind: the end of a generation's snapshot.
pub const KIND_SNAPSHOT_END: u8 = 0x07;
/// Offset flag: a seek, which may move the offset backwards.
pub const FLAG_SEEK: u8 = 0x01;

/// The longest offset entry: prefix, kind, flags, two names of 255 bytes with their
/// lengths, the partition and the offset.
pub const MAX_OFFSET_ENTRY: usize = ENTRY_PREFIX_LEN + 2 + 2 * (1 + 255) + 16 + 8;

const PREFIX: &str = "offsets-";
const SUFFIX: &str = ".grp";

/// Where an offset belongs: a group, and a topic's partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OffsetKey {
    /// The consumer group.
    pub group: GroupName,
    /// The topic.
    pub topic: Topic,
    /// The partition: its producer's id.
    pub partition: NodeId,
}

/// How a commit moves an offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitMode {
    /// Forward only: the larger of the stored and the committed offset is kept.
    Forward,
    /// Set, even backwards (the consumer's `seek`).
    Seek,
}

/// Limits of a store's committed offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetsConfig {
    /// Most offsets kept (groups × partitions): a commit that would add more is refused.
    pub max_offsets: usize,
    /// The file is rewritten when it is larger than this and than 4 times its snapshot.
    pub compact_bytes: u64,
}

impl OffsetsConfig {
    /// The most a generation file can hold: it is rewritten once it passes both
    /// `compact_bytes` and 4 times its snapshot (at most `max_offsets` entries), plus the
    /// commit that passed them (at most `max_offsets` entries). A larger file was not
    /// written by this module and is refused before it is read.
    pub fn max_file_bytes(&self) -> u64 {
        let entries = (self.max_offsets as u64).saturating_mul(MAX_OFFSET_ENTRY as u64);
        self.compact_bytes.saturating_add(entries.saturating_mul(5))
    }
}

impl Default for OffsetsConfig {
    fn default() -> Self {
        OffsetsConfig {
            max_offsets: 100_000,
            compact_bytes: 1 << 20,
        }
    }
}

/// What opening found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetsReport {
    /// The generation in use.
    pub generation: u64,
    /// Damaged stretches skipped (each logged).
    pub damaged: usize,
    /// Bytes cut off a torn tail.
    pub torn_bytes: u64,
    /// Generation files removed (older ones, or a newer one without its snapshot end).
    pub removed: usize,
}

/// Why a commit or an open failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OffsetsError {
    /// The commit would keep more offsets than [`OffsetsConfig::max_offsets`].
    #[error("committing {adding} new offsets would keep more than the {max} allowed")]
    TooMany {
        /// New keys in the commit.
        adding: usize,
        /// The limit.
        max: usize,
    },
    /// Reading, writing or syncing the file failed. After a failed write or sync nothing
    /// of the commit is kept in memory; the store should stop acknowledging commits.
    #[error("committed offsets file: {0}")]
    Io(#[from] io::Error),
}

/// A store's committed offsets. See the [module docs](self).
pub struct GroupOffsets {
    dir: Arc<dyn Dir>,
    config: OffsetsConfig,
    generation: u64,
    file: Arc<dyn SegmentFile>,
    len: u64,
    snapshot_len: u64,
    offsets: BTreeMap<OffsetKey, u64>,
}

impl std::fmt::Debug for GroupOffsets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupOffsets")
            .field("generation", &self.generation)
            .field("len", &self.len)
            .field("offsets", &self.offsets.len())
            .finish()
    }
}

impl GroupOffsets {
    /// Opens the committed offsets in `dir`, creating an empty generation when there is none.
    pub fn open(
        dir: Arc<dyn Dir>,
        config: OffsetsConfig,
    ) -> Result<(Self, OffsetsReport), OffsetsError> {
        let mut generations: Vec<(u64, String)> = dir
            .list()?
            .into_iter()
            .filter_map(|name| generation_of(&name).map(|g| (g, name)))
            .collect();
        generations.sort();
        let mut report = OffsetsReport::default();
        // The newest generation with a whole snapshot is used; newer ones without (a
        // compaction cut short) are removed. When none is whole (damage), the newest with any
        // offsets is used as it is, never removed: an offset that checks out is never lost.
        let mut replayed = Vec::new();
        for (generation, name) in generations.iter().rev() {
            let file = dir.open(name)?;
            let bytes = read_all(&*file, config.max_file_bytes())?;
            let replay = replay(&bytes, name);
            let whole = replay.whole;
            replayed.push((*generation, name.clone(), file, bytes.len(), replay));
            if whole {
                break;
            }
        }
        let pick = replayed
            .iter()
            .position(|r| r.4.whole)
            .or_else(|| replayed.iter().position(|r| !r.4.offsets.is_empty()))
            .or_else(|| (!replayed.is_empty()).then_some(0));
        let mut chosen = None;
        for (i, (generation, name, file, len, replay)) in replayed.into_iter().enumerate() {
            if Some(i) == pick {
                if replay.torn_at < len {
                    file.set_len(replay.torn_at as u64)?;
                    file.sync_data()?;
                }
                report.damaged = replay.damaged;
                report.torn_bytes = (len - replay.torn_at) as u64;
                chosen = Some((generation, file, replay));
            } else {
                tracing::warn!(file = %name, "committed offsets without a whole snapshot: removed");
                dir.remove(&name)?;
                report.removed += 1;
            }
        }
        let kept = chosen.as_ref().map(|(g, _, _)| *g);
        for (generation, name) in generations {
            if Some(generation) < kept {
                dir.remove(&name)?;
                report.removed += 1;
            }
        }
        if report.removed > 0 {
            dir.sync()?;
        }
        let this = match chosen {
            Some((generation, file, replay)) => GroupOffsets {
                dir,
                config,
                generation,
                file,
                len: replay.torn_at as u64,
                snapshot_len: replay.snapshot_len.unwrap_or(0) as u64,
                offsets: replay.offsets,
            },
            None => {
                let (file, len) = write_generation(&*dir, 0, &BTreeMap::new())?;
                GroupOffsets {
                    dir,
                    config,
                    generation: 0,
                    file,
                    len,
                    snapshot_len: len,
                    offsets: BTreeMap::new(),
                }
            }
        };
        report.generation = this.generation;
        Ok((this, report))
    }

    /// Commits `offsets` in one write and one `fdatasync`; returns, in the same order, the
    /// offset each key has afterwards (with [`CommitMode::Forward`], the stored one when it
    /// was larger). Entries that change nothing are not written; a commit that changes
    /// nothing writes nothing.
    pub fn commit(
        &mut self,
        offsets: &[(OffsetKey, u64)],
        mode: CommitMode,
    ) -> Result<Vec<u64>, OffsetsError> {
        let mut after: BTreeMap<&OffsetKey, u64> = BTreeMap::new();
        let mut changed = Vec::new();
        for (key, next) in offsets {
            let current = after
                .get(key)
                .copied()
                .or_else(|| self.offsets.get(key).copied());
            let new = apply(current, *next, mode);
            if Some(new) != current {
                changed.push((key, new));
            }
            after.insert(key, new);
        }
        let adding = after
            .keys()
            .filter(|k| !self.offsets.contains_key(**k))
            .count();
        if self.offsets.len() + adding > self.config.max_offsets {
            return Err(OffsetsError::TooMany {
                adding,
                max: self.config.max_offsets,
            });
        }
        let result = offsets.iter().map(|(k, _)| after[k]).collect();
        if changed.is_empty() {
            return Ok(result);
        }
        let mut buf = BytesMut::new();
        let flags = if mode == CommitMode::Seek {
            FLAG_SEEK
        } else {
            0
        };
        for (key, next) in &changed {
            put_offset(&mut buf, flags, key, *next);
        }
        if let Err(e) = self
            .file
            .write_all_at(&buf, self.len)
            .and_then(|()| self.file.sync_data())
        {
            // Nothing of it counts: cut it off again so that a later commit does not
            // follow a half-written one (the replay would skip it anyway).
            let _ = self.file.set_len(self.len);
            return Err(e.into());
        }
        self.len += buf.len() as u64;
        for (key, next) in changed {
            self.offsets.insert(key.clone(), next);
        }
        if self.len > self.config.compact_bytes
            && self.len > 4 * self.snapshot_len
            && let Err(e) = self.compact()
        {
            // The commit is durable already; the file stays as it is and is compacted at a
            // later commit.
            tracing::warn!(error = %e, "committed offsets not compacted");
        }
        Ok(result)
    }

    /// The committed offset of `key`.
    pub fn get(&self, key: &OffsetKey) -> Option<u64> {
        self.offsets.get(key).copied()
    }

    /// Every committed offset of `group`, by topic and partition.
    pub fn group<'a>(
        &'a self,
        group: &'a GroupName,
    ) -> impl Iterator<Item = (&'a OffsetKey, u64)> + 'a {
        self.offsets
            .iter()
            .filter(move |(k, _)| &k.group == group)
            .map(|(k, v)| (k, *v))
    }

    /// Every group with a committed offset, in name order, each once.
    pub fn groups(&self) -> Vec<GroupName> {
        let names: std::collections::BTreeSet<&GroupName> =
            self.offsets.keys().map(|k| &k.group).collect();
        names.into_iter().cloned().collect()
    }

    /// Every committed offset.
    pub fn all(&self) -> impl Iterator<Item = (&OffsetKey, u64)> {
        self.offsets.iter().map(|(k, v)| (k, *v))
    }

    /// The generation in use and its file's length (for tests and stats).
    pub fn file_state(&self) -> (u64, u64) {
        (self.generation, self.len)
    }

    /// Writes the current offsets as a new generation, makes it durable, then removes the
    /// old one.
    fn compact(&mut self) -> Result<(), OffsetsError> {
        let next = self.generation + 1;
        // A compaction cut short before left it: it never was the one in use.
        match self.dir.remove(&file_name(next)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
        let (file, len) = write_generation(&*self.dir, next, &self.offsets)?;
        let old = file_name(self.generation);
        self.generation = next;
        self.file = file;
        self.len = len;
        self.snapshot_len = len;
        // The new generation is whole and durable: losing the removal only leaves an older
        // file that the next open removes.
        self.dir.remove(&old)?;
        self.dir.sync()?;
        Ok(())
    }
}

/// The offset after committing `next` over `current`.
fn apply(current: Option<u64>, next: u64, mode: CommitMode) -> u64 {
    match (mode, current) {
        (CommitMode::Forward, Some(c)) => c.max(next),
        _ => next,
    }
}

fn file_name(generation: u64) -> String {
    format!("{PREFIX}{generation:020}{SUFFIX}")
}

fn generation_of(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Creates generation `generation` holding `offsets` and its snapshot end, synced, and
/// syncs the directory; returns the file and its length.
fn write_generation(
    dir: &dyn Dir,
    generation: u64,
    offsets: &BTreeMap<OffsetKey, u64>,
) -> Result<(Arc<dyn SegmentFile>, u64), OffsetsError> {
    let name = file_name(generation);
    let file = dir.create(&name)?;
    let mut buf = BytesMut::new();
    for (key, next) in offsets {
        put_offset(&mut buf, FLAG_SEEK, key, *next);
    }
    let start = buf.len();
    buf.put_bytes(0, ENTRY_PREFIX_LEN);
    buf.put_u8(KIND_SNAPSHOT_END);
    buf.put_u64(offsets.len() as u64);
    format::seal_entry(&mut buf, start);
    file.write_all_at(&buf, 0)?;
    file.sync_data()?;
    dir.sync()?;
    Ok((file, buf.len() as u64))
}

/// Appends one offset entry.
fn put_offset(buf: &mut BytesMut, flags: u8, key: &OffsetKey, next: u64) {
    let start = buf.len();
    buf.put_bytes(0, ENTRY_PREFIX_LEN);
    buf.put_u8(KIND_OFFSET);
    buf.put_u8(flags);
    // Both names are at most 255 bytes (their types' rules).
    buf.put_u8(key.group.as_bytes().len() as u8);
    buf.put_slice(key.group.as_bytes());
    buf.put_u8(key.topic.len() as u8);
    buf.put_slice(key.topic.as_bytes());
    buf.put_slice(key.partition.as_bytes());
    buf.put_u64(next);
    format::seal_entry(buf, start);
}

/// The whole file, when it is at most `max` bytes (checked before allocating).
fn read_all(file: &dyn SegmentFile, max: u64) -> io::Result<Vec<u8>> {
    let size = file.size()?;
    let len = usize::try_from(size)
        .ok()
        .filter(|_| size <= max)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("committed offsets file of {size} bytes, over the {max} it can grow to"),
            )
        })?;
    let mut bytes = vec![0; len];
    read_exact_at(file, &mut bytes, 0)?;
    Ok(bytes)
}

/// One checked entry.
enum Entry {
    Offset(u8, OffsetKey, u64),
    SnapshotEnd(u64),
}

/// The entry at the start of `bytes` and its length, if it checks out whole.
fn entry_at(bytes: &[u8]) -> Option<(Entry, usize)> {
    let prefix = format::decode_prefix(bytes).ok()?;
    // No entry of this file is longer: a damaged length is not followed by a CRC over
    // megabytes at every position a resync tries.
    if prefix.entry_len() > MAX_OFFSET_ENTRY {
        return None;
    }
    let entry = bytes.get(..prefix.entry_len())?;
    format::check_entry(entry).ok()?;
    let body = &entry[ENTRY_PREFIX_LEN..];
    let parsed = match *body.first()? {
        KIND_OFFSET => parse_offset(&body[1..])?,
        KIND_SNAPSHOT_END => {
            let count = <[u8; 8]>::try_from(body.get(1..)?).ok()?;
            Entry::SnapshotEnd(u64::from_be_bytes(count))
        }
        _ => return None,
    };
    Some((parsed, entry.len()))
}

fn parse_offset(body: &[u8]) -> Option<Entry> {
    let (&flags, rest) = body.split_first()?;
    if flags & !FLAG_SEEK != 0 {
        return None;
    }
    let (&g, rest) = rest.split_first()?;
    let (group, rest) = rest.split_at_checked(g as usize)?;
    let (&t, rest) = rest.split_first()?;
    let (topic, rest) = rest.split_at_checked(t as usize)?;
    let (partition, rest) = rest.split_first_chunk::<16>()?;
    let next = <[u8; 8]>::try_from(rest).ok()?;
    let key = OffsetKey {
        group: GroupName::new(bytes::Bytes::copy_from_slice(group)).ok()?,
        topic: Topic::new(bytes::Bytes::copy_from_slice(topic)).ok()?,
        partition: NodeId::from_bytes(*partition),
    };
    Some(Entry::Offset(flags, key, u64::from_be_bytes(next)))
}

struct Replay {
    offsets: BTreeMap<OffsetKey, u64>,
    /// Length up to the snapshot end, when there is one.
    snapshot_len: Option<usize>,
    /// The snapshot end is there and counts exactly the offsets read before it.
    whole: bool,
    damaged: usize,
    /// Where the whole entries end (the file's length when nothing is torn).
    torn_at: usize,
}

/// Replays a generation file's entries.
fn replay(bytes: &[u8], name: &str) -> Replay {
    let mut r = Replay {
        offsets: BTreeMap::new(),
        snapshot_len: None,
        whole: false,
        damaged: 0,
        torn_at: bytes.len(),
    };
    let mut pos = 0;
    while pos < bytes.len() {
        let (entry, len) = match entry_at(&bytes[pos..]) {
            Some(found) => found,
            None => match resync(bytes, pos + 1) {
                Some(next) => {
                    tracing::warn!(file = %name, position = pos, bytes = next - pos,
                        "damaged committed offsets skipped");
                    r.damaged += 1;
                    pos = next;
                    continue;
                }
                None => {
                    tracing::warn!(file = %name, position = pos, bytes = bytes.len() - pos,
                        "torn committed offsets cut");
                    r.torn_at = pos;
                    break;
                }
            },
        };
        match entry {
            Entry::Offset(flags, key, next) => {
                let mode = if flags & FLAG_SEEK != 0 {
                    CommitMode::Seek
                } else {
                    CommitMode::Forward
                };
                let current = r.offsets.get(&key).copied();
                r.offsets.insert(key, apply(current, next, mode));
            }
            Entry::SnapshotEnd(count) => {
                if r.snapshot_len.is_none() {
                    r.whole = count == r.offsets.len() as u64;
                    if !r.whole {
                        // A damaged entry of the snapshot was skipped (or a compaction's
                        // write was cut before its sync): an older generation is used if there
                        // is one, else this one as it is.
                        tracing::warn!(file = %name, expected = count, found = r.offsets.len(),
                            "committed offsets snapshot incomplete");
                    }
                    r.snapshot_len = Some(pos + len);
                }
            }
        }
        pos += len;
    }
    r
}

/// The first position from `from` where a whole entry checks out and is followed by the
/// end of the file or by another whole entry.
fn resync(bytes: &[u8], from: usize) -> Option<usize> {
    let whole = |at: usize| entry_at(&bytes[at..]).map(|(_, len)| at + len);
    (from..bytes.len())
        .find(|&at| whole(at).is_some_and(|after| after == bytes.len() || whole(after).is_some()))
        // Failing that, a whole entry followed by a torn one: an acknowledged commit before
        // the last one, which was cut; the walk then cuts only the torn one.
        .or_else(|| (from..bytes.len()).find(|&at| whole(at).is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::MemDir;

    fn key(group: &str, topic: &str, p: u8) -> OffsetKey {
        OffsetKey {
            group: GroupName::new(group.to_owned()).unwrap(),
            topic: Topic::try_from(topic).unwrap(),
            partition: NodeId::from_bytes([p; 16]),
        }
    }

    fn open(dir: &MemDir) -> (GroupOffsets, OffsetsReport) {
        GroupOffsets::open(Arc::new(dir.clone()), OffsetsConfig::default()).unwrap()
    }

    #[test]
    fn commits_survive_a_reopen_and_only_move_forward_unless_seeking() {
        let dir = MemDir::default();
        let (mut o, report) = open(&dir);
        assert_eq!(report, OffsetsReport::default());
        let (a, b) = (key("billing", "t", 1), key("billing", "t", 2));
        assert_eq!(
            o.commit(&[(a.clone(), 10), (b.clone(), 5)], CommitMode::Forward)
                .unwrap(),
            [10, 5]
        );
        assert_eq!(
            o.commit(&[(a.clone(), 7)], CommitMode::Forward).unwrap(),
            [10],
            "never backwards"
        );
        let (_, len) = o.file_state();
        assert_eq!(
            o.commit(&[(a.clone(), 10)], CommitMode::Forward).unwrap(),
            [10]
        );
        assert_eq!(
            o.file_state().1,
            len,
            "a commit that changes nothing writes nothing"
        );
        assert_eq!(o.commit(&[(b.clone(), 3)], CommitMode::Seek).unwrap(), [3]);
        drop(o);
        let (o, report) = open(&dir);
        assert_eq!(report.damaged + report.removed, 0);
        assert_eq!((o.get(&a), o.get(&b)), (Some(10), Some(3)));
        assert_eq!(o.get(&key("other", "t", 1)), None);
        let billing = GroupName::new("billing").unwrap();
        assert_eq!(o.group(&billing).count(), 2);
    }

    #[test]
    fn the_bytes_of_an_offset_entry_are_the_documented_ones() {
        let mut buf = BytesMut::new();
        put_offset(&mut buf, 0, &key("g", "t", 0xAB), 0x0102);
        let body: Vec<u8> = [
            &[KIND_OFFSET, 0x00, 0x01, b'g', 0x01, b't'][..],
            &[0xAB; 16],
            &[0, 0, 0, 0, 0, 0, 0x01, 0x02],
        ]
        .concat();
        assert_eq!(&buf[..4], (body.len() as u32).to_be_bytes());
        assert_eq!(&buf[ENTRY_PREFIX_LEN..], body);
        let crc = crc32c::crc32c(&[&buf[..4], &body[..]].concat());
        assert_eq!(&buf[4..8], crc.to_be_bytes());
    }

    #[test]
    fn a_torn_commit_is_cut_and_a_damaged_one_skipped() {
        let dir = MemDir::default();
        let (mut o, _) = open(&dir);
        let keys: Vec<OffsetKey> = (0..3).map(|p| key("g", "t", p)).collect();
        for (i, k) in keys.iter().enumerate() {
            o.commit(&[(k.clone(), 100 + i as u64)], CommitMode::Forward)
                .unwrap();
        }
        let (generation, len) = o.file_state();
        drop(o);
        let file = dir.file(&file_name(generation)).unwrap();
        let whole = file.contents();
        assert_eq!(whole.len() as u64, len);
        let entry = (whole.len() - file_len_before_commits(&whole)) / 3;
        // A torn last commit: half of it written.
        file.replace(whole[..whole.len() - entry / 2].to_vec());
        let (o, report) = open(&dir);
        assert_eq!(report.torn_bytes, (entry - entry / 2) as u64);
        assert_eq!(o.get(&keys[2]), None, "never acknowledged");
        assert_eq!(o.get(&keys[1]), Some(101));
        assert_eq!(
            file.contents().len(),
            whole.len() - entry,
            "cut to whole entries"
        );
        drop(o);
        // One flipped byte in the middle commit: that commit only is lost.
        let mut damaged = whole.clone();
        let at = whole.len() - entry - entry / 2;
        damaged[at] ^= 0x40;
        file.replace(damaged);
        let (o, report) = open(&dir);
        assert_eq!((report.damaged, report.torn_bytes), (1, 0));
        assert_eq!(
            (o.get(&keys[0]), o.get(&keys[1]), o.get(&keys[2])),
            (Some(100), None, Some(102))
        );
    }

    /// Length of the snapshot at the start of a generation with no offsets before its commits.
    fn file_len_before_commits(bytes: &[u8]) -> usize {
        let (entry, len) = entry_at(bytes).unwrap();
        assert!(matches!(entry, Entry::SnapshotEnd(0)));
        len
    }

    #[test]
    fn a_damaged_snapshot_end_loses_nothing_that_checks_out() {
        let dir = MemDir::default();
        let (mut o, _) = open(&dir);
        let k = key("g", "t", 1);
        o.commit(&[(k.clone(), 42)], CommitMode::Forward).unwrap();
        drop(o);
        // The only generation's snapshot end (its first entry here) is damaged.
        let file = dir.file(&file_name(0)).unwrap();
        let mut bytes = file.contents();
        bytes[ENTRY_PREFIX_LEN] ^= 0xFF;
        file.replace(bytes);
        let (o, report) = open(&dir);
        assert_eq!(o.get(&k), Some(42), "the commit after it is kept");
        assert_eq!((report.generation, report.removed), (0, 0));
    }

    #[test]
    fn an_acknowledged_commit_between_damage_and_a_torn_tail_is_kept() {
        let dir = MemDir::default();
        let (mut o, _) = open(&dir);
        let keys: Vec<OffsetKey> = (0..3).map(|p| key("g", "t", p)).collect();
        for (i, k) in keys.iter().enumerate() {
            o.commit(&[(k.clone(), 10 + i as u64)], CommitMode::Forward)
                .unwrap();
        }
        drop(o);
        let file = dir.file(&file_name(0)).unwrap();
        let whole = file.contents();
        let entry = (whole.len() - file_len_before_commits(&whole)) / 3;
        let first = whole.len() - 3 * entry;
        let mut bytes = whole[..whole.len() - entry / 2].to_vec(); // the last one torn
        bytes[first + entry / 2] ^= 0x01; // the first one damaged
        file.replace(bytes);
        let (o, report) = open(&dir);
        assert_eq!(report.damaged, 1);
        assert_eq!(
            (o.get(&keys[0]), o.get(&keys[1]), o.get(&keys[2])),
            (None, Some(11), None),
            "the acknowledged one between is kept"
        );
    }

    #[test]
    fn a_grown_file_is_rewritten_with_the_current_offsets_only() {
        let dir = MemDir::default();
        let config = OffsetsConfig {
            compact_bytes: 4096,
            ..OffsetsConfig::default()
        };
        let (mut o, _) = GroupOffsets::open(Arc::new(dir.clone()), config).unwrap();
        let k = key("g", "t", 1);
        for next in 1..=500 {
            o.commit(&[(k.clone(), next)], CommitMode::Forward).unwrap();
        }
        let (generation, len) = o.file_state();
        assert!(generation > 0, "compacted");
        assert!(len < 4096 + 100, "{len}");
        let names = dir.list().unwrap();
        assert_eq!(
            names,
            [file_name(generation)],
            "the old generations removed"
        );
        drop(o);
        let (o, _) = GroupOffsets::open(Arc::new(dir.clone()), config).unwrap();
        assert_eq!(o.get(&k), Some(500));
    }

    #[test]
    fn a_generation_without_its_snapshot_end_gives_way_to_the_one_before() {
        let dir = MemDir::default();
        let (mut o, _) = open(&dir);
        let k = key("g", "t", 1);
        o.commit(&[(k.clone(), 42)], CommitMode::Forward).unwrap();
        drop(o);
        // A compaction that crashed before its snapshot end reached the disk.
        let mut half = BytesMut::new();
        put_offset(&mut half, FLAG_SEEK, &k, 7);
        dir.insert(&file_name(1), half.to_vec());
        let (o, report) = open(&dir);
        assert_eq!((report.generation, report.removed), (0, 1));
        assert_eq!(o.get(&k), Some(42));
        assert_eq!(dir.list().unwrap(), [file_name(0)]);
    }

    #[test]
    fn commits_past_the_limit_are_refused_whole() {
        let dir = MemDir::default();
        let config = OffsetsConfig {
            max_offsets: 2,
            ..OffsetsConfig::default()
        };
        let (mut o, _) = GroupOffsets::open(Arc::new(dir.clone()), config).unwrap();
        o.commit(&[(key("g", "t", 1), 1)], CommitMode::Forward)
            .unwrap();
        let err = o
            .commit(
                &[(key("g", "t", 2), 1), (key("g", "t", 3), 1)],
                CommitMode::Forward,
            )
            .unwrap_err();
        assert!(matches!(err, OffsetsError::TooMany { adding: 2, max: 2 }));
        assert_eq!(o.get(&key("g", "t", 2)), None, "nothing of it kept");
        o.commit(&[(key("g", "t", 1), 5)], CommitMode::Forward)
            .unwrap();
    }

    #[test]
    fn on_a_real_directory_beside_a_store() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Arc::new(crate::FsDir::new(tmp.path()).unwrap());
        let (mut o, _) = GroupOffsets::open(dir.clone(), OffsetsConfig::default()).unwrap();
        let k = key("g", "t", 9);
        o.commit(&[(k.clone(), 12)], CommitMode::Forward).unwrap();
        drop(o);
        let (o, _) = GroupOffsets::open(dir, OffsetsConfig::default()).unwrap();
        assert_eq!(o.get(&k), Some(12));
        // A store opens the same directory: the offsets file is not taken for a segment.
        let dir = Arc::new(crate::FsDir::new(tmp.path()).unwrap());
        let store = crate::Store::open(dir, crate::Config::default());
        assert!(store.is_ok(), "{:?}", store.err());
    }

    #[test]
    fn a_file_larger_than_it_can_grow_is_refused_before_it_is_read() {
        let dir = MemDir::default();
        let config = OffsetsConfig {
            max_offsets: 1,
            compact_bytes: 1024,
        };
        let max = config.max_file_bytes() as usize;
        dir.insert(&file_name(0), vec![0; max + 1]);
        let err = GroupOffsets::open(Arc::new(dir.clone()), config).unwrap_err();
        assert!(err.to_string().contains("over the"), "{err}");
    }

    #[test]
    fn only_generation_names_are_generations() {
        assert_eq!(generation_of(&file_name(7)), Some(7));
        assert_eq!(generation_of("offsets-7.grp"), None);
        assert_eq!(generation_of("00000000000000000000.log"), None);
        assert_eq!(generation_of("offsets-0000000000000000000x.grp"), None);
    }

    proptest::proptest! {
        /// Any sequence of commits reads back after a reopen exactly as a model of the rules
        /// says, through compactions (a small `compact_bytes`).
        #[test]
        fn reopened_offsets_follow_the_rules(
            ops in proptest::collection::vec((0u8..4, 0u64..50, proptest::bool::ANY), 1..60)
        ) {
            let dir = MemDir::default();
            let config = OffsetsConfig { compact_bytes: 512, ..OffsetsConfig::default() };
            let (mut o, _) = GroupOffsets::open(Arc::new(dir.clone()), config).unwrap();
            let mut model: BTreeMap<u8, u64> = BTreeMap::new();
            for (p, next, seek) in ops {
                let mode = if seek { CommitMode::Seek } else { CommitMode::Forward };
                let got = o.commit(&[(key("g", "t", p), next)], mode).unwrap();
                let want = apply(model.get(&p).copied(), next, mode);
                model.insert(p, want);
                proptest::prop_assert_eq!(got, vec![want]);
            }
            drop(o);
            let (o, report) = GroupOffsets::open(Arc::new(dir), config).unwrap();
            proptest::prop_assert_eq!(report.damaged, 0);
            for (p, want) in model {
                proptest::prop_assert_eq!(o.get(&key("g", "t", p)), Some(want));
            }
        }

        /// Arbitrary bytes as a generation file: no panic, and every offset read back was
        /// in an entry whose CRC checks out (re-encoded, it is found in the bytes).
        #[test]
        fn any_bytes_open_without_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let dir = MemDir::default();
            dir.insert(&file_name(3), bytes.clone());
            let opened = GroupOffsets::open(Arc::new(dir), OffsetsConfig::default());
            if let Ok((o, _)) = opened {
                for (k, next) in o.all() {
                    let (mut seek, mut fwd) = (BytesMut::new(), BytesMut::new());
                    put_offset(&mut seek, FLAG_SEEK, k, next);
                    put_offset(&mut fwd, 0, k, next);
                    let found = |e: &[u8]| bytes.windows(e.len()).any(|w| w == e);
                    proptest::prop_assert!(found(&seek) || found(&fwd));
                }
            }
        }
    }
}
