//! The FETCH retry of a partition with a gap, shared by the consumer and the store writer: a
//! new gap is FETCHed at once, then again on a timer whose delay doubles (from `first` up to
//! `max`) while the gap stays; progress inside the range asked for restarts the timer instead
//! of asking again (a long answer streaming in is not asked for record by record).

use std::time::{Duration, Instant};

/// The FETCH state of a partition with a gap.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retry {
    /// The next offset when last checked: progress past it resets the backoff.
    from: u64,
    /// One past the last offset asked for: a gap starting below it is already requested.
    end: u64,
    /// When to ask again.
    pub(crate) at: Instant,
    backoff: Duration,
}

impl Retry {
    fn new(from: u64, end: u64, at: Instant, backoff: Duration) -> Self {
        Retry {
            from,
            end,
            at,
            backoff,
        }
    }

    /// After the partition changed, with its gap `gap` (`from..end`) if any: the range to
    /// FETCH now (a gap not asked for yet). Forgets the retry once the gap closed.
    pub(crate) fn on_change(
        slot: &mut Option<Retry>,
        gap: Option<(u64, u64)>,
        now: Instant,
        first: Duration,
    ) -> Option<(u64, u64)> {
        let Some((from, end)) = gap else {
            *slot = None;
            return None;
        };
        if let Some(r) = slot
            && from < r.end
        {
            if from > r.from {
                *r = Retry::new(from, r.end, now + first, first);
            }
            return None;
        }
        *slot = Some(Retry::new(from, end, now + first, first));
        Some((from, end))
    }

    /// At `now`: the range to FETCH again if the retry is due and the gap still open, with the
    /// backoff doubled (up to `max`).
    pub(crate) fn on_timeout(
        slot: &mut Option<Retry>,
        gap: Option<(u64, u64)>,
        now: Instant,
        max: Duration,
    ) -> Option<(u64, u64)> {
        let retry = (*slot)?;
        if now < retry.at {
            return None;
        }
        let Some((from, end)) = gap else {
            *slot = None;
            return None;
        };
        let backoff = (retry.backoff * 2).min(max);
        *slot = Some(Retry::new(from, end, now + backoff, backoff));
        Some((from, end))
    }
}
