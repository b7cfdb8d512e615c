//! A bounds-checked reader over one frame body.
//!
//! Every read checks the remaining length first and fails with
//! [`MalformedError::Truncated`] instead of panicking; fields are split off the body as
//! zero-copy [`Bytes`], so a field can never read into its neighbour, and
//! [`Reader::finish`] rejects trailing bytes.

use bytes::{Buf, Bytes};

use crate::error::MalformedError;

pub(crate) struct Reader {
    rest: Bytes,
}

impl Reader {
    pub(crate) fn new(body: Bytes) -> Self {
        Reader { rest: body }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.rest.len()
    }

    fn need(&self, n: usize, what: &'static str) -> Result<(), MalformedError> {
        if self.rest.len() < n {
            Err(MalformedError::Truncated {
                what,
                needed: n,
                available: self.rest.len(),
            })
        } else {
            Ok(())
        }
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, MalformedError> {
        self.need(1, what)?;
        Ok(self.rest.get_u8())
    }

    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, MalformedError> {
        self.need(2, what)?;
        Ok(self.rest.get_u16())
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, MalformedError> {
        self.need(4, what)?;
        Ok(self.rest.get_u32())
    }

    /// Splits off exactly `n` bytes.
    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<Bytes, MalformedError> {
        self.need(n, what)?;
        Ok(self.rest.split_to(n))
    }

    /// Everything that is left.
    pub(crate) fn rest(self) -> Bytes {
        self.rest
    }

    /// Fails if any byte is left.
    pub(crate) fn finish(self, what: &'static str) -> Result<(), MalformedError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(MalformedError::TrailingBytes {
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
            Err(MalformedError::Truncated {
                what: "d",
                needed: 2,
                available: 1
            })
        );
        assert_eq!(r.remaining(), 1);
        assert_eq!(
            r.finish("body"),
            Err(MalformedError::TrailingBytes {
                what: "body",
                count: 1
            })
        );
        assert!(Reader::new(Bytes::new()).u32("x").is_err());
        assert!(Reader::new(Bytes::new()).finish("x").is_ok());
    }
}
