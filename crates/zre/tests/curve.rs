//! ZRE in CURVE mode (43/ZRE version 3) over real loopback sockets: two CURVE nodes find each
//! other and talk; a plaintext node, and a CURVE node whose key is not on their allow-list,
//! share the beacon port with them and see nothing of them, nor they of it. A plaintext
//! DEALER connecting straight to a CURVE mailbox fails its handshake.

use std::time::Duration;

use bytes::Bytes;
use dafka_zmtp::{CurveKeyPair, SocketEvent, SocketType};
use dafka_zre::{Error, Event, ZreNode};
use dafka_zre_proto::{Body, Hello, Message, ShortStr, Uuid};

mod common;
use common::{opts, port};

async fn next(node: &mut ZreNode, within: Duration) -> Option<Event> {
    tokio::time::timeout(within, node.recv())
        .await
        .ok()
        .flatten()
}

/// Waits up to 10 s for an event `pick` accepts; the skipped ones are returned too.
async fn wait_for(node: &mut ZreNode, pick: impl Fn(&Event) -> bool) -> (Event, Vec<Event>) {
    let mut skipped = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let e = next(node, left)
            .await
            .expect("event did not come within 10 s");
        if pick(&e) {
            return (e, skipped);
        }
        skipped.push(e);
    }
}

/// Every event within `d`.
async fn drain(node: &mut ZreNode, d: Duration) -> Vec<Event> {
    let end = tokio::time::Instant::now() + d;
    let mut v = Vec::new();
    while let Some(e) = next(
        node,
        end.saturating_duration_since(tokio::time::Instant::now()),
    )
    .await
    {
        v.push(e);
    }
    v
}

/// A HELLO (sequence 1) from `tcp://127.0.0.1:1` named `name`, with these headers.
fn hello(name: &str, headers: Vec<(&str, String)>) -> Message {
    Message {
        sequence: 1,
        body: Body::Hello(Hello {
            endpoint: ShortStr::new("tcp://127.0.0.1:1").unwrap(),
            groups: vec![],
            status: 0,
            name: ShortStr::new(name).unwrap(),
            headers: headers
                .into_iter()
                .map(|(k, v)| (ShortStr::new(k).unwrap(), v))
                .collect(),
        }),
    }
}

fn enters(events: &[Event]) -> Vec<Uuid> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Enter { peer, .. } => Some(*peer),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curve_nodes_talk_and_outsiders_see_nothing() {
    let port = port();
    let (ka, kb) = (CurveKeyPair::generate(), CurveKeyPair::generate());
    let allowed = [*ka.public(), *kb.public()];
    let curve = |name, k: &CurveKeyPair| {
        opts(port, name)
            .with_curve(k.clone())
            .with_curve_allowed(allowed)
    };
    let mut a = ZreNode::start(curve("a", &ka)).await.unwrap();
    let mut b = ZreNode::start(curve("b", &kb)).await.unwrap();
    // Outsiders on the same beacon port: plaintext, and CURVE with a key nobody allowed
    // (it allows everyone itself).
    let mut plain = ZreNode::start(opts(port, "plain")).await.unwrap();
    let mut stranger = ZreNode::start(opts(port, "stranger").with_curve(CurveKeyPair::generate()))
        .await
        .unwrap();
    a.join("G").await.unwrap();
    b.join("G").await.unwrap();
    plain.join("G").await.unwrap();
    stranger.join("G").await.unwrap();

    let (e, mut seen_a) = wait_for(&mut a, |e| matches!(e, Event::Enter { .. })).await;
    let Event::Enter { peer, headers, .. } = e else {
        unreachable!()
    };
    assert_eq!(peer, b.uuid());
    // zyre's header: the Z85 of b's public key.
    let z85 = dafka_zmtp::z85_encode(kb.public());
    assert!(
        headers.contains(&("X-PUBLICKEY".to_owned(), z85)),
        "{headers:?}"
    );
    let (_, mut seen_b) = wait_for(
        &mut b,
        |e| matches!(e, Event::Enter { peer, .. } if *peer == a.uuid()),
    )
    .await;
    // b must know a is in G before a's SHOUT can reach it, and the other way round.
    let (_, skipped) = wait_for(
        &mut b,
        |e| matches!(e, Event::Join { group, .. } if group == "G"),
    )
    .await;
    seen_b.extend(skipped);
    let (_, skipped) = wait_for(
        &mut a,
        |e| matches!(e, Event::Join { group, .. } if group == "G"),
    )
    .await;
    seen_a.extend(skipped);

    a.shout("G", vec![Bytes::from_static(b"to the group")])
        .await
        .unwrap();
    let (e, skipped) = wait_for(&mut b, |e| matches!(e, Event::Shout { .. })).await;
    seen_b.extend(skipped);
    assert!(
        matches!(&e, Event::Shout { peer, content, .. } if *peer == a.uuid() && content[0] == "to the group")
    );
    b.whisper(a.uuid(), vec![Bytes::from_static(b"just you")])
        .await
        .unwrap();
    let (e, skipped) = wait_for(&mut a, |e| matches!(e, Event::Whisper { .. })).await;
    seen_a.extend(skipped);
    assert!(
        matches!(&e, Event::Whisper { peer, content, .. } if *peer == b.uuid() && content[0] == "just you")
    );

    // Twenty beacon intervals more: nobody else entered anywhere.
    let wait = Duration::from_secs(2);
    seen_a.extend(drain(&mut a, wait).await);
    seen_b.extend(drain(&mut b, Duration::ZERO).await);
    let seen_plain = drain(&mut plain, Duration::ZERO).await;
    let seen_stranger = drain(&mut stranger, Duration::ZERO).await;
    assert_eq!(enters(&seen_a), [] as [Uuid; 0], "{seen_a:?}");
    assert_eq!(enters(&seen_b), [] as [Uuid; 0], "{seen_b:?}");
    assert!(seen_plain.is_empty(), "{seen_plain:?}");
    assert!(seen_stranger.is_empty(), "{seen_stranger:?}");
    assert!(plain.peers().await.unwrap().is_empty());
    assert!(stranger.peers().await.unwrap().is_empty());
    assert_eq!(a.peers().await.unwrap(), [b.uuid()]);

    for n in [&mut a, &mut b, &mut plain, &mut stranger] {
        n.stop().await;
    }
}

/// A plaintext DEALER with a ZRE identity sending a HELLO straight to a CURVE node's mailbox
/// (over TCP, or as a node of the same process would) fails the handshake: no ENTER.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_connection_to_a_curve_mailbox_fails() {
    let port = port();
    let mut a = ZreNode::start(opts(port, "a").with_curve(CurveKeyPair::generate()))
        .await
        .unwrap();
    let intruder = Uuid::from_bytes([0x42; 16]);
    let dealer = dafka_zmtp::Socket::new(
        SocketType::Dealer,
        dafka_zmtp::Options::default()
            .with_routing_id(Some(Bytes::copy_from_slice(&intruder.dealer_identity())))
            .with_linger(Some(Duration::ZERO)),
    )
    .unwrap();
    let mut monitor = dealer.monitor(64);
    dealer.connect(a.endpoint()).await.unwrap();
    let hello = hello("intruder", vec![]);
    let _ = dealer.try_send(dafka_zmtp::Message::from(hello.to_frames()));
    let failed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match monitor.recv().await {
                Some(SocketEvent::HandshakeFailed { .. }) => return true,
                Some(SocketEvent::HandshakeSucceeded { .. }) => return false,
                Some(_) => {}
                None => return false,
            }
        }
    })
    .await
    .expect("no handshake outcome within 10 s");
    assert!(
        failed,
        "a plaintext DEALER completed a handshake with a CURVE mailbox"
    );
    let seen = drain(&mut a, Duration::from_millis(500)).await;
    assert!(enters(&seen).is_empty(), "{seen:?}");
    dealer.close_in_background_with(Some(Duration::ZERO));

    // A plaintext node of this process that knows a's mailbox gets no further (the inproc
    // shortcut, which has no handshake, is off for CURVE nodes).
    let mut plain = ZreNode::start(
        opts(port, "plain")
            .without_beacons()
            .with_known_endpoint(a.endpoint()),
    )
    .await
    .unwrap();
    let seen = drain(&mut a, Duration::from_secs(1)).await;
    assert!(enters(&seen).is_empty(), "{seen:?}");
    assert!(drain(&mut plain, Duration::ZERO).await.is_empty());
    plain.stop().await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curve_refuses_known_endpoints_gossip_and_two_authenticators() {
    let curve = || opts(port(), "x").with_curve(CurveKeyPair::generate());
    for options in [
        curve().with_known_endpoint("tcp://127.0.0.1:1"),
        curve().without_beacons(),
        curve().with_gossip_hub(),
        // One authenticator judges the mailbox and the beacons: not two.
        curve()
            .with_curve_allowed([[1; 32]])
            .with_curve_authenticator(dafka_zmtp::Authenticator::allow_all()),
    ] {
        match ZreNode::start(options).await {
            Err(Error::Caller(e)) => assert!(e.to_string().contains("CURVE"), "{e}"),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("CURVE with known endpoints or gossip was accepted"),
        }
    }
}

/// H1 over loopback: a node whose key b admits connects to b's mailbox with a's identity
/// (`0x01` + a's UUID) and says HELLO with a's public key, then WHISPERs. b refuses all of it
/// (the connection authenticated with the intruder's key, not a's): a does not leave, the
/// intruder's headers and messages never appear, and a still talks to b.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admitted_node_cannot_pose_as_another() {
    let port = port();
    let (ka, kb) = (CurveKeyPair::generate(), CurveKeyPair::generate());
    let mut a = ZreNode::start(opts(port, "a").with_curve(ka.clone()))
        .await
        .unwrap();
    let mut b = ZreNode::start(opts(port, "b").with_curve(kb.clone()))
        .await
        .unwrap();
    wait_for(
        &mut b,
        |e| matches!(e, Event::Enter { peer, .. } if *peer == a.uuid()),
    )
    .await;
    wait_for(
        &mut a,
        |e| matches!(e, Event::Enter { peer, .. } if *peer == b.uuid()),
    )
    .await;

    let intruder = CurveKeyPair::generate();
    let dealer = dafka_zmtp::Socket::new(
        SocketType::Dealer,
        dafka_zmtp::Options::default()
            .with_routing_id(Some(Bytes::copy_from_slice(&a.uuid().dealer_identity())))
            .with_mechanism(dafka_zmtp::MechanismConfig::CurveClient {
                keypair: intruder,
                server_key: *kb.public(),
            })
            .with_linger(Some(Duration::from_secs(1))),
    )
    .unwrap();
    dealer.connect(b.endpoint()).await.unwrap();
    let hello = hello(
        "a",
        vec![
            ("X-PUBLICKEY", dafka_zmtp::z85_encode(ka.public())),
            ("X-DAFKA", "forged".to_owned()),
        ],
    );
    let whisper = Message {
        sequence: 2,
        body: Body::Whisper {
            content: vec![Bytes::from_static(b"forged")],
        },
    };
    for m in [hello, whisper] {
        dealer
            .send(dafka_zmtp::Message::from(m.to_frames()))
            .await
            .unwrap();
    }
    let seen = drain(&mut b, Duration::from_secs(1)).await;
    assert!(
        !seen.iter().any(|e| matches!(
            e,
            Event::Exit { .. } | Event::Enter { .. } | Event::Whisper { .. }
        )),
        "{seen:?}"
    );
    let dafka_header = b
        .query({
            let a = a.uuid();
            move |n| n.peer_header(a, "X-DAFKA").map(str::to_owned)
        })
        .await
        .unwrap();
    assert_eq!(dafka_header, None);
    assert_eq!(b.peers().await.unwrap(), [a.uuid()]);
    a.whisper(b.uuid(), vec![Bytes::from_static(b"real")])
        .await
        .unwrap();
    let (e, _) = wait_for(&mut b, |e| matches!(e, Event::Whisper { .. })).await;
    assert!(
        matches!(&e, Event::Whisper { peer, content, .. } if *peer == a.uuid() && content[0] == "real"),
        "{e:?}"
    );
    dealer.close_in_background_with(Some(Duration::ZERO));
    a.stop().await;
    b.stop().await;
}
