//! Everything in one process, as `dafka.LocalCluster` runs it: a tower, a store
//! (`sync=never`), a producer writing N records, then a consumer reading them all back from
//! the store (`earliest`). Prints the catch-up rate and the process's CPU time over it.
//!
//! `cargo run --release -p dafka-node --example local_catchup -- [records] [poll] [max_buffered] [inproc]`
//! (defaults 2 000 000 records of 100 B, polls of 100 000, 100 000 buffered; `inproc`: the
//! nodes reach each other through their inproc aliases, not TCP). Not a benchmark of record
//! (`make bench-dafka` is); a probe for where the one-process read loses time.

use std::time::{Duration, Instant};

use bytes::Bytes;
use dafka_node::{
    ConsumerNode, ConsumerOptions, NodeConfig, OffsetReset, ProducerNode, ProducerOptions,
    StoreNode, StoreOptions, SyncPolicy, Tower, TowerConfig,
};

/// User + system CPU seconds of this process so far (Linux: `/proc/self/stat`, 100 ticks a
/// second); 0 where that cannot be read.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces), closed by ')', start at
    // field 3 (the state): utime and stime, fields 14 and 15, are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (tick(11) + tick(12)) / 100.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut next = |default: usize| args.next().and_then(|a| a.parse().ok()).unwrap_or(default);
    let (records, poll, buffered) = (next(2_000_000), next(100_000), next(100_000));
    let local = std::env::args().nth(4).as_deref() == Some("inproc");

    let dir = tempfile::tempdir()?;
    let tower = Tower::start(TowerConfig::new("tcp://127.0.0.1:0")).await?;
    let node = NodeConfig::new(vec![tower.address().clone()]).with_local_inproc(local);
    let store = StoreNode::open(
        dir.path().to_path_buf(),
        node.clone(),
        StoreOptions::with_sync(SyncPolicy::Never),
    )
    .await?;
    let producer = ProducerNode::start("bench", node.clone(), ProducerOptions::default()).await?;
    let value = Bytes::from(vec![7u8; 100]);
    for _ in 0..records / 10_000 {
        producer
            .send_many(std::iter::repeat_n(value.clone(), 10_000))
            .await?;
    }
    producer.flush(Some(Duration::from_secs(120))).await?;
    producer.close().await;

    let consumer = ConsumerNode::start(
        &["bench"],
        node,
        ConsumerOptions::default()
            .with_offset_reset(OffsetReset::Earliest)
            .with_max_buffered(buffered),
    )
    .await?;
    let (start, cpu) = (Instant::now(), cpu_seconds());
    let mut got = 0;
    let mut first = None;
    while got < records {
        let n = consumer
            .poll(poll.min(records - got), Duration::from_secs(30))
            .await?
            .len();
        if n > 0 && first.is_none() {
            first = Some(start.elapsed());
        }
        got += n;
    }
    let (wall, cpu) = (start.elapsed(), cpu_seconds() - cpu);
    println!(
        "{records} records read back ({}): first after {:?}, {:.0} records/s, {cpu:.2} s CPU over {wall:.2?}",
        if local { "inproc" } else { "tcp" },
        first.unwrap_or_default(),
        records as f64 / wall.as_secs_f64(),
    );
    consumer.close().await;
    store.close().await;
    tower.close().await;
    Ok(())
}
