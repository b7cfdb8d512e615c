//! The warnings a failing peer causes, rate-limited per listener.
//!
//! Every connection that ends because of its peer (a handshake that fails, whatever the
//! mechanism; a refused client; a decode or protocol error; a rejection; a broken limit) is
//! logged with the reason. A peer retrying in a loop (libzmq reconnects every 100 ms by
//! default), or many of them, or a stranger sending bad HELLOs as fast as it can, would
//! otherwise fill the log: 2,000 bad CURVE HELLOs wrote 1.2 MB of log in 18 s. Each bound
//! endpoint (and each connecting socket) logs at most [`FAILURES_LOGGED_PER_SECOND`] failures
//! of each kind ([`Failure`]) at `warn` per one-second window; the others go to `debug`, and
//! the next one of that kind logged at `warn` says how many were not. A count that no later
//! failure reports is not lost: the listener says it at its next accepted connection once the
//! window is over, and when it closes. A listener's own failures to accept (EMFILE) are rate
//! limited the same way.

use std::fmt::Display;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use dafka_wire::LogWindow;
use dafka_zmtp_proto::PeerError;

use crate::monitor::ConnectionEnd;

/// Most failures of one kind one listener logs at `warn` per second.
pub const FAILURES_LOGGED_PER_SECOND: u32 = 10;

/// What a peer did to lose its connection: each kind has its own window, so a flood of one
/// kind never hides the first few of another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The authenticator refused the client.
    Refused,
    /// A protocol error: a failed handshake (any mechanism, including its timeout), bytes
    /// that do not decode, a command out of place.
    Protocol,
    /// The socket rejected the peer after its handshake.
    Rejected,
    /// The peer broke a limit: a frame or message too large, a subscription limit, memory
    /// held too long or past the budget for unauthenticated peers.
    Limit,
    /// The listener could not accept a connection (typically EMFILE, out of file
    /// descriptors: it fails every 20 ms while that lasts, with no peer to blame).
    Accept,
}

impl Failure {
    const ALL: [Failure; 5] = [
        Failure::Refused,
        Failure::Protocol,
        Failure::Rejected,
        Failure::Limit,
        Failure::Accept,
    ];

    /// The warning's text.
    fn what(self) -> &'static str {
        match self {
            Failure::Refused => "authentication refused",
            Failure::Protocol => "closing connection: protocol error",
            Failure::Rejected => "closing connection",
            Failure::Limit => "closing connection: peer broke a limit",
            Failure::Accept => "accept failed",
        }
    }

    /// How the count of those not logged names them.
    fn plural(self) -> &'static str {
        match self {
            Failure::Refused => "refusals",
            Failure::Protocol => "protocol errors",
            Failure::Rejected => "rejections",
            Failure::Limit => "broken limits",
            Failure::Accept => "accept failures",
        }
    }
}

/// The failure log of one listener (or connecting socket).
#[derive(Debug, Default)]
pub(crate) struct FailureLog(Mutex<[LogWindow; Failure::ALL.len()]>);

impl FailureLog {
    /// Whether a failure of `kind` at `now` is logged at `warn`: `Some(n)` with the `n` of its
    /// kind not logged since the last one that was, `None` when this one is not.
    pub(crate) fn admit(&self, kind: Failure, now: Instant) -> Option<u64> {
        let mut windows = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        windows[kind as usize].admit(now, FAILURES_LOGGED_PER_SECOND)
    }

    /// The failures of `kind` not logged, if their window is over at `now` (`None` while it
    /// runs, and when there are none); they are then counted as said.
    pub(crate) fn due(&self, kind: Failure, now: Option<Instant>) -> Option<u64> {
        let mut windows = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        windows[kind as usize].due(now)
    }

    /// Says the failures not logged whose window is over (called as connections arrive).
    pub(crate) fn flush(&self) {
        self.say_due(Some(Instant::now()));
    }

    fn say_due(&self, now: Option<Instant>) {
        for kind in Failure::ALL {
            if let Some(n) = self.due(kind, now) {
                let what = kind.what();
                let plural = kind.plural();
                tracing::warn!(
                    suppressed = n,
                    "{what}: {n} earlier {plural} on this listener were not logged"
                );
            }
        }
    }

    /// Logs how the connection with `peer` ended, if the peer caused it (at `debug` when it
    /// simply went away).
    pub(crate) fn log_end(&self, peer: &str, end: &ConnectionEnd) {
        match end {
            ConnectionEnd::Protocol(dafka_zmtp_proto::Error::Peer(
                e @ PeerError::AuthenticationRefused { .. },
            )) => self.log(peer, Failure::Refused, e),
            // A frame over the size limits is a broken limit, not a grammar error.
            ConnectionEnd::Protocol(e @ dafka_zmtp_proto::Error::Limit(_)) => {
                self.log(peer, Failure::Limit, e)
            }
            ConnectionEnd::Protocol(e) => self.log(peer, Failure::Protocol, e),
            ConnectionEnd::Rejected(e) => self.log(peer, Failure::Rejected, e),
            ConnectionEnd::Subscription(e) => self.log(peer, Failure::Limit, e),
            ConnectionEnd::Memory(e) => self.log(peer, Failure::Limit, e),
            ConnectionEnd::Io(e) => tracing::debug!(peer, error = %e, "connection I/O error"),
            ConnectionEnd::PeerClosed => tracing::debug!(peer, "peer closed the connection"),
            ConnectionEnd::Closed => {}
        }
    }

    /// Logs a failure to accept a connection (no peer: `peer` is `-`).
    pub(crate) fn log_accept(&self, e: &dyn Display) {
        self.log("-", Failure::Accept, e);
    }

    /// Logs the failure `e` of `kind` of the peer at `peer`.
    fn log(&self, peer: &str, kind: Failure, e: &dyn Display) {
        let what = kind.what();
        match self.admit(kind, Instant::now()) {
            Some(0) => tracing::warn!(peer, error = %e, "{what}"),
            Some(n) => {
                let plural = kind.plural();
                tracing::warn!(
                    peer,
                    error = %e,
                    suppressed = n,
                    "{what} ({n} earlier {plural} on this listener were not logged)"
                );
            }
            None => tracing::debug!(peer, error = %e, "{what}"),
        }
    }
}

impl Drop for FailureLog {
    /// The listener closes: the failures not logged are said now.
    fn drop(&mut self) {
        self.say_due(None);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn at_most_the_limit_per_window_then_the_count_of_the_others() {
        for kind in Failure::ALL {
            let log = FailureLog::default();
            let t0 = Instant::now();
            let ms = Duration::from_millis;
            let n = FAILURES_LOGGED_PER_SECOND;
            for i in 0..n {
                assert_eq!(
                    log.admit(kind, t0 + ms(u64::from(i))),
                    Some(0),
                    "failure {i}"
                );
            }
            for i in 0..25 {
                assert_eq!(log.admit(kind, t0 + ms(500 + i)), None);
            }
            // A new window: the first failure says how many were not logged, then none again.
            assert_eq!(log.admit(kind, t0 + ms(1000)), Some(25));
            assert_eq!(log.admit(kind, t0 + ms(1001)), Some(0));
            for i in 2..n {
                assert_eq!(log.admit(kind, t0 + ms(1001 + u64::from(i))), Some(0));
            }
            assert_eq!(log.admit(kind, t0 + ms(1999)), None);
            assert_eq!(log.admit(kind, t0 + ms(5000)), Some(1));
        }
    }

    /// A burst that stops: its count is said once the window is over, or at close.
    #[test]
    fn the_count_of_a_burst_that_stops_is_not_lost() {
        let kind = Failure::Refused;
        let log = FailureLog::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        for i in 0..FAILURES_LOGGED_PER_SECOND + 7 {
            log.admit(kind, t0 + ms(u64::from(i)));
        }
        assert_eq!(
            log.due(kind, Some(t0 + ms(500))),
            None,
            "the window still runs"
        );
        assert_eq!(log.due(kind, Some(t0 + ms(1000))), Some(7));
        assert_eq!(log.due(kind, Some(t0 + ms(2000))), None, "said once");
        // At close (no clock): whatever is left.
        assert_eq!(log.admit(kind, t0 + ms(3000)), Some(0));
        for i in 1..FAILURES_LOGGED_PER_SECOND + 3 {
            log.admit(kind, t0 + ms(3000 + u64::from(i)));
        }
        assert_eq!(log.due(kind, None), Some(3));
        // Said by flush, not again by the next failure.
        assert_eq!(log.admit(kind, t0 + ms(9000)), Some(0));
    }

    /// Each kind has its own window: a flood of one never hides the first of another.
    #[test]
    fn kinds_are_counted_apart() {
        let log = FailureLog::default();
        let t0 = Instant::now();
        for _ in 0..FAILURES_LOGGED_PER_SECOND + 5 {
            log.admit(Failure::Protocol, t0);
        }
        assert_eq!(log.admit(Failure::Protocol, t0), None);
        assert_eq!(log.admit(Failure::Refused, t0), Some(0));
        assert_eq!(log.due(Failure::Refused, None), None);
        assert_eq!(log.due(Failure::Protocol, None), Some(6));
    }
}
