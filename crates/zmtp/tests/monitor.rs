//! Socket events (`Socket::monitor`): one test per event kind.

mod common;

use std::time::Duration;

use dafka_zmtp::{Bytes, ConnectionEnd, Monitor, PeerId, Socket, SocketEvent, SocketType};
use dafka_zmtp_proto::{Error as ProtoError, PeerError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use common::*;

/// The first event `pick` accepts (skipping others), within 5 s.
async fn wait_for<T>(m: &mut Monitor, mut pick: impl FnMut(SocketEvent) -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match tokio::time::timeout_at(deadline, m.recv()).await {
            Ok(Some(e)) => {
                if let Some(t) = pick(e) {
                    return t;
                }
            }
            Ok(None) => panic!("monitor ended"),
            Err(_) => panic!("event not seen within 5 s"),
        }
    }
}

/// The reason of the next `HandshakeFailed`.
async fn handshake_failure(m: &mut Monitor) -> ConnectionEnd {
    wait_for(m, |e| match e {
        SocketEvent::HandshakeFailed { reason, .. } => Some(reason),
        SocketEvent::Disconnected { .. } => panic!("the handshake had not completed"),
        _ => None,
    })
    .await
}

/// The peer and reason of the next `Disconnected`.
async fn disconnection(m: &mut Monitor) -> (PeerId, ConnectionEnd) {
    wait_for(m, |e| match e {
        SocketEvent::Disconnected { peer, reason, .. } => Some((peer, reason)),
        SocketEvent::HandshakeFailed { .. } => panic!("the handshake had completed"),
        _ => None,
    })
    .await
}

/// Every event queued now.
fn drain(m: &mut Monitor) -> Vec<SocketEvent> {
    std::iter::from_fn(|| m.try_recv()).collect()
}

#[tokio::test]
async fn listening_names_the_resolved_endpoint() {
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    let mut m = pull.monitor(16);
    let tcp = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let ipc = pull.bind(&bind_endpoint("ipc")).await.unwrap();
    let inproc = pull.bind(&bind_endpoint("inproc")).await.unwrap();
    let seen: Vec<String> = drain(&mut m)
        .into_iter()
        .map(|e| match e {
            SocketEvent::Listening { endpoint } => endpoint,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(seen, vec![tcp, ipc, inproc]);
}

#[tokio::test]
async fn accepted_names_the_endpoint_and_the_peer_address() {
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let mut m = pull.monitor(16);
    let raw = TcpStream::connect(addr_of(&ep)).await.unwrap();
    let (endpoint, address) = wait_for(&mut m, |e| match e {
        SocketEvent::Accepted {
            endpoint, address, ..
        } => Some((endpoint, address)),
        _ => None,
    })
    .await;
    assert_eq!(endpoint, ep);
    assert_eq!(address, raw.local_addr().unwrap().to_string());
}

#[tokio::test]
async fn connected_names_the_endpoint_and_address() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let ep = format!("tcp://{addr}");
    let push = Socket::new(SocketType::Push, linger0()).unwrap();
    let mut m = push.monitor(16);
    push.connect(&ep).await.unwrap();
    let (_stream, _) = listener.accept().await.unwrap();
    let (endpoint, address) = wait_for(&mut m, |e| match e {
        SocketEvent::Connected {
            endpoint, address, ..
        } => Some((endpoint, address)),
        _ => None,
    })
    .await;
    assert_eq!(endpoint, ep);
    assert_eq!(address, format!("tcp://{addr}"));
}

#[tokio::test]
async fn connect_retried_reports_the_delay() {
    let ep = dead_endpoint().await;
    let push = Socket::new(
        SocketType::Push,
        linger0().with_reconnect_ivl(Duration::from_millis(20)),
    )
    .unwrap();
    let mut m = push.monitor(16);
    push.connect(&ep).await.unwrap();
    let (endpoint, delay) = wait_for(&mut m, |e| match e {
        SocketEvent::ConnectRetried {
            endpoint, delay, ..
        } => Some((endpoint, delay)),
        _ => None,
    })
    .await;
    assert_eq!(endpoint, ep);
    // The interval plus a jitter of up to the interval.
    assert!(
        delay >= Duration::from_millis(20) && delay <= Duration::from_millis(40),
        "{delay:?}"
    );
}

/// ROUTER learns each peer's identity, socket type and X- properties, and the
/// routing id its messages will carry (generated for a peer without one).
#[tokio::test]
async fn handshake_succeeded_carries_the_ready_metadata() {
    for transport in ["tcp", "inproc"] {
        let router = Socket::new(SocketType::Router, linger0()).unwrap();
        let mut m = router.monitor(64);
        let ep = router.bind(&bind_endpoint(transport)).await.unwrap();
        let named = Socket::new(
            SocketType::Dealer,
            linger0()
                .with_routing_id(Some(Bytes::from_static(b"mailbox-7")))
                .with_property("X-Name", "node-7"),
        )
        .unwrap();
        named.connect(&ep).await.unwrap();
        let accepted = wait_for(&mut m, |e| match e {
            SocketEvent::Accepted { peer, .. } => Some(peer),
            _ => None,
        })
        .await;
        let (peer, socket_type, identity, metadata, routing_id) = wait_for(&mut m, |e| match e {
            SocketEvent::HandshakeSucceeded {
                peer,
                socket_type,
                identity,
                metadata,
                routing_id,
                ..
            } => Some((peer, socket_type, identity, metadata, routing_id)),
            _ => None,
        })
        .await;
        assert_eq!(peer, accepted, "{transport}");
        assert_eq!(socket_type, SocketType::Dealer);
        assert_eq!(identity, &b"mailbox-7"[..]);
        assert_eq!(metadata.get("x-name").unwrap(), &b"node-7"[..]);
        assert_eq!(metadata.get("Socket-Type").unwrap(), &b"DEALER"[..]);
        assert_eq!(routing_id.unwrap(), &b"mailbox-7"[..]);

        // Without an identity: the generated routing id, as messages carry it.
        let anonymous = Socket::new(SocketType::Dealer, linger0()).unwrap();
        anonymous.connect(&ep).await.unwrap();
        let routing_id = wait_for(&mut m, |e| match e {
            SocketEvent::HandshakeSucceeded { routing_id, .. } => routing_id,
            _ => None,
        })
        .await;
        send(&anonymous, msg(&[b"hi"])).await;
        let got = recv(&router).await;
        assert_eq!(got.frames()[0], routing_id);
        assert_eq!(routing_id[0], 0x00);
    }
}

#[tokio::test]
async fn handshake_failed_gives_the_typed_reason() {
    let pull = Socket::new(
        SocketType::Pull,
        linger0().with_handshake_timeout(Some(Duration::from_millis(100))),
    )
    .unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let mut m = pull.monitor(64);
    // Not a ZMTP greeting.
    let mut garbage = TcpStream::connect(addr_of(&ep)).await.unwrap();
    garbage.write_all(&[0x00; 64]).await.unwrap();
    let reason = handshake_failure(&mut m).await;
    assert!(
        matches!(
            reason,
            ConnectionEnd::Protocol(ProtoError::Peer(PeerError::NotZmtp3 { .. }))
        ),
        "{reason:?}"
    );
    // Silent: the handshake times out.
    let _silent = TcpStream::connect(addr_of(&ep)).await.unwrap();
    let reason = handshake_failure(&mut m).await;
    assert!(
        matches!(
            reason,
            ConnectionEnd::Protocol(ProtoError::Peer(PeerError::HandshakeTimeout(_)))
        ),
        "{reason:?}"
    );
    // A peer that hangs up mid-handshake.
    let mut quitter = TcpStream::connect(addr_of(&ep)).await.unwrap();
    quitter.write_all(&[0xFF]).await.unwrap();
    drop(quitter);
    let reason = handshake_failure(&mut m).await;
    assert!(matches!(reason, ConnectionEnd::PeerClosed), "{reason:?}");
}

#[tokio::test]
async fn disconnected_follows_a_completed_handshake() {
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let mut m = pull.monitor(64);
    let mut raw = TcpStream::connect(addr_of(&ep)).await.unwrap();
    raw.write_all(&handshake("PUSH")).await.unwrap();
    let ready = wait_for(&mut m, |e| match e {
        SocketEvent::HandshakeSucceeded { peer, .. } => Some(peer),
        _ => None,
    })
    .await;
    // Our greeting and READY, then the peer hangs up.
    let mut buf = [0u8; 64];
    raw.read_exact(&mut buf).await.unwrap();
    drop(raw);
    let (peer, reason) = disconnection(&mut m).await;
    assert_eq!(peer, ready);
    assert!(
        matches!(reason, ConnectionEnd::PeerClosed | ConnectionEnd::Io(_)),
        "{reason:?}"
    );

    // inproc: both sides see it, as ended by the closing side.
    let a = Socket::new(SocketType::Pair, linger0()).unwrap();
    let name = a.bind(&bind_endpoint("inproc")).await.unwrap();
    let mut am = a.monitor(64);
    let b = Socket::new(SocketType::Pair, linger0()).unwrap();
    let mut bm = b.monitor(64);
    b.connect(&name).await.unwrap();
    wait_for(&mut am, |e| {
        matches!(e, SocketEvent::HandshakeSucceeded { .. }).then_some(())
    })
    .await;
    b.close().await;
    let (_, reason) = disconnection(&mut am).await;
    assert!(matches!(reason, ConnectionEnd::PeerClosed), "{reason:?}");
    let (_, reason) = disconnection(&mut bm).await;
    assert!(matches!(reason, ConnectionEnd::Closed), "{reason:?}");
}

#[tokio::test]
async fn closed_is_the_last_event() {
    let push = Socket::new(SocketType::Push, linger0()).unwrap();
    let mut m = push.monitor(16);
    push.bind("tcp://127.0.0.1:0").await.unwrap();
    push.close().await;
    let mut last = None;
    while let Some(e) = tokio::time::timeout(Duration::from_secs(5), m.recv())
        .await
        .unwrap()
    {
        last = Some(e);
    }
    assert!(matches!(last, Some(SocketEvent::Closed)), "{last:?}");
    assert!(m.is_ended());
    // A monitor attached after the close gets just `Closed`.
    let mut late = push.monitor(16);
    assert!(matches!(late.recv().await, Some(SocketEvent::Closed)));
    assert!(late.recv().await.is_none());
}

/// A peer that does not take its messages is seen at the HWM, and again when
/// its queue drains.
#[tokio::test]
async fn send_queue_full_and_drained() {
    let ep = dead_endpoint().await;
    let push = Socket::new(
        SocketType::Push,
        hwm(2, 2).with_reconnect_ivl(Duration::from_millis(20)),
    )
    .unwrap();
    let mut m = push.monitor(64);
    push.connect(&ep).await.unwrap();
    push.try_send(msg(&[b"1"])).unwrap();
    push.try_send(msg(&[b"2"])).unwrap();
    assert!(
        drain(&mut m)
            .iter()
            .all(|e| !matches!(e, SocketEvent::SendQueueFull { .. }))
    );
    assert!(push.try_send(msg(&[b"3"])).is_err());
    assert!(push.try_send(msg(&[b"4"])).is_err());
    let full: Vec<PeerId> = drain(&mut m)
        .into_iter()
        .filter_map(|e| match e {
            SocketEvent::SendQueueFull { peer } => Some(peer),
            _ => None,
        })
        .collect();
    assert_eq!(full.len(), 1, "reported once until it drains");
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    pull.bind(&ep).await.unwrap();
    let drained = wait_for(&mut m, |e| match e {
        SocketEvent::SendQueueDrained { peer } => Some(peer),
        _ => None,
    })
    .await;
    assert_eq!(drained, full[0]);
    assert_eq!(frames(&recv(&pull).await), vec![b"1".to_vec()]);
}

/// PUB drops for a slow subscriber: the full queue is reported with the peer.
#[tokio::test]
async fn a_slow_subscriber_is_seen_at_its_hwm() {
    let publisher = Socket::new(SocketType::Pub, hwm(4, 4)).unwrap();
    let ep = publisher.bind(&bind_endpoint("inproc")).await.unwrap();
    let mut m = publisher.monitor(64);
    let sub = Socket::new(SocketType::Sub, hwm(4, 4)).unwrap();
    sub.connect(&ep).await.unwrap();
    sub.subscribe(b"").unwrap();
    let subscriber = wait_for(&mut m, |e| match e {
        SocketEvent::Subscribed { peer, .. } => Some(peer),
        _ => None,
    })
    .await;
    // The subscriber never receives: 4 in its queue, 4 in ours, then full.
    for _ in 0..20 {
        publisher.send(msg(&[b"x"])).await.unwrap();
        tokio::task::yield_now().await;
    }
    let full = wait_for(&mut m, |e| match e {
        SocketEvent::SendQueueFull { peer } => Some(peer),
        _ => None,
    })
    .await;
    assert_eq!(full, subscriber);
}

/// XPUB tells which peer subscribed, also for a prefix it passes on only once.
#[tokio::test]
async fn subscribed_and_unsubscribed_name_the_peer() {
    let xpub = Socket::new(SocketType::Xpub, linger0()).unwrap();
    let ep = xpub.bind("tcp://127.0.0.1:0").await.unwrap();
    let mut m = xpub.monitor(64);
    let mut peers = Vec::new();
    let mut subs = Vec::new();
    for _ in 0..2 {
        let sub = Socket::new(SocketType::Sub, linger0()).unwrap();
        sub.connect(&ep).await.unwrap();
        let peer = wait_for(&mut m, |e| match e {
            SocketEvent::HandshakeSucceeded { peer, .. } => Some(peer),
            _ => None,
        })
        .await;
        sub.subscribe(b"topic").unwrap();
        let (who, prefix) = wait_for(&mut m, |e| match e {
            SocketEvent::Subscribed { peer, prefix } => Some((peer, prefix)),
            _ => None,
        })
        .await;
        assert_eq!(who, peer);
        assert_eq!(prefix, &b"topic"[..]);
        peers.push(peer);
        subs.push(sub);
    }
    assert_ne!(peers[0], peers[1]);
    // XPUB itself passed the prefix on once.
    assert_eq!(frames(&recv(&xpub).await), vec![b"\x01topic".to_vec()]);
    assert_silent(&xpub, 50).await;
    subs[1].unsubscribe(b"topic").unwrap();
    let (who, prefix) = wait_for(&mut m, |e| match e {
        SocketEvent::Unsubscribed { peer, prefix } => Some((peer, prefix)),
        _ => None,
    })
    .await;
    assert_eq!(who, peers[1]);
    assert_eq!(prefix, &b"topic"[..]);
}

/// The queue keeps the newest events and counts the ones it dropped.
#[tokio::test]
async fn a_full_monitor_drops_the_oldest_and_counts() {
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    let mut m = pull.monitor(3);
    let mut bound = Vec::new();
    for _ in 0..5 {
        bound.push(pull.bind(&bind_endpoint("inproc")).await.unwrap());
    }
    assert_eq!(m.dropped(), 2);
    let kept: Vec<String> = drain(&mut m)
        .into_iter()
        .map(|e| match e {
            SocketEvent::Listening { endpoint } => endpoint,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(kept, bound[2..]);
    // A new monitor replaces (ends) this one.
    let _new = pull.monitor(3);
    assert!(m.is_ended());
    assert!(m.recv().await.is_none());
}
