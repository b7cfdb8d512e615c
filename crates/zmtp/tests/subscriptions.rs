//! Subscriptions end to end: forwarding through an XPUB/XSUB proxy, CANCEL
//! applied by the publisher, XPUB de-duplication (and `xpub_verbose`), and
//! XSUB resubscribing after its publisher restarts.
//!
//! Subscriptions travel asynchronously. Instead of sleeping, the tests wait
//! for them by retrying publishes until one arrives, and prove that a cancel
//! took effect with a *fence*: a new subscription sent after the cancel on
//! the same connection. Once a message on the fence topic arrives, the
//! publisher has processed the cancel too (a connection delivers in order).

mod common;

use std::time::Duration;

use common::*;
use dafka_zmtp::{Message, Options, Socket, SocketType};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// Upper bound for every wait: a broken feature fails, it never hangs.
const WAIT: Duration = Duration::from_secs(10);
/// How long one probe waits before it is published again.
const PROBE: Duration = Duration::from_millis(30);

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

fn first(m: &Message) -> Vec<u8> {
    m.frames()[0].to_vec()
}

fn with_suffix(topic: &[u8], suffix: &[u8]) -> Vec<u8> {
    [topic, suffix].concat()
}

fn fast_reconnect() -> Options {
    linger0().with_reconnect_ivl(Duration::from_millis(20))
}

/// Publish `topic-probe` until `s` receives one (the subscription has
/// reached the publisher), then a `topic-sync` marker, and drain `s` up to
/// the marker so that no stray probe is left.
async fn sync_socket(publisher: &Socket, s: &Socket, topic: &[u8]) {
    let probe = with_suffix(topic, b"-probe");
    within("subscription to reach the publisher", async {
        loop {
            send(publisher, msg(&[&probe])).await;
            if let Ok(r) = tokio::time::timeout(PROBE, s.recv()).await
                && first(&r.expect("recv failed")) == probe
            {
                return;
            }
        }
    })
    .await;
    let marker = with_suffix(topic, b"-sync");
    send(publisher, msg(&[&marker])).await;
    while first(&recv(s).await) != marker {}
}

/// Next topic reported on a channel.
async fn next(rx: &mut UnboundedReceiver<Vec<u8>>) -> Vec<u8> {
    within("channel", rx.recv()).await.expect("forwarder ended")
}

/// Topics from `rx` before `marker` (which is consumed).
async fn until_marker(rx: &mut UnboundedReceiver<Vec<u8>>, marker: &[u8]) -> Vec<Vec<u8>> {
    let mut seen = Vec::new();
    loop {
        let t = next(rx).await;
        if t == marker {
            return seen;
        }
        seen.push(t);
    }
}

/// `sync_socket` for the messages the proxy's XSUB reports on `mid`.
async fn sync_channel(publisher: &Socket, mid: &mut UnboundedReceiver<Vec<u8>>, topic: &[u8]) {
    let probe = with_suffix(topic, b"-probe");
    within("subscription to reach the publisher", async {
        loop {
            send(publisher, msg(&[&probe])).await;
            if let Ok(t) = tokio::time::timeout(PROBE, mid.recv()).await
                && t.expect("forwarder ended") == probe
            {
                return;
            }
        }
    })
    .await;
    let marker = with_suffix(topic, b"-sync");
    send(publisher, msg(&[&marker])).await;
    until_marker(mid, &marker).await;
}

/// SUB -> XPUB (bound) | proxy | XSUB -> PUB (bound), all over tcp. The
/// subscription reaches the PUB through the proxy, the PUB filters, and the
/// cancel (from `unsubscribe`, or from the XPUB when the SUB goes away)
/// travels the same way and stops the PUB sending the topic.
async fn forwarding_chain(close_sub: bool) {
    let publisher = Socket::new(SocketType::Pub, linger0()).unwrap();
    let back = publisher.bind("tcp://127.0.0.1:0").await.unwrap();
    let xsub = Socket::new(SocketType::Xsub, linger0()).unwrap();
    xsub.connect(&back).await.unwrap();
    let xpub = Socket::new(SocketType::Xpub, linger0()).unwrap();
    let front = xpub.bind("tcp://127.0.0.1:0").await.unwrap();
    let sub = Socket::new(SocketType::Sub, linger0()).unwrap();
    sub.connect(&front).await.unwrap();

    // The proxy reports what it forwarded: subscription messages going up
    // (after handing them to the XSUB), data arriving at the XSUB.
    let (up_tx, mut up) = unbounded_channel();
    let (mid_tx, mut mid) = unbounded_channel();
    let proxy = tokio::spawn({
        let (xpub, xsub) = (xpub.clone(), xsub.clone());
        async move {
            loop {
                tokio::select! {
                    r = xpub.recv() => {
                        let Ok(m) = r else { return };
                        let t = first(&m);
                        if xsub.send(m).await.is_err() {
                            return;
                        }
                        let _ = up_tx.send(t);
                    }
                    r = xsub.recv() => {
                        let Ok(m) = r else { return };
                        let _ = mid_tx.send(first(&m));
                        if xpub.send(m).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    });

    sub.subscribe(b"a").unwrap();
    sync_socket(&publisher, &sub, b"a").await;
    // The XSUB saw the same probes; drain them up to the marker.
    until_marker(&mut mid, b"a-sync").await;
    assert_eq!(next(&mut up).await, b"\x01a".to_vec());

    send(&publisher, msg(&[b"b1"])).await;
    send(&publisher, msg(&[b"a1"])).await;
    assert_eq!(first(&recv(&sub).await), b"a1".to_vec());
    // The XSUB does not filter: b1 never left the PUB.
    assert_eq!(next(&mut mid).await, b"a1".to_vec());

    if close_sub {
        sub.close().await;
    } else {
        sub.unsubscribe(b"a").unwrap();
    }
    assert_eq!(
        next(&mut up).await,
        b"\x00a".to_vec(),
        "the XPUB passes the cancel up"
    );
    // Fence: queued on the XSUB -> PUB connection behind the cancel.
    send(&xsub, msg(&[b"\x01z"])).await;
    sync_channel(&publisher, &mut mid, b"z").await;
    for i in 0..5u8 {
        send(&publisher, msg(&[&[b'a', b'-', b'0' + i]])).await;
    }
    send(&publisher, msg(&[b"z-end"])).await;
    let seen = until_marker(&mut mid, b"z-end").await;
    assert!(
        seen.iter().all(|t| !t.starts_with(b"a")),
        "the PUB still sends the cancelled topic: {seen:?}"
    );
    if !close_sub {
        assert_silent(&sub, 50).await;
    }
    proxy.abort();
}

#[tokio::test]
async fn chain_forwards_subscription_and_cancel_on_unsubscribe() {
    forwarding_chain(false).await;
}

#[tokio::test]
async fn chain_forwards_cancel_when_subscriber_closes() {
    forwarding_chain(true).await;
}

/// An XSUB does not filter what it receives, so only the PUB applying the
/// CANCEL (sent as a `0x00` message) can stop the cancelled topic.
#[tokio::test]
async fn pub_applies_cancel_from_xsub() {
    let (publisher, xsub, _) = pair_with(
        SocketType::Pub,
        linger0(),
        SocketType::Xsub,
        linger0(),
        "tcp",
    )
    .await;
    send(&xsub, msg(&[b"\x01x"])).await;
    send(&xsub, msg(&[b"\x01m"])).await;
    sync_socket(&publisher, &xsub, b"x").await;
    sync_socket(&publisher, &xsub, b"m").await;
    send(&publisher, msg(&[b"x1"])).await;
    assert_eq!(first(&recv(&xsub).await), b"x1".to_vec());

    send(&xsub, msg(&[b"\x00x"])).await;
    // Fence: once an `f` message arrives, the PUB has seen the cancel.
    send(&xsub, msg(&[b"\x01f"])).await;
    sync_socket(&publisher, &xsub, b"f").await;
    for i in 0..5u8 {
        send(&publisher, msg(&[&[b'x', b'-', b'0' + i]])).await;
    }
    // Still subscribed to `m`: the connection is alive and served.
    send(&publisher, msg(&[b"m-end"])).await;
    let mut seen = Vec::new();
    loop {
        let t = first(&recv(&xsub).await);
        if t == b"m-end" {
            break;
        }
        seen.push(t);
    }
    assert!(
        seen.is_empty(),
        "messages after the cancel and before m-end: {seen:?}"
    );
    assert_silent(&xsub, 50).await;
}

/// Subscription messages the XPUB application receives until all of
/// `wanted` have been seen (in any order).
async fn xpub_until(xpub: &Socket, wanted: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut seen: Vec<Vec<u8>> = Vec::new();
    while !wanted.iter().all(|w| seen.iter().any(|s| s == w)) {
        seen.push(first(&recv(xpub).await));
    }
    seen
}

fn count(seen: &[Vec<u8>], what: &[u8]) -> usize {
    seen.iter().filter(|s| s[..] == *what).count()
}

/// Two SUBs subscribe to the same prefix. libzmq semantics: the XPUB
/// application sees the subscription once (every time with `xpub_verbose`),
/// and the cancel only when the last subscriber is gone (verbose or not).
async fn xpub_subscription_messages(verbose: bool) {
    let xpub = Socket::new(SocketType::Xpub, linger0().with_xpub_verbose(verbose)).unwrap();
    let ep = xpub.bind("tcp://127.0.0.1:0").await.unwrap();
    let sub1 = Socket::new(SocketType::Sub, linger0()).unwrap();
    let sub2 = Socket::new(SocketType::Sub, linger0()).unwrap();
    // A first subscription each shows the connection is up: later ones are
    // then sent in order (on connect they go out in no particular order).
    for (s, hello) in [(&sub1, &b"hello1"[..]), (&sub2, &b"hello2"[..])] {
        s.connect(&ep).await.unwrap();
        s.subscribe(hello).unwrap();
        xpub_until(&xpub, &[&with_suffix(b"\x01", hello)]).await;
    }

    sub1.subscribe(b"prefix").unwrap();
    sub1.subscribe(b"fence1").unwrap();
    sub2.subscribe(b"prefix").unwrap();
    sub2.subscribe(b"fence2").unwrap();
    let seen = xpub_until(&xpub, &[b"\x01fence1", b"\x01fence2"]).await;
    assert_eq!(
        count(&seen, b"\x01prefix"),
        if verbose { 2 } else { 1 },
        "verbose={verbose}: {seen:?}"
    );

    // sub2 still wants the prefix: no cancel yet.
    sub1.unsubscribe(b"prefix").unwrap();
    sub1.subscribe(b"fence3").unwrap();
    let seen = xpub_until(&xpub, &[b"\x01fence3"]).await;
    assert_eq!(
        count(&seen, b"\x00prefix"),
        0,
        "verbose={verbose}: {seen:?}"
    );
    send(&xpub, msg(&[b"prefix-data"])).await;
    assert_eq!(first(&recv(&sub2).await), b"prefix-data".to_vec());

    // The last subscriber leaves: now the cancel is passed up.
    sub2.close().await;
    let seen = xpub_until(&xpub, &[b"\x00prefix"]).await;
    assert_eq!(
        count(&seen, b"\x00prefix"),
        1,
        "verbose={verbose}: {seen:?}"
    );
    assert_eq!(count(&seen, b"\x00fence1"), 0, "sub1 is still there");
}

#[tokio::test]
async fn xpub_passes_each_subscription_once_and_cancel_on_last() {
    xpub_subscription_messages(false).await;
}

#[tokio::test]
async fn xpub_verbose_passes_every_subscription_but_cancel_on_last() {
    xpub_subscription_messages(true).await;
}

/// The XSUB remembers its subscriptions and sends them again on the new
/// connection when its publisher restarts on the same port.
#[tokio::test]
async fn xsub_resubscribes_after_publisher_restart() {
    let publisher = Socket::new(SocketType::Pub, linger0()).unwrap();
    let ep = publisher.bind("tcp://127.0.0.1:0").await.unwrap();
    let xsub = Socket::new(SocketType::Xsub, fast_reconnect()).unwrap();
    xsub.connect(&ep).await.unwrap();
    send(&xsub, msg(&[b"\x01t"])).await;
    sync_socket(&publisher, &xsub, b"t").await;
    publisher.close().await;

    let publisher = Socket::new(SocketType::Pub, linger0()).unwrap();
    within("rebinding the port", async {
        // The port may linger briefly in the kernel.
        while publisher.bind(&ep).await.is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // No new subscribe: the XSUB's own resend must make this arrive.
    sync_socket(&publisher, &xsub, b"t-new").await;
    send(&publisher, msg(&[b"u"])).await;
    send(&publisher, msg(&[b"t1"])).await;
    assert_eq!(first(&recv(&xsub).await), b"t1".to_vec());
}

/// `try_send_many` on a PUB hands each subscriber, in order, exactly the messages its
/// subscriptions match, and drops (never waits) at a subscriber's HWM.
#[tokio::test]
async fn pub_send_many_filters_per_subscriber_in_order_and_drops_at_the_hwm() {
    let publisher = Socket::new(SocketType::Pub, linger0()).unwrap();
    let endpoint = publisher.bind("tcp://127.0.0.1:0").await.unwrap();
    let a = Socket::new(SocketType::Sub, linger0()).unwrap();
    let b = Socket::new(SocketType::Sub, linger0()).unwrap();
    for (s, topic) in [(&a, &b"a"[..]), (&b, &b"b"[..])] {
        s.subscribe(topic).unwrap();
        s.connect(&endpoint).await.unwrap();
        sync_socket(&publisher, s, topic).await;
    }
    let mut batch: std::collections::VecDeque<Message> = (0..100u32)
        .map(|i| {
            let topic = if i % 3 == 0 { "b" } else { "a" };
            msg(&[format!("{topic}{i:03}").as_bytes()])
        })
        .collect();
    assert_eq!(publisher.try_send_many(&mut batch).unwrap(), 100);
    assert!(batch.is_empty());
    for (s, topic) in [(&a, 'a'), (&b, 'b')] {
        let expected: Vec<Vec<u8>> = (0..100u32)
            .filter(|i| (i % 3 == 0) == (topic == 'b'))
            .map(|i| format!("{topic}{i:03}").into_bytes())
            .collect();
        let mut got = Vec::new();
        while got.len() < expected.len() {
            got.push(first(&within("batch", s.recv()).await.unwrap()));
        }
        assert_eq!(got, expected);
    }
    // A subscriber that does not read: the batch past its HWM is dropped, the call does not
    // wait, and what went through is the batch's first messages.
    let slow_pub = Socket::new(SocketType::Pub, hwm(10, 10)).unwrap();
    let slow_ep = slow_pub.bind("tcp://127.0.0.1:0").await.unwrap();
    let slow = Socket::new(SocketType::Sub, hwm(10, 10)).unwrap();
    slow.subscribe(b"s").unwrap();
    slow.connect(&slow_ep).await.unwrap();
    sync_socket(&slow_pub, &slow, b"s").await;
    let mut big: std::collections::VecDeque<Message> = (0..5000u32)
        .map(|i| msg(&[format!("s{i:05}").as_bytes(), &[0u8; 1024]]))
        .collect();
    assert_eq!(slow_pub.try_send_many(&mut big).unwrap(), 5000);
    let mut got = Vec::new();
    while let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(300), slow.recv()).await {
        got.push(first(&m));
    }
    assert!(!got.is_empty() && got.len() < 5000, "got {}", got.len());
    let expected: Vec<Vec<u8>> = (0..got.len() as u32)
        .map(|i| format!("s{i:05}").into_bytes())
        .collect();
    assert_eq!(got, expected, "an in-order prefix");
}
