//! ZRE message decoding from arbitrary input, with small limits (beacons: `zre_beacon`).
//!
//! Input: byte 0 sets `max_groups`/`max_headers` (low/high nibble), byte 1 `max_long_string`,
//! byte 2 `max_content_frames`, byte 3 `max_content_bytes` (x4); the rest is a sequence of
//! frames, each a 2-byte big-endian length and that many bytes (a short last frame takes what
//! is left). Invariants: no panic; a decoded message re-encodes to the input frames (with the
//! version byte 3 sent as 2), and that decodes equal again; counts, strings and content stay
//! within the limits (list capacities included); WHISPER/SHOUT content read as gossip (the hub's
//! peer lists) stays capped and re-encodes to content that decodes the same.
#![no_main]

use bytes::Bytes;
use dafka_zre_proto::{Body, Limits, Message, gossip};
use libfuzzer_sys::fuzz_target;

mod common;
use common::split_frames;

fuzz_target!(|data: &[u8]| {
    let [a, b, c, d, rest @ ..] = data else {
        return;
    };
    let limits = Limits::DEFAULT
        .with_max_groups(usize::from(a & 0x0F))
        .with_max_headers(usize::from(a >> 4))
        .with_max_long_string(usize::from(*b))
        .with_max_content_frames(usize::from(*c))
        .with_max_content_bytes(usize::from(*d) * 4);
    let frames = split_frames(rest);
    let Ok(m) = Message::decode(&frames, &limits) else {
        return;
    };
    let out = m.to_frames();
    let mut expected = frames.clone();
    let mut header = expected[0].to_vec();
    header[3] = 0x02;
    expected[0] = Bytes::from(header);
    assert_eq!(out, expected, "re-encoding changed the bytes");
    assert_eq!(Message::decode(&out, &limits).as_ref(), Ok(&m));
    match &m.body {
        Body::Hello(h) => {
            assert!(h.groups.capacity() <= limits.max_groups);
            assert!(h.headers.capacity() <= limits.max_headers);
            assert!(h.groups.iter().all(|g| g.len() <= limits.max_long_string));
            assert!(
                h.headers
                    .iter()
                    .all(|(_, v)| v.len() <= limits.max_long_string)
            );
        }
        Body::Whisper { content } | Body::Shout { content, .. } => {
            assert!(content.len() <= limits.max_content_frames);
            assert!(content.iter().map(Bytes::len).sum::<usize>() <= limits.max_content_bytes);
            // Gossip content: capped, only tcp:// endpoints, and what decodes re-encodes to
            // content that decodes the same.
            if let Some(nodes) = gossip::decode(content) {
                assert!(nodes.len() <= gossip::MAX_GOSSIP_ENTRIES);
                assert!(nodes.iter().all(|(_, e)| e.as_str().starts_with("tcp://")));
                let again = gossip::encode(nodes.iter().map(|(u, e)| (*u, e.as_str())));
                assert_eq!(gossip::decode(&again).as_ref(), Some(&nodes));
            }
        }
        _ => {}
    }
});
