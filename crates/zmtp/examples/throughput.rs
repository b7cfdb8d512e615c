//! PUSH -> PULL throughput over one transport.
//!
//! `cargo run --release -p dafka-zmtp --example throughput -- [tcp|ipc|inproc] [size] [count]`

use std::time::Instant;

use bytes::Bytes;
use dafka_zmtp::{Message, Options, Socket, SocketType};

#[tokio::main]
async fn main() -> Result<(), dafka_zmtp::Error> {
    let args: Vec<String> = std::env::args().collect();
    let transport = args.get(1).map_or("tcp", String::as_str);
    let size: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(16);
    let count: u64 = args
        .get(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let endpoint = match transport {
        "tcp" => "tcp://127.0.0.1:0".to_owned(),
        "ipc" => format!(
            "ipc:///tmp/dafka-zmtp-throughput-{}.sock",
            std::process::id()
        ),
        _ => "inproc://throughput".to_owned(),
    };
    let pull = Socket::new(SocketType::Pull, Options::default())?;
    let endpoint = pull.bind(&endpoint).await?;
    let push = Socket::new(SocketType::Push, Options::default())?;
    push.connect(&endpoint).await?;
    // A static payload: cloning it costs no reference counting, like
    // libzmq's benchmark, which copies small messages by value.
    let payload = Bytes::from_static(vec![0u8; size].leak());
    let sender = tokio::spawn(async move {
        for _ in 0..count {
            push.send(Message::from(payload.clone())).await?;
        }
        push.close().await;
        Ok::<_, dafka_zmtp::Error>(())
    });
    pull.recv().await?;
    let start = Instant::now();
    for _ in 1..count {
        pull.recv().await?;
    }
    let secs = start.elapsed().as_secs_f64();
    sender.await.expect("sender task")?;
    println!(
        "{transport} {size} B: {:.0} msg/s, {:.1} MB/s",
        count as f64 / secs,
        count as f64 * size as f64 / secs / 1e6
    );
    Ok(())
}
