//! Exact errors for malformed, truncated and oversized input, and property round trips.

use bytes::Bytes;
use dafka_wire::ReadError;
use dafka_zre_proto::{
    Beacon, BeaconError, Body, DecodeError, Hello, LimitError, Limits, MalformedError, Message,
    ShortStr, Uuid,
};
use proptest::prelude::*;

fn decode(frames: &[&[u8]]) -> Result<Message, DecodeError> {
    decode_with(frames, &Limits::DEFAULT)
}

fn decode_with(frames: &[&[u8]], limits: &Limits) -> Result<Message, DecodeError> {
    let frames: Vec<Bytes> = frames.iter().map(|f| Bytes::copy_from_slice(f)).collect();
    Message::decode(&frames, limits)
}

fn malformed(e: MalformedError) -> Result<Message, DecodeError> {
    Err(DecodeError::Malformed(e))
}

fn limit(e: LimitError) -> Result<Message, DecodeError> {
    Err(DecodeError::Limit(e))
}

/// HELLO with `groups` announced and the group entries given.
fn hello_bytes(group_count: u32, groups: &[u8], header_count: u32, headers: &[u8]) -> Vec<u8> {
    [
        &b"\xAA\xA1\x01\x02\x00\x01\x05tcp:/"[..],
        &group_count.to_be_bytes(),
        groups,
        b"\x00\x01n",
        &header_count.to_be_bytes(),
        headers,
    ]
    .concat()
}

#[test]
fn header_errors() {
    assert_eq!(
        Message::decode(&[], &Limits::DEFAULT),
        malformed(MalformedError::NoFrames)
    );
    assert_eq!(
        decode(&[b"\xAA"]),
        malformed(MalformedError::Wire(ReadError::Truncated {
            what: "signature",
            needed: 2,
            available: 1
        }))
    );
    assert_eq!(
        decode(&[b"\xAA\xA0\x01\x01"]),
        malformed(MalformedError::Signature(0xAAA0))
    );
    assert_eq!(
        decode(&[b"\xAA\xA1\x0B\x02\x00\x01"]),
        malformed(MalformedError::UnknownId { id: 0x0B })
    );
    assert_eq!(
        decode(&[b"\xAA\xA1\x00\x02\x00\x01"]),
        malformed(MalformedError::UnknownId { id: 0x00 })
    );
    assert_eq!(
        decode(&[b"\xAA\xA1\x06\x01\x00\x01"]),
        malformed(MalformedError::Version { version: 0x01 })
    );
    assert_eq!(
        decode(&[b"\xAA\xA1\x06\x02\x00"]),
        malformed(MalformedError::Wire(ReadError::Truncated {
            what: "sequence",
            needed: 2,
            available: 1
        }))
    );
    // PING with a content frame; PING with a trailing byte.
    assert_eq!(
        decode(&[b"\xAA\xA1\x06\x02\x00\x01", b"x"]),
        malformed(MalformedError::FrameCount {
            kind: "PING",
            got: 2
        })
    );
    assert_eq!(
        decode(&[b"\xAA\xA1\x06\x02\x00\x01\x00"]),
        malformed(MalformedError::Wire(ReadError::TrailingBytes {
            what: "PING",
            count: 1
        }))
    );
    assert_eq!(
        decode(&[b"\xAA\xA1\x04\x02\x00\x01\x02\xFF\xFE\x01"]),
        malformed(MalformedError::NotUtf8 { what: "group" })
    );
    assert_eq!(
        decode(&[b"\xAA\xA1\x04\x02\x00\x01\x05ab"]),
        malformed(MalformedError::Wire(ReadError::Truncated {
            what: "group",
            needed: 5,
            available: 2
        }))
    );
}

#[test]
fn hello_limits_before_allocation() {
    let ok = hello_bytes(1, b"\x00\x00\x00\x01G", 1, b"\x01K\x00\x00\x00\x01V");
    let m = decode(&[&ok]).unwrap();
    let Body::Hello(h) = &m.body else {
        panic!("{m:?}")
    };
    assert_eq!(h.groups, ["G"]);
    assert_eq!(h.headers, [(ShortStr::new("K").unwrap(), "V".to_owned())]);
    // A count far over the limit is refused before the list exists.
    assert_eq!(
        decode(&[&hello_bytes(u32::MAX, b"", 0, b"")]),
        limit(LimitError::TooManyGroups {
            count: u32::MAX,
            max: Limits::DEFAULT.max_groups
        })
    );
    assert_eq!(
        decode_with(
            &[&hello_bytes(0, b"", 3, b"")],
            &Limits::DEFAULT.with_max_headers(2)
        ),
        limit(LimitError::TooManyHeaders { count: 3, max: 2 })
    );
    // A count within the limit but past the end of the frame is a truncation.
    assert!(matches!(
        decode(&[&hello_bytes(1000, b"", 0, b"")]),
        Err(DecodeError::Malformed(MalformedError::Wire(
            ReadError::Truncated { what: "group", .. }
        )))
    ));
    assert_eq!(
        decode_with(&[&ok], &Limits::DEFAULT.with_max_long_string(0)),
        limit(LimitError::StringTooLong {
            what: "group",
            len: 1,
            max: 0
        })
    );
    // An announced length over what the frame holds never allocates it.
    let huge = hello_bytes(1, b"\xFF\xFF\xFF\xFF", 0, b"");
    assert!(matches!(
        decode(&[&huge]),
        Err(DecodeError::Malformed(MalformedError::Wire(
            ReadError::Truncated { what: "group", .. }
        )))
    ));
}

#[test]
fn content_limits() {
    let limits = Limits::DEFAULT
        .with_max_content_frames(2)
        .with_max_content_bytes(4);
    let whisper: &[u8] = b"\xAA\xA1\x02\x02\x00\x05";
    assert!(decode_with(&[whisper, b"ab", b"cd"], &limits).is_ok());
    assert!(decode_with(&[whisper], &limits).is_ok());
    assert_eq!(
        decode_with(&[whisper, b"a", b"b", b"c"], &limits),
        limit(LimitError::TooManyFrames { count: 3, max: 2 })
    );
    assert_eq!(
        decode_with(&[whisper, b"abc", b"de"], &limits),
        limit(LimitError::ContentTooLarge { len: 5, max: 4 })
    );
}

#[test]
fn beacon_errors() {
    let good = Beacon::new(Uuid::from_bytes([7; 16]), 5670).encode();
    assert_eq!(good.len(), 22);
    assert_eq!(
        Beacon::decode(&good[..21]),
        Err(BeaconError::Size { len: 21 })
    );
    assert_eq!(Beacon::decode(&[]), Err(BeaconError::Size { len: 0 }));
    let mut bad = good.clone();
    bad[0] = b'z';
    assert_eq!(Beacon::decode(&bad), Err(BeaconError::Protocol));
    let mut v3_short = good.clone();
    v3_short[3] = 0x03;
    assert_eq!(
        Beacon::decode(&v3_short),
        Err(BeaconError::Version {
            version: 0x03,
            len: 22
        })
    );
    let mut v1_long = good.clone();
    v1_long.extend([0; 32]);
    assert_eq!(
        Beacon::decode(&v1_long),
        Err(BeaconError::Version {
            version: 0x01,
            len: 54
        })
    );
}

fn short_str() -> impl Strategy<Value = ShortStr> {
    "[a-zA-Z0-9:/._-]{0,40}".prop_map(|s| ShortStr::new(s).unwrap())
}

fn frames() -> impl Strategy<Value = Vec<Bytes>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..4)
        .prop_map(|v| v.into_iter().map(Bytes::from).collect())
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        (
            short_str(),
            prop::collection::vec("[A-Z]{0,20}", 0..4),
            any::<u8>(),
            short_str(),
            prop::collection::vec((short_str(), ".{0,30}"), 0..4)
        )
            .prop_map(|(endpoint, groups, status, name, headers)| {
                Body::Hello(Hello {
                    endpoint,
                    groups,
                    status,
                    name,
                    headers,
                })
            }),
        frames().prop_map(|content| Body::Whisper { content }),
        (short_str(), frames()).prop_map(|(group, content)| Body::Shout { group, content }),
        (short_str(), any::<u8>()).prop_map(|(group, status)| Body::Join { group, status }),
        (short_str(), any::<u8>()).prop_map(|(group, status)| Body::Leave { group, status }),
        Just(Body::Ping),
        Just(Body::PingOk),
        (short_str(), short_str())
            .prop_map(|(group, challenger)| Body::Elect { group, challenger }),
        (short_str(), short_str()).prop_map(|(group, leader)| Body::Leader { group, leader }),
        Just(Body::Goodbye),
    ]
}

proptest! {
    #[test]
    fn message_round_trip(sequence in any::<u16>(), body in body()) {
        let m = Message { sequence, body };
        let frames = m.to_frames();
        prop_assert_eq!(frames[0][3], 0x02);
        prop_assert_eq!(Message::decode(&frames, &Limits::DEFAULT), Ok(m));
    }

    #[test]
    fn beacon_round_trip(uuid in any::<[u8; 16]>(), port in any::<u16>(), key in any::<Option<[u8; 32]>>()) {
        let b = Beacon { uuid: Uuid::from_bytes(uuid), port, curve_key: key };
        let bytes = b.encode();
        prop_assert_eq!(bytes.len(), if key.is_some() { 54 } else { 22 });
        prop_assert_eq!(Beacon::decode(&bytes), Ok(b));
    }

    /// Any prefix of a valid header frame fails cleanly, never panics.
    #[test]
    fn truncations_fail(sequence in any::<u16>(), body in body(), cut in any::<prop::sample::Index>()) {
        let frames = Message { sequence, body }.to_frames();
        let len = cut.index(frames[0].len());
        let mut short = frames.clone();
        short[0] = frames[0].slice(..len);
        prop_assert!(Message::decode(&short, &Limits::DEFAULT).is_err());
    }
}
