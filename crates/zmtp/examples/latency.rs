//! REQ/REP round-trip latency over one transport.
//!
//! `cargo run --release -p dafka-zmtp --example latency -- [tcp|ipc|inproc] [size] [count]`

use std::time::Instant;

use bytes::Bytes;
use dafka_zmtp::{Message, Options, Socket, SocketType};

#[tokio::main]
async fn main() -> Result<(), dafka_zmtp::Error> {
    let args: Vec<String> = std::env::args().collect();
    let transport = args.get(1).map_or("tcp", String::as_str);
    let size: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(16);
    let count: u32 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let endpoint = match transport {
        "tcp" => "tcp://127.0.0.1:0".to_owned(),
        "ipc" => format!("ipc:///tmp/dafka-zmtp-latency-{}.sock", std::process::id()),
        _ => "inproc://latency".to_owned(),
    };
    let rep = Socket::new(SocketType::Rep, Options::default())?;
    let endpoint = rep.bind(&endpoint).await?;
    let server = tokio::spawn(async move {
        for _ in 0..count {
            let m = rep.recv().await?;
            rep.send(m).await?;
        }
        Ok::<_, dafka_zmtp::Error>(())
    });
    let req = Socket::new(SocketType::Req, Options::default())?;
    req.connect(&endpoint).await?;
    let payload = Bytes::from(vec![0u8; size]);
    let start = Instant::now();
    for _ in 0..count {
        req.send(Message::from(payload.clone())).await?;
        req.recv().await?;
    }
    let elapsed = start.elapsed();
    server.await.expect("server task")?;
    println!(
        "{transport} {size} B: {:.1} us per round trip",
        elapsed.as_secs_f64() * 1e6 / f64::from(count)
    );
    Ok(())
}
