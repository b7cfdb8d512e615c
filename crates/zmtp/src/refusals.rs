//! The "authentication refused" warning, rate-limited per listener.
//!
//! Every refusal fails a handshake and is logged; a client retrying in a loop (libzmq
//! reconnects every 100 ms by default), or many of them, would otherwise fill the log. Each
//! bound endpoint (and each connecting socket that is a server) logs at most
//! [`REFUSALS_LOGGED_PER_SECOND`] refusals at `warn` per one-second window; the others go to
//! `debug`, and the next refusal logged at `warn` says how many were not. A count that no
//! later refusal reports is not lost: the listener says it at its next accepted connection
//! once the window is over, and when it closes.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use dafka_zmtp_proto::PeerError;

/// Most refusals one listener logs at `warn` per second.
pub const REFUSALS_LOGGED_PER_SECOND: u32 = 10;

const WINDOW: Duration = Duration::from_secs(1);

/// The refusal log of one listener.
#[derive(Debug, Default)]
pub(crate) struct RefusalLog(Mutex<Window>);

#[derive(Debug, Default)]
struct Window {
    start: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

impl RefusalLog {
    /// Whether a refusal at `now` is logged at `warn`: `Some(n)` with the `n` refusals not
    /// logged since the last one that was, `None` when this one is not.
    pub(crate) fn admit(&self, now: Instant) -> Option<u64> {
        let mut w = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if w.start
            .is_none_or(|s| now.saturating_duration_since(s) >= WINDOW)
        {
            w.start = Some(now);
            w.logged = 0;
        }
        if w.logged < REFUSALS_LOGGED_PER_SECOND {
            w.logged += 1;
            Some(std::mem::take(&mut w.suppressed))
        } else {
            w.suppressed += 1;
            None
        }
    }

    /// The refusals not logged, if their window is over at `now` (`None` while it runs, and
    /// when there are none); they are then counted as said.
    pub(crate) fn due(&self, now: Option<Instant>) -> Option<u64> {
        let mut w = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let over = match (now, w.start) {
            (Some(now), Some(s)) => now.saturating_duration_since(s) >= WINDOW,
            _ => true,
        };
        (over && w.suppressed > 0).then(|| std::mem::take(&mut w.suppressed))
    }

    /// Says the refusals not logged if their window is over (called as connections arrive).
    pub(crate) fn flush(&self) {
        if let Some(n) = self.due(Some(Instant::now())) {
            say_suppressed(n);
        }
    }

    /// Logs the refusal `e` of the client at `peer`.
    pub(crate) fn log(&self, peer: &str, e: &PeerError) {
        match self.admit(Instant::now()) {
            Some(0) => tracing::warn!(peer, error = %e, "authentication refused"),
            Some(n) => tracing::warn!(
                peer,
                error = %e,
                suppressed = n,
                "authentication refused ({n} earlier refusals on this listener were not logged)"
            ),
            None => tracing::debug!(peer, error = %e, "authentication refused"),
        }
    }
}

impl Drop for RefusalLog {
    /// The listener closes: the refusals not logged are said now.
    fn drop(&mut self) {
        if let Some(n) = self.due(None) {
            say_suppressed(n);
        }
    }
}

fn say_suppressed(n: u64) {
    tracing::warn!(
        suppressed = n,
        "authentication refused: {n} earlier refusals on this listener were not logged"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_the_limit_per_window_then_the_count_of_the_others() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let n = REFUSALS_LOGGED_PER_SECOND;
        for i in 0..n {
            assert_eq!(log.admit(t0 + ms(u64::from(i))), Some(0), "refusal {i}");
        }
        for i in 0..25 {
            assert_eq!(log.admit(t0 + ms(500 + i)), None);
        }
        // A new window: the first refusal says how many were not logged, then none again.
        assert_eq!(log.admit(t0 + ms(1000)), Some(25));
        assert_eq!(log.admit(t0 + ms(1001)), Some(0));
        for i in 2..n {
            assert_eq!(log.admit(t0 + ms(1001 + u64::from(i))), Some(0));
        }
        assert_eq!(log.admit(t0 + ms(1999)), None);
        assert_eq!(log.admit(t0 + ms(5000)), Some(1));
    }

    /// A burst that stops: its count is said once the window is over, or at close.
    #[test]
    fn the_count_of_a_burst_that_stops_is_not_lost() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        for i in 0..REFUSALS_LOGGED_PER_SECOND + 7 {
            log.admit(t0 + ms(u64::from(i)));
        }
        assert_eq!(log.due(Some(t0 + ms(500))), None, "the window still runs");
        assert_eq!(log.due(Some(t0 + ms(1000))), Some(7));
        assert_eq!(log.due(Some(t0 + ms(2000))), None, "said once");
        // At close (no clock): whatever is left.
        assert_eq!(log.admit(t0 + ms(3000)), Some(0));
        for i in 1..REFUSALS_LOGGED_PER_SECOND + 3 {
            log.admit(t0 + ms(3000 + u64::from(i)));
        }
        assert_eq!(log.due(None), Some(3));
        // Said by flush, not again by the next refusal.
        assert_eq!(log.admit(t0 + ms(9000)), Some(0));
    }
}
