//! Memory from strangers (issue 21, item 3): raw TCP peers that complete the plaintext (NULL)
//! handshake on a tower's beacon port and on a store's publisher port, announce a frame and
//! hold it open, cost the process little memory, whatever they announce: a frame over the
//! socket's input limits closes the connection from its header, and the largest frames the
//! sockets allow, all but their last byte sent, cost less than 32 MiB for 64 peers.
//!
//! Measured as the growth of this process's resident memory (`VmRSS`, what the issue
//! reported) while the peers hold their frames. This binary holds one test, so nothing else
//! runs meanwhile. Linux only (`/proc`).
#![cfg(target_os = "linux")]

use std::net::SocketAddr;
use std::time::Duration;

use dafka_node::node::{beacon_input_limits, subscription_input_limits};
use dafka_node::{NodeConfig, StoreNode, StoreOptions, Tower, TowerConfig};
use dafka_proto::Limits;
use dafka_testkit::proc_status_kib;
use dafka_testkit::zmtp::{handshake, long_header};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connections per attack, as in the target.
const PEERS: usize = 64;
/// The target: 64 such peers grow the process by less than this.
const MAX_GROWTH_KIB: u64 = 32 * 1024;
/// What the attacker announced: a 63 MiB frame, within the default 64 MiB frame limit.
const HUGE: u64 = 63 << 20;
/// How much of it each attacker sends (all of it would take 4 GiB before the fix).
const SENT: usize = 8 << 20;
/// Every ZMTP command may be this large, whatever the socket's frame limit (a READY with
/// properties, `docs/zmtp.md`): the largest frame any peer may send.
const COMMAND_MAX: u64 = 64 << 10;

fn rss_kib() -> u64 {
    proc_status_kib("VmRSS").expect("VmRSS in /proc/self/status")
}

fn addr_of(endpoint: &str) -> SocketAddr {
    endpoint
        .strip_prefix("tcp://")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("not a tcp endpoint: {endpoint}"))
}

/// What a stranger announces: a message frame or a command of `.1` bytes.
#[derive(Clone, Copy)]
enum Frame {
    Message(u64),
    Command(u64),
}

impl Frame {
    fn header(self) -> Vec<u8> {
        match self {
            Frame::Message(len) => long_header(len),
            Frame::Command(len) => {
                let mut h = long_header(len);
                h[0] |= 0x04;
                h
            }
        }
    }

    fn len(self) -> u64 {
        match self {
            Frame::Message(len) | Frame::Command(len) => len,
        }
    }
}

/// A raw peer on `addr` that completes the NULL handshake as `socket_type`, then sends the
/// header of `frame` and the first `body.len()` bytes of its body, and keeps the connection
/// open. The writes may fail once the other side closed: that is the point.
async fn stranger(addr: SocketAddr, socket_type: &str, frame: Frame, body: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut bytes = handshake(socket_type);
    bytes.extend_from_slice(&frame.header());
    let _ = s.write_all(&bytes).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), s.write_all(body)).await;
    s
}

/// Whether the other side closed `s` (EOF or reset) within `within`; the greeting and READY it
/// sent are read past.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// `PEERS` strangers on `addr` announcing `announced` bytes and sending `body`: the memory
/// they cost, in KiB, and how many of them were closed. They are added to `held` and stay
/// open there, so that memory freed by one attack cannot hide what the next one costs.
async fn attack(
    addr: SocketAddr,
    socket_type: &str,
    frame: Frame,
    body: &[u8],
    held: &mut Vec<TcpStream>,
) -> (u64, usize) {
    let before = rss_kib();
    let mut peers = Vec::new();
    for _ in 0..PEERS {
        peers.push(stranger(addr, socket_type, frame, body).await);
    }
    // Loopback delivers at once; give the connection tasks time to read it (and to close a
    // connection, so that a short look at each below tells).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grown = rss_kib().saturating_sub(before);
    let mut closed = 0;
    for p in &mut peers {
        if closed_within(p, Duration::from_millis(5)).await {
            closed += 1;
        }
    }
    held.extend(peers);
    (grown, closed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_cost_a_tower_and_a_store_little_memory() {
    let tower = Tower::start(TowerConfig::new("tcp://127.0.0.1:0"))
        .await
        .unwrap();
    let towers = vec![tower.address().clone()];
    let dir = tempfile::tempdir().unwrap();
    // The writer binds `port`, the reader `port + 1`: a free port probed may have a busy
    // neighbour (or be taken again meanwhile), so try a few.
    let mut attempt = 0;
    let (store, port) = loop {
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let node = NodeConfig::new(towers.clone()).with_port(port);
        match StoreNode::open(dir.path(), node, StoreOptions::default()).await {
            Ok(store) => break (store, port),
            Err(dafka_node::Error::Socket(dafka_zmtp::Error::AddrInUse(_))) if attempt < 20 => {
                attempt += 1;
            }
            Err(e) => panic!("{e}"),
        }
    };
    let beacon_port = addr_of(&tower.address().sub);
    let store_port: SocketAddr = ([127, 0, 0, 1], port).into();
    // The store's reader publishes on the next port (an XPUB).
    let reader_port: SocketAddr = ([127, 0, 0, 1], port + 1).into();
    // The bytes the strangers send, allocated (and touched) before any baseline.
    let body = vec![0xABu8; SENT];
    // One stranger each first, so state that is allocated once exists before the baselines.
    let mut warm = vec![
        stranger(beacon_port, "PUB", Frame::Message(4), b"wxyz").await,
        stranger(store_port, "SUB", Frame::Message(4), b"wxyz").await,
        stranger(reader_port, "SUB", Frame::Message(4), b"wxyz").await,
    ];
    tokio::time::sleep(Duration::from_millis(200)).await;

    let targets = [
        (
            "tower beacon port",
            beacon_port,
            "PUB",
            beacon_input_limits(&Limits::DEFAULT),
        ),
        (
            "store publisher port",
            store_port,
            "SUB",
            subscription_input_limits(),
        ),
        (
            "store reader port",
            reader_port,
            "SUB",
            subscription_input_limits(),
        ),
    ];
    for (what, addr, socket_type, _) in targets {
        let huge = Frame::Message(HUGE);
        let (grown, closed) = attack(addr, socket_type, huge, &body, &mut warm).await;
        eprintln!(
            "{what}: {PEERS} strangers announcing {HUGE} bytes and sending {SENT}: \
             RSS grew by {grown} KiB, {closed} closed"
        );
        assert!(
            grown < MAX_GROWTH_KIB,
            "{what}: {PEERS} strangers announcing {HUGE}-byte frames grew RSS by {grown} KiB"
        );
        assert_eq!(
            closed, PEERS,
            "{what}: an oversized frame must close its connection"
        );
    }
    // The largest frames the sockets allow, a command and a message, all but the last byte of
    // each sent: every connection stays open, and all of them together cost less than the
    // target.
    let before = rss_kib();
    for (what, addr, socket_type, limits) in targets {
        for frame in [
            Frame::Command(COMMAND_MAX),
            Frame::Message(limits.max_frame_size),
        ] {
            let most = &body[..frame.len() as usize - 1];
            let (grown, closed) = attack(addr, socket_type, frame, most, &mut warm).await;
            eprintln!(
                "{what}: {PEERS} strangers sending all but the last byte of a {}-byte frame: \
                 RSS grew by {grown} KiB, {closed} closed",
                frame.len()
            );
            assert_eq!(closed, 0, "{what}: a frame within the limits was refused");
        }
    }
    let grown = rss_kib().saturating_sub(before);
    let n = 2 * targets.len() * PEERS;
    eprintln!("all {n} of them: RSS grew by {grown} KiB");
    assert!(
        grown < MAX_GROWTH_KIB,
        "{n} strangers holding the largest frames allowed grew RSS by {grown} KiB"
    );
    warm.clear();
    store.close().await;
    tower.close().await;
}
