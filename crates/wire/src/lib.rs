//! Bounds-checked, zero-copy reading of binary formats.
//!
//! Every protocol and storage crate of dafka decodes untrusted bytes: frames from a
//! peer, records from a file that may be torn or corrupt. They all read them through
//! this one [`Reader`]: every read checks the remaining length first and fails with
//! [`ReadError::Truncated`] instead of panicking; fields are split off the body as
//! zero-copy [`Bytes`], so a field can never read into its neighbour, and
//! [`Reader::finish`] rejects trailing bytes. Integers are big-endian (network order),
//! as in ZMTP, ZRE and Dafka.
//!
//! Each layer converts [`ReadError`] into its own typed error (`From`), so a
//! truncated field is reported in that layer's terms.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod log_window;
pub mod uuid_hex;

pub use log_window::{LOG_WINDOW, LogWindow};

use bytes::{Buf, Bytes};
use thiserror::Error;

/// A read ran past the end of the body, or a body had bytes left over.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A field ran past the end of its enclosing body.
    #[error("{what} is truncated: needs {needed} bytes, only {available} left in the body")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// A body had bytes left over after its last field.
    #[error("{what} has {count} unexpected trailing bytes")]
    TrailingBytes {
        /// The body being decoded.
        what: &'static str,
        /// How many bytes were left over.
        count: usize,
    },
    /// A terminated field's terminator byte never came before the end of the body.
    #[error("{what} has no terminating {terminator:#04x} byte")]
    Unterminated {
        /// The field being read.
        what: &'static str,
        /// The byte that should have ended it.
        terminator: u8,
    },
}

/// A bounds-checked reader over one body (a frame, a command, a record).
#[derive(Debug, Clone)]
pub struct Reader {
    rest: Bytes,
}

impl Reader {
    /// Reads `body` from its start.
    #[inline]
    pub fn new(body: Bytes) -> Self {
        Reader { rest: body }
    }

    /// Bytes not read yet.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    #[inline]
    fn need(&self, n: usize, what: &'static str) -> Result<(), ReadError> {
        need(self.rest.len(), n, what)
    }

    /// One byte.
    #[inline]
    pub fn u8(&mut self, what: &'static str) -> Result<u8, ReadError> {
        self.need(1, what)?;
        Ok(self.rest.get_u8())
    }

    /// A big-endian `u16`.
    #[inline]
    pub fn u16(&mut self, what: &'static str) -> Result<u16, ReadError> {
        self.need(2, what)?;
        Ok(self.rest.get_u16())
    }

    /// A big-endian `u32`.
    #[inline]
    pub fn u32(&mut self, what: &'static str) -> Result<u32, ReadError> {
        self.need(4, what)?;
        Ok(self.rest.get_u32())
    }

    /// A big-endian `u64`.
    #[inline]
    pub fn u64(&mut self, what: &'static str) -> Result<u64, ReadError> {
        self.need(8, what)?;
        Ok(self.rest.get_u64())
    }

    /// Splits off exactly `n` bytes, without copying.
    #[inline]
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<Bytes, ReadError> {
        self.need(n, what)?;
        Ok(self.rest.split_to(n))
    }

    /// A field prefixed by its 1-byte length (the `string` of ZRE and Dafka:
    /// `number-1 *OCTET`), without copying.
    pub fn short_bytes(&mut self, what: &'static str) -> Result<Bytes, ReadError> {
        let len = self.short_len(what)?;
        Ok(self.rest.split_to(len))
    }

    /// Reads a 1-byte length and checks that many bytes are left (the field itself is not
    /// consumed yet).
    #[inline]
    fn short_len(&mut self, what: &'static str) -> Result<usize, ReadError> {
        let len = usize::from(self.u8(what)?);
        self.need(len, what)?;
        Ok(len)
    }

    /// Where `terminator` is in what is left (nothing consumed).
    #[inline]
    fn terminator_at(&self, terminator: u8, what: &'static str) -> Result<usize, ReadError> {
        self.rest
            .iter()
            .position(|&b| b == terminator)
            .ok_or(ReadError::Unterminated { what, terminator })
    }

    /// A field prefixed by its 4-byte big-endian length (the `longstr` of ZRE and Dafka:
    /// `number-4 *OCTET`), without copying. The length is checked against what is left of the
    /// body before anything is split off, so an announced length never allocates.
    pub fn long_bytes(&mut self, what: &'static str) -> Result<Bytes, ReadError> {
        let len = self.u32(what)?;
        // On a 16-bit target a length that does not fit in usize cannot fit in the body either.
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        self.take(len, what)
    }

    /// The bytes before the first `terminator`, without copying; the terminator is consumed
    /// and not returned. Fails if the body has no such byte.
    pub fn until(&mut self, terminator: u8, what: &'static str) -> Result<Bytes, ReadError> {
        let end = self.terminator_at(terminator, what)?;
        let field = self.rest.split_to(end);
        self.rest.advance(1);
        Ok(field)
    }

    /// A field prefixed by its 1-byte length, handed to `parse` as a borrowed slice: for a
    /// field that is parsed and not kept (an id in hex), no shared `Bytes` handle is made and
    /// dropped for it, which costs two atomic operations per field on a hot path.
    #[inline]
    pub fn short_with<T>(
        &mut self,
        what: &'static str,
        parse: impl FnOnce(&[u8]) -> T,
    ) -> Result<T, ReadError> {
        let len = self.short_len(what)?;
        let out = parse(&self.rest[..len]);
        self.rest.advance(len);
        Ok(out)
    }

    /// The bytes up to `terminator` (which is consumed) handed to `parse` as a borrowed slice,
    /// as [`short_with`](Self::short_with) does for [`until`](Self::until).
    #[inline]
    pub fn until_with<T>(
        &mut self,
        terminator: u8,
        what: &'static str,
        parse: impl FnOnce(&[u8]) -> T,
    ) -> Result<T, ReadError> {
        let end = self.terminator_at(terminator, what)?;
        let out = parse(&self.rest[..end]);
        self.rest.advance(end + 1);
        Ok(out)
    }

    /// Exactly `N` bytes, copied into an array (for fixed-size fields: UUIDs, keys, magics).
    #[inline]
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ReadError> {
        self.need(N, what)?;
        let mut out = [0u8; N];
        self.rest.copy_to_slice(&mut out);
        Ok(out)
    }

    /// Reads a field whose length is known only by walking it: `walk` reads it from a
    /// [`SliceReader`] over what is left (borrowed: no shared `Bytes` handle per inner field),
    /// and what it consumed is then split off as one zero-copy [`Bytes`], returned beside
    /// `walk`'s result. On an error nothing is consumed.
    #[inline]
    pub fn walked<T, E>(
        &mut self,
        walk: impl FnOnce(&mut SliceReader<'_>) -> Result<T, E>,
    ) -> Result<(T, Bytes), E> {
        let mut s = SliceReader::new(&self.rest);
        let out = walk(&mut s)?;
        let used = self.rest.len() - s.remaining();
        Ok((out, self.rest.split_to(used)))
    }

    /// Everything that is left.
    #[inline]
    pub fn rest(self) -> Bytes {
        self.rest
    }

    /// Fails if any byte is left.
    #[inline]
    pub fn finish(self, what: &'static str) -> Result<(), ReadError> {
        finished(self.rest.len(), what)
    }
}

/// Fails unless `n` bytes of `available` are there.
#[inline]
fn need(available: usize, n: usize, what: &'static str) -> Result<(), ReadError> {
    if available < n {
        Err(ReadError::Truncated {
            what,
            needed: n,
            available,
        })
    } else {
        Ok(())
    }
}

/// Fails if `left` bytes are left over.
#[inline]
fn finished(left: usize, what: &'static str) -> Result<(), ReadError> {
    if left == 0 {
        Ok(())
    } else {
        Err(ReadError::TrailingBytes { what, count: left })
    }
}

/// The borrowing twin of [`Reader`], over a `&[u8]`: the same checks and errors, fields
/// returned as sub-slices. For walking a field whose inner parts are validated and not kept
/// apart ([`Reader::walked`]), or for reading bytes already held elsewhere.
#[derive(Debug, Clone)]
pub struct SliceReader<'a> {
    rest: &'a [u8],
}

impl<'a> SliceReader<'a> {
    /// Reads `body` from its start.
    #[inline]
    pub fn new(body: &'a [u8]) -> Self {
        SliceReader { rest: body }
    }

    /// Bytes not read yet.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// Exactly `n` bytes.
    #[inline]
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ReadError> {
        need(self.rest.len(), n, what)?;
        let (field, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(field)
    }

    /// Exactly `N` bytes, as an array.
    #[inline]
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ReadError> {
        let field = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(field);
        Ok(out)
    }

    /// One byte.
    #[inline]
    pub fn u8(&mut self, what: &'static str) -> Result<u8, ReadError> {
        Ok(self.array::<1>(what)?[0])
    }

    /// A big-endian `u32`.
    #[inline]
    pub fn u32(&mut self, what: &'static str) -> Result<u32, ReadError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    /// A big-endian `u64`.
    #[inline]
    pub fn u64(&mut self, what: &'static str) -> Result<u64, ReadError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    /// A field prefixed by its 4-byte big-endian length, checked against what is left.
    #[inline]
    pub fn long_bytes(&mut self, what: &'static str) -> Result<&'a [u8], ReadError> {
        let len = self.u32(what)?;
        self.take(usize::try_from(len).unwrap_or(usize::MAX), what)
    }

    /// Fails if any byte is left.
    #[inline]
    pub fn finish(self, what: &'static str) -> Result<(), ReadError> {
        finished(self.rest.len(), what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrowed_fields_are_bounded_and_consumed_like_the_shared_ones() {
        let body = Bytes::from_static(b"\x03abcQ\x00rest\x05ab");
        let mut r = Reader::new(body.clone());
        assert_eq!(r.short_with("s", |f| f.to_vec()), Ok(b"abc".to_vec()));
        assert_eq!(r.until_with(0x00, "u", |f| f.to_vec()), Ok(b"Q".to_vec()));
        assert_eq!(r.array::<4>("a"), Ok(*b"rest"));
        // A length past the end: refused before `parse` sees anything.
        let mut called = false;
        assert_eq!(
            r.short_with("t", |_| called = true),
            Err(ReadError::Truncated {
                what: "t",
                needed: 5,
                available: 2
            })
        );
        assert!(!called);
        // The same reads through the shared forms end at the same place.
        let mut shared = Reader::new(body);
        assert_eq!(shared.short_bytes("s").unwrap(), &b"abc"[..]);
        assert_eq!(shared.until(0x00, "u").unwrap(), &b"Q"[..]);
        assert_eq!(shared.array::<4>("a"), Ok(*b"rest"));
        assert_eq!(
            Reader::new(Bytes::from_static(b"no end")).until_with(0x00, "u", |_| ()),
            Err(ReadError::Unterminated {
                what: "u",
                terminator: 0x00
            })
        );
    }

    #[test]
    fn reads_are_bounded() {
        let mut r = Reader::new(Bytes::from_static(&[1, 0, 2, 0, 0, 0, 3, 9]));
        assert_eq!(r.u8("a"), Ok(1));
        assert_eq!(r.u16("b"), Ok(2));
        assert_eq!(r.u32("c"), Ok(3));
        assert_eq!(
            r.take(2, "d"),
            Err(ReadError::Truncated {
                what: "d",
                needed: 2,
                available: 1
            })
        );
        assert_eq!(r.remaining(), 1);
        assert_eq!(
            r.finish("body"),
            Err(ReadError::TrailingBytes {
                what: "body",
                count: 1
            })
        );
        assert!(Reader::new(Bytes::new()).u32("x").is_err());
        assert!(Reader::new(Bytes::new()).finish("x").is_ok());
    }

    #[test]
    fn wide_and_fixed_fields() {
        let mut r = Reader::new(Bytes::from_static(&[
            0, 0, 0, 0, 0, 0, 1, 2, 0xAB, 0xCD, 0xEF,
        ]));
        assert_eq!(r.u64("n"), Ok(0x0102));
        assert_eq!(r.array::<2>("pair"), Ok([0xAB, 0xCD]));
        assert_eq!(
            r.array::<2>("pair"),
            Err(ReadError::Truncated {
                what: "pair",
                needed: 2,
                available: 1
            })
        );
        assert_eq!(r.rest(), Bytes::from_static(&[0xEF]));
    }

    #[test]
    fn length_prefixed_fields() {
        let mut r = Reader::new(Bytes::from_static(&[
            2, b'a', b'b', 0, 0, 0, 1, b'c', 0, 0, 0, 9, b'd',
        ]));
        assert_eq!(r.short_bytes("s"), Ok(Bytes::from_static(b"ab")));
        assert_eq!(r.long_bytes("l"), Ok(Bytes::from_static(b"c")));
        // An announced length past the end of the body fails before anything is split off.
        assert_eq!(
            r.long_bytes("l"),
            Err(ReadError::Truncated {
                what: "l",
                needed: 9,
                available: 1
            })
        );
        let mut r = Reader::new(Bytes::from_static(&[3, b'x']));
        assert_eq!(
            r.short_bytes("s"),
            Err(ReadError::Truncated {
                what: "s",
                needed: 3,
                available: 1
            })
        );
        assert_eq!(
            Reader::new(Bytes::new()).short_bytes("s").map(|_| ()),
            Err(ReadError::Truncated {
                what: "s",
                needed: 1,
                available: 0
            })
        );
    }

    #[test]
    fn terminated_fields() {
        let mut r = Reader::new(Bytes::from_static(b"topic\0\x01rest\0"));
        assert_eq!(r.until(0, "t"), Ok(Bytes::from_static(b"topic")));
        assert_eq!(r.u8("v"), Ok(1));
        assert_eq!(r.until(0, "t"), Ok(Bytes::from_static(b"rest")));
        assert_eq!(
            r.until(0, "t"),
            Err(ReadError::Unterminated {
                what: "t",
                terminator: 0
            })
        );
        let mut r = Reader::new(Bytes::from_static(b"\0"));
        assert_eq!(r.until(0, "t"), Ok(Bytes::new()));
        assert_eq!(r.remaining(), 0);
        let mut r = Reader::new(Bytes::from_static(b"abc"));
        assert_eq!(
            r.until(0, "t"),
            Err(ReadError::Unterminated {
                what: "t",
                terminator: 0
            })
        );
        // Nothing is consumed by a failed read.
        assert_eq!(r.remaining(), 3);
    }

    #[test]
    fn a_walked_field_is_split_off_whole_and_a_failed_walk_consumes_nothing() {
        let mut r = Reader::new(Bytes::from_static(b"\x00\x00\x00\x02hi\x07tail"));
        let (text, field) = r.walked(|s| s.long_bytes("f").map(<[u8]>::to_vec)).unwrap();
        assert_eq!(text, b"hi");
        assert_eq!(&field[..], b"\x00\x00\x00\x02hi");
        let failed: Result<((), Bytes), ReadError> = r.walked(|s| {
            s.u8("one")?;
            s.u64("too long").map(drop)
        });
        assert_eq!(
            failed,
            Err(ReadError::Truncated {
                what: "too long",
                needed: 8,
                available: 4
            })
        );
        assert_eq!(r.remaining(), 5);
        let mut s = SliceReader::new(b"\x00\x00\x00\x09ab");
        assert!(matches!(
            s.long_bytes("l"),
            Err(ReadError::Truncated { needed: 9, .. })
        ));
        assert_eq!(
            SliceReader::new(b"x").finish("f"),
            Err(ReadError::TrailingBytes {
                what: "f",
                count: 1
            })
        );
    }
}
