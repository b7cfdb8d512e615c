//! PUB -> SUB throughput over tcp on one current-thread runtime: the PUB's batch send (every
//! subscriber matched under one lock) and the SUB's filtered batch receive.
//!
//! `cargo run --release -p dafka-zmtp --example pubsub_throughput -- [size] [count] [batch]`
//!
//! Prints one JSON line: `pub_msgs_per_s` (the publisher's `send_many` calls alone) and
//! `sub_msgs_per_s` (first to last message received). The PUB's high-water mark is unlimited,
//! so nothing is dropped and both count every message.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dafka_zmtp::{Message, Options, Socket, SocketEvent, SocketType};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), dafka_zmtp::Error> {
    let args: Vec<String> = std::env::args().collect();
    let arg =
        |i: usize, default: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default);
    let (size, count, batch) = (arg(1, 64), arg(2, 2_000_000), arg(3, 256).max(1));

    let publisher = Socket::new(SocketType::Pub, Options::default().with_sndhwm(0))?;
    let mut events = publisher.monitor(64);
    let endpoint = publisher.bind("tcp://127.0.0.1:0").await?;
    let sub = Socket::new(SocketType::Sub, Options::default())?;
    sub.connect(&endpoint).await?;
    // The topic is the message's first bytes: every message matches.
    sub.subscribe(b"t")?;
    // Publish only once the subscription reached the PUB (earlier messages are not sent).
    loop {
        match tokio::time::timeout(Duration::from_secs(10), events.recv()).await {
            Ok(Some(SocketEvent::Subscribed { .. })) => break,
            Ok(Some(_)) => {}
            _ => return Err(dafka_zmtp::Error::InvalidState("no subscription arrived")),
        }
    }

    let mut body = vec![b'x'; size.max(1)];
    body[0] = b't';
    let frame = Bytes::from(body);
    let receiver = tokio::spawn(async move {
        let mut got = Vec::with_capacity(1024);
        let (mut n, mut first) = (0usize, None);
        while n < count {
            got.clear();
            n += sub.recv_many(1024, &mut got).await?;
            first.get_or_insert_with(Instant::now);
        }
        let elapsed = first.map_or(Duration::ZERO, |t| t.elapsed());
        Ok::<_, dafka_zmtp::Error>(elapsed)
    });

    let mut sending = Duration::ZERO;
    let mut msgs = VecDeque::with_capacity(batch);
    let mut sent = 0;
    while sent < count {
        let k = batch.min(count - sent);
        msgs.extend((0..k).map(|_| Message::from(frame.clone())));
        let t = Instant::now();
        publisher.send_many(&mut msgs).await?;
        sending += t.elapsed();
        sent += k;
        // Let the connection task and the subscriber run (one thread).
        tokio::task::yield_now().await;
    }
    let receiving = receiver.await.expect("receiver task")?;
    let rate = |d: Duration| count as f64 / d.as_secs_f64().max(1e-9);
    println!(
        "{{\"size\": {size}, \"count\": {count}, \"batch\": {batch}, \"pub_msgs_per_s\": {:.0}, \"sub_msgs_per_s\": {:.0}}}",
        rate(sending),
        rate(receiving)
    );
    publisher.close().await;
    Ok(())
}
