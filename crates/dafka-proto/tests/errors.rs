//! Exact errors for malformed, truncated and oversized input.

use bytes::Bytes;
use dafka_proto::{
    BeaconMessage, DecodeError, LimitError, Limits, MalformedError, Message, TopicError,
};
use dafka_wire::ReadError;

const P: &[u8; 32] = b"986108951EB145A1BFBDC5601975F614";
const C: &[u8; 32] = b"660520E1F67543BCABA0796BBDC733D2";

fn frame(parts: &[&[u8]]) -> Bytes {
    Bytes::from(parts.concat())
}

/// HEAD of P on "golden", offset 2, as captured from the reference.
fn head() -> Vec<u8> {
    [
        &b"Hgolden\x00\x01\x20"[..],
        P,
        b"\x06golden",
        &2u64.to_be_bytes(),
    ]
    .concat()
}

fn record(content: &[u8]) -> Vec<Bytes> {
    let mut h = head();
    h[0] = b'M';
    vec![Bytes::from(h), Bytes::copy_from_slice(content)]
}

fn decode(frames: &[Bytes]) -> Result<Message, DecodeError> {
    Message::decode(frames, &Limits::DEFAULT)
}

fn malformed(e: MalformedError) -> Result<Message, DecodeError> {
    Err(DecodeError::Malformed(e))
}

#[test]
fn frame_structure() {
    assert_eq!(decode(&[]), malformed(MalformedError::NoFrames));
    assert_eq!(
        decode(&[Bytes::new()]),
        malformed(MalformedError::Wire(ReadError::Truncated {
            what: "command id",
            needed: 1,
            available: 0
        }))
    );
    assert_eq!(
        decode(&[frame(&[b"\xAA\xA5Hgolden"])]),
        malformed(MalformedError::UnknownId { id: 0xAA })
    );
    // RECORD without its content frame, HEAD with one.
    assert_eq!(
        decode(&record(b"x")[..1]),
        malformed(MalformedError::FrameCount {
            kind: "RECORD",
            expected: 2,
            got: 1
        })
    );
    assert_eq!(
        decode(&[Bytes::from(head()), Bytes::new()]),
        malformed(MalformedError::FrameCount {
            kind: "HEAD",
            expected: 1,
            got: 2
        })
    );
    assert_eq!(
        decode(&[frame(&[b"Hgolden"])]),
        malformed(MalformedError::Wire(ReadError::Unterminated {
            what: "topic prefix",
            terminator: 0
        }))
    );
    let mut h = head();
    h[8] = 0x30; // 46/DAFKA's "%x30" version: never sent by the reference.
    assert_eq!(
        decode(&[Bytes::from(h)]),
        malformed(MalformedError::Version { version: 0x30 })
    );
}

/// DIRECT-RECORDS (extension): frame 1 as DIRECT-RECORD's, then one frame per record, at
/// least one; every content within the limit; offsets that fit in 64 bits.
#[test]
fn direct_records_frames_limits_and_offsets() {
    let header = |first: u64| {
        Bytes::from(
            [
                &b"B"[..],
                C,
                b"\x00\x01\x20",
                P,
                b"\x06golden",
                &first.to_be_bytes(),
            ]
            .concat(),
        )
    };
    let frames = vec![header(7), frame(&[b"a"]), frame(&[b""]), frame(&[b"ccc"])];
    let Ok(Message::DirectRecords(d)) = decode(&frames) else {
        panic!("{:?}", decode(&frames))
    };
    assert_eq!((d.first, d.topic.as_bytes()), (7, &b"golden"[..]));
    assert_eq!(d.contents, frames[1..].to_vec());
    assert_eq!(Message::DirectRecords(d).to_frames(), frames);
    assert_eq!(
        decode(&frames[..1]),
        malformed(MalformedError::FrameCount {
            kind: "DIRECT-RECORDS",
            expected: 2,
            got: 1
        })
    );
    // The last record's offset is u64::MAX at most.
    let mut last = frames.clone();
    last[0] = header(u64::MAX - 2);
    assert!(decode(&last).is_ok());
    last[0] = header(u64::MAX - 1);
    assert_eq!(decode(&last), malformed(MalformedError::OffsetOverflow));
    // Any one content over the limit refuses the whole message.
    let limits = Limits::DEFAULT.with_max_content(2);
    assert_eq!(
        Message::decode(&frames, &limits),
        Err(DecodeError::Limit(LimitError::ContentTooLarge {
            len: 3,
            max: 2
        }))
    );
}

#[test]
fn truncated_and_trailing_fields() {
    let full = head();
    assert_eq!(
        decode(&[Bytes::copy_from_slice(&full[..full.len() - 1])]),
        malformed(MalformedError::Wire(ReadError::Truncated {
            what: "sequence",
            needed: 8,
            available: 7
        }))
    );
    assert_eq!(
        decode(&[Bytes::copy_from_slice(&full[..9])]),
        malformed(MalformedError::Wire(ReadError::Truncated {
            what: "address",
            needed: 1,
            available: 0
        }))
    );
    assert_eq!(
        decode(&[Bytes::copy_from_slice(&full[..20])]),
        malformed(MalformedError::Wire(ReadError::Truncated {
            what: "address",
            needed: 32,
            available: 10
        }))
    );
    let mut long = full.clone();
    long.push(0);
    assert_eq!(
        decode(&[Bytes::from(long)]),
        malformed(MalformedError::Wire(ReadError::TrailingBytes {
            what: "frame 1",
            count: 1
        }))
    );
    // Every proper prefix of a valid frame 1 fails, for every kind: no field is optional.
    for cut in 0..full.len() {
        assert!(decode(&[Bytes::copy_from_slice(&full[..cut])]).is_err());
    }
}

#[test]
fn field_contents() {
    let mut h = head();
    h[10..42].make_ascii_lowercase();
    assert_eq!(
        decode(&[Bytes::from(h)]),
        malformed(MalformedError::Address {
            what: "address",
            len: 32
        })
    );
    assert_eq!(
        decode(&[frame(&[b"Lgolden\x00\x01\x20", C])]),
        malformed(MalformedError::Address {
            what: "topic prefix",
            len: 6
        })
    );
    // The subject of HEAD names another topic than its prefix.
    let mut h = head();
    h[48] = b'G';
    assert_eq!(
        decode(&[Bytes::from(h)]),
        malformed(MalformedError::TopicMismatch { kind: "HEAD" })
    );
    // A NUL inside an ACK's subject.
    let ack = frame(&[b"K", P, b"\x00\x01\x03a\x00b", &5u64.to_be_bytes()]);
    assert_eq!(
        decode(&[ack]),
        malformed(MalformedError::Topic {
            what: "subject",
            error: TopicError::ContainsNul
        })
    );
}

#[test]
fn consumer_hello_topic_list() {
    let hello = |count: u32, entries: &[u8]| {
        vec![frame(&[
            b"W",
            P,
            b"\x00\x01\x20",
            C,
            &count.to_be_bytes(),
            entries,
        ])]
    };
    assert!(decode(&hello(0, b"")).is_ok());
    // A huge count is refused by the limit before any list is allocated.
    assert_eq!(
        decode(&hello(u32::MAX, b"")),
        Err(DecodeError::Limit(LimitError::TooManyTopics {
            kind: "CONSUMER-HELLO",
            count: u32::MAX,
            max: 4096
        }))
    );
    let limits = Limits::DEFAULT.with_max_topics(1);
    assert_eq!(
        Message::decode(&hello(2, b"\0\0\0\x01a\0\0\0\x01b"), &limits),
        Err(DecodeError::Limit(LimitError::TooManyTopics {
            kind: "CONSUMER-HELLO",
            count: 2,
            max: 1
        }))
    );
    // Within the limit, but the entries are not there.
    assert_eq!(
        decode(&hello(3, b"\0\0\0\x01a")),
        malformed(MalformedError::Wire(ReadError::Truncated {
            what: "subject",
            needed: 4,
            available: 0
        }))
    );
    // An entry announcing more bytes than the frame holds.
    assert_eq!(
        decode(&hello(1, b"\xff\xff\xff\xffab")),
        malformed(MalformedError::Wire(ReadError::Truncated {
            what: "subject",
            needed: 0xFFFF_FFFF,
            available: 2
        }))
    );
    // An entry too long to be a topic (the subject field elsewhere has a 1-byte length).
    let long = [&256u32.to_be_bytes()[..], &[b'x'; 256]].concat();
    assert_eq!(
        decode(&hello(1, &long)),
        malformed(MalformedError::Topic {
            what: "subject",
            error: TopicError::TooLong { len: 256 }
        })
    );
}

#[test]
fn content_limit() {
    let limits = Limits::DEFAULT.with_max_content(4);
    assert!(Message::decode(&record(b"1234"), &limits).is_ok());
    assert_eq!(
        Message::decode(&record(b"12345"), &limits),
        Err(DecodeError::Limit(LimitError::ContentTooLarge {
            len: 5,
            max: 4
        }))
    );
}

#[test]
fn beacons() {
    let d = |frames: &[&[u8]]| {
        let frames: Vec<Bytes> = frames.iter().map(|f| Bytes::copy_from_slice(f)).collect();
        BeaconMessage::decode(&frames, &Limits::DEFAULT)
    };
    let port = |text: &str| {
        Err(DecodeError::Malformed(MalformedError::Port {
            text: text.to_owned(),
        }))
    };
    assert!(d(&[b"B", P, b"127.0.0.1", b"49152"]).is_ok());
    assert!(d(&[b"B", P, b"127.0.0.1", b"0"]).is_ok());
    assert_eq!(d(&[b"B", P, b"127.0.0.1", b"65536"]), port("65536"));
    assert_eq!(d(&[b"B", P, b"127.0.0.1", b"049152"]), port("049152"));
    assert_eq!(d(&[b"B", P, b"127.0.0.1", b""]), port(""));
    assert_eq!(d(&[b"B", P, b"127.0.0.1", b"+1"]), port("+1"));
    assert_eq!(
        d(&[b"B", P, b"\xff", b"1"]),
        Err(DecodeError::Malformed(MalformedError::NotUtf8 {
            what: "host"
        }))
    );
    let long = vec![b'h'; 1025];
    assert_eq!(
        d(&[b"B", P, &long]),
        Err(DecodeError::Limit(LimitError::BeaconFieldTooLong {
            what: "endpoint",
            len: 1025,
            max: 1024
        }))
    );
    assert_eq!(
        d(&[b"B", P]),
        Err(DecodeError::Malformed(MalformedError::FrameCount {
            kind: "beacon",
            expected: 4,
            got: 2
        }))
    );
    assert_eq!(
        d(&[b"W", b""]),
        Err(DecodeError::Malformed(MalformedError::FrameCount {
            kind: "welcome",
            expected: 1,
            got: 2
        }))
    );
    assert_eq!(
        d(&[b"X"]),
        Err(DecodeError::Malformed(MalformedError::UnknownBeacon {
            len: 1
        }))
    );
    assert_eq!(
        d(&[]),
        Err(DecodeError::Malformed(MalformedError::NoFrames))
    );
    assert_eq!(
        d(&[b"B", &P[..31], b"tcp://a:1"]),
        Err(DecodeError::Malformed(MalformedError::Address {
            what: "beacon UUID",
            len: 31
        }))
    );
}

/// DIRECT-MISSING (extension), byte by byte; an empty range is malformed.
#[test]
fn direct_missing_bytes_and_empty_range() {
    let bytes = |from: u64, to: u64| {
        frame(&[
            b"N",
            C,
            b"\x00\x01\x20",
            P,
            b"\x06golden",
            &from.to_be_bytes(),
            &to.to_be_bytes(),
            b"\x20",
            b"FEDCBA9876543210FEDCBA9876543210",
        ])
    };
    let Ok(Message::DirectMissing(m)) = decode(&[bytes(5000, 5001)]) else {
        panic!("not a DIRECT-MISSING");
    };
    assert_eq!((m.from, m.to_offset), (5000, 5001));
    assert_eq!(m.to.to_hex(), *C);
    assert_eq!(m.producer.to_hex(), *P);
    assert_eq!(m.store.to_hex(), *b"FEDCBA9876543210FEDCBA9876543210");
    assert_eq!(m.topic.as_bytes(), b"golden");
    assert_eq!(Message::DirectMissing(m).to_frames()[0], bytes(5000, 5001));
    assert_eq!(
        decode(&[bytes(7, 7)]),
        malformed(MalformedError::EmptyRange { from: 7, to: 7 })
    );
    assert_eq!(
        decode(&[bytes(8, 7)]),
        malformed(MalformedError::EmptyRange { from: 8, to: 7 })
    );
}

/// STORE-REFUSAL (extension), byte by byte; reasons by code, unknown ones kept; the detail
/// cut at 255 bytes on a character boundary.
#[test]
fn store_refusal_bytes() {
    let bytes = frame(&[
        b"X",
        P,
        b"\x00\x01\x20",
        b"FEDCBA9876543210FEDCBA9876543210",
        b"\x06golden",
        &7u64.to_be_bytes(),
        b"\x02",
        b"\x09disk full",
    ]);
    let Ok(Message::StoreRefusal(r)) = decode(std::slice::from_ref(&bytes)) else {
        panic!("not a STORE-REFUSAL");
    };
    assert_eq!(r.producer.to_hex(), *P);
    assert_eq!(r.store.to_hex(), *b"FEDCBA9876543210FEDCBA9876543210");
    assert_eq!(
        (r.sequence, r.reason),
        (7, dafka_proto::RefusalReason::Failed)
    );
    assert_eq!(r.detail_text(), "disk full");
    assert_eq!(Message::StoreRefusal(r.clone()).to_frames()[0], bytes);
    for (code, reason) in [
        (1, dafka_proto::RefusalReason::TooLarge),
        (2, dafka_proto::RefusalReason::Failed),
        (9, dafka_proto::RefusalReason::Other(9)),
    ] {
        assert_eq!(dafka_proto::RefusalReason::from_code(code), reason);
        assert_eq!(reason.code(), code);
    }
    let long = "é".repeat(200);
    let detail = dafka_proto::StoreRefusal::detail_of(&long);
    assert_eq!(detail.len(), 254, "cut at a character boundary");
    assert!(std::str::from_utf8(&detail).is_ok());
}

#[test]
fn group_offset_messages_bytes_and_limits() {
    use dafka_proto::{GroupOffset, NodeId, OffsetCommit, Topic, group::GroupName};
    // OFFSET-COMMIT of group "bill" by member C: request 7, no seek, one offset: topic
    // "golden", partition P, next offset 42.
    let entry = [&b"\x06golden\x20"[..], P, &42u64.to_be_bytes()].concat();
    let commit = |flags: u8, count: u32, entries: &[u8]| {
        vec![frame(&[
            b"Pbill\x00\x01\x20",
            C,
            &7u64.to_be_bytes(),
            &[flags],
            &count.to_be_bytes(),
            entries,
        ])]
    };
    let expected = OffsetCommit {
        group: GroupName::new("bill").unwrap(),
        member: NodeId::from_hex(C).unwrap(),
        request: 7,
        seek: false,
        offsets: vec![GroupOffset {
            topic: Topic::try_from("golden").unwrap(),
            partition: NodeId::from_hex(P).unwrap(),
            offset: 42,
        }],
    };
    assert_eq!(decode(&commit(0, 1, &entry)), Ok(expected.clone().into()));
    assert_eq!(
        Message::from(expected).to_frames(),
        commit(0, 1, &entry),
        "the documented bytes"
    );
    assert!(matches!(
        decode(&commit(1, 1, &entry)),
        Ok(Message::OffsetCommit(OffsetCommit { seek: true, .. }))
    ));
    assert_eq!(
        decode(&commit(2, 1, &entry)),
        malformed(MalformedError::GroupFlags {
            kind: "OFFSET-COMMIT",
            flags: 2
        })
    );
    assert_eq!(
        decode(&commit(0, 0, b"")),
        malformed(MalformedError::NoOffsets)
    );
    // A huge count is refused by the limit before any list is allocated.
    assert_eq!(
        decode(&commit(0, u32::MAX, b"")),
        Err(DecodeError::Limit(LimitError::TooManyOffsets {
            kind: "OFFSET-COMMIT",
            count: u32::MAX,
            max: 4096
        }))
    );
    // Within the limit, but the entries are not there.
    assert!(matches!(
        decode(&commit(0, 4096, &entry)),
        Err(DecodeError::Malformed(MalformedError::Wire(_)))
    ));
    // An empty group name.
    let mut empty = commit(0, 1, &entry);
    empty[0] = frame(&[b"P\x00\x01\x20", C, &[0; 9], &1u32.to_be_bytes(), &entry]);
    assert!(matches!(
        decode(&empty),
        Err(DecodeError::Malformed(MalformedError::GroupName {
            kind: "OFFSET-COMMIT",
            ..
        }))
    ));
    // COMMITTED-QUERY for every offset of the group, and DIRECT-COMMITTED answering it
    // from store P with the group name as a string field.
    let query = frame(&[
        b"Ibill\x00\x01\x20",
        C,
        &9u64.to_be_bytes(),
        &0u32.to_be_bytes(),
    ]);
    assert!(matches!(
        decode(&[query]),
        Ok(Message::CommittedQuery(q)) if q.partitions.is_empty() && q.request == 9
    ));
    let answer = frame(&[
        b"U",
        C,
        b"\x00\x01\x20",
        P,
        &9u64.to_be_bytes(),
        b"\x04bill",
        &1u32.to_be_bytes(),
        &entry,
    ]);
    assert!(matches!(
        decode(&[answer]),
        Ok(Message::DirectCommitted(d)) if d.offsets.len() == 1 && d.offsets[0].offset == 42
    ));
}

#[test]
fn groups_list_messages_bytes_and_limits() {
    use dafka_proto::{DirectGroups, GroupsQuery, NodeId, group::GroupName};
    // GROUPS-QUERY from consumer C, query 3; DIRECT-GROUPS from store P listing "audit" and
    // "bill".
    let query = frame(&[b"s", C, b"\x00\x01", &3u64.to_be_bytes()]);
    let expected = GroupsQuery {
        consumer: NodeId::from_hex(C).unwrap(),
        query: 3,
    };
    assert_eq!(
        decode(std::slice::from_ref(&query)),
        Ok(expected.clone().into())
    );
    assert_eq!(Message::from(expected).to_frames(), vec![query]);
    let names = |list: &[&[u8]]| {
        let mut out = (list.len() as u32).to_be_bytes().to_vec();
        for n in list {
            out.extend_from_slice(&(n.len() as u32).to_be_bytes());
            out.extend_from_slice(n);
        }
        out
    };
    let answer = |list: &[&[u8]]| {
        vec![frame(&[
            b"c",
            C,
            b"\x00\x01\x20",
            P,
            &3u64.to_be_bytes(),
            &names(list),
        ])]
    };
    let expected = DirectGroups {
        to: NodeId::from_hex(C).unwrap(),
        store: NodeId::from_hex(P).unwrap(),
        query: 3,
        groups: vec![
            GroupName::new("audit").unwrap(),
            GroupName::new("bill").unwrap(),
        ],
    };
    assert_eq!(
        decode(&answer(&[b"audit", b"bill"])),
        Ok(expected.clone().into())
    );
    assert_eq!(
        Message::from(expected).to_frames(),
        answer(&[b"audit", b"bill"]),
        "the documented bytes"
    );
    // An empty name is no group's.
    assert!(matches!(
        decode(&answer(&[b"audit", b""])),
        Err(DecodeError::Malformed(MalformedError::GroupName {
            kind: "DIRECT-GROUPS",
            ..
        }))
    ));
    // More names than the limit: refused before any list is reserved.
    let limits = Limits::DEFAULT.with_max_topics(1);
    assert!(matches!(
        Message::decode(&answer(&[b"audit", b"bill"]), &limits),
        Err(DecodeError::Limit(LimitError::TooManyTopics {
            kind: "DIRECT-GROUPS",
            count: 2,
            max: 1
        }))
    ));
}
