//! Prefix subscription sets with reference counts.
//!
//! ZeroMQ subscriptions are byte prefixes: a message matches when its first
//! frame starts with any subscribed prefix (the empty prefix matches
//! everything). Subscriptions are counted: subscribing twice needs two
//! cancels.
//!
//! The set keeps a hash map `prefix -> count` plus the multiset of distinct
//! prefix lengths, so matching a topic costs one hash lookup per distinct
//! subscribed length (typically a handful), independent of how many prefixes
//! are subscribed.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

/// What [`SubSet::matches_in_run`] remembers over one run of topics (the set unchanged).
#[derive(Debug, Default)]
pub struct MatchRun<'a> {
    /// The prefix that matched last.
    hit: Option<&'a [u8]>,
    /// The last topic that matched nothing.
    miss: Option<Bytes>,
}

/// A counted set of subscription prefixes.
#[derive(Debug, Default, Clone)]
pub struct SubSet {
    counts: HashMap<Bytes, u32>,
    /// length -> number of distinct prefixes of that length.
    lengths: BTreeMap<usize, u32>,
}

impl SubSet {
    /// Add one reference to `prefix`. Returns `true` if the prefix is new.
    pub fn add(&mut self, prefix: Bytes) -> bool {
        let len = prefix.len();
        let count = self.counts.entry(prefix).or_insert(0);
        *count = count.saturating_add(1);
        if *count == 1 {
            *self.lengths.entry(len).or_insert(0) += 1;
            true
        } else {
            false
        }
    }

    /// Drop one reference to `prefix`. Returns `true` if the prefix is now gone.
    /// Cancelling a prefix that is not subscribed does nothing.
    pub fn remove(&mut self, prefix: &[u8]) -> bool {
        let Some(count) = self.counts.get_mut(prefix) else {
            return false;
        };
        *count -= 1;
        if *count > 0 {
            return false;
        }
        self.counts.remove(prefix);
        if let Some(n) = self.lengths.get_mut(&prefix.len()) {
            *n -= 1;
            if *n == 0 {
                self.lengths.remove(&prefix.len());
            }
        }
        true
    }

    /// Number of distinct prefixes.
    #[inline]
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether nothing is subscribed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Is exactly this prefix subscribed?
    #[inline]
    pub fn contains(&self, prefix: &[u8]) -> bool {
        self.counts.contains_key(prefix)
    }

    /// Does `topic` start with any subscribed prefix?
    #[inline]
    pub fn matches(&self, topic: &[u8]) -> bool {
        self.matching_prefix(topic).is_some()
    }

    /// [`matches`](Self::matches) for one topic of a run (a batch a PUB sends, a batch a SUB
    /// takes): a topic that starts with the prefix that matched last, or that agrees with the
    /// last topic that matched nothing on as many bytes as the longest prefix, is decided by
    /// one comparison, not by a hash lookup per subscribed length (the messages of a run
    /// mostly come from one publisher and share their first bytes).
    #[inline]
    pub fn matches_in_run<'a>(&'a self, topic: &Bytes, run: &mut MatchRun<'a>) -> bool {
        if run.hit.is_some_and(|p| topic.starts_with(p)) {
            return true;
        }
        let longest = self.lengths.keys().next_back().copied().unwrap_or(0);
        let key = |t: &'_ Bytes| t.len().min(longest);
        if let Some(miss) = &run.miss
            && key(miss) == key(topic)
            && miss[..key(miss)] == topic[..key(topic)]
        {
            return false;
        }
        match self.matching_prefix(topic) {
            Some(prefix) => {
                run.hit = Some(prefix);
                true
            }
            None => {
                run.miss = Some(topic.clone());
                false
            }
        }
    }

    /// The subscribed prefix `topic` starts with (the shortest), if any.
    #[inline]
    fn matching_prefix(&self, topic: &[u8]) -> Option<&[u8]> {
        for &len in self.lengths.keys() {
            // Only the empty prefix has length 0: it matches everything.
            if len == 0 {
                return Some(&[]);
            }
            if len > topic.len() {
                break;
            }
            if let Some((prefix, _)) = topic.get(..len).and_then(|p| self.counts.get_key_value(p)) {
                return Some(prefix);
            }
        }
        None
    }

    /// The distinct prefixes (one entry per prefix, whatever its count).
    pub fn prefixes(&self) -> impl Iterator<Item = &Bytes> {
        self.counts.keys()
    }

    /// Drops every prefix.
    pub fn clear(&mut self) {
        self.counts.clear();
        self.lengths.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_set_matches_nothing() {
        let s = SubSet::default();
        assert!(!s.matches(b""));
        assert!(!s.matches(b"abc"));
    }

    #[test]
    fn empty_prefix_matches_everything() {
        let mut s = SubSet::default();
        assert!(s.add(Bytes::new()));
        assert!(s.matches(b""));
        assert!(s.matches(b"anything"));
    }

    #[test]
    fn prefix_matching_and_counts() {
        let mut s = SubSet::default();
        assert!(s.add(Bytes::from_static(b"ab")));
        assert!(!s.add(Bytes::from_static(b"ab")));
        assert!(s.add(Bytes::from_static(b"xyz")));
        assert!(s.matches(b"ab"));
        assert!(s.matches(b"abc"));
        assert!(!s.matches(b"a"));
        assert!(s.matches(b"xyz1"));
        assert!(!s.matches(b"xy"));
        assert!(!s.remove(b"ab"));
        assert!(s.matches(b"abc"));
        assert!(s.remove(b"ab"));
        assert!(!s.matches(b"abc"));
        assert!(!s.remove(b"ab"));
        assert!(!s.remove(b"nope"));
        assert!(s.matches(b"xyz"));
        assert_eq!(s.prefixes().count(), 1);
        s.clear();
        assert_eq!(s.prefixes().count(), 0);
        assert!(!s.matches(b"xyz"));
    }

    #[test]
    fn matches_in_run_agrees_with_matches_over_a_run() {
        let mut s = SubSet::default();
        s.add(Bytes::from_static(b"ab"));
        s.add(Bytes::from_static(b"abcd"));
        s.add(Bytes::from_static(b"xy"));
        let topics: [&'static [u8]; 14] = [
            b"abc", b"abcde", b"ab", b"a", b"q1", b"q2", b"qq", b"x", b"xyz", b"yab", b"", b"abz",
            b"xz", b"x",
        ];
        let mut run = MatchRun::default();
        for t in topics {
            let t = Bytes::from_static(t);
            assert_eq!(s.matches_in_run(&t, &mut run), s.matches(&t), "{t:?}");
        }
        // Misses that share the longest prefix's length of bytes are decided alike, and a
        // longer or shorter topic is not mistaken for the last miss.
        let mut run = MatchRun::default();
        for t in [
            &b"zzzz1"[..],
            b"zzzz2",
            b"zz",
            b"z",
            b"ab",
            b"zzzz3",
            b"xy1",
        ] {
            let t = Bytes::copy_from_slice(t);
            assert_eq!(s.matches_in_run(&t, &mut run), s.matches(&t), "{t:?}");
        }
        let mut run = MatchRun::default();
        for t in [&b"a"[..], b"ab"] {
            let t = Bytes::copy_from_slice(t);
            assert_eq!(s.matches_in_run(&t, &mut run), s.matches(&t), "{t:?}");
        }
        s.add(Bytes::new());
        let mut run = MatchRun::default();
        for t in [&b"q"[..], b"", b"zz"] {
            assert!(s.matches_in_run(&Bytes::copy_from_slice(t), &mut run));
        }
    }

    #[test]
    fn same_length_prefixes_share_a_length_entry() {
        let mut s = SubSet::default();
        s.add(Bytes::from_static(b"aa"));
        s.add(Bytes::from_static(b"bb"));
        s.remove(b"aa");
        assert!(s.matches(b"bbq"));
        assert!(!s.matches(b"aaq"));
    }

    mod model {
        use proptest::prelude::*;

        use super::*;

        #[derive(Debug, Clone)]
        enum Op {
            Add(Vec<u8>),
            Remove(Vec<u8>),
            Match(Vec<u8>),
        }

        fn bytes() -> impl Strategy<Value = Vec<u8>> {
            // A tiny alphabet so prefixes collide often.
            proptest::collection::vec(0u8..3, 0..5)
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                bytes().prop_map(Op::Add),
                bytes().prop_map(Op::Remove),
                bytes().prop_map(Op::Match),
            ]
        }

        proptest! {
            /// SubSet behaves like a naive multiset of prefixes.
            #[test]
            fn agrees_with_a_naive_multiset(ops in proptest::collection::vec(op(), 0..64)) {
                let mut set = SubSet::default();
                let mut naive: Vec<Vec<u8>> = Vec::new();
                for op in ops {
                    match op {
                        Op::Add(p) => {
                            let new = !naive.contains(&p);
                            prop_assert_eq!(set.add(Bytes::from(p.clone())), new);
                            naive.push(p);
                        }
                        Op::Remove(p) => {
                            let gone = match naive.iter().position(|q| *q == p) {
                                Some(i) => {
                                    naive.remove(i);
                                    !naive.contains(&p)
                                }
                                None => false,
                            };
                            prop_assert_eq!(set.remove(&p), gone);
                        }
                        Op::Match(t) => {
                            let expected = naive.iter().any(|p| t.starts_with(p));
                            prop_assert_eq!(set.matches(&t), expected);
                        }
                    }
                    prop_assert_eq!(set.prefixes().count(), {
                        let mut d = naive.clone();
                        d.sort();
                        d.dedup();
                        d.len()
                    });
                }
            }
        }
    }
}
