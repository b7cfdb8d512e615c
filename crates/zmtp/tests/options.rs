//! Options that shape timing and queueing: connect timeout, reconnect backoff
//! cap and jitter, HWM per socket type, finite linger; and the ERROR command
//! sent to a peer of an incompatible socket type.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use dafka_zmtp::{Error, Message, Options, Socket, SocketType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn numbered(i: u32) -> Message {
    Message::from(Bytes::copy_from_slice(&i.to_be_bytes()))
}

fn number(frame: &[u8]) -> u32 {
    u32::from_be_bytes(frame[..4].try_into().unwrap())
}

async fn accept(listener: &TcpListener, within: Duration) -> TcpStream {
    tokio::time::timeout(within, listener.accept())
        .await
        .expect("no connection within the deadline")
        .unwrap()
        .0
}

// ---------------------------------------------------------------- connect timeout

/// Local ports of the IPv4 sockets in SYN-SENT towards 127.0.0.1:`port`
/// (one per connect attempt in flight).
#[cfg(target_os = "linux")]
fn syn_sent_ports(port: u16) -> Vec<u16> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let remote = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() > 3 && f[2] == remote && f[3] == "02")
                .then(|| u16::from_str_radix(f[1].rsplit(':').next()?, 16).ok())
                .flatten()
        })
        .collect()
}

/// A TCP connect that never completes (the listener's accept queue is full,
/// so Linux drops the SYNs) is abandoned after `connect_timeout` and retried
/// on a fresh socket; once the listener has room, the socket connects.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_timeout_abandons_a_hanging_connect_and_retries() {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = sock.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    // Fill the accept queue: connect until a connect hangs (its SYN dropped).
    let mut fillers = Vec::new();
    loop {
        assert!(fillers.len() < 16, "the accept queue never filled");
        let probe = tokio::net::TcpSocket::new_v4().unwrap();
        probe.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        match tokio::time::timeout(Duration::from_millis(300), probe.connect(addr)).await {
            Ok(s) => fillers.push(s.unwrap()),
            Err(_) => break,
        }
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(syn_sent_ports(addr.port()), Vec::<u16>::new());

    let connect_timeout = Duration::from_millis(300);
    let push = Socket::new(
        SocketType::Push,
        Options::default()
            .with_connect_timeout(Some(connect_timeout))
            .with_reconnect_ivl(Duration::from_millis(50))
            .with_linger(Some(Duration::ZERO)),
    )
    .unwrap();
    push.connect(&format!("tcp://{addr}")).await.unwrap();
    let start = Instant::now();
    // Every attempt is a new socket, so a new local port in SYN-SENT.
    let mut attempts: Vec<(u16, Duration)> = Vec::new();
    let mut most_at_once = 0;
    while start.elapsed() < Duration::from_millis(1600) {
        let ports = syn_sent_ports(addr.port());
        most_at_once = most_at_once.max(ports.len());
        for p in ports {
            if !attempts.iter().any(|(q, _)| *q == p) {
                attempts.push((p, start.elapsed()));
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Attempts every 300 ms + 50..100 ms: about 5 in 1.6 s. Without the
    // timeout the first attempt stays in SYN-SENT (the kernel retransmits
    // its SYN from the same port) for minutes.
    assert!(attempts.len() >= 3, "connect not retried: {attempts:?}");
    assert_eq!(
        most_at_once, 1,
        "an abandoned attempt lingers: {attempts:?}"
    );
    // Not given up before connect_timeout: each cycle is at least 300 ms of
    // waiting plus 50 ms of reconnect_ivl, so at most 5 attempts start in
    // 1.6 s (0, 0.35, 0.70, 1.05, 1.40 s); one slack for an attempt begun
    // just before `start`. Counting, rather than timing the gaps between
    // first sightings, stays right when a loaded machine starves this
    // sampling loop (a late sighting shortens the next gap, seen at load 10),
    // while a connect abandoned early would start 8 or more.
    assert!(
        attempts.len() <= 6,
        "attempts abandoned before connect_timeout: {attempts:?}"
    );
    // Room in the accept queue: the next attempt connects.
    for _ in 0..fillers.len() {
        accept(&listener, Duration::from_secs(1)).await;
    }
    let mut s = accept(&listener, Duration::from_secs(3)).await;
    let mut sig = [0u8; 10];
    tokio::time::timeout(Duration::from_secs(3), s.read_exact(&mut sig))
        .await
        .expect("no greeting")
        .unwrap();
    assert_eq!((sig[0], sig[9]), (0xFF, 0x7F), "not a ZMTP greeting");
    push.close().await;
}

// ---------------------------------------------------------------- reconnect backoff

/// reconnect_ivl 10 ms, reconnect_ivl_max 40 ms: after 600 ms of refused
/// connects the delay is capped at 40 ms + jitter in [0, 40 ms], so the
/// socket connects soon after a listener appears, and keeps retrying at
/// that pace (uncapped doubling would be at >= 320 ms by then). The jitter
/// shows as gaps longer than the 40 ms interval.
///
/// Paused time: the delays pass as soon as every task waits (all I/O here is
/// on loopback, ready before time moves on), so the gaps are the delays.
#[tokio::test(start_paused = true)]
async fn reconnect_interval_is_capped_and_jittered() {
    let addr = dead_addr().await;
    let push = Socket::new(
        SocketType::Push,
        Options::default()
            .with_reconnect_ivl(Duration::from_millis(10))
            .with_reconnect_ivl_max(Some(Duration::from_millis(40)))
            .with_linger(Some(Duration::ZERO)),
    )
    .unwrap();
    push.connect(&format!("tcp://{addr}")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let listener = TcpListener::bind(addr).await.expect("port taken meanwhile");
    let listening = tokio::time::Instant::now();
    drop(accept(&listener, Duration::from_secs(5)).await);
    let first = listening.elapsed();
    // A listener that hangs up at once: each accept is one attempt (the
    // handshake never completes, so the interval is never reset).
    let mut stamps = vec![tokio::time::Instant::now()];
    for _ in 0..12 {
        let next = tokio::time::timeout(Duration::from_secs(1), listener.accept()).await;
        let gaps: Vec<Duration> = stamps.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            next.is_ok(),
            "no attempt for 1 s: not capped (gaps {gaps:?})"
        );
        stamps.push(tokio::time::Instant::now());
    }
    let gaps: Vec<Duration> = stamps.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        first <= Duration::from_millis(81),
        "connected {first:?} after the listener appeared"
    );
    for g in &gaps {
        assert!(
            *g >= Duration::from_millis(40) && *g <= Duration::from_millis(81),
            "gaps not within the cap: {gaps:?}"
        );
    }
    assert!(
        gaps.iter().any(|g| *g >= Duration::from_millis(55)),
        "no jitter on top of the 40 ms interval: {gaps:?}"
    );
    push.close().await;
}

// ---------------------------------------------------------------- HWM per type

#[tokio::test]
async fn dealer_queues_sndhwm_per_unconnected_peer() {
    let dealer = Socket::new(SocketType::Dealer, hwm(5, 5)).unwrap();
    assert!(matches!(
        dealer.try_send(msg(&[b"x"])),
        Err(Error::WouldBlock)
    ));
    // The HWM is per peer: each endpoint takes 5 more.
    for _ in 0..2 {
        dealer.connect(&dead_endpoint().await).await.unwrap();
        for _ in 0..5 {
            dealer.try_send(msg(&[b"x"])).unwrap();
        }
        assert!(matches!(
            dealer.try_send(msg(&[b"x"])),
            Err(Error::WouldBlock)
        ));
    }
    dealer.close().await;
}

/// A DEALER skips a peer whose pipe is full (it stopped reading) and keeps
/// round-robining over the others, without blocking.
#[tokio::test]
async fn dealer_skips_a_full_peer() {
    let slow = Socket::new(SocketType::Router, hwm(2, 2)).unwrap();
    let slow_ep = slow.bind(&bind_endpoint("inproc")).await.unwrap();
    let fast = Socket::new(SocketType::Router, hwm(2, 1000)).unwrap();
    let fast_ep = fast.bind(&bind_endpoint("inproc")).await.unwrap();
    let dealer = Socket::new(SocketType::Dealer, hwm(2, 2)).unwrap();
    dealer.connect(&slow_ep).await.unwrap();
    dealer.connect(&fast_ep).await.unwrap();
    const N: u32 = 100;
    for i in 0..N {
        tokio::time::timeout(Duration::from_secs(2), dealer.send(numbered(i)))
            .await
            .expect("DEALER blocked on its full peer")
            .unwrap();
        if i % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let mut to_fast = Vec::new();
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(200), fast.recv()).await {
        to_fast.push(number(&m.frames()[1]));
    }
    let mut to_slow = Vec::new();
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(200), slow.recv()).await {
        to_slow.push(number(&m.frames()[1]));
    }
    // The slow peer took every other message until full: at most
    // sndhwm + rcvhwm (inproc), the rest went to the other peer.
    assert!(
        (2..=4).contains(&to_slow.len()),
        "slow peer got {to_slow:?}"
    );
    assert_eq!(
        to_slow,
        (0..to_slow.len() as u32).map(|k| 2 * k).collect::<Vec<_>>()
    );
    assert_eq!(to_fast.len() + to_slow.len(), N as usize);
    assert!(to_fast.windows(2).all(|w| w[0] < w[1]), "{to_fast:?}");
    // Drained, the slow peer is served again.
    for i in 0..4 {
        send(&dealer, numbered(1000 + i)).await;
    }
    let again = recv(&slow).await;
    assert!(number(&again.frames()[1]) >= 1000);
}

/// ROUTER without router_mandatory: a full peer's messages are dropped,
/// `send` never waits, and only sndhwm + rcvhwm (inproc) arrive.
#[tokio::test]
async fn router_drops_for_a_full_peer() {
    let router = Socket::new(SocketType::Router, hwm(2, 2)).unwrap();
    let ep = router.bind(&bind_endpoint("inproc")).await.unwrap();
    let dealer = Socket::new(
        SocketType::Dealer,
        hwm(2, 2).with_routing_id(Some(Bytes::from_static(b"d"))),
    )
    .unwrap();
    dealer.connect(&ep).await.unwrap();
    send(&dealer, msg(&[b"hello"])).await;
    assert_eq!(
        frames(&recv(&router).await),
        vec![b"d".to_vec(), b"hello".to_vec()]
    );
    for i in 0..20u32 {
        let mut m = numbered(i);
        m.push_front(Bytes::from_static(b"d"));
        tokio::time::timeout(Duration::from_millis(500), router.send(m))
            .await
            .expect("ROUTER send waited")
            .expect("ROUTER send failed");
        // Let the inproc bridge move messages into the DEALER's queue.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(number(&recv(&dealer).await.frames()[0]));
    }
    assert_eq!(got, vec![0, 1, 2, 3]);
    assert_silent(&dealer, 200).await;
    // Only messages were dropped, not the peer.
    send(&router, msg(&[b"d", b"after"])).await;
    assert_eq!(frames(&recv(&dealer).await), vec![b"after".to_vec()]);
}

/// XPUB over TCP to a SUB that does not read: sends never wait, the excess
/// is dropped, what arrives is in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xpub_drops_for_a_slow_tcp_subscriber() {
    let (xpub, sub, _) = pair_with(
        SocketType::Xpub,
        hwm(10, 10),
        SocketType::Sub,
        hwm(10, 10),
        "tcp",
    )
    .await;
    sub.subscribe(b"").unwrap();
    assert_eq!(frames(&recv(&xpub).await), vec![vec![0x01u8]]);
    const N: u32 = 2000;
    let payload = Bytes::from(vec![7u8; 64 * 1024]);
    let start = Instant::now();
    for i in 0..N {
        let mut m = numbered(i);
        m.push(payload.clone());
        match xpub.try_send(m) {
            Ok(()) => {}
            Err(e) => panic!("XPUB send {i} failed: {e}"),
        }
        // Let the connection write until the kernel buffers are full.
        if i % 20 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let took = start.elapsed();
    assert!(took < Duration::from_secs(5), "sending took {took:?}");
    let mut got = Vec::new();
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(1000), sub.recv()).await {
        got.push(number(&m.frames()[0]));
    }
    // 128 MiB were published; the kernel buffers and two queues of 10 hold a
    // small part of it.
    assert!(
        !got.is_empty() && got.len() < (N / 2) as usize,
        "{} of {N} delivered",
        got.len()
    );
    assert_eq!(got[0], 0);
    assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order");
}

// ---------------------------------------------------------------- ERROR on mismatch

/// A PUB peer connecting to a PULL: after its greeting and READY the socket
/// sends an ERROR command, then closes the connection.
#[tokio::test]
async fn incompatible_peer_gets_error_command_then_eof() {
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let mut s = TcpStream::connect(addr_of(&ep)).await.unwrap();
    s.write_all(&handshake("PUB")).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let eof = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) => return true,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(_) => return false,
            }
        }
    })
    .await
    .expect("the socket did not close the connection");
    assert!(eof, "connection reset instead of closed; got {got:?}");

    assert!(got.len() >= 64, "short greeting: {got:?}");
    let (greet, mut rest) = got.split_at(64);
    assert_eq!((greet[0], greet[9], greet[10]), (0xFF, 0x7F, 3));
    assert_eq!(&greet[12..16], b"NULL");
    let mut commands = Vec::new();
    while !rest.is_empty() {
        let flags = rest[0];
        assert_eq!(flags & 0x04, 0x04, "message frame from the socket");
        let (len, head) = if flags & 0x02 != 0 {
            (
                u64::from_be_bytes(rest[1..9].try_into().unwrap()) as usize,
                9,
            )
        } else {
            (usize::from(rest[1]), 2)
        };
        assert!(rest.len() >= head + len, "truncated frame: {rest:?}");
        commands.push(rest[head..head + len].to_vec());
        rest = &rest[head + len..];
    }
    assert_eq!(commands.len(), 2, "expected READY, ERROR: {commands:?}");
    assert!(commands[0].starts_with(b"\x05READY"));
    let socket_type = [&b"\x0bSocket-Type\x00\x00\x00\x04"[..], b"PULL"].concat();
    assert!(
        commands[0]
            .windows(socket_type.len())
            .any(|w| w == socket_type),
        "READY without Socket-Type PULL"
    );
    let error = &commands[1];
    assert!(error.starts_with(b"\x05ERROR"), "not ERROR: {error:?}");
    assert_eq!(usize::from(error[6]), error.len() - 7, "bad reason length");
}

// ---------------------------------------------------------------- linger

/// linger = 200 ms with messages queued for a peer that never comes: close
/// gives up after 200 ms (paused time: exactly).
#[tokio::test(start_paused = true)]
async fn finite_linger_expires() {
    let push = Socket::new(
        SocketType::Push,
        Options::default()
            .with_linger(Some(Duration::from_millis(200)))
            .with_reconnect_ivl(Duration::from_millis(20)),
    )
    .unwrap();
    push.connect(&dead_endpoint().await).await.unwrap();
    for _ in 0..3 {
        push.try_send(msg(&[b"queued"])).unwrap();
    }
    let start = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(5), push.close())
        .await
        .expect("close hung past the linger");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took <= Duration::from_millis(203),
        "close took {took:?}"
    );
    assert!(matches!(push.try_send(msg(&[b"x"])), Err(Error::Closed)));
}

/// A long linger does not delay close once everything is flushed.
#[tokio::test]
async fn linger_ends_early_once_flushed() {
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let push = Socket::new(
        SocketType::Push,
        Options::default().with_linger(Some(Duration::from_secs(10))),
    )
    .unwrap();
    push.connect(&ep).await.unwrap();
    for i in 0..10 {
        send(&push, numbered(i)).await;
    }
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(15), push.close())
        .await
        .expect("close hung");
    let took = start.elapsed();
    assert!(took < Duration::from_secs(3), "close took {took:?}");
    for i in 0..10 {
        assert_eq!(number(&recv(&pull).await.frames()[0]), i);
    }
}
