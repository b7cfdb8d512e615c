//! A partition's sparse index: an entry every `index_interval_bytes` of its records, saying
//! where in the log the record of an offset starts (for reads) and how late the records of
//! the interval it starts are stamped (for [`Store::offset_for_time`](crate::Store)).
//!
//! Timestamps are the producers': they need not grow with offsets. So each entry keeps the
//! largest timestamp of its interval (the records from its offset to the next entry's), and
//! the largest of it and every interval before it. The second never decreases along the
//! index, so the first interval that may hold a record stamped at or after `t` is found by
//! bisection (as Kafka's time index, which keeps the largest timestamp so far); within it, a
//! read finds the record.

/// One entry: an interval of a partition's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    /// The first offset of the interval.
    offset: u64,
    /// The global log position of that record.
    pos: u64,
    /// The largest timestamp among the interval's records held (fills included).
    max_ts: i64,
    /// The largest timestamp of this interval and of every one before it in the index.
    max_ts_so_far: i64,
}

/// A partition's sparse index, ascending in offset and in log position (entries are made in
/// log order: fills, which lie later in the log, get none).
#[derive(Debug, Default)]
pub(crate) struct SparseIndex {
    entries: Vec<Entry>,
}

impl SparseIndex {
    /// A new interval starts at `offset`, whose record is at global position `pos` and
    /// stamped `ts`.
    pub(crate) fn push(&mut self, offset: u64, pos: u64, ts: i64) {
        let before = self.entries.last().map_or(i64::MIN, |e| e.max_ts_so_far);
        self.entries.push(Entry {
            offset,
            pos,
            max_ts: ts,
            max_ts_so_far: before.max(ts),
        });
    }

    /// More records of the last interval, stamped up to `ts` (nothing without an entry: the
    /// interval's entry was dropped with its segment).
    pub(crate) fn extend_last(&mut self, ts: i64) {
        if let Some(last) = self.entries.last_mut() {
            last.max_ts = last.max_ts.max(ts);
            last.max_ts_so_far = last.max_ts_so_far.max(ts);
        }
    }

    /// The record of `offset`, stamped `ts`, is held again (a fill of a hole).
    pub(crate) fn fill(&mut self, offset: u64, ts: i64) {
        let Some(i) = self
            .entries
            .partition_point(|e| e.offset <= offset)
            .checked_sub(1)
        else {
            return; // before the first entry: not indexed, searched by reading
        };
        self.entries[i].max_ts = self.entries[i].max_ts.max(ts);
        for e in &mut self.entries[i..] {
            if e.max_ts_so_far >= ts {
                break;
            }
            e.max_ts_so_far = ts;
        }
    }

    /// The global position of the last entry at or before `offset`: a read of it starts
    /// there (`None`: at the start of the log).
    pub(crate) fn start_for(&self, offset: u64) -> Option<u64> {
        let i = self.entries.partition_point(|e| e.offset <= offset);
        i.checked_sub(1).map(|i| self.entries[i].pos)
    }

    /// The first offset with an entry; the records from the low-water mark to it (those of an
    /// interval whose entry was in a dropped segment) have none.
    pub(crate) fn first_offset(&self) -> Option<u64> {
        self.entries.first().map(|e| e.offset)
    }

    /// Retention dropped the log below global position `base`: so go the entries there.
    pub(crate) fn drop_before(&mut self, base: u64) {
        let keep = self.entries.partition_point(|e| e.pos < base);
        if keep == 0 {
            return;
        }
        self.entries.drain(..keep);
        let mut so_far = i64::MIN;
        for e in &mut self.entries {
            so_far = so_far.max(e.max_ts);
            e.max_ts_so_far = so_far;
        }
    }

    /// The first interval that may hold a record stamped at or after `t` among those from
    /// offset `from` on (`from` at or past the first entry's offset): its offsets `[start,
    /// end)`, `end` `None` for the last interval (it runs to the head). `None`: no record
    /// from `from` on is stamped that late.
    pub(crate) fn next_interval(&self, from: u64, t: i64) -> Option<(u64, Option<u64>)> {
        let here = self
            .entries
            .partition_point(|e| e.offset <= from)
            .checked_sub(1)?;
        // Every interval before the first whose running maximum reaches `t` is older.
        let first = self.entries.partition_point(|e| e.max_ts_so_far < t);
        let i = if first >= here {
            first
        } else {
            // An interval before `from` claimed a record that late and had none left to read
            // (damaged since the store opened): look on, interval by interval.
            here + self.entries[here..].iter().position(|e| e.max_ts >= t)?
        };
        let e = self.entries.get(i)?;
        Some((
            e.offset.max(from),
            self.entries.get(i + 1).map(|n| n.offset),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Intervals of offsets 0.., 10.., 20.., 30.. at positions 100, 200, ..., stamped
    /// out of order.
    fn index() -> SparseIndex {
        let mut ix = SparseIndex::default();
        ix.push(0, 100, 50);
        ix.extend_last(40);
        ix.push(10, 200, 30);
        ix.extend_last(90);
        ix.push(20, 300, 60);
        ix.push(30, 400, 95);
        ix.extend_last(70);
        ix
    }

    #[test]
    fn reads_start_at_the_last_entry_at_or_before_the_offset() {
        let ix = index();
        assert_eq!(ix.start_for(0), Some(100));
        assert_eq!(ix.start_for(9), Some(100));
        assert_eq!(ix.start_for(10), Some(200));
        assert_eq!(ix.start_for(1000), Some(400));
        assert_eq!(SparseIndex::default().start_for(5), None);
        let mut late = SparseIndex::default();
        late.push(7, 50, 0);
        assert_eq!(late.start_for(3), None);
        assert_eq!(late.first_offset(), Some(7));
    }

    #[test]
    fn the_first_interval_reaching_a_time_is_found() {
        let ix = index();
        // Maxima 50, 90, 60, 95; running 50, 90, 90, 95.
        assert_eq!(ix.next_interval(0, i64::MIN), Some((0, Some(10))));
        assert_eq!(ix.next_interval(0, 50), Some((0, Some(10))));
        assert_eq!(ix.next_interval(0, 51), Some((10, Some(20))));
        assert_eq!(ix.next_interval(0, 90), Some((10, Some(20))));
        assert_eq!(ix.next_interval(0, 91), Some((30, None)));
        assert_eq!(ix.next_interval(0, 96), None);
        // From inside an interval: it starts there.
        assert_eq!(ix.next_interval(14, 60), Some((14, Some(20))));
        // From past the interval that first reaches the time: the next one that does.
        assert_eq!(ix.next_interval(20, 60), Some((20, Some(30))));
        assert_eq!(ix.next_interval(20, 61), Some((30, None)));
        assert_eq!(ix.next_interval(35, 96), None);
    }

    #[test]
    fn fills_raise_their_interval_and_those_after() {
        let mut ix = index();
        ix.fill(25, 99);
        assert_eq!(ix.next_interval(0, 96), Some((20, Some(30))));
        assert_eq!(ix.next_interval(0, 91), Some((20, Some(30))));
        // A fill older than what is there changes nothing.
        ix.fill(5, 10);
        assert_eq!(ix.next_interval(0, 51), Some((10, Some(20))));
    }

    #[test]
    fn dropping_the_front_recomputes_the_running_maxima() {
        let mut ix = index();
        ix.drop_before(250); // the intervals at 100 and 200 go
        assert_eq!(ix.first_offset(), Some(20));
        assert_eq!(ix.start_for(25), Some(300));
        // The 90 of a dropped interval no longer hides the 60 at offset 20.
        assert_eq!(ix.next_interval(20, 55), Some((20, Some(30))));
        assert_eq!(ix.next_interval(20, 61), Some((30, None)));
        ix.drop_before(10_000);
        assert_eq!(ix.first_offset(), None);
        assert_eq!(ix.next_interval(0, 0), None);
        ix.extend_last(5); // nothing to extend
        assert_eq!(ix.first_offset(), None);
    }
}
