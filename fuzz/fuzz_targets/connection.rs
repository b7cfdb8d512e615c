//! Arbitrary bytes into a `Connection`, in arbitrary chunks, with the virtual clock advancing,
//! decoded the way the driver (`dafka-zmtp`'s `conn.rs`) decodes them, and checked against the
//! plain event path.
//!
//! Input: byte 0 picks our socket type (low 4 bits), the driver's decode budget (bits 4-6:
//! 0 = unbounded, else that many messages per call, as the room in a receive queue would cap
//! it) and whether a valid NULL greeting is prepended (bit 7, to get past the greeting
//! quickly); byte 1 the chunk size; the rest is the peer's stream.
//!
//! Two connections get the same chunks at the same times. The reference one goes through
//! `handle_input` and its event queue. The other is driven as the driver does: `handle_input`
//! until `Ready` was polled, then (except PUB/XPUB, which keep the event path)
//! `handle_input_into` with the budget, called again without new bytes while it fills the
//! budget (the driver decodes what it left in the buffer once there is room), with
//! `frame_len_hint` asked before every read.
//!
//! Invariants: no panic; both paths surface the same `Ready` and messages in the same order,
//! and the same subscriptions and cancellations in the same order (the two are not ordered
//! against each other on the driver's path, where only PUB and XPUB act on them, and those
//! take the event path), transmit the same bytes and fail at the same point; `handle_input_into`
//! never exceeds its budget; every message is within the limits; a frame length hint is within
//! the limits; `Ready` only for compatible peers; an error closes the connection for good;
//! heartbeats never surface as events.
#![no_main]

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use dafka_zmtp_proto::{
    CallerError, Config, Connection, Error, Event, Greeting, Heartbeat, Limits, Message, SocketType,
};
use libfuzzer_sys::fuzz_target;

/// The largest frame header: flags byte and an 8-byte size.
const MAX_HEADER: usize = 9;

/// What a connection surfaced: `Ready` and messages in order, and subscription commands in
/// order.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    traffic: Vec<Traffic>,
    subscriptions: Vec<(bool, Bytes)>,
}

#[derive(Debug, PartialEq)]
enum Traffic {
    Ready(SocketType, Bytes),
    Message(Message),
}

/// Moves queued events into `seen`, checking each one. Returns whether `Ready` was among them.
fn poll_events(conn: &mut Connection, config: &Config, seen: &mut Seen) -> bool {
    let mut ready = false;
    while let Some(event) = conn.poll_event() {
        match event {
            Event::Message(m) => {
                assert_eq!(config.limits.check_message(&m), Ok(()));
                seen.traffic.push(Traffic::Message(m));
            }
            Event::Ready {
                peer_socket_type,
                peer_identity,
                ..
            } => {
                assert!(config.socket_type.is_compatible(peer_socket_type));
                ready = true;
                seen.traffic
                    .push(Traffic::Ready(peer_socket_type, peer_identity));
            }
            Event::Subscribe(p) => seen.subscriptions.push((true, p)),
            Event::Cancel(p) => seen.subscriptions.push((false, p)),
            // Heartbeats and anything else stay inside the state machine.
            other => panic!("unexpected event {other:?}"),
        }
    }
    ready
}

fuzz_target!(|data: &[u8]| {
    let [a, b, stream @ ..] = data else {
        return;
    };
    let socket_type = SocketType::ALL[usize::from(a & 0x0F) % SocketType::ALL.len()];
    let budget = match usize::from((a >> 4) & 0x07) {
        0 => usize::MAX,
        n => n,
    };
    // PUB and XPUB keep the event path in the driver (a message may be a subscription).
    let event_path_only = matches!(socket_type, SocketType::Pub | SocketType::Xpub);
    let mut config = Config::new(socket_type);
    config.limits = Limits::new(4096, 16384);
    config.heartbeat = Some(Heartbeat::new(Duration::from_millis(300)));
    let hint_max = usize::try_from(config.limits.max_command_size()).unwrap() + MAX_HEADER;
    let start = Instant::now();
    let mut reference = Connection::new(config.clone(), start);
    let mut driven = Connection::new(config.clone(), start);
    let mut wire = Vec::new();
    if a & 0x80 != 0 {
        let mut g = BytesMut::new();
        Greeting::new("NULL", false).encode(&mut g);
        wire.extend_from_slice(&g);
    }
    wire.extend_from_slice(stream);
    let chunk = usize::from(*b) + 1;
    let (mut ref_buf, mut ref_out, mut ref_seen) =
        (BytesMut::new(), BytesMut::new(), Seen::default());
    let (mut buf, mut out, mut seen) = (BytesMut::new(), BytesMut::new(), Seen::default());
    let mut attached = false;
    for (i, piece) in wire.chunks(chunk).enumerate() {
        let now = start + Duration::from_millis(100 * i as u64);

        ref_buf.extend_from_slice(piece);
        let ref_result = reference
            .handle_input(&mut ref_buf, now)
            .and_then(|()| reference.handle_timeout(now));
        poll_events(&mut reference, &config, &mut ref_seen);
        reference.poll_transmit(&mut ref_out);

        if let Some(len) = driven.frame_len_hint(&buf) {
            assert!(len <= hint_max, "frame length hint {len} over the limits");
        }
        buf.extend_from_slice(piece);
        let result = loop {
            let mut filled = false;
            let step = if attached && !event_path_only {
                let mut n = 0;
                driven
                    .handle_input_into(&mut buf, now, budget, |m| {
                        assert_eq!(config.limits.check_message(&m), Ok(()));
                        n += 1;
                        seen.traffic.push(Traffic::Message(m));
                    })
                    .map(|count| {
                        assert_eq!(count, n);
                        assert!(count <= budget);
                        filled = count == budget;
                    })
            } else {
                driven.handle_input(&mut buf, now)
            };
            attached |= poll_events(&mut driven, &config, &mut seen);
            if step.is_err() || !filled {
                break step;
            }
        };
        let result = result.and_then(|()| driven.handle_timeout(now));
        poll_events(&mut driven, &config, &mut seen);
        driven.poll_transmit(&mut out);

        assert_eq!(
            seen, ref_seen,
            "the driver's decode path surfaced something else"
        );
        assert_eq!(
            out, ref_out,
            "the driver's decode path transmitted something else"
        );
        assert_eq!(result, ref_result);
        if result.is_err() {
            for (conn, buf) in [(&mut reference, &mut ref_buf), (&mut driven, &mut buf)] {
                assert!(conn.is_closed());
                assert_eq!(
                    conn.handle_input(buf, now),
                    Err(Error::Caller(CallerError::Closed))
                );
            }
            break;
        }
    }
});
