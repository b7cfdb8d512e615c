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
//! | 4 | 2 | format version: `0x0002` (written since records carry their metadata), `0x0001` (read) |
//! | 6 | 2 | reserved, zero |
//! | 8 | 8 | base position (must equal the file name) |
//! | 16 | 4 | CRC-32C of bytes 0..16 |
//!
//! The version says which record entries a segment may hold: version 1 segments hold
//! records of kind `0x01` only, version 2 segments of kind `0x05` only. A build that reads
//! only version 1 refuses a version 2 segment at open (its header), instead of reporting
//! every record in it as damage (an unknown kind) and serving a log with them missing; so
//! the engine never appends to a version 1 segment, it starts a new one. This build decodes
//! either record kind in either version (a segment whose header is damaged is read by its
//! entries alone).
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
//! | 8 | 1 | kind: `0x05` record, `0x02` partition declaration, `0x03` batch commit, `0x04` skip; `0x01` record of format version 1 |
//! | 9 | n-1 | kind-specific fields |
//!
//! Record (`0x05`, format version 2), `n = 21 + e + v`: the record's metadata in the byte
//! layout the wire uses too ([`dafka_proto::record`]: the timestamp, then the extras), with
//! the flags byte that starts the extras always present, so that the value's start is known:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 9 | 4 | partition id |
//! | 13 | 8 | offset within the partition |
//! | 21 | 8 | timestamp: microseconds since the Unix epoch, UTC, signed ([`RecordMeta::put_timestamp`]) |
//! | 29 | e | extras: `0x00` alone (`e = 1`) for a record with no key, no headers and a create time; else [`RecordMeta::put_extras`] (flags `0x01` key, `0x02` headers, `0x04` log-append time, then the key and the headers, each length-prefixed, so `e` is found by reading them) |
//! | 29+e | v | value |
//!
//! A value-only record with a create time costs 30 bytes beside its value (29 in version 1).
//! At most [`MAX_HEADERS`] headers; the value with the key and header bytes is at most
//! [`MAX_RECORD_BYTES_LIMIT`](crate::MAX_RECORD_BYTES_LIMIT), so a body is at most
//! [`MAX_RECORD_BODY_LEN`] (recovery takes a longer one for damage).
//!
//! Record of format version 1 (`0x01`), `n = 21 + v`, read and never written: a value with
//! the time the store received it, which reads as a record with no key and no headers and a
//! log-append timestamp of `receive time × 1000` microseconds.
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 9 | 4 | partition id |
//! | 13 | 8 | offset within the partition |
//! | 21 | 8 | receive timestamp, milliseconds since the Unix epoch (unsigned) |
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
//! kind) and skips it, which is what it stands for. Declarations, commits and skips are the
//! same in both versions.
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
//! | 4 | 2 | format version, `0x0001` (unchanged by segment format version 2) |
//! | 6 | 2 | reserved, zero |
//! | 8 | 8 | global log position below which every byte was synced |
//! | 16 | 4 | CRC-32C of bytes 0..16 |
//!
//! All integers are big-endian, as everywhere in dafka.

use bytes::{BufMut, Bytes, BytesMut};
use dafka_proto::record::{RecordMeta, TIMESTAMP_LEN};
use dafka_proto::{DecodeError, Limits};
use dafka_wire::{ReadError, Reader};
use thiserror::Error;

/// `"DKLG"`: the first four bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 4] = [0x44, 0x4B, 0x4C, 0x47];
/// The segment format version this crate writes: records carry their metadata (`0x05`).
pub const FORMAT_VERSION: u16 = 0x0002;
/// The first segment format version (records `0x01`: a value and a receive time), read.
pub const FORMAT_VERSION_1: u16 = 0x0001;
/// The durable point's format version (its layout did not change with segment version 2).
pub const DURABLE_POINT_VERSION: u16 = 0x0001;
/// Length of the segment header.
pub const HEADER_LEN: usize = 20;
/// Length of the prefix every entry starts with (length + CRC).
pub const ENTRY_PREFIX_LEN: usize = 8;
/// Entry kind: a record of format version 1 (read, never written).
pub const KIND_RECORD_V1: u8 = 0x01;
/// Entry kind: a partition declaration.
pub const KIND_DECLARE: u8 = 0x02;
/// Entry kind: the end of a group-commit batch.
pub const KIND_COMMIT: u8 = 0x03;
/// Entry kind: offsets skipped (given to the store, not kept).
pub const KIND_SKIP: u8 = 0x04;
/// Entry kind: a record with its metadata (format version 2).
pub const KIND_RECORD: u8 = 0x05;
/// Body length of a skip entry.
pub const SKIP_LEN: usize = 1 + 4 + 8 + 8;
/// Body length of a record without its extras and value (kind, partition, offset,
/// timestamp) and the one flags byte every record has.
pub const RECORD_FIXED_LEN: usize = 1 + 4 + 8 + TIMESTAMP_LEN + 1;
/// Body length of a format version 1 record without its value (kind, partition, offset,
/// receive timestamp).
pub const RECORD_V1_FIXED_LEN: usize = 1 + 4 + 8 + 8;
/// Where a record's extras start in its entry (their flags byte, `0x00` for none).
pub const RECORD_EXTRAS_AT: usize = ENTRY_PREFIX_LEN + 1 + 4 + 8 + TIMESTAMP_LEN;
/// Where the value of a record with no extras starts in its entry.
pub const RECORD_VALUE_AT: usize = RECORD_EXTRAS_AT + 1;
/// Where a format version 1 record's value starts in its entry.
pub const RECORD_V1_VALUE_AT: usize = ENTRY_PREFIX_LEN + RECORD_V1_FIXED_LEN;
/// Most headers a record may have on disk: the wire's default limit
/// (`dafka_proto::Limits::DEFAULT.max_headers`). Appends with more are refused, and the disk
/// is read with this limit, so every record written reads back.
pub const MAX_HEADERS: usize = 1024;
/// The extras' bytes beside the key and header bytes, at most: flags, key length, header
/// count, and a name length and a value length per header.
pub const MAX_EXTRAS_FRAMING: usize = 1 + 4 + 4 + MAX_HEADERS * 8;
/// The longest record body: the fixed fields, the extras' framing and
/// [`MAX_RECORD_BYTES_LIMIT`](crate::MAX_RECORD_BYTES_LIMIT) of value, key and header bytes.
pub const MAX_RECORD_BODY_LEN: usize =
    RECORD_FIXED_LEN - 1 + MAX_EXTRAS_FRAMING + crate::types::MAX_RECORD_BYTES_LIMIT;
/// Limits the extras are read with (only the header count applies to them).
const META_LIMITS: Limits = Limits::DEFAULT.with_max_headers(MAX_HEADERS);
/// Body length of a declaration without its topic.
pub const DECLARE_FIXED_LEN: usize = 1 + 4 + 8 + 16 + 1;
/// The longest topic a declaration holds.
pub const MAX_TOPIC_LEN: usize = 0xFF;
/// Size on disk of a record with a value of `value_len` bytes and no extras (a value-only
/// record with a create time: the smallest record of that value).
pub const fn record_size(value_len: usize) -> usize {
    ENTRY_PREFIX_LEN + RECORD_FIXED_LEN + value_len
}
/// Size on disk of a record with `meta` and a value of `value_len` bytes.
pub fn record_size_with(meta: &RecordMeta, value_len: usize) -> usize {
    record_size(value_len) + meta.extras_len().saturating_sub(1)
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
    /// A record's extras (key, headers, flags) do not decode, though their CRC matches.
    #[error("record metadata: {0}")]
    BadMeta(#[source] DecodeError),
}

/// The header at the start of every segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Global position of the segment's first byte (its header).
    pub base: u64,
    /// Format version: [`FORMAT_VERSION`] or [`FORMAT_VERSION_1`].
    pub version: u16,
}

impl SegmentHeader {
    /// The header of a new segment at `base`, of the version this crate writes.
    pub const fn new(base: u64) -> Self {
        SegmentHeader {
            base,
            version: FORMAT_VERSION,
        }
    }

    /// The 20 header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        encode_stamp(SEGMENT_MAGIC, self.version, self.base)
    }

    /// Decodes and checks a header (magic, CRC, a version this crate reads). `bytes` must be
    /// exactly [`HEADER_LEN`] long.
    pub fn decode(bytes: Bytes) -> Result<Self, FormatError> {
        let (version, base) = decode_stamp(bytes, SEGMENT_MAGIC)?;
        if version != FORMAT_VERSION && version != FORMAT_VERSION_1 {
            return Err(FormatError::UnsupportedVersion(version));
        }
        Ok(SegmentHeader { base, version })
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
        encode_stamp(DURABLE_POINT_MAGIC, DURABLE_POINT_VERSION, self.position)
    }

    /// Decodes and checks the file's bytes (magic, version, CRC).
    pub fn decode(bytes: Bytes) -> Result<Self, FormatError> {
        match decode_stamp(bytes, DURABLE_POINT_MAGIC)? {
            (DURABLE_POINT_VERSION, position) => Ok(DurablePoint { position }),
            (version, _) => Err(FormatError::UnsupportedVersion(version)),
        }
    }
}

/// A segment header and the durable point share one layout: magic (4), version (2),
/// reserved (2), one position (8), CRC-32C of the 16 bytes before it (4).
fn encode_stamp(magic: [u8; 4], version: u16, position: u64) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[0..4].copy_from_slice(&magic);
    out[4..6].copy_from_slice(&version.to_be_bytes());
    out[8..16].copy_from_slice(&position.to_be_bytes());
    let crc = crc32c::crc32c(&out[..16]);
    out[16..20].copy_from_slice(&crc.to_be_bytes());
    out
}

/// The version and the position of a checked stamp (magic and CRC; the caller checks the
/// version).
fn decode_stamp(bytes: Bytes, expected: [u8; 4]) -> Result<(u16, u64), FormatError> {
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
    Ok((version, position))
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

/// A record as decoded from disk; its value, key and headers are zero-copy slices of the
/// read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordEntry {
    /// Compact partition id (see [`Entry::Declare`]).
    pub partition: u32,
    /// Offset within the partition.
    pub offset: u64,
    /// Timestamp, key and headers (a format version 1 record: its receive time as a
    /// log-append time, no key, no headers).
    pub meta: RecordMeta,
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
pub(crate) fn seal_entry(buf: &mut BytesMut, start: usize) {
    let body_len = buf.len() - start - ENTRY_PREFIX_LEN;
    let len_field = (body_len as u32).to_be_bytes();
    let crc = entry_crc(len_field, &buf[start + ENTRY_PREFIX_LEN..]);
    buf[start..start + 4].copy_from_slice(&len_field);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
}

/// Appends a record entry (kind `0x05`) to `buf`. The caller checks the value, key and
/// header bytes against its size limit and the headers against [`MAX_HEADERS`] (the body
/// must be at most [`MAX_RECORD_BODY_LEN`], and header names UTF-8, to read back).
pub fn encode_record(
    buf: &mut BytesMut,
    partition: u32,
    offset: u64,
    meta: &RecordMeta,
    value: &[u8],
) {
    let start = buf.len();
    let extras = meta.extras_len();
    buf.reserve(record_size(value.len()) + extras.saturating_sub(1));
    // The prefix (filled in by `seal_entry`), kind, partition and offset in one copy: every
    // record appended comes here, and each `put_*` call costs a capacity check and a copy.
    let mut fixed = [0u8; ENTRY_PREFIX_LEN + 1 + 4 + 8];
    fixed[ENTRY_PREFIX_LEN] = KIND_RECORD;
    fixed[ENTRY_PREFIX_LEN + 1..ENTRY_PREFIX_LEN + 5].copy_from_slice(&partition.to_be_bytes());
    fixed[ENTRY_PREFIX_LEN + 5..].copy_from_slice(&offset.to_be_bytes());
    buf.put_slice(&fixed);
    meta.put_timestamp(buf);
    if extras == 0 {
        buf.put_u8(0);
    } else {
        meta.put_extras(buf);
    }
    buf.put_slice(value);
    seal_entry(buf, start);
}

/// Appends a record entry of format version 1 (kind `0x01`: a value and a receive time in
/// milliseconds). The engine no longer writes it: for tests and the fuzz target, which
/// build version 1 logs.
pub fn encode_record_v1(
    buf: &mut BytesMut,
    partition: u32,
    offset: u64,
    timestamp_ms: u64,
    value: &[u8],
) {
    let start = buf.len();
    buf.reserve(ENTRY_PREFIX_LEN + RECORD_V1_FIXED_LEN + value.len());
    buf.put_bytes(0, ENTRY_PREFIX_LEN);
    buf.put_u8(KIND_RECORD_V1);
    buf.put_u32(partition);
    buf.put_u64(offset);
    buf.put_u64(timestamp_ms);
    buf.put_slice(value);
    seal_entry(buf, start);
}

/// A format version 1 receive time (milliseconds) as a timestamp in microseconds; past
/// `i64::MAX` microseconds (the year 294,000) it saturates.
pub fn v1_timestamp(timestamp_ms: u64) -> i64 {
    i64::try_from(timestamp_ms).map_or(i64::MAX, |ms| ms.saturating_mul(1000))
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
pub(crate) fn check_entry(entry: &[u8]) -> Result<EntryPrefix, FormatError> {
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

/// How a record entry's metadata and value lie after its fixed fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordLayout {
    /// Format version 1 (`0x01`): a log-append (receive) time, no key, no headers; the value
    /// at [`RECORD_V1_VALUE_AT`].
    V1,
    /// Format version 2 (`0x05`) with no extras: a create time, no key, no headers; the value
    /// at [`RECORD_VALUE_AT`].
    Plain,
    /// Format version 2 with extras at [`RECORD_EXTRAS_AT`], the value after them: see
    /// [`record_parts`].
    Extras,
}

impl RecordLayout {
    /// Where the bytes that count against a read's byte budget start: the value of a record
    /// with no extras, the extras (then the value) of one with them.
    pub const fn payload_at(self) -> usize {
        match self {
            RecordLayout::V1 => RECORD_V1_VALUE_AT,
            RecordLayout::Plain => RECORD_VALUE_AT,
            RecordLayout::Extras => RECORD_EXTRAS_AT,
        }
    }
}

/// The fixed fields of a record entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Compact partition id.
    pub partition: u32,
    /// Offset within the partition.
    pub offset: u64,
    /// Timestamp, microseconds since the Unix epoch (a version 1 record's receive time,
    /// converted).
    pub timestamp: i64,
    /// Where its metadata and value are.
    pub layout: RecordLayout,
}

impl RecordHeader {
    /// The metadata of a record without extras (they are all in the fixed fields): `None`
    /// for one with extras ([`record_parts`] decodes them).
    #[inline]
    pub fn plain_meta(&self) -> Option<RecordMeta> {
        match self.layout {
            RecordLayout::V1 => Some(RecordMeta::log_append(self.timestamp)),
            RecordLayout::Plain => Some(RecordMeta::created(self.timestamp)),
            RecordLayout::Extras => None,
        }
    }
}

/// `N` bytes at `at` of `bytes`, if they are all there.
#[inline]
fn field<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// The fixed fields of a record entry whose length and CRC are checked and whose kind
/// byte is `kind` ([`KIND_RECORD`] or [`KIND_RECORD_V1`]): read from the borrowed slice,
/// with no reference taken on a shared buffer.
#[inline]
fn record_header(entry: &[u8], body_len: usize, kind: u8) -> Result<RecordHeader, FormatError> {
    let bad = FormatError::BadLength(body_len);
    let fixed = if kind == KIND_RECORD {
        RECORD_FIXED_LEN
    } else {
        RECORD_V1_FIXED_LEN
    };
    if body_len < fixed {
        return Err(bad);
    }
    let (Some(partition), Some(offset), Some(timestamp)) = (
        field(entry, ENTRY_PREFIX_LEN + 1),
        field(entry, ENTRY_PREFIX_LEN + 5),
        field(entry, ENTRY_PREFIX_LEN + 13),
    ) else {
        return Err(bad);
    };
    let (timestamp, layout) = if kind == KIND_RECORD {
        let layout = match entry.get(RECORD_EXTRAS_AT) {
            Some(0) => RecordLayout::Plain,
            Some(_) => RecordLayout::Extras,
            None => return Err(bad),
        };
        (i64::from_be_bytes(timestamp), layout)
    } else {
        (
            v1_timestamp(u64::from_be_bytes(timestamp)),
            RecordLayout::V1,
        )
    };
    Ok(RecordHeader {
        partition: u32::from_be_bytes(partition),
        offset: u64::from_be_bytes(offset),
        timestamp,
        layout,
    })
}

/// The read path's decoder: checks one whole entry (`entry` exactly the prefix and the
/// body, as for [`decode_entry`]) from a borrowed slice and decodes a record's fixed
/// fields; `Ok(None)` for an entry of another kind (its fields are not decoded: see
/// [`decode_entry`]). The metadata and value are for [`record_parts`] to take out of the
/// caller's own buffer (one reference count per record with no extras). Extras are not
/// decoded here: [`record_parts`] does, and fails as this would.
#[inline]
pub fn decode_record(entry: &[u8]) -> Result<Option<RecordHeader>, FormatError> {
    let prefix = check_entry(entry)?;
    match entry.get(ENTRY_PREFIX_LEN) {
        Some(&kind @ (KIND_RECORD | KIND_RECORD_V1)) => {
            record_header(entry, prefix.body_len, kind).map(Some)
        }
        Some(&(KIND_DECLARE | KIND_COMMIT | KIND_SKIP)) => Ok(None),
        Some(&kind) => Err(FormatError::UnknownKind(kind)),
        None => Err(FormatError::Read(ReadError::Truncated {
            what: "entry kind",
            needed: 1,
            available: 0,
        })),
    }
}

/// The metadata and value of the record entry at `buf[range]`, whose fixed fields
/// [`decode_record`] gave as `header`: the value (and key and headers) as slices of `buf`.
/// A record with no extras takes one reference count on `buf`.
#[inline]
pub fn record_parts(
    buf: &Bytes,
    range: std::ops::Range<usize>,
    header: &RecordHeader,
) -> Result<(RecordMeta, Bytes), FormatError> {
    let at = range.start + header.layout.payload_at();
    if at > range.end {
        return Err(FormatError::BadLength(
            range.len().saturating_sub(ENTRY_PREFIX_LEN),
        ));
    }
    match header.plain_meta() {
        Some(meta) => Ok((meta, buf.slice(at..range.end))),
        None => record_extras(buf, at..range.end, header.timestamp),
    }
}

/// The metadata and value of a record with extras: `buf[range]` from its extras to its end.
/// Out of line, so that the read path of records without extras stays small enough to
/// inline.
#[inline(never)]
fn record_extras(
    buf: &Bytes,
    range: std::ops::Range<usize>,
    timestamp: i64,
) -> Result<(RecordMeta, Bytes), FormatError> {
    RecordMeta::split_stored(buf, range, timestamp, &META_LIMITS).map_err(FormatError::BadMeta)
}

/// Decodes one whole entry: `entry` is exactly the prefix and the body (its length
/// taken from [`decode_prefix`]). Checks the CRC before looking at any field.
pub fn decode_entry(entry: Bytes) -> Result<Entry, FormatError> {
    let prefix = check_entry(&entry)?;
    let mut r = Reader::new(entry.slice(ENTRY_PREFIX_LEN..));
    match r.u8("entry kind")? {
        kind @ (KIND_RECORD | KIND_RECORD_V1) => {
            let h = record_header(&entry, prefix.body_len, kind)?;
            let (meta, value) = record_parts(&entry, 0..entry.len(), &h)?;
            Ok(Entry::Record(RecordEntry {
                partition: h.partition,
                offset: h.offset,
                meta,
                value,
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
    use dafka_proto::record::MetaParts;

    #[test]
    fn header_bytes() {
        let h = SegmentHeader::new(0x0102);
        let bytes = h.encode();
        assert_eq!(
            &bytes[..16],
            &[
                0x44, 0x4B, 0x4C, 0x47, 0x00, 0x02, 0x00, 0x00, //
                0, 0, 0, 0, 0, 0, 0x01, 0x02
            ]
        );
        let crc = crc32c::crc32c(&bytes[..16]);
        assert_eq!(&bytes[16..], &crc.to_be_bytes());
        assert_eq!(SegmentHeader::decode(Bytes::copy_from_slice(&bytes)), Ok(h));
        // A version 1 header: the second segment of `tests/data/golden-v1` starts with it.
        let v1: [u8; 20] = [
            0x44, 0x4B, 0x4C, 0x47, 0x00, 0x01, 0x00, 0x00, //
            0, 0, 0, 0, 0, 0, 0x05, 0xC4, 0x32, 0xBB, 0x9A, 0xD4,
        ];
        assert_eq!(&v1[16..], &crc32c::crc32c(&v1[..16]).to_be_bytes());
        assert_eq!(
            SegmentHeader::decode(Bytes::copy_from_slice(&v1)),
            Ok(SegmentHeader {
                base: 1476,
                version: FORMAT_VERSION_1
            })
        );
    }

    #[test]
    fn header_rejections() {
        let good = SegmentHeader::new(7).encode();
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
        for version in [0x0000, 0x0003, 0x0100] {
            let mut bad = good;
            bad[4..6].copy_from_slice(&u16::to_be_bytes(version));
            let crc = crc32c::crc32c(&bad[..16]);
            bad[16..].copy_from_slice(&crc.to_be_bytes());
            assert_eq!(
                SegmentHeader::decode(Bytes::copy_from_slice(&bad)),
                Err(FormatError::UnsupportedVersion(version))
            );
        }
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
        let header = SegmentHeader::new(0x0A0B).encode();
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
        // Its version stays 1 with segment format version 2.
        let mut v2 = bytes;
        v2[5] = 0x02;
        let crc = crc32c::crc32c(&v2[..16]);
        v2[16..].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            DurablePoint::decode(Bytes::copy_from_slice(&v2)),
            Err(FormatError::UnsupportedVersion(2))
        );
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

    /// The entry's prefix: length and CRC of `body`.
    fn check_prefix(entry: &[u8], body: &[u8]) {
        let len = (body.len() as u32).to_be_bytes();
        assert_eq!(&entry[0..4], &len);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&len), body);
        assert_eq!(&entry[4..8], &crc.to_be_bytes());
        assert_eq!(&entry[8..], body);
    }

    /// Decodes `entry` both ways (the read path's and recovery's) and checks they agree.
    fn decode_both(entry: &[u8]) -> RecordEntry {
        let bytes = Bytes::copy_from_slice(entry);
        let header = decode_record(entry).unwrap().unwrap();
        let (meta, value) = record_parts(&bytes, 0..bytes.len(), &header).unwrap();
        assert_eq!(header.timestamp, meta.timestamp);
        let Ok(Entry::Record(r)) = decode_entry(bytes) else {
            panic!("not a record");
        };
        assert_eq!((header.partition, header.offset), (r.partition, r.offset));
        assert_eq!((&meta, &value), (&r.meta, &r.value));
        r
    }

    #[test]
    fn record_bytes() {
        let mut buf = BytesMut::new();
        let meta = RecordMeta::created(0x1_0000_0002);
        encode_record(&mut buf, 0x0A0B0C0D, 0x11, &meta, b"hi");
        let body: &[u8] = &[
            0x05, // kind
            0x0A, 0x0B, 0x0C, 0x0D, // partition
            0, 0, 0, 0, 0, 0, 0, 0x11, // offset
            0, 0, 0, 0x01, 0, 0, 0, 0x02, // timestamp (us)
            0x00, // no extras
            b'h', b'i',
        ];
        check_prefix(&buf, body);
        assert_eq!(buf.len(), record_size(2));
        assert_eq!(buf.len(), record_size_with(&meta, 2));
        assert_eq!(
            decode_record(&buf),
            Ok(Some(RecordHeader {
                partition: 0x0A0B0C0D,
                offset: 0x11,
                timestamp: 0x1_0000_0002,
                layout: RecordLayout::Plain,
            }))
        );
        assert_eq!(&buf[RECORD_VALUE_AT..], b"hi");
        assert_eq!(
            decode_both(&buf),
            RecordEntry {
                partition: 0x0A0B0C0D,
                offset: 0x11,
                meta,
                value: Bytes::from_static(b"hi"),
            }
        );
    }

    #[test]
    fn record_with_extras_bytes() {
        use dafka_proto::record::Header;
        let meta = RecordMeta::from(MetaParts {
            key: Some(Bytes::from_static(b"k")),
            headers: Some(vec![
                Header::new("h", None),
                Header::new("e", Some(Bytes::new())),
            ]),
            ..MetaParts::log_append(-2)
        });
        let mut buf = BytesMut::new();
        encode_record(&mut buf, 7, 1, &meta, b"v");
        let body: &[u8] = &[
            0x05, // kind
            0, 0, 0, 7, // partition
            0, 0, 0, 0, 0, 0, 0, 1, // offset
            0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE, // timestamp -2 us
            0x07, // flags: key, headers, log-append time
            0, 0, 0, 1, b'k', // key
            0, 0, 0, 2, // two headers
            0, 0, 0, 1, b'h', 0xFF, 0xFF, 0xFF, 0xFF, // "h": null
            0, 0, 0, 1, b'e', 0, 0, 0, 0, // "e": empty
            b'v',
        ];
        check_prefix(&buf, body);
        assert_eq!(buf.len(), record_size_with(&meta, 1));
        let h = decode_record(&buf).unwrap().unwrap();
        assert_eq!((h.timestamp, h.layout), (-2, RecordLayout::Extras));
        let r = decode_both(&buf);
        assert_eq!((r.meta, &r.value[..]), (meta, &b"v"[..]));
        // A log-append time alone is extras too (the flags byte says it).
        buf.clear();
        encode_record(&mut buf, 7, 1, &RecordMeta::log_append(5), b"");
        assert_eq!(&buf[RECORD_EXTRAS_AT..], &[0x04]);
        assert_eq!(decode_both(&buf).meta, RecordMeta::log_append(5));
    }

    #[test]
    fn version_1_record_bytes() {
        let mut buf = BytesMut::new();
        encode_record_v1(&mut buf, 3, 0x11, 1_700_000_000_123, b"hi");
        let body: &[u8] = &[
            0x01, // kind: record of format version 1
            0, 0, 0, 3, // partition
            0, 0, 0, 0, 0, 0, 0, 0x11, // offset
            0x00, 0x00, 0x01, 0x8B, 0xCF, 0xE5, 0x68, 0x7B, // received, ms
            b'h', b'i',
        ];
        check_prefix(&buf, body);
        assert_eq!(&buf[RECORD_V1_VALUE_AT..], b"hi");
        let h = decode_record(&buf).unwrap().unwrap();
        assert_eq!(h.layout, RecordLayout::V1);
        let r = decode_both(&buf);
        assert_eq!(r.meta, RecordMeta::log_append(1_700_000_000_123_000));
        assert_eq!(&r.value[..], b"hi");
        assert_eq!(v1_timestamp(u64::MAX), i64::MAX);
        assert_eq!(v1_timestamp(0), 0);
    }

    /// Every byte of a record with extras set to every value, the CRC made to match: both
    /// decoders agree, and what decodes re-encodes to the same bytes (one encoding per
    /// record: what is served is what is on disk); the rest is an error, never a panic.
    #[test]
    fn any_byte_of_a_record_with_extras_under_a_good_crc() {
        use dafka_proto::record::Header;
        let meta = RecordMeta::from(MetaParts {
            key: Some(Bytes::from_static(b"ke")),
            headers: Some(vec![
                Header::new("h", None),
                Header::new("v", Some(Bytes::from_static(b"x"))),
            ]),
            ..MetaParts::log_append(7)
        });
        let mut buf = BytesMut::new();
        encode_record(&mut buf, 1, 2, &meta, b"val");
        let good = buf.to_vec();
        let mut decoded = 0;
        for i in ENTRY_PREFIX_LEN..good.len() {
            for v in 0..=255u8 {
                let mut e = good.clone();
                e[i] = v;
                let crc = entry_crc(<[u8; 4]>::try_from(&e[..4]).unwrap(), &e[8..]);
                e[4..8].copy_from_slice(&crc.to_be_bytes());
                let bytes = Bytes::from(e.clone());
                let read_path = decode_record(&e).and_then(|h| match h {
                    Some(h) => record_parts(&bytes, 0..bytes.len(), &h).map(|p| Some((h, p))),
                    None => Ok(None),
                });
                match (read_path, decode_entry(bytes)) {
                    (Ok(Some((h, (m, value)))), Ok(Entry::Record(r))) => {
                        assert_eq!(
                            (h.partition, h.offset, &m, &value),
                            (r.partition, r.offset, &r.meta, &r.value)
                        );
                        let mut again = BytesMut::new();
                        if e[ENTRY_PREFIX_LEN] == KIND_RECORD_V1 {
                            // The kind byte made it a version 1 record: its time read as ms.
                            let ms = (r.meta.timestamp / 1000) as u64;
                            encode_record_v1(&mut again, r.partition, r.offset, ms, &r.value);
                        } else {
                            encode_record(&mut again, r.partition, r.offset, &r.meta, &r.value);
                        }
                        assert_eq!(&again[..], &e[..], "byte {i} = {v:#04x}");
                        decoded += 1;
                    }
                    // Another kind: the read path does not decode it (recovery does).
                    (Ok(None), other) => assert!(!matches!(other, Ok(Entry::Record(_)))),
                    (Err(_), Err(_)) => {}
                    (a, b) => panic!("byte {i} = {v:#04x}: {a:?} / {b:?}"),
                }
            }
        }
        assert!(decoded > 1_000, "{decoded}");
    }

    /// Extras that do not decode, under a good CRC (another writer, or a bug): an error, as
    /// damage is, on both decoding paths.
    #[test]
    fn bad_extras_are_an_error() {
        let mut buf = BytesMut::new();
        encode_record(&mut buf, 1, 2, &RecordMeta::log_append(3), b"x");
        let mut bad = buf.to_vec();
        bad[RECORD_EXTRAS_AT] = 0x08; // unknown flag
        let body = bad[ENTRY_PREFIX_LEN..].to_vec();
        let crc = entry_crc(<[u8; 4]>::try_from(&bad[..4]).unwrap(), &body);
        bad[4..8].copy_from_slice(&crc.to_be_bytes());
        let h = decode_record(&bad).unwrap().unwrap();
        let bytes = Bytes::from(bad);
        assert!(matches!(
            record_parts(&bytes, 0..bytes.len(), &h),
            Err(FormatError::BadMeta(_))
        ));
        assert!(matches!(decode_entry(bytes), Err(FormatError::BadMeta(_))));
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
        encode_record(&mut buf, 1, 2, &RecordMeta::created(3), b"value");
        let good = buf.split().freeze();
        let meta = RecordMeta::from(MetaParts {
            key: Some(Bytes::from_static(b"key")),
            headers: Some(vec![dafka_proto::record::Header::new("h", None)]),
            ..MetaParts::created(3)
        });
        encode_record(&mut buf, 1, 2, &meta, b"value");
        let extras = buf.split().freeze();
        encode_record_v1(&mut buf, 1, 2, 3, b"value");
        let v1 = buf.split().freeze();
        // Every single flipped bit is caught by the CRC (or the length check).
        for good in [&good, &extras, &v1] {
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
        }
        // A record whose body is shorter than its fixed fields, with a valid CRC: of either
        // version, and a version 2 one without its flags byte.
        for (kind, len) in [
            (KIND_RECORD, 4),
            (KIND_RECORD_V1, 4),
            (KIND_RECORD, RECORD_FIXED_LEN - 1),
        ] {
            let mut short = BytesMut::new();
            short.put_bytes(0, ENTRY_PREFIX_LEN);
            short.put_u8(kind);
            short.put_bytes(0, len - 1);
            seal_entry(&mut short, 0);
            assert_eq!(decode_record(&short), Err(FormatError::BadLength(len)));
            assert!(decode_entry(short.freeze()).is_err());
        }
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
