//! Time: `offset_for_time` on partitions spanning many segments with timestamps out of
//! order, before and after retention and a reopen, reading one index interval and not the
//! partition; retention by age by the records' own timestamps.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use dafka_store::{
    AppendRecord, Config, MemDir, PartitionId, ReadError, RecordMeta, Retention, Store, now_us,
};

use common::{Probe, ProbedDir, key, read_all, value};

const WAIT: Duration = Duration::from_secs(30);
const SECOND: i64 = 1_000_000;

fn config() -> Config {
    let mut config = Config::default();
    config.segment_bytes = 16 << 10;
    config.max_record_bytes = 1024;
    config.index_interval_bytes = 1024;
    config
}

/// Record `o`'s timestamp: rising by a second per 100 records, with a saw-tooth of up to
/// ±30 s on top (so out of order across index intervals), and a few far out of line.
fn stamp(o: u64) -> i64 {
    let base = 1_764_000_000 * SECOND + (o as i64 / 100) * SECOND;
    let tooth = ((o * 37) % 61) as i64 - 30;
    match o % 997 {
        500 => base + 3_600 * SECOND, // an hour ahead
        501 => base - 3_600 * SECOND, // an hour behind
        _ => base + tooth * SECOND,
    }
}

/// Appends `n` records of 60 B to `p`, interleaved with records of `q`, 50 of each a batch
/// (each waited for, so that batches, and segments, do not depend on the writer's timing).
fn fill(store: &Store, p: PartitionId, q: PartitionId, n: u64) {
    let metas: Vec<RecordMeta> = (0..n).map(|o| RecordMeta::created(stamp(o))).collect();
    let other = RecordMeta::created(0);
    let values: Vec<Vec<u8>> = (0..n).map(|o| value(1, o, 60)).collect();
    for start in (0..n).step_by(50) {
        let mut batch = Vec::new();
        for o in start..(start + 50).min(n) {
            batch.push(AppendRecord {
                partition: p,
                offset: o,
                meta: &metas[o as usize],
                value: &values[o as usize],
            });
            batch.push(AppendRecord {
                partition: q,
                offset: o,
                meta: &other,
                value: &values[o as usize],
            });
        }
        store.append(&batch).unwrap().wait(WAIT).unwrap();
    }
}

/// The answer by a scan of what the partition serves.
fn scan(store: &Store, p: PartitionId, t: i64) -> Option<u64> {
    read_all(store, p)
        .into_iter()
        .find(|r| r.meta.timestamp >= t)
        .map(|r| r.offset)
}

/// Times before the first record, at and beside records (first of their time or not),
/// between them, after the last, and far out.
fn probes(store: &Store, p: PartitionId) -> Vec<i64> {
    let mut ts = vec![i64::MIN, 0, i64::MAX];
    for r in read_all(store, p).iter().step_by(23) {
        let t = r.meta.timestamp;
        ts.extend([t - SECOND / 2, t - 1, t, t + 1, t + SECOND / 2]);
    }
    ts
}

#[test]
fn offset_for_time_on_many_segments_out_of_order() {
    let dir = MemDir::new();
    let store = Store::open(Arc::new(dir.clone()), config()).unwrap();
    let p = store.declare(&key(1)).unwrap();
    let q = store.declare(&key(2)).unwrap();
    let n = 3_000;
    fill(&store, p, q, n);
    let segments = dafka_store::Dir::list(&dir).unwrap().len();
    assert!(segments > 10, "{segments} files");

    let oldest = (0..n).map(stamp).min().unwrap();
    let latest = (0..n).max_by_key(|&o| stamp(o)).unwrap();
    // Before the first: the first offset, whatever its time.
    assert_eq!(store.offset_for_time(p, i64::MIN).unwrap(), Some(0));
    assert_eq!(store.offset_for_time(p, oldest).unwrap(), Some(0));
    // After the last: none. The latest record (an hour ahead) is the only one at its time.
    assert_eq!(store.offset_for_time(p, stamp(latest) + 1).unwrap(), None);
    assert_eq!(
        store.offset_for_time(p, stamp(latest)).unwrap(),
        Some(latest)
    );
    // Between: a time no record has, inside the range; the hour-behind record does not
    // count for times after it.
    let t = stamp(1_700) + 1;
    assert!((0..n).all(|o| stamp(o) != t));
    assert_eq!(store.offset_for_time(p, t).unwrap(), scan(&store, p, t));
    for t in probes(&store, p) {
        assert_eq!(
            store.offset_for_time(p, t).unwrap(),
            scan(&store, p, t),
            "t {t}"
        );
    }
    // A partition with no record at all, and one unknown.
    let empty = store.declare(&key(3)).unwrap();
    assert_eq!(store.offset_for_time(empty, i64::MIN).unwrap(), None);
    assert!(matches!(
        store.offset_for_time(PartitionId(99), 0),
        Err(ReadError::UnknownPartition(_))
    ));
    // Rebuilt by recovery.
    store.close();
    let store = Store::open(Arc::new(dir), config()).unwrap();
    for t in probes(&store, p) {
        assert_eq!(
            store.offset_for_time(p, t).unwrap(),
            scan(&store, p, t),
            "t {t}"
        );
    }
}

/// After retention dropped the first segments (the index entries there with them): only the
/// records still held count, before and after a reopen.
#[test]
fn offset_for_time_after_retention() {
    let mut config = config();
    config.retention = Retention {
        max_age: None,
        max_bytes: Some(100 << 10),
    };
    let dir = MemDir::new();
    let store = Store::open(Arc::new(dir.clone()), config.clone()).unwrap();
    let p = store.declare(&key(1)).unwrap();
    let q = store.declare(&key(2)).unwrap();
    let n = 3_000;
    fill(&store, p, q, n);
    store.apply_retention(0);
    let low = store.low_water(p).unwrap();
    assert!(low > 1_000, "low-water mark {low}");
    let check = |store: &Store| {
        // Before every record held: the low-water mark, though older records held a later
        // time (the hour-ahead one at 500 is gone).
        assert_eq!(store.offset_for_time(p, i64::MIN).unwrap(), Some(low));
        assert_eq!(
            store.offset_for_time(p, stamp(500)).unwrap(),
            scan(store, p, stamp(500))
        );
        for t in probes(store, p) {
            assert_eq!(
                store.offset_for_time(p, t).unwrap(),
                scan(store, p, t),
                "t {t}"
            );
        }
    };
    check(&store);
    store.close();
    let store = Store::open(Arc::new(dir), config).unwrap();
    assert_eq!(store.low_water(p), Some(low));
    check(&store);
}

/// A time query reads one index interval (and the records before the first entry), not the
/// partition: the bytes read from the segments stay a small part of the log.
#[test]
fn offset_for_time_does_not_read_the_partition() {
    let probe = Arc::new(Probe::default());
    let dir = ProbedDir {
        inner: MemDir::new(),
        probe: probe.clone(),
    };
    let store = Store::open(Arc::new(dir), config()).unwrap();
    let p = store.declare(&key(1)).unwrap();
    let q = store.declare(&key(2)).unwrap();
    let n = 20_000;
    fill(&store, p, q, n);
    let log: u64 = store.stats().bytes_written;
    for o in [17, 9_000, 19_990] {
        let t = stamp(o);
        let before = probe.read_bytes.load(Ordering::Relaxed);
        let got = store.offset_for_time(p, t).unwrap();
        let read = probe.read_bytes.load(Ordering::Relaxed) - before;
        assert!(got.is_some_and(|g| stamp(g) >= t && g <= o));
        // A read chunk is 64 KiB: at most two of them, of a log of several MB.
        assert!(read <= 128 << 10, "{read} bytes read of {log}");
        assert!(log > 20 * read, "{read} bytes read of {log}");
    }
}

/// Segments of 4 KiB (three of `append_stamped`'s records each), retention by `max_age`.
fn aging(max_age: Duration) -> Config {
    let mut config = Config::default();
    config.segment_bytes = 4096;
    config.max_record_bytes = 2048;
    config.retention = Retention {
        max_age: Some(max_age),
        max_bytes: None,
    };
    config
}

/// Appends records `offsets` of `p`, 1,200 B each, one a batch (each waited for), record `o`
/// stamped `stamp(o)`.
fn append_stamped(
    store: &Store,
    p: PartitionId,
    offsets: std::ops::Range<u64>,
    stamp: impl Fn(u64) -> i64,
) {
    for o in offsets {
        let meta = RecordMeta::created(stamp(o));
        let v = value(1, o, 1_200);
        let r = AppendRecord {
            partition: p,
            offset: o,
            meta: &meta,
            value: &v,
        };
        store.append(&[r]).unwrap().wait(WAIT).unwrap();
    }
}

/// Retention by age goes by the records' own timestamps: a segment goes once its newest
/// record is older than the limit, and a record younger than the limit never goes, even in
/// a segment of older ones; received order does not matter.
#[test]
fn retention_by_age_goes_by_record_time() {
    let config = aging(Duration::from_secs(3_600));
    let dir = MemDir::new();
    let store = Store::open(Arc::new(dir.clone()), config.clone()).unwrap();
    let p = store.declare(&key(1)).unwrap();
    let now = now_us();
    let hour = 3_600 * SECOND;
    // Records of 1,200 B, one a batch: 3 a segment (0-2, 3-5, ..., 12-14). Offsets 0-5: two
    // hours old, but offset 4 is young (a producer's clock: appended late, or stamped
    // ahead). Then 6-14 young.
    let stamp = |o: u64| match o {
        4 => now - 60 * SECOND,
        0..=5 => now - 2 * hour + o as i64,
        _ => now - 60 * SECOND + o as i64,
    };
    append_stamped(&store, p, 0..15, stamp);
    // The segment of 0-2 was dropped by the writer at a roll (its newest is two hours old);
    // the one holding the young 4 is kept whole, old records 3 and 5 with it.
    store.apply_retention(now_us());
    let low = store.low_water(p).unwrap();
    assert_eq!(low, 3, "segments: first records at 0, 3, 6, ...");
    let held = read_all(&store, p);
    assert_eq!(held.first().map(|r| r.offset), Some(3));
    for o in 0..15 {
        if stamp(o) >= now - hour {
            assert!(o >= low, "young record {o} dropped");
        }
    }
    // When the newest record of 9-11 is exactly an hour old, the segments before it go (3-5
    // too: its young record 4 is older than that) and it stays.
    let at_limit = stamp(11) + hour;
    store.apply_retention(at_limit);
    assert_eq!(store.low_water(p), Some(9));
    assert_eq!(read_all(&store, p).first().map(|r| r.offset), Some(9));
    // After a reopen the segments' times are rebuilt from their records: a microsecond
    // later 9-11 goes, never the segment being written (12-14).
    store.close();
    let store = Store::open(Arc::new(dir), config).unwrap();
    assert_eq!(store.low_water(p), Some(9));
    assert_eq!(store.apply_retention(at_limit), 0);
    assert_eq!(store.apply_retention(at_limit + 1), 1);
    assert_eq!(store.low_water(p), Some(12));
    assert_eq!(store.apply_retention(i64::MAX), 0);
    assert_eq!(read_all(&store, p).len(), 3);
}

/// Retention by age needs no write: a store nobody writes to drops a segment once its newest
/// record ages past the limit (the writer checks every quarter of the limit, at least every
/// 100 ms), and keeps the one being written.
#[test]
fn an_idle_store_drops_what_ages_out() {
    let store = Store::open(Arc::new(MemDir::new()), aging(Duration::from_millis(1_500))).unwrap();
    let p = store.declare(&key(1)).unwrap();
    // Three records of 1,200 B a segment: 0-2 and 3-5 sealed, 6 in the one being written.
    let now = now_us();
    append_stamped(&store, p, 0..7, |_| now);
    assert_eq!(store.low_water(p), Some(0), "nothing is old yet");
    let written = std::time::Instant::now();
    while store.low_water(p) == Some(0) && written.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Gone after the limit (1.5 s from the records' time), not before; the last segment stays.
    assert!(now_us() - now >= 1_500_000);
    assert!(
        written.elapsed() < Duration::from_secs(5),
        "{:?}",
        written.elapsed()
    );
    assert_eq!(store.low_water(p), Some(6));
    assert_eq!(read_all(&store, p).len(), 1);
    assert_eq!(store.stats().segments_dropped, 2);
}

/// The newest record of an index interval counts wherever it lies in the interval, whether
/// its batch started the interval or went on with one started before: appended one record a
/// call, and all in one call.
#[test]
fn an_intervals_newest_record_counts_wherever_it_is() {
    let store = Store::open(Arc::new(MemDir::new()), Config::default()).unwrap();
    let one_by_one = store.declare(&key(1)).unwrap();
    let at_once = store.declare(&key(2)).unwrap();
    // About 40 records of 100 B an interval of 4 KiB; the newest, by far, is offset 7.
    let stamp = |o: u64| if o == 7 { 10_000 } else { o as i64 };
    let metas: Vec<RecordMeta> = (0..100).map(|o| RecordMeta::created(stamp(o))).collect();
    let v = [0u8; 100];
    let record = |partition, o: u64| AppendRecord {
        partition,
        offset: o,
        meta: &metas[o as usize],
        value: &v,
    };
    for o in 0..100 {
        store
            .append(&[record(one_by_one, o)])
            .unwrap()
            .wait(WAIT)
            .unwrap();
    }
    let all: Vec<AppendRecord<'_>> = (0..100).map(|o| record(at_once, o)).collect();
    store.append(&all).unwrap().wait(WAIT).unwrap();
    for p in [one_by_one, at_once] {
        assert_eq!(store.offset_for_time(p, 5_000).unwrap(), Some(7));
        assert_eq!(store.offset_for_time(p, 10_000).unwrap(), Some(7));
        assert_eq!(store.offset_for_time(p, 10_001).unwrap(), None);
        assert_eq!(store.offset_for_time(p, 50).unwrap(), Some(7));
        assert_eq!(store.offset_for_time(p, 99).unwrap(), Some(7));
        assert_eq!(store.offset_for_time(p, 8).unwrap(), Some(7));
        assert_eq!(store.offset_for_time(p, 7).unwrap(), Some(7));
        assert_eq!(store.offset_for_time(p, 6).unwrap(), Some(6));
    }
}
