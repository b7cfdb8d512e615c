//! Golden store directories, one per segment format version, checked in under
//! `tests/data/` (see the README there): every build must keep reading every one of them.

mod common;

use std::path::Path;
use std::time::Duration;

use dafka_store::{AppendRecord, Config, PartitionId, Store};

use common::{key, value};

const V1_SKIP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/golden-v1-skip");

/// One step of a golden store's history.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// A record of partition `part` with a value of `len` bytes, received at `ts_ms`.
    Record { part: u32, len: usize, ts_ms: u64 },
    /// The partition's next offset skipped (a record the store did not keep).
    Skip { part: u32 },
}

/// The batches of the v1 store with skips: three partitions (the third declared only in the
/// fourth batch), several records per batch, empty values, timestamps out of order, two skips,
/// four segments.
fn v1_plan() -> Vec<Vec<Step>> {
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
            batch.push(Step::Record {
                part,
                len: ((b * 11 + k * 5) % 60) as usize,
                ts_ms: 1_700_000_000_000 + b * 1_000 + jitter * 100 - k * 250,
            });
        }
        batches.push(batch);
    }
    batches
}

fn v1_config() -> Config {
    let mut config = Config::default();
    config.segment_bytes = 1024;
    config.max_record_bytes = 128;
    config.index_interval_bytes = 128;
    config
}

/// Writes the v1 store with skips with the format-version-1 writer.
#[test]
#[ignore = "writes tests/data/golden-v1-skip: run once, by the last build that writes version 1"]
fn write_golden_v1_skip() {
    let path = Path::new(V1_SKIP);
    assert!(!path.exists(), "{V1_SKIP} exists: remove it first");
    let store = Store::open_path(path, v1_config()).unwrap();
    let mut heads = [0u64; 3];
    let mut ids: [Option<PartitionId>; 3] = [None; 3];
    for batch in v1_plan() {
        let mut values = Vec::new();
        let mut last = None;
        for step in &batch {
            let part = match *step {
                Step::Record { part, .. } | Step::Skip { part } => part,
            };
            let id = *ids[part as usize].get_or_insert_with(|| store.declare(&key(part)).unwrap());
            let offset = heads[part as usize];
            heads[part as usize] += 1;
            match *step {
                Step::Record { len, ts_ms, .. } => {
                    values.push((id, offset, ts_ms, value(part, offset, len)))
                }
                Step::Skip { .. } => {
                    // Skips go in their own call, before the records after them.
                    if !values.is_empty() {
                        append(&store, &values);
                        values.clear();
                    }
                    last = Some(store.skip(id, offset).unwrap());
                }
            }
        }
        if !values.is_empty() {
            last = Some(append(&store, &values));
        }
        last.unwrap().wait(Duration::from_secs(10)).unwrap();
    }
    store.close();
    std::fs::remove_file(path.join(dafka_store::LOCK_FILE)).unwrap();
}

fn append(store: &Store, values: &[(PartitionId, u64, u64, Vec<u8>)]) -> dafka_store::Ticket {
    let records: Vec<AppendRecord<'_>> = values
        .iter()
        .map(|(id, offset, ts, v)| AppendRecord {
            partition: *id,
            offset: *offset,
            timestamp_ms: *ts,
            value: v,
        })
        .collect();
    store.append(&records).unwrap()
}

/// A partition's offsets in order: `Some((ts_ms, value))` for a record, `None` for a skip.
type Offsets = Vec<Option<(u64, Vec<u8>)>>;

/// What a golden store holds, from its plan, per partition.
fn expected(plan: &[Vec<Step>]) -> [Offsets; 3] {
    let mut out: [Offsets; 3] = Default::default();
    for step in plan.iter().flatten() {
        match *step {
            Step::Record { part, len, ts_ms } => {
                let offset = out[part as usize].len() as u64;
                out[part as usize].push(Some((ts_ms, value(part, offset, len))));
            }
            Step::Skip { part } => out[part as usize].push(None),
        }
    }
    out
}

/// Copies a golden directory (opening may rewrite a torn tail and moves the durable point:
/// the checked-in files must not change) and checks its segments' format version.
fn open_copy(golden: &str, version: u8, config: Config) -> (tempfile::TempDir, Store) {
    let tmp = tempfile::tempdir().unwrap();
    let mut segments = 0;
    for entry in std::fs::read_dir(golden).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            continue;
        }
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

#[test]
fn golden_v1_with_skips_is_read() {
    let (_tmp, store) = open_copy(V1_SKIP, 1, v1_config());
    let expected = expected(&v1_plan());
    let records: usize = expected.iter().flatten().filter(|r| r.is_some()).count();
    assert_eq!(store.recovery_report().records, records as u64);
    assert_eq!(store.partitions().len(), 3);
    for (part, want) in expected.iter().enumerate() {
        let id = store.lookup(&key(part as u32)).unwrap();
        assert_eq!(store.low_water(id), Some(0));
        assert_eq!(store.head(id), Some(want.len() as u64));
        for (offset, want) in want.iter().enumerate() {
            let offset = offset as u64;
            match (store.read(id, offset, 1, 1 << 20), want) {
                (Ok(got), Some((ts_ms, v))) => {
                    assert_eq!(got.len(), 1);
                    assert_eq!(got[0].offset, offset);
                    assert_eq!(got[0].timestamp_ms, *ts_ms);
                    assert_eq!(&got[0].value[..], &v[..]);
                }
                (Err(dafka_store::ReadError::Lost { from, to }), None) => {
                    assert_eq!((from, to), (offset, offset + 1));
                }
                (got, want) => panic!("partition {part} offset {offset}: {got:?}, want {want:?}"),
            }
        }
    }
}
