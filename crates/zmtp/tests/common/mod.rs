//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dafka_zmtp::{Message, Options, Socket, SocketType};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh endpoint to bind for `transport` ("tcp", "ipc", "inproc").
pub fn bind_endpoint(transport: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    match transport {
        "tcp" => "tcp://127.0.0.1:0".to_owned(),
        "ipc" => format!(
            "ipc://{}/dafka-zmtp-test-{}-{}.sock",
            std::env::temp_dir().display(),
            std::process::id(),
            n
        ),
        "inproc" => format!("inproc://test-{}-{}", std::process::id(), n),
        other => panic!("unknown transport {other}"),
    }
}

pub fn msg(frames: &[&[u8]]) -> Message {
    frames.iter().map(|f| Bytes::copy_from_slice(f)).collect()
}

pub fn frames(m: &Message) -> Vec<Vec<u8>> {
    m.frames().iter().map(|f| f.to_vec()).collect()
}

/// Bind `a`, connect `b` to it; returns (bound, connected, endpoint).
pub async fn pair_with(
    a: SocketType,
    a_opts: Options,
    b: SocketType,
    b_opts: Options,
    transport: &str,
) -> (Socket, Socket, String) {
    let sa = Socket::new(a, a_opts).unwrap();
    let ep = sa.bind(&bind_endpoint(transport)).await.expect("bind");
    let sb = Socket::new(b, b_opts).unwrap();
    sb.connect(&ep).await.expect("connect");
    (sa, sb, ep)
}

pub async fn pair(a: SocketType, b: SocketType, transport: &str) -> (Socket, Socket, String) {
    pair_with(a, Options::default(), b, Options::default(), transport).await
}

pub async fn recv(s: &Socket) -> Message {
    tokio::time::timeout(Duration::from_secs(10), s.recv())
        .await
        .expect("recv timed out")
        .expect("recv failed")
}

pub async fn send(s: &Socket, m: Message) {
    tokio::time::timeout(Duration::from_secs(10), s.send(m))
        .await
        .expect("send timed out")
        .expect("send failed")
}

/// Nothing arrives within `ms` milliseconds.
pub async fn assert_silent(s: &Socket, ms: u64) {
    if let Ok(r) = tokio::time::timeout(Duration::from_millis(ms), s.recv()).await {
        panic!("unexpected message: {r:?}");
    }
}

pub fn opts_with_id(id: &'static [u8]) -> Options {
    Options::default().with_routing_id(Some(Bytes::from_static(id)))
}

pub fn linger0() -> Options {
    Options::default().with_linger(Some(Duration::ZERO))
}

/// Reads (and discards) from a raw peer stream until the socket closes it.
/// False when it is still open after `within`.
pub async fn closed_within<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    within: Duration,
) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

// Hand-written wire bytes of a raw peer (independent of the proto crate's encoders), shared
// with the other crates' tests.
#[allow(unused_imports)]
pub use dafka_testkit::zmtp::{greeting, handshake, long_header, ready, ready_with};

/// Options with the given HWMs and no linger.
pub fn hwm(snd: usize, rcv: usize) -> Options {
    Options::default()
        .with_sndhwm(snd)
        .with_rcvhwm(rcv)
        .with_linger(Some(Duration::ZERO))
}

/// A TCP address nobody listens on (bound then released).
pub async fn dead_addr() -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

/// [`dead_addr`] as an endpoint.
pub async fn dead_endpoint() -> String {
    format!("tcp://{}", dead_addr().await)
}

/// The socket address of a `tcp://` endpoint reported by `bind`.
pub fn addr_of(ep: &str) -> std::net::SocketAddr {
    ep.strip_prefix("tcp://").unwrap().parse().unwrap()
}

/// A raw peer on `addr` that completes the NULL handshake as `socket_type`, then sends `bytes`
/// and keeps the connection open.
pub async fn raw_peer(
    addr: std::net::SocketAddr,
    socket_type: &str,
    bytes: &[u8],
) -> tokio::net::TcpStream {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut wire = handshake(socket_type);
    wire.extend_from_slice(bytes);
    let _ = tokio::io::AsyncWriteExt::write_all(&mut s, &wire).await;
    s
}

/// A long frame header announcing `announced` bytes, followed by `have` of them.
pub fn partial_frame(announced: u64, have: usize) -> Vec<u8> {
    let mut f = long_header(announced);
    f.resize(9 + have, 0xAB);
    f
}
