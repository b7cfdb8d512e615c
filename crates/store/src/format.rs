//! The byte formats on disk, as pure encode and decode functions.
//!
//! A store is a directory of segment files. Each file is named by the global log
//! position of its first byte (`{position:020}.log`: 20 decimal digits, so names sort
//! in log order) and starts with a [segment header](SegmentHeader); entries follow
//! back to back. A global position `p` lives in the segment with the greatest base
//! `<= p`, at file offset `p - base` (the header counts: the first entry of the first
//! segment is at position 20).
//!
//! # Segment header (20 bytes)
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | magic `0x44 0x4B 0x4C 0x47` (`"DKLG"`) |
//! | 4 | 2 | format version, `0x0001` |
//! | 6 | 2 | reserved, zero |
//! | 8 | 8 | base position (must equal the file name) |
//! | 16 | 4 | CRC-32C of bytes 0..16 |
//!
//! # Entry
//!
//! Every entry has the same 9-byte prefix; the CRC covers the length field and the
//! whole body, so a flipped length is caught as surely as a flipped value byte.
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | body length `n` (bytes from offset 8) |
//! | 4 | 4 | CRC-32C (Castagnoli) of bytes 0..4 followed by bytes 8..8+n |
//! | 8 | 1 | kind: `0x01` record, `0x02` partition declaration, `0x03` batch commit, `0x04` skip |
//! | 9 | n-1 | kind-specific fields |
//!
//! Record (`0x01`), `n = 21 + value length`:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 9 | 4 | partition id |
//! | 13 | 8 | offset within the partition |
//! | 21 | 8 | receive timestamp, milliseconds since the Unix epoch |
//! | 29 | n-21 | value |
//!
//! Partition declaration (`0x02`), `n = 30 + topic length`: binds a compact partition
//! id to its (topic, producer UUID) key and says the partition's head when written.
//! A partition is declared once when created, and again at the start of every later
//! segment, so dropping old segments never loses a declaration.
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 9 | 4 | partition id |
//! | 13 | 8 | next offset of the partition (its head) when this was written |
//! | 21 | 16 | producer UUID |
//! | 37 | 1 | topic length `t` (at most 255, as a ZeroMQ short string) |
//! | 38 | t | topic, UTF-8 |
//!
//! Batch commit (`0x03`), `n = 1`: ends every group-commit batch (one `write`, one
//! `fdatasync`). Recovery uses it to tell damage in the last batch (a torn write:
//! truncated) from damage in the middle of the log (skipped and reported).
//!
//! Skip (`0x04`), `n = 21`: offsets of a partition the store was given but does not keep
//! (a record larger than `max_record_bytes`): they take their place in the partition, so the
//! offsets after them go on, and reads of them answer `Lost`. Added to format version 1
//! without a version change: a build that predates it reports the entry as damage (unknown
//! kind) and skips it, which is what it stands for.
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 9 | 4 | partition id |
//! | 13 | 8 | first offset skipped |
//! | 21 | 8 | number of offsets skipped |
//!
//! # Durable point (`durable.point`, 20 bytes)
//!
//! Rewritten in place after every `fdatasync` of a segment (not itself synced: an older
//! point left by a power cut is still true). Every log byte below `position` had been
//! `fdatasync`'d and so may have been acknowledged: recovery never cuts there, it skips
//! exactly the damaged entries (as Kafka's recovery point). Bytes at or past it may be a
//! torn write.
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | magic `0x44 0x4B 0x44 0x50` (`"DKDP"`) |
//! | 4 | 2 | format version, `0x0001` |
//! | 6 | 2 | reserved, zero |
//! | 8 | 8 | global log position below which every byte was synced |
//! | 16 | 4 | CRC-32C of bytes 0..16 |
//!
//! All integers are big-endian, as everywhere in dafka.

use bytes::{BufMut, Bytes, BytesMut};
use dafka_wire::{ReadError, Reader};
use thiserror::Error;

/// `"DKLG"`: the first four bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 4] = [0x44, 0x4B, 0x4C, 0x47];
/// The segment format version this crate writes and reads.
pub const FORMAT_VERSION: u16 = 0x0001;
/// Length of the segment header.
pub const HEADER_LEN: usize = 20;
/// Length of the prefix every entry starts with (length + CRC).
pub const ENTRY_PREFIX_LEN: usize = 8;
/// Entry kind: a record.
pub const KIND_RECORD: u8 = 0x01;
/// Entry kind: a partition declaration.
pub const KIND_DECLARE: u8 = 0x02;
/// Entry kind: the end of a group-commit batch.
pub const KIND_COMMIT: u8 = 0x03;
/// Entry kind: offsets skipped (given to the store, not kept).
pub const KIND_SKIP: u8 = 0x04;
/// Body length of a skip entry.
pub const SKIP_LEN: usize = 1 + 4 + 8 + 8;
/// Body length of a record without its value (kind, partition, offset, timestamp).
pub const RECORD_FIXED_LEN: usize = 1 + 4 + 8 + 8;
/// Body length of a declaration without its topic.
pub const DECLARE_FIXED_LEN: usize = 1 + 4 + 8 + 16 + 1;
/// The longest topic a declaration holds.
pub const MAX_TOPIC_LEN: usize = 0xFF;
/// Size on disk of a record with a value of `value_len` bytes.
pub const fn record_size(value_len: usize) -> usize {
    ENTRY_PREFIX_LEN + RECORD_FIXED_LEN + value_len
}
/// Size on disk of a commit entry.
pub const COMMIT_SIZE: usize = ENTRY_PREFIX_LEN + 1;

/// A damaged or unknown byte sequence in a segment.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FormatError {
    /// A field ran past the end of the bytes available.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The segment does not start with `"DKLG"`.
    #[error("bad magic {0:02X?}")]
    BadMagic([u8; 4]),
    /// A segment written by a format version this crate does not read.
    #[error("unsupported segment format version {0:#06x}")]
    UnsupportedVersion(u16),
    /// A stored CRC-32C does not match the bytes it covers.
    #[error("CRC-32C mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Crc {
        /// The CRC in the file.
        stored: u32,
        /// The CRC of the bytes as read.
        computed: u32,
    },
    /// An entry's length is too short for its kind, or longer than allowed.
    #[error("entry body length {0} is impossible")]
    BadLength(usize),
    /// An entry kind this version does not know.
    #[error("unknown entry kind {0:#04x}")]
    UnknownKind(u8),
    /// A declaration's topic is not UTF-8.
    #[error("declared topic is not UTF-8")]
    TopicNotUtf8,
}

/// The header at the start of every segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Global position of the segment's first byte (its header).
    pub base: u64,
}

impl SegmentHeader {
    /// The 20 header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        encode_stamp(SEGMENT_MAGIC, self.base)
    }

    /// Decodes and checks a header (magic, version, CRC). `bytes` must be exactly
    /// [`HEADER_LEN`] long.
    pub fn decode(bytes: Bytes) -> Result<Self, FormatError> {
        decode_stamp(bytes, SEGMENT_MAGIC).map(|base| SegmentHeader { base })
    }
}

/// `"DKDP"`: the first four bytes of the durable-point file.
pub const DURABLE_POINT_MAGIC: [u8; 4] = [0x44, 0x4B, 0x44, 0x50];
/// The durable-point file's name in the store directory.
pub const DURABLE_POINT_FILE: &str = "durable.point";
/// Length of the durable-point file.
pub const DURABLE_POINT_LEN: usize = 20;

/// The contents of the durable-point file: every log byte below `position` was synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurablePoint {
    /// Global log position.
    pub position: u64,
}

impl DurablePoint {
    /// The 20 bytes of the file.
    pub fn encode(&self) -> [u8; DURABLE_POINT_LEN] {
        encode_stamp(DURABLE_POINT_MAGIC, self.position)
    }

    /// Decodes and checks the file's bytes (magic, version, CRC).
    pub fn decode(bytes: Bytes) -> Result<Self, FormatError> {
        decode_stamp(bytes, DURABLE_POINT_MAGIC).map(|position| DurablePoint { position })
    }
}

/// A segment header and the durable point share one layout: magic (4), version (2),
/// reserved (2), one position (8), CRC-32C of the 16 bytes before it (4).
fn encode_stamp(magic: [u8; 4], position: u64) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[0..4].copy_from_slice(&magic);
    out[4..6].copy_from_slice(&FORMAT_VERSION.to_be_bytes());
    out[8..16].copy_from_slice(&position.to_be_bytes());
    let crc = crc32c::crc32c(&out[..16]);
    out[16..20].copy_from_slice(&crc.to_be_bytes());
    out
}

fn decode_stamp(bytes: Bytes, expected: [u8; 4]) -> Result<u64, FormatError> {
    let computed = crc32c::crc32c(&bytes[..bytes.len().min(16)]);
    let mut r = Reader::new(bytes);
    let magic = r.array::<4>("magic")?;
    let version = r.u16("format version")?;
    let _reserved = r.u16("reserved field")?;
    let position = r.u64("position")?;
    let stored = r.u32("CRC")?;
    r.finish("header")?;
    if magic != expected {
        return Err(FormatError::BadMagic(magic));
    }
    if stored != computed {
        return Err(FormatError::Crc { stored, computed });
    }
    if version != FORMAT_VERSION {
        return Err(FormatError::UnsupportedVersion(version));
    }
    Ok(position)
}

/// The file name of the segment whose first byte is at `base`.
pub fn segment_file_name(base: u64) -> String {
    format!("{base:020}.log")
}

/// The base position a segment file name stands for, if it is one.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A record as decoded from disk; its value is a zero-copy slice of the read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordEntry {
    /// Compact partition id (see [`Entry::Declare`]).
    pub partition: u32,
    /// Offset within the partition.
    pub offset: u64,
    /// Receive timestamp, milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// The record's value.
    pub value: Bytes,
}

/// One decoded entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A record of a partition.
    Record(RecordEntry),
    /// Binds a partition id to its key, with the partition's head when written.
    Declare {
        /// Compact partition id.
        partition: u32,
        /// The partition's next offset when this was written.
        next_offset: u64,
        /// Producer UUID.
        producer: [u8; 16],
        /// Topic.
        topic: String,
    },
    /// The end of a group-commit batch.
    Commit,
    /// Offsets `offset..offset + count` of a partition, given to the store and not kept.
    Skip {
        /// Compact partition id.
        partition: u32,
        /// First offset skipped.
        offset: u64,
        /// How many.
        count: u64,
    },
}

/// CRC-32C (Castagnoli, reflected polynomial `0x82F63B78`) byte table, for the 4-byte
/// length field only: four table steps cost less than a call into `crc32c` for 4 bytes,
/// so an entry's CRC takes one call (over the body) instead of two.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// `crc32c::crc32c(&len_field)`, by table.
#[inline]
fn len_field_crc(len_field: [u8; 4]) -> u32 {
    let mut crc = !0u32;
    for b in len_field {
        crc = CRC32C_TABLE[((crc ^ u32::from(b)) & 0xFF) as usize] ^ (crc >> 8);
    }
    !crc
}

/// The CRC an entry stores: bytes 0..4 (the length field) followed by the body.
#[inline]
fn entry_crc(len_field: [u8; 4], body: &[u8]) -> u32 {
    crc32c::crc32c_append(len_field_crc(len_field), body)
}

/// Appends the 8-byte prefix for `body` (already in `buf` from `body_start`).
fn seal_entry(buf: &mut BytesMut, start: usize) {
    let body_len = buf.len() - start - ENTRY_PREFIX_LEN;
    let len_field = (body_len as u32).to_be_bytes();
    let crc = entry_crc(len_field, &buf[start + ENTRY_PREFIX_LEN..]);
    buf[start..start + 4].copy_from_slice(&len_field);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
}

/// Appends a record entry to `buf`. The caller checks the value against its size limit
/// (the body length must fit the `u32` length field).
pub fn encode_record(
    buf: &mut BytesMut,
    partition: u32,
    offset: u64,
    timestamp_ms: u64,
    value: &[u8],
) {
    let start = buf.len();
    buf.reserve(record_size(value.len()));
    buf.put_bytes(0, ENTRY_PREFIX_LEN);
    buf.put_u8(KIND_RECORD);
    buf.put_u32(partition);
    buf.put_u64(offset);
    buf.put_u64(timestamp_ms);
    buf.put_slice(value);
    seal_entry(buf, start);
}

/// Appends a declaration entry to `buf`. `topic` must be at most [`MAX_TOPIC_LEN`] bytes.
pub fn encode_declare(
    buf: &mut BytesMut,
    partition: u32,
    next_offset: u64,
    producer: &[u8; 16],
    topic: &str,
) {
    debug_assert!(topic.len() <= MAX_TOPIC_LEN);
    let start = buf.len();
    buf.put_bytes(0, ENTRY_PREFIX_LEN);
    buf.put_u8(KIND_DECLARE);
    buf.put_u32(partition);
    buf.put_u64(next_offset);
    buf.put_slice(producer);
    buf.put_u8(topic.len() as u8);
    buf.put_slice(topic.as_bytes());
    seal_entry(buf, start);
}

/// Appends a skip entry to `buf`.
pub fn encode_skip(buf: &mut BytesMut, partition: u32, offset: u64, count: u64) {
    let start = buf.len();
    buf.put_bytes(0, ENTRY_PREFIX_LEN);
    buf.put_u8(KIND_SKIP);
    buf.put_u32(partition);
    buf.put_u64(offset);
    buf.put_u64(count);
    seal_entry(buf, start);
}

/// Appends a batch commit entry to `buf`.
pub fn encode_commit(buf: &mut BytesMut) {
    let start = buf.len();
    buf.put_bytes(0, ENTRY_PREFIX_LEN);
    buf.put_u8(KIND_COMMIT);
    seal_entry(buf, start);
}

/// What the 8-byte prefix of an entry says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryPrefix {
    /// Body length.
    pub body_len: usize,
    /// Stored CRC-32C.
    pub crc: u32,
}

impl EntryPrefix {
    /// Total size of the entry on disk.
    pub fn entry_len(&self) -> usize {
        ENTRY_PREFIX_LEN + self.body_len
    }
}

/// Reads an entry prefix from the start of `bytes` (which may hold more). Two fixed
/// integers read from a bounds-checked slice: the hot read path calls this for every
/// entry it steps over, so it takes no reference to a shared buffer.
pub fn decode_prefix(bytes: &[u8]) -> Result<EntryPrefix, FormatError> {
    let field = |at: usize, what| {
        bytes
            .get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_be_bytes)
            .ok_or(FormatError::Read(ReadError::Truncated {
                what,
                needed: ENTRY_PREFIX_LEN,
                available: bytes.len(),
            }))
    };
    Ok(EntryPrefix {
        body_len: field(0, "entry length")? as usize,
        crc: field(4, "entry CRC")?,
    })
}

/// Checks one whole entry from a borrowed slice: `entry` is exactly the prefix and the
/// body (its length taken from [`decode_prefix`]), and the CRC matches.
fn check_entry(entry: &[u8]) -> Result<EntryPrefix, FormatError> {
    let prefix = decode_prefix(entry)?;
    if entry.len() != prefix.entry_len() {
        return Err(FormatError::Read(ReadError::Truncated {
            what: "entry body",
            needed: prefix.entry_len(),
            available: entry.len(),
        }));
    }
    let len_field = (prefix.body_len as u32).to_be_bytes();
    let computed = entry_crc(len_field, &entry[ENTRY_PREFIX_LEN..]);
    if computed != prefix.crc {
        return Err(FormatError::Crc {
            stored: prefix.crc,
            computed,
        });
    }
    Ok(prefix)
}

/// Where a record's value starts in its entry (prefix, kind and fixed fields before it).
pub const RECORD_VALUE_AT: usize = ENTRY_PREFIX_LEN + RECORD_FIXED_LEN;

/// The fixed fields of a record entry; its value is `entry[RECORD_VALUE_AT..]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Compact partition id.
    pub partition: u32,
    /// Offset within the partition.
    pub offset: u64,
    /// Receive timestamp (ms since the Unix epoch).
    pub timestamp_ms: u64,
}

/// `N` bytes at `at` of `bytes`, if they are all there.
#[inline]
fn field<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// The fixed fields of a record entry whose length and CRC are checked and whose kind
/// byte is [`KIND_RECORD`]: read from the borrowed slice, with no reference taken on a
/// shared buffer.
fn record_header(entry: &[u8], body_len: usize) -> Result<RecordHeader, FormatError> {
    let bad = FormatError::BadLength(body_len);
    if body_len < RECORD_FIXED_LEN {
        return Err(bad);
    }
    let (Some(partition), Some(offset), Some(timestamp)) = (
        field(entry, ENTRY_PREFIX_LEN + 1),
        field(entry, ENTRY_PREFIX_LEN + 5),
        field(entry, ENTRY_PREFIX_LEN + 13),
    ) else {
        return Err(bad);
    };
    Ok(RecordHeader {
        partition: u32::from_be_bytes(partition),
        offset: u64::from_be_bytes(offset),
        timestamp_ms: u64::from_be_bytes(timestamp),
    })
}

/// The read path's decoder: checks one whole entry (`entry` exactly the prefix and the
/// body, as for [`decode_entry`]) from a borrowed slice and decodes a record's fixed
/// fields; `Ok(None)` for an entry of another kind (its fields are not decoded: see
/// [`decode_entry`]). Its value is
/// `entry[RECORD_VALUE_AT..]`, for the caller to slice out of its own buffer (one
/// reference count per record served).
#[inline]
pub fn decode_record(entry: &[u8]) -> Result<Option<RecordHeader>, FormatError> {
    let prefix = check_entry(entry)?;
    match entry.get(ENTRY_PREFIX_LEN) {
        Some(&KIND_RECORD) => record_header(entry, prefix.body_len).map(Some),
        Some(&(KIND_DECLARE | KIND_COMMIT | KIND_SKIP)) => Ok(None),
        Some(&kind) => Err(FormatError::UnknownKind(kind)),
        None => Err(FormatError::Read(ReadError::Truncated {
            what: "entry kind",
            needed: 1,
            available: 0,
        })),
    }
}

/// Decodes one whole entry: `entry` is exactly the prefix and the body (its length
/// taken from [`decode_prefix`]). Checks the CRC before looking at any field.
pub fn decode_entry(entry: Bytes) -> Result<Entry, FormatError> {
    let prefix = check_entry(&entry)?;
    let mut r = Reader::new(entry.slice(ENTRY_PREFIX_LEN..));
    match r.u8("entry kind")? {
        KIND_RECORD => {
            let h = record_header(&entry, prefix.body_len)?;
            Ok(Entry::Record(RecordEntry {
                partition: h.partition,
                offset: h.offset,
                timestamp_ms: h.timestamp_ms,
                value: entry.slice(RECORD_VALUE_AT..),
            }))
        }
        KIND_DECLARE => {
            let partition = r.u32("declaration partition")?;
            let next_offset = r.u64("declaration next offset")?;
            let producer = r.array::<16>("declaration producer")?;
            let topic_len = r.u8("declaration topic length")? as usize;
            let topic = r.take(topic_len, "declaration topic")?;
            r.finish("declaration")?;
            let topic = std::str::from_utf8(&topic)
                .map_err(|_| FormatError::TopicNotUtf8)?
                .to_owned();
            Ok(Entry::Declare {
                partition,
                next_offset,
                producer,
                topic,
            })
        }
        KIND_COMMIT => {
            r.finish("commit")?;
            Ok(Entry::Commit)
        }
        KIND_SKIP => {
            let partition = r.u32("skip partition")?;
            let offset = r.u64("skip offset")?;
            let count = r.u64("skip count")?;
            r.finish("skip")?;
            Ok(Entry::Skip {
                partition,
                offset,
                count,
            })
        }
        other => Err(FormatError::UnknownKind(other)),
    }
}

/// Shortest body of any entry (a commit).
pub const MIN_BODY_LEN: usize = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_bytes() {
        let h = SegmentHeader { base: 0x0102 };
        let bytes = h.encode();
        assert_eq!(
            &bytes[..16],
            &[
                0x44, 0x4B, 0x4C, 0x47, 0x00, 0x01, 0x00, 0x00, //
                0, 0, 0, 0, 0, 0, 0x01, 0x02
            ]
        );
        let crc = crc32c::crc32c(&bytes[..16]);
        assert_eq!(&bytes[16..], &crc.to_be_bytes());
        assert_eq!(SegmentHeader::decode(Bytes::copy_from_slice(&bytes)), Ok(h));
    }

    #[test]
    fn header_rejections() {
        let good = SegmentHeader { base: 7 }.encode();
        let mut bad = good;
        bad[0] = b'X';
        assert!(matches!(
            SegmentHeader::decode(Bytes::copy_from_slice(&bad)),
            Err(FormatError::BadMagic(_))
        ));
        let mut bad = good;
        bad[9] ^= 0x10;
        assert!(matches!(
            SegmentHeader::decode(Bytes::copy_from_slice(&bad)),
            Err(FormatError::Crc { .. })
        ));
        let mut bad = good;
        bad[5] = 0x02;
        let crc = crc32c::crc32c(&bad[..16]);
        bad[16..].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            SegmentHeader::decode(Bytes::copy_from_slice(&bad)),
            Err(FormatError::UnsupportedVersion(2))
        );
        assert!(matches!(
            SegmentHeader::decode(Bytes::copy_from_slice(&good[..19])),
            Err(FormatError::Read(ReadError::Truncated { .. }))
        ));
    }

    #[test]
    fn durable_point_bytes() {
        let d = DurablePoint { position: 0x0A0B };
        let bytes = d.encode();
        assert_eq!(
            &bytes[..16],
            &[
                0x44, 0x4B, 0x44, 0x50, 0x00, 0x01, 0x00, 0x00, //
                0, 0, 0, 0, 0, 0, 0x0A, 0x0B
            ]
        );
        assert_eq!(&bytes[16..], &crc32c::crc32c(&bytes[..16]).to_be_bytes());
        assert_eq!(DurablePoint::decode(Bytes::copy_from_slice(&bytes)), Ok(d));
        // A segment header is not a durable point, nor the reverse.
        let header = SegmentHeader { base: 0x0A0B }.encode();
        assert!(matches!(
            DurablePoint::decode(Bytes::copy_from_slice(&header)),
            Err(FormatError::BadMagic(_))
        ));
        assert!(matches!(
            SegmentHeader::decode(Bytes::copy_from_slice(&bytes)),
            Err(FormatError::BadMagic(_))
        ));
        let mut torn = bytes;
        torn[12] ^= 0x01;
        assert!(matches!(
            DurablePoint::decode(Bytes::copy_from_slice(&torn)),
            Err(FormatError::Crc { .. })
        ));
    }

    #[test]
    fn file_names() {
        assert_eq!(segment_file_name(20), "00000000000000000020.log");
        assert_eq!(
            parse_segment_file_name("00000000000000000020.log"),
            Some(20)
        );
        assert_eq!(parse_segment_file_name("0000000000000000020.log"), None);
        assert_eq!(parse_segment_file_name("0000000000000000002x.log"), None);
        assert_eq!(parse_segment_file_name("00000000000000000020.tmp"), None);
        assert_eq!(parse_segment_file_name("99999999999999999999.log"), None);
    }

    #[test]
    fn record_bytes() {
        let mut buf = BytesMut::new();
        encode_record(&mut buf, 0x0A0B0C0D, 0x11, 0x1_0000_0002, b"hi");
        let body: &[u8] = &[
            0x01, // kind
            0x0A, 0x0B, 0x0C, 0x0D, // partition
            0, 0, 0, 0, 0, 0, 0, 0x11, // offset
            0, 0, 0, 0x01, 0, 0, 0, 0x02, // timestamp
            b'h', b'i',
        ];
        assert_eq!(&buf[0..4], &[0, 0, 0, 23]);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&[0, 0, 0, 23]), body);
        assert_eq!(&buf[4..8], &crc.to_be_bytes());
        assert_eq!(&buf[8..], body);
        assert_eq!(buf.len(), record_size(2));
        assert_eq!(
            decode_record(&buf),
            Ok(Some(RecordHeader {
                partition: 0x0A0B0C0D,
                offset: 0x11,
                timestamp_ms: 0x1_0000_0002,
            }))
        );
        assert_eq!(&buf[RECORD_VALUE_AT..], b"hi");
        assert_eq!(
            decode_entry(buf.freeze()),
            Ok(Entry::Record(RecordEntry {
                partition: 0x0A0B0C0D,
                offset: 0x11,
                timestamp_ms: 0x1_0000_0002,
                value: Bytes::from_static(b"hi"),
            }))
        );
    }

    /// The table-driven CRC of the length field is the same CRC-32C as the crate's.
    #[test]
    fn len_field_crc_matches_crc32c() {
        for v in [
            0u32,
            1,
            22,
            23,
            0x80,
            0xFF,
            0x100,
            0x1234_5678,
            0x0400_0015,
            u32::MAX,
        ] {
            let b = v.to_be_bytes();
            assert_eq!(len_field_crc(b), crc32c::crc32c(&b), "{v:#x}");
        }
        for (i, step) in (0..=u32::MAX).step_by(65_521).enumerate().take(70_000) {
            let b = (step ^ (i as u32).rotate_left(13)).to_be_bytes();
            assert_eq!(len_field_crc(b), crc32c::crc32c(&b));
        }
    }

    /// CRC-32C check value from RFC 3720 (iSCSI), B.4: 32 bytes of zeros.
    #[test]
    fn crc_is_castagnoli() {
        assert_eq!(crc32c::crc32c(&[0u8; 32]), 0x8A9136AA);
    }

    #[test]
    fn declare_and_commit_bytes() {
        let mut buf = BytesMut::new();
        let uuid = [0xAB; 16];
        encode_declare(&mut buf, 3, 9, &uuid, "t");
        let mut body = vec![0x02, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 9];
        body.extend_from_slice(&uuid);
        body.extend_from_slice(&[1, b't']);
        assert_eq!(&buf[0..4], &(body.len() as u32).to_be_bytes());
        assert_eq!(&buf[8..], &body[..]);
        assert_eq!(
            decode_entry(buf.freeze()),
            Ok(Entry::Declare {
                partition: 3,
                next_offset: 9,
                producer: uuid,
                topic: "t".into()
            })
        );
        let mut buf = BytesMut::new();
        encode_commit(&mut buf);
        assert_eq!(buf.len(), COMMIT_SIZE);
        assert_eq!(&buf[0..4], &[0, 0, 0, 1]);
        assert_eq!(buf[8], 0x03);
        assert_eq!(decode_entry(buf.freeze()), Ok(Entry::Commit));
    }

    #[test]
    fn skip_bytes() {
        let mut buf = BytesMut::new();
        encode_skip(&mut buf, 3, 0x0102, 1);
        let body: &[u8] = &[
            0x04, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0, 0, 0, 1,
        ];
        assert_eq!(&buf[0..4], &(SKIP_LEN as u32).to_be_bytes());
        assert_eq!(&buf[8..], body);
        assert_eq!(decode_record(&buf), Ok(None));
        assert_eq!(
            decode_entry(buf.freeze()),
            Ok(Entry::Skip {
                partition: 3,
                offset: 0x0102,
                count: 1
            })
        );
    }

    #[test]
    fn entry_rejections() {
        let mut buf = BytesMut::new();
        encode_record(&mut buf, 1, 2, 3, b"value");
        let good = buf.freeze();
        // Every single flipped bit is caught by the CRC (or the length check).
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.to_vec();
                bad[i] ^= 1 << bit;
                assert!(decode_record(&bad).is_err(), "byte {i} bit {bit}");
                assert!(
                    decode_entry(Bytes::from(bad)).is_err(),
                    "byte {i} bit {bit}"
                );
            }
        }
        // A record whose body is shorter than its fixed fields, with a valid CRC.
        let mut short = BytesMut::new();
        short.put_bytes(0, ENTRY_PREFIX_LEN);
        short.put_u8(KIND_RECORD);
        short.put_u32(1);
        seal_entry(&mut short, 0);
        assert_eq!(decode_record(&short), Err(FormatError::BadLength(5)));
        assert!(decode_entry(short.freeze()).is_err());
        let mut unknown = BytesMut::new();
        unknown.put_bytes(0, ENTRY_PREFIX_LEN);
        unknown.put_u8(0x7F);
        seal_entry(&mut unknown, 0);
        assert_eq!(decode_record(&unknown), Err(FormatError::UnknownKind(0x7F)));
        assert_eq!(
            decode_entry(unknown.freeze()),
            Err(FormatError::UnknownKind(0x7F))
        );
        assert!(decode_record(&good[..good.len() - 1]).is_err());
        assert!(decode_entry(good.slice(..good.len() - 1)).is_err());
        // Declarations and commits are not records.
        let mut other = BytesMut::new();
        encode_commit(&mut other);
        assert_eq!(decode_record(&other), Ok(None));
        other.clear();
        encode_declare(&mut other, 1, 0, &[0; 16], "t");
        assert_eq!(decode_record(&other), Ok(None));
    }
}
