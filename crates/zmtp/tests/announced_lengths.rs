//! A frame header announces the length of its body; memory is spent only on
//! the bytes that arrive, never on the announcement alone.
//!
//! Measured as the growth of this process's `VmData` (its private writable
//! mappings, which every heap allocation lands in) while many connections
//! each announce a large frame and stop. This binary holds one test, so
//! nothing else allocates meanwhile. Linux only (`/proc`).
#![cfg(target_os = "linux")]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use dafka_zmtp::{Message, Socket, SocketType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `VmData` of this process, in KiB.
fn vm_data_kib() -> u64 {
    dafka_testkit::proc_status_kib("VmData").expect("VmData in /proc/self/status")
}

/// Connects a raw peer that completes the handshake as PUSH and has read the
/// socket's greeting and READY back.
async fn handshaken_peer(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&handshake("PUSH")).await.unwrap();
    // Greeting (64 bytes), then the READY command: at least a few bytes more.
    let mut buf = [0u8; 80];
    let mut got = 0;
    while got < 70 {
        let n = s.read(&mut buf[got..]).await.unwrap();
        assert!(n > 0, "socket closed a well-behaved handshake");
        got += n;
    }
    s
}

#[tokio::test(flavor = "current_thread")]
async fn announced_frame_lengths_reserve_nothing_until_the_bytes_arrive() {
    const PEERS: usize = 64;
    // Within the default 64 MiB frame limit, so the header itself is valid.
    const ANNOUNCED: usize = 16 << 20;
    const SENT: usize = 1000;

    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let addr = addr_of(&ep);

    // One ordinary exchange first, so state that is allocated once exists
    // before the baseline is taken.
    let mut warm = handshaken_peer(addr).await;
    warm.write_all(&[0x00, 0x02, b'h', b'i']).await.unwrap();
    assert_eq!(frames(&recv(&pull).await), vec![b"hi".to_vec()]);

    let before = vm_data_kib();
    let mut peers = Vec::new();
    for _ in 0..PEERS {
        let mut s = handshaken_peer(addr).await;
        let mut bytes = long_header(ANNOUNCED as u64);
        bytes.extend_from_slice(&[0xAB; SENT]);
        s.write_all(&bytes).await.unwrap();
        peers.push(s);
    }
    // Loopback delivers at once; give the connection tasks time to read it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grown_kib = vm_data_kib().saturating_sub(before);
    eprintln!("VmData grew by {grown_kib} KiB");
    // Reserving for the announcements would take PEERS x 16 MiB = 1 GiB
    // (8 MiB each with a cap of that size); what arrived is 64 x 1 KB.
    assert!(
        grown_kib < 32 * 1024,
        "{PEERS} announced {ANNOUNCED}-byte frames grew the heap by {grown_kib} KiB"
    );

    // The frames themselves are fine: one peer sends the rest of its body, in
    // pieces, and the whole message arrives.
    let mut first = peers.swap_remove(0);
    let writer = tokio::spawn(async move {
        let rest = vec![0xAB; ANNOUNCED - SENT];
        for piece in rest.chunks(200_000) {
            first.write_all(piece).await.unwrap();
        }
        first
    });
    let msg: Message = recv(&pull).await;
    assert_eq!(msg.len(), 1);
    assert_eq!(msg.frames()[0].len(), ANNOUNCED);
    assert!(msg.frames()[0].iter().all(|&b| b == 0xAB));
    drop(writer.await.unwrap());
    drop(peers);
    pull.close().await;
}
