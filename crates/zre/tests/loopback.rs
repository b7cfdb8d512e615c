//! ZRE nodes in one process over real loopback sockets: beacons to 127.255.255.255 only, on a
//! port picked per test (so tests running at once do not see each other's nodes).

use std::collections::BTreeSet;
use std::net::UdpSocket;
use std::time::Duration;

use bytes::Bytes;
use dafka_zre::{Event, Options, PeerId, ZreNode};

mod common;
use common::{opts, port};

/// Waits for the first event `pick` accepts, skipping others; panics after 10 s.
async fn wait_for<T>(node: &mut ZreNode, mut pick: impl FnMut(&Event) -> Option<T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let e = node.recv().await.expect("node stopped");
            if let Some(t) = pick(&e) {
                return t;
            }
        }
    })
    .await
    .expect("event did not come within 10 s")
}

async fn entered(node: &mut ZreNode) -> (PeerId, Vec<(String, String)>, String) {
    wait_for(node, |e| match e {
        Event::Enter {
            peer,
            headers,
            address,
            ..
        } => Some((*peer, headers.clone(), address.clone())),
        _ => None,
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_meet_talk_and_part() {
    two_nodes(|o| o).await;
}

/// The same over TCP, as between processes (nodes of one process use inproc:// by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_meet_talk_and_part_over_tcp() {
    two_nodes(Options::without_local_inproc).await;
}

async fn two_nodes(tune: impl Fn(Options) -> Options) {
    let port = port();
    let mut a = ZreNode::start(tune(opts(port, "a")).with_header("X-NAME", "tcp://127.0.0.1:7000"))
        .await
        .unwrap();
    let mut b = ZreNode::start(tune(opts(port, "b"))).await.unwrap();
    a.join("G").await.unwrap();
    b.join("G").await.unwrap();

    let (peer, _, address) = entered(&mut a).await;
    assert_eq!(peer, b.uuid());
    assert_eq!(address, b.endpoint());
    let (peer, headers, _) = entered(&mut b).await;
    assert_eq!(peer, a.uuid());
    assert_eq!(headers, [("X-NAME".into(), "tcp://127.0.0.1:7000".into())]);

    // b must know a is in G before a's SHOUT can reach it.
    wait_for(&mut b, |e| {
        matches!(e, Event::Join { group, .. } if group == "G").then_some(())
    })
    .await;
    wait_for(&mut a, |e| {
        matches!(e, Event::Join { group, .. } if group == "G").then_some(())
    })
    .await;
    a.shout(
        "G",
        vec![Bytes::from_static(b"s1"), Bytes::from_static(b"s2")],
    )
    .await
    .unwrap();
    let content = wait_for(&mut b, |e| match e {
        Event::Shout { content, group, .. } if group == "G" => Some(content.clone()),
        _ => None,
    })
    .await;
    assert_eq!(content, [&b"s1"[..], &b"s2"[..]]);
    b.whisper(a.uuid(), vec![Bytes::from_static(b"w")])
        .await
        .unwrap();
    let (from, content) = wait_for(&mut a, |e| match e {
        Event::Whisper { peer, content, .. } => Some((*peer, content.clone())),
        _ => None,
    })
    .await;
    assert_eq!((from, content), (b.uuid(), vec![Bytes::from_static(b"w")]));
    b.leave("G").await.unwrap();
    wait_for(&mut a, |e| {
        matches!(e, Event::Leave { group, .. } if group == "G").then_some(())
    })
    .await;
    assert_eq!(a.peers().await.unwrap(), [b.uuid()]);

    // Stop: b hears the port-0 beacon and reports EXIT at once (long before any timeout).
    let t = std::time::Instant::now();
    a.stop().await;
    let gone = wait_for(&mut b, |e| match e {
        Event::Exit { peer, .. } => Some(*peer),
        _ => None,
    })
    .await;
    assert_eq!(gone, a.uuid());
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_beacons_are_dropped_and_the_node_carries_on() {
    let port = port();
    let mut a = ZreNode::start(opts(port, "a")).await.unwrap();
    // Junk on the beacon port: short, long, wrong header, wrong version, 54 bytes of CURVE from
    // a node that does not exist. None of it is a peer.
    let junk = UdpSocket::bind("127.0.0.1:0").unwrap();
    junk.set_broadcast(true).unwrap();
    let to = ("127.255.255.255", port);
    let mut v1 = b"ZRE\x01".to_vec();
    v1.extend([7; 16]);
    v1.extend(1u16.to_be_bytes());
    for payload in [
        &v1[..21],
        &[v1.clone(), vec![0]].concat()[..],
        &[b"ZRF".as_slice(), &v1[3..]].concat()[..],
        &[b"ZRE\x02".as_slice(), &v1[4..]].concat()[..],
        &[b"ZRE\x03".as_slice(), &v1[4..], &[1; 32]].concat()[..],
        &[0u8; 1000][..],
    ] {
        junk.send_to(payload, to).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(a.query(|n| n.peer_count()).await.unwrap(), 0);
    // The same sender with a well-formed beacon is taken for a peer (the check above can fail).
    junk.send_to(&v1, to).unwrap();
    tokio::time::timeout(Duration::from_secs(5), async {
        while a.query(|n| n.peer_count()).await.unwrap() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    // A real node is still found.
    let mut b = ZreNode::start(opts(port, "b")).await.unwrap();
    assert_eq!(entered(&mut a).await.0, b.uuid());
    assert_eq!(a.peers().await.unwrap(), [b.uuid()]);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_nodes_in_one_process_mesh_fully() {
    const N: usize = 12;
    let port = port();
    let mut nodes = Vec::new();
    for i in 0..N {
        nodes.push(ZreNode::start(opts(port, &format!("n{i}"))).await.unwrap());
    }
    let all: BTreeSet<PeerId> = nodes.iter().map(ZreNode::uuid).collect();
    for node in &mut nodes {
        let mut seen = BTreeSet::new();
        while seen.len() < N - 1 {
            seen.insert(entered(node).await.0);
        }
        let mut want = all.clone();
        want.remove(&node.uuid());
        assert_eq!(seen, want);
    }
    for node in &mut nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_endpoints_without_beacons() {
    // Port 9 would be the beacon port; without beacons no UDP socket is opened at all.
    let mut b = ZreNode::start(Options::loopback(9).without_beacons().with_name("b"))
        .await
        .unwrap();
    let mut a = ZreNode::start(
        Options::loopback(9)
            .without_beacons()
            .with_name("a")
            .with_known_endpoint(b.endpoint()),
    )
    .await
    .unwrap();
    a.join("G").await.unwrap();
    assert_eq!(entered(&mut b).await.0, a.uuid());
    assert_eq!(entered(&mut a).await.0, b.uuid());
    wait_for(&mut b, |e| {
        matches!(e, Event::Join { group, .. } if group == "G").then_some(())
    })
    .await;
    b.whisper(a.uuid(), vec![Bytes::from_static(b"hi")])
        .await
        .unwrap();
    wait_for(&mut a, |e| matches!(e, Event::Whisper { .. }).then_some(())).await;
    // No port-0 beacon: b says GOODBYE, and a reports EXIT at once.
    b.stop().await;
    let gone = wait_for(&mut a, |e| match e {
        Event::Exit { peer, .. } => Some(*peer),
        _ => None,
    })
    .await;
    assert_eq!(gone, b.uuid());
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_hub_meshes_nodes_that_know_only_the_hub() {
    // No UDP anywhere: four nodes know only the hub's mailbox, and end up each with the hub
    // and the three others as peers. Without the hub's gossip each would see the hub only.
    let mut hub = ZreNode::start(
        Options::loopback(9)
            .without_beacons()
            .with_gossip_hub()
            .with_name("hub"),
    )
    .await
    .unwrap();
    let mut nodes = Vec::new();
    for i in 0..4 {
        let o = Options::loopback(9)
            .without_beacons()
            .with_name(format!("n{i}"))
            .with_known_endpoint(hub.endpoint());
        nodes.push(ZreNode::start(o).await.unwrap());
    }
    let ids: BTreeSet<PeerId> = nodes.iter().map(ZreNode::uuid).collect();
    for node in &mut nodes {
        let me = node.uuid();
        let mut want: BTreeSet<PeerId> = ids.iter().copied().filter(|&p| p != me).collect();
        want.insert(hub.uuid());
        let mut seen = BTreeSet::new();
        while seen != want {
            let (peer, _, _) = entered(node).await;
            seen.insert(peer);
        }
        // Gossip WHISPERs are the node's own business: none reaches the application.
        let quiet = tokio::time::timeout(Duration::from_millis(200), node.recv()).await;
        assert!(
            !matches!(quiet, Ok(Some(Event::Whisper { .. }))),
            "{quiet:?}"
        );
    }
    for node in &nodes {
        assert_eq!(node.peers().await.unwrap().len(), 4);
    }
    for node in &mut nodes {
        node.stop().await;
    }
    hub.stop().await;
}
