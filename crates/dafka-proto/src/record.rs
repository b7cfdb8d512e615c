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
use dafka_wire::Reader;

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

    /// The name as text (our decoders only let UTF-8 through; lossy for a hand-built one).
    pub fn name_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.name)
    }
}

/// The bytes of a key, header names and header values: what, beside the value, counts against
/// a record size limit.
pub fn payload_len(key: Option<&Bytes>, headers: Option<&[Header]>) -> usize {
    let key = key.map_or(0, Bytes::len);
    let headers = headers.map_or(0, |hs| {
        hs.iter()
            .map(|h| h.name.len() + h.value.as_ref().map_or(0, Bytes::len))
            .sum()
    });
    key + headers
}

/// A record's metadata: its timestamp, and the key and headers when it has them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct RecordMeta {
    /// Microseconds since the Unix epoch, UTC.
    pub timestamp: i64,
    /// Whose clock `timestamp` is.
    pub timestamp_type: TimestampType,
    /// The key: `None` when the record has none, `Some` of an empty `Bytes` for an empty key.
    pub key: Option<Bytes>,
    /// The headers: `None` when the record has none, `Some` of an empty list for an empty one.
    pub headers: Option<Vec<Header>>,
}

impl RecordMeta {
    /// A record created at `timestamp` (microseconds since the epoch, UTC), with no key and
    /// no headers.
    pub const fn created(timestamp: i64) -> Self {
        RecordMeta {
            timestamp,
            timestamp_type: TimestampType::CreateTime,
            key: None,
            headers: None,
        }
    }

    /// A record that came without a timestamp, stamped when it was appended or received.
    pub const fn log_append(timestamp: i64) -> Self {
        RecordMeta {
            timestamp,
            timestamp_type: TimestampType::LogAppendTime,
            key: None,
            headers: None,
        }
    }

    /// The flags byte of the extras; `0` when the record needs none.
    pub fn flags(&self) -> u8 {
        let mut flags = 0;
        if self.key.is_some() {
            flags |= FLAG_KEY;
        }
        if self.headers.is_some() {
            flags |= FLAG_HEADERS;
        }
        if self.timestamp_type == TimestampType::LogAppendTime {
            flags |= FLAG_LOG_APPEND_TIME;
        }
        flags
    }

    /// Whether the record needs extras (a key, headers or a log-append time).
    pub fn has_extras(&self) -> bool {
        self.flags() != 0
    }

    /// The bytes of the key, header names and header values: what, beside the value, counts
    /// against a record size limit.
    pub fn payload_len(&self) -> usize {
        payload_len(self.key.as_ref(), self.headers.as_deref())
    }

    /// Length of the extras (0 when [`has_extras`](Self::has_extras) is false).
    pub fn extras_len(&self) -> usize {
        if !self.has_extras() {
            return 0;
        }
        let key = self.key.as_ref().map_or(0, |k| 4 + k.len());
        let headers = self.headers.as_deref().map_or(0, |hs| {
            4 + hs
                .iter()
                .map(|h| 4 + h.name.len() + 4 + h.value.as_ref().map_or(0, Bytes::len))
                .sum::<usize>()
        });
        1 + key + headers
    }

    /// Appends the timestamp (8 bytes).
    pub fn put_timestamp(&self, out: &mut BytesMut) {
        out.put_i64(self.timestamp);
    }

    /// Appends the extras (nothing when the record needs none). Lengths over `u32::MAX`
    /// cannot be encoded: callers check [`payload_len`](Self::payload_len) against their
    /// record limit first, which is far below it.
    pub fn put_extras(&self, out: &mut BytesMut) {
        let flags = self.flags();
        if flags == 0 {
            return;
        }
        out.reserve(self.extras_len());
        out.put_u8(flags);
        if let Some(key) = &self.key {
            out.put_u32(key.len() as u32);
            out.put_slice(key);
        }
        if let Some(headers) = &self.headers {
            out.put_u32(headers.len() as u32);
            for h in headers {
                out.put_u32(h.name.len() as u32);
                out.put_slice(&h.name);
                match &h.value {
                    Some(v) => {
                        out.put_u32(v.len() as u32);
                        out.put_slice(v);
                    }
                    None => out.put_u32(NULL_VALUE),
                }
            }
        }
    }

    /// Reads a timestamp (8 bytes).
    pub fn read_timestamp(r: &mut Reader) -> Result<i64, DecodeError> {
        Ok(r.u64("timestamp")? as i64)
    }

    /// Reads the extras of a record stamped `timestamp`; key, names and values share `r`'s
    /// buffer (no copy). Flags `0x00` (a record without extras in a run where others have
    /// some) read as a create-time record with neither key nor headers. Checked against
    /// `limits.max_headers` before a list is reserved, and the reservation never exceeds what
    /// the bytes left could hold.
    pub fn read_extras(
        r: &mut Reader,
        timestamp: i64,
        limits: &Limits,
    ) -> Result<RecordMeta, DecodeError> {
        let flags = r.u8("record flags")?;
        if flags & !FLAGS_KNOWN != 0 {
            return Err(MalformedError::RecordFlags { flags }.into());
        }
        let key = if flags & FLAG_KEY != 0 {
            Some(r.long_bytes("key")?)
        } else {
            None
        };
        let headers = if flags & FLAG_HEADERS != 0 {
            let count = r.u32("header count")?;
            if usize::try_from(count).map_or(true, |n| n > limits.max_headers) {
                return Err(LimitError::TooManyHeaders {
                    count,
                    max: limits.max_headers,
                }
                .into());
            }
            let mut headers =
                Vec::with_capacity((count as usize).min(r.remaining() / MIN_HEADER_LEN));
            for _ in 0..count {
                let name = r.long_bytes("header name")?;
                if std::str::from_utf8(&name).is_err() {
                    return Err(MalformedError::HeaderName.into());
                }
                let len = r.u32("header value length")?;
                let value = if len == NULL_VALUE {
                    None
                } else {
                    let len = usize::try_from(len).unwrap_or(usize::MAX);
                    Some(r.take(len, "header value")?)
                };
                headers.push(Header { name, value });
            }
            Some(headers)
        } else {
            None
        };
        let timestamp_type = if flags & FLAG_LOG_APPEND_TIME != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        };
        Ok(RecordMeta {
            timestamp,
            timestamp_type,
            key,
            headers,
        })
    }
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
            RecordMeta {
                key: Some(Bytes::new()),
                ..RecordMeta::created(-5)
            },
            RecordMeta {
                headers: Some(vec![]),
                ..RecordMeta::created(0)
            },
            RecordMeta {
                key: Some(Bytes::from_static(b"user-42")),
                headers: Some(vec![
                    Header::new("trace-id", Some(Bytes::from_static(b"abc"))),
                    Header::new("", Some(Bytes::new())),
                    Header::new("schema", None),
                ]),
                ..RecordMeta::log_append(i64::MAX)
            },
            RecordMeta::log_append(i64::MIN),
        ];
        for meta in cases {
            assert_eq!(round_trip(&meta), meta);
        }
    }

    #[test]
    fn the_byte_layout_is_the_documented_one() {
        let meta = RecordMeta {
            key: Some(Bytes::from_static(b"k")),
            headers: Some(vec![Header::new("h", None)]),
            ..RecordMeta::created(0x0102_0304_0506_0708)
        };
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
}
