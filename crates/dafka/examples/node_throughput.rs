//! Producer -> consumer over loopback with a tower, no store: records/s end to end.
//!
//! `cargo run --release -p dafka-node --example node_throughput -- [records] [size] [inproc]`
//! (defaults 1 000 000 records of 100 bytes; `inproc`: between the two nodes through the
//! publisher's inproc alias, not TCP: `NodeConfig::local_inproc`). Not a benchmark of record (`make bench` is);
//! a quick figure for the driver.

use std::time::{Duration, Instant};

use bytes::Bytes;
use dafka_node::{
    ConsumerNode, ConsumerOptions, NodeConfig, ProducerNode, ProducerOptions, Tower, TowerConfig,
};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), dafka_node::Error> {
    let mut args = std::env::args().skip(1);
    let records: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let local = args.next().as_deref() == Some("inproc");

    let tower = Tower::start(TowerConfig::new("tcp://127.0.0.1:0")).await?;
    let towers = vec![tower.address().clone()];
    let node = NodeConfig::new(towers).with_local_inproc(local);
    let producer = ProducerNode::start(
        "bench",
        node.clone(),
        // No store acknowledges: room for every record unacknowledged.
        ProducerOptions::default()
            .with_head_interval(Duration::from_millis(100))
            .with_max_unacked_records(records + 1)
            .with_max_unacked_bytes((records + 1) * size.max(1)),
    )
    .await?;
    let consumer = ConsumerNode::start(
        &["bench"],
        node,
        ConsumerOptions::default().with_start_offset("bench", producer.partition(), 0),
    )
    .await?;
    // Wait until the consumer is connected: one record through.
    producer.send(Bytes::from(vec![0u8; size])).await?;
    let mut got = 0;
    while got == 0 {
        got += consumer.poll(1, Duration::from_millis(100)).await?.len();
    }

    let value = Bytes::from(vec![7u8; size]);
    let start = Instant::now();
    let send = async {
        for chunk in 0..records.div_ceil(10_000) {
            let n = 10_000.min(records - chunk * 10_000);
            producer
                .send_many(std::iter::repeat_n(value.clone(), n))
                .await?;
        }
        Ok::<_, dafka_node::Error>(start.elapsed())
    };
    let receive = async {
        let mut n = 0;
        while n < records {
            n += consumer
                .poll(records - n, Duration::from_millis(50))
                .await?
                .len();
        }
        Ok::<_, dafka_node::Error>(start.elapsed())
    };
    let (sent, received) = tokio::try_join!(send, receive)?;
    let rate = records as f64 / received.as_secs_f64();
    println!(
        "{records} records of {size} B: sent in {sent:?}, received in {received:?}: {:.0} records/s, {:.1} MB/s",
        rate,
        rate * size as f64 / 1e6
    );
    consumer.close().await;
    producer.close().await;
    tower.close().await;
    Ok(())
}
