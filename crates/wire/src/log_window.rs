//! How often a failure that a peer can cause at will is logged: a one-second window that
//! admits a few and counts the rest, so that a flood of bad input cannot fill the log and
//! nothing about it is lost (the count is said with the next line admitted). Time is passed
//! in, so it is tested without a clock. The drivers of every layer (ZMTP listeners, Dafka
//! nodes, ZRE nodes) log per-connection failures through one of these.

use std::time::{Duration, Instant};

/// The window's length.
pub const LOG_WINDOW: Duration = Duration::from_secs(1);

/// One rate-limited kind of log line.
#[derive(Debug, Default, Clone, Copy)]
pub struct LogWindow {
    start: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

impl LogWindow {
    /// Whether a line at `now` is logged, at most `per_window` per [`LOG_WINDOW`]: `Some(n)`
    /// with the `n` lines not logged since the last one that was (to say with it), `None` when
    /// this one is not (it is counted).
    pub fn admit(&mut self, now: Instant, per_window: u32) -> Option<u64> {
        if self
            .start
            .is_none_or(|s| now.saturating_duration_since(s) >= LOG_WINDOW)
        {
            self.start = Some(now);
            self.logged = 0;
        }
        if self.logged < per_window {
            self.logged += 1;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }

    /// The lines not logged, once their window is over at `now` (`None` for now: over at
    /// once), to say without waiting for a next line; they are then counted as said.
    pub fn due(&mut self, now: Option<Instant>) -> Option<u64> {
        let over = match (now, self.start) {
            (Some(now), Some(s)) => now.saturating_duration_since(s) >= LOG_WINDOW,
            _ => true,
        };
        (over && self.suppressed > 0).then(|| std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_a_few_per_window_and_counts_the_rest() {
        let t0 = Instant::now();
        let mut w = LogWindow::default();
        assert_eq!(w.admit(t0, 2), Some(0));
        assert_eq!(w.admit(t0, 2), Some(0));
        assert_eq!(w.admit(t0, 2), None);
        assert_eq!(w.admit(t0 + Duration::from_millis(999), 2), None);
        assert_eq!(
            w.due(Some(t0 + Duration::from_millis(500))),
            None,
            "window runs"
        );
        // The next window: the first line says the two not logged.
        assert_eq!(w.admit(t0 + LOG_WINDOW, 2), Some(2));
        assert_eq!(w.admit(t0 + LOG_WINDOW, 2), Some(0));
        assert_eq!(w.admit(t0 + LOG_WINDOW, 2), None);
        assert_eq!(w.due(Some(t0 + LOG_WINDOW * 2)), Some(1));
        assert_eq!(w.due(None), None, "said once");
    }
}
