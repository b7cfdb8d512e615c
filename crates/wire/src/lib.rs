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
}

/// A bounds-checked reader over one body (a frame, a command, a record).
#[derive(Debug, Clone)]
pub struct Reader {
    rest: Bytes,
}

impl Reader {
    /// Reads `body` from its start.
    pub fn new(body: Bytes) -> Self {
        Reader { rest: body }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    fn need(&self, n: usize, what: &'static str) -> Result<(), ReadError> {
        if self.rest.len() < n {
            Err(ReadError::Truncated {
                what,
                needed: n,
                available: self.rest.len(),
            })
        } else {
            Ok(())
        }
    }

    /// One byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, ReadError> {
        self.need(1, what)?;
        Ok(self.rest.get_u8())
    }

    /// A big-endian `u16`.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, ReadError> {
        self.need(2, what)?;
        Ok(self.rest.get_u16())
    }

    /// A big-endian `u32`.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, ReadError> {
        self.need(4, what)?;
        Ok(self.rest.get_u32())
    }

    /// A big-endian `u64`.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, ReadError> {
        self.need(8, what)?;
        Ok(self.rest.get_u64())
    }

    /// Splits off exactly `n` bytes, without copying.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<Bytes, ReadError> {
        self.need(n, what)?;
        Ok(self.rest.split_to(n))
    }

    /// Exactly `N` bytes, copied into an array (for fixed-size fields: UUIDs, keys, magics).
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ReadError> {
        self.need(N, what)?;
        let mut out = [0u8; N];
        self.rest.copy_to_slice(&mut out);
        Ok(out)
    }

    /// Everything that is left.
    pub fn rest(self) -> Bytes {
        self.rest
    }

    /// Fails if any byte is left.
    pub fn finish(self, what: &'static str) -> Result<(), ReadError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(ReadError::TrailingBytes {
                what,
                count: self.rest.len(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
