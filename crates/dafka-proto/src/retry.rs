//! The FETCH retry of a partition with a gap, shared by the consumer and the store writer: a
//! new gap is FETCHed at once, then again on a timer whose delay doubles (from `first` up to
//! `max`) while the gap stays; progress inside the range asked for restarts the timer instead
//! of asking again (a long answer streaming in is not asked for record by record).
//!
//! A FETCH asks for at most [`FETCH_WINDOW`] records; once half of them is in, the next
//! window is asked for if the gap goes on for at least half a window more (so a long answer
//! streams on without a pause). A publisher never waits for a slow subscriber, and a store
//! reader answers as fast as it reads: without the window a consumer catching up on millions
//! of records had the whole answer queued in the store towards it (a publisher's HWM counts
//! messages, and a DIRECT-RECORDS carries a run of records). With it, about a window and a
//! half per partition is on its way from a store (more after a retry, which makes a store
//! send again from the offset asked, or from several stores; see `docs/dafka.md`).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::error::CallerError;
use crate::id::{NodeId, Topic};
use crate::message::{Fetch, Message};

/// The partitions of a consumer or a store writer, looked up once per RECORD: hashed with
/// foldhash (a random seed per map) rather than SipHash, a fraction of the cost per lookup. The
/// map never holds more than `max_partitions` entries, which bounds what keys chosen to
/// collide could cost.
pub(crate) type Partitions<P> = HashMap<(Topic, NodeId), P, foldhash::fast::RandomState>;

/// Most records one FETCH asks for; the next window is asked for once half of one is in.
pub const FETCH_WINDOW: u64 = 65_536;

/// The first window of the gap `from..end`.
fn window(from: u64, end: u64) -> u64 {
    end.min(from.saturating_add(FETCH_WINDOW))
}

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
            // Half of a window still to come and at least as much beyond it: ask for the next
            // window now (a gap growing record by record, live records arriving while it is
            // being answered, is asked for once reached, as before).
            if r.end - from <= FETCH_WINDOW / 2 && end.saturating_sub(r.end) >= FETCH_WINDOW / 2 {
                let ask = (r.end, window(r.end, end));
                r.end = ask.1;
                return Some(ask);
            }
            return None;
        }
        let end = window(from, end);
        *slot = Some(Retry::new(from, end, now + first, first));
        Some((from, end))
    }

    /// Not before `at`, with the backoff back at `backoff`.
    fn put_off(&mut self, at: Instant, backoff: Duration) {
        self.at = self.at.max(at);
        self.backoff = backoff;
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
        let end = window(from, end);
        *slot = Some(Retry::new(from, end, now + backoff, backoff));
        Some((from, end))
    }
}

/// Checks the retry settings of a config: `first` positive and at most `max`.
pub(crate) fn validate(first: Duration, max: Duration) -> Result<(), CallerError> {
    if first.is_zero() || max < first {
        return Err(CallerError::Config(
            "fetch_retry must be positive and at most fetch_retry_max",
        ));
    }
    Ok(())
}

/// A partition that can have a gap to FETCH (the consumer's and the store writer's).
pub(crate) trait Gapped {
    /// The missing range `from..end`, if any.
    fn gap(&self) -> Option<(u64, u64)>;
    /// Its FETCH retry.
    fn retry(&mut self) -> &mut Option<Retry>;
    /// When its FETCH retry is due, if one is pending.
    fn retry_at(&self) -> Option<Instant>;
}

/// After the partition `key` changed: queues on `transmit` a FETCH (from `sender`) for a gap
/// not asked for yet; forgets the retry once the gap closed.
pub(crate) fn refetch<P: Gapped>(
    partitions: &mut Partitions<P>,
    key: &(Topic, NodeId),
    now: Instant,
    first: Duration,
    sender: NodeId,
    transmit: &mut VecDeque<Message>,
) {
    let Some(p) = partitions.get_mut(key) else {
        return;
    };
    refetch_in(p, (&key.0, key.1), now, (first, sender), transmit);
}

/// [`refetch`] for a partition the caller already holds (no second map lookup per record).
pub(crate) fn refetch_in<P: Gapped>(
    p: &mut P,
    (topic, producer): (&Topic, NodeId),
    now: Instant,
    (first, sender): (Duration, NodeId),
    transmit: &mut VecDeque<Message>,
) {
    let gap = p.gap();
    if let Some((from, end)) = Retry::on_change(p.retry(), gap, now, first) {
        transmit.push_back(fetch_for(sender, topic, producer, from, end));
    }
}

/// The partition of `key`, created by `new` if absent and fewer than `max` exist: one hash
/// of the key per record in the common case.
pub(crate) fn partition_entry<P>(
    partitions: &mut Partitions<P>,
    key: (Topic, NodeId),
    max: usize,
    new: impl FnOnce() -> P,
) -> Option<&mut P> {
    let n = partitions.len();
    match partitions.entry(key) {
        std::collections::hash_map::Entry::Occupied(e) => Some(e.into_mut()),
        std::collections::hash_map::Entry::Vacant(e) if n < max => Some(e.insert(new())),
        std::collections::hash_map::Entry::Vacant(_) => None,
    }
}

/// Which gaps [`fetch_gaps`] asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ask {
    /// Those whose retry is due, their backoff doubled (up to `max`).
    Due {
        /// The longest backoff.
        max: Duration,
    },
    /// Every one, now, its backoff restarted at `first` (a store that can answer them just
    /// became reachable).
    All {
        /// The first backoff.
        first: Duration,
    },
}

/// Queues on `transmit` a FETCH (from `sender`) of the gaps of `partitions` that `ask` picks
/// at `now`.
pub(crate) fn fetch_gaps<P: Gapped>(
    partitions: &mut Partitions<P>,
    now: Instant,
    ask: Ask,
    sender: NodeId,
    transmit: &mut VecDeque<Message>,
) {
    for ((topic, producer), p) in partitions {
        let gap = p.gap();
        let range = match ask {
            Ask::Due { max } => Retry::on_timeout(p.retry(), gap, now, max),
            Ask::All { first } => {
                *p.retry() = None;
                Retry::on_change(p.retry(), gap, now, first)
            }
        };
        if let Some((from, end)) = range {
            transmit.push_back(fetch_for(sender, topic, *producer, from, end));
        }
    }
}

/// Puts every pending retry at least `first` after `now`, its backoff back at `first`: the
/// answers may be waiting, unread, to arrive (the driver stopped reading for a while).
pub(crate) fn put_off_all<P: Gapped>(
    partitions: &mut Partitions<P>,
    now: Instant,
    first: Duration,
) {
    for p in partitions.values_mut() {
        if let Some(r) = p.retry() {
            r.put_off(now + first, first);
        }
    }
}

/// The earliest FETCH retry of `partitions`.
pub(crate) fn earliest<P: Gapped>(partitions: &Partitions<P>) -> Option<Instant> {
    partitions.values().filter_map(Gapped::retry_at).min()
}

/// A FETCH of `from..end` (at most `u32::MAX` records) of `producer`'s `topic`.
pub(crate) fn fetch_for(
    sender: NodeId,
    topic: &Topic,
    producer: NodeId,
    from: u64,
    end: u64,
) -> Message {
    Message::Fetch(Fetch {
        producer,
        sender,
        topic: topic.clone(),
        sequence: from,
        count: u32::try_from(end - from).unwrap_or(u32::MAX),
    })
}
