//! The ZeroMQ subscriptions Dafka nodes make, and the ones XPUB nodes act on.
//!
//! A subscription is the id byte followed by a topic name or a node UUID (32 hex), with no
//! terminator, matched by ZeroMQ as a prefix of frame 1:
//!
//! | subscription | who subscribes | receives |
//! |---|---|---|
//! | `'M'` + topic | consumer | RECORDs of the topic |
//! | `'H'` + topic | consumer | HEADs of the topic |
//! | `'M'`, `'H'` | store writer | every RECORD, every HEAD |
//! | `'D'` + own UUID | consumer, store writer | DIRECT-RECORDs sent to it |
//! | `'E'` + own UUID | consumer | DIRECT-HEADs sent to it |
//! | `'L'` + own UUID | consumer | STORE-HELLO; arriving at a store reader's XPUB it asks for one |
//! | `'K'` + own UUID, `'F'` + own UUID | producer | ACKs and FETCHes of its partition |
//! | `'F'`, `'G'` | store reader | every FETCH, every GET-HEADS |
//! | `'A'` + own UUID | producer with `min_acks` > 1 (instead of `'K'`) | STORE-ACKs (extension) |
//! | `'O'` + own UUID | consumer | DIRECT-LOW-WATERs (extension) |
//! | `'R'` + own UUID | consumer | HEADS-ENDs (extension) |
//! | `'Q'` | store reader | every HEADS-QUERY (extension) |
//! | `'E'` + own UUID | producer resuming | DIRECT-HEADs of its partition |
//! | `'W'` + own UUID | store reader | CONSUMER-HELLOs to it; arriving at a consumer's XPUB it asks for one |
//! | `'J'` + group name + `0x00` | consumer group member (extension) | GROUP-HEARTBEATs of its group |
//! | `'P'`, `'I'` | store reader (extension, once groups are wired) | every OFFSET-COMMIT and COMMITTED-QUERY |
//! | `'U'` + own UUID | consumer group member (extension) | DIRECT-COMMITTEDs answering it |
//! | `"B"`, `"W"` | beacon SUB | tower beacons, the welcome |
//!
//! Because the prefix has no terminator, `'M' + "hello"` also matches topic `hello2`. The
//! reference passes such records on; ours filter exactly after decoding. A subscriber may also
//! use [`topic_exact`], which appends the NUL that ends the topic prefix, so the publisher
//! itself sends only the exact topic (a reference publisher filters any prefix it is given).

use bytes::{BufMut, Bytes, BytesMut};

use crate::group::GroupName;
use crate::id::{NODE_ID_HEX_LEN, NodeId, Topic};
use crate::message::{Kind, PREFIX_END};

/// Every message of a kind: the id byte alone (`'M'`, `'H'`, `'F'`, `'G'` for a store).
pub fn all(kind: Kind) -> Bytes {
    Bytes::copy_from_slice(&[kind.id()])
}

/// The reference's form: id byte + topic name (RECORD, HEAD, GET-HEADS). Matches every topic
/// that starts with `topic`.
pub fn topic(kind: Kind, topic: &Topic) -> Bytes {
    let mut out = BytesMut::with_capacity(1 + topic.len());
    out.put_u8(kind.id());
    out.put_slice(topic.as_bytes());
    out.freeze()
}

/// Id byte + topic name + `0x00`: matches that topic only.
pub fn topic_exact(kind: Kind, topic: &Topic) -> Bytes {
    let mut out = BytesMut::with_capacity(2 + topic.len());
    out.put_u8(kind.id());
    out.put_slice(topic.as_bytes());
    out.put_u8(PREFIX_END);
    out.freeze()
}

/// `'J'` + group name + `0x00`: the GROUP-HEARTBEATs of that group only (a member of another
/// group whose name starts with this one's is not matched).
pub fn group(group: &GroupName) -> Bytes {
    topic_exact(Kind::GroupHeartbeat, group.as_topic())
}

/// Id byte + node UUID as 32 hex: messages addressed to (or about) that node: `'D'`, `'E'`,
/// `'L'` + consumer; `'K'`, `'F'` + producer; `'W'` + store reader.
pub fn node(kind: Kind, node: &NodeId) -> Bytes {
    let mut out = BytesMut::with_capacity(1 + NODE_ID_HEX_LEN);
    out.put_u8(kind.id());
    out.put_slice(&node.to_hex());
    out.freeze()
}

/// A subscription an XPUB node acts on: `'L'` + consumer reaching a store reader (answer with
/// STORE-HELLO), `'W'` + store reader reaching a consumer (answer with CONSUMER-HELLO).
/// Returns the kind and node of any `id + UUID` subscription, `None` for anything else (an
/// empty subscription, a topic, a bare id byte).
pub fn parse_node(subscription: &[u8]) -> Option<(Kind, NodeId)> {
    let (&id, rest) = subscription.split_first()?;
    Some((Kind::from_id(id)?, NodeId::from_hex(rest)?))
}
