//! Recovery: torn tails at every byte of the last batch, flipped bits in the last batch
//! and in the middle of the log, and a golden store directory from format version 1.

mod common;

use std::path::Path;
use std::sync::Arc;

use dafka_store::format::{self, COMMIT_SIZE, HEADER_LEN};
use dafka_store::{
    AppendRecord, Config, DamageKind, Dir, FsDir, MemDir, PartitionId, ReadError, Store,
};

use common::{append_one, key, read_all, value};

const SEGMENT: &str = "00000000000000000000.log";

/// A copy of a directory's files, to damage without touching the original.
fn copy(dir: &MemDir) -> MemDir {
    let out = MemDir::new();
    for name in dir.list().unwrap() {
        out.insert(&name, dir.file(&name).unwrap().contents());
    }
    out
}

struct Written {
    dir: MemDir,
    p: PartitionId,
    q: PartitionId,
    /// Segment length before the last batch.
    before_last: usize,
    /// Records of the last batch: (partition, offset, value length), in file order.
    last: Vec<(PartitionId, u64, usize)>,
}

/// Three earlier batches, then a last batch of 6 records of two partitions.
fn write_store() -> Written {
    let dir = MemDir::new();
    let store = Store::open(Arc::new(dir.clone()), Config::default()).unwrap();
    let p = store.declare(&key(1)).unwrap();
    let q = store.declare(&key(2)).unwrap();
    for o in 0..3 {
        append_one(&store, p, o, &value(1, o, 40));
        append_one(&store, q, o, &value(2, o, 7));
    }
    let before_last = dir.file(SEGMENT).unwrap().contents().len();
    let last = vec![
        (p, 3, 33),
        (q, 3, 50),
        (p, 4, 1),
        (p, 5, 0),
        (q, 4, 20),
        (p, 6, 9),
    ];
    let values: Vec<Vec<u8>> = last
        .iter()
        .map(|&(id, o, n)| value(id.0 + 1, o, n))
        .collect();
    let records: Vec<AppendRecord<'_>> = last
        .iter()
        .zip(&values)
        .map(|(&(partition, offset, _), v)| AppendRecord {
            partition,
            offset,
            timestamp_ms: 9,
            value: v,
        })
        .collect();
    store
        .append(&records)
        .unwrap()
        .wait(std::time::Duration::from_secs(10))
        .unwrap();
    store.close();
    Written {
        dir,
        p,
        q,
        before_last,
        last,
    }
}

fn check_partition(store: &Store, id: PartitionId, expect: u64) {
    assert_eq!(store.head(id), Some(expect), "head of {id}");
    let all = read_all(store, id);
    assert_eq!(all.len() as u64, expect);
    for r in all {
        assert_eq!(r.value, value(id.0 + 1, r.offset, r.value.len()));
    }
}

#[test]
fn truncated_at_every_byte_of_the_last_batch() {
    let w = write_store();
    let full = w.dir.file(SEGMENT).unwrap().contents();
    let sizes: Vec<usize> = w
        .last
        .iter()
        .map(|&(_, _, n)| format::record_size(n))
        .collect();
    assert_eq!(
        full.len(),
        w.before_last + sizes.iter().sum::<usize>() + COMMIT_SIZE
    );
    for cut in w.before_last..=full.len() {
        let dir = copy(&w.dir);
        dir.file(SEGMENT).unwrap().replace(full[..cut].to_vec());
        let store = Store::open(Arc::new(dir.clone()), Config::default()).unwrap();
        // The whole records before the cut survive, nothing else.
        let mut end = w.before_last;
        let (mut p_head, mut q_head) = (3, 3);
        for (&(id, _, _), size) in w.last.iter().zip(&sizes) {
            if end + size > cut {
                break;
            }
            end += size;
            if id == w.p {
                p_head += 1;
            } else {
                q_head += 1;
            }
        }
        if cut == full.len() {
            end = cut;
        }
        check_partition(&store, w.p, p_head);
        check_partition(&store, w.q, q_head);
        let report = store.recovery_report();
        assert_eq!(report.truncated_bytes, (cut - end) as u64, "cut at {cut}");
        assert!(report.damage.is_empty());
        assert_eq!(dir.file(SEGMENT).unwrap().contents().len(), end);
        // The store goes on from there.
        append_one(&store, w.p, p_head, &value(1, p_head, 5));
        check_partition(&store, w.p, p_head + 1);
    }
}

#[test]
fn flipped_bit_in_the_last_batch_truncates_there() {
    let w = write_store();
    let full = w.dir.file(SEGMENT).unwrap().contents();
    // The third record of the last batch (p offset 4).
    let start = w.before_last + format::record_size(w.last[0].2) + format::record_size(w.last[1].2);
    for at in [
        start,
        start + 3,
        start + 12,
        start + format::record_size(1) - 1,
    ] {
        let dir = copy(&w.dir);
        let mut bytes = full.clone();
        bytes[at] ^= 0x04;
        dir.file(SEGMENT).unwrap().replace(bytes);
        let store = Store::open(Arc::new(dir), Config::default()).unwrap();
        check_partition(&store, w.p, 4);
        check_partition(&store, w.q, 4);
        assert_eq!(
            store.recovery_report().truncated_bytes,
            (full.len() - start) as u64
        );
    }
}

#[test]
fn flipped_bit_in_the_middle_is_skipped_and_never_served() {
    let w = write_store();
    let full = w.dir.file(SEGMENT).unwrap().contents();
    // Records are p0 q0 p1 q1 p2 q2 after two declarations, one batch each.
    let decl = |t: usize| format::record_size(0) - format::RECORD_FIXED_LEN + 30 + t;
    let mut pos = HEADER_LEN + decl(2) + COMMIT_SIZE + decl(2) + COMMIT_SIZE;
    pos += format::record_size(40) + COMMIT_SIZE; // p0
    let q0 = pos;
    pos += format::record_size(7) + COMMIT_SIZE;
    let p1 = pos;
    for (at, damaged, offset) in [(q0 + 20, w.q, 0), (p1 + 30, w.p, 1)] {
        let dir = copy(&w.dir);
        let mut bytes = full.clone();
        bytes[at] ^= 0x80;
        dir.file(SEGMENT).unwrap().replace(bytes);
        let store = Store::open(Arc::new(dir.clone()), Config::default()).unwrap();
        let report = store.recovery_report();
        assert_eq!(report.truncated_bytes, 0);
        assert!(
            matches!(report.damage[0].kind, DamageKind::BadEntry(_)),
            "{report:?}"
        );
        assert!(
            report
                .damage
                .iter()
                .any(|d| matches!(d.kind, DamageKind::Gap { .. }))
        );
        // Everything else is there; the damaged record is reported lost, never served.
        let head = if damaged == w.p { 7 } else { 5 };
        assert_eq!(store.head(damaged), Some(head));
        assert!(matches!(
            store.read(damaged, offset, 10, 1 << 20),
            Err(ReadError::Lost { from, to }) if from == offset && to == offset + 1
        ));
        if offset > 0 {
            let before = store.read(damaged, 0, 10, 1 << 20).unwrap();
            assert_eq!(before.len() as u64, offset, "stops before the loss");
        }
        let after = store.read(damaged, offset + 1, 100, 1 << 20).unwrap();
        assert_eq!(after.len() as u64, head - offset - 1);
        for r in after {
            assert_eq!(r.value, value(damaged.0 + 1, r.offset, r.value.len()));
        }
        let other = if damaged == w.p { w.q } else { w.p };
        check_partition(&store, other, if other == w.p { 7 } else { 5 });
    }
}

#[test]
fn damage_in_a_sealed_segment() {
    let dir = MemDir::new();
    let mut config = Config::default();
    config.segment_bytes = 1024;
    config.max_record_bytes = 256;
    let store = Store::open(Arc::new(dir.clone()), config.clone()).unwrap();
    let p = store.declare(&key(1)).unwrap();
    for o in 0..40 {
        append_one(&store, p, o, &value(1, o, 60));
    }
    store.close();
    let mut names = dir.list().unwrap();
    names.sort();
    assert!(names.len() > 3);
    // An impossible length in the first segment: the rest of it is never read.
    let first = dir.file(&names[0]).unwrap();
    let mut data = first.contents();
    let at = data.len() - 2 * (format::record_size(60) + COMMIT_SIZE);
    let rest = (data.len() - at) as u64;
    data[at] = 0xFF;
    first.replace(data.clone());
    let store = Store::open(Arc::new(dir.clone()), config.clone()).unwrap();
    let report = store.recovery_report();
    assert!(matches!(
        report.damage[0].kind,
        DamageKind::UnreadableRest { bytes } if bytes == rest
    ));
    assert_eq!(
        first.contents(),
        data,
        "sealed segments are never truncated"
    );
    assert_eq!(store.head(p), Some(40));
    let records = store.read(p, 0, 100, 1 << 20).unwrap();
    let lost_from = records.len() as u64;
    assert!(matches!(
        store.read(p, lost_from, 100, 1 << 20),
        Err(ReadError::Lost { to, .. }) if to == lost_from + 2
    ));
    assert_eq!(
        store.read(p, lost_from + 2, 100, 1 << 20).unwrap().len() as u64,
        40 - lost_from - 2
    );
}

#[test]
fn damaged_header_refuses_to_open() {
    let w = write_store();
    let mut bytes = w.dir.file(SEGMENT).unwrap().contents();
    bytes[1] ^= 1;
    w.dir.file(SEGMENT).unwrap().replace(bytes);
    assert!(matches!(
        Store::open(Arc::new(w.dir), Config::default()),
        Err(dafka_store::OpenError::BadHeader { .. })
    ));
}

// --- golden store directory --------------------------------------------------------

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/golden-v1");

/// The content of the golden store: 3 partitions over several small segments.
fn golden_records() -> Vec<(u32, u64, Vec<u8>)> {
    let mut out = Vec::new();
    for o in 0..30u64 {
        for part in 0..3u32 {
            if (o + u64::from(part)) % 4 != 0 {
                out.push((
                    part,
                    o,
                    value(part, o, (o as usize * 7 + part as usize) % 90),
                ));
            }
        }
    }
    out
}

fn golden_config() -> Config {
    let mut config = Config::default();
    config.segment_bytes = 1500;
    config.max_record_bytes = 256;
    config
}

/// Writes the golden directory (run once with DAFKA_STORE_WRITE_GOLDEN=1 when a new
/// format version is introduced: the old directories stay and keep being read).
fn write_golden(path: &Path) {
    let store = Store::open_path(path, golden_config()).unwrap();
    let mut heads = [0u64; 3];
    for (part, _, v) in golden_records() {
        let id = store.declare(&key(part)).unwrap();
        let offset = heads[part as usize];
        heads[part as usize] += 1;
        append_one(&store, id, offset, &v);
    }
    store.close();
}

#[test]
fn golden_v1_directory_is_read() {
    if std::env::var_os("DAFKA_STORE_WRITE_GOLDEN").is_some() {
        write_golden(Path::new(GOLDEN));
    }
    // Open a copy: opening may rewrite a torn tail, and the checked-in files must not move.
    let tmp = tempfile::tempdir().unwrap();
    let mut names = FsDir::new(GOLDEN).unwrap().list().unwrap();
    names.sort();
    assert!(names.len() >= 3, "the golden store spans several segments");
    for name in &names {
        std::fs::copy(Path::new(GOLDEN).join(name), tmp.path().join(name)).unwrap();
        let bytes = std::fs::read(Path::new(GOLDEN).join(name)).unwrap();
        assert_eq!(&bytes[..6], &[0x44, 0x4B, 0x4C, 0x47, 0x00, 0x01]);
    }
    let store = Store::open_path(tmp.path(), golden_config()).unwrap();
    assert!(store.recovery_report().damage.is_empty());
    assert_eq!(store.recovery_report().truncated_bytes, 0);
    let expected = golden_records();
    assert_eq!(store.recovery_report().records, expected.len() as u64);
    let infos = store.partitions();
    assert_eq!(infos.len(), 3);
    for part in 0..3u32 {
        let id = store.lookup(&key(part)).unwrap();
        let want: Vec<&Vec<u8>> = expected
            .iter()
            .filter(|(p, _, _)| *p == part)
            .map(|(_, _, v)| v)
            .collect();
        let got = read_all(&store, id);
        assert_eq!(got.len(), want.len());
        for (r, v) in got.iter().zip(want) {
            assert_eq!(&r.value[..], &v[..]);
            assert_eq!(r.timestamp_ms, 1_000 + r.offset);
        }
    }
}
