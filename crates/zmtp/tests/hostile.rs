//! Hostile and broken peers over real TCP on 127.0.0.1: each loses only its
//! own connection, no hostile byte is delivered as a message, and a
//! well-behaved peer is served in full meanwhile.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use dafka_zmtp::{Error, Message, Options, Socket, SocketType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn noise(n: usize, mut seed: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 24) as u8
        })
        .collect()
}

/// Connect, write `bytes`, and expect the server to close the connection
/// within `within` (EOF or reset).
async fn expect_closed(addr: SocketAddr, bytes: Vec<u8>, within: Duration) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    // The write may fail if the server already hung up: that is fine.
    let _ = s.write_all(&bytes).await;
    assert!(
        closed_within(&mut s, within).await,
        "server did not close a hostile connection ({} bytes sent)",
        bytes.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_peers_lose_only_their_connection() {
    let pull = Socket::new(
        SocketType::Pull,
        Options::default()
            .with_handshake_timeout(Some(Duration::from_millis(800)))
            .with_linger(Some(Duration::ZERO)),
    )
    .unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let addr = addr_of(&ep);

    // ~200 connections stalled in the middle of the greeting.
    let mut stalled = Vec::new();
    for i in 0..200 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&greeting(b"NULL")[..(i % 60) + 1])
            .await
            .unwrap();
        stalled.push(s);
    }

    // A well-behaved peer, served in full while the attacks run.
    const N: u32 = 2000;
    let good = tokio::spawn(async move {
        let push = Socket::new(SocketType::Push, Options::default()).unwrap();
        push.connect(&ep).await.unwrap();
        for i in 0..N {
            let mut m = Message::new();
            m.push(Bytes::from_static(b"good"));
            m.push(Bytes::copy_from_slice(&i.to_be_bytes()));
            push.send(m).await.unwrap();
        }
        push
    });

    let quick = Duration::from_secs(3);
    let attacks = vec![
        // Random bytes instead of a greeting.
        noise(4096, 0x9E37_79B9_7F4A_7C15),
        // Wrong signature byte.
        {
            let mut g = greeting(b"NULL");
            g[0] = 0x00;
            g
        },
        // Wrong mechanism (we only speak NULL).
        greeting(b"CURVE"),
        greeting(b"PLAIN"),
        // Incompatible socket type.
        handshake("PUB"),
        // Long frame with the top bit of the length set.
        {
            let mut v = handshake("PUSH");
            v.push(0x02);
            v.extend_from_slice(&(0x8000_0000_0000_0005u64).to_be_bytes());
            v.extend_from_slice(b"HOSTILE");
            v
        },
        // Oversized frame (1 TiB announced, default limit 64 MiB).
        {
            let mut v = handshake("PUSH");
            v.push(0x02);
            v.extend_from_slice(&(1u64 << 40).to_be_bytes());
            v.extend_from_slice(b"HOSTILE");
            v
        },
        // A partial multipart message followed by reserved flag bits.
        {
            let mut v = handshake("PUSH");
            v.extend_from_slice(&[0x01, 7]);
            v.extend_from_slice(b"HOSTILE");
            v.extend_from_slice(&[0xF0, 7]);
            v.extend_from_slice(b"HOSTILE");
            v
        },
        // Message frame before the handshake completed.
        {
            let mut v = greeting(b"NULL");
            v.extend_from_slice(&[0x00, 7]);
            v.extend_from_slice(b"HOSTILE");
            v
        },
        // Garbage after a valid handshake.
        {
            let mut v = handshake("PUSH");
            v.extend_from_slice(&noise(1000, 42));
            v
        },
    ];
    let mut tasks = Vec::new();
    for a in attacks {
        tasks.push(tokio::spawn(expect_closed(addr, a, quick)));
    }
    // A truncated greeting that then stalls: closed by the handshake timeout.
    tasks.push(tokio::spawn(expect_closed(
        addr,
        greeting(b"NULL")[..30].to_vec(),
        quick,
    )));
    for t in tasks {
        t.await.unwrap();
    }

    // The good peer got everything, in order.
    for i in 0..N {
        let m = recv(&pull).await;
        assert_eq!(frames(&m), vec![b"good".to_vec(), i.to_be_bytes().to_vec()]);
    }
    let push = good.await.unwrap();

    // The stalled connections are closed by the handshake timeout.
    for mut s in stalled {
        assert!(
            closed_within(&mut s, quick).await,
            "stalled handshake not timed out"
        );
    }

    // Nothing hostile was ever delivered.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(matches!(pull.try_recv(), Err(Error::WouldBlock)));

    // The socket still serves new peers afterwards.
    send(&push, msg(&[b"after"])).await;
    assert_eq!(frames(&recv(&pull).await), vec![b"after".to_vec()]);
}

#[tokio::test]
async fn hostile_server_does_not_hurt_the_connecting_socket() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bad = listener.local_addr().unwrap();
    let good = Socket::new(SocketType::Pull, Options::default()).unwrap();
    let good_ep = good.bind("tcp://127.0.0.1:0").await.unwrap();

    let push = Socket::new(SocketType::Push, linger0()).unwrap();
    push.connect(&format!("tcp://{bad}")).await.unwrap();
    push.connect(&good_ep).await.unwrap();
    let (mut s, _) = listener.accept().await.unwrap();
    s.write_all(&noise(256, 7)).await.unwrap();
    // The bad connection is dropped (and not retried, like libzmq after a
    // protocol error); the good peer gets every message.
    assert!(closed_within(&mut s, Duration::from_secs(3)).await);
    for i in 0..10u8 {
        send(&push, msg(&[&[i]])).await;
    }
    for i in 0..10u8 {
        assert_eq!(frames(&recv(&good).await), vec![vec![i]]);
    }
}

#[tokio::test]
async fn complete_messages_before_bad_bytes_are_delivered_nothing_after() {
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let mut bytes = handshake("PUSH");
    bytes.extend_from_slice(&[0x01, 1, b'a', 0x00, 1, b'b']); // ["a", "b"]
    bytes.extend_from_slice(&[0xFF, 7]);
    bytes.extend_from_slice(b"HOSTILE");
    expect_closed(addr_of(&ep), bytes, Duration::from_secs(3)).await;
    assert_eq!(
        frames(&recv(&pull).await),
        vec![b"a".to_vec(), b"b".to_vec()]
    );
    assert_silent(&pull, 50).await;
}

/// A request of a quarter million frames without a delimiter is dropped in
/// linear time: stripping the envelope used to shift the rest of the message
/// once per frame (quadratic: minutes of CPU for this one message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rep_drops_a_huge_envelope_without_delimiter_quickly() {
    let (rep, dealer, _) = pair_with(
        SocketType::Rep,
        linger0(),
        SocketType::Dealer,
        linger0(),
        "tcp",
    )
    .await;
    let huge: Message = (0..250_000u32)
        .map(|i| Bytes::from(vec![(i % 251) as u8 + 1]))
        .collect();
    // `recv` strips the envelope inside one poll, so a timeout around it
    // cannot fire: measure the wall clock instead.
    let start = std::time::Instant::now();
    send(&dealer, huge).await;
    send(&dealer, msg(&[b"", b"req"])).await;
    assert_eq!(frames(&recv(&rep).await), vec![b"req".to_vec()]);
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "REP spent {took:?} on one message"
    );
    send(&rep, msg(&[b"rep"])).await;
    assert_eq!(
        frames(&recv(&dealer).await),
        vec![b"".to_vec(), b"rep".to_vec()]
    );
}

/// A command frame `name` + `data` (short or long form).
fn command(name: &[u8], data: &[u8]) -> Vec<u8> {
    let mut body = vec![name.len() as u8];
    body.extend_from_slice(name);
    body.extend_from_slice(data);
    let mut out = if body.len() <= 255 {
        vec![0x04, body.len() as u8]
    } else {
        let mut h = vec![0x06];
        h.extend_from_slice(&(body.len() as u64).to_be_bytes());
        h
    };
    out.extend_from_slice(&body);
    out
}

/// PUB stores what its peers subscribe to: too many prefixes, or too long a
/// one (SUBSCRIBE, CANCEL, or the `0x01` message form), closes that peer's
/// connection; a subscriber within the limits is served.
#[tokio::test]
async fn pub_closes_peers_that_break_subscription_limits() {
    let publisher = Socket::new(
        SocketType::Pub,
        Options::default()
            .with_max_subscriptions(3)
            .with_max_subscription_size(16),
    )
    .unwrap();
    let ep = publisher.bind("tcp://127.0.0.1:0").await.unwrap();
    let addr = addr_of(&ep);
    let within = Duration::from_secs(3);

    let mut too_many = handshake("SUB");
    for p in [b"a", b"b", b"c", b"d"] {
        too_many.extend(command(b"SUBSCRIBE", p));
    }
    expect_closed(addr, too_many, within).await;
    let mut long_sub = handshake("SUB");
    long_sub.extend(command(b"SUBSCRIBE", &[b'x'; 17]));
    expect_closed(addr, long_sub, within).await;
    let mut long_cancel = handshake("SUB");
    long_cancel.extend(command(b"CANCEL", &[b'x'; 17]));
    expect_closed(addr, long_cancel, within).await;
    let mut long_msg = handshake("SUB");
    long_msg.extend([0x00, 18, 0x01]);
    long_msg.extend([b'x'; 17]);
    expect_closed(addr, long_msg, within).await;

    let sub = Socket::new(SocketType::Sub, Options::default()).unwrap();
    sub.connect(&ep).await.unwrap();
    for p in [&b"a"[..], b"b", &[b'x'; 16]] {
        sub.subscribe(p).unwrap();
        sub.subscribe(p).unwrap();
    }
    let got = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            publisher.send(msg(&[b"b1"])).await.unwrap();
            if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(50), sub.recv()).await {
                return m;
            }
        }
    })
    .await
    .expect("a subscriber within the limits is served");
    assert_eq!(frames(&got), vec![b"b1".to_vec()]);

    // The defaults are bounded too: a 4097-byte prefix is refused.
    let default_pub = Socket::new(SocketType::Pub, Options::default()).unwrap();
    let ep = default_pub.bind("tcp://127.0.0.1:0").await.unwrap();
    let addr = addr_of(&ep);
    let mut long_default = handshake("SUB");
    long_default.extend(command(b"SUBSCRIBE", &[b'y'; 4097]));
    expect_closed(addr, long_default, within).await;
}

/// At `max_connections` a bound endpoint stops accepting: the next peer is
/// not served (no greeting) until one of the connections ends.
#[tokio::test]
async fn bound_endpoint_accepts_at_most_max_connections() {
    let pull = Socket::new(SocketType::Pull, Options::default().with_max_connections(2)).unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let addr = addr_of(&ep);
    let mut g = [0u8; 64];
    let mut first = TcpStream::connect(addr).await.unwrap();
    first.read_exact(&mut g).await.unwrap();
    let mut second = TcpStream::connect(addr).await.unwrap();
    second.read_exact(&mut g).await.unwrap();
    // The third connects (kernel backlog) but is not accepted.
    let mut third = TcpStream::connect(addr).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), third.read_exact(&mut g))
            .await
            .is_err(),
        "a connection beyond max_connections was accepted"
    );
    drop(first);
    tokio::time::timeout(Duration::from_secs(5), third.read_exact(&mut g))
        .await
        .expect("not accepted after a connection ended")
        .unwrap();
    assert_eq!(g[0], 0xFF);
    drop(second);
}
