//! Receivers that drive their socket's connections while they wait (few
//! connections, same runtime), next to the connection tasks themselves.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use dafka_zmtp::{Error, Options, Socket, SocketType};
use tokio::io::AsyncReadExt;

/// Request-reply in lock-step, both sockets waiting in `recv` on the same
/// current-thread runtime: every reply arrives, in order.
#[tokio::test]
async fn lock_step_round_trips_on_one_thread() {
    let (req, rep, _) = pair(SocketType::Req, SocketType::Rep, "tcp").await;
    let server = tokio::spawn(async move {
        for _ in 0..2000 {
            let m = rep.recv().await.unwrap();
            rep.send(m).await.unwrap();
        }
        rep
    });
    for i in 0u32..2000 {
        req.send(msg(&[&i.to_be_bytes()])).await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(10), req.recv())
            .await
            .expect("reply lost")
            .unwrap();
        assert_eq!(frames(&reply), vec![i.to_be_bytes().to_vec()]);
    }
    let rep = server.await.unwrap();
    req.close().await;
    rep.close().await;
}

/// Several threads receive from one DEALER socket on a multi-thread runtime,
/// all driving the same connection while its task does too: every message
/// arrives exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_receivers_share_the_connection() {
    const N: u32 = 20_000;
    let (push, pull, _) = pair(SocketType::Dealer, SocketType::Dealer, "tcp").await;
    let pull = Arc::new(pull);
    let mut receivers = Vec::new();
    for _ in 0..4 {
        let pull = pull.clone();
        receivers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                match tokio::time::timeout(Duration::from_millis(500), pull.recv()).await {
                    Ok(Ok(m)) => got.push(u32::from_be_bytes(
                        frames(&m)[0].as_slice().try_into().unwrap(),
                    )),
                    Ok(Err(e)) => panic!("recv failed: {e}"),
                    Err(_) => return got,
                }
            }
        }));
    }
    for i in 0..N {
        push.send(msg(&[&i.to_be_bytes()])).await.unwrap();
    }
    let mut seen = HashSet::new();
    for r in receivers {
        for i in r.await.unwrap() {
            assert!(seen.insert(i), "message {i} received twice");
        }
    }
    assert_eq!(seen.len(), N as usize);
    push.close().await;
}

/// A peer that goes away while the receiver is driving its connection: the
/// connection ends inside the receiver's poll, its task must end with it, and
/// the socket closes without waiting.
#[tokio::test]
async fn a_connection_ended_inside_recv_lets_the_socket_close() {
    use tokio::io::AsyncWriteExt;
    let pull = Socket::new(SocketType::Dealer, linger0()).unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let mut peer = tokio::net::TcpStream::connect(ep.trim_start_matches("tcp://"))
        .await
        .unwrap();
    peer.write_all(&handshake("DEALER")).await.unwrap();
    let mut greeting = [0u8; 64];
    peer.read_exact(&mut greeting).await.unwrap();
    let waiting = tokio::time::timeout(Duration::from_millis(200), pull.recv()).await;
    assert!(waiting.is_err(), "nothing was sent");
    // The receiver is woken by the close and polls the connection to its end.
    let receiver = async {
        let _ = tokio::time::timeout(Duration::from_millis(300), pull.recv()).await;
    };
    let closer = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(peer);
    };
    tokio::join!(receiver, closer);
    tokio::time::timeout(Duration::from_secs(5), pull.close())
        .await
        .expect("close hung after the connection ended");
}

/// Dropping the runtime drops the connections it ran, shared or not: the
/// peer sees the stream close.
#[test]
fn runtime_shutdown_closes_shared_connections() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = format!("tcp://{}", listener.local_addr().unwrap());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let socket = rt.block_on(async {
        let s = Socket::new(SocketType::Dealer, Options::default()).unwrap();
        s.connect(&ep).await.unwrap();
        // Wait a little inside recv, driving the connection.
        assert!(
            tokio::time::timeout(Duration::from_millis(100), s.recv())
                .await
                .is_err()
        );
        s
    });
    let (mut peer, _) = listener.accept().unwrap();
    drop(rt);
    peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 256];
    let mut total = 0;
    loop {
        match std::io::Read::read(&mut peer, &mut buf) {
            Ok(0) => break,
            Ok(n) => total += n,
            Err(e) => {
                panic!("stream still open after the runtime was dropped ({total} bytes read): {e}")
            }
        }
    }
    drop(socket);
}

/// A receiver on another runtime does not drive (the I/O belongs to the
/// socket's runtime) but is still served.
#[test]
fn a_receiver_on_another_runtime_is_served() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (push, pull) = rt.block_on(async {
        let (push, pull, _) = pair(SocketType::Pair, SocketType::Pair, "tcp").await;
        (push, pull)
    });
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async { push.send(msg(&[b"hello"])).await.unwrap() });
    let got = other.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), pull.recv())
            .await
            .expect("not served")
    });
    assert_eq!(frames(&got.unwrap()), vec![b"hello".to_vec()]);
    rt.block_on(async {
        push.close().await;
        pull.close().await;
        assert!(matches!(pull.try_recv(), Err(Error::Closed)));
    });
}
