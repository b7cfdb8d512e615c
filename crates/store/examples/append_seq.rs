//! Appends as `dafka-bench store` does (one record per `append` call, round robin over the
//! partitions, never waiting for a ticket), with a fixed record count so that instruction
//! counts of the append path are deterministic:
//!
//! ```text
//! cargo run --release -p dafka-store --example append_seq -- [RECORDS] [VALUE_BYTES] [PARTITIONS]
//! valgrind --tool=callgrind --toggle-collect='*Store::append*' \
//!     target/release/examples/append_seq 200000 100 1000
//! ```
//!
//! `RECORDS` (default 1,000,000) value-only records with a create time (no key, no headers)
//! of `VALUE_BYTES` (default 100) over `PARTITIONS` (default 1) partitions, in a temporary
//! directory with sync policy `never`; prints records/s.

use std::time::{Duration, Instant};

use dafka_store::{AppendRecord, Config, PartitionKey, RecordMeta, Store, SyncPolicy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let records: u64 = args.next().map_or(Ok(1_000_000), |a| a.parse())?;
    let size: usize = args.next().map_or(Ok(100), |a| a.parse())?;
    let partitions: u32 = args.next().map_or(Ok(1), |a| a.parse())?;
    let dir = tempfile::tempdir()?;
    let store = Store::open_path(dir.path(), Config::with_sync(SyncPolicy::Never))?;
    let ids = (0..partitions)
        .map(|p| {
            let mut producer = [0u8; 16];
            producer[12..].copy_from_slice(&p.to_be_bytes());
            store.declare(&PartitionKey::new("append_seq", producer))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut heads = vec![0u64; ids.len()];
    let value = vec![0xA5u8; size];
    let meta = RecordMeta::created(0);
    let start = Instant::now();
    let mut last = None;
    for i in 0..records {
        let p = (i % u64::from(partitions)) as usize;
        let record = AppendRecord {
            partition: ids[p],
            offset: heads[p],
            meta: &meta,
            value: &value,
        };
        last = Some(store.append(&[record])?);
        heads[p] += 1;
    }
    if let Some(ticket) = last {
        ticket.wait(Duration::from_secs(60))?;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{records} records of {size} B over {partitions} partitions: {:.3} s, {:.2} M records/s",
        secs,
        records as f64 / secs / 1e6
    );
    store.close();
    Ok(())
}
