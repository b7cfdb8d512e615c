//! Node identities and `string` fields, validated once so that encoding cannot fail.

use std::fmt;
use std::str::FromStr;

use bytes::{BufMut, BytesMut};
use dafka_wire::uuid_hex;

use crate::error::StringError;

/// A node's 16-byte UUID: raw in beacons and DEALER identities, 32 upper-case hex characters in
/// ELECT/LEADER and in events (as zyre and pyre show it).
///
/// This crate generates no ids (it has no randomness): the driver makes one from 16 random
/// bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uuid([u8; 16]);

impl Uuid {
    /// The id with these 16 bytes.
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Uuid(bytes)
    }

    /// The 16 bytes.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The 32 upper-case hex characters.
    pub fn to_hex(&self) -> [u8; uuid_hex::UUID_HEX_LEN] {
        uuid_hex::encode(&self.0)
    }

    /// The identity of this node's DEALER to each peer: `0x01` + the 16 bytes (zyre's
    /// `zyre_peer_connect`; the leading byte keeps libzmq from taking it for a generated id).
    pub fn dealer_identity(&self) -> [u8; 17] {
        let mut id = [0u8; 17];
        id[0] = IDENTITY_PREFIX;
        id[1..].copy_from_slice(&self.0);
        id
    }

    /// The sender of a message on the ROUTER mailbox, from its routing id (`0x01` + UUID).
    pub fn from_dealer_identity(id: &[u8]) -> Option<Self> {
        match id {
            [IDENTITY_PREFIX, rest @ ..] => <[u8; 16]>::try_from(rest).ok().map(Uuid),
            _ => None,
        }
    }
}

/// The byte before the UUID in a DEALER identity.
pub const IDENTITY_PREFIX: u8 = 0x01;

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The hex digits are ASCII, so this never fails.
        f.write_str(std::str::from_utf8(&self.to_hex()).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uuid({self})")
    }
}

/// A string that is not 32 hex characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a ZRE node id is 32 hexadecimal characters")]
pub struct ParseUuidError;

impl FromStr for Uuid {
    type Err = ParseUuidError;

    /// Parses 32 hex characters, in either case (users type them; the wire has upper case).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        uuid_hex::decode(s.to_ascii_uppercase().as_bytes())
            .map(Uuid)
            .ok_or(ParseUuidError)
    }
}

/// Longest ZRE `string` field: its length is one byte.
pub const MAX_SHORT_STR: usize = 255;

/// UTF-8 text of at most 255 bytes: a ZRE `string` field (group, name, endpoint, header key).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ShortStr(String);

impl ShortStr {
    /// Checks the length.
    pub fn new(text: impl Into<String>) -> Result<Self, StringError> {
        let text = text.into();
        if text.len() > MAX_SHORT_STR {
            return Err(StringError::TooLong { len: text.len() });
        }
        Ok(ShortStr(text))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Appends the `string` form: 1-byte length, then the bytes.
    pub(crate) fn put(&self, out: &mut BytesMut) {
        // At most 255 bytes, checked in `new`.
        out.put_u8(self.0.len() as u8);
        out.put_slice(self.0.as_bytes());
    }
}

impl fmt::Display for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl TryFrom<&str> for ShortStr {
    type Error = StringError;

    fn try_from(text: &str) -> Result<Self, Self::Error> {
        ShortStr::new(text)
    }
}

impl From<ShortStr> for String {
    fn from(s: ShortStr) -> String {
        s.0
    }
}

impl std::borrow::Borrow<str> for ShortStr {
    fn borrow(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_and_hex() {
        let id: Uuid = "378BA399C87C4B63AAC285B55D29687A".parse().unwrap();
        assert_eq!(id, "378ba399c87c4b63aac285b55d29687a".parse().unwrap());
        assert_eq!(id.to_string(), "378BA399C87C4B63AAC285B55D29687A");
        let ident = id.dealer_identity();
        assert_eq!(ident[0], 0x01);
        assert_eq!(Uuid::from_dealer_identity(&ident), Some(id));
        assert_eq!(Uuid::from_dealer_identity(&ident[..16]), None);
        let mut other = ident;
        other[0] = 0x00;
        assert_eq!(Uuid::from_dealer_identity(&other), None);
        assert!("378BA399".parse::<Uuid>().is_err());
    }

    #[test]
    fn short_str_length() {
        assert!(ShortStr::new("x".repeat(255)).is_ok());
        assert_eq!(
            ShortStr::new("x".repeat(256)),
            Err(StringError::TooLong { len: 256 })
        );
    }
}
