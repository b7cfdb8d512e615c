//! Reading the captured reference vectors in tests/data/dafka/.
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::collections::BTreeMap;

use bytes::Bytes;
use dafka_proto::{NodeId, Topic};

pub fn data(name: &str) -> String {
    let path = format!(
        "{}/../../tests/data/dafka/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub use dafka_testkit::{Rng, hex, unhex};

pub struct Vector {
    pub kind: String,
    pub frames: Vec<Bytes>,
    pub fields: BTreeMap<String, String>,
}

pub fn vectors() -> Vec<Vector> {
    data("messages.tsv")
        .lines()
        .map(|line| {
            let mut cols = line.split('\t');
            let kind = cols.next().unwrap().to_owned();
            let frames = cols
                .next()
                .unwrap()
                .split(' ')
                .map(|f| Bytes::from(unhex(f)))
                .collect();
            let fields = dafka_testkit::fields(cols.next().unwrap_or(""));
            Vector {
                kind,
                frames,
                fields,
            }
        })
        .collect()
}

/// The captured message of `kind` whose fields include every `key=value` of `fields`.
pub fn find(kind: &str, fields: &[(&str, &str)]) -> Vector {
    vectors()
        .into_iter()
        .find(|v| {
            v.kind == kind
                && fields
                    .iter()
                    .all(|(k, val)| v.fields.get(*k).map(String::as_str) == Some(*val))
        })
        .unwrap_or_else(|| panic!("no captured {kind} with {fields:?}"))
}

/// Node ids of the captured scenario (see ../shared/vectors/dafka/README.md).
pub const P1: &str = "986108951EB145A1BFBDC5601975F614";
pub const C1: &str = "660520E1F67543BCABA0796BBDC733D2";
pub const C2: &str = "DB0FDA0F98DC4F439ED7D405E0B07403";
pub const S1_WRITER: &str = "1748C8B2F2144DC9B299CD0ACE78283B";
pub const S2_WRITER: &str = "556B317F73DA4B2D96019CBC20CB20D6";
pub const S2_READER: &str = "980AC53FA7794EF586F9A1E90246290C";

pub fn id(hex: &str) -> NodeId {
    hex.parse().unwrap()
}

pub fn topic(name: &str) -> Topic {
    Topic::try_from(name).unwrap()
}

/// A store's committed group offsets in memory, with the rules of the real one (forward
/// commits keep the larger offset, seeks set it), for the test logs.
#[derive(Default)]
pub struct MemOffsets(
    std::cell::RefCell<BTreeMap<(dafka_proto::group::GroupName, Topic, NodeId), u64>>,
);

impl MemOffsets {
    /// Commits the offsets of the partitions `holds` says the store holds.
    pub fn commit(
        &self,
        group: &dafka_proto::group::GroupName,
        offsets: &[dafka_proto::GroupOffset],
        seek: bool,
        holds: impl Fn(&Topic, &NodeId) -> bool,
    ) -> Vec<dafka_proto::GroupOffset> {
        let mut held = self.0.borrow_mut();
        offsets
            .iter()
            .filter(|o| holds(&o.topic, &o.partition))
            .map(|o| {
                let slot = held
                    .entry((group.clone(), o.topic.clone(), o.partition))
                    .or_insert(o.offset);
                *slot = if seek { o.offset } else { o.offset.max(*slot) };
                dafka_proto::GroupOffset {
                    offset: *slot,
                    ..o.clone()
                }
            })
            .collect()
    }

    /// Every group with a committed offset, in name order.
    pub fn groups(&self) -> Vec<dafka_proto::group::GroupName> {
        let mut names: Vec<_> = self.0.borrow().keys().map(|(g, _, _)| g.clone()).collect();
        names.dedup();
        names
    }

    /// The group's offsets among `partitions` (all when empty).
    pub fn committed(
        &self,
        group: &dafka_proto::group::GroupName,
        partitions: &[(Topic, NodeId)],
    ) -> Vec<dafka_proto::GroupOffset> {
        self.0
            .borrow()
            .iter()
            .filter(|((g, t, p), _)| {
                g == group
                    && (partitions.is_empty()
                        || partitions.iter().any(|(pt, pp)| pt == t && pp == p))
            })
            .map(|((_, topic, partition), offset)| dafka_proto::GroupOffset {
                topic: topic.clone(),
                partition: *partition,
                offset: *offset,
            })
            .collect()
    }
}
