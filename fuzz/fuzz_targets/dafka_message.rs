//! Dafka message and beacon decoding from arbitrary multipart messages, with small limits.
//!
//! Input: byte 0 sets `max_content` (x4), byte 1 `max_topics` and `max_offsets`, byte 2
//! `max_endpoint`; the rest
//! is a sequence of frames, each a 2-byte big-endian length and that many bytes (a short last
//! frame takes what is left). Invariants: no panic; a decoded message or beacon re-encodes to
//! exactly the input frames, and those decode equal again; record contents, the lists of topics,
//! group names and group offsets (their allocated capacity included) and beacon text stay within
//! the limits.
#![no_main]

use dafka_proto::{BeaconMessage, Limits, Message};
use libfuzzer_sys::fuzz_target;

mod common;
use common::split_frames;

fuzz_target!(|data: &[u8]| {
    let [a, b, c, rest @ ..] = data else {
        return;
    };
    let limits = Limits::DEFAULT
        .with_max_content(usize::from(*a) * 4)
        .with_max_topics(usize::from(*b))
        .with_max_offsets(usize::from(*b))
        .with_max_endpoint(usize::from(*c));
    let frames = split_frames(rest);
    if let Ok(m) = Message::decode(&frames, &limits) {
        assert_eq!(m.to_frames(), frames, "re-encoding changed the bytes");
        assert_eq!(m.header_len(), frames[0].len());
        assert_eq!(Message::decode(&m.to_frames(), &limits).as_ref(), Ok(&m));
        if let Some(content) = m.content() {
            assert!(content.len() <= limits.max_content);
        }
        match &m {
            Message::ConsumerHello(hello) => assert!(hello.topics.capacity() <= limits.max_topics),
            Message::DirectTopics(d) => assert!(d.topics.capacity() <= limits.max_topics),
            Message::DirectGroups(d) => assert!(d.groups.capacity() <= limits.max_topics),
            Message::OffsetCommit(c) => assert!(c.offsets.capacity() <= limits.max_offsets),
            Message::DirectCommitted(d) => assert!(d.offsets.capacity() <= limits.max_offsets),
            Message::CommittedQuery(q) => {
                assert!(q.partitions.capacity() <= limits.max_offsets)
            }
            _ => {}
        }
    }
    if let Ok(beacon) = BeaconMessage::decode(&frames, &limits) {
        assert_eq!(beacon.to_frames(), frames, "re-encoding changed the bytes");
        assert_eq!(
            BeaconMessage::decode(&frames, &limits).as_ref(),
            Ok(&beacon)
        );
        match &beacon {
            BeaconMessage::Node(n) => assert!(n.host.len() <= limits.max_endpoint),
            BeaconMessage::Tower(t) => assert!(t.endpoint.len() <= limits.max_endpoint),
            _ => {}
        }
    }
});
