//! Arbitrary bytes into a `Connection`, in arbitrary chunks, with the virtual clock advancing.
//!
//! Input: byte 0 picks our socket type (low 4 bits) and whether a valid NULL greeting is
//! prepended (bit 7, to get past the greeting quickly); byte 1 the chunk size; the rest is the
//! peer's stream. Invariants: no panic; every surfaced message is within the limits; an error
//! closes the connection for good; heartbeats never surface as events.
#![no_main]

use std::time::{Duration, Instant};

use bytes::BytesMut;
use dafka_zmtp_proto::{
    CallerError, Config, Connection, Error, Event, Greeting, Heartbeat, Limits, SocketType,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [a, b, stream @ ..] = data else {
        return;
    };
    let socket_type = SocketType::ALL[usize::from(a & 0x0F) % SocketType::ALL.len()];
    let mut config = Config::new(socket_type);
    config.limits = Limits::new(4096, 16384);
    config.heartbeat = Some(Heartbeat::new(Duration::from_millis(300)));
    let start = Instant::now();
    let mut conn = Connection::new(config.clone(), start);
    let mut wire = Vec::new();
    if a & 0x80 != 0 {
        let mut g = BytesMut::new();
        Greeting::new("NULL", false).encode(&mut g);
        wire.extend_from_slice(&g);
    }
    wire.extend_from_slice(stream);
    let chunk = usize::from(*b) + 1;
    let mut buf = BytesMut::new();
    let mut out = BytesMut::new();
    for (i, piece) in wire.chunks(chunk).enumerate() {
        let now = start + Duration::from_millis(100 * i as u64);
        buf.extend_from_slice(piece);
        let result = conn
            .handle_input(&mut buf, now)
            .and_then(|()| conn.handle_timeout(now));
        while let Some(event) = conn.poll_event() {
            match event {
                Event::Message(m) => {
                    assert_eq!(config.limits.check_message(&m), Ok(()));
                }
                Event::Ready {
                    peer_socket_type, ..
                } => {
                    assert!(socket_type.is_compatible(peer_socket_type));
                }
                _ => {}
            }
        }
        conn.poll_transmit(&mut out);
        if result.is_err() {
            assert!(conn.is_closed());
            assert_eq!(
                conn.handle_input(&mut buf, now),
                Err(Error::Caller(CallerError::Closed))
            );
            break;
        }
    }
});
