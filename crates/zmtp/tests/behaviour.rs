//! HWM, routing, reconnect, heartbeats, linger, misuse.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use dafka_zmtp::{Error, Message, Options, Socket, SocketType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[tokio::test]
async fn push_queues_up_to_sndhwm_without_peer() {
    let push = Socket::new(SocketType::Push, hwm(5, 5)).unwrap();
    // No peer at all: a blocking type would block.
    assert!(matches!(
        push.try_send(msg(&[b"x"])),
        Err(Error::WouldBlock)
    ));
    push.connect(&dead_endpoint().await).await.unwrap();
    for _ in 0..5 {
        push.try_send(msg(&[b"x"])).unwrap();
    }
    assert!(matches!(
        push.try_send(msg(&[b"x"])),
        Err(Error::WouldBlock)
    ));
    // A blocking send waits.
    assert!(
        tokio::time::timeout(Duration::from_millis(50), push.send(msg(&[b"x"])))
            .await
            .is_err()
    );
    push.close().await;
}

#[tokio::test]
async fn inproc_hwm_is_sndhwm_plus_rcvhwm() {
    let pull = Socket::new(SocketType::Pull, hwm(3, 4)).unwrap();
    let ep = pull.bind(&bind_endpoint("inproc")).await.unwrap();
    let push = Socket::new(SocketType::Push, hwm(3, 4)).unwrap();
    push.connect(&ep).await.unwrap();
    let mut sent = 0;
    // Let the bridge move messages between attempts.
    for _ in 0..50 {
        while push.try_send(msg(&[b"m"])).is_ok() {
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(sent, 7, "PUSH sndhwm 3 + PULL rcvhwm 4");
    for _ in 0..7 {
        recv(&pull).await;
    }
    // Space again.
    send(&push, msg(&[b"again"])).await;
    assert_eq!(frames(&recv(&pull).await), vec![b"again".to_vec()]);
}

#[tokio::test]
async fn tcp_receiver_back_pressure_blocks_sender_without_loss() {
    let (pull, push, _) = pair_with(
        SocketType::Pull,
        hwm(10, 10),
        SocketType::Push,
        hwm(10, 10),
        "tcp",
    )
    .await;
    // Fill until the sender blocks: the receiver stops reading, the kernel
    // buffers fill, then the PUSH queue fills.
    let payload = vec![7u8; 16 * 1024];
    let mut sent: u32 = 0;
    let mut idle_rounds = 0;
    while idle_rounds < 20 {
        let mut m = Message::new();
        m.push(Bytes::copy_from_slice(&sent.to_be_bytes()));
        m.push(Bytes::from(payload.clone()));
        match push.try_send(m) {
            Ok(()) => {
                sent += 1;
                idle_rounds = 0;
            }
            Err(Error::WouldBlock) => {
                idle_rounds += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => panic!("{e}"),
        }
        assert!(sent < 100_000, "sender never blocked");
    }
    for i in 0..sent {
        let m = recv(&pull).await;
        assert_eq!(m.frames()[0], &i.to_be_bytes()[..]);
    }
    assert!(matches!(pull.try_recv(), Err(Error::WouldBlock)));
}

/// A peer connecting while the receive queue is full completes its
/// handshake at once: only attached connections stop reading.
#[tokio::test]
async fn handshake_completes_while_receive_queue_is_full() {
    let pull = Socket::new(SocketType::Pull, hwm(10, 4)).unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let first = Socket::new(SocketType::Push, hwm(10, 10)).unwrap();
    first.connect(&ep).await.unwrap();
    for i in 0..8u8 {
        send(&first, msg(&[b"a", &[i]])).await;
    }
    // The receive queue fills (4) and the rest waits in the connection.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = Socket::new(SocketType::Push, hwm(10, 10).with_immediate(true)).unwrap();
    second.connect(&ep).await.unwrap();
    // With `immediate`, `send` waits for a completed handshake.
    tokio::time::timeout(Duration::from_secs(5), second.send(msg(&[b"b", &[0]])))
        .await
        .expect("handshake did not complete while the receive queue was full")
        .unwrap();
    for i in 1..5u8 {
        send(&second, msg(&[b"b", &[i]])).await;
    }
    let mut got: Vec<Vec<Vec<u8>>> = Vec::new();
    for _ in 0..13 {
        got.push(frames(&recv(&pull).await));
    }
    for (peer, n) in [(b"a", 8u8), (b"b", 5)] {
        let mine: Vec<u8> = got
            .iter()
            .filter(|f| f[0] == peer)
            .map(|f| f[1][0])
            .collect();
        assert_eq!(mine, (0..n).collect::<Vec<u8>>());
    }
}

/// A handshake timeout is not a protocol error: the connector reconnects
/// (as libzmq does) and the queued message is delivered.
/// Paused time: the timeout and the reconnect delay pass as soon as every
/// task waits (all I/O here is on loopback, ready before time moves on).
#[tokio::test(start_paused = true)]
async fn connector_reconnects_after_handshake_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ep = format!("tcp://{}", listener.local_addr().unwrap());
    let push = Socket::new(
        SocketType::Push,
        linger0().with_handshake_timeout(Some(Duration::from_millis(200))),
    )
    .unwrap();
    push.connect(&ep).await.unwrap();
    send(&push, msg(&[b"queued"])).await;
    // A peer that accepts but never answers the greeting.
    let (_silent, _) = listener.accept().await.unwrap();
    let start = tokio::time::Instant::now();
    let second = tokio::time::timeout(Duration::from_secs(3), listener.accept())
        .await
        .expect("no reconnect after a handshake timeout");
    // The 200 ms timeout, then the 100 ms reconnect interval and its jitter.
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took <= Duration::from_millis(401),
        "{took:?}"
    );
    drop(second);
    drop(listener);
    // Once a real peer is there, the message queued all along arrives.
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    pull.bind(&ep).await.unwrap();
    assert_eq!(frames(&recv(&pull).await), vec![b"queued".to_vec()]);
}

#[tokio::test]
async fn pub_drops_for_slow_subscriber_and_never_blocks() {
    let (publisher, sub, _) = pair_with(
        SocketType::Pub,
        hwm(5, 5),
        SocketType::Sub,
        hwm(5, 5),
        "inproc",
    )
    .await;
    sub.subscribe(b"").unwrap();
    // Wait until the subscription is in place.
    loop {
        publisher.try_send(msg(&[b"probe"])).unwrap();
        if tokio::time::timeout(Duration::from_millis(10), sub.recv())
            .await
            .is_ok()
        {
            break;
        }
    }
    while sub.try_recv().is_ok() {}
    for i in 0..1000u32 {
        publisher
            .try_send(Message::from(Bytes::copy_from_slice(&i.to_be_bytes())))
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut got = 0;
    while sub.try_recv().is_ok() {
        got += 1;
    }
    assert!((1..=10).contains(&got), "got {got}");
}

#[tokio::test]
async fn router_drops_unknown_or_reports_with_mandatory() {
    let router = Socket::new(SocketType::Router, Options::default()).unwrap();
    router.send(msg(&[b"nobody", b"x"])).await.unwrap();
    let mandatory = Socket::new(
        SocketType::Router,
        Options::default().with_router_mandatory(true),
    )
    .unwrap();
    match mandatory.send(msg(&[b"nobody", b"x"])).await {
        Err(Error::HostUnreachable(id)) => assert_eq!(id, &b"nobody"[..]),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn router_mandatory_blocks_on_full_peer() {
    let (router, dealer, _) = pair_with(
        SocketType::Router,
        hwm(2, 2).with_router_mandatory(true),
        SocketType::Dealer,
        hwm(2, 2).with_routing_id(Some(Bytes::from_static(b"d"))),
        "inproc",
    )
    .await;
    loop {
        match router.try_send(msg(&[b"d", b"x"])) {
            Ok(()) => break,
            Err(Error::HostUnreachable(_)) => tokio::time::sleep(Duration::from_millis(2)).await,
            Err(e) => panic!("{e}"),
        }
    }
    let mut sent = 1;
    for _ in 0..50 {
        while router.try_send(msg(&[b"d", b"x"])).is_ok() {
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(sent, 4);
    assert!(matches!(
        router.try_send(msg(&[b"d", b"x"])),
        Err(Error::WouldBlock)
    ));
    recv(&dealer).await;
}

#[tokio::test]
async fn pair_blocks_when_full() {
    let (a, b, _) = pair_with(
        SocketType::Pair,
        hwm(2, 2),
        SocketType::Pair,
        hwm(2, 2),
        "inproc",
    )
    .await;
    let mut sent = 0;
    for _ in 0..50 {
        while b.try_send(msg(&[b"p"])).is_ok() {
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(sent, 4);
    recv(&a).await;
}

#[tokio::test]
async fn dealer_round_robins_and_fair_queues() {
    let r1 = Socket::new(SocketType::Router, Options::default()).unwrap();
    let r2 = Socket::new(SocketType::Router, Options::default()).unwrap();
    let e1 = r1.bind(&bind_endpoint("tcp")).await.unwrap();
    let e2 = r2.bind(&bind_endpoint("tcp")).await.unwrap();
    let dealer = Socket::new(SocketType::Dealer, Options::default()).unwrap();
    dealer.connect(&e1).await.unwrap();
    dealer.connect(&e2).await.unwrap();
    for i in 0..10u8 {
        send(&dealer, msg(&[&[i]])).await;
    }
    let mut a = Vec::new();
    let mut b = Vec::new();
    for _ in 0..5 {
        a.push(recv(&r1).await.frames()[1][0]);
        b.push(recv(&r2).await.frames()[1][0]);
    }
    assert_eq!(a, vec![0, 2, 4, 6, 8]);
    assert_eq!(b, vec![1, 3, 5, 7, 9]);
    assert_silent(&r1, 30).await;
}

#[tokio::test]
async fn misuse_is_a_caller_error() {
    let push = Socket::new(SocketType::Push, Options::default()).unwrap();
    assert!(matches!(push.try_recv(), Err(Error::NotSupported { .. })));
    assert!(matches!(
        push.subscribe(b"x"),
        Err(Error::NotSupported { .. })
    ));
    assert!(matches!(
        push.try_send(Message::new()),
        Err(Error::EmptyMessage)
    ));
    assert!(matches!(
        push.bind("bogus").await,
        Err(Error::InvalidEndpoint { .. })
    ));
    assert!(matches!(
        push.connect("tcp://*:5555").await,
        Err(Error::InvalidEndpoint { .. })
    ));
    let pull = Socket::new(SocketType::Pull, Options::default()).unwrap();
    assert!(matches!(
        pull.try_send(msg(&[b"x"])),
        Err(Error::NotSupported { .. })
    ));
    let sub = Socket::new(SocketType::Sub, Options::default()).unwrap();
    assert!(matches!(
        sub.try_send(msg(&[b"x"])),
        Err(Error::NotSupported { .. })
    ));
    let small = Socket::new(
        SocketType::Push,
        Options::default().with_limits(dafka_zmtp::Limits::new(10, 1000)),
    )
    .unwrap();
    assert!(matches!(
        small.try_send(msg(&[&[0u8; 11]])),
        Err(Error::MessageTooLarge { .. })
    ));
    // Bad options fail at construction.
    assert!(matches!(
        Socket::new(
            SocketType::Dealer,
            Options::default().with_routing_id(Some(Bytes::from(vec![1u8; 300]))),
        ),
        Err(Error::InvalidOption(_))
    ));
}

#[tokio::test]
async fn bind_conflicts_are_addr_in_use() {
    let a = Socket::new(SocketType::Pull, linger0()).unwrap();
    let ep = a.bind("tcp://127.0.0.1:0").await.unwrap();
    let b = Socket::new(SocketType::Pull, linger0()).unwrap();
    assert!(matches!(b.bind(&ep).await, Err(Error::AddrInUse(_))));
    let name = bind_endpoint("inproc");
    a.bind(&name).await.unwrap();
    assert!(matches!(b.bind(&name).await, Err(Error::AddrInUse(_))));
    let ipc = bind_endpoint("ipc");
    a.bind(&ipc).await.unwrap();
    assert!(matches!(b.bind(&ipc).await, Err(Error::AddrInUse(_))));
    // After close the names are free again.
    a.close().await;
    b.bind(&name).await.unwrap();
    b.bind(&ipc).await.unwrap();
    b.bind(&ep).await.unwrap();
}

#[tokio::test]
async fn ipc_bind_replaces_stale_socket_file() {
    let ep = bind_endpoint("ipc");
    let path = ep.strip_prefix("ipc://").unwrap().to_owned();
    // A socket file with no listener behind it.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(std::path::Path::new(&path).exists());
    let pull = Socket::new(SocketType::Pull, Options::default()).unwrap();
    pull.bind(&ep).await.unwrap();
    let push = Socket::new(SocketType::Push, Options::default()).unwrap();
    push.connect(&ep).await.unwrap();
    send(&push, msg(&[b"ok"])).await;
    assert_eq!(frames(&recv(&pull).await), vec![b"ok".to_vec()]);
    pull.close().await;
    assert!(
        !std::path::Path::new(&path).exists(),
        "socket file removed on close"
    );
}

/// A regular file where the IPC socket should go is left alone.
#[tokio::test]
async fn ipc_bind_never_deletes_a_regular_file() {
    let ep = bind_endpoint("ipc");
    let path = ep.strip_prefix("ipc://").unwrap().to_owned();
    std::fs::write(&path, b"precious").unwrap();
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    assert!(matches!(pull.bind(&ep).await, Err(Error::AddrInUse(_))));
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    std::fs::remove_file(&path).unwrap();
}

/// A connector that gave up (incompatible peer) leaves no endpoint behind:
/// `disconnect` reports it unknown.
#[tokio::test]
async fn disconnect_of_an_abandoned_endpoint_is_unknown() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ep = format!("tcp://{}", listener.local_addr().unwrap());
    let push = Socket::new(SocketType::Push, linger0()).unwrap();
    push.connect(&ep).await.unwrap();
    let (mut peer, _) = listener.accept().await.unwrap();
    // A PUB peer: incompatible with PUSH, so the connector stops for good.
    peer.write_all(&handshake("PUB")).await.unwrap();
    assert!(
        closed_within(&mut peer, Duration::from_secs(5)).await,
        "the incompatible connection was not closed"
    );
    // The connector's exit follows the close.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        // `disconnect` of a still-registered endpoint would succeed: only
        // call it once the connector is gone (it has no pipe to send to).
        if matches!(push.try_send(msg(&[b"x"])), Err(Error::WouldBlock)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "connector never gave up"
        );
    }
    assert!(matches!(
        push.disconnect(&ep).await,
        Err(Error::UnknownEndpoint(_))
    ));
}

#[tokio::test]
async fn inproc_connect_before_bind() {
    let ep = bind_endpoint("inproc");
    let push = Socket::new(SocketType::Push, Options::default()).unwrap();
    push.connect(&ep).await.unwrap();
    send(&push, msg(&[b"early"])).await;
    let pull = Socket::new(SocketType::Pull, Options::default()).unwrap();
    pull.bind(&ep).await.unwrap();
    assert_eq!(frames(&recv(&pull).await), vec![b"early".to_vec()]);
}

async fn restart_keeps_queued(transport: &str) {
    let ep0 = bind_endpoint(transport);
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    let ep = pull.bind(&ep0).await.unwrap();
    let push = Socket::new(
        SocketType::Push,
        Options::default().with_reconnect_ivl(Duration::from_millis(20)),
    )
    .unwrap();
    push.connect(&ep).await.unwrap();
    send(&push, msg(&[b"before"])).await;
    assert_eq!(frames(&recv(&pull).await), vec![b"before".to_vec()]);
    pull.close().await;
    // Let the pusher notice the disconnect.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..100u32 {
        send(
            &push,
            Message::from(Bytes::copy_from_slice(&i.to_be_bytes())),
        )
        .await;
    }
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    // The port may linger briefly in the kernel; retry.
    let mut bound = false;
    for _ in 0..100 {
        if pull.bind(&ep).await.is_ok() {
            bound = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(bound, "could not rebind {ep}");
    for i in 0..100u32 {
        assert_eq!(recv(&pull).await.frames()[0], &i.to_be_bytes()[..]);
    }
}

#[tokio::test]
async fn reconnect_after_bound_side_restarts_tcp() {
    restart_keeps_queued("tcp").await;
}

#[tokio::test]
async fn reconnect_after_bound_side_restarts_ipc() {
    restart_keeps_queued("ipc").await;
}

#[tokio::test]
async fn reconnect_after_bound_side_restarts_inproc() {
    restart_keeps_queued("inproc").await;
}

#[tokio::test]
async fn sub_resubscribes_after_publisher_restart() {
    let publisher = Socket::new(SocketType::Xpub, linger0()).unwrap();
    let ep = publisher.bind("tcp://127.0.0.1:0").await.unwrap();
    let sub = Socket::new(
        SocketType::Sub,
        Options::default().with_reconnect_ivl(Duration::from_millis(20)),
    )
    .unwrap();
    sub.connect(&ep).await.unwrap();
    sub.subscribe(b"t").unwrap();
    assert_eq!(frames(&recv(&publisher).await), vec![b"\x01t".to_vec()]);
    publisher.close().await;
    let publisher = Socket::new(SocketType::Xpub, linger0()).unwrap();
    let mut bound = false;
    for _ in 0..100 {
        if publisher.bind(&ep).await.is_ok() {
            bound = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(bound);
    // The subscription is sent again on the new connection.
    assert_eq!(frames(&recv(&publisher).await), vec![b"\x01t".to_vec()]);
    send(&publisher, msg(&[b"t1"])).await;
    assert_eq!(frames(&recv(&sub).await), vec![b"t1".to_vec()]);
}

/// Paused time (see `connector_reconnects_after_handshake_timeout`).
#[tokio::test(start_paused = true)]
async fn heartbeat_timeout_closes_dead_peer() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let push = Socket::new(
        SocketType::Push,
        Options::default()
            .with_heartbeat_ivl(Some(Duration::from_millis(50)))
            .with_heartbeat_timeout(Some(Duration::from_millis(150)))
            .with_reconnect_ivl(Duration::from_millis(20))
            .with_linger(Some(Duration::ZERO)),
    )
    .unwrap();
    push.connect(&format!("tcp://{addr}")).await.unwrap();
    let (mut s, _) = listener.accept().await.unwrap();
    s.write_all(&handshake("PULL")).await.unwrap();
    // Read (and ignore) everything; never answer PINGs. The pusher must close
    // the connection by itself.
    let started = tokio::time::Instant::now();
    assert!(
        closed_within(&mut s, Duration::from_secs(5)).await,
        "dead peer was not closed"
    );
    // The first PING goes out after 50 ms; nothing comes back for 150 ms.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took <= Duration::from_millis(201),
        "{took:?}"
    );
    // And it reconnects.
    let again = tokio::time::timeout(Duration::from_secs(5), listener.accept()).await;
    assert!(again.is_ok(), "no reconnect");
}

#[tokio::test]
async fn linger_flushes_queued_messages_on_close() {
    let pull = Socket::new(SocketType::Pull, Options::default()).unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let push = Socket::new(
        SocketType::Push,
        Options::default().with_linger(Some(Duration::from_secs(5))),
    )
    .unwrap();
    push.connect(&ep).await.unwrap();
    for i in 0..500u32 {
        send(
            &push,
            Message::from(Bytes::copy_from_slice(&i.to_be_bytes())),
        )
        .await;
    }
    push.close().await;
    assert!(matches!(push.try_send(msg(&[b"x"])), Err(Error::Closed)));
    for i in 0..500u32 {
        assert_eq!(recv(&pull).await.frames()[0], &i.to_be_bytes()[..]);
    }
}

#[tokio::test]
async fn linger_zero_returns_at_once_with_unreachable_peer() {
    let push = Socket::new(SocketType::Push, linger0()).unwrap();
    push.connect(&dead_endpoint().await).await.unwrap();
    push.send(msg(&[b"x"])).await.unwrap();
    tokio::time::timeout(Duration::from_secs(1), push.close())
        .await
        .expect("close hung");
}

#[tokio::test]
async fn close_wakes_blocked_receiver() {
    let pull = Socket::new(SocketType::Pull, Options::default()).unwrap();
    let p2 = pull.clone();
    let waiter = tokio::spawn(async move { p2.recv().await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    pull.close().await;
    assert!(matches!(waiter.await.unwrap(), Err(Error::Closed)));
}

#[tokio::test]
async fn incompatible_socket_types_do_not_talk() {
    let (pull, pull2, _) = pair(SocketType::Pull, SocketType::Pull, "tcp").await;
    assert!(matches!(
        pull2.try_send(msg(&[b"x"])),
        Err(Error::NotSupported { .. })
    ));
    assert_silent(&pull, 50).await;
}

#[tokio::test]
async fn xpub_welcome_message_reaches_each_new_subscriber() {
    for t in ["tcp", "inproc"] {
        let (xpub, sub, _) = pair_with(
            SocketType::Xpub,
            Options::default().with_xpub_welcome_msg(Some(Bytes::from_static(b"W"))),
            SocketType::Sub,
            Options::default(),
            t,
        )
        .await;
        sub.subscribe(b"W").unwrap();
        assert_eq!(frames(&recv(&sub).await), vec![b"W".to_vec()]);
        assert_eq!(frames(&recv(&xpub).await), vec![b"\x01W".to_vec()]);
    }
}

#[tokio::test]
async fn dropping_the_last_handle_closes_the_socket() {
    let name = bind_endpoint("inproc");
    let tcp = {
        let pull = Socket::new(SocketType::Pull, Options::default()).unwrap();
        pull.bind(&name).await.unwrap();
        let clone = pull.clone();
        drop(pull);
        // A clone keeps it open.
        let other = Socket::new(SocketType::Pull, Options::default()).unwrap();
        assert!(matches!(other.bind(&name).await, Err(Error::AddrInUse(_))));
        clone.bind("tcp://127.0.0.1:0").await.unwrap()
    };
    // Closed in the background: the names become free.
    let other = Socket::new(SocketType::Pull, Options::default()).unwrap();
    let (mut inproc_free, mut tcp_free) = (false, false);
    for _ in 0..100 {
        inproc_free = inproc_free || other.bind(&name).await.is_ok();
        tcp_free = tcp_free || other.bind(&tcp).await.is_ok();
        if inproc_free && tcp_free {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(inproc_free && tcp_free);
}

#[tokio::test]
async fn second_pair_peer_is_refused() {
    let a = Socket::new(SocketType::Pair, Options::default()).unwrap();
    let ep = a.bind("tcp://127.0.0.1:0").await.unwrap();
    let b = Socket::new(SocketType::Pair, linger0()).unwrap();
    b.connect(&ep).await.unwrap();
    send(&b, msg(&[b"first"])).await;
    assert_eq!(frames(&recv(&a).await), vec![b"first".to_vec()]);
    let c = Socket::new(SocketType::Pair, linger0()).unwrap();
    c.connect(&ep).await.unwrap();
    c.try_send(msg(&[b"intruder"])).unwrap();
    assert_silent(&a, 100).await;
    send(&a, msg(&[b"reply"])).await;
    assert_eq!(frames(&recv(&b).await), vec![b"reply".to_vec()]);
}

#[tokio::test]
async fn routing_id_starting_with_zero_is_rejected() {
    // At construction, not at the first bind or connect.
    assert!(matches!(
        Socket::new(
            SocketType::Dealer,
            Options::default().with_routing_id(Some(Bytes::from_static(b"\x00x"))),
        ),
        Err(Error::InvalidOption(_))
    ));
}

/// Paused time (see `connector_reconnects_after_handshake_timeout`): the
/// gaps are the connector's delays exactly.
#[tokio::test(start_paused = true)]
async fn reconnect_backs_off_exponentially_up_to_the_cap() {
    // A listener that hangs up on every connection at once.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let push = Socket::new(
        SocketType::Push,
        Options::default()
            .with_reconnect_ivl(Duration::from_millis(10))
            .with_reconnect_ivl_max(Some(Duration::from_millis(80)))
            .with_linger(Some(Duration::ZERO)),
    )
    .unwrap();
    push.connect(&format!("tcp://{addr}")).await.unwrap();
    let mut stamps = Vec::new();
    for _ in 0..8 {
        let (s, _) = tokio::time::timeout(Duration::from_secs(5), listener.accept())
            .await
            .expect("no reconnect")
            .unwrap();
        stamps.push(tokio::time::Instant::now());
        drop(s);
    }
    let gaps: Vec<Duration> = stamps.windows(2).map(|w| w[1] - w[0]).collect();
    // Delay = interval + jitter in [0, interval]; the interval doubles from
    // 10 ms after each attempt and is capped at 80 ms. (1 ms of slack: the
    // clock moves in whole milliseconds.)
    for (i, g) in gaps.iter().enumerate() {
        let ivl = Duration::from_millis((10u64 << i).min(80));
        assert!(
            *g >= ivl && *g <= 2 * ivl + Duration::from_millis(1),
            "gap {i}: {gaps:?}"
        );
    }
    push.close().await;
}

/// Greeting announcing ZMTP 3.0 (libzmq <= 4.3.2) plus READY.
fn handshake_v30(socket_type: &str) -> Vec<u8> {
    let mut v = handshake(socket_type);
    v[11] = 0;
    v
}

async fn read_exactly(s: &mut tokio::net::TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut buf))
        .await
        .expect("peer sent too little")
        .unwrap();
    buf
}

#[tokio::test]
async fn sub_sends_subscriptions_as_commands_to_31_and_messages_to_30() {
    for (minor, expected) in [
        // SUBSCRIBE command: flags 04, size 11, name-length 9, "SUBSCRIBE", "x".
        (1u8, [&[0x04u8, 11, 9][..], b"SUBSCRIBE", b"x"].concat()),
        // 3.0: a message 01 'x'.
        (0u8, vec![0x00, 2, 0x01, b'x']),
    ] {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sub = Socket::new(SocketType::Sub, linger0()).unwrap();
        sub.subscribe(b"x").unwrap();
        sub.connect(&format!("tcp://{addr}")).await.unwrap();
        let (mut s, _) = listener.accept().await.unwrap();
        let hs = if minor == 0 {
            handshake_v30("PUB")
        } else {
            handshake("PUB")
        };
        s.write_all(&hs).await.unwrap();
        // Our greeting (64) and READY (Socket-Type SUB: 2 + 25 = 27 bytes).
        let head = read_exactly(&mut s, 64 + 27).await;
        assert_eq!(head[0], 0xFF);
        assert_eq!(
            read_exactly(&mut s, expected.len()).await,
            expected,
            "minor {minor}"
        );
        // Messages from the publisher arrive.
        s.write_all(&[0x00, 2, b'x', b'1']).await.unwrap();
        assert_eq!(frames(&recv(&sub).await), vec![b"x1".to_vec()]);
    }
}

#[tokio::test]
async fn pull_fair_queues_between_busy_peers() {
    for t in ["tcp", "inproc"] {
        let pull = Socket::new(SocketType::Pull, hwm(10, 10)).unwrap();
        let ep = pull.bind(&bind_endpoint(t)).await.unwrap();
        let mut pushers = Vec::new();
        for name in [b'a', b'b'] {
            let push = Socket::new(SocketType::Push, hwm(1000, 1000)).unwrap();
            push.connect(&ep).await.unwrap();
            for i in 0..300u32 {
                let mut m = Message::new();
                m.push(Bytes::copy_from_slice(&[name]));
                m.push(Bytes::copy_from_slice(&i.to_be_bytes()));
                send(&push, m).await;
            }
            pushers.push(push);
        }
        // Both peers are now blocked on the PULL's HWM.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut first = Vec::new();
        let mut next = [0u32; 2];
        for _ in 0..600 {
            let m = recv(&pull).await;
            let who = usize::from(m.frames()[0][0] - b'a');
            // Each peer's own order is kept.
            assert_eq!(m.frames()[1], &next[who].to_be_bytes()[..]);
            next[who] += 1;
            if first.len() < 100 {
                first.push(who);
            }
        }
        let a = first.iter().filter(|w| **w == 0).count();
        assert!(
            (25..=75).contains(&a),
            "{t}: {a} of the first 100 from one peer"
        );
    }
}

async fn disconnect_and_unbind(t: &str) {
    let a = Socket::new(SocketType::Pull, linger0()).unwrap();
    let b = Socket::new(SocketType::Pull, linger0()).unwrap();
    let ea = a.bind(&bind_endpoint(t)).await.unwrap();
    let eb = b.bind(&bind_endpoint(t)).await.unwrap();
    let push = Socket::new(SocketType::Push, linger0()).unwrap();
    push.connect(&ea).await.unwrap();
    push.connect(&eb).await.unwrap();
    for i in 0..4u8 {
        send(&push, msg(&[&[i]])).await;
    }
    recv(&a).await;
    recv(&b).await;
    recv(&a).await;
    recv(&b).await;
    // Disconnect from `a`: everything goes to `b` now.
    push.disconnect(&ea).await.unwrap();
    assert!(matches!(
        push.disconnect(&ea).await,
        Err(Error::UnknownEndpoint(_))
    ));
    for i in 0..6u8 {
        send(&push, msg(&[&[i]])).await;
    }
    for i in 0..6u8 {
        assert_eq!(frames(&recv(&b).await), vec![vec![i]]);
    }
    assert_silent(&a, 50).await;
    // Unbind `b`: its connection goes away, the endpoint is free again.
    b.unbind(&eb).await.unwrap();
    assert!(matches!(
        b.unbind(&eb).await,
        Err(Error::UnknownEndpoint(_))
    ));
    let c = Socket::new(SocketType::Pull, linger0()).unwrap();
    let mut rebound = false;
    for _ in 0..100 {
        if c.bind(&eb).await.is_ok() {
            rebound = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(rebound, "{eb} not released by unbind");
    // The pusher reconnects to the new socket.
    send(&push, msg(&[b"new"])).await;
    assert_eq!(frames(&recv(&c).await), vec![b"new".to_vec()]);
    assert_silent(&b, 50).await;
}

#[tokio::test]
async fn disconnect_and_unbind_tcp() {
    disconnect_and_unbind("tcp").await;
}

#[tokio::test]
async fn disconnect_and_unbind_ipc() {
    disconnect_and_unbind("ipc").await;
}

#[tokio::test]
async fn disconnect_and_unbind_inproc() {
    disconnect_and_unbind("inproc").await;
}

#[tokio::test]
async fn socket_and_its_futures_are_send_and_sync() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let s = Socket::new(SocketType::Dealer, linger0()).unwrap();
    send_sync(&s);
    send(&s.recv());
    send(&s.send(msg(&[b"x"])));
    send(&s.bind("inproc://never-polled"));
    send(&s.connect("inproc://never-polled"));
    send(&s.close());
    send(&s.unbind("inproc://never-polled"));
    send(&s.disconnect("inproc://never-polled"));
}

#[tokio::test]
async fn immediate_skips_peers_that_are_not_connected() {
    let pull = Socket::new(SocketType::Pull, Options::default()).unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let push = Socket::new(SocketType::Push, linger0().with_immediate(true)).unwrap();
    // A dead peer first: without `immediate` half the messages would queue there.
    push.connect(&dead_endpoint().await).await.unwrap();
    assert!(matches!(
        push.try_send(msg(&[b"x"])),
        Err(Error::WouldBlock)
    ));
    push.connect(&ep).await.unwrap();
    for i in 0..10u8 {
        send(&push, msg(&[&[i]])).await;
    }
    for i in 0..10u8 {
        assert_eq!(frames(&recv(&pull).await), vec![vec![i]]);
    }
}

#[tokio::test]
async fn huge_durations_in_options_do_not_panic() {
    let opts = Options::default()
        .with_heartbeat_ivl(Some(Duration::MAX))
        .with_heartbeat_ttl(Some(Duration::MAX))
        .with_heartbeat_timeout(Some(Duration::MAX))
        .with_handshake_timeout(Some(Duration::MAX))
        .with_reconnect_ivl(Duration::MAX)
        .with_reconnect_ivl_max(Some(Duration::MAX))
        .with_connect_timeout(Some(Duration::MAX))
        .with_linger(Some(Duration::ZERO));
    let (pull, push, _) = pair_with(
        SocketType::Pull,
        opts.clone(),
        SocketType::Push,
        opts,
        "tcp",
    )
    .await;
    send(&push, msg(&[b"ok"])).await;
    assert_eq!(frames(&recv(&pull).await), vec![b"ok".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_serves_many_dealers_concurrently() {
    let router = Socket::new(SocketType::Router, linger0()).unwrap();
    let ep = router.bind("tcp://127.0.0.1:0").await.unwrap();
    const CLIENTS: usize = 50;
    const REQUESTS: u32 = 100;
    let server = {
        let router = router.clone();
        tokio::spawn(async move {
            for _ in 0..CLIENTS * REQUESTS as usize {
                let m = router.recv().await.unwrap();
                // Echo back to whoever asked.
                router.send(m).await.unwrap();
            }
        })
    };
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let ep = ep.clone();
        clients.push(tokio::spawn(async move {
            let d = Socket::new(SocketType::Dealer, linger0()).unwrap();
            d.connect(&ep).await.unwrap();
            for i in 0..REQUESTS {
                let mut m = Message::new();
                m.push(Bytes::copy_from_slice(&(c as u32).to_be_bytes()));
                m.push(Bytes::copy_from_slice(&i.to_be_bytes()));
                d.send(m).await.unwrap();
            }
            for i in 0..REQUESTS {
                let m = recv(&d).await;
                assert_eq!(m.frames()[0], &(c as u32).to_be_bytes()[..]);
                assert_eq!(m.frames()[1], &i.to_be_bytes()[..]);
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    server.await.unwrap();
}

#[tokio::test]
async fn router_duplicate_identity_refused_or_handed_over() {
    for handover in [false, true] {
        let router =
            Socket::new(SocketType::Router, linger0().with_router_handover(handover)).unwrap();
        let ep = router.bind("tcp://127.0.0.1:0").await.unwrap();
        let first = Socket::new(SocketType::Dealer, opts_with_id(b"same")).unwrap();
        first.connect(&ep).await.unwrap();
        send(&first, msg(&[b"1"])).await;
        assert_eq!(
            frames(&recv(&router).await),
            vec![b"same".to_vec(), b"1".to_vec()]
        );
        let second = Socket::new(SocketType::Dealer, opts_with_id(b"same")).unwrap();
        second.connect(&ep).await.unwrap();
        second.try_send(msg(&[b"2"])).unwrap();
        if handover {
            assert_eq!(
                frames(&recv(&router).await),
                vec![b"same".to_vec(), b"2".to_vec()]
            );
            send(&router, msg(&[b"same", b"to-second"])).await;
            assert_eq!(frames(&recv(&second).await), vec![b"to-second".to_vec()]);
            assert_silent(&first, 50).await;
        } else {
            assert_silent(&router, 100).await;
            send(&router, msg(&[b"same", b"to-first"])).await;
            assert_eq!(frames(&recv(&first).await), vec![b"to-first".to_vec()]);
        }
    }
}

/// Many producers (connection and inproc session tasks) race a consumer that
/// spins on `try_recv`: the receive queue's count must stay exact (it used to
/// be raised after the messages were published, so the consumer could
/// release them first and wrap it, losing the wake-up of blocked producers:
/// a permanent stall). A race, so it is run for many rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receive_queue_count_survives_racing_producers_and_a_spinning_consumer() {
    const PEERS: usize = 6;
    const N: u32 = 2_000;
    const ROUNDS: usize = 12;
    for round in 0..ROUNDS {
        for transport in ["inproc", "tcp"] {
            let pull = Socket::new(SocketType::Pull, hwm(4, 2)).unwrap();
            let ep = pull.bind(&bind_endpoint(transport)).await.unwrap();
            let mut pushes = Vec::new();
            for _ in 0..PEERS {
                let push = Socket::new(SocketType::Push, hwm(4, 4)).unwrap();
                push.connect(&ep).await.unwrap();
                pushes.push(push);
            }
            let consumer = {
                let pull = pull.clone();
                tokio::task::spawn_blocking(move || {
                    // Give up after 5 s without progress: a stall.
                    let mut last = std::time::Instant::now();
                    let mut got = 0usize;
                    while got < PEERS * N as usize && last.elapsed() < Duration::from_secs(5) {
                        match pull.try_recv() {
                            Ok(_) => {
                                got += 1;
                                last = std::time::Instant::now();
                            }
                            Err(Error::WouldBlock) => std::hint::spin_loop(),
                            Err(e) => panic!("{e}"),
                        }
                    }
                    got
                })
            };
            let mut senders = Vec::new();
            for push in pushes {
                senders.push(tokio::spawn(async move {
                    for i in 0..N {
                        push.send(Message::from(Bytes::copy_from_slice(&i.to_be_bytes())))
                            .await
                            .unwrap();
                    }
                    push
                }));
            }
            let got = consumer.await.unwrap();
            assert_eq!(
                got,
                PEERS * N as usize,
                "{transport}, round {round}: receive stalled"
            );
            for s in senders {
                s.await.unwrap().close().await;
            }
            pull.close().await;
        }
    }
}

/// With `router_handover` the connection whose routing id is taken over is
/// closed (libzmq terminates its pipe): its messages can no longer arrive
/// under the id that now belongs to the new peer.
#[tokio::test]
async fn router_handover_closes_the_old_connection() {
    let router = Socket::new(SocketType::Router, linger0().with_router_handover(true)).unwrap();
    let ep = router.bind("tcp://127.0.0.1:0").await.unwrap();
    // The old peer: a raw DEALER announcing Identity "same".
    let mut old = tokio::net::TcpStream::connect(ep.trim_start_matches("tcp://"))
        .await
        .unwrap();
    // Our greeting, then a READY with an Identity, then one message.
    let mut wire = greeting(b"NULL");
    wire.extend(ready_with(&[
        ("Socket-Type", b"DEALER"),
        ("Identity", b"same"),
    ]));
    wire.extend([0x00, 3]);
    wire.extend_from_slice(b"old");
    old.write_all(&wire).await.unwrap();
    assert_eq!(
        frames(&recv(&router).await),
        vec![b"same".to_vec(), b"old".to_vec()]
    );
    let new = Socket::new(SocketType::Dealer, opts_with_id(b"same")).unwrap();
    new.connect(&ep).await.unwrap();
    send(&new, msg(&[b"new"])).await;
    assert_eq!(
        frames(&recv(&router).await),
        vec![b"same".to_vec(), b"new".to_vec()]
    );
    // The old connection is closed by the router.
    assert!(
        closed_within(&mut old, Duration::from_secs(3)).await,
        "the handed-over connection stayed open"
    );
}

/// XSUB does not filter what its publishers send (libzmq filters in SUB
/// only): a message no subscription matches is still delivered.
#[tokio::test]
async fn xsub_delivers_unfiltered_messages_sub_does_not() {
    for (socket_type, delivered) in [(SocketType::Xsub, true), (SocketType::Sub, false)] {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ep = format!("tcp://{}", listener.local_addr().unwrap());
        let s = Socket::new(socket_type, linger0()).unwrap();
        s.connect(&ep).await.unwrap();
        let (mut publisher, _) = listener.accept().await.unwrap();
        let mut wire = handshake("PUB");
        wire.extend([0x00, 3]);
        wire.extend_from_slice(b"zzz");
        publisher.write_all(&wire).await.unwrap();
        if delivered {
            assert_eq!(frames(&recv(&s).await), vec![b"zzz".to_vec()]);
        } else {
            assert_silent(&s, 300).await;
        }
    }
}

#[tokio::test]
async fn large_and_small_messages_arrive_intact_over_tcp() {
    let pull = Socket::new(SocketType::Pull, hwm(1000, 1000)).unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let push = Socket::new(SocketType::Push, hwm(1000, 1000)).unwrap();
    push.connect(&ep).await.unwrap();
    let body = |n: usize, seed: u8| {
        Bytes::from(
            (0..n)
                .map(|i| (i as u8).wrapping_mul(13) ^ seed)
                .collect::<Vec<u8>>(),
        )
    };
    // Large frames (written without copying, read into a buffer sized once
    // their header arrived) mixed with small ones and multipart messages.
    let mut sent = Vec::new();
    for i in 0..40u8 {
        let m = match i % 4 {
            0 => Message::from(body(300_000 + usize::from(i), i)),
            1 => Message::from(body(10, i)),
            2 => Message::from(vec![body(70_000, i), body(3, i), body(1 << 20, i)]),
            _ => Message::from(body(17_000, i)),
        };
        sent.push(m.clone());
        push.send(m).await.unwrap();
    }
    // Larger than the room made at once for an announced frame (8 MiB): the
    // rest of the buffer grows as the bytes arrive.
    let huge = Message::from(body(9 * 1024 * 1024 + 3, 0xA5));
    sent.push(huge.clone());
    push.send(huge).await.unwrap();
    for want in sent {
        let got = tokio::time::timeout(Duration::from_secs(10), pull.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(got == want, "message differs");
    }
}

/// Many small messages arrive per read while the receive queue holds only a
/// few: the rest wait undecoded in the connection and come out later (with
/// no new bytes to read once the sender is done), all of them, in order.
#[tokio::test]
async fn small_receive_queue_takes_many_messages_per_read_in_order() {
    let (pull, push, _) = pair_with(
        SocketType::Pull,
        hwm(1000, 7),
        SocketType::Push,
        hwm(100_000, 1000),
        "tcp",
    )
    .await;
    let n: u32 = 20_000;
    for i in 0..n {
        push.try_send(Message::from(Bytes::copy_from_slice(&i.to_be_bytes())))
            .unwrap();
    }
    // Let the connection read a lot ahead of the consumer.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for i in 0..n {
        let m = tokio::time::timeout(Duration::from_secs(10), pull.recv())
            .await
            .expect("a message stayed undecoded")
            .unwrap();
        assert_eq!(m.frames()[0], &i.to_be_bytes()[..]);
    }
    assert!(matches!(pull.try_recv(), Err(Error::WouldBlock)));
}

/// 28/REQREP through a broker: REQ -> ROUTER | DEALER -> REP, over TCP. The
/// REP gets the envelope the ROUTER added ([requester id, empty]), hands the
/// application the body alone and puts the envelope back on the reply, which
/// finds its way to the right one of two requesters.
#[tokio::test]
async fn rep_restores_an_envelope_carried_through_a_broker() {
    let frontend = Socket::new(SocketType::Router, linger0()).unwrap();
    let front_ep = frontend.bind("tcp://127.0.0.1:0").await.unwrap();
    let backend = Socket::new(SocketType::Dealer, linger0()).unwrap();
    let back_ep = backend.bind("tcp://127.0.0.1:0").await.unwrap();
    let rep = Socket::new(SocketType::Rep, linger0()).unwrap();
    rep.connect(&back_ep).await.unwrap();
    let reqs = [
        Socket::new(SocketType::Req, linger0()).unwrap(),
        Socket::new(SocketType::Req, linger0()).unwrap(),
    ];
    for r in &reqs {
        r.connect(&front_ep).await.unwrap();
    }
    for (i, r) in reqs.iter().enumerate() {
        send(r, msg(&[format!("question {i}").as_bytes()])).await;
    }
    let broker = async {
        for _ in 0..reqs.len() {
            // [requester id, empty, body] from the frontend, as is to the backend.
            let request = recv(&frontend).await;
            assert_eq!(request.len(), 3, "{:?}", frames(&request));
            send(&backend, request).await;
        }
        for _ in 0..reqs.len() {
            send(&frontend, recv(&backend).await).await;
        }
    };
    let server = async {
        for _ in 0..reqs.len() {
            let request = recv(&rep).await;
            // The application sees the body alone.
            assert_eq!(request.len(), 1, "{:?}", frames(&request));
            let mut answer = b"answer to ".to_vec();
            answer.extend_from_slice(&request.frames()[0]);
            send(&rep, msg(&[&answer])).await;
        }
    };
    tokio::join!(broker, server);
    for (i, r) in reqs.iter().enumerate() {
        assert_eq!(
            frames(&recv(r).await),
            vec![format!("answer to question {i}").into_bytes()]
        );
    }
}

/// Extra READY properties from `Options::properties` go on the wire after
/// Socket-Type and Identity, each as name length, name, 4-byte value length,
/// value (37/ZMTP metadata).
#[tokio::test]
async fn extra_properties_are_sent_in_ready() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ep = format!("tcp://{}", listener.local_addr().unwrap());
    let dealer = Socket::new(
        SocketType::Dealer,
        linger0()
            .with_property("X-Name", Bytes::from_static(b"worker-7"))
            .with_property("X-Empty", Bytes::new()),
    )
    .unwrap();
    dealer.connect(&ep).await.unwrap();
    let (mut peer, _) = tokio::time::timeout(Duration::from_secs(5), listener.accept())
        .await
        .unwrap()
        .unwrap();
    peer.write_all(&handshake("ROUTER")).await.unwrap();
    // Greeting (64 bytes), then READY: a command frame with a short size.
    let mut head = [0u8; 66];
    tokio::time::timeout(Duration::from_secs(5), peer.read_exact(&mut head))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head[64], 0x04, "READY is a short command frame");
    let mut body = vec![0u8; usize::from(head[65])];
    peer.read_exact(&mut body).await.unwrap();
    let mut expected_tail = Vec::new();
    for (name, value) in [(&b"X-Name"[..], &b"worker-7"[..]), (b"X-Empty", b"")] {
        expected_tail.push(name.len() as u8);
        expected_tail.extend_from_slice(name);
        expected_tail.extend_from_slice(&(value.len() as u32).to_be_bytes());
        expected_tail.extend_from_slice(value);
    }
    assert!(body.starts_with(b"\x05READY\x0bSocket-Type\x00\x00\x00\x06DEALER"));
    assert!(
        body.ends_with(&expected_tail),
        "READY body {:?}",
        String::from_utf8_lossy(&body)
    );
    dealer.close().await;
}

/// `recv` is cancel-safe: receive futures dropped while waiting (here by very
/// short timeouts, many of them while messages are arriving) lose nothing and
/// reorder nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_recv_loses_no_message() {
    const N: u32 = 5000;
    let (push, pull, _) = pair(SocketType::Push, SocketType::Pull, "tcp").await;
    let sender = tokio::spawn(async move {
        for i in 0..N {
            send(&push, msg(&[&i.to_be_bytes()])).await;
            if i % 500 == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        push
    });
    let mut next = 0u32;
    let mut cancelled = 0u32;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while next < N {
        assert!(tokio::time::Instant::now() < deadline, "stalled at {next}");
        match tokio::time::timeout(Duration::from_micros(50), pull.recv()).await {
            Ok(m) => {
                assert_eq!(frames(&m.unwrap()), vec![next.to_be_bytes().to_vec()]);
                next += 1;
            }
            Err(_) => cancelled += 1,
        }
    }
    assert!(cancelled > 0, "no receive was ever cancelled");
    drop(sender.await.unwrap());
}

/// The size limits apply to a REQ message with its delimiter and to a REP
/// reply with its envelope: one that fits only without them is refused at
/// `send` (not accepted, then dropped on the way, leaving REQ waiting).
#[tokio::test]
async fn req_and_rep_limits_count_the_envelope() {
    let limited =
        || linger0().with_limits(dafka_zmtp::Limits::default().with_max_message_size(1000));
    let (req, rep, _) = pair_with(
        SocketType::Req,
        limited(),
        SocketType::Rep,
        limited(),
        "tcp",
    )
    .await;
    // One frame of 968 bytes costs 1000 (32 per frame); the delimiter makes it 1032.
    assert!(matches!(
        req.send(msg(&[&[7u8; 968]])).await,
        Err(Error::MessageTooLarge { .. })
    ));
    send(&req, msg(&[&[7u8; 936]])).await;
    assert_eq!(frames(&recv(&rep).await), vec![vec![7u8; 936]]);
    // The reply carries REQ's delimiter back: 968 bytes no longer fit, and the
    // request can still be answered after the refusal.
    assert!(matches!(
        rep.send(msg(&[&[8u8; 968]])).await,
        Err(Error::MessageTooLarge { .. })
    ));
    send(&rep, msg(&[&[8u8; 936]])).await;
    assert_eq!(frames(&recv(&req).await), vec![vec![8u8; 936]]);
}
