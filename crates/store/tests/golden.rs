//! Golden store directories, one or more per segment format version, checked in under
//! `tests/data/` (see the README there): every build must keep reading every one of them,
//! record by record, metadata included.

mod common;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use dafka_store::{
    AppendRecord, Config, Header, MetaParts, PartitionId, ReadError, RecordMeta, Store,
    TimestampType,
};

use common::{key, read_all, records, stamp, value};

const V1: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/golden-v1");
const V1_SKIP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/golden-v1-skip");
const V2: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/golden-v2");

/// One step of a golden store's history.
#[derive(Debug, Clone)]
enum Step {
    /// A record of partition `part` with a value of `len` bytes (`common::value` of the
    /// partition and `seed`, by default its offset) and `meta` (for a version 1 store: the
    /// metadata it reads back with).
    Record {
        part: u32,
        len: usize,
        seed: Option<u64>,
        meta: RecordMeta,
    },
    /// The partition's next offset skipped (a record the store did not keep).
    Skip { part: u32 },
}

/// `golden-v1`: three partitions, one record per batch, received at `1000 + offset` ms.
fn v1_plan() -> Vec<Vec<Step>> {
    let mut heads = [0u64; 3];
    let mut batches = Vec::new();
    for o in 0..30u64 {
        for part in 0..3u32 {
            if (o + u64::from(part)) % 4 != 0 {
                let offset = heads[part as usize];
                heads[part as usize] += 1;
                batches.push(vec![Step::Record {
                    part,
                    len: (o as usize * 7 + part as usize) % 90,
                    seed: Some(o),
                    meta: RecordMeta::log_append(stamp(offset)),
                }]);
            }
        }
    }
    batches
}

fn v1_config() -> Config {
    let mut config = Config::default();
    config.segment_bytes = 1500;
    config.max_record_bytes = 256;
    config
}

/// `golden-v1-skip`: three partitions (the third declared in the fourth batch), several
/// records per batch, empty values, receive times out of order, two skips, four segments.
fn v1_skip_plan() -> Vec<Vec<Step>> {
    let mut batches = Vec::new();
    for b in 0..16u64 {
        let mut batch = Vec::new();
        for k in 0..3u64 {
            let part = ((b + k) % 3) as u32;
            if part == 2 && b < 3 {
                continue;
            }
            if (b, k) == (5, 1) || (b, k) == (11, 0) {
                batch.push(Step::Skip { part });
                continue;
            }
            // Out of order: the second of a batch is older than the first.
            let jitter = (b * 7 + k * 13) % 10;
            let ts_ms = 1_700_000_000_000 + b * 1_000 + jitter * 100 - k * 250;
            batch.push(Step::Record {
                part,
                len: ((b * 11 + k * 5) % 60) as usize,
                seed: None,
                meta: RecordMeta::log_append(ts_ms as i64 * 1_000),
            });
        }
        batches.push(batch);
    }
    batches
}

/// The configuration `golden-v1-skip` and `golden-v2` were written with: small segments, an
/// index entry every 128 bytes of a partition's records.
fn small_config() -> Config {
    let mut config = Config::default();
    config.segment_bytes = 1024;
    config.max_record_bytes = 128;
    config.index_interval_bytes = 128;
    config
}

/// The metadata of record `k` of batch `b` of `golden-v2`: every shape in turn.
fn v2_meta(b: u64, k: u64) -> RecordMeta {
    // Microseconds, out of order within a batch, and one before the epoch.
    let ts = 1_764_000_000_000_000 + b as i64 * 1_000_000 + ((b * 7 + k * 13) % 10) as i64 * 1_000
        - k as i64 * 2_500;
    let text = |s: String| Some(Bytes::from(s));
    match (b * 3 + k) % 8 {
        0 => RecordMeta::created(ts),
        1 => RecordMeta::log_append(ts),
        2 => RecordMeta::from(MetaParts {
            key: Some(Bytes::new()),
            ..MetaParts::created(ts)
        }),
        3 => RecordMeta::from(MetaParts {
            key: text(format!("key-{b}-{k}")),
            ..MetaParts::created(ts)
        }),
        4 => RecordMeta::from(MetaParts {
            headers: Some(Vec::new()),
            ..MetaParts::created(ts)
        }),
        5 => RecordMeta::from(MetaParts {
            headers: Some(vec![
                Header::new("trace-id", text(format!("{b:04x}{k:04x}"))),
                Header::new("null", None),
                Header::new("empty", Some(Bytes::new())),
            ]),
            ..MetaParts::created(ts)
        }),
        6 => RecordMeta::from(MetaParts {
            key: text(format!("k{b}")),
            headers: Some(vec![
                Header::new("", None),
                Header::new("é", text("ü".into())),
            ]),
            ..MetaParts::log_append(ts)
        }),
        _ => RecordMeta::created(-ts / 1_000_000),
    }
}

/// `golden-v2`: three partitions, several records per batch, every shape of metadata
/// ([`v2_meta`]), empty values, timestamps out of order, two skips, several segments.
fn v2_plan() -> Vec<Vec<Step>> {
    let mut batches = Vec::new();
    for b in 0..20u64 {
        let mut batch = Vec::new();
        for k in 0..3u64 {
            let part = ((b + k) % 3) as u32;
            if (b, k) == (4, 1) || (b, k) == (13, 2) {
                batch.push(Step::Skip { part });
                continue;
            }
            batch.push(Step::Record {
                part,
                len: ((b * 11 + k * 5) % 50) as usize,
                seed: None,
                meta: v2_meta(b, k),
            });
        }
        batches.push(batch);
    }
    batches
}

/// Writes `golden-v2` with this build (segment format version 2).
#[test]
#[ignore = "writes tests/data/golden-v2: run once, when the format version is introduced"]
fn write_golden_v2() {
    let path = Path::new(V2);
    assert!(!path.exists(), "{V2} exists: remove it first");
    write_plan(path, small_config(), &v2_plan());
}

/// Writes a plan's batches into a new store at `path` (one `append` per run of records, a
/// `skip` call per skip, in order; each batch waited for).
fn write_plan(path: &Path, config: Config, plan: &[Vec<Step>]) {
    let store = Store::open_path(path, config).unwrap();
    let mut heads = [0u64; 3];
    let mut ids: [Option<PartitionId>; 3] = [None; 3];
    for batch in plan {
        let mut run: Vec<(PartitionId, u64, &RecordMeta, Vec<u8>)> = Vec::new();
        let mut last = None;
        for step in batch {
            let (Step::Record { part, .. } | Step::Skip { part }) = step;
            let id =
                *ids[*part as usize].get_or_insert_with(|| store.declare(&key(*part)).unwrap());
            let offset = heads[*part as usize];
            heads[*part as usize] += 1;
            match step {
                Step::Record {
                    len, seed, meta, ..
                } => run.push((id, offset, meta, value(*part, seed.unwrap_or(offset), *len))),
                Step::Skip { .. } => {
                    if !run.is_empty() {
                        append(&store, &run);
                        run.clear();
                    }
                    last = Some(store.skip(id, offset).unwrap());
                }
            }
        }
        if !run.is_empty() {
            last = Some(append(&store, &run));
        }
        last.unwrap().wait(Duration::from_secs(10)).unwrap();
    }
    store.close();
    std::fs::remove_file(path.join(dafka_store::LOCK_FILE)).unwrap();
}

fn append(store: &Store, run: &[(PartitionId, u64, &RecordMeta, Vec<u8>)]) -> dafka_store::Ticket {
    store.append(&records(run)).unwrap()
}

/// A partition's offsets in order: `Some((meta, value))` for a record, `None` for a skip.
type Offsets = Vec<Option<(RecordMeta, Vec<u8>)>>;

/// What a golden store holds, from its plan, per partition.
fn expected(plan: &[Vec<Step>]) -> [Offsets; 3] {
    let mut out: [Offsets; 3] = Default::default();
    for step in plan.iter().flatten() {
        match step {
            Step::Record {
                part,
                len,
                seed,
                meta,
            } => {
                let offset = out[*part as usize].len() as u64;
                let v = value(*part, seed.unwrap_or(offset), *len);
                out[*part as usize].push(Some((meta.clone(), v)));
            }
            Step::Skip { part } => out[*part as usize].push(None),
        }
    }
    out
}

/// Copies a golden directory (opening moves the durable point and may rewrite a torn tail:
/// the checked-in files must not change), checks its segments' format version, opens it.
fn open_copy(golden: &str, version: u8, config: Config) -> (tempfile::TempDir, Store) {
    let tmp = tempfile::tempdir().unwrap();
    let mut segments = 0;
    for entry in std::fs::read_dir(golden).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let bytes = std::fs::read(Path::new(golden).join(&name)).unwrap();
        if name.ends_with(".log") {
            assert_eq!(
                &bytes[..6],
                &[0x44, 0x4B, 0x4C, 0x47, 0x00, version],
                "{name}"
            );
            segments += 1;
        }
        std::fs::write(tmp.path().join(&name), bytes).unwrap();
    }
    assert!(segments >= 3, "the golden store spans several segments");
    let store = Store::open_path(tmp.path(), config).unwrap();
    let report = store.recovery_report();
    assert!(report.damage.is_empty(), "{:?}", report.damage);
    assert_eq!(report.truncated_bytes, 0);
    (tmp, store)
}

/// Every offset of every partition reads back as the plan says: the record (offset, value,
/// metadata) or `Lost` for a skip, one by one and all at once; and `offset_for_time` agrees
/// with a search of the plan, for every timestamp in it and either side of each.
fn check(store: &Store, plan: &[Vec<Step>]) {
    let expected = expected(plan);
    let records = expected.iter().flatten().filter(|r| r.is_some()).count();
    assert_eq!(store.recovery_report().records, records as u64);
    assert_eq!(store.partitions().len(), 3);
    for (part, want) in expected.iter().enumerate() {
        let id = store.lookup(&key(part as u32)).unwrap();
        assert_eq!(store.low_water(id), Some(0));
        assert_eq!(store.head(id), Some(want.len() as u64));
        for (offset, want) in want.iter().enumerate() {
            let offset = offset as u64;
            match (store.read(id, offset, 1, 1 << 20), want) {
                (Ok(got), Some((meta, v))) => {
                    assert_eq!(got.len(), 1);
                    assert_eq!(got[0].offset, offset);
                    assert_eq!(&got[0].meta, meta, "partition {part} offset {offset}");
                    assert_eq!(&got[0].value[..], &v[..]);
                }
                (Err(ReadError::Lost { from, to }), None) => {
                    assert_eq!((from, to), (offset, offset + 1));
                }
                (got, want) => panic!("partition {part} offset {offset}: {got:?}, want {want:?}"),
            }
        }
        // Reads in one go stop at a skip: read_all would too, so read around them.
        let kept: Vec<_> = want.iter().flatten().collect();
        let mut got = Vec::new();
        let mut from = 0;
        while from < want.len() as u64 {
            match store.read(id, from, 1000, 1 << 20) {
                Ok(batch) => {
                    from = batch.last().unwrap().offset + 1;
                    got.extend(batch);
                }
                Err(ReadError::Lost { to, .. }) => from = to,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got.len(), kept.len());
        for (r, (meta, v)) in got.iter().zip(kept) {
            assert_eq!((&r.meta, &r.value[..]), (meta, &v[..]));
        }
        let stamps: Vec<(u64, i64)> = (want.iter().enumerate())
            .filter_map(|(o, r)| r.as_ref().map(|(m, _)| (o as u64, m.timestamp)))
            .collect();
        for &(_, ts) in &stamps {
            for t in [ts - 1, ts, ts + 1, i64::MIN, i64::MAX] {
                let first = stamps.iter().find(|&&(_, s)| s >= t).map(|&(o, _)| o);
                assert_eq!(
                    store.offset_for_time(id, t).unwrap(),
                    first,
                    "partition {part} t {t}"
                );
            }
        }
    }
}

#[test]
fn golden_v1_is_read() {
    let (_tmp, store) = open_copy(V1, 1, v1_config());
    check(&store, &v1_plan());
    for info in store.partitions() {
        for r in read_all(&store, info.id) {
            assert_eq!(r.meta.timestamp_type(), TimestampType::LogAppendTime);
        }
    }
}

#[test]
fn golden_v1_with_skips_is_read() {
    let (_tmp, store) = open_copy(V1_SKIP, 1, small_config());
    check(&store, &v1_skip_plan());
}

#[test]
fn golden_v2_is_read() {
    let (_tmp, store) = open_copy(V2, 2, small_config());
    check(&store, &v2_plan());
}

/// A store written by version 1 is appended to in a new segment of version 2 (an older build
/// then refuses the new segment at open instead of hiding its records as damage), and reads
/// back whole, old and new records, after a reopen.
#[test]
fn a_version_1_store_goes_on_in_a_version_2_segment() {
    let (tmp, store) = open_copy(V1_SKIP, 1, small_config());
    let old: Vec<String> = segment_names(tmp.path());
    let id = store.lookup(&key(1)).unwrap();
    let head = store.head(id).unwrap();
    let meta = v2_meta(0, 2); // a key
    store
        .append(&[AppendRecord {
            partition: id,
            offset: head,
            meta: &meta,
            value: b"after the upgrade",
        }])
        .unwrap()
        .wait(Duration::from_secs(10))
        .unwrap();
    store.close();
    let now = segment_names(tmp.path());
    assert_eq!(now.len(), old.len() + 1, "one new segment");
    assert_eq!(now[..old.len()], old[..]);
    for (name, version) in now.iter().map(|n| (n, if old.contains(n) { 1 } else { 2 })) {
        let bytes = std::fs::read(tmp.path().join(name)).unwrap();
        assert_eq!(bytes[5], version, "{name}");
    }
    let store = Store::open_path(tmp.path(), small_config()).unwrap();
    assert!(store.recovery_report().damage.is_empty());
    let mut plan = v1_skip_plan();
    plan.push(vec![Step::Record {
        part: 1,
        len: 0,
        seed: None,
        meta: meta.clone(),
    }]);
    // The plan's value for the new record is empty; check it apart.
    let got = store.read(id, head, 1, 1 << 20).unwrap();
    assert_eq!(
        (&got[0].meta, &got[0].value[..]),
        (&meta, &b"after the upgrade"[..])
    );
    let t = meta.timestamp;
    assert_eq!(store.offset_for_time(id, t).unwrap(), Some(head));
    check_all_but_values(&store, &plan);
}

/// [`check`] without comparing values of the records added after the golden plan.
fn check_all_but_values(store: &Store, plan: &[Vec<Step>]) {
    let expected = expected(plan);
    for (part, want) in expected.iter().enumerate() {
        let id = store.lookup(&key(part as u32)).unwrap();
        assert_eq!(store.head(id), Some(want.len() as u64));
        for (offset, want) in want.iter().enumerate() {
            match (store.read(id, offset as u64, 1, 1 << 20), want) {
                (Ok(got), Some((meta, _))) => assert_eq!(&got[0].meta, meta),
                (Err(ReadError::Lost { .. }), None) => {}
                (got, want) => panic!("partition {part} offset {offset}: {got:?}, want {want:?}"),
            }
        }
    }
}

fn segment_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".log"))
        .collect();
    names.sort();
    names
}
