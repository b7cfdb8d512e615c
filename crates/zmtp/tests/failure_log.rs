//! The warnings failing peers cause are rate-limited per listener (issue 21, item 5): bad CURVE
//! HELLOs and garbage greetings from raw TCP on 127.0.0.1, as fast as a loop sends them, log at
//! most `FAILURES_LOGGED_PER_SECOND` warnings of a kind per second, and how many were not
//! logged is said once logging resumes. Before, every one logged a warning (2,000 bad HELLOs:
//! 1.2 MB of log in 18 s).
//!
//! The events are captured by a tracing subscriber of this test binary's own (its only test,
//! so the global subscriber sees nothing else).

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use dafka_zmtp::{
    Authenticator, CurveKeyPair, FAILURES_LOGGED_PER_SECOND, MechanismConfig, Options, Socket,
    SocketType,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// One `warn` event of the driver.
#[derive(Debug, Clone)]
struct Warning {
    message: String,
    /// About one connection (it names its peer), or a count said on its own.
    has_peer: bool,
    suppressed: Option<u64>,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Warning>>>);

impl Capture {
    fn warnings(&self) -> Vec<Warning> {
        self.0.lock().unwrap().clone()
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    has_peer: bool,
    suppressed: Option<u64>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "peer" => self.has_peer = true,
            _ => {}
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "peer" {
            self.has_peer = true;
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "suppressed" {
            self.suppressed = Some(value);
        }
    }
}

impl Subscriber for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::WARN && metadata.target().starts_with("dafka_zmtp")
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() != Level::WARN {
            return;
        }
        let mut f = Fields::default();
        event.record(&mut f);
        self.0.lock().unwrap().push(Warning {
            message: f.message,
            has_peer: f.has_peer,
            suppressed: f.suppressed,
        });
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// Connects, sends `bytes` and waits until the listener closes the connection (it has logged
/// the failure by then: a connection's end is logged before its socket is dropped).
async fn fail_once(addr: SocketAddr, bytes: &[u8]) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(bytes).await;
    assert!(
        closed_within(&mut s, Duration::from_secs(10)).await,
        "the listener kept a failing connection open"
    );
}

/// A CURVE HELLO (200 bytes, 25/ZMTP-CURVE) whose box does not open: a stranger's, or noise.
fn bad_hello(greeting: &[u8]) -> Vec<u8> {
    let mut b = greeting.to_vec();
    b.extend_from_slice(&[0x04, 200, 5]);
    b.extend_from_slice(b"HELLO");
    b.extend_from_slice(&[1, 0]);
    b.extend_from_slice(&[0; 72]);
    b.extend((0..120u8).map(|i| i.wrapping_mul(37).wrapping_add(11)));
    assert_eq!(b.len(), greeting.len() + 2 + 200);
    b
}

/// `n` failures of one kind, back to back; then, after the window, one more: the warnings
/// per second are bounded, the others are counted, and the counts add up.
async fn storm(capture: &Capture, addr: SocketAddr, bytes: &[u8], n: usize, what: &str) {
    let before = capture.warnings().len();
    let started = Instant::now();
    for _ in 0..n {
        fail_once(addr, bytes).await;
    }
    let took = started.elapsed();
    let during: Vec<Warning> = capture.warnings()[before..].to_vec();
    let logged = during.iter().filter(|w| w.has_peer).count();
    // At most the limit per started window (a slow machine spreads the storm over more).
    let windows = took.as_secs() as usize + 2;
    let bound = FAILURES_LOGGED_PER_SECOND as usize * windows;
    assert!(
        logged <= bound && logged < n,
        "{what}: {logged} warnings for {n} failures in {took:?} (at most {bound})"
    );
    assert!(
        during.iter().all(|w| w.message.contains(what)),
        "{during:?}"
    );

    // The next window: the count of those not logged is said (at the next connection, or
    // with the next failure), and every failure is accounted for.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    fail_once(addr, bytes).await;
    let all: Vec<Warning> = capture.warnings()[before..].to_vec();
    let counted: u64 = all.iter().filter_map(|w| w.suppressed).sum();
    let logged = all.iter().filter(|w| w.has_peer).count() as u64;
    assert!(
        counted > 0,
        "{what}: no count of the warnings held back: {all:?}"
    );
    assert!(
        all.iter()
            .any(|w| w.suppressed.is_some() && w.message.contains("were not logged")),
        "{all:?}"
    );
    assert_eq!(logged + counted, n as u64 + 1, "{what}: {all:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_peers_log_a_bounded_number_of_warnings_and_count_the_others() {
    let capture = Capture::default();
    tracing::subscriber::set_global_default(capture.clone()).unwrap();
    let n = 200;

    // Bad CURVE HELLOs: the handshake fails (the box does not open) before any authenticator.
    let keys = CurveKeyPair::generate();
    let curve = Socket::new(
        SocketType::Pull,
        Options::default()
            .with_linger(Some(Duration::ZERO))
            .with_mechanism(MechanismConfig::CurveServer {
                keypair: keys,
                authenticator: Authenticator::allow_all(),
            }),
    )
    .unwrap();
    let ep = curve.bind("tcp://127.0.0.1:0").await.unwrap();
    let hello = bad_hello(&greeting(b"CURVE"));
    storm(&capture, addr_of(&ep), &hello, n, "protocol error").await;

    // Garbage greetings on a NULL listener: a protocol error of their own listener's.
    let null = Socket::new(SocketType::Pull, linger0()).unwrap();
    let ep = null.bind("tcp://127.0.0.1:0").await.unwrap();
    let mut garbage = greeting(b"NULL");
    garbage[0] = 0x42;
    storm(&capture, addr_of(&ep), &garbage, n, "protocol error").await;
}
