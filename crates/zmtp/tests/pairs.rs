//! Every compatible socket pair over tcp, ipc and inproc.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use dafka_zmtp::{Error, Message, Options, Socket, SocketType};

/// Publish probes until `sub` receives one, then drain stray probes. Needed
/// because subscriptions reach the publisher asynchronously.
async fn sync_pubsub(publisher: &Socket, sub: &Socket, topic: &[u8]) {
    let mut probe = topic.to_vec();
    probe.extend_from_slice(b"-probe");
    loop {
        publisher.send(msg(&[&probe])).await.unwrap();
        if tokio::time::timeout(Duration::from_millis(30), sub.recv())
            .await
            .is_ok()
        {
            break;
        }
    }
    let mut marker = topic.to_vec();
    marker.extend_from_slice(b"-marker");
    publisher.send(msg(&[&marker])).await.unwrap();
    loop {
        let m = recv(sub).await;
        if m.frames()[0] == marker[..] {
            break;
        }
    }
}

async fn req_rep(t: &str) {
    let (rep, req, _) = pair(SocketType::Rep, SocketType::Req, t).await;
    for i in 0..5u8 {
        send(&req, msg(&[b"hello", &[i], b""])).await;
        let got = recv(&rep).await;
        assert_eq!(frames(&got), vec![b"hello".to_vec(), vec![i], vec![]]);
        send(&rep, msg(&[b"world", &[i]])).await;
        assert_eq!(frames(&recv(&req).await), vec![b"world".to_vec(), vec![i]]);
    }
    // Lock-step misuse is a caller error.
    assert!(matches!(req.try_recv(), Err(Error::InvalidState(_))));
    assert!(matches!(
        rep.try_send(msg(&[b"x"])),
        Err(Error::InvalidState(_))
    ));
    req.close().await;
    rep.close().await;
}

async fn req_router(t: &str) {
    let (router, req, _) = pair(SocketType::Router, SocketType::Req, t).await;
    send(&req, msg(&[b"q"])).await;
    let got = recv(&router).await;
    assert_eq!(got.len(), 3);
    let id = got.frames()[0].clone();
    assert_eq!(id.len(), 5, "generated routing id is 0x00 + u32");
    assert_eq!(id[0], 0x00);
    assert!(got.frames()[1].is_empty());
    assert_eq!(got.frames()[2], &b"q"[..]);
    let mut reply = Message::new();
    reply.push(id);
    reply.push(Bytes::new());
    reply.push(Bytes::from_static(b"a"));
    send(&router, reply).await;
    assert_eq!(frames(&recv(&req).await), vec![b"a".to_vec()]);
}

async fn dealer_rep(t: &str) {
    let (rep, dealer, _) = pair(SocketType::Rep, SocketType::Dealer, t).await;
    send(&dealer, msg(&[b"", b"req", b"2"])).await;
    assert_eq!(
        frames(&recv(&rep).await),
        vec![b"req".to_vec(), b"2".to_vec()]
    );
    send(&rep, msg(&[b"rep"])).await;
    assert_eq!(frames(&recv(&dealer).await), vec![vec![], b"rep".to_vec()]);
}

async fn dealer_router(t: &str) {
    let (router, dealer, _) = pair_with(
        SocketType::Router,
        Options::default(),
        SocketType::Dealer,
        opts_with_id(b"D1"),
        t,
    )
    .await;
    send(&dealer, msg(&[b"x", b"", b"y"])).await;
    assert_eq!(
        frames(&recv(&router).await),
        vec![b"D1".to_vec(), b"x".to_vec(), vec![], b"y".to_vec()]
    );
    send(&router, msg(&[b"D1", b"back"])).await;
    assert_eq!(frames(&recv(&dealer).await), vec![b"back".to_vec()]);
}

async fn router_router(t: &str) {
    let server_opts = Options::default()
        .with_routing_id(Some(Bytes::from_static(b"SRV")))
        .with_router_mandatory(true);
    let client_opts = Options::default()
        .with_routing_id(Some(Bytes::from_static(b"CLI")))
        .with_router_mandatory(true);
    let (server, client, _) = pair_with(
        SocketType::Router,
        server_opts,
        SocketType::Router,
        client_opts,
        t,
    )
    .await;
    // The client can route to the server once the handshake told it the id.
    loop {
        match client.try_send(msg(&[b"SRV", b"hi"])) {
            Ok(()) => break,
            Err(Error::HostUnreachable(_)) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(
        frames(&recv(&server).await),
        vec![b"CLI".to_vec(), b"hi".to_vec()]
    );
    send(&server, msg(&[b"CLI", b"yo"])).await;
    assert_eq!(
        frames(&recv(&client).await),
        vec![b"SRV".to_vec(), b"yo".to_vec()]
    );
}

async fn pub_sub(t: &str) {
    let (publisher, sub, _) = pair(SocketType::Pub, SocketType::Sub, t).await;
    sub.subscribe(b"a").unwrap();
    sync_pubsub(&publisher, &sub, b"a").await;
    send(&publisher, msg(&[b"b-skip"])).await;
    send(&publisher, msg(&[b"a1", b"more"])).await;
    send(&publisher, msg(&[b"xa"])).await;
    send(&publisher, msg(&[b"a2"])).await;
    assert_eq!(
        frames(&recv(&sub).await),
        vec![b"a1".to_vec(), b"more".to_vec()]
    );
    assert_eq!(frames(&recv(&sub).await), vec![b"a2".to_vec()]);
    // Cancel: messages stop arriving (filtered at both ends).
    sub.unsubscribe(b"a").unwrap();
    sub.subscribe(b"z").unwrap();
    sync_pubsub(&publisher, &sub, b"z").await;
    send(&publisher, msg(&[b"a3"])).await;
    send(&publisher, msg(&[b"z1"])).await;
    assert_eq!(frames(&recv(&sub).await), vec![b"z1".to_vec()]);
    assert_silent(&sub, 50).await;
}

async fn xpub_xsub(t: &str) {
    let (xpub, xsub, _) = pair(SocketType::Xpub, SocketType::Xsub, t).await;
    send(&xsub, msg(&[b"\x01top"])).await;
    assert_eq!(frames(&recv(&xpub).await), vec![b"\x01top".to_vec()]);
    send(&xpub, msg(&[b"topic", b"x"])).await;
    send(&xpub, msg(&[b"other"])).await;
    send(&xpub, msg(&[b"top2"])).await;
    assert_eq!(
        frames(&recv(&xsub).await),
        vec![b"topic".to_vec(), b"x".to_vec()]
    );
    assert_eq!(frames(&recv(&xsub).await), vec![b"top2".to_vec()]);
    // Non-subscription messages travel upstream to the XPUB application.
    send(&xsub, msg(&[b"upstream"])).await;
    assert_eq!(frames(&recv(&xpub).await), vec![b"upstream".to_vec()]);
    xsub.unsubscribe(b"top").unwrap();
    assert_eq!(frames(&recv(&xpub).await), vec![b"\x00top".to_vec()]);
}

async fn pub_xsub(t: &str) {
    let (publisher, xsub, _) = pair(SocketType::Pub, SocketType::Xsub, t).await;
    xsub.subscribe(b"k").unwrap();
    sync_pubsub(&publisher, &xsub, b"k").await;
    send(&publisher, msg(&[b"j"])).await;
    send(&publisher, msg(&[b"k1"])).await;
    assert_eq!(frames(&recv(&xsub).await), vec![b"k1".to_vec()]);
}

async fn xpub_sub(t: &str) {
    let (xpub, sub, _) = pair(SocketType::Xpub, SocketType::Sub, t).await;
    sub.subscribe(b"").unwrap();
    assert_eq!(frames(&recv(&xpub).await), vec![b"\x01".to_vec()]);
    send(&xpub, msg(&[b"anything"])).await;
    assert_eq!(frames(&recv(&sub).await), vec![b"anything".to_vec()]);
    sub.unsubscribe(b"").unwrap();
    assert_eq!(frames(&recv(&xpub).await), vec![b"\x00".to_vec()]);
}

async fn push_pull(t: &str) {
    let (pull, push, _) = pair(SocketType::Pull, SocketType::Push, t).await;
    const N: u32 = 20_000;
    let sender = tokio::spawn(async move {
        for i in 0..N {
            push.send(Message::from(Bytes::copy_from_slice(&i.to_be_bytes())))
                .await
                .unwrap();
        }
        push
    });
    for i in 0..N {
        let m = recv(&pull).await;
        assert_eq!(m.frames()[0], &i.to_be_bytes()[..]);
    }
    let push = sender.await.unwrap();
    push.close().await;
}

async fn pair_pair(t: &str) {
    let (a, b, _) = pair(SocketType::Pair, SocketType::Pair, t).await;
    send(&b, msg(&[b"1"])).await;
    assert_eq!(frames(&recv(&a).await), vec![b"1".to_vec()]);
    send(&a, msg(&[b"2", b""])).await;
    assert_eq!(frames(&recv(&b).await), vec![b"2".to_vec(), vec![]]);
}

async fn large_and_empty_frames(t: &str) {
    let (pull, push, _) = pair(SocketType::Pull, SocketType::Push, t).await;
    let big = Bytes::from(vec![0xa5u8; 300 * 1024]);
    let mut m = Message::new();
    m.push(Bytes::new());
    m.push(big.clone());
    m.push(Bytes::new());
    send(&push, m.clone()).await;
    send(&push, msg(&[b""])).await;
    assert_eq!(recv(&pull).await, m);
    assert_eq!(frames(&recv(&pull).await), vec![Vec::<u8>::new()]);
}

macro_rules! suite {
    ($name:ident, $t:expr) => {
        suite!($name, $t, tokio::test);
    };
    ($name:ident, $t:expr, $($attr:tt)+) => {
        mod $name {
            #[$($attr)+]
            async fn req_rep() {
                super::req_rep($t).await
            }
            #[$($attr)+]
            async fn req_router() {
                super::req_router($t).await
            }
            #[$($attr)+]
            async fn dealer_rep() {
                super::dealer_rep($t).await
            }
            #[$($attr)+]
            async fn dealer_router() {
                super::dealer_router($t).await
            }
            #[$($attr)+]
            async fn router_router() {
                super::router_router($t).await
            }
            #[$($attr)+]
            async fn pub_sub() {
                super::pub_sub($t).await
            }
            #[$($attr)+]
            async fn xpub_xsub() {
                super::xpub_xsub($t).await
            }
            #[$($attr)+]
            async fn pub_xsub() {
                super::pub_xsub($t).await
            }
            #[$($attr)+]
            async fn xpub_sub() {
                super::xpub_sub($t).await
            }
            #[$($attr)+]
            async fn push_pull() {
                super::push_pull($t).await
            }
            #[$($attr)+]
            async fn pair_pair() {
                super::pair_pair($t).await
            }
            #[$($attr)+]
            async fn large_and_empty_frames() {
                super::large_and_empty_frames($t).await
            }
        }
    };
}

suite!(tcp, "tcp");
suite!(ipc, "ipc");
suite!(inproc, "inproc");
suite!(
    tcp_multi_thread,
    "tcp",
    tokio::test(flavor = "multi_thread", worker_threads = 2)
);
suite!(
    inproc_multi_thread,
    "inproc",
    tokio::test(flavor = "multi_thread", worker_threads = 2)
);

#[tokio::test]
async fn tcp_ipv6_loopback() {
    let pull = Socket::new(SocketType::Pull, Options::default()).unwrap();
    // The kernel lists its IPv6 addresses here; `::1` on `lo` is the loopback.
    let has_v6_loopback = std::fs::read_to_string("/proc/net/if_inet6").is_ok_and(|t| {
        t.lines()
            .any(|l| l.starts_with("00000000000000000000000000000001"))
    });
    let ep = match pull.bind("tcp://[::1]:0").await {
        Ok(ep) => ep,
        // No IPv6 loopback on this host: nothing to test.
        Err(Error::Io(e)) if !has_v6_loopback => {
            eprintln!("tcp_ipv6_loopback skipped: no ::1 on this host ({e})");
            return;
        }
        Err(e) => panic!("binding [::1] failed although the host has it: {e}"),
    };
    assert!(ep.starts_with("tcp://[::1]:"), "{ep}");
    let push = Socket::new(SocketType::Push, Options::default()).unwrap();
    push.connect(&ep).await.unwrap();
    send(&push, msg(&[b"v6"])).await;
    assert_eq!(frames(&recv(&pull).await), vec![b"v6".to_vec()]);
}
