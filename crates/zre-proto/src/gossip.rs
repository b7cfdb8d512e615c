//! Gossip over ZRE: how nodes that do not beacon (VPNs, containers, clouds) find every other
//! node through one hub they all know, with no UDP and no other socket.
//!
//! A hub is an ordinary ZRE node with [`Config::gossip_hub`](crate::Config::gossip_hub) set;
//! the others list its mailbox as a known endpoint ([`Node::connect_endpoint`](crate::Node)).
//! When a peer says HELLO to the hub, the hub WHISPERs it the peers it knows, and WHISPERs
//! every other peer about it. A node receiving such a WHISPER connects to each listed node it
//! does not know yet (as to a known endpoint), so the nodes end fully meshed, as with beacons.
//! Gossip WHISPERs are consumed by the node, never shown to the application. zyre and pyre
//! see them as ordinary WHISPERs (they would reach them only if a hub knew them).
//!
//! | frame | size | content |
//! |---|---|---|
//! | 1 | 13 | `5A 52 45 2D 47 4F 53 53 49 50 2F 31 00` (`"ZRE-GOSSIP/1"` + NUL) |
//! | 2.. | 17..=271 | one node each: its 16-byte UUID, then its mailbox endpoint (`tcp://ip:port`, UTF-8, 1..=255 bytes) |

use bytes::{BufMut, Bytes, BytesMut};
use dafka_wire::Reader;

use crate::types::{ShortStr, Uuid};

/// The first content frame of a gossip WHISPER.
pub const GOSSIP_MAGIC: &[u8; 13] = b"ZRE-GOSSIP/1\x00";

/// Most nodes one gossip WHISPER lists (a hub with more peers sends several).
pub const MAX_GOSSIP_ENTRIES: usize = 256;

/// The content frames telling of `nodes` (at most [`MAX_GOSSIP_ENTRIES`] are taken).
pub fn encode<'a>(nodes: impl IntoIterator<Item = (Uuid, &'a str)>) -> Vec<Bytes> {
    let mut frames = vec![Bytes::from_static(GOSSIP_MAGIC)];
    for (uuid, endpoint) in nodes.into_iter().take(MAX_GOSSIP_ENTRIES) {
        let mut f = BytesMut::with_capacity(16 + endpoint.len());
        f.put_slice(uuid.as_bytes());
        f.put_slice(endpoint.as_bytes());
        frames.push(f.freeze());
    }
    frames
}

/// The nodes a gossip WHISPER's content lists; `None` when the content is not gossip (any
/// other WHISPER). Entries that do not decode (no endpoint, over 255 bytes, not UTF-8, not
/// `tcp://`) are skipped, and entries past [`MAX_GOSSIP_ENTRIES`] ignored.
pub fn decode(content: &[Bytes]) -> Option<Vec<(Uuid, ShortStr)>> {
    let (first, entries) = content.split_first()?;
    if first.as_ref() != GOSSIP_MAGIC {
        return None;
    }
    let mut out = Vec::with_capacity(entries.len().min(MAX_GOSSIP_ENTRIES));
    for frame in entries.iter().take(MAX_GOSSIP_ENTRIES) {
        let mut r = Reader::new(frame.clone());
        let Ok(uuid) = r.array::<16>("gossip uuid") else {
            continue;
        };
        let endpoint = r.rest();
        let Ok(text) = std::str::from_utf8(&endpoint) else {
            continue;
        };
        if !text.starts_with("tcp://") {
            continue;
        }
        if let Ok(endpoint) = ShortStr::new(text) {
            out.push((Uuid::from_bytes(uuid), endpoint));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_byte_layout() {
        let a = Uuid::from_bytes([0xAB; 16]);
        let frames = encode([(a, "tcp://10.0.0.1:4000")]);
        assert_eq!(frames[0].as_ref(), b"ZRE-GOSSIP/1\0");
        assert_eq!(&frames[1][..16], &[0xAB; 16]);
        assert_eq!(&frames[1][16..], b"tcp://10.0.0.1:4000");
        let got = decode(&frames).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0, got[0].1.as_str()), (a, "tcp://10.0.0.1:4000"));
    }

    #[test]
    fn other_whispers_and_bad_entries() {
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[Bytes::from_static(b"hello")]), None);
        let bad = vec![
            Bytes::from_static(GOSSIP_MAGIC),
            Bytes::from_static(b"short"),
            Bytes::from([[1u8; 16].as_slice(), b"udp://x:1"].concat()),
            Bytes::from([[2u8; 16].as_slice(), &[0xFF, 0xFE]].concat()),
            Bytes::from([[3u8; 16].as_slice(), b"tcp://"].concat()),
            Bytes::from([[4u8; 16].as_slice(), &[b'x'; 300]].concat()),
        ];
        let got = decode(&bad).unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, Uuid::from_bytes([3; 16]));
    }

    #[test]
    fn entries_are_capped() {
        let many: Vec<(Uuid, String)> = (0..300u16)
            .map(|i| {
                let mut b = [0u8; 16];
                b[..2].copy_from_slice(&i.to_be_bytes());
                (Uuid::from_bytes(b), format!("tcp://10.0.0.1:{i}"))
            })
            .collect();
        let frames = encode(many.iter().map(|(u, e)| (*u, e.as_str())));
        assert_eq!(frames.len(), 1 + MAX_GOSSIP_ENTRIES);
        let mut long = frames.clone();
        long.extend(frames[1..].iter().cloned());
        assert_eq!(decode(&long).unwrap().len(), MAX_GOSSIP_ENTRIES);
    }
}
