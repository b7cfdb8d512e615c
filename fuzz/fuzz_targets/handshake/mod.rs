//! The harness the four security handshake targets share: our `Connection` with a PLAIN or
//! CURVE mechanism against a peer that is nothing but the fuzz input.
//!
//! Input: byte 0 picks our socket type (low 4 bits) and whether a valid greeting for the
//! mechanism (with the peer's as-server flag) is prepended (bit 7, to get past the greeting);
//! byte 1 the chunk size - 1; the rest is the peer's stream, delivered in chunks with the
//! virtual clock advancing 100 ms per chunk.
//!
//! Invariants: no panic; nothing reaches the application from a peer that did not
//! authenticate (`authenticated == false`: no `Ready`, no message, no subscription, ever);
//! otherwise `Ready` only for a compatible peer, and no message before it, every message
//! within the limits; the bytes left in the buffer after a successful call are one partial
//! unit, never more than a greeting or a handshake frame (`HANDSHAKE_FRAME_MAX` + 9 header
//! bytes): nothing the peer announces is buffered past the handshake limit; our replies stay
//! small (no amplification: at most 2 KiB in all before `Ready`); an error closes the
//! connection for good.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use dafka_zmtp_proto::{
    CallerError, Config, Connection, Error, Event, GREETING_LEN, Greeting, HANDSHAKE_FRAME_MAX,
    Limits, MechanismConfig, SocketType,
};

/// Largest frame header: flags byte and an 8-byte size.
const MAX_HEADER: usize = 9;
/// Most bytes a handshake may make us send before `Ready`: greeting, HELLO/WELCOME (200/170),
/// INITIATE with our metadata, READY, ERROR.
const MAX_HANDSHAKE_OUT: usize = 2048;

pub fn run(
    data: &[u8],
    mechanism: MechanismConfig,
    name: &str,
    peer_is_server: bool,
    authenticated: bool,
) {
    let [a, b, stream @ ..] = data else {
        return;
    };
    let socket_type = SocketType::ALL[usize::from(a & 0x0F) % SocketType::ALL.len()];
    let mut config = Config::new(socket_type);
    config.limits = Limits::new(4096, 16384);
    config.mechanism = mechanism;
    config.peer_address = "127.0.0.1:1".to_owned();
    let start = Instant::now();
    let mut conn = Connection::new(config.clone(), start);
    let mut wire = Vec::new();
    if a & 0x80 != 0 {
        let mut g = BytesMut::new();
        Greeting::new(name, peer_is_server).encode(&mut g);
        wire.extend_from_slice(&g);
    }
    wire.extend_from_slice(stream);
    let chunk = usize::from(*b) + 1;
    let (mut buf, mut out) = (BytesMut::new(), BytesMut::new());
    let mut ready = false;
    let leftover_max = GREETING_LEN.max(HANDSHAKE_FRAME_MAX as usize + MAX_HEADER);
    for (i, piece) in wire.chunks(chunk).enumerate() {
        let now = start + Duration::from_millis(100 * i as u64);
        buf.extend_from_slice(piece);
        let result = conn
            .handle_input(&mut buf, now)
            .and_then(|()| conn.handle_timeout(now));
        while let Some(event) = conn.poll_event() {
            assert!(
                authenticated,
                "an unauthenticated peer reached the application: {event:?}"
            );
            match event {
                Event::Ready {
                    peer_socket_type, ..
                } => {
                    assert!(!ready, "Ready twice");
                    assert!(socket_type.is_compatible(peer_socket_type));
                    ready = true;
                }
                Event::Message(m) => {
                    assert!(ready, "a message before Ready");
                    assert_eq!(config.limits.check_message(&m), Ok(()));
                }
                Event::Subscribe(_) | Event::Cancel(_) => assert!(ready),
                other => panic!("unexpected event {other:?}"),
            }
        }
        conn.poll_transmit(&mut out);
        if !ready {
            assert!(
                out.len() <= MAX_HANDSHAKE_OUT,
                "{} bytes sent during the handshake",
                out.len()
            );
            if result.is_ok() {
                assert!(
                    buf.len() < leftover_max,
                    "{} bytes left buffered during the handshake",
                    buf.len()
                );
            }
        }
        if result.is_err() {
            assert!(conn.is_closed());
            assert_eq!(
                conn.handle_input(&mut buf, now),
                Err(Error::Caller(CallerError::Closed))
            );
            break;
        }
    }
}
