//! Recovery: torn tails at every byte of the last batch, flipped bits in the last batch
//! (torn, or synced and then damaged) and in the middle of the log, damaged lengths and
//! headers, missing and misnamed segments, holes filled. The golden store directories of
//! each format version are read by `tests/golden.rs`.

mod common;

use std::sync::Arc;

use bytes::Bytes;

use dafka_store::format::{self, COMMIT_SIZE, DURABLE_POINT_FILE, HEADER_LEN};
use dafka_store::{
    AppendRecord, Config, DamageKind, Dir, Header, MemDir, MetaParts, OpenError, PartitionId,
    ReadError, RecordMeta, Store,
};

use common::{append_one, key, read_all, stamp, value};

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
    /// The durable point before the last batch: what a crash while the last batch was
    /// being written (its `fdatasync` not returned) leaves.
    point_before_last: Vec<u8>,
    /// Records of the last batch: (partition, offset, value length), in file order.
    last: Vec<(PartitionId, u64, usize)>,
}

/// The metadata of record `i` of the last batch of [`write_store`]: a key, headers (one
/// null) with a log-append time, or none.
fn last_meta(i: usize) -> RecordMeta {
    match i % 3 {
        0 => RecordMeta::from(MetaParts {
            key: Some(Bytes::from(vec![i as u8; 3])),
            ..MetaParts::created(9 + i as i64)
        }),
        1 => RecordMeta::from(MetaParts {
            headers: Some(vec![
                Header::new("h", None),
                Header::new("v", Some(Bytes::from_static(b"x"))),
            ]),
            ..MetaParts::log_append(9)
        }),
        _ => RecordMeta::created(9),
    }
}

/// Three earlier batches, then a last batch of 6 records of two partitions, with keys and
/// headers ([`last_meta`]).
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
    let point_before_last = dir.file(DURABLE_POINT_FILE).unwrap().contents();
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
    let metas: Vec<RecordMeta> = (0..last.len()).map(last_meta).collect();
    let records: Vec<AppendRecord<'_>> = last
        .iter()
        .zip(&values)
        .zip(&metas)
        .map(|((&(partition, offset, _), v), meta)| AppendRecord {
            partition,
            offset,
            meta,
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
        point_before_last,
        last,
    }
}

/// A copy of the store as a crash during its last batch leaves it: `segment` as the bytes
/// of its only segment, the durable point from before that batch.
fn crashed(w: &Written, segment: Vec<u8>) -> MemDir {
    let dir = copy(&w.dir);
    dir.file(SEGMENT).unwrap().replace(segment);
    dir.insert(DURABLE_POINT_FILE, w.point_before_last.clone());
    dir
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
    let sizes: Vec<usize> = (w.last.iter().enumerate())
        .map(|(i, &(_, _, n))| format::record_size_with(&last_meta(i), n))
        .collect();
    assert_eq!(
        full.len(),
        w.before_last + sizes.iter().sum::<usize>() + COMMIT_SIZE
    );
    for cut in w.before_last..=full.len() {
        let dir = crashed(&w, full[..cut].to_vec());
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
        // With their metadata.
        for (i, &(id, offset, _)) in w.last.iter().enumerate() {
            if offset < store.head(id).unwrap() {
                let got = store.read(id, offset, 1, 1).unwrap();
                assert_eq!(got[0].meta, last_meta(i), "cut at {cut}");
            }
        }
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
    // The third record of the last batch (p offset 4; after a record with a key and one with
    // headers; itself without extras).
    let start = w.before_last
        + format::record_size_with(&last_meta(0), w.last[0].2)
        + format::record_size_with(&last_meta(1), w.last[1].2);
    for at in [
        start,
        start + 3,
        start + 12,
        start + format::record_size(1) - 1,
    ] {
        let mut bytes = full.clone();
        bytes[at] ^= 0x04;
        let dir = crashed(&w, bytes);
        let store = Store::open(Arc::new(dir), Config::default()).unwrap();
        check_partition(&store, w.p, 4);
        check_partition(&store, w.q, 4);
        assert_eq!(
            store.recovery_report().truncated_bytes,
            (full.len() - start) as u64
        );
    }
}

/// Issue 21: a flipped byte inside the last group commit, after its `fdatasync` returned
/// (the records were acknowledged), truncated the batch from there. The durable point says
/// it was synced: exactly the damaged record is skipped, the rest of the batch kept.
#[test]
fn flipped_bit_in_the_last_synced_batch_is_skipped_not_truncated() {
    let w = write_store();
    let full = w.dir.file(SEGMENT).unwrap().contents();
    // The third record of the last batch (p offset 4; after a record with a key and one with
    // headers; itself without extras).
    let start = w.before_last
        + format::record_size_with(&last_meta(0), w.last[0].2)
        + format::record_size_with(&last_meta(1), w.last[1].2);
    for at in [start + 3, start + 12, start + format::record_size(1) - 1] {
        let dir = copy(&w.dir);
        let mut bytes = full.clone();
        bytes[at] ^= 0x04;
        dir.file(SEGMENT).unwrap().replace(bytes);
        let store = Store::open(Arc::new(dir), Config::default()).unwrap();
        let report = store.recovery_report();
        assert_eq!(report.truncated_bytes, 0, "byte {at}");
        assert_eq!(report.damage[0].position, start as u64, "{report:?}");
        assert_eq!(store.stats().damaged, report.damage.len() as u64);
        // p: 0..=3 and 5..=6 are there, 4 is a hole; q is whole.
        assert_eq!(store.head(w.p), Some(7));
        assert_eq!(store.read(w.p, 0, 100, 1 << 20).unwrap().len(), 4);
        assert!(matches!(
            store.read(w.p, 4, 10, 1 << 20),
            Err(ReadError::Lost { from: 4, to: 5 })
        ));
        let after = store.read(w.p, 5, 10, 1 << 20).unwrap();
        assert_eq!(after.iter().map(|r| r.offset).collect::<Vec<_>>(), [5, 6]);
        check_partition(&store, w.q, 5);
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
            matches!(report.damage[0].kind, DamageKind::BadEntry { .. }),
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

/// 40 records of 60 B in segments of 1 KiB: the directory, its configuration, the
/// partition and the segment names in log order.
fn small_segments() -> (MemDir, Config, PartitionId, Vec<String>) {
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
    let mut names: Vec<String> = dir
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".log"))
        .collect();
    names.sort();
    assert!(names.len() > 3);
    (dir, config, p, names)
}

#[test]
fn damage_in_a_sealed_segment() {
    let (dir, config, p, names) = small_segments();
    // Impossible lengths in the first segment (issue 21: 0x7fffffff hid the rest of the
    // segment): exactly the damaged record is lost, the walk resumes at the entry after it.
    for length in [[0xFF, 0, 0, 0], [0x7F, 0xFF, 0xFF, 0xFF], [0, 0, 0, 0]] {
        let dir = copy(&dir);
        let first = dir.file(&names[0]).unwrap();
        let mut data = first.contents();
        let at = data.len() - 2 * (format::record_size(60) + COMMIT_SIZE);
        data[at..at + 4].copy_from_slice(&length);
        first.replace(data.clone());
        let store = Store::open(Arc::new(dir.clone()), config.clone()).unwrap();
        let report = store.recovery_report();
        assert!(
            matches!(
                report.damage[0].kind,
                DamageKind::BadEntry { bytes, .. } if bytes == format::record_size(60) as u64
            ),
            "{report:?}"
        );
        assert_eq!(report.damage[0].position, at as u64);
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
            Err(ReadError::Lost { to, .. }) if to == lost_from + 1
        ));
        let rest = store.read(p, lost_from + 1, 100, 1 << 20).unwrap();
        assert_eq!(rest.len() as u64, 40 - lost_from - 1);
        for r in rest {
            assert_eq!(r.value, value(1, r.offset, 60));
        }
        // The store goes on appending after the damage.
        append_one(&store, p, 40, &value(1, 40, 60));
        assert_eq!(store.read(p, 40, 1, 1 << 20).unwrap()[0].offset, 40);
    }
    // Garbage to the end of the segment: the rest of it is reported and never read, the
    // next segment served.
    let first = dir.file(&names[0]).unwrap();
    let mut data = first.contents();
    let at = data.len() - 2 * (format::record_size(60) + COMMIT_SIZE);
    let rest = (data.len() - at) as u64;
    for b in &mut data[at..] {
        *b = 0xA5;
    }
    first.replace(data);
    let store = Store::open(Arc::new(dir.clone()), config.clone()).unwrap();
    let report = store.recovery_report();
    assert!(matches!(
        report.damage[0].kind,
        DamageKind::UnreadableRest { bytes } if bytes == rest
    ));
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

/// Issue 21: one flipped bit in the value of offset 5000 of 100,000 records of 100 B in
/// one segment hid everything after it from readers (a consumer waited forever). The
/// store serves 0..5000 and 5001..100000, and says 5000 is lost.
#[test]
fn one_flipped_bit_among_100_000_records_loses_one_record() {
    let dir = MemDir::new();
    let store = Store::open(Arc::new(dir.clone()), Config::default()).unwrap();
    let p = store.declare(&key(1)).unwrap();
    let values: Vec<Vec<u8>> = (0..100_000).map(|o| value(1, o, 100)).collect();
    for chunk in values.chunks(10_000).enumerate() {
        let (i, chunk) = chunk;
        let meta = RecordMeta::created(1);
        let records: Vec<AppendRecord<'_>> = chunk
            .iter()
            .enumerate()
            .map(|(j, v)| AppendRecord {
                partition: p,
                offset: (i * 10_000 + j) as u64,
                meta: &meta,
                value: v,
            })
            .collect();
        store
            .append(&records)
            .unwrap()
            .wait(std::time::Duration::from_secs(30))
            .unwrap();
    }
    let at = {
        // The value of offset 5000: find it by its recognisable bytes.
        let bytes = dir.file(SEGMENT).unwrap().contents();
        let needle = value(1, 5000, 100);
        bytes.windows(100).position(|w| w == &needle[..]).unwrap()
    };
    store.close();
    let file = dir.file(SEGMENT).unwrap();
    let mut bytes = file.contents();
    bytes[at + 50] ^= 0x10;
    file.replace(bytes);
    let store = Store::open(Arc::new(dir), Config::default()).unwrap();
    assert_eq!(store.recovery_report().truncated_bytes, 0);
    assert_eq!(store.head(p), Some(100_000));
    let mut got = Vec::new();
    let mut from = 0;
    let mut lost = Vec::new();
    while from < 100_000 {
        match store.read(p, from, 1024, 1 << 20) {
            Ok(batch) => {
                from = batch.last().unwrap().offset + 1;
                got.extend(batch.into_iter().map(|r| r.offset));
            }
            Err(ReadError::Lost { from: f, to }) => {
                lost.push((f, to));
                from = to;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(lost, [(5000, 5001)]);
    assert_eq!(got.len(), 99_999);
    assert!(got.iter().copied().eq((0..5000).chain(5001..100_000)));
}

/// Issue 21: a zeroed header of the last segment erased the whole segment (acknowledged
/// records) as a "torn header". Below the durable point it is damage: the header is
/// reported, the segment read.
#[test]
fn zeroed_header_of_a_synced_last_segment_keeps_its_records() {
    let w = write_store();
    let mut bytes = w.dir.file(SEGMENT).unwrap().contents();
    bytes[..HEADER_LEN].fill(0);
    w.dir.file(SEGMENT).unwrap().replace(bytes);
    let store = Store::open(Arc::new(w.dir.clone()), Config::default()).unwrap();
    let report = store.recovery_report();
    assert_eq!(report.truncated_bytes, 0);
    assert!(
        matches!(report.damage[0].kind, DamageKind::BadHeader(_)),
        "{report:?}"
    );
    check_partition(&store, w.p, 7);
    check_partition(&store, w.q, 5);
    // Never written whole (its creation was torn, past the durable point): reset.
    let dir = crashed(&w, vec![0; 12]);
    dir.insert(
        DURABLE_POINT_FILE,
        format::DurablePoint { position: 0 }.encode().to_vec(),
    );
    let store = Store::open(Arc::new(dir), Config::default()).unwrap();
    assert_eq!(store.recovery_report().truncated_bytes, 12);
    assert!(store.partitions().is_empty());
}

/// Issue 21: a deleted middle segment, or a segment file renamed to a name that overflows
/// u64, was ignored without a log line (a consumer then stalled). Both stop the open with
/// an error naming the file.
#[test]
fn missing_or_misnamed_segments_stop_the_open() {
    let (dir, config, _, names) = small_segments();

    let missing = copy(&dir);
    missing.remove(&names[1]).unwrap();
    let e = Store::open(Arc::new(missing), config.clone()).unwrap_err();
    assert!(
        matches!(&e, OpenError::MissingSegment { file, .. } if *file == names[1]),
        "{e}"
    );
    assert!(e.to_string().contains(&names[1]), "{e}");

    // The last segment gone: the durable point says its bytes were written.
    let missing = copy(&dir);
    missing.remove(names.last().unwrap()).unwrap();
    let e = Store::open(Arc::new(missing), config.clone()).unwrap_err();
    assert!(
        matches!(&e, OpenError::MissingSegment { file, .. } if file == names.last().unwrap()),
        "{e}"
    );

    let renamed = copy(&dir);
    let bytes = renamed.file(&names[1]).unwrap().contents();
    renamed.remove(&names[1]).unwrap();
    renamed.insert("99999999999999999999.log", bytes);
    let e = Store::open(Arc::new(renamed), config.clone()).unwrap_err();
    assert!(
        matches!(&e, OpenError::BadFileName { file } if file == "99999999999999999999.log"),
        "{e}"
    );
    assert!(e.to_string().contains("99999999999999999999.log"), "{e}");

    // Files that are not named like segments are left alone.
    let other = copy(&dir);
    other.insert("notes.txt", b"hello".to_vec());
    Store::open(Arc::new(other), config).unwrap();
}

#[test]
fn damaged_header_is_reported_and_the_segment_read() {
    let w = write_store();
    let mut bytes = w.dir.file(SEGMENT).unwrap().contents();
    bytes[1] ^= 1;
    w.dir.file(SEGMENT).unwrap().replace(bytes);
    let store = Store::open(Arc::new(w.dir.clone()), Config::default()).unwrap();
    assert!(matches!(
        store.recovery_report().damage[0].kind,
        DamageKind::BadHeader(format::FormatError::BadMagic(_))
    ));
    check_partition(&store, w.p, 7);
    store.close();
    // A header of a format version this crate does not read: not opened, nothing touched.
    let mut bytes = w.dir.file(SEGMENT).unwrap().contents();
    let mut header = format::SegmentHeader::new(0).encode();
    header[5] = 0x03;
    let crc = crc32c_of(&header[..16]);
    header[16..].copy_from_slice(&crc.to_be_bytes());
    bytes[..HEADER_LEN].copy_from_slice(&header);
    w.dir.file(SEGMENT).unwrap().replace(bytes.clone());
    assert!(matches!(
        Store::open(Arc::new(w.dir.clone()), Config::default()),
        Err(OpenError::BadHeader { .. })
    ));
    assert_eq!(w.dir.file(SEGMENT).unwrap().contents(), bytes);
}

/// CRC-32C (Castagnoli), bit by bit: the test's own, independent of the crate's.
fn crc32c_of(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Issue 21: a store with a hole (damaged records) fills it with the records another store
/// holds: `holes` lists it, `fill` writes them, reads serve them in order, and so after a
/// reopen; a second fill, or one outside a hole, is refused.
#[test]
fn a_hole_is_filled_and_stays_filled() {
    let w = write_store();
    let full = w.dir.file(SEGMENT).unwrap().contents();
    let needle = value(w.p.0 + 1, 1, 40);
    let at = full.windows(40).position(|x| x == &needle[..]).unwrap();
    let dir = copy(&w.dir);
    let mut bytes = full.clone();
    bytes[at + 5] ^= 0x01;
    dir.file(SEGMENT).unwrap().replace(bytes);
    let store = Store::open(Arc::new(dir.clone()), Config::default()).unwrap();
    assert_eq!(store.holes(w.p), [(1, 2)]);
    assert_eq!(store.holes(w.q), []);
    // A hole is passed over by a time search: offset 1's time finds offset 2.
    assert_eq!(store.offset_for_time(w.p, stamp(1)).unwrap(), Some(2));
    // Stamped later than every record: the time index learns it from the fill.
    let meta = RecordMeta::created(i64::MAX - 1);
    assert_eq!(store.offset_for_time(w.p, i64::MAX - 1).unwrap(), None);
    let fill = |store: &Store, offset: u64| {
        store.fill(&[AppendRecord {
            partition: w.p,
            offset,
            meta: &meta,
            value: &needle,
        }])
    };
    assert!(matches!(
        fill(&store, 2),
        Err(dafka_store::AppendError::Repeat { .. })
    ));
    fill(&store, 1)
        .unwrap()
        .wait(std::time::Duration::from_secs(10))
        .unwrap();
    assert!(matches!(
        fill(&store, 1),
        Err(dafka_store::AppendError::Repeat { .. })
    ));
    assert_eq!(store.holes(w.p), []);
    check_partition(&store, w.p, 7);
    assert_eq!(store.offset_for_time(w.p, stamp(1)).unwrap(), Some(1));
    assert_eq!(store.offset_for_time(w.p, i64::MAX - 1).unwrap(), Some(1));
    // The partition goes on after the fill.
    append_one(&store, w.p, 7, &value(1, 7, 5));
    check_partition(&store, w.p, 8);
    store.close();
    let store = Store::open(Arc::new(dir), Config::default()).unwrap();
    assert_eq!(store.holes(w.p), []);
    check_partition(&store, w.p, 8);
    assert_eq!(store.read(w.p, 1, 1, 1).unwrap()[0].meta, meta);
    assert_eq!(store.offset_for_time(w.p, i64::MAX - 1).unwrap(), Some(1));
}

/// A record whose extras do not decode though its CRC matches (written by something else, or
/// changed along with its CRC) is damage: a read after open stops before it, logs and counts
/// it once and answers `Lost` for it; a reopen skips it as damage. Never served.
#[test]
fn extras_that_do_not_decode_are_damage() {
    let dir = MemDir::new();
    let store = Store::open(Arc::new(dir.clone()), Config::default()).unwrap();
    let p = store.declare(&key(1)).unwrap();
    let keyed = RecordMeta::from(MetaParts {
        key: Some(Bytes::from_static(b"key")),
        ..MetaParts::created(2)
    });
    let plain = RecordMeta::created(1);
    let metas = [&plain, &keyed, &plain];
    let records: Vec<AppendRecord<'_>> = (0..3u64)
        .map(|o| AppendRecord {
            partition: p,
            offset: o,
            meta: metas[o as usize],
            value: b"value",
        })
        .collect();
    store
        .append(&records)
        .unwrap()
        .wait(std::time::Duration::from_secs(10))
        .unwrap();
    // Record 1's flags byte says "key" (0x01): make it an unknown flag, CRC recomputed.
    let file = dir.file(SEGMENT).unwrap();
    let mut bytes = file.contents();
    let at = bytes
        .windows(4)
        .position(|w| w == b"\x00\x00\x00\x03")
        .unwrap()
        - 1;
    assert_eq!(bytes[at], 0x01, "the flags byte");
    bytes[at] = 0x08;
    let start = at - format::RECORD_EXTRAS_AT;
    let len = u32::from_be_bytes(bytes[start..start + 4].try_into().unwrap()) as usize;
    let mut covered = bytes[start..start + 4].to_vec();
    covered.extend_from_slice(&bytes[start + 8..start + 8 + len]);
    bytes[start + 4..start + 8].copy_from_slice(&crc32c_of(&covered).to_be_bytes());
    file.replace(bytes);
    only_the_damaged_is_lost(&store, p);
    assert_eq!(store.stats().damaged, 1);
    store.close();
    let store = Store::open(Arc::new(dir), Config::default()).unwrap();
    let report = store.recovery_report();
    assert!(
        matches!(
            report.damage[0].kind,
            DamageKind::BadEntry {
                error: format::FormatError::BadMeta(_),
                ..
            }
        ),
        "{report:?}"
    );
    assert_eq!(store.holes(p), [(1, 2)]);
    only_the_damaged_is_lost(&store, p);
}

/// Records 0 and 2 of [`extras_that_do_not_decode_are_damage`] are served, 1 is lost.
fn only_the_damaged_is_lost(store: &Store, p: PartitionId) {
    let got = store.read(p, 0, 10, 1 << 20).unwrap();
    assert_eq!(got.iter().map(|r| r.offset).collect::<Vec<_>>(), [0]);
    assert!(matches!(
        store.read(p, 1, 10, 1 << 20),
        Err(ReadError::Lost { from: 1, to: 2 })
    ));
    let after = store.read(p, 2, 10, 1 << 20).unwrap();
    assert_eq!(
        (&after[0].meta, &after[0].value[..]),
        (&RecordMeta::created(1), &b"value"[..])
    );
}
