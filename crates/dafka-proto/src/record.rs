//! What a record carries beside its value: a timestamp (always), and a key and headers (when
//! the producer gave them), as Kafka and Spark users know them.
//!
//! The same byte layout is used on the wire (the extension kinds META-RECORD and
//! DIRECT-META-RECORDS, see [`message`](crate::message)) and on disk (the store's record entry
//! of format version 2), so it is written and read here once.
//!
//! # Timestamp (8 bytes)
//!
//! Microseconds since the Unix epoch, UTC, as a big-endian two's-complement `i64`: the
//! producer's clock when the record was sent ([`TimestampType::CreateTime`]), or the time a
//! store appended a record that came without one, from a reference producer
//! ([`TimestampType::LogAppendTime`]). Every reader of a record, from every store, sees the
//! same timestamp: it is set once and travels with the record.
//!
//! # Extras
//!
//! A record with no key, no headers and a create time has no extras: its metadata costs the
//! 8 timestamp bytes and nothing more. Any other record has them:
//!
//! | size | field |
//! |---|---|
//! | 1 | flags: `0x01` key, `0x02` headers, `0x04` log-append time (others must be 0) |
//! | 4 + k | with `0x01`: key length `k` (`number-4`), then the key's bytes |
//! | 4 | with `0x02`: header count `h` (`number-4`) |
//! | per header | name length (`number-4`), name (UTF-8), then the value: `0xFFFFFFFF` for none (null), else its length (`number-4`) and bytes |
//!
//! A key of length 0 is an empty key, not an absent one (the `0x01` flag says which), and a
//! header list of length 0 is an empty list, not an absent one (`0x02`), as in Kafka.

use bytes::{BufMut, Bytes, BytesMut};
use dafka_wire::{Reader, SliceReader};

use crate::error::{DecodeError, LimitError, MalformedError};
use crate::message::Limits;

/// Flag: the record has a key.
pub const FLAG_KEY: u8 = 0x01;
/// Flag: the record has a header list.
pub const FLAG_HEADERS: u8 = 0x02;
/// Flag: the timestamp is the time a store appended the record, not the producer's.
pub const FLAG_LOG_APPEND_TIME: u8 = 0x04;
/// Every flag this version knows.
const FLAGS_KNOWN: u8 = FLAG_KEY | FLAG_HEADERS | FLAG_LOG_APPEND_TIME;
/// A header value length that stands for no value (null).
const NULL_VALUE: u32 = 0xFFFF_FFFF;
/// The block [`RecordMeta::encode_in`] allocates for the extras of records encoded one after
/// the other.
const EXTRAS_BLOCK: usize = 16 * 1024;
/// Length of the timestamp field.
pub const TIMESTAMP_LEN: usize = 8;
/// The fewest bytes a header takes in the extras (two lengths), so a count can be checked
/// against what is left before a list is reserved.
const MIN_HEADER_LEN: usize = 8;

/// Whose clock a record's timestamp is, with the numbers Spark's Kafka source gives its
/// `timestampType` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TimestampType {
    /// `0`: the producer's clock when the record was sent (or the time the caller gave).
    #[default]
    CreateTime,
    /// `1`: the time a store appended a record that came without a timestamp (from a
    /// reference producer), or a consumer received one live from such a producer.
    LogAppendTime,
}

impl TimestampType {
    /// The number in Spark's and Kafka's `timestampType` (`0` create, `1` log append).
    pub const fn code(self) -> i32 {
        match self {
            TimestampType::CreateTime => 0,
            TimestampType::LogAppendTime => 1,
        }
    }
}

/// One record header: a UTF-8 name and an optional value (Kafka allows a null one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Header {
    /// The name. UTF-8: checked when decoded from a peer or the disk, and by the callers
    /// that build one (from a `&str`).
    pub name: Bytes,
    /// The value; `None` is a null value, distinct from an empty one.
    pub value: Option<Bytes>,
}

impl Header {
    /// A header from a name and a value.
    pub fn new(name: &str, value: Option<Bytes>) -> Self {
        Header {
            name: Bytes::copy_from_slice(name.as_bytes()),
            value,
        }
    }

    /// A header whose name is known when the program is built: the name is neither copied
    /// nor reference-counted, so cloning the header (a record built once and sent many
    /// times, or one header list shared by many records) costs no allocation and no atomic
    /// operation for it.
    pub const fn from_static(name: &'static str, value: Option<Bytes>) -> Self {
        Header {
            name: Bytes::from_static(name.as_bytes()),
            value,
        }
    }

    /// The name as text (our decoders only let UTF-8 through; lossy for a hand-built one).
    pub fn name_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.name)
    }
}

/// The bytes of a key, header names and header values: what, beside the value, counts against
/// a record size limit.
pub fn payload_len(key: Option<&[u8]>, headers: Option<&[Header]>) -> usize {
    payload_of(key, headers.map(refs))
}

/// Whether `name` may name a header: UTF-8 (mostly short ASCII, checked without the general
/// decoder first). What every encoder's caller and every decoder checks.
#[inline]
pub fn is_header_name(name: &[u8]) -> bool {
    name.is_ascii() || std::str::from_utf8(name).is_ok()
}

/// A header as a record holds it: borrowed from its encoded extras.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRef<'a> {
    /// The name's bytes (UTF-8: checked when the record was built or decoded).
    pub name: &'a [u8],
    /// The value; `None` is a null value.
    pub value: Option<&'a [u8]>,
}

/// A record's metadata: its timestamp, and the key and headers when it has them.
///
/// The key, the headers and the timestamp type are held as their encoded [extras](self) (one
/// shared buffer, checked once when built or decoded), the form in which every stage passes
/// them on: a store writes them to disk and serves them back as they came, a consumer reads
/// them straight into its Arrow columns. A record with none holds no buffer at all. Two
/// metadata are equal when their timestamps and extras are (the encoding is canonical).
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct RecordMeta {
    /// Microseconds since the Unix epoch, UTC.
    pub timestamp: i64,
    /// The encoded extras (flags first, never `0x00`), or empty when the record has none.
    extras: Bytes,
}

/// The parts of a [`RecordMeta`], for building one field by field and for taking one apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct MetaParts {
    /// Microseconds since the Unix epoch, UTC.
    pub timestamp: i64,
    /// Whose clock `timestamp` is.
    pub timestamp_type: TimestampType,
    /// The key: `None` when the record has none, `Some` of an empty `Bytes` for an empty key.
    pub key: Option<Bytes>,
    /// The headers: `None` when the record has none, `Some` of an empty list for an empty one.
    pub headers: Option<Vec<Header>>,
}

impl MetaParts {
    /// A record created at `timestamp`, with no key and no headers.
    pub const fn created(timestamp: i64) -> Self {
        MetaParts {
            timestamp,
            timestamp_type: TimestampType::CreateTime,
            key: None,
            headers: None,
        }
    }

    /// A record stamped when it was appended or received, with no key and no headers.
    pub const fn log_append(timestamp: i64) -> Self {
        MetaParts {
            timestamp,
            timestamp_type: TimestampType::LogAppendTime,
            key: None,
            headers: None,
        }
    }
}

impl From<MetaParts> for RecordMeta {
    fn from(p: MetaParts) -> Self {
        RecordMeta::new(
            p.timestamp,
            p.timestamp_type,
            p.key.as_deref(),
            p.headers.as_deref(),
        )
    }
}

impl std::fmt::Debug for RecordMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("RecordMeta");
        d.field("timestamp", &self.timestamp)
            .field("timestamp_type", &self.timestamp_type());
        if let Some(key) = self.key() {
            d.field("key", &Bytes::copy_from_slice(key));
        }
        if let Some(headers) = self.headers() {
            let list: Vec<_> = headers
                .map(|h| {
                    (
                        String::from_utf8_lossy(h.name),
                        h.value.map(Bytes::copy_from_slice),
                    )
                })
                .collect();
            d.field("headers", &list);
        }
        d.finish()
    }
}

/// The extras of a record with a log-append time and nothing else.
const LOG_APPEND_ONLY: &[u8] = &[FLAG_LOG_APPEND_TIME];

impl RecordMeta {
    /// A record created at `timestamp` (microseconds since the epoch, UTC), with no key and
    /// no headers.
    pub const fn created(timestamp: i64) -> Self {
        RecordMeta {
            timestamp,
            extras: Bytes::new(),
        }
    }

    /// A record that came without a timestamp, stamped when it was appended or received.
    pub const fn log_append(timestamp: i64) -> Self {
        RecordMeta {
            timestamp,
            extras: Bytes::from_static(LOG_APPEND_ONLY),
        }
    }

    /// A record's metadata from its parts, encoded into a buffer of its own (of the extras'
    /// size). Header names are UTF-8 by construction ([`Header::new`] takes a `&str`).
    pub fn new(
        timestamp: i64,
        timestamp_type: TimestampType,
        key: Option<&[u8]>,
        headers: Option<&[Header]>,
    ) -> Self {
        let headers = headers.map(refs);
        Self::encode(
            &mut BytesMut::new(),
            0,
            timestamp,
            timestamp_type,
            key,
            headers,
        )
    }

    /// As [`new`](Self::new), encoding the extras at the end of `buf` and splitting them off:
    /// many records' metadata built one after the other share `buf`'s allocations (blocks of
    /// 16 KiB, or one record's extras when larger).
    pub fn encode_in(
        buf: &mut BytesMut,
        timestamp: i64,
        timestamp_type: TimestampType,
        key: Option<&[u8]>,
        headers: Option<&[Header]>,
    ) -> Self {
        let headers = headers.map(refs);
        Self::encode(buf, EXTRAS_BLOCK, timestamp, timestamp_type, key, headers)
    }

    /// As [`encode_in`](Self::encode_in), the headers given as borrowed [`HeaderRef`]s (from
    /// wherever the caller holds them: Arrow arrays, say). The names must be UTF-8
    /// ([`is_header_name`]): callers check them (a reader refuses a record whose names are
    /// not).
    pub fn encode_refs_in<'h>(
        buf: &mut BytesMut,
        timestamp: i64,
        timestamp_type: TimestampType,
        key: Option<&[u8]>,
        headers: Option<impl ExactSizeIterator<Item = HeaderRef<'h>> + Clone>,
    ) -> Self {
        Self::encode(buf, EXTRAS_BLOCK, timestamp, timestamp_type, key, headers)
    }

    /// Encodes the extras at the end of `buf`, reserving at least `block` bytes when it has
    /// no room left for them (0: exactly what they take), and splits them off.
    fn encode<'h>(
        buf: &mut BytesMut,
        block: usize,
        timestamp: i64,
        timestamp_type: TimestampType,
        key: Option<&[u8]>,
        headers: Option<impl ExactSizeIterator<Item = HeaderRef<'h>> + Clone>,
    ) -> Self {
        let flags = flags_of(timestamp_type, key.is_some(), headers.is_some());
        let extras = match flags {
            0 => Bytes::new(),
            FLAG_LOG_APPEND_TIME => Bytes::from_static(LOG_APPEND_ONLY),
            _ => {
                let count = headers.as_ref().map(ExactSizeIterator::len);
                let need = framing(flags, count) + payload_of(key, headers.clone());
                if buf.capacity() - buf.len() < need {
                    // A new block for this record and the next ones (once split off, a block
                    // is shared and never grown in place).
                    buf.reserve(need.max(block));
                }
                put_extras_of(buf, flags, key, headers);
                buf.split().freeze()
            }
        };
        RecordMeta { timestamp, extras }
    }

    /// The parts (key and headers copied out of the extras).
    pub fn parts(&self) -> MetaParts {
        MetaParts {
            timestamp: self.timestamp,
            timestamp_type: self.timestamp_type(),
            key: self.key().map(|k| self.extras.slice_ref(k)),
            headers: self.headers_vec(),
        }
    }

    /// The flags byte of the extras; `0` when the record needs none.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.extras.first().copied().unwrap_or(0)
    }

    /// Whose clock `timestamp` is.
    #[inline]
    pub fn timestamp_type(&self) -> TimestampType {
        if self.flags() & FLAG_LOG_APPEND_TIME != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Whether the record needs extras (a key, headers or a log-append time).
    #[inline]
    pub fn has_extras(&self) -> bool {
        !self.extras.is_empty()
    }

    /// Where the header count starts in the extras (after the flags and the key).
    #[inline]
    fn after_key(&self) -> usize {
        if self.flags() & FLAG_KEY != 0 {
            5 + be_u32(&self.extras[1..5]) as usize
        } else {
            1
        }
    }

    /// The key: `None` when the record has none.
    #[inline]
    pub fn key(&self) -> Option<&[u8]> {
        (self.flags() & FLAG_KEY != 0).then(|| &self.extras[5..self.after_key()])
    }

    /// How many headers the record has (`None` when it has no list).
    #[inline]
    pub fn header_count(&self) -> Option<usize> {
        (self.flags() & FLAG_HEADERS != 0).then(|| {
            let at = self.after_key();
            be_u32(&self.extras[at..at + 4]) as usize
        })
    }

    /// The headers in order, borrowed from the extras: `None` when the record has no list.
    pub fn headers(&self) -> Option<Headers<'_>> {
        let count = self.header_count()?;
        let at = self.after_key() + 4;
        Some(Headers {
            rest: &self.extras[at..],
            left: count,
        })
    }

    /// The headers, copied into a list of their own.
    fn headers_vec(&self) -> Option<Vec<Header>> {
        self.headers().map(|hs| {
            hs.map(|h| Header {
                name: self.extras.slice_ref(h.name),
                value: h.value.map(|v| self.extras.slice_ref(v)),
            })
            .collect()
        })
    }

    /// The bytes of the key, header names and header values: what, beside the value, counts
    /// against a record size limit. Found from the extras' length without walking them.
    #[inline]
    pub fn payload_len(&self) -> usize {
        match self.flags() {
            0 => 0,
            flags => self.extras.len() - framing(flags, self.header_count()),
        }
    }

    /// Length of the extras (0 when [`has_extras`](Self::has_extras) is false).
    #[inline]
    pub fn extras_len(&self) -> usize {
        self.extras.len()
    }

    /// Appends the timestamp (8 bytes).
    #[inline]
    pub fn put_timestamp(&self, out: &mut BytesMut) {
        out.put_i64(self.timestamp);
    }

    /// Appends the extras (nothing when the record needs none).
    #[inline]
    pub fn put_extras(&self, out: &mut BytesMut) {
        out.put_slice(&self.extras);
    }

    /// Reads a timestamp (8 bytes).
    #[inline]
    pub fn read_timestamp(r: &mut Reader) -> Result<i64, DecodeError> {
        Ok(r.u64("timestamp")? as i64)
    }

    /// Reads the extras of a record stamped `timestamp`, checked whole (flags, lengths, UTF-8
    /// names, `limits.max_headers`) and then kept as one slice of `r`'s buffer (no copy).
    /// Flags `0x00` (a record without extras in a run where others have some) read as a
    /// create-time record with neither key nor headers.
    pub fn read_extras(
        r: &mut Reader,
        timestamp: i64,
        limits: &Limits,
    ) -> Result<RecordMeta, DecodeError> {
        let (flags, extras) = r.walked(|s| check_extras(s, limits, true))?;
        Ok(Self::with_extras(timestamp, flags, || extras))
    }

    /// A record's metadata from its checked extras: none kept for flags `0x00`.
    #[inline]
    fn with_extras(timestamp: i64, flags: u8, extras: impl FnOnce() -> Bytes) -> RecordMeta {
        RecordMeta {
            timestamp,
            extras: if flags == 0 { Bytes::new() } else { extras() },
        }
    }

    /// The metadata and the rest (the value) of `buf[range]`, which starts with extras whose
    /// header names were checked as UTF-8 when they were written and that are known intact
    /// since (a store's own segment entry, its CRC checked): every length is still checked
    /// against what is there, the names are not decoded again (a reader of what is served
    /// checks them). The extras are walked borrowed and `buf` sliced twice: no reader and
    /// no shared handle made per field. A range outside `buf` reads as empty (an error).
    pub fn split_stored(
        buf: &Bytes,
        range: std::ops::Range<usize>,
        timestamp: i64,
        limits: &Limits,
    ) -> Result<(RecordMeta, Bytes), DecodeError> {
        let bytes = buf.get(range.clone()).unwrap_or_default();
        let mut s = SliceReader::new(bytes);
        let flags = check_extras(&mut s, limits, false)?;
        let at = range.start + (bytes.len() - s.remaining());
        let meta = Self::with_extras(timestamp, flags, || buf.slice(range.start..at));
        Ok((meta, buf.slice(at..range.end)))
    }
}

/// The headers of a [`RecordMeta`], borrowed, in order.
#[derive(Debug, Clone)]
pub struct Headers<'a> {
    rest: &'a [u8],
    left: usize,
}

impl<'a> Iterator for Headers<'a> {
    type Item = HeaderRef<'a>;

    fn next(&mut self) -> Option<HeaderRef<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Checked when the extras were built or read: the lengths fit (a `None` below is
        // unreachable, and ends the list rather than panics). Sliced directly, with no reader
        // and no error built per field: this runs once per header of every record a consumer
        // turns into Arrow.
        let (len, rest) = split_u32(self.rest)?;
        let (name, rest) = rest.split_at_checked(len as usize)?;
        let (len, rest) = split_u32(rest)?;
        let (value, rest) = if len == NULL_VALUE {
            (None, rest)
        } else {
            let (value, rest) = rest.split_at_checked(len as usize)?;
            (Some(value), rest)
        };
        self.rest = rest;
        Some(HeaderRef { name, value })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Headers<'_> {}

/// A big-endian `u32` off the front of `b`, and the rest.
#[inline]
fn split_u32(b: &[u8]) -> Option<(u32, &[u8])> {
    let (n, rest) = b.split_first_chunk::<4>()?;
    Some((u32::from_be_bytes(*n), rest))
}

#[inline]
fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn flags_of(timestamp_type: TimestampType, key: bool, headers: bool) -> u8 {
    let mut flags = 0;
    if key {
        flags |= FLAG_KEY;
    }
    if headers {
        flags |= FLAG_HEADERS;
    }
    if timestamp_type == TimestampType::LogAppendTime {
        flags |= FLAG_LOG_APPEND_TIME;
    }
    flags
}

/// What extras with `flags` and `header_count` headers take beside the key, names and values:
/// the flags byte, the key's length, the header count and two lengths per header.
fn framing(flags: u8, header_count: Option<usize>) -> usize {
    let key = if flags & FLAG_KEY != 0 { 4 } else { 0 };
    1 + key + header_count.map_or(0, |n| 4 + n * MIN_HEADER_LEN)
}

/// The bytes of `key` and of the headers' names and values.
fn payload_of<'h>(
    key: Option<&[u8]>,
    headers: Option<impl Iterator<Item = HeaderRef<'h>>>,
) -> usize {
    let headers = headers.map_or(0, |hs| {
        hs.map(|h| h.name.len() + h.value.map_or(0, <[u8]>::len))
            .sum()
    });
    key.map_or(0, <[u8]>::len) + headers
}

/// `headers` borrowed as [`HeaderRef`]s.
fn refs(headers: &[Header]) -> impl ExactSizeIterator<Item = HeaderRef<'_>> + Clone {
    headers.iter().map(|h| HeaderRef {
        name: &h.name,
        value: h.value.as_deref(),
    })
}

/// Writes extras. Lengths over `u32::MAX` cannot be encoded: callers check
/// [`payload_len`] against their record limit first, which is far below it.
fn put_extras_of<'h>(
    out: &mut BytesMut,
    flags: u8,
    key: Option<&[u8]>,
    headers: Option<impl ExactSizeIterator<Item = HeaderRef<'h>>>,
) {
    out.put_u8(flags);
    if let Some(key) = key {
        out.put_u32(key.len() as u32);
        out.put_slice(key);
    }
    if let Some(headers) = headers {
        out.put_u32(headers.len() as u32);
        for h in headers {
            out.put_u32(h.name.len() as u32);
            out.put_slice(h.name);
            match h.value {
                Some(v) => {
                    out.put_u32(v.len() as u32);
                    out.put_slice(v);
                }
                None => out.put_u32(NULL_VALUE),
            }
        }
    }
}

/// Walks one record's extras, checking them (the names' UTF-8 with `check_names`); returns
/// the flags.
#[inline]
fn check_extras(
    s: &mut SliceReader<'_>,
    limits: &Limits,
    check_names: bool,
) -> Result<u8, DecodeError> {
    let flags = s.u8("record flags")?;
    if flags & !FLAGS_KNOWN != 0 {
        return Err(MalformedError::RecordFlags { flags }.into());
    }
    if flags & FLAG_KEY != 0 {
        s.long_bytes("key")?;
    }
    if flags & FLAG_HEADERS != 0 {
        let count = s.u32("header count")?;
        if usize::try_from(count).map_or(true, |n| n > limits.max_headers) {
            return Err(LimitError::TooManyHeaders {
                count,
                max: limits.max_headers,
            }
            .into());
        }
        for _ in 0..count {
            let name = s.long_bytes("header name")?;
            if check_names && !is_header_name(name) {
                return Err(MalformedError::HeaderName.into());
            }
            let len = s.u32("header value length")?;
            if len != NULL_VALUE {
                s.take(usize::try_from(len).unwrap_or(usize::MAX), "header value")?;
            }
        }
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(meta: &RecordMeta) -> RecordMeta {
        let mut out = BytesMut::new();
        meta.put_timestamp(&mut out);
        meta.put_extras(&mut out);
        assert_eq!(out.len(), TIMESTAMP_LEN + meta.extras_len());
        let mut r = Reader::new(out.freeze());
        let t = RecordMeta::read_timestamp(&mut r).unwrap();
        let back = if r.remaining() == 0 {
            RecordMeta::created(t)
        } else {
            RecordMeta::read_extras(&mut r, t, &Limits::DEFAULT).unwrap()
        };
        r.finish("meta").unwrap();
        back
    }

    #[test]
    fn a_value_only_record_costs_the_timestamp_and_nothing_more() {
        let meta = RecordMeta::created(1_764_000_000_123_456);
        assert!(!meta.has_extras());
        assert_eq!(meta.extras_len(), 0);
        assert_eq!(round_trip(&meta), meta);
    }

    #[test]
    fn empty_and_absent_keys_and_headers_stay_apart() {
        let cases = [
            RecordMeta::from(MetaParts {
                key: Some(Bytes::new()),
                ..MetaParts::created(-5)
            }),
            RecordMeta::from(MetaParts {
                headers: Some(vec![]),
                ..MetaParts::created(0)
            }),
            RecordMeta::from(MetaParts {
                key: Some(Bytes::from_static(b"user-42")),
                headers: Some(vec![
                    Header::new("trace-id", Some(Bytes::from_static(b"abc"))),
                    Header::new("", Some(Bytes::new())),
                    Header::new("schema", None),
                ]),
                ..MetaParts::log_append(i64::MAX)
            }),
            RecordMeta::log_append(i64::MIN),
        ];
        for meta in cases {
            assert_eq!(round_trip(&meta), meta);
        }
    }

    #[test]
    fn a_static_header_is_the_same_header_as_a_copied_one() {
        let value = Some(Bytes::from_static(b"v"));
        let copied = Header::new("trace-id", value.clone());
        let fixed = Header::from_static("trace-id", value);
        assert_eq!(fixed, copied);
        let meta = |h: &Header| {
            RecordMeta::new(
                0,
                TimestampType::CreateTime,
                None,
                Some(std::slice::from_ref(h)),
            )
        };
        assert_eq!(meta(&fixed), meta(&copied), "the same bytes on the wire");
    }

    #[test]
    fn the_byte_layout_is_the_documented_one() {
        let meta = RecordMeta::from(MetaParts {
            key: Some(Bytes::from_static(b"k")),
            headers: Some(vec![Header::new("h", None)]),
            ..MetaParts::created(0x0102_0304_0506_0708)
        });
        let mut out = BytesMut::new();
        meta.put_timestamp(&mut out);
        meta.put_extras(&mut out);
        assert_eq!(
            &out[..],
            &[
                0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // timestamp
                0x03, // flags: key, headers
                0x00, 0x00, 0x00, 0x01, b'k', // key
                0x00, 0x00, 0x00, 0x01, // one header
                0x00, 0x00, 0x00, 0x01, b'h', 0xFF, 0xFF, 0xFF, 0xFF, // "h" = null
            ][..]
        );
    }

    #[test]
    fn bad_extras_are_malformed_or_over_a_limit() {
        let read = |bytes: &'static [u8], limits: Limits| {
            RecordMeta::read_extras(&mut Reader::new(Bytes::from_static(bytes)), 0, &limits)
        };
        // Flags 0: no extras after all. An unknown flag is malformed.
        assert_eq!(read(b"\x00", Limits::DEFAULT), Ok(RecordMeta::created(0)));
        assert!(matches!(
            read(b"\x08", Limits::DEFAULT),
            Err(DecodeError::Malformed(MalformedError::RecordFlags {
                flags: 8
            }))
        ));
        // A key longer than the bytes left.
        assert!(matches!(
            read(b"\x01\x00\x00\x00\x09k", Limits::DEFAULT),
            Err(DecodeError::Malformed(MalformedError::Wire(_)))
        ));
        // A header name that is not UTF-8.
        assert!(matches!(
            read(
                b"\x02\x00\x00\x00\x01\x00\x00\x00\x01\xFF\xFF\xFF\xFF\xFF",
                Limits::DEFAULT
            ),
            Err(DecodeError::Malformed(MalformedError::HeaderName))
        ));
        // Four billion headers announced: refused before any list is reserved.
        assert!(matches!(
            read(b"\x02\xFF\xFF\xFF\xF0", Limits::DEFAULT),
            Err(DecodeError::Limit(LimitError::TooManyHeaders { .. }))
        ));
        // A count under the limit but over what the bytes hold: truncated, no huge reserve.
        assert!(matches!(
            read(
                b"\x02\x00\x00\x00\x10",
                Limits::DEFAULT.with_max_headers(16)
            ),
            Err(DecodeError::Malformed(MalformedError::Wire(_)))
        ));
    }

    #[test]
    fn key_headers_and_sizes_read_from_the_extras_as_they_were_given() {
        let headers = vec![
            Header::new("trace-id", Some(Bytes::from_static(b"abc"))),
            Header::new("", Some(Bytes::new())),
            Header::new("schema", None),
        ];
        let parts = MetaParts {
            key: Some(Bytes::from_static(b"user-42")),
            headers: Some(headers.clone()),
            ..MetaParts::created(9)
        };
        let meta = RecordMeta::from(parts.clone());
        assert_eq!(meta.key(), Some(&b"user-42"[..]));
        assert_eq!(meta.header_count(), Some(3));
        let read: Vec<HeaderRef<'_>> = meta.headers().unwrap().collect();
        assert_eq!(
            read[0],
            HeaderRef {
                name: b"trace-id",
                value: Some(b"abc")
            }
        );
        assert_eq!(
            read[1],
            HeaderRef {
                name: b"",
                value: Some(b"")
            }
        );
        assert_eq!(
            read[2],
            HeaderRef {
                name: b"schema",
                value: None
            }
        );
        assert_eq!(meta.parts(), parts);
        assert_eq!(
            meta.payload_len(),
            payload_len(Some(b"user-42"), Some(&headers))
        );
        assert_eq!(meta.payload_len(), 7 + 8 + 3 + 6);
        // No key, no list: none read, nothing counted.
        let plain = RecordMeta::created(1);
        assert_eq!(
            (plain.key(), plain.header_count(), plain.payload_len()),
            (None, None, 0)
        );
        assert!(plain.headers().is_none());
        // Built one after another in one buffer: each holds its own extras.
        let mut buf = BytesMut::new();
        let a = RecordMeta::encode_in(&mut buf, 1, TimestampType::CreateTime, Some(b"a"), None);
        let b = RecordMeta::encode_in(
            &mut buf,
            2,
            TimestampType::CreateTime,
            Some(b"bb"),
            Some(&[]),
        );
        assert_eq!(
            (a.key(), b.key(), b.header_count()),
            (Some(&b"a"[..]), Some(&b"bb"[..]), Some(0))
        );
        assert_eq!(
            b,
            RecordMeta::new(2, TimestampType::CreateTime, Some(b"bb"), Some(&[]))
        );
    }

    #[test]
    fn stored_extras_skip_the_names_utf8_and_nothing_else() {
        let read = |bytes: &'static [u8], stored: bool| {
            if stored {
                let buf = Bytes::from_static(bytes);
                let (meta, rest) =
                    RecordMeta::split_stored(&buf, 0..buf.len(), 0, &Limits::DEFAULT)?;
                assert!(rest.is_empty());
                Ok(meta)
            } else {
                let mut r = Reader::new(Bytes::from_static(bytes));
                RecordMeta::read_extras(&mut r, 0, &Limits::DEFAULT)
            }
        };
        let bad_name = b"\x02\x00\x00\x00\x01\x00\x00\x00\x01\xFF\xFF\xFF\xFF\xFF";
        assert!(read(bad_name, false).is_err());
        assert_eq!(read(bad_name, true).unwrap().header_count(), Some(1));
        // Lengths, flags and limits are checked all the same.
        for bad in [
            &b"\x01\x00\x00\x00\x09k"[..],
            b"\x08",
            b"\x02\xFF\xFF\xFF\xF0",
        ] {
            let buf = Bytes::from_static(bad);
            assert!(RecordMeta::split_stored(&buf, 0..buf.len(), 0, &Limits::DEFAULT).is_err());
            // A range outside the buffer is an error, not a panic.
            assert!(RecordMeta::split_stored(&buf, 1..99, 0, &Limits::DEFAULT).is_err());
        }
    }
}
