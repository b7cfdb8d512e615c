//! The API other crates build on: batch receive and send, closing without
//! waiting, typed errors, construction outside a runtime.

mod common;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use dafka_zmtp::{Error, Message, Options, SendError, Socket, SocketType, TermTimeout};

use common::*;

fn numbered(n: u32) -> Message {
    Message::from(dafka_zmtp::Bytes::from(n.to_be_bytes().to_vec()))
}

fn number(m: &Message) -> u32 {
    u32::from_be_bytes(m.frames()[0][..].try_into().unwrap())
}

#[test]
fn new_outside_a_runtime_is_a_typed_error() {
    match Socket::new(SocketType::Push, Options::default()) {
        Err(Error::NoRuntime) => {}
        other => panic!("expected NoRuntime, got {other:?}"),
    }
    // With a runtime handle given explicitly, any thread may create one.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = Socket::new_in(SocketType::Push, Options::default(), rt.handle().clone()).unwrap();
    assert_eq!(s.socket_type(), SocketType::Push);
    rt.block_on(s.close());
}

#[test]
fn every_error_type_is_a_std_error() {
    fn is_error<E: std::error::Error + Send + Sync + 'static>() {}
    is_error::<Error>();
    is_error::<SendError>();
    is_error::<TermTimeout>();
    let fail = SendError::Fail(Error::Closed);
    assert!(std::error::Error::source(&fail).is_some());
    assert!(fail.to_string().contains("closed"), "{fail}");
    let block = SendError::Block(Message::from(&b"x"[..]));
    assert!(matches!(Error::from(block), Error::WouldBlock));
}

#[tokio::test]
async fn recv_many_drains_every_queued_message_in_one_call() {
    for transport in ["tcp", "ipc", "inproc"] {
        let (pull, push, _) = pair_with(
            SocketType::Pull,
            hwm(0, 0),
            SocketType::Push,
            hwm(0, 0),
            transport,
        )
        .await;
        let mut out = Vec::new();
        assert!(matches!(
            pull.try_recv_many(100, &mut out),
            Err(Error::WouldBlock)
        ));
        for i in 0..5000 {
            push.try_send(numbered(i)).unwrap();
        }
        // Wait for the last one to arrive, then everything is queued.
        let mut got = Vec::new();
        while got.len() < 5000 {
            let n = tokio::time::timeout(Duration::from_secs(10), pull.recv_many(10_000, &mut got))
                .await
                .expect("recv_many timed out")
                .unwrap();
            assert!(n >= 1);
        }
        assert_eq!(got.len(), 5000, "{transport}");
        assert!(got.iter().enumerate().all(|(i, m)| number(m) == i as u32));
        for i in 0..10 {
            push.try_send(numbered(i)).unwrap();
        }
        // `max` is respected; the rest stays queued.
        let mut few = Vec::new();
        while few.is_empty() {
            let _ = pull.recv_many(3, &mut few).await.unwrap();
        }
        assert!(few.len() <= 3);
        let mut rest = Vec::new();
        while few.len() + rest.len() < 10 {
            pull.recv_many(100, &mut rest).await.unwrap();
        }
        assert_eq!(few.len() + rest.len(), 10);
        assert_eq!(pull.recv_many(0, &mut rest).await.unwrap(), 0);
        push.close().await;
        pull.close().await;
        assert!(matches!(
            pull.try_recv_many(1, &mut rest),
            Err(Error::Closed)
        ));
    }
}

/// recv_many waits for the first message like recv.
#[tokio::test]
async fn recv_many_waits_for_the_first_message() {
    let (pull, push, _) = pair(SocketType::Pull, SocketType::Push, "tcp").await;
    let receiver = tokio::spawn(async move {
        let mut out = Vec::new();
        pull.recv_many(100, &mut out).await.unwrap();
        out
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!receiver.is_finished());
    send(&push, msg(&[b"late"])).await;
    let out = tokio::time::timeout(Duration::from_secs(5), receiver)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(frames(&out[0]), vec![b"late".to_vec()]);
}

/// SUB filters and REQ/REP lock-step still apply to batch receive.
#[tokio::test]
async fn recv_many_keeps_the_rules_of_sub_and_req() {
    let (publisher, sub, _) = pair(SocketType::Pub, SocketType::Sub, "inproc").await;
    sub.subscribe(b"a").unwrap();
    // Wait until the subscription has arrived.
    loop {
        publisher.send(msg(&[b"a-probe"])).await.unwrap();
        if tokio::time::timeout(Duration::from_millis(20), sub.recv())
            .await
            .is_ok()
        {
            break;
        }
    }
    while sub.try_recv().is_ok() {}
    for t in [&b"a1"[..], b"b1", b"a2", b"b2", b"a3"] {
        publisher.send(msg(&[t])).await.unwrap();
    }
    let mut got = Vec::new();
    while got.len() < 3 {
        sub.recv_many(100, &mut got).await.unwrap();
    }
    let topics: Vec<_> = got.iter().map(|m| frames(m)[0].clone()).collect();
    assert_eq!(topics, vec![b"a1".to_vec(), b"a2".to_vec(), b"a3".to_vec()]);

    let (rep, req, _) = pair(SocketType::Rep, SocketType::Req, "tcp").await;
    send(&req, msg(&[b"q"])).await;
    let mut requests = Vec::new();
    assert_eq!(rep.recv_many(10, &mut requests).await.unwrap(), 1);
    send(&rep, msg(&[b"r"])).await;
    let mut replies = Vec::new();
    assert_eq!(req.recv_many(10, &mut replies).await.unwrap(), 1);
    assert_eq!(frames(&replies[0]), vec![b"r".to_vec()]);
}

#[tokio::test]
async fn send_many_sends_everything_in_order_waiting_at_the_hwm() {
    for transport in ["tcp", "inproc"] {
        let (pull, push, _) = pair_with(
            SocketType::Pull,
            hwm(10, 10),
            SocketType::Push,
            hwm(10, 10),
            transport,
        )
        .await;
        let mut batch: VecDeque<Message> = (0..3000).map(numbered).collect();
        let consumer = tokio::spawn(async move {
            let mut got = Vec::new();
            while got.len() < 3000 {
                pull.recv_many(64, &mut got).await.unwrap();
            }
            got
        });
        tokio::time::timeout(Duration::from_secs(20), push.send_many(&mut batch))
            .await
            .expect("send_many timed out")
            .unwrap();
        assert!(batch.is_empty());
        let got = consumer.await.unwrap();
        assert!(
            got.iter().enumerate().all(|(i, m)| number(m) == i as u32),
            "{transport}: out of order"
        );
    }
}

#[tokio::test]
async fn try_send_many_stops_at_the_hwm_and_keeps_the_rest() {
    let push = Socket::new(SocketType::Push, hwm(4, 4)).unwrap();
    push.connect(&dead_endpoint().await).await.unwrap();
    let mut batch: VecDeque<Message> = (0..10).map(numbered).collect();
    assert_eq!(push.try_send_many(&mut batch).unwrap(), 4);
    assert_eq!(batch.len(), 6);
    assert_eq!(number(&batch[0]), 4);
    assert!(matches!(
        push.try_send_many(&mut batch),
        Err(Error::WouldBlock)
    ));
    assert_eq!(batch.len(), 6);
    // A refused message is dropped with its error; the rest stays.
    let small = Socket::new(
        SocketType::Push,
        linger0().with_limits(dafka_zmtp::Limits::new(8, 1000)),
    )
    .unwrap();
    small.connect(&dead_endpoint().await).await.unwrap();
    let mut batch: VecDeque<Message> = [msg(&[b"ok"]), msg(&[&[0u8; 9]]), msg(&[b"after"])].into();
    assert!(matches!(
        small.try_send_many(&mut batch),
        Err(Error::MessageTooLarge { .. })
    ));
    assert_eq!(batch.len(), 1);
    assert_eq!(frames(&batch[0]), vec![b"after".to_vec()]);
    // Other socket types go message by message.
    let pair_socket = Socket::new(SocketType::Pair, hwm(2, 2)).unwrap();
    pair_socket.connect(&dead_endpoint().await).await.unwrap();
    let mut batch: VecDeque<Message> = (0..5).map(numbered).collect();
    assert_eq!(pair_socket.try_send_many(&mut batch).unwrap(), 2);
    assert_eq!(batch.len(), 3);
}

/// A cancelled send_many leaves the unsent messages with the caller.
#[tokio::test]
async fn cancelled_send_many_keeps_the_unsent_messages() {
    let push = Socket::new(SocketType::Push, hwm(3, 3)).unwrap();
    push.connect(&dead_endpoint().await).await.unwrap();
    let mut batch: VecDeque<Message> = (0..10).map(numbered).collect();
    let r = tokio::time::timeout(Duration::from_millis(50), push.send_many(&mut batch)).await;
    assert!(r.is_err(), "send_many cannot finish: no peer");
    assert_eq!(batch.len(), 7);
    assert_eq!(number(&batch[0]), 3);
}

/// With the default linger (wait forever), `close` waits for an unreachable
/// peer, `close_in_background` does not.
#[tokio::test]
async fn close_in_background_returns_at_once_with_an_unreachable_peer() {
    let push = Socket::new(SocketType::Push, Options::default()).unwrap();
    push.connect("tcp://127.0.0.1:1").await.unwrap();
    send(&push, msg(&[b"queued"])).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), push.close())
            .await
            .is_err(),
        "close with the default linger waits for the queued message"
    );
    let push = Socket::new(SocketType::Push, Options::default()).unwrap();
    push.connect("tcp://127.0.0.1:1").await.unwrap();
    send(&push, msg(&[b"queued"])).await;
    let start = Instant::now();
    push.close_in_background();
    assert!(start.elapsed() < Duration::from_millis(100));
    assert!(push.is_closed());
    assert!(matches!(push.try_send(msg(&[b"x"])), Err(Error::Closed)));
    // Idempotent. (The flush goes on until the test's runtime ends.)
    push.close_in_background();
    assert!(start.elapsed() < Duration::from_millis(100));
}

/// A PUSH with `linger`, connected to an endpoint nobody listens on yet
/// (retrying every 20 ms), with messages `0..n` queued.
async fn push_to_nobody(linger: Duration, n: u32) -> (Socket, String) {
    let ep = dead_endpoint().await;
    let push = Socket::new(
        SocketType::Push,
        Options::default()
            .with_linger(Some(linger))
            .with_reconnect_ivl(Duration::from_millis(20)),
    )
    .unwrap();
    push.connect(&ep).await.unwrap();
    for i in 0..n {
        send(&push, numbered(i)).await;
    }
    (push, ep)
}

/// A peer that appears within the linger still gets the queued messages.
#[tokio::test]
async fn background_flush_delivers_to_a_peer_that_appears_later() {
    let (push, ep) = push_to_nobody(Duration::from_secs(10), 3).await;
    let start = Instant::now();
    push.close_in_background();
    assert!(start.elapsed() < Duration::from_millis(100));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    pull.bind(&ep).await.unwrap();
    for i in 0..3 {
        assert_eq!(number(&recv(&pull).await), i);
    }
}

/// A finite linger bounds the background flush too (the peer comes too late).
#[tokio::test]
async fn background_flush_ends_at_the_linger() {
    let (push, ep) = push_to_nobody(Duration::from_millis(100), 1).await;
    push.close_in_background();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    pull.bind(&ep).await.unwrap();
    assert_silent(&pull, 300).await;
}
