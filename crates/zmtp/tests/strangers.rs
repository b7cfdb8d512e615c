//! The memory a stranger can make a socket hold (issue 21, item 3): a frame over the socket's
//! `recv_limits` closes the connection from its header, and a frame that stops arriving is
//! closed after `message_timeout`. (The process-wide budget has its own binary, `budget.rs`.)

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use dafka_zmtp::{Limits, Message, Socket, SocketType};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_over_recv_limits_closes_only_that_peer() {
    let recv = Limits::new(1024, 1024 + 32);
    let publisher = Socket::new(SocketType::Pub, linger0().with_recv_limits(Some(recv))).unwrap();
    let ep = publisher.bind("tcp://127.0.0.1:0").await.unwrap();
    let addr = addr_of(&ep);
    // A subscriber that sends what the limits allow: a subscription message of 1024 bytes.
    let mut subscription = vec![0x02];
    subscription.extend_from_slice(&1024u64.to_be_bytes());
    subscription.push(0x01);
    subscription.resize(9 + 1024, b's');
    let mut fine = raw_peer(addr, "SUB", &subscription).await;
    // One that announces a byte more: closed from the header.
    let mut over = raw_peer(addr, "SUB", &partial_frame(1025, 10)).await;
    assert!(
        closed_within(&mut over, Duration::from_secs(2)).await,
        "a frame over recv_limits must close its connection"
    );
    assert!(!closed_within(&mut fine, Duration::from_millis(300)).await);
    // What the publisher sends is bounded by `limits` only: a 1 MiB message goes out.
    let sub = Socket::new(SocketType::Sub, linger0()).unwrap();
    sub.subscribe(b"").unwrap();
    sub.connect(&ep).await.unwrap();
    let big = Message::from(Bytes::from(vec![7u8; 1 << 20]));
    let got = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            publisher.try_send(big.clone()).unwrap();
            if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(50), sub.recv()).await {
                return m;
            }
        }
    })
    .await
    .expect("the subscriber never got the 1 MiB message");
    assert_eq!(got.frames()[0].len(), 1 << 20);
    drop(fine);
    sub.close().await;
    publisher.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_that_stops_arriving_is_closed_after_message_timeout() {
    let pull = Socket::new(
        SocketType::Pull,
        linger0().with_message_timeout(Some(Duration::from_millis(300))),
    )
    .unwrap();
    let addr = addr_of(&pull.bind("tcp://127.0.0.1:0").await.unwrap());
    let start = tokio::time::Instant::now();
    let mut stalled = raw_peer(addr, "PUSH", &partial_frame(1000, 500)).await;
    // The greeting stopped short: message_timeout too (the handshake timeout is 30 s).
    let mut half_greeting = TcpStream::connect(addr).await.unwrap();
    half_greeting
        .write_all(&greeting(b"NULL")[..30])
        .await
        .unwrap();
    // A peer whose messages keep completing stays, for longer than the timeout.
    let mut steady = raw_peer(addr, "PUSH", b"").await;
    for _ in 0..8 {
        steady.write_all(&[0x00, 0x02, b'o', b'k']).await.unwrap();
        assert_eq!(frames(&recv(&pull).await), vec![b"ok".to_vec()]);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(closed_within(&mut stalled, Duration::from_secs(2)).await);
    assert!(closed_within(&mut half_greeting, Duration::from_secs(2)).await);
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert!(!closed_within(&mut steady, Duration::from_millis(50)).await);
    pull.close().await;
}
