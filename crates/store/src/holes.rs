//! The offsets of a partition a store does not hold, below its head: records damaged on disk
//! (which another store may still have: they can be filled) and records the store refused
//! (skip entries: never filled). Reads of either answer [`ReadError::Lost`](crate::ReadError).

use std::collections::BTreeMap;

/// A partition's holes: `from -> (to, skipped)`, disjoint.
#[derive(Debug, Default, Clone)]
pub(crate) struct Holes {
    map: BTreeMap<u64, (u64, bool)>,
}

impl Holes {
    /// Offsets `from..to` are not held; `skipped`: refused by this store (never filled).
    pub(crate) fn insert(&mut self, from: u64, to: u64, skipped: bool) {
        if from < to && self.at(from).is_none() {
            self.map.insert(from, (to, skipped));
        }
    }

    /// The hole holding `offset`, as `(from, to)`.
    pub(crate) fn at(&self, offset: u64) -> Option<(u64, u64)> {
        self.map
            .range(..=offset)
            .next_back()
            .filter(|&(_, &(to, _))| offset < to)
            .map(|(&from, &(to, _))| (from, to))
    }

    /// Whether `offset` is in a hole of damaged records (one another store may fill).
    pub(crate) fn fillable(&self, offset: u64) -> bool {
        self.map
            .range(..=offset)
            .next_back()
            .is_some_and(|(_, &(to, skipped))| offset < to && !skipped)
    }

    /// `offset` is held again (filled): its hole is split around it.
    pub(crate) fn remove(&mut self, offset: u64) {
        let Some((from, to)) = self.at(offset) else {
            return;
        };
        let Some((_, skipped)) = self.map.remove(&from) else {
            return;
        };
        self.insert(from, offset, skipped);
        self.insert(offset + 1, to, skipped);
    }

    /// The holes of damaged records, ascending.
    pub(crate) fn damaged(&self) -> Vec<(u64, u64)> {
        self.map
            .iter()
            .filter(|(_, (_, skipped))| !skipped)
            .map(|(&from, &(to, _))| (from, to))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_split_when_filled() {
        let mut h = Holes::default();
        h.insert(5, 9, false);
        h.insert(12, 13, true);
        h.insert(6, 7, false); // inside an existing one: ignored
        assert_eq!(h.at(4), None);
        assert_eq!(h.at(5), Some((5, 9)));
        assert_eq!(h.at(8), Some((5, 9)));
        assert_eq!(h.at(9), None);
        assert!(h.fillable(7) && !h.fillable(12) && !h.fillable(9));
        h.remove(7);
        assert_eq!(h.at(6), Some((5, 7)));
        assert_eq!(h.at(7), None);
        assert_eq!(h.at(8), Some((8, 9)));
        h.remove(5);
        h.remove(6);
        h.remove(8);
        assert_eq!(h.damaged(), []);
        assert_eq!(h.at(12), Some((12, 13)));
    }
}
