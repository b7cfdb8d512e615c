//! What a read costs in file bytes: `Store::read` reads a segment only as far as the sparse
//! index says the records asked for reach (plus at most one small chunk), not a fixed 1 MiB
//! chunk per call, so serving a FETCH 1024 records at a time copies about what it sends.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use dafka_store::{AppendRecord, Config, MemDir, Store};

use common::{Probe, ProbedDir, block_on, key, value};

#[test]
fn a_read_copies_about_the_records_it_returns() {
    const PER: u64 = 20_000;
    const SIZE: usize = 100;
    let probe = Arc::new(Probe::default());
    let dir = ProbedDir {
        inner: MemDir::new(),
        probe: probe.clone(),
    };
    let store = Store::open(Arc::new(dir), Config::default()).unwrap();
    let a = store.declare(&key(1)).unwrap();
    let b = store.declare(&key(2)).unwrap();
    // Two partitions interleaved in one segment, as two producers write them.
    let values: Vec<Vec<u8>> = (0..PER).map(|o| value(1, o, SIZE)).collect();
    for chunk in (0..PER).collect::<Vec<_>>().chunks(1000) {
        let mut batch = Vec::new();
        for &o in chunk {
            for p in [a, b] {
                batch.push(AppendRecord {
                    partition: p,
                    offset: o,
                    timestamp_ms: 1,
                    value: &values[o as usize],
                });
            }
        }
        block_on(store.append(&batch).unwrap()).unwrap();
    }
    let mut served = 0u64;
    let before = probe.read_bytes.load(Ordering::Relaxed);
    for from in (0..PER).step_by(1024) {
        let records = store.read(a, from, 1024, 4 << 20).unwrap();
        assert_eq!(records.first().map(|r| r.offset), Some(from));
        assert!(records.iter().all(|r| r.value.len() == SIZE));
        served += records.len() as u64;
    }
    assert_eq!(served, PER);
    let copied = probe.read_bytes.load(Ordering::Relaxed) - before;
    // The segment holds both partitions: reading one whole partition covers it once
    // (~2 x 20,000 entries); each call may read a little past its records (an index step,
    // the minimum chunk). A fixed 1 MiB chunk per call read 20 MiB here.
    let segment = PER * 2 * (SIZE as u64 + 40);
    assert!(
        copied < segment * 3 / 2,
        "read {copied} bytes of segments to serve {served} records (segment ~{segment})"
    );
    store.close();
}
