//! The implementations under test, each behind the same small [`Backend`] trait.
//!
//! Adding an implementation means one module here with an `impl Backend`, one line in
//! [`NAMES`] and one arm in `main.rs`'s dispatch; the test loops in `runner.rs` are shared.

use std::time::Instant;

use bytes::Bytes;

use crate::cli::{Endpoint, Role};
use crate::error::BenchError;

pub(crate) mod dafka;
pub(crate) mod libzmq;
pub(crate) mod raw;
pub(crate) mod zmqrs;

/// The backends compiled into this binary, in the order reports list them.
pub(crate) const NAMES: &[&str] = &["dafka", "raw", "libzmq", "zmqrs"];

/// One socket of one implementation, opened for one [`Role`].
///
/// Async methods run inside a tokio runtime; the whole measured loop of an async backend is
/// bounded by one outer timeout, so they may ignore `deadline`. Blocking backends (libzmq)
/// must honour `deadline` themselves, since a blocking call cannot be cancelled.
pub(crate) trait Backend: Sized {
    /// A received message, kept in the backend's own type so REP can echo it without a copy.
    type Msg;

    /// Binds (PULL, REP) or connects (PUSH, REQ, retrying until `deadline`). With `curve`,
    /// the binding side is the CURVE server and the connecting side its client, with the
    /// fixed key pairs of [`curve_keys`] (backends without CURVE refuse).
    async fn open(
        role: Role,
        endpoint: &Endpoint,
        deadline: Instant,
        curve: bool,
    ) -> Result<Self, BenchError>;

    /// Sends one single-frame message holding `payload`.
    async fn send(&mut self, payload: &Bytes, deadline: Instant) -> Result<(), BenchError>;

    /// Pushes out anything the backend batches itself (only the raw backend batches).
    async fn flush(&mut self, deadline: Instant) -> Result<(), BenchError>;

    /// Receives one message.
    async fn recv(&mut self, deadline: Instant) -> Result<Self::Msg, BenchError>;

    /// Total body bytes of a received message.
    fn msg_len(msg: &Self::Msg) -> usize;

    /// Sends a received message back (REP).
    async fn reply(&mut self, msg: Self::Msg, deadline: Instant) -> Result<(), BenchError>;

    /// Closes the socket, delivering what it can.
    async fn close(self) -> Result<(), BenchError>;
}

/// The CURVE key pairs of the benchmark as `(server, client)`: fixed, so that two processes
/// agree on them without exchanging anything.
pub(crate) fn curve_keys() -> (dafka_zmtp::CurveKeyPair, dafka_zmtp::CurveKeyPair) {
    (
        dafka_zmtp::CurveKeyPair::from_secret([0x5e; 32]),
        dafka_zmtp::CurveKeyPair::from_secret([0xc1; 32]),
    )
}

/// The error of a backend that has no CURVE.
pub(crate) fn no_curve(backend: &str) -> BenchError {
    BenchError::Unavailable(format!("{backend} with CURVE"))
}

/// Whether `deadline` has passed.
pub(crate) fn expired(deadline: Instant) -> bool {
    Instant::now() >= deadline
}
