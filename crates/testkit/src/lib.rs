//! Test-only helpers shared by the tests of several dafka crates (a dev-dependency only, never
//! published): hex of the captured vectors, their `key=value;…` field column, and a small
//! seeded generator for reproducible lossy networks and crash points.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::BTreeMap;

/// The bytes of lowercase or uppercase hex `s` (panics on odd length or a non-hex digit: the
/// input is a test's own data).
pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Lowercase hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The fields column of a captured-vector row: `key=value` pairs separated by `;` (empty
/// pairs skipped; panics on a pair without `=`).
pub fn fields(column: &str) -> BTreeMap<String, String> {
    column
        .split(';')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

/// A small deterministic generator (xorshift64): reproducible runs from a seed, no
/// cryptographic randomness needed. The seed must not be zero.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with a chance of `percent` in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        assert_eq!(unhex("00aAff10"), vec![0x00, 0xaa, 0xff, 0x10]);
        assert_eq!(hex(&[0x00, 0xaa, 0xff, 0x10]), "00aaff10");
    }

    #[test]
    fn fields_split_pairs() {
        let f = fields("a=1;;b=x=y");
        assert_eq!(f.len(), 2);
        assert_eq!(f["a"], "1");
        assert_eq!(f["b"], "x=y");
    }

    #[test]
    fn rng_is_xorshift64() {
        // First outputs of xorshift64 (13, 7, 17) from seed 1.
        let mut r = Rng(1);
        assert_eq!(r.next(), 0x4082_2041);
        assert_eq!(r.next(), 0x1000_4106_0c01_1441);
    }
}
