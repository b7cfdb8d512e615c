//! Node identities and topic names, validated once so that encoding cannot fail.

use std::fmt;
use std::str::FromStr;

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{MalformedError, TopicError};

/// Length of a node UUID on the wire: 32 upper-case hexadecimal characters.
pub const NODE_ID_HEX_LEN: usize = dafka_wire::uuid_hex::UUID_HEX_LEN;

/// Longest topic name: the `subject` field has a 1-byte length.
pub const MAX_TOPIC_LEN: usize = 255;

/// A node's 16-byte UUID. On the wire it is always 32 upper-case hex characters (the reference
/// formats it with czmq's `zuuid_str`; 46/DAFKA says 16 octets, which no peer sends).
///
/// A producer's id is also the name of its partition. This crate never generates ids (it has no
/// randomness): the driver makes one from 16 random bytes, or reuses a saved one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId([u8; 16]);

impl NodeId {
    /// The id with these 16 bytes.
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        NodeId(bytes)
    }

    /// The 16 bytes.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The 32 upper-case hex characters the wire carries.
    pub fn to_hex(&self) -> [u8; NODE_ID_HEX_LEN] {
        dafka_wire::uuid_hex::encode(&self.0)
    }

    /// Parses 32 upper-case hex characters. Lower case is refused: the reference never sends
    /// it, and accepting it would make decode -> encode change the bytes.
    pub fn from_hex(text: &[u8]) -> Option<Self> {
        dafka_wire::uuid_hex::decode(text).map(NodeId)
    }

    pub(crate) fn decode(text: &[u8], what: &'static str) -> Result<Self, MalformedError> {
        NodeId::from_hex(text).ok_or(MalformedError::Address {
            what,
            len: text.len(),
        })
    }

    /// Appends the `string` field form: `0x20` then the 32 hex characters.
    pub(crate) fn put_string(&self, out: &mut BytesMut) {
        out.put_u8(NODE_ID_HEX_LEN as u8);
        out.put_slice(&self.to_hex());
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The hex digits are ASCII, so this never fails.
        f.write_str(std::str::from_utf8(&self.to_hex()).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({self})")
    }
}

/// A string that is not 32 upper-case hex characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a node id is 32 upper-case hexadecimal characters")]
pub struct ParseNodeIdError;

impl FromStr for NodeId {
    type Err = ParseNodeIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NodeId::from_hex(s.as_bytes()).ok_or(ParseNodeIdError)
    }
}

/// A topic name: 0 to 255 bytes, none of them NUL. Held as [`Bytes`], so a decoded topic shares
/// the received frame instead of copying it.
///
/// Both rules come from the wire: the `subject` field has a 1-byte length, and in frame 1 the
/// topic prefix ends at the first NUL. 46/DAFKA recommends ASCII; any other byte is accepted.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Topic(Bytes);

impl Topic {
    /// Checks `name` against the rules.
    pub fn new(name: impl Into<Bytes>) -> Result<Self, TopicError> {
        let name = name.into();
        if name.len() > MAX_TOPIC_LEN {
            return Err(TopicError::TooLong { len: name.len() });
        }
        if name.contains(&0) {
            return Err(TopicError::ContainsNul);
        }
        Ok(Topic(name))
    }

    pub(crate) fn decode(name: Bytes, what: &'static str) -> Result<Self, MalformedError> {
        Topic::new(name).map_err(|error| MalformedError::Topic { what, error })
    }

    /// The name's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The name as shared bytes.
    pub fn to_bytes(&self) -> Bytes {
        self.0.clone()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the name is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Appends the `string` field form: 1-byte length, then the name.
    pub(crate) fn put_string(&self, out: &mut BytesMut) {
        // At most 255 bytes, checked in `new`.
        out.put_u8(self.0.len() as u8);
        out.put_slice(&self.0);
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(&self.0))
    }
}

impl fmt::Debug for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Topic({:?})", String::from_utf8_lossy(&self.0))
    }
}

impl TryFrom<&str> for Topic {
    type Error = TopicError;

    fn try_from(name: &str) -> Result<Self, Self::Error> {
        Topic::new(Bytes::copy_from_slice(name.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_id_hex() {
        let id: NodeId = "986108951EB145A1BFBDC5601975F614".parse().unwrap();
        assert_eq!(id.as_bytes()[0], 0x98);
        assert_eq!(id.as_bytes()[15], 0x14);
        assert_eq!(id.to_string(), "986108951EB145A1BFBDC5601975F614");
        assert_eq!(&id.to_hex(), b"986108951EB145A1BFBDC5601975F614");
        assert!(
            "986108951eb145a1bfbdc5601975f614"
                .parse::<NodeId>()
                .is_err()
        );
        assert!("986108951EB145A1BFBDC5601975F61".parse::<NodeId>().is_err());
        assert!(
            "986108951EB145A1BFBDC5601975F6140"
                .parse::<NodeId>()
                .is_err()
        );
        assert!(
            "986108951EB145A1BFBDC5601975F61G"
                .parse::<NodeId>()
                .is_err()
        );
    }

    #[test]
    fn topic_rules() {
        assert!(Topic::try_from("golden").is_ok());
        assert!(Topic::try_from("").is_ok());
        assert_eq!(Topic::try_from("a\0b"), Err(TopicError::ContainsNul));
        assert!(Topic::new(Bytes::from(vec![b'x'; 255])).is_ok());
        assert_eq!(
            Topic::new(Bytes::from(vec![b'x'; 256])),
            Err(TopicError::TooLong { len: 256 })
        );
    }
}
