//! The engine's rules and round trips: appends from random interleavings of partitions
//! read back intact, in order, before and after reopening; refusals are typed.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use dafka_store::{
    AppendError, AppendRecord, Config, MemDir, OpenError, PartitionId, ReadError, RecordMeta,
    Retention, Store, SyncPolicy,
};
use proptest::prelude::*;

use common::{append_one, block_on, key, read_all, value};

const WAIT: Duration = Duration::from_secs(10);

fn small_segments() -> Config {
    let mut config = Config::default();
    config.segment_bytes = 4096;
    config.max_record_bytes = 1024;
    config.index_interval_bytes = 256;
    config
}

#[test]
fn declare_append_read() {
    let dir = MemDir::new();
    let store = Store::open(Arc::new(dir.clone()), Config::default()).unwrap();
    let a = store.declare(&key(1)).unwrap();
    let b = store.declare(&key(2)).unwrap();
    assert_ne!(a, b);
    assert_eq!(
        store.declare(&key(1)).unwrap(),
        a,
        "declare is get-or-create"
    );
    assert_eq!(store.lookup(&key(2)), Some(b));
    assert_eq!(store.lookup(&key(3)), None);
    let ticket = store
        .append(&[
            AppendRecord {
                partition: a,
                offset: 0,
                meta: &RecordMeta::created(5),
                value: b"a0",
            },
            AppendRecord {
                partition: b,
                offset: 0,
                meta: &RecordMeta::log_append(6),
                value: b"b0",
            },
            AppendRecord {
                partition: a,
                offset: 1,
                meta: &RecordMeta::created(7),
                value: b"a1",
            },
        ])
        .unwrap();
    block_on(ticket).unwrap();
    assert_eq!(store.head(a), Some(2));
    assert_eq!(store.head(b), Some(1));
    assert_eq!(store.low_water(a), Some(0));
    let records = store.read(a, 0, 10, 1 << 20).unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(&records[1].value[..], b"a1");
    assert_eq!(records[1].meta, RecordMeta::created(7));
    assert_eq!(store.read(a, 1, 10, 1 << 20).unwrap()[0].offset, 1);
    assert!(store.read(a, 2, 10, 1 << 20).unwrap().is_empty());
    let infos = store.partitions();
    assert_eq!(infos.len(), 2);
    assert_eq!(infos[0].key, key(1));
    assert_eq!(infos[1].head, 1);
    assert_eq!(key(1).to_string(), "t1/000000010000000000000000000000EE");
    store.close();

    let store = Store::open(Arc::new(dir), Config::default()).unwrap();
    assert_eq!(store.lookup(&key(1)), Some(a));
    assert_eq!(store.head(a), Some(2));
    assert_eq!(&store.read(b, 0, 10, 1 << 20).unwrap()[0].value[..], b"b0");
    assert_eq!(store.recovery_report().records, 3);
    assert_eq!(store.recovery_report().truncated_bytes, 0);
}

#[test]
fn refusals_are_typed_and_leave_nothing() {
    let mut config = Config::default();
    config.max_record_bytes = 10;
    let store = Store::open(Arc::new(MemDir::new()), config).unwrap();
    let p = store.declare(&key(1)).unwrap();
    let q = store.declare(&key(2)).unwrap();
    append_one(&store, p, 0, b"x");
    let meta = RecordMeta::created(0);
    let rec = |partition, offset, value: &'static [u8]| AppendRecord {
        partition,
        offset,
        meta: &meta,
        value,
    };
    assert!(matches!(
        store.append(&[rec(p, 2, b"x")]),
        Err(AppendError::Gap {
            offset: 2,
            head: 1,
            ..
        })
    ));
    assert!(matches!(
        store.append(&[rec(p, 0, b"x")]),
        Err(AppendError::Repeat {
            offset: 0,
            head: 1,
            ..
        })
    ));
    assert!(matches!(
        store.append(&[rec(p, 1, b"01234567890")]),
        Err(AppendError::RecordTooLarge { size: 11, max: 10 })
    ));
    assert!(matches!(
        store.append(&[rec(PartitionId(99), 0, b"x")]),
        Err(AppendError::UnknownPartition(PartitionId(99)))
    ));
    // All or nothing: the good records before a refused one are not stored.
    assert!(matches!(
        store.append(&[rec(q, 0, b"q"), rec(p, 1, b"y"), rec(p, 3, b"z")]),
        Err(AppendError::Gap {
            offset: 3,
            head: 2,
            ..
        })
    ));
    assert_eq!(store.next_offset(p), Some(1));
    assert_eq!(store.next_offset(q), Some(0));
    assert!(matches!(
        store.declare(&dafka_store::PartitionKey::new("x".repeat(256), [0; 16])),
        Err(AppendError::TopicTooLong(256))
    ));
    assert!(matches!(
        store.read(p, 5, 1, 1),
        Err(ReadError::BeyondHead { offset: 5, head: 1 })
    ));
    assert!(matches!(
        store.read(PartitionId(7), 0, 1, 1),
        Err(ReadError::UnknownPartition(_))
    ));
}

#[test]
fn read_limits() {
    let store = Store::open(Arc::new(MemDir::new()), small_segments()).unwrap();
    let p = store.declare(&key(1)).unwrap();
    for o in 0..50 {
        append_one(&store, p, o, &value(1, o, 100));
    }
    assert_eq!(store.read(p, 10, 5, 1 << 20).unwrap().len(), 5);
    // max_bytes stops once reached; one record is always returned.
    assert_eq!(store.read(p, 10, 100, 250).unwrap().len(), 3);
    assert_eq!(store.read(p, 10, 100, 1).unwrap().len(), 1);
    let all = read_all(&store, p);
    assert_eq!(all.len(), 50);
    for (o, r) in all.iter().enumerate() {
        assert_eq!(r.offset, o as u64);
        assert_eq!(r.value, value(1, o as u64, 100));
    }
    assert!(store.stats().batches >= 50);
}

#[test]
fn retention_by_size_and_age_advances_low_water() {
    let mut config = small_segments();
    config.retention = Retention {
        max_age: None,
        max_bytes: Some(8192),
    };
    let dir = MemDir::new();
    let store = Store::open(Arc::new(dir.clone()), config.clone()).unwrap();
    let p = store.declare(&key(1)).unwrap();
    let q = store.declare(&key(2)).unwrap();
    append_one(&store, q, 0, b"only record of q");
    for o in 0..200 {
        append_one(&store, p, o, &value(1, o, 100));
    }
    let low = store.low_water(p).unwrap();
    assert!(low > 0, "old segments were dropped");
    assert_eq!(store.low_water(q), Some(1), "q's only record was dropped");
    assert_eq!(store.head(q), Some(1));
    assert!(matches!(
        store.read(p, 0, 1, 1),
        Err(ReadError::BelowLowWater { offset: 0, low_water }) if low_water == low
    ));
    assert_eq!(read_all(&store, p).len() as u64, 200 - low);
    assert!(store.stats().segments_dropped > 0);
    let files = dafka_store::Dir::list(&dir).unwrap().len();
    assert!(files <= 4, "{files} segment files left");
    store.close();
    // Reopening finds the same marks (from the redeclarations at each segment start).
    let store = Store::open(Arc::new(dir.clone()), config.clone()).unwrap();
    assert_eq!(store.low_water(p), Some(low));
    assert_eq!(store.low_water(q), Some(1));
    assert_eq!(store.head(p), Some(200));
    assert_eq!(read_all(&store, p).len() as u64, 200 - low);

    // By age: segments whose newest record is older than the limit go. These records are
    // stamped in 1970, so the writer drops every segment but the last as it starts (the
    // time.rs tests take the limit to the microsecond).
    store.close();
    config.retention = Retention {
        max_age: Some(Duration::from_secs(60)),
        max_bytes: None,
    };
    let store = Store::open(Arc::new(dir), config).unwrap();
    let started = std::time::Instant::now();
    while store.low_water(p) == Some(low) && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let after = store.low_water(p).unwrap();
    assert!(after > low);
    assert_eq!(
        store.apply_retention(i64::MAX),
        0,
        "only the segment being written is left"
    );
    assert_eq!(read_all(&store, p).len() as u64, 200 - after);
}

#[test]
fn interval_and_never_policies_acknowledge() {
    for sync in [
        SyncPolicy::Interval(Duration::from_millis(5)),
        SyncPolicy::Never,
    ] {
        let dir = MemDir::new();
        let store = Store::open(Arc::new(dir.clone()), Config::with_sync(sync)).unwrap();
        let p = store.declare(&key(1)).unwrap();
        for o in 0..10 {
            append_one(&store, p, o, b"v");
        }
        std::thread::sleep(Duration::from_millis(20));
        let syncs = store.stats().syncs;
        match sync {
            SyncPolicy::Never => assert_eq!(syncs, 0),
            _ => assert!(syncs >= 1, "the interval sync ran"),
        }
        store.close();
        let store = Store::open(Arc::new(dir), Config::default()).unwrap();
        assert_eq!(store.head(p), Some(10));
    }
}

#[test]
fn reads_while_appending() {
    let store = Store::open(Arc::new(MemDir::new()), small_segments()).unwrap();
    let p = store.declare(&key(1)).unwrap();
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            let mut last = None;
            for o in 0..2000u64 {
                let v = value(1, o, 20);
                last = Some(
                    store
                        .append(&[AppendRecord {
                            partition: p,
                            offset: o,
                            meta: &RecordMeta::created(0),
                            value: &v,
                        }])
                        .unwrap(),
                );
            }
            last.unwrap().wait(WAIT).unwrap();
        })
    };
    let mut next = 0;
    while next < 2000 {
        for r in store.read(p, next, 100, 1 << 20).unwrap() {
            assert_eq!(r.offset, next);
            assert_eq!(r.value, value(1, next, 20));
            next += 1;
        }
    }
    writer.join().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random interleavings of partitions and batch shapes, through segment rolls and a
    /// reopen: every record reads back intact, in order, from any offset.
    #[test]
    fn round_trip_interleavings(
        ops in prop::collection::vec((0u32..6, 0usize..300, 1usize..4), 1..120),
        probe in 0u64..40,
    ) {
        let dir = MemDir::new();
        let store = Store::open(Arc::new(dir.clone()), small_segments()).unwrap();
        let mut heads: BTreeMap<u32, u64> = BTreeMap::new();
        let mut ids = BTreeMap::new();
        let mut last = None;
        for (i, &(part, len, n)) in ops.iter().enumerate() {
            let id = *ids.entry(part).or_insert_with(|| store.declare(&key(part)).unwrap());
            let mut values = Vec::new();
            for k in 0..n {
                // Every other call mixes in a second partition.
                let part = if k == 1 && i % 2 == 0 { (part + 1) % 6 } else { part };
                let id = *ids.entry(part).or_insert_with(|| store.declare(&key(part)).unwrap());
                let head = heads.entry(part).or_insert(0);
                values.push((id, *head, value(part, *head, len)));
                *head += 1;
            }
            let _ = id;
            let metas: Vec<RecordMeta> =
                values.iter().map(|(_, o, _)| RecordMeta::created(*o as i64)).collect();
            let records: Vec<AppendRecord<'_>> = values
                .iter()
                .zip(&metas)
                .map(|((id, offset, v), meta)| AppendRecord {
                    partition: *id,
                    offset: *offset,
                    meta,
                    value: v,
                })
                .collect();
            last = Some(store.append(&records).unwrap());
        }
        last.unwrap().wait(WAIT).unwrap();
        let check = |store: &Store| {
            for (&part, &head) in &heads {
                let id = ids[&part];
                prop_assert_eq!(store.head(id), Some(head));
                let all = read_all(store, id);
                prop_assert_eq!(all.len() as u64, head);
                for r in &all {
                    prop_assert_eq!(&r.value[..], &value(part, r.offset, r.value.len())[..]);
                }
                let from = probe.min(head);
                let some = store.read(id, from, 3, 1 << 20).unwrap();
                prop_assert_eq!(some.first().map(|r| r.offset), (from < head).then_some(from));
            }
            Ok(())
        };
        check(&store)?;
        store.close();
        let store = Store::open(Arc::new(dir), small_segments()).unwrap();
        prop_assert!(store.recovery_report().damage.is_empty());
        prop_assert_eq!(store.recovery_report().truncated_bytes, 0);
        check(&store)?;
    }
}

/// Issue 21: two `Store`s on one directory were accepted, so two processes could write the
/// same segments. The second fails at once, naming the directory and the holder's pid; the
/// lock goes with the store.
#[test]
fn a_second_store_on_a_directory_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let first = Store::open_path(tmp.path(), Config::default()).unwrap();
    let e = Store::open_path(tmp.path(), Config::default()).unwrap_err();
    assert!(
        matches!(&e, OpenError::Locked { holder: Some(pid), .. } if *pid == std::process::id()),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(text.contains(&tmp.path().display().to_string()), "{text}");
    assert!(
        text.contains(&format!("process {}", std::process::id())),
        "{text}"
    );
    first.close();
    let again = Store::open_path(tmp.path(), Config::default()).unwrap();
    again.close();
}

/// Issue 22: a store path that is a file said "File exists (os error 17)" (given as `file/`),
/// and "Not a directory (os error 20)" when a file is on the way (`file/store`).
#[test]
fn a_file_as_store_path_is_named_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("not-a-dir");
    std::fs::write(&path, b"x").unwrap();
    let shown = path.display().to_string();
    let e = Store::open_path(&path, Config::default()).unwrap_err();
    assert!(
        matches!(&e, OpenError::NotADirectory { file, .. } if *file == shown),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!("store path {shown} is a file, not a directory")
    );
    let slash = format!("{shown}/");
    let e = Store::open_path(&slash, Config::default()).unwrap_err();
    assert!(
        matches!(&e, OpenError::NotADirectory { file, .. } if *file == shown),
        "{e:?}"
    );
    let below = path.join("store");
    let e = Store::open_path(&below, Config::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "store path {}: {shown} is a file, not a directory",
            below.display()
        )
    );
}

/// Issue 21: a record the store cannot keep (over `max_record_bytes`) wedged its partition
/// (every later append a gap). `skip` gives its offset a place: the partition goes on, reads
/// of it answer `Lost`, and so after a reopen.
#[test]
fn a_skipped_offset_keeps_the_partition_flowing() {
    let dir = MemDir::new();
    let mut config = Config::default();
    config.max_record_bytes = 64;
    let store = Store::open(Arc::new(dir.clone()), config.clone()).unwrap();
    let p = store.declare(&key(1)).unwrap();
    append_one(&store, p, 0, &value(1, 0, 10));
    let big = value(1, 1, 65);
    let refused = store.append(&[AppendRecord {
        partition: p,
        offset: 1,
        meta: &RecordMeta::created(1),
        value: &big,
    }]);
    assert!(matches!(
        refused,
        Err(AppendError::RecordTooLarge { size: 65, max: 64 })
    ));
    store.skip(p, 1).unwrap().wait(WAIT).unwrap();
    append_one(&store, p, 2, &value(1, 2, 10));
    assert_eq!(store.head(p), Some(3));
    let check = |store: &Store| {
        assert_eq!(store.read(p, 0, 10, 1 << 20).unwrap().len(), 1);
        assert!(matches!(
            store.read(p, 1, 10, 1 << 20),
            Err(ReadError::Lost { from: 1, to: 2 })
        ));
        let after = store.read(p, 2, 10, 1 << 20).unwrap();
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].offset, 2);
    };
    check(&store);
    assert_eq!(store.stats().records, 2);
    store.close();
    let store = Store::open(Arc::new(dir), config).unwrap();
    assert!(
        store.recovery_report().damage.is_empty(),
        "a skip is not damage"
    );
    check(&store);
    append_one(&store, p, 3, &value(1, 3, 10));
}
