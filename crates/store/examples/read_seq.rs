//! Sequential read of one partition, as `dafka-bench store` reads it, with a fixed
//! record count so that instruction counts are deterministic:
//!
//! ```text
//! cargo run --release -p dafka-store --example read_seq -- [RECORDS] [VALUE_BYTES] [PASSES]
//! valgrind --tool=callgrind --toggle-collect='*Store::read*' \
//!     target/release/examples/read_seq 200000 100
//! ```
//!
//! Appends `RECORDS` records (default 1,000,000) of `VALUE_BYTES` (default 100) to one
//! partition in a temporary directory (sync policy `never`, batches of 4,096 records,
//! as `dafka-bench store` gets with `always`), then reads them all back
//! from the page cache `PASSES` times (default 1), printing records/s and GB/s of values
//! for each pass.

use std::time::{Duration, Instant};

use dafka_store::{AppendRecord, Config, PartitionKey, RecordMeta, Store, SyncPolicy};

/// Records per appended batch.
const BATCH: u64 = 4096;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let records: u64 = args.next().map_or(Ok(1_000_000), |a| a.parse())?;
    let size: usize = args.next().map_or(Ok(100), |a| a.parse())?;
    let passes: u32 = args.next().map_or(Ok(1), |a| a.parse())?;
    let dir = tempfile::tempdir()?;
    let store = Store::open_path(dir.path(), Config::with_sync(SyncPolicy::Never))?;
    let id = store.declare(&PartitionKey::new("read_seq", [7; 16]))?;
    let value = vec![0xA5u8; size];
    let meta = RecordMeta::created(0);
    // One batch per `append` call (each waited for), so the segment's layout, and with it
    // the instruction count of the read, does not depend on the writer's timing.
    let mut offset = 0;
    while offset < records {
        let n = BATCH.min(records - offset);
        let batch: Vec<AppendRecord<'_>> = (offset..offset + n)
            .map(|o| AppendRecord {
                partition: id,
                offset: o,
                meta: &meta,
                value: &value,
            })
            .collect();
        store.append(&batch)?.wait(Duration::from_secs(60))?;
        offset += n;
    }

    let head = store.head(id).unwrap_or(0);
    for _ in 0..passes {
        let start = Instant::now();
        let (mut next, mut bytes) = (0, 0u64);
        while next < head {
            let batch = store.read(id, next, 1 << 20, 8 << 20)?;
            bytes += batch.iter().map(|r| r.value.len() as u64).sum::<u64>();
            next = batch.last().map_or(head, |r| r.offset + 1);
        }
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(bytes, head * size as u64, "every value read back");
        println!(
            "{head} records of {size} B: {:.3} s, {:.2} M records/s, {:.3} GB/s",
            secs,
            head as f64 / secs / 1e6,
            bytes as f64 / secs / 1e9
        );
    }
    store.close();
    Ok(())
}
