//! Z85 (32/Z85): the text form libzmq users exchange CURVE keys in.
//!
//! Every 4 bytes (a big-endian `u32`) become 5 characters of base 85 from the alphabet below,
//! most significant digit first; a 32-byte key is 40 characters.

use thiserror::Error;

const ALPHABET: &[u8; 85] =
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// A string that is not Z85 of the expected length.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Z85Error {
    /// The text is not a multiple of 5 characters (or not 40 for a key).
    #[error("Z85 text of {len} characters: expected {expected}")]
    Length {
        /// Characters received.
        len: usize,
        /// Characters expected.
        expected: usize,
    },
    /// A character outside the Z85 alphabet.
    #[error("byte {byte:#04x} at {at} is not a Z85 character")]
    Character {
        /// The offending byte.
        byte: u8,
        /// Its position.
        at: usize,
    },
    /// A group of 5 characters worth more than `u32::MAX`.
    #[error("Z85 group at {at} overflows 32 bits")]
    Overflow {
        /// Position of the group.
        at: usize,
    },
}

/// Z85 text of `bytes`, whose length must be a multiple of 4 (keys are 32 bytes).
///
/// # Panics
///
/// If `bytes.len()` is not a multiple of 4 (a caller's mistake, never peer input).
pub fn encode(bytes: &[u8]) -> String {
    assert!(
        bytes.len().is_multiple_of(4),
        "Z85 encodes multiples of 4 bytes, got {}",
        bytes.len()
    );
    let mut out = String::with_capacity(bytes.len() / 4 * 5);
    for chunk in bytes.chunks_exact(4) {
        let mut value = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        let mut digits = [0u8; 5];
        for d in digits.iter_mut().rev() {
            *d = ALPHABET[(value % 85) as usize];
            value /= 85;
        }
        out.extend(digits.iter().map(|&b| b as char));
    }
    out
}

/// Bytes of Z85 `text` (a multiple of 5 characters).
pub fn decode(text: &str) -> Result<Vec<u8>, Z85Error> {
    let raw = text.as_bytes();
    if !raw.len().is_multiple_of(5) {
        return Err(Z85Error::Length {
            len: raw.len(),
            expected: raw.len().div_ceil(5) * 5,
        });
    }
    let mut out = Vec::with_capacity(raw.len() / 5 * 4);
    for (g, group) in raw.chunks_exact(5).enumerate() {
        let mut value: u64 = 0;
        for (i, &byte) in group.iter().enumerate() {
            let digit = ALPHABET
                .iter()
                .position(|&c| c == byte)
                .ok_or(Z85Error::Character {
                    byte,
                    at: g * 5 + i,
                })?;
            value = value * 85 + digit as u64;
        }
        let value = u32::try_from(value).map_err(|_| Z85Error::Overflow { at: g * 5 })?;
        out.extend_from_slice(&value.to_be_bytes());
    }
    Ok(out)
}

/// A 32-byte CURVE key from its 40-character Z85 text.
pub fn decode_key(text: &str) -> Result<[u8; 32], Z85Error> {
    if text.len() != 40 {
        return Err(Z85Error::Length {
            len: text.len(),
            expected: 40,
        });
    }
    let bytes = decode(text)?;
    let mut key = [0u8; 32];
    key.copy_from_slice(&bytes);
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test vector of 32/Z85.
    #[test]
    fn rfc_vector() {
        let bytes = [0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B];
        assert_eq!(encode(&bytes), "HelloWorld");
        assert_eq!(decode("HelloWorld").unwrap(), bytes);
    }

    /// The key pair of libzmq's `test_security_curve` (its Z85 text and raw bytes).
    #[test]
    fn libzmq_key() {
        let z = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
        let key = decode_key(z).unwrap();
        assert_eq!(encode(&key), z);
        assert_eq!(&key[..4], &[0xBB, 0x88, 0x47, 0x1D]);
    }

    #[test]
    fn refuses_bad_text() {
        assert!(matches!(decode("Hell"), Err(Z85Error::Length { .. })));
        assert!(matches!(
            decode("Hell~"),
            Err(Z85Error::Character { byte: b'~', at: 4 })
        ));
        assert!(matches!(decode("#####"), Err(Z85Error::Overflow { at: 0 })));
        assert!(matches!(
            decode_key("HelloWorld"),
            Err(Z85Error::Length { .. })
        ));
    }
}
