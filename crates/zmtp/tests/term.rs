//! `term`: waiting for sockets closed in the background. One test (its own
//! process): `term` sees every background close of the process.

mod common;

use std::time::{Duration, Instant};

use dafka_zmtp::{Options, Socket, SocketType};

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn term_waits_for_background_flushes_and_is_bounded() {
    // Nothing pending: at once.
    let start = Instant::now();
    dafka_zmtp::term(Duration::from_secs(5)).await.unwrap();
    assert!(start.elapsed() < Duration::from_millis(100));

    // A flush that completes: term waits for it, and the peer got everything.
    let ep = dead_endpoint().await;
    let push = Socket::new(
        SocketType::Push,
        Options::default().with_reconnect_ivl(Duration::from_millis(20)),
    )
    .unwrap();
    push.connect(&ep).await.unwrap();
    for i in 0..100u32 {
        send(&push, msg(&[&i.to_be_bytes()])).await;
    }
    push.close_in_background();
    assert_eq!(dafka_zmtp::pending_closes(), 1);
    let late_peer = tokio::spawn({
        let ep = ep.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
            pull.bind(&ep).await.unwrap();
            let mut got = Vec::new();
            while got.len() < 100 {
                pull.recv_many(1000, &mut got).await.unwrap();
            }
            pull.close().await;
            got.len()
        }
    });
    let start = Instant::now();
    dafka_zmtp::term(Duration::from_secs(10)).await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(150),
        "term returned before the flush: {:?}",
        start.elapsed()
    );
    assert_eq!(dafka_zmtp::pending_closes(), 0);
    assert_eq!(late_peer.await.unwrap(), 100);

    // Dropping the last handle is a background close too.
    let push = Socket::new(SocketType::Push, Options::default()).unwrap();
    push.connect("tcp://127.0.0.1:1").await.unwrap();
    send(&push, msg(&[b"never"])).await;
    drop(push);
    // A flush that cannot complete (linger: forever): term gives up at its
    // timeout and terminates it.
    let push = Socket::new(SocketType::Push, Options::default()).unwrap();
    push.connect("tcp://127.0.0.1:1").await.unwrap();
    send(&push, msg(&[b"never"])).await;
    push.close_in_background();
    assert_eq!(dafka_zmtp::pending_closes(), 2);
    let start = Instant::now();
    let err = dafka_zmtp::term(Duration::from_millis(200))
        .await
        .unwrap_err();
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_millis(1000),
        "{took:?}"
    );
    assert_eq!(err.abandoned, 2);
    // The terminated sockets finish promptly.
    let deadline = Instant::now() + Duration::from_secs(5);
    while dafka_zmtp::pending_closes() > 0 {
        assert!(Instant::now() < deadline, "terminated sockets still listed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
