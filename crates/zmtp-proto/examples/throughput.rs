//! A criterion-free micro check of the codec's hot path: encode batches of small messages with
//! `send_message` and decode them with `handle_input` between two in-memory connections.
//!
//! Run with `cargo run --release -p dafka-zmtp-proto --example throughput`.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use dafka_zmtp_proto::{Config, Connection, Event, Message, SocketType};

fn connected_pair() -> (Connection, Connection) {
    let now = Instant::now();
    let mut a = Connection::new(Config::new(SocketType::Push), now);
    let mut b = Connection::new(Config::new(SocketType::Pull), now);
    let (mut ab, mut ba) = (BytesMut::new(), BytesMut::new());
    for _ in 0..3 {
        a.poll_transmit(&mut ab);
        b.poll_transmit(&mut ba);
        b.handle_input(&mut ab, now).expect("handshake");
        a.handle_input(&mut ba, now).expect("handshake");
    }
    while b.poll_event().is_some() {}
    while a.poll_event().is_some() {}
    assert!(a.is_ready() && b.is_ready());
    (a, b)
}

fn main() {
    const MESSAGES: usize = 2_000_000;
    const BATCH: usize = 1_000;
    for size in [16usize, 64, 128, 1024] {
        let (mut a, mut b) = connected_pair();
        let msg = Message::from(Bytes::from(vec![0xAB; size]));
        let mut wire = BytesMut::with_capacity(BATCH * (size + 9));
        let now = Instant::now();
        let start = Instant::now();
        let mut received = 0usize;
        for _ in 0..MESSAGES / BATCH {
            for _ in 0..BATCH {
                a.send_message(&msg, &mut wire).expect("send");
            }
            b.handle_input(&mut wire, now).expect("decode");
            while let Some(ev) = b.poll_event() {
                if let Event::Message(m) = ev {
                    received += m.len();
                }
            }
            wire.reserve(BATCH * (size + 9));
        }
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(received, MESSAGES);
        println!(
            "{size:>5} B: {:>6.2} M msg/s, {:>7.1} MB/s (encode + decode, one core)",
            MESSAGES as f64 / secs / 1e6,
            (MESSAGES * size) as f64 / secs / 1e6
        );
    }
}
