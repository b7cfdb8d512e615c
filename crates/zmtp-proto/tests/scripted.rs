//! A `Connection` against scripted peer bytes: what libzmq 4.3.5 puts on the wire, and what
//! broken or foreign peers send.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use dafka_zmtp_proto::{
    CallerError, Command, Config, Connection, Error, Event, HANDSHAKE_FRAME_MAX, LimitError,
    MalformedError, Message, PeerError, SocketType,
};

/// The greeting every libzmq 4.3.5 socket sends with the NULL mechanism.
const LIBZMQ_GREETING: [u8; 64] = {
    let mut g = [0u8; 64];
    g[0] = 0xFF;
    g[8] = 0x01;
    g[9] = 0x7F;
    g[10] = 0x03;
    g[11] = 0x01;
    g[12] = b'N';
    g[13] = b'U';
    g[14] = b'L';
    g[15] = b'L';
    g
};

/// READY of a libzmq 4.3.5 DEALER without a routing id.
const LIBZMQ_DEALER_READY: &[u8] =
    b"\x04\x29\x05READY\x0bSocket-Type\x00\x00\x00\x06DEALER\x08Identity\x00\x00\x00\x00";
/// READY of a libzmq 4.3.5 ROUTER (ROUTER sends an empty Identity too).
const LIBZMQ_ROUTER_READY: &[u8] =
    b"\x04\x29\x05READY\x0bSocket-Type\x00\x00\x00\x06ROUTER\x08Identity\x00\x00\x00\x00";
/// READY of a libzmq 4.3.5 SUB (no Identity).
const LIBZMQ_SUB_READY: &[u8] = b"\x04\x19\x05READY\x0bSocket-Type\x00\x00\x00\x03SUB";

fn greeting_with(major: u8, minor: u8, mechanism: &[u8]) -> Vec<u8> {
    let mut g = LIBZMQ_GREETING.to_vec();
    g[10] = major;
    g[11] = minor;
    g[12..32].fill(0);
    g[12..12 + mechanism.len()].copy_from_slice(mechanism);
    g
}

fn feed(conn: &mut Connection, bytes: &[u8]) -> Result<Vec<Event>, Error> {
    let mut buf = BytesMut::from(bytes);
    conn.handle_input(&mut buf, Instant::now())?;
    let mut events = Vec::new();
    while let Some(e) = conn.poll_event() {
        events.push(e);
    }
    Ok(events)
}

fn transmit(conn: &mut Connection) -> Vec<u8> {
    let mut out = BytesMut::new();
    conn.poll_transmit(&mut out);
    out.to_vec()
}

#[test]
fn our_dealer_sends_what_libzmq_dealer_sends() {
    let mut conn = Connection::new(Config::new(SocketType::Dealer), Instant::now());
    // The whole greeting goes out before anything is received.
    assert_eq!(transmit(&mut conn), LIBZMQ_GREETING);
    assert_eq!(transmit(&mut conn), b"");
    // READY goes out once the peer's greeting is accepted.
    assert_eq!(feed(&mut conn, &LIBZMQ_GREETING).unwrap(), vec![]);
    assert_eq!(transmit(&mut conn), LIBZMQ_DEALER_READY);
    let events = feed(&mut conn, LIBZMQ_ROUTER_READY).unwrap();
    assert!(matches!(
        &events[..],
        [Event::Ready {
            peer_socket_type: SocketType::Router,
            peer_identity,
            ..
        }] if peer_identity.is_empty()
    ));
    assert!(conn.is_ready());
}

#[test]
fn our_pub_talks_to_libzmq_sub() {
    let mut conn = Connection::new(Config::new(SocketType::Pub), Instant::now());
    transmit(&mut conn);
    let mut wire = LIBZMQ_GREETING.to_vec();
    wire.extend_from_slice(LIBZMQ_SUB_READY);
    wire.extend_from_slice(b"\x04\x0e\x09SUBSCRIBEnews");
    let events = feed(&mut conn, &wire).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[1], Event::Subscribe(Bytes::from_static(b"news")));
    // PUB sends no Identity.
    assert_eq!(
        transmit(&mut conn),
        b"\x04\x19\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB"
    );
}

#[test]
fn libzmq_stream_decodes_identically_at_every_split() {
    let mut wire = LIBZMQ_GREETING.to_vec();
    wire.extend_from_slice(LIBZMQ_DEALER_READY);
    wire.extend_from_slice(b"\x01\x00"); // empty delimiter, MORE
    wire.extend_from_slice(b"\x00\x05hello");
    wire.extend_from_slice(b"\x04\x07\x04PING\x00\x00"); // heartbeat: answered, not surfaced
    wire.extend_from_slice(b"\x02\x00\x00\x00\x00\x00\x00\x01\x00");
    wire.extend_from_slice(&[b'z'; 256]);
    let want_msgs = vec![
        Message::from(vec![Bytes::new(), Bytes::from_static(b"hello")]),
        Message::from(Bytes::from(vec![b'z'; 256])),
    ];
    for a in 0..=wire.len() {
        for b in (a..=wire.len()).step_by(7) {
            let now = Instant::now();
            let mut conn = Connection::new(Config::new(SocketType::Router), now);
            let mut buf = BytesMut::new();
            let mut events = Vec::new();
            for chunk in [&wire[..a], &wire[a..b], &wire[b..]] {
                buf.extend_from_slice(chunk);
                conn.handle_input(&mut buf, now).unwrap();
                while let Some(e) = conn.poll_event() {
                    events.push(e);
                }
            }
            assert!(buf.is_empty(), "split {a},{b}");
            assert_eq!(events.len(), 3, "split {a},{b}");
            let msgs: Vec<Message> = events
                .into_iter()
                .filter_map(|e| match e {
                    Event::Message(m) => Some(m),
                    _ => None,
                })
                .collect();
            assert_eq!(msgs, want_msgs, "split {a},{b}");
            assert!(transmit(&mut conn).ends_with(b"\x04\x05\x04PONG"));
        }
    }
}

#[test]
fn zmtp_3_0_peer_gets_subscriptions_as_messages() {
    let mut conn = Connection::new(Config::new(SocketType::Sub), Instant::now());
    transmit(&mut conn);
    let mut wire = greeting_with(3, 0, b"NULL");
    wire.extend_from_slice(b"\x04\x19\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB");
    feed(&mut conn, &wire).unwrap();
    assert_eq!(conn.peer_version(), Some((3, 0)));
    transmit(&mut conn);
    let mut out = BytesMut::new();
    conn.send_command(&Command::Subscribe(Bytes::from_static(b"ab")), &mut out)
        .unwrap();
    conn.send_command(&Command::Cancel(Bytes::from_static(b"ab")), &mut out)
        .unwrap();
    assert_eq!(&out[..], b"\x00\x03\x01ab\x00\x03\x00ab");
}

#[test]
fn zmtp_3_1_peer_gets_subscription_commands() {
    let mut conn = Connection::new(Config::new(SocketType::Sub), Instant::now());
    let mut wire = LIBZMQ_GREETING.to_vec();
    wire.extend_from_slice(b"\x04\x19\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB");
    feed(&mut conn, &wire).unwrap();
    transmit(&mut conn);
    let mut out = BytesMut::new();
    conn.send_command(&Command::Subscribe(Bytes::from_static(b"ab")), &mut out)
        .unwrap();
    assert_eq!(&out[..], b"\x04\x0c\x09SUBSCRIBEab");
}

#[test]
fn future_minor_and_major_versions_are_accepted() {
    for (major, minor) in [(3, 2), (4, 0), (0xFF, 0xFF)] {
        let mut conn = Connection::new(Config::new(SocketType::Pair), Instant::now());
        feed(&mut conn, &greeting_with(major, minor, b"NULL")).unwrap();
        assert_eq!(conn.peer_version(), Some((major, minor)));
    }
}

fn expect_failure(config: Config, wire: &[u8]) -> Error {
    let mut conn = Connection::new(config, Instant::now());
    let err = feed(&mut conn, wire).expect_err("should fail");
    assert!(conn.is_closed());
    // Whatever was decoded before the failure, foreign bytes never became a message.
    while let Some(e) = conn.poll_event() {
        assert!(!matches!(e, Event::Message(_)), "{e:?}");
    }
    err
}

#[test]
fn zmtp_1_and_2_peers_are_refused() {
    // A ZMTP 1.0 peer sends its identity frame straight away: its bytes never become messages.
    assert_eq!(
        expect_failure(Config::new(SocketType::Pair), b"\x01\x00\x06\x00hello"),
        PeerError::NotZmtp3 {
            byte0: 0x01,
            byte9: 0
        }
        .into()
    );
    assert_eq!(
        expect_failure(
            Config::new(SocketType::Pair),
            &greeting_with(1, 0, b"")[..11]
        ),
        PeerError::UnsupportedVersion { major: 1 }.into()
    );
}

#[test]
fn mechanism_mismatch_is_refused() {
    assert_eq!(
        expect_failure(
            Config::new(SocketType::Pair),
            &greeting_with(3, 1, b"PLAIN")
        ),
        PeerError::MechanismMismatch {
            ours: "NULL".into(),
            theirs: "PLAIN".into()
        }
        .into()
    );
    // Padding must match too: "NULL" followed by garbage is not NULL.
    let mut g = LIBZMQ_GREETING;
    g[20] = b'X';
    assert!(matches!(
        expect_failure(Config::new(SocketType::Pair), &g),
        Error::Peer(PeerError::MechanismMismatch { .. })
    ));
}

fn after_greeting(frame: &[u8]) -> Vec<u8> {
    let mut wire = LIBZMQ_GREETING.to_vec();
    wire.extend_from_slice(frame);
    wire
}

#[test]
fn handshake_accepts_only_ready() {
    let cfg = || Config::new(SocketType::Dealer);
    assert_eq!(
        expect_failure(cfg(), &after_greeting(b"\x04\x07\x04PING\x00\x00")),
        PeerError::UnexpectedDuringHandshake {
            expected: "READY",
            got: "PING".into()
        }
        .into()
    );
    assert_eq!(
        expect_failure(cfg(), &after_greeting(b"\x00\x02hi")),
        PeerError::UnexpectedDuringHandshake {
            expected: "READY",
            got: "a message frame".into()
        }
        .into()
    );
    assert_eq!(
        expect_failure(cfg(), &after_greeting(b"\x04\x0a\x09SUBSCRIBE")),
        PeerError::UnexpectedDuringHandshake {
            expected: "READY",
            got: "SUBSCRIBE".into()
        }
        .into()
    );
    assert_eq!(
        expect_failure(cfg(), &after_greeting(b"\x04\x0c\x05ERROR\x05nope!")),
        PeerError::ErrorCommand {
            reason: "nope!".into()
        }
        .into()
    );
}

#[test]
fn ready_must_carry_a_known_compatible_socket_type() {
    let cfg = || Config::new(SocketType::Dealer);
    let mut conn = Connection::new(cfg(), Instant::now());
    transmit(&mut conn);
    let err = feed(&mut conn, &after_greeting(b"\x04\x06\x05READY")).unwrap_err();
    assert_eq!(err, PeerError::MissingSocketType.into());
    // An ERROR follows our READY.
    let out = transmit(&mut conn);
    assert!(out.starts_with(LIBZMQ_DEALER_READY));
    assert_eq!(
        &out[LIBZMQ_DEALER_READY.len()..],
        b"\x04\x25\x05ERROR\x1einvalid Socket-Type for DEALER"
    );
    assert_eq!(
        expect_failure(
            cfg(),
            &after_greeting(b"\x04\x1c\x05READY\x0bSocket-Type\x00\x00\x00\x06CLIENT")
        ),
        PeerError::UnknownSocketType("CLIENT".into()).into()
    );
    assert_eq!(
        expect_failure(
            cfg(),
            &after_greeting(b"\x04\x19\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB")
        ),
        PeerError::IncompatibleSocketType {
            ours: "DEALER",
            theirs: "PUB"
        }
        .into()
    );
    // Property names and socket type values in any case are accepted.
    let mut conn = Connection::new(cfg(), Instant::now());
    let events = feed(
        &mut conn,
        &after_greeting(b"\x04\x19\x05READY\x0bsocket-type\x00\x00\x00\x03rep"),
    )
    .unwrap();
    assert!(matches!(
        &events[..],
        [Event::Ready {
            peer_socket_type: SocketType::Rep,
            ..
        }]
    ));
}

#[test]
fn malformed_ready_is_malformed() {
    assert_eq!(
        expect_failure(
            Config::new(SocketType::Dealer),
            &after_greeting(b"\x04\x0b\x05READY\x03abc\x00")
        ),
        MalformedError::Truncated {
            what: "property value length",
            needed: 4,
            available: 1
        }
        .into()
    );
}

#[test]
fn error_after_handshake_is_fatal_and_command_inside_message_is_refused() {
    let mut wire = after_greeting(LIBZMQ_ROUTER_READY);
    wire.extend_from_slice(b"\x04\x07\x05ERROR\x00");
    assert_eq!(
        expect_failure(Config::new(SocketType::Dealer), &wire),
        PeerError::ErrorCommand {
            reason: String::new()
        }
        .into()
    );
    let mut wire = after_greeting(LIBZMQ_ROUTER_READY);
    wire.extend_from_slice(b"\x01\x01a\x04\x05\x04PONG");
    assert_eq!(
        expect_failure(Config::new(SocketType::Dealer), &wire),
        PeerError::CommandInsideMessage.into()
    );
}

#[test]
fn calls_after_failure_report_closed() {
    let mut conn = Connection::new(Config::new(SocketType::Pair), Instant::now());
    assert!(feed(&mut conn, b"\x00").is_err());
    assert_eq!(
        feed(&mut conn, &LIBZMQ_GREETING),
        Err(CallerError::Closed.into())
    );
    assert_eq!(conn.handle_timeout(Instant::now()), Ok(()));
    assert_eq!(conn.poll_timeout(), None);
}

#[test]
fn messages_before_a_failure_remain_available() {
    let mut conn = Connection::new(Config::new(SocketType::Dealer), Instant::now());
    let mut wire = after_greeting(LIBZMQ_ROUTER_READY);
    wire.extend_from_slice(b"\x00\x02ok"); // a whole message
    wire.extend_from_slice(b"\x01\x04part"); // a partial one
    wire.push(0x80); // reserved flag bit: malformed
    let mut buf = BytesMut::from(&wire[..]);
    assert_eq!(
        conn.handle_input(&mut buf, Instant::now()),
        Err(MalformedError::ReservedFlags { flags: 0x80 }.into())
    );
    assert!(matches!(conn.poll_event(), Some(Event::Ready { .. })));
    assert_eq!(
        conn.poll_event(),
        Some(Event::Message(Message::from(&b"ok"[..])))
    );
    assert_eq!(conn.poll_event(), None);
}

/// Streams captured on 127.0.0.1 from libzmq 4.3.4 (`tests/capture_libzmq.py`).
mod captured_libzmq_4_3_4 {
    use super::*;
    use std::time::Duration;

    /// A REQ with `ZMQ_ROUTING_ID = "peer1"` and `ZMQ_METADATA = "X-App:demo"`: libzmq puts
    /// identity length + 1 (`06`) into padding byte 8, which must be ignored.
    #[test]
    fn req_with_identity_and_metadata() {
        let mut wire = LIBZMQ_GREETING.to_vec();
        wire[8] = 0x06;
        wire.extend_from_slice(
            b"\x04\x39\x05READY\x0bSocket-Type\x00\x00\x00\x03REQ\
              \x08Identity\x00\x00\x00\x05peer1\x05X-App\x00\x00\x00\x04demo",
        );
        let mut conn = Connection::new(Config::new(SocketType::Rep), Instant::now());
        let events = feed(&mut conn, &wire).unwrap();
        let [
            Event::Ready {
                peer_socket_type: SocketType::Req,
                peer_identity,
                peer_metadata,
            },
        ] = &events[..]
        else {
            panic!("{events:?}")
        };
        assert_eq!(&peer_identity[..], b"peer1");
        assert_eq!(
            peer_metadata.get("x-app").map(|v| &v[..]),
            Some(&b"demo"[..])
        );
    }

    /// A SUB with one subscription sends READY and the SUBSCRIBE command back to back.
    #[test]
    fn sub_ready_then_subscribe() {
        let mut wire = LIBZMQ_GREETING.to_vec();
        wire.extend_from_slice(LIBZMQ_SUB_READY);
        wire.extend_from_slice(b"\x04\x0e\x09SUBSCRIBEnews");
        let mut conn = Connection::new(Config::new(SocketType::Xpub), Instant::now());
        let events = feed(&mut conn, &wire).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[1], Event::Subscribe(Bytes::from_static(b"news")));
    }

    /// A DEALER with `ZMQ_HEARTBEAT_IVL = 100` and `ZMQ_HEARTBEAT_TTL = 3000` answers our PING
    /// (context "ctx") and pings with TTL 30 deciseconds and no context.
    #[test]
    fn dealer_heartbeats() {
        let start = Instant::now();
        let mut conn = Connection::new(Config::new(SocketType::Router), start);
        let mut wire = LIBZMQ_GREETING.to_vec();
        wire.extend_from_slice(LIBZMQ_DEALER_READY);
        wire.extend_from_slice(b"\x04\x08\x04PONGctx\x04\x07\x04PING\x00\x1e");
        let mut buf = BytesMut::from(&wire[..]);
        conn.handle_input(&mut buf, start).unwrap();
        assert!(matches!(conn.poll_event(), Some(Event::Ready { .. })));
        assert_eq!(conn.poll_event(), None, "heartbeats never surface");
        let out = transmit(&mut conn);
        assert!(out.ends_with(b"\x04\x05\x04PONG"));
        assert_eq!(conn.poll_timeout(), Some(start + Duration::from_secs(3)));
        assert_eq!(
            conn.handle_timeout(start + Duration::from_secs(3)),
            Err(PeerError::PingTtlExpired(Duration::from_secs(3)).into())
        );
    }
}

#[test]
fn handshake_frames_are_capped_at_64_kib_whatever_the_limits() {
    // A READY announcing 1 MiB fails at its header: nothing of the body is waited for.
    let mut wire = LIBZMQ_GREETING.to_vec();
    wire.push(0x06);
    wire.extend_from_slice(&(1u64 << 20).to_be_bytes());
    wire.extend_from_slice(b"\x05READY");
    assert_eq!(
        expect_failure(Config::new(SocketType::Dealer), &wire),
        LimitError::FrameTooLarge {
            size: 1 << 20,
            max: HANDSHAKE_FRAME_MAX
        }
        .into()
    );
    // Exactly 64 KiB is accepted (a READY with a large X- property) and the
    // full limits apply after the handshake.
    let mut ready = b"\x05READY\x0bSocket-Type\x00\x00\x00\x06DEALER".to_vec();
    let value_len = HANDSHAKE_FRAME_MAX as usize - ready.len() - 1 - 7 - 4;
    ready.push(7);
    ready.extend_from_slice(b"X-Large");
    ready.extend_from_slice(&(value_len as u32).to_be_bytes());
    ready.resize(HANDSHAKE_FRAME_MAX as usize, b'v');
    let mut wire = LIBZMQ_GREETING.to_vec();
    wire.push(0x06);
    wire.extend_from_slice(&(ready.len() as u64).to_be_bytes());
    wire.extend_from_slice(&ready);
    let big = vec![b'm'; 1 << 20];
    wire.push(0x02);
    wire.extend_from_slice(&(big.len() as u64).to_be_bytes());
    wire.extend_from_slice(&big);
    let mut conn = Connection::new(Config::new(SocketType::Dealer), Instant::now());
    let events = feed(&mut conn, &wire).unwrap();
    assert!(matches!(events[0], Event::Ready { .. }), "{events:?}");
    assert_eq!(events[1], Event::Message(Message::from(Bytes::from(big))));
}
