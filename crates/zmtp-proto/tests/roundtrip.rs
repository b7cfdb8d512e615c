//! Property tests: decode(encode(x)) == x for every codec, under arbitrary stream splits.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use dafka_zmtp_proto::{
    Command, Config, Connection, Error, Event, FRAME_OVERHEAD, Frame, FrameDecoder, GREETING_LEN,
    Greeting, Limits, Message, Metadata, SocketType, encode_message,
};
use proptest::collection::vec;
use proptest::prelude::*;

fn bytes(max: usize) -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..=max).prop_map(Bytes::from)
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (any::<bool>(), bytes(600)).prop_map(|(more, body)| Frame::Message { more, body }),
        bytes(600).prop_map(Frame::Command),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    vec(bytes(300), 1..6).prop_map(Message::from)
}

fn property_name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._+-]{1,40}"
}

fn metadata() -> impl Strategy<Value = Metadata> {
    vec((property_name(), bytes(300)), 0..6).prop_map(|props| {
        let mut m = Metadata::new();
        for (n, v) in props {
            m.insert(&n, v).unwrap();
        }
        m
    })
}

fn command() -> impl Strategy<Value = Command> {
    let known: [&[u8]; 6] = [
        b"READY",
        b"ERROR",
        b"SUBSCRIBE",
        b"CANCEL",
        b"PING",
        b"PONG",
    ];
    prop_oneof![
        metadata().prop_map(Command::Ready),
        bytes(255).prop_map(|reason| Command::Error { reason }),
        bytes(300).prop_map(Command::Subscribe),
        bytes(300).prop_map(Command::Cancel),
        (any::<u16>(), bytes(16)).prop_map(|(ttl_deciseconds, context)| Command::Ping {
            ttl_deciseconds,
            context
        }),
        bytes(16).prop_map(|context| Command::Pong { context }),
        (vec(any::<u8>(), 1..=255), bytes(300))
            .prop_filter("not a known name", move |(n, _)| !known.contains(&&n[..]))
            .prop_map(|(name, data)| Command::Unknown {
                name: Bytes::from(name),
                data
            }),
    ]
}

/// Feeds `wire` to `decoder` in chunks cut at `cuts`, collecting frames.
fn decode_split(
    decoder: &mut FrameDecoder,
    wire: &[u8],
    cuts: &[usize],
) -> Result<Vec<Frame>, Error> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
    points.sort_unstable();
    points.push(wire.len());
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut start = 0;
    for p in points {
        buf.extend_from_slice(&wire[start..p]);
        start = p;
        while let Some(f) = decoder.decode(&mut buf)? {
            out.push(f);
        }
    }
    assert!(buf.is_empty());
    Ok(out)
}

proptest! {
    #[test]
    fn frames_round_trip(frames in vec(frame(), 0..8), cuts in vec(any::<usize>(), 0..6)) {
        // Commands inside a multipart message are refused, so clear MORE before any command.
        let mut frames = frames;
        for i in 0..frames.len() {
            let next_is_command = matches!(frames.get(i + 1), Some(Frame::Command(_)) | None);
            if let Frame::Message { more, .. } = &mut frames[i]
                && next_is_command
            {
                *more = false;
            }
        }
        let mut wire = BytesMut::new();
        for f in &frames {
            f.encode(&mut wire);
        }
        let got = decode_split(&mut FrameDecoder::new(Limits::default()), &wire, &cuts).unwrap();
        prop_assert_eq!(got, frames);
    }

    #[test]
    fn messages_round_trip(msgs in vec(message(), 1..6), cuts in vec(any::<usize>(), 0..6)) {
        let mut wire = BytesMut::new();
        for m in &msgs {
            encode_message(m, &mut wire);
        }
        let frames = decode_split(&mut FrameDecoder::new(Limits::default()), &wire, &cuts).unwrap();
        let mut got = Vec::new();
        let mut cur = Message::new();
        for f in frames {
            let Frame::Message { more, body } = f else { panic!("command frame") };
            cur.push(body);
            if !more {
                got.push(std::mem::take(&mut cur));
            }
        }
        prop_assert!(cur.is_empty());
        prop_assert_eq!(got, msgs);
    }

    #[test]
    fn commands_round_trip(cmd in command()) {
        let mut wire = BytesMut::new();
        cmd.encode(&mut wire).unwrap();
        prop_assert_eq!(wire.len(), cmd.body_len() + if cmd.body_len() > 255 { 9 } else { 2 });
        let Some(Frame::Command(body)) = FrameDecoder::new(Limits::default()).decode(&mut wire).unwrap()
        else { panic!("not a command frame") };
        prop_assert!(wire.is_empty());
        prop_assert_eq!(Command::decode(body).unwrap(), cmd);
    }

    #[test]
    fn metadata_round_trips(m in metadata()) {
        let mut wire = BytesMut::new();
        m.encode(&mut wire);
        prop_assert_eq!(wire.len(), m.encoded_len());
        let got = Metadata::decode(wire.freeze()).unwrap();
        for (name, value) in m.iter() {
            prop_assert_eq!(got.get(&name.to_ascii_uppercase()), Some(value));
        }
        prop_assert_eq!(got, m);
    }

    #[test]
    fn greeting_round_trips(
        major in 3u8..,
        minor in any::<u8>(),
        mechanism in any::<[u8; 20]>(),
        as_server in any::<bool>(),
    ) {
        let g = Greeting { major, minor, mechanism, as_server };
        let mut wire = BytesMut::new();
        g.encode(&mut wire);
        prop_assert_eq!(wire.len(), GREETING_LEN);
        for cut in 0..GREETING_LEN {
            prop_assert_eq!(Greeting::decode(&wire[..cut]), Ok(None));
        }
        prop_assert_eq!(Greeting::decode(&wire), Ok(Some(g)));
    }

    #[test]
    fn decoder_output_stays_within_limits(
        input in vec(any::<u8>(), 0..2000),
        max_frame in 0u64..300,
        max_message in 0u64..1000,
    ) {
        let limits = Limits::new(max_frame, max_message);
        let mut dec = FrameDecoder::new(limits);
        let mut buf = BytesMut::from(&input[..]);
        let mut cost = 0u64;
        while let Ok(Some(f)) = dec.decode(&mut buf) {
            match f {
                Frame::Message { more, body } => {
                    prop_assert!(body.len() as u64 <= max_frame);
                    cost += body.len() as u64 + FRAME_OVERHEAD;
                    prop_assert!(cost <= max_message);
                    if !more {
                        cost = 0;
                    }
                }
                Frame::Command(body) => {
                    prop_assert!(body.len() as u64 <= limits.max_command_size());
                }
            }
        }
    }

    #[test]
    fn connection_pair_delivers_everything(
        msgs in vec(message(), 1..8),
        chunk in 1usize..200,
    ) {
        let now = Instant::now();
        let mut a = Connection::new(Config::new(SocketType::Dealer), now);
        let mut b = Connection::new(Config::new(SocketType::Router), now);
        let mut wire_ab = BytesMut::new();
        let mut wire_ba = BytesMut::new();
        let mut handshake = || -> Result<(), Error> {
            for _ in 0..4 {
                a.poll_transmit(&mut wire_ab);
                b.poll_transmit(&mut wire_ba);
                b.handle_input(&mut wire_ab, now)?;
                a.handle_input(&mut wire_ba, now)?;
            }
            Ok(())
        };
        handshake().unwrap();
        prop_assert!(a.is_ready() && b.is_ready());
        assert!(matches!(b.poll_event(), Some(Event::Ready { .. })));
        let mut wire = BytesMut::new();
        for m in &msgs {
            a.send_message(m, &mut wire).unwrap();
        }
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for piece in wire.chunks(chunk) {
            buf.extend_from_slice(piece);
            b.handle_input(&mut buf, now).unwrap();
            while let Some(e) = b.poll_event() {
                let Event::Message(m) = e else { panic!("unexpected {e:?}") };
                got.push(m);
            }
        }
        prop_assert_eq!(got, msgs);
    }

    /// 29/PUBSUB over ZMTP 3.0 has no SUBSCRIBE/CANCEL commands: a subscription is the
    /// one-frame message `0x01 + prefix`, a cancellation `0x00 + prefix`.
    #[test]
    fn subscriptions_to_a_3_0_peer_decode_as_flag_messages(
        subs in vec((any::<bool>(), bytes(300)), 1..8),
    ) {
        let now = Instant::now();
        let mut conn = Connection::new(Config::new(SocketType::Sub), now);
        let mut greeting = [0u8; GREETING_LEN];
        greeting[0] = 0xFF;
        greeting[8] = 0x01;
        greeting[9] = 0x7F;
        greeting[10] = 0x03; // major
        greeting[11] = 0x00; // minor: ZMTP 3.0
        greeting[12..16].copy_from_slice(b"NULL");
        let mut wire = BytesMut::from(&greeting[..]);
        wire.extend_from_slice(b"\x04\x19\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB");
        conn.handle_input(&mut wire, now).unwrap();
        prop_assert_eq!(conn.peer_version(), Some((3, 0)));
        conn.poll_transmit(&mut BytesMut::new());
        let mut out = BytesMut::new();
        for (subscribe, prefix) in &subs {
            let cmd = if *subscribe {
                Command::Subscribe(prefix.clone())
            } else {
                Command::Cancel(prefix.clone())
            };
            conn.send_command(&cmd, &mut out).unwrap();
        }
        let mut dec = FrameDecoder::new(Limits::default());
        for (subscribe, prefix) in &subs {
            let frame = dec.decode(&mut out).unwrap().expect("a whole frame");
            let mut body = vec![u8::from(*subscribe)];
            body.extend_from_slice(prefix);
            prop_assert_eq!(frame, Frame::Message { more: false, body: Bytes::from(body) });
        }
        prop_assert!(out.is_empty());
    }

    #[test]
    fn connection_survives_arbitrary_input(
        input in vec(any::<u8>(), 0..400),
        with_greeting in any::<bool>(),
        chunk in 1usize..64,
    ) {
        let now = Instant::now();
        let mut c = Connection::new(Config::new(SocketType::Pair), now);
        let mut wire = Vec::new();
        if with_greeting {
            let mut g = BytesMut::new();
            Greeting::new("NULL", false).encode(&mut g);
            wire.extend_from_slice(&g);
        }
        wire.extend_from_slice(&input);
        let mut buf = BytesMut::new();
        for piece in wire.chunks(chunk) {
            buf.extend_from_slice(piece);
            if c.handle_input(&mut buf, now).is_err() {
                prop_assert!(c.is_closed());
                break;
            }
        }
        let mut out = BytesMut::new();
        c.poll_transmit(&mut out);
        prop_assert!(out.len() >= GREETING_LEN);
    }
}
