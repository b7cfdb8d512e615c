//! Node A of the zyre 2.0.1 capture (tests/data/zre/, scenario zre-beacon), replayed: this
//! crate's node, configured as zyre's node A was, is fed node B's captured beacons and messages
//! at their captured times. It must send the bytes zyre's A sent (beacons, HELLO), report the
//! events zyre's A reported, and PING when zyre did.

mod common;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{A, B, messages, rows, unhex, uuid};
use dafka_zre_proto::{Beacon, Body, Config, Event, Message, Node, Output, ShortStr};

fn s(t: &str) -> ShortStr {
    ShortStr::new(t).unwrap()
}

enum Input {
    Beacon(Vec<u8>),
    Message(Vec<Bytes>),
    StopA,
}

#[test]
fn node_a_of_the_zyre_capture() {
    let (a, b) = (uuid(A), uuid(B));
    let b_ip: IpAddr = "10.77.0.2".parse().unwrap();
    let cfg = Config::new(a)
        .with_name(s("nodeA"))
        .with_header(s("X-ROLE"), "A")
        .with_header(s("X-GOLDEN"), "zre-vector");
    let mut node = Node::new(cfg).unwrap();
    node.join(s("GOLDEN"));
    node.join(s("ELECT"));
    let t0 = Instant::now();
    let at = |ms: f64| t0 + Duration::from_secs_f64(ms / 1000.0);
    node.start(s("tcp://10.77.0.1:49152"), 49152, t0).unwrap();

    let beacons = rows("beacons.tsv");
    let a_beacon = unhex(&beacons[0][3]);
    let a_leaving = beacons
        .iter()
        .find(|r| r[1] == "nodeA" && r[5] == "0")
        .unwrap();
    let mut timeline: Vec<(f64, Input)> = beacons
        .iter()
        .filter(|r| r[1] == "nodeB")
        .map(|r| (r[0].parse().unwrap(), Input::Beacon(unhex(&r[3]))))
        .collect();
    let captured = messages();
    let in_scenario = || captured.iter().filter(|m| m.capture == "zre-beacon");
    timeline.extend(
        in_scenario()
            .filter(|m| m.from == "nodeB")
            .map(|m| (m.t_ms, Input::Message(m.frames.clone()))),
    );
    timeline.push((a_leaving[0].parse().unwrap(), Input::StopA));
    timeline.sort_by(|x, y| x.0.total_cmp(&y.0));
    let a_hello = &in_scenario()
        .find(|m| m.from == "nodeA" && m.kind == "HELLO")
        .unwrap()
        .frames;

    let mut events = Vec::new();
    let mut sent = Vec::new();
    let mut beacons_out = Vec::new();
    let mut connected = None;
    let mut drain = |node: &mut Node, now: Instant| {
        while let Some(out) = node.poll_output() {
            match out {
                Output::Beacon(bc) => beacons_out.push(bc.encode()),
                Output::Connect {
                    peer,
                    endpoint,
                    server_key: None,
                } => {
                    assert_eq!(peer, b);
                    connected = Some(endpoint);
                }
                Output::Send { peer, frames } => {
                    assert_eq!(peer, b);
                    sent.push((now, frames));
                }
                Output::Event(e) => events.push((now, e)),
                Output::Disconnect { .. } => {}
                other => panic!("{other:?}"),
            }
        }
    };
    for (t_ms, input) in timeline {
        let now = at(t_ms);
        while let Some(due) = node.poll_timeout().filter(|&d| d <= now) {
            node.handle_timeout(due);
            drain(&mut node, due);
        }
        match input {
            Input::Beacon(p) => node
                .handle_beacon(&Beacon::decode(&p).unwrap(), b_ip, now)
                .unwrap(),
            Input::Message(frames) => node
                .handle_message(&b.dealer_identity(), &frames, now)
                .unwrap(),
            Input::StopA => node.stop(),
        }
        drain(&mut node, now);
    }

    // Beacons: zyre's bytes, one per second from the start, then the port-0 goodbye.
    assert!(beacons_out.len() >= 10, "{}", beacons_out.len());
    assert!(
        beacons_out[..beacons_out.len() - 1]
            .iter()
            .all(|x| *x == a_beacon)
    );
    assert_eq!(beacons_out.last().unwrap(), &unhex(&a_leaving[3]));
    // B's first beacon: connect to its mailbox and send exactly zyre's HELLO.
    assert_eq!(connected.as_deref(), Some("tcp://10.77.0.2:49152"));
    assert_eq!(&sent[0].1, a_hello);
    // Events: what zyre's A reported, leader contests aside (not implemented).
    let want: Vec<(String, String, String)> = rows("events.tsv")
        .into_iter()
        .filter(|r| r[0] == "A" && r[1] != "LEADER")
        .map(|r| (r[1].clone(), r[2].clone(), r[3].clone()))
        .collect();
    let got: Vec<(String, String, String)> = events
        .iter()
        .map(|(_, e)| match e {
            Event::Enter { peer, .. } => ("ENTER".into(), peer.to_string(), "-".into()),
            Event::Join { peer, group, .. } => ("JOIN".into(), peer.to_string(), group.clone()),
            Event::Leave { peer, group, .. } => ("LEAVE".into(), peer.to_string(), group.clone()),
            Event::Shout { peer, group, .. } => ("SHOUT".into(), peer.to_string(), group.clone()),
            Event::Whisper { peer, .. } => ("WHISPER".into(), peer.to_string(), "-".into()),
            Event::Evasive { peer, .. } => ("EVASIVE".into(), peer.to_string(), "-".into()),
            Event::Stop => ("STOP".into(), "-".into(), "-".into()),
            other => panic!("{other:?}"),
        })
        .collect();
    let mut want_with_stop = want;
    want_with_stop.push(("STOP".into(), "-".into(), "-".into()));
    assert_eq!(got, want_with_stop);
    // B's last TCP message before the PING was its WHISPER at 1266.658 ms: PING and EVASIVE
    // 5 s later (zyre, with its 1 s reap tick, sent it at 7047 ms).
    let (ping_at, _) = sent
        .iter()
        .find(|(_, f)| {
            matches!(
                Message::decode(f, &Default::default()).unwrap().body,
                Body::Ping
            )
        })
        .unwrap();
    assert_eq!(*ping_at, at(1266.658) + Duration::from_secs(5));
    let evasive_at = events
        .iter()
        .find(|(_, e)| matches!(e, Event::Evasive { .. }))
        .unwrap()
        .0;
    assert_eq!(evasive_at, *ping_at);
    // Everything A sent is numbered 1, 2, 3, ... with no gap.
    let seqs: Vec<u16> = sent
        .iter()
        .map(|(_, f)| Message::decode(f, &Default::default()).unwrap().sequence)
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u16).collect::<Vec<_>>());
}
