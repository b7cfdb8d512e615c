//! Nodes wired to each other in memory under a virtual clock: discovery, groups, messages,
//! timers, peer loss and return.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dafka_zmtp_proto::Authenticator;
use dafka_zre_proto::{
    Beacon, Body, CallerError, Config, Curve, Event, LEAVE_CHECK, Message, Node, Output, PeerError,
    ShortStr, Uuid, X_PUBLICKEY,
};

const MS: Duration = Duration::from_millis(1);

fn s(text: &str) -> ShortStr {
    ShortStr::new(text).unwrap()
}

fn id(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

/// Up to a few nodes on 127.0.0.n, each with its mailbox on port 49152. Beacons reach every
/// node; a sent message reaches the node whose endpoint the DEALER connected to. Links between
/// two nodes can be cut (both beacons and TCP are lost).
struct Net {
    t0: Instant,
    now: Instant,
    nodes: Vec<Node>,
    ips: Vec<IpAddr>,
    /// (from node, peer uuid) -> endpoint of the DEALER.
    dealers: HashMap<(usize, Uuid), String>,
    /// (from node, peer uuid) -> the CURVE server key of the DEALER (CURVE mode).
    server_keys: HashMap<(usize, Uuid), [u8; 32]>,
    events: Vec<Vec<Event>>,
    cut: BTreeSet<(usize, usize)>,
    /// What each node sent, decoded: (from, to uuid, message).
    sent: Vec<(usize, Uuid, Message)>,
    errors: Vec<(usize, PeerError)>,
    started: Vec<bool>,
    /// Probe HELLOs waiting for their endpoint's node to start: (from, endpoint, frames).
    probes: Vec<(usize, String, Vec<Bytes>)>,
    probed: Vec<(usize, String)>,
}

impl Net {
    fn new(n: u8) -> Net {
        Net::with(n, |c| c)
    }

    fn with(n: u8, edit: impl Fn(Config) -> Config) -> Net {
        let t0 = Instant::now();
        let mut net = Net {
            t0,
            now: t0,
            nodes: Vec::new(),
            ips: Vec::new(),
            dealers: HashMap::new(),
            server_keys: HashMap::new(),
            events: Vec::new(),
            cut: BTreeSet::new(),
            sent: Vec::new(),
            errors: Vec::new(),
            started: Vec::new(),
            probes: Vec::new(),
            probed: Vec::new(),
        };
        for i in 1..=n {
            let cfg = edit(Config::new(id(i)).with_name(s(&format!("n{i}"))));
            net.nodes.push(Node::new(cfg).unwrap());
            net.ips.push(IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)));
            net.events.push(Vec::new());
            net.started.push(false);
        }
        net
    }

    fn endpoint(&self, i: usize) -> String {
        format!("tcp://{}:49152", self.ips[i])
    }

    fn start(&mut self, i: usize) {
        let ep = s(&self.endpoint(i));
        self.nodes[i].start(ep, 49152, self.now).unwrap();
        self.started[i] = true;
        self.pump();
    }

    fn index_of_endpoint(&self, ep: &str) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| self.endpoint(i) == ep)
    }

    fn linked(&self, a: usize, b: usize) -> bool {
        !self.cut.contains(&(a.min(b), a.max(b)))
    }

    /// Drains every node's outputs until all are quiet.
    fn pump(&mut self) {
        loop {
            let mut progress = false;
            let now = self.now;
            for (from, ep, frames) in std::mem::take(&mut self.probes) {
                match self.index_of_endpoint(&ep) {
                    Some(j) if self.started[j] && self.linked(from, j) => {
                        progress = true;
                        let id = self.nodes[from].uuid().dealer_identity();
                        let key = self.client_key(from);
                        if let Err(e) = self.nodes[j].handle_authenticated_message(
                            &id,
                            key.as_ref(),
                            &frames,
                            now,
                        ) {
                            self.errors.push((j, e));
                        }
                    }
                    _ => self.probes.push((from, ep, frames)),
                }
            }
            for i in 0..self.nodes.len() {
                while let Some(out) = self.nodes[i].poll_output() {
                    progress = true;
                    self.deliver(i, out);
                }
            }
            if !progress {
                return;
            }
        }
    }

    fn deliver(&mut self, i: usize, out: Output) {
        let now = self.now;
        match out {
            Output::Beacon(b) => {
                let bytes = b.encode();
                for j in 0..self.nodes.len() {
                    if self.linked(i, j) {
                        let b = Beacon::decode(&bytes).unwrap();
                        if let Err(e) = self.nodes[j].handle_beacon(&b, self.ips[i], now) {
                            self.errors.push((j, e));
                        }
                    }
                }
            }
            Output::Connect {
                peer,
                endpoint,
                server_key,
            } => {
                self.dealers.insert((i, peer), endpoint);
                match server_key {
                    Some(k) => self.server_keys.insert((i, peer), k),
                    None => self.server_keys.remove(&(i, peer)),
                };
            }
            Output::Disconnect { peer } => {
                self.dealers.remove(&(i, peer));
            }
            Output::Send { peer, frames } => {
                let ep = self.dealers.get(&(i, peer)).expect("send before connect");
                let m = Message::decode(&frames, &Default::default()).unwrap();
                self.sent.push((i, peer, m));
                let Some(j) = self.index_of_endpoint(ep) else {
                    return;
                };
                if !self.linked(i, j) || self.nodes[j].uuid() != peer || !self.handshake(i, j) {
                    return;
                }
                let from = self.nodes[i].uuid().dealer_identity();
                let key = self.client_key(i);
                if let Err(e) =
                    self.nodes[j].handle_authenticated_message(&from, key.as_ref(), &frames, now)
                {
                    self.errors.push((j, e));
                }
            }
            Output::Event(e) => self.events[i].push(e),
            Output::Probe { endpoint, hello } => {
                self.probed.push((i, endpoint.clone()));
                self.probes.push((i, endpoint, hello));
            }
            Output::Adopt { endpoint, peer } => {
                self.dealers.insert((i, peer), endpoint);
            }
            _ => unreachable!(),
        }
    }

    /// The key node `i`'s DEALERs authenticate with, as the far mailbox sees it (CURVE).
    fn client_key(&self, i: usize) -> Option<[u8; 32]> {
        self.nodes[i].config().curve.as_ref().map(|c| c.public_key)
    }

    /// Whether node `i`'s DEALER to node `j` completes its ZMTP handshake, as the driver's
    /// sockets would: NULL meets NULL; a CURVE client meets a CURVE server whose public key it
    /// has as server key, if the server lets the client's key in.
    fn handshake(&self, i: usize, j: usize) -> bool {
        let client = self.nodes[i].config().curve.as_ref();
        let server = self.nodes[j].config().curve.as_ref();
        let key = self.server_keys.get(&(i, self.nodes[j].uuid()));
        match (client, server) {
            (None, None) => key.is_none(),
            // The mailbox sees the client's `ip:port` (here, port 40000 for every DEALER).
            (Some(c), Some(s)) => {
                let client = format!("{}:40000", self.ips[i]);
                key == Some(&s.public_key) && s.allows(&c.public_key, &client)
            }
            _ => false,
        }
    }

    /// Advances the clock to `t` (since start), firing every timer due on the way.
    fn run_until(&mut self, t: Duration) {
        let end = self.t0 + t;
        loop {
            let next = self
                .nodes
                .iter()
                .filter_map(Node::poll_timeout)
                .min()
                .filter(|&d| d <= end);
            let Some(due) = next else {
                self.now = self.now.max(end);
                return;
            };
            self.now = self.now.max(due);
            for i in 0..self.nodes.len() {
                self.nodes[i].handle_timeout(self.now);
            }
            self.pump();
        }
    }

    fn take(&mut self, i: usize) -> Vec<Event> {
        std::mem::take(&mut self.events[i])
    }

    fn kinds(&mut self, i: usize) -> Vec<String> {
        self.take(i)
            .into_iter()
            .map(|e| match e {
                Event::Enter { peer, .. } => format!("ENTER {}", peer.as_bytes()[0]),
                Event::Exit { peer, .. } => format!("EXIT {}", peer.as_bytes()[0]),
                Event::Join { peer, group, .. } => format!("JOIN {} {group}", peer.as_bytes()[0]),
                Event::Leave { peer, group, .. } => {
                    format!("LEAVE {} {group}", peer.as_bytes()[0])
                }
                Event::Evasive { peer, .. } => format!("EVASIVE {}", peer.as_bytes()[0]),
                Event::Silent { peer, .. } => format!("SILENT {}", peer.as_bytes()[0]),
                Event::Stop => "STOP".to_owned(),
                other => format!("{other:?}"),
            })
            .collect()
    }
}

fn met(n: u8) -> Net {
    meet(Net::new(n))
}

/// Starts every node of `net` and lets them meet; their events are taken.
fn meet(mut net: Net) -> Net {
    let n = net.nodes.len();
    for i in 0..n {
        net.start(i);
    }
    net.run_until(10 * MS);
    for i in 0..n {
        net.take(i);
    }
    net
}

#[test]
fn discovery_enter_with_headers_and_groups() {
    let mut net = Net::with(2, |c| c.with_header(s("X-NAME"), "tcp://127.0.0.1:7000"));
    net.nodes[0].join(s("G1"));
    net.nodes[0].join(s("G2"));
    net.start(0);
    net.start(1);
    net.run_until(10 * MS);
    let ev = net.take(1);
    assert_eq!(
        ev[0],
        Event::Enter {
            peer: id(1),
            name: "n1".into(),
            headers: vec![("X-NAME".into(), "tcp://127.0.0.1:7000".into())],
            address: "tcp://127.0.0.1:49152".into(),
        }
    );
    assert_eq!(net.kinds(0), ["ENTER 2"]);
    assert_eq!(
        ev[1..],
        [
            Event::Join {
                peer: id(1),
                name: "n1".into(),
                group: "G1".into()
            },
            Event::Join {
                peer: id(1),
                name: "n1".into(),
                group: "G2".into()
            }
        ]
    );
    assert_eq!(net.nodes[1].peers(), [id(1)]);
    assert_eq!(net.nodes[1].peers_by_group("G2"), [id(1)]);
    assert_eq!(net.nodes[1].peer_groups(), ["G1", "G2"]);
    assert_eq!(net.nodes[0].own_groups(), ["G1", "G2"]);
    assert_eq!(
        net.nodes[1].peer_header(id(1), "X-NAME"),
        Some("tcp://127.0.0.1:7000")
    );
    assert_eq!(
        net.nodes[1].peer_address(id(1)),
        Some("tcp://127.0.0.1:49152")
    );
    // Own beacons were heard and ignored: nobody is its own peer.
    assert_eq!(net.nodes[0].peers(), [id(2)]);
    assert!(net.errors.is_empty(), "{:?}", net.errors);
}

#[test]
fn join_shout_whisper_leave() {
    let mut net = met(3);
    net.nodes[1].join(s("G"));
    net.nodes[2].join(s("G"));
    net.pump();
    assert_eq!(net.kinds(0), ["JOIN 2 G", "JOIN 3 G"]);
    net.nodes[0].shout(
        s("G"),
        vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")],
    );
    net.nodes[0]
        .whisper(id(2), vec![Bytes::from_static(b"w")])
        .unwrap();
    net.pump();
    let shout = Event::Shout {
        peer: id(1),
        name: "n1".into(),
        group: "G".into(),
        content: vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")],
    };
    let ev = net.take(1);
    assert_eq!(ev.len(), 3, "{ev:?}");
    assert_eq!(ev[1], shout);
    assert_eq!(
        ev[2],
        Event::Whisper {
            peer: id(1),
            name: "n1".into(),
            content: vec![Bytes::from_static(b"w")],
        }
    );
    assert_eq!(net.take(2)[1], shout);
    net.nodes[2].leave("G");
    net.nodes[2].leave("G");
    net.pump();
    assert_eq!(net.kinds(0), ["LEAVE 3 G"]);
    assert_eq!(net.nodes[0].peers_by_group("G"), [id(2)]);
    // Shouting to a group goes to its members only.
    net.nodes[0].shout(s("G"), vec![]);
    net.pump();
    let ev = net.kinds(1);
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[0], "LEAVE 3 G");
    assert!(ev[1].starts_with("Shout"), "{ev:?}");
    assert!(net.take(2).is_empty());
    // Group status counts joins and leaves.
    let statuses: Vec<u8> = net
        .sent
        .iter()
        .filter(|(from, _, _)| *from == 2)
        .filter_map(|(_, _, m)| match m.body {
            Body::Join { status, .. } | Body::Leave { status, .. } => Some(status),
            _ => None,
        })
        .collect();
    assert_eq!(statuses, [1, 1, 2, 2]);
    assert_eq!(
        net.nodes[0].whisper(id(9), vec![]),
        Err(CallerError::UnknownPeer(id(9)))
    );
}

#[test]
fn evasive_ping_keeps_a_peer_alive() {
    let mut net = met(2);
    // No application traffic: after 5 s each side PINGs, the other answers PING-OK.
    net.run_until(5 * MS * 1000 + 20 * MS);
    assert_eq!(net.kinds(0), ["EVASIVE 2"]);
    assert_eq!(net.kinds(1), ["EVASIVE 1"]);
    let pings = net
        .sent
        .iter()
        .filter(|(_, _, m)| matches!(m.body, Body::Ping))
        .count();
    let oks = net
        .sent
        .iter()
        .filter(|(_, _, m)| matches!(m.body, Body::PingOk))
        .count();
    assert_eq!((pings, oks), (2, 2));
    net.run_until(Duration::from_secs(60));
    // Every 5 s of quiet brings another PING; nobody expires.
    assert_eq!(net.nodes[0].peers(), [id(2)]);
    assert!(net.kinds(0).iter().all(|k| k == "EVASIVE 2"));
}

#[test]
fn lost_link_evasive_silent_exit_then_return() {
    let mut net = met(3);
    net.cut.insert((0, 2));
    net.run_until(Duration::from_secs(31));
    // Node 2 is still reachable from both: it is only PINGed (EVASIVE) every 5 s.
    let about = |kinds: Vec<String>, peer: &str| -> Vec<String> {
        kinds.into_iter().filter(|k| k.ends_with(peer)).collect()
    };
    let k0 = net.kinds(0);
    assert_eq!(about(k0.clone(), " 3"), ["EVASIVE 3", "SILENT 3", "EXIT 3"]);
    assert!(about(k0, " 2").iter().all(|k| k == "EVASIVE 2"));
    assert_eq!(
        about(net.kinds(2), " 1"),
        ["EVASIVE 1", "SILENT 1", "EXIT 1"]
    );
    assert!(
        net.kinds(1).iter().all(|k| k.starts_with("EVASIVE")),
        "node 2 lost nobody"
    );
    assert_eq!(net.nodes[1].peers(), [id(1), id(3)]);
    net.cut.clear();
    net.run_until(Duration::from_secs(32));
    assert_eq!(net.kinds(0), ["ENTER 3"]);
    assert_eq!(net.kinds(2), ["ENTER 1"]);
}

#[test]
fn timeouts_are_configurable() {
    let mut net = Net::with(2, |c| {
        c.with_timeouts(100 * MS, 200 * MS, 300 * MS)
            .with_beacon_interval(50 * MS)
    });
    net.start(0);
    net.start(1);
    net.run_until(10 * MS);
    net.take(0);
    net.cut.insert((0, 1));
    net.run_until(10 * MS + 310 * MS);
    assert_eq!(net.kinds(0), ["EVASIVE 2", "SILENT 2", "EXIT 2"]);
    assert!(Node::new(Config::new(id(1)).with_timeouts(5 * MS, 1 * MS, 9 * MS)).is_err());
}

#[test]
fn stop_sends_port_zero_and_peers_exit_at_once() {
    let mut net = met(2);
    net.nodes[0].stop();
    net.pump();
    assert_eq!(net.kinds(0), ["STOP"]);
    assert_eq!(net.kinds(1), ["EXIT 1"]);
    assert!(net.nodes[1].peers().is_empty());
    assert_eq!(net.nodes[0].poll_timeout(), None);
}

#[test]
fn restart_with_a_new_port_is_exit_then_enter() {
    let mut net = met(2);
    let b = Beacon::new(id(2), 50000);
    net.nodes[0].handle_beacon(&b, net.ips[1], net.now).unwrap();
    let mut outs = Vec::new();
    while let Some(o) = net.nodes[0].poll_output() {
        outs.push(o);
    }
    assert!(matches!(&outs[0], Output::Disconnect { peer } if *peer == id(2)));
    assert!(matches!(&outs[1], Output::Event(Event::Exit { .. })));
    assert!(
        matches!(&outs[2], Output::Connect { peer, endpoint, .. } if *peer == id(2) && endpoint == "tcp://127.0.0.2:50000")
    );
    let Output::Send { frames, .. } = &outs[3] else {
        panic!("{outs:?}")
    };
    assert!(matches!(
        Message::decode(frames, &Default::default()).unwrap(),
        Message {
            sequence: 1,
            body: Body::Hello(_)
        }
    ));
}

/// Plain mode keeps zyre's rule: a ready peer's second HELLO, even from the same mailbox, is
/// a restart (EXIT, then the peer anew: a DEALER, this node's HELLO, ENTER), so a node that
/// restarts with the same UUID and port is seen to (CURVE mode keeps the peer instead:
/// shared_keys.rs).
#[test]
fn plain_second_hello_from_the_same_mailbox_is_a_restart() {
    let mut net = met(2);
    let hello = Message {
        sequence: 1,
        body: Body::Hello(dafka_zre_proto::Hello {
            endpoint: s(&net.endpoint(1)),
            groups: vec![],
            status: 0,
            name: s("n2"),
            headers: vec![],
        }),
    }
    .to_frames();
    let now = net.now;
    net.nodes[0]
        .handle_message(&id(2).dealer_identity(), &hello, now)
        .unwrap();
    let mut outs = Vec::new();
    while let Some(o) = net.nodes[0].poll_output() {
        outs.push(match o {
            Output::Disconnect { .. } => "DISCONNECT".to_owned(),
            Output::Event(Event::Exit { .. }) => "EXIT".to_owned(),
            Output::Connect { endpoint, .. } => format!("CONNECT {endpoint}"),
            Output::Send { frames, .. } => {
                let m = Message::decode(&frames, &Default::default()).unwrap();
                format!("SEND {} {}", m.body.name(), m.sequence)
            }
            Output::Event(Event::Enter { .. }) => "ENTER".to_owned(),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(
        outs,
        [
            "DISCONNECT".to_owned(),
            "EXIT".to_owned(),
            format!("CONNECT {}", net.endpoint(1)),
            "SEND HELLO 1".to_owned(),
            "ENTER".to_owned(),
        ]
    );
    assert_eq!(net.nodes[0].peers(), [id(2)]);
}

#[test]
fn sequence_gap_drops_the_peer_and_it_returns() {
    let mut net = met(2);
    let from = id(2).dealer_identity();
    // Node 2 has sent HELLO (1); a WHISPER numbered 3 skips 2.
    let gap = Message {
        sequence: 3,
        body: Body::Whisper { content: vec![] },
    };
    let now = net.now;
    assert_eq!(
        net.nodes[0].handle_message(&from, &gap.to_frames(), now),
        Err(PeerError::SequenceGap {
            peer: id(2),
            expected: 2,
            got: 3
        })
    );
    net.pump();
    assert_eq!(net.kinds(0), ["EXIT 2"]);
    // Its next beacon brings it back.
    net.run_until(Duration::from_millis(1100));
    assert_eq!(net.kinds(0), ["ENTER 2"]);
}

#[test]
fn pyre_early_wrap_is_tolerated() {
    let mut net = met(2);
    let from = id(2).dealer_identity();
    let ping = |sequence| {
        Message {
            sequence,
            body: Body::Ping,
        }
        .to_frames()
    };
    // Bring node 1's expectation to 65534 with a run of PINGs from "node 2".
    let now = net.now;
    for seq in 2..=65534u16 {
        net.nodes[0].handle_message(&from, &ping(seq), now).unwrap();
    }
    // pyre: 65534 -> 0 -> 1 (zyre would send 65535).
    net.nodes[0].handle_message(&from, &ping(0), now).unwrap();
    net.nodes[0].handle_message(&from, &ping(1), now).unwrap();
    while net.nodes[0].poll_output().is_some() {}
    assert_eq!(net.nodes[0].peers(), [id(2)]);
}

#[test]
fn commands_before_hello_are_ignored_and_hello_is_discovery() {
    let mut net = Net::new(2);
    net.start(0);
    let from = id(2).dealer_identity();
    let whisper = Message {
        sequence: 1,
        body: Body::Whisper { content: vec![] },
    };
    let now = net.now;
    assert_eq!(
        net.nodes[0].handle_message(&from, &whisper.to_frames(), now),
        Err(PeerError::BeforeHello {
            kind: "WHISPER",
            peer: id(2)
        })
    );
    // A HELLO from a node whose beacon was never heard: discovery through the mailbox.
    let hello = Message {
        sequence: 1,
        body: Body::Hello(dafka_zre_proto::Hello {
            endpoint: s("tcp://127.0.0.2:49152"),
            name: s("n2"),
            ..Default::default()
        }),
    };
    net.nodes[0]
        .handle_message(&from, &hello.to_frames(), now)
        .unwrap();
    let mut outs = Vec::new();
    while let Some(o) = net.nodes[0].poll_output() {
        outs.push(o);
    }
    assert!(
        matches!(&outs[0], Output::Connect { endpoint, .. } if endpoint == "tcp://127.0.0.2:49152")
    );
    assert!(matches!(&outs[1], Output::Send { .. }));
    assert!(matches!(&outs[2], Output::Event(Event::Enter { peer, .. }) if *peer == id(2)));
    // Not a ZRE identity.
    assert_eq!(
        net.nodes[0].handle_message(b"\x00\x00\x00\x01", &hello.to_frames(), now),
        Err(PeerError::Identity { len: 4 })
    );
}

#[test]
fn malformed_messages_do_not_change_state() {
    let mut net = met(2);
    let from = id(2).dealer_identity();
    let now = net.now;
    let r = net.nodes[0].handle_message(&from, &[Bytes::from_static(b"\xAA\xA1\x06")], now);
    assert!(matches!(r, Err(PeerError::Decode(_))), "{r:?}");
    // The peer is still there and its next message (2) is in sequence.
    let ping = Message {
        sequence: 2,
        body: Body::Ping,
    };
    net.nodes[0]
        .handle_message(&from, &ping.to_frames(), now)
        .unwrap();
    net.pump();
    assert_eq!(net.nodes[0].peers(), [id(2)]);
    assert!(net.kinds(0).is_empty());
}

#[test]
fn goodbye_and_failed_connection_drop_the_peer() {
    let mut net = met(3);
    let now = net.now;
    let bye = Message {
        sequence: 2,
        body: Body::Goodbye,
    };
    net.nodes[0]
        .handle_message(&id(2).dealer_identity(), &bye.to_frames(), now)
        .unwrap();
    net.nodes[0].handle_connection_failed(id(3));
    while let Some(o) = net.nodes[0].poll_output() {
        net.deliver(0, o);
    }
    assert_eq!(net.kinds(0), ["EXIT 2", "EXIT 3"]);
}

#[test]
fn a_full_send_queue_that_stays_full_drops_the_peer() {
    let mut net = Net::with(3, |c| c.with_send_stall(Duration::from_secs(2)));
    for i in 0..3 {
        net.start(i);
    }
    net.run_until(10 * MS);
    net.take(0);
    let t = net.now;
    net.nodes[0].handle_send_blocked(id(2), t);
    net.nodes[0].handle_send_blocked(id(3), t);
    net.run_until(Duration::from_secs(1));
    net.nodes[0].handle_send_drained(id(3));
    net.run_until(Duration::from_millis(2100));
    assert_eq!(net.kinds(0), ["EXIT 2"]);
    assert_eq!(net.nodes[0].peers(), [id(3)]);
    // Node 2's next beacon finds it again, on a new DEALER; node 3 was never dropped.
    net.run_until(Duration::from_millis(5020));
    assert_eq!(net.kinds(0), ["ENTER 2", "EVASIVE 3"]);
}

#[test]
fn max_peers_and_curve_beacons() {
    let mut net = Net::with(3, |c| c.with_max_peers(1));
    net.start(0);
    net.start(1);
    net.start(2);
    net.run_until(10 * MS);
    assert_eq!(net.nodes[0].peers().len(), 1);
    assert!(
        net.errors
            .iter()
            .any(|(i, e)| *i == 0 && matches!(e, PeerError::TooManyPeers { max: 1, .. }))
    );
    // A CURVE beacon is ignored by a node without CURVE.
    let mut n = Node::new(Config::new(id(7))).unwrap();
    n.start(s("tcp://127.0.0.7:1"), 1, net.now).unwrap();
    while n.poll_output().is_some() {}
    let b = Beacon {
        uuid: id(8),
        port: 5,
        curve_key: Some([1; 32]),
    };
    n.handle_beacon(&b, net.ips[0], net.now).unwrap();
    assert_eq!(n.poll_output(), None);
}

#[test]
fn known_endpoints_without_beacons() {
    let mut net = Net::with(3, |c| c.with_beacons(false));
    // Node 1 knows node 2's endpoint before either runs; node 3 knows nobody and nobody knows it.
    let ep2 = s(&net.endpoint(1));
    net.nodes[0].connect_endpoint(ep2.clone());
    net.nodes[0].join(s("G1"));
    net.start(0);
    assert_eq!(net.probed, [(0, "tcp://127.0.0.2:49152".to_owned())]);
    // A group joined while the probe waits reaches node 2 as a JOIN after the HELLO.
    net.nodes[0].join(s("G2"));
    net.start(1);
    net.start(2);
    net.run_until(Duration::from_secs(2));
    assert_eq!(net.kinds(1), ["ENTER 1", "JOIN 1 G1", "JOIN 1 G2"]);
    assert_eq!(net.kinds(0), ["ENTER 2"]);
    assert!(net.kinds(2).is_empty(), "no beacons: node 3 stays alone");
    // No beacon was ever sent, and the probe became node 2's DEALER (no second HELLO).
    let hellos = net
        .sent
        .iter()
        .filter(|(from, _, m)| *from == 0 && matches!(m.body, Body::Hello(_)))
        .count();
    assert_eq!(
        hellos, 0,
        "the probe's HELLO is not in `sent`; no other went out"
    );
    assert!(net.errors.is_empty(), "{:?}", net.errors);
    // Node 2 stops: GOODBYE (no beacon to carry port 0); node 1 reports EXIT and probes again.
    net.nodes[1].stop();
    net.started[1] = false;
    net.pump();
    assert_eq!(net.kinds(0), ["EXIT 2"]);
    assert_eq!(net.probed.len(), 2);
    assert_eq!(net.probed[1], (0, "tcp://127.0.0.2:49152".to_owned()));
}

/// Node `n`'s CURVE public key in these tests.
fn key(n: u8) -> [u8; 32] {
    [n ^ 0xA0; 32]
}

/// CURVE mode for the nodes whose first UUID byte is in `curve`, with an allow-list of the
/// keys of the nodes in `allowed` when given.
fn curve_net(n: u8, curve: &'static [u8], allowed: Option<&'static [u8]>) -> Net {
    Net::with(n, move |c| {
        let i = c.uuid.as_bytes()[0];
        if !curve.contains(&i) {
            return c;
        }
        let mode = Curve::new(key(i));
        let mode = match allowed {
            Some(a) => mode.with_allowed(a.iter().map(|&n| key(n))),
            None => mode,
        };
        c.with_curve(Some(mode))
    })
}

fn curve_refusals(net: &Net, at: usize) -> Vec<&'static str> {
    net.errors
        .iter()
        .filter(|(i, _)| *i == at)
        .filter_map(|(_, e)| match e {
            PeerError::CurveRefused { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect()
}

#[test]
fn curve_nodes_meet_with_v3_beacons_x_publickey_and_server_keys() {
    let mut net = curve_net(2, &[1, 2], None);
    let mut n = Node::new(net.nodes[0].config().clone()).unwrap();
    n.start(s("tcp://127.0.0.9:1"), 7, net.now).unwrap();
    n.handle_timeout(net.now);
    let Some(Output::Beacon(b)) = n.poll_output() else {
        panic!("no beacon")
    };
    let bytes = b.encode();
    assert_eq!(bytes.len(), 54);
    assert_eq!(&bytes[..4], b"ZRE\x03");
    assert_eq!(&bytes[20..22], &7u16.to_be_bytes());
    assert_eq!(&bytes[22..], &key(1));

    net.start(0);
    net.start(1);
    net.run_until(10 * MS);
    assert_eq!(net.kinds(0), ["ENTER 2"]);
    assert_eq!(net.kinds(1), ["ENTER 1"]);
    assert_eq!(net.server_keys.get(&(0, id(2))), Some(&key(2)));
    assert_eq!(net.server_keys.get(&(1, id(1))), Some(&key(1)));
    // HELLO says X-PUBLICKEY: the Z85 of the key, the peer's header as the application sees it.
    let z85 = dafka_zmtp_proto::z85_encode(&key(1));
    assert_eq!(z85.len(), 40);
    assert_eq!(
        net.nodes[1].peer_header(id(1), X_PUBLICKEY),
        Some(z85.as_str())
    );
    net.nodes[0].join(s("G"));
    net.pump();
    net.nodes[1].shout(s("G"), vec![Bytes::from_static(b"hi")]);
    net.pump();
    assert_eq!(net.kinds(0).len(), 1, "the SHOUT");
    assert!(net.errors.is_empty(), "{:?}", net.errors);
    // Leaving: a port-0 beacon with the key, then no answer to the PING it brings.
    net.nodes[1].stop();
    net.pump();
    net.run_until(net.now - net.t0 + LEAVE_CHECK);
    assert_eq!(net.kinds(0), ["EXIT 2"]);
}

#[test]
fn curve_and_plain_nodes_ignore_each_other() {
    // Nodes 1 and 2 in CURVE mode, node 3 plain.
    let mut net = curve_net(3, &[1, 2], None);
    for i in 0..3 {
        net.start(i);
    }
    net.run_until(Duration::from_secs(3));
    assert_eq!(net.kinds(0), ["ENTER 2"]);
    assert_eq!(net.kinds(1), ["ENTER 1"]);
    assert!(net.kinds(2).is_empty(), "plain node 3 saw a CURVE node");
    assert_eq!(net.nodes[2].peer_count(), 0);
    assert!(!net.dealers.contains_key(&(0, id(3))), "no downgrade");
    assert!(
        curve_refusals(&net, 0).contains(&"a beacon without a CURVE key (version 1)"),
        "{:?}",
        net.errors
    );
    // A plain HELLO (no X-PUBLICKEY) reaching a CURVE node is refused too.
    let hello = Message {
        sequence: 1,
        body: Body::Hello(dafka_zre_proto::Hello {
            endpoint: s("tcp://127.0.0.3:49152"),
            groups: vec![],
            status: 0,
            name: s("n3"),
            headers: vec![],
        }),
    };
    let now = net.now;
    let err = net.nodes[0]
        .handle_message(&id(3).dealer_identity(), &hello.to_frames(), now)
        .unwrap_err();
    assert!(matches!(err, PeerError::CurveRefused { .. }), "{err:?}");
    assert_eq!(net.nodes[0].poll_output(), None);
}

/// All three nodes in CURVE mode; nodes 1 and 2 let in only each other's keys (through
/// `limit`), node 3 lets in everyone.
fn allow_only_one_and_two(limit: fn(Curve) -> Curve) {
    let mut net = Net::with(3, move |c| {
        let i = c.uuid.as_bytes()[0];
        let mode = Curve::new(key(i));
        c.with_curve(Some(match i {
            3 => mode,
            _ => limit(mode),
        }))
    });
    for i in 0..3 {
        net.start(i);
    }
    net.run_until(Duration::from_secs(3));
    assert_eq!(net.kinds(0), ["ENTER 2"]);
    assert_eq!(net.kinds(1), ["ENTER 1"]);
    // Node 3 connects to 1 and 2 (it allows them), but their mailboxes refuse its key and
    // they never connect back: no ENTER anywhere.
    assert!(net.kinds(2).is_empty());
    for i in 0..2 {
        assert!(
            curve_refusals(&net, i).contains(&"a beacon with a key not on the allow-list"),
            "{:?}",
            net.errors
        );
    }
}

/// M3: the authenticator judging peer keys sees one address form, `ip:port` as the mailbox's
/// does for a client: for a beacon, its source address and the mailbox port it announces.
/// HELLOs are not judged again (their key is the one the mailbox admitted at the handshake).
#[test]
fn curve_authenticator_sees_ip_port_addresses() {
    use std::sync::{Arc, Mutex};
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = Arc::clone(&seen);
    let auth = Authenticator::from_fn(move |req| {
        log.lock().unwrap().push(req.address.to_owned());
        dafka_zmtp_proto::AuthDecision::Allow
    });
    let mut net = Net::with(2, move |c| {
        let i = c.uuid.as_bytes()[0];
        c.with_curve(Some(Curve::new(key(i)).with_authenticator(auth.clone())))
    });
    net.start(0);
    net.start(1);
    net.run_until(10 * MS);
    assert_eq!(net.kinds(0), ["ENTER 2"]);
    let seen = seen.lock().unwrap().clone();
    assert!(seen.iter().any(|a| a.ends_with(":49152")), "{seen:?}");
    for address in &seen {
        let addr: std::net::SocketAddr = address.parse().expect(address);
        assert!(addr.ip().is_loopback(), "{address}");
        assert!([49152, 40000].contains(&addr.port()), "{address}");
    }
}

/// M2: beacons copying a key under other UUIDs cannot fill the table: at most one UUID per
/// key waits for its HELLO. A forged beacon taking a newcomer's key first does not lock it
/// out: its HELLO, authenticated with that key, replaces the forged entry.
#[test]
fn curve_one_pending_uuid_per_key_and_the_key_holder_wins() {
    let mut net = curve_net(3, &[1, 2, 3], None);
    net.start(0);
    net.start(1);
    net.run_until(10 * MS);
    net.take(0);
    let now = net.now;
    let elsewhere = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 50));
    let copy = |n: u8, k: u8| Beacon {
        curve_key: Some(key(k)),
        ..Beacon::new(id(n), 40000)
    };
    // Node 2's key under 30 other UUIDs: one entry waits for a HELLO, the others are ignored.
    for n in 10..40 {
        let r = net.nodes[0].handle_beacon(&copy(n, 2), elsewhere, now);
        match r {
            Ok(()) => assert_eq!(n, 10),
            Err(e) => assert!(matches!(e, PeerError::CurveRefused { .. }), "{e:?}"),
        }
    }
    assert_eq!(net.nodes[0].peer_count(), 2);
    // Node 3's key, under a forged UUID, before node 3 starts: one entry, no second.
    for n in [50, 51] {
        let r = net.nodes[0].handle_beacon(&copy(n, 3), elsewhere, now);
        assert_eq!(r.is_ok(), n == 50, "{r:?}");
    }
    assert_eq!(net.nodes[0].peer_count(), 3);
    net.pump();
    // Node 3's own beacons are ignored by node 1 (an entry with its key waits), but it hears
    // node 1's and says HELLO with that key: node 1 drops the forged entry and meets node 3.
    net.start(2);
    net.run_until(net.now - net.t0 + Duration::from_secs(2));
    assert!(net.kinds(0).contains(&"ENTER 3".to_owned()));
    assert_eq!(net.nodes[0].peers(), [id(2), id(3)]);
    assert_eq!(
        net.nodes[0].peer_count(),
        3,
        "forged 50 is gone, forged 10 waits"
    );
}

/// Nodes sharing one key pair (as zyre allows: one certificate per application) all get in.
#[test]
fn curve_nodes_sharing_a_key_pair_all_meet() {
    let net = Net::with(3, |c| {
        let i = c.uuid.as_bytes()[0];
        c.with_curve(Some(Curve::new(key(i.min(2)))))
    });
    let mut net = meet(net);
    net.run_until(Duration::from_secs(3));
    assert_eq!(net.nodes[0].peers(), [id(2), id(3)]);
    assert_eq!(net.nodes[1].peers(), [id(1), id(3)]);
    assert_eq!(net.nodes[2].peers(), [id(1), id(2)]);
    assert!(net.kinds(0).iter().all(|k| !k.starts_with("EXIT")));
}

/// M2: beacons from unknown nodes (UDP, forgeable) fill at most `max_pending` entries; a
/// real node still gets in by its HELLO.
#[test]
fn pending_peers_are_capped_and_hello_still_gets_in() {
    let mut net = Net::with(2, |c| c.with_max_pending(3));
    net.start(0);
    let now = net.now;
    let elsewhere = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 50));
    let mut refused = 0;
    for n in 10..20 {
        if let Err(e) = net.nodes[0].handle_beacon(&Beacon::new(id(n), 40000), elsewhere, now) {
            assert!(matches!(e, PeerError::TooManyPeers { max: 3, .. }), "{e:?}");
            refused += 1;
        }
    }
    assert_eq!(refused, 7);
    assert_eq!(net.nodes[0].peer_count(), 3);
    net.pump();
    net.start(1);
    net.run_until(net.now - net.t0 + 10 * MS);
    assert_eq!(net.kinds(0), ["ENTER 2"]);
    assert_eq!(net.kinds(1), ["ENTER 1"]);
}

/// `n` nodes in CURVE mode, no allow-list, that met (their events taken).
fn curve_met(n: u8) -> Net {
    let all: &'static [u8] = &[1, 2, 3, 4];
    meet(curve_net(n, &all[..usize::from(n)], None))
}

#[test]
fn curve_allow_list_ignores_other_keys() {
    allow_only_one_and_two(|m| m.with_allowed([key(1), key(2)]));
}

/// The list given as an authenticator (a Dafka cluster's) decides alike.
#[test]
fn curve_authenticator_decides_on_peer_keys_too() {
    allow_only_one_and_two(|m| m.with_authenticator(Authenticator::curve_keys([key(1), key(2)])));
}

#[test]
fn curve_beacon_with_another_key_is_ignored() {
    let mut net = curve_met(2);
    let now = net.now;
    // A forged port-0 beacon for node 2 with another key does not make it leave.
    let forged = Beacon {
        uuid: id(2),
        port: 0,
        curve_key: Some([0x55; 32]),
    };
    let err = net.nodes[0]
        .handle_beacon(&forged, net.ips[1], now)
        .unwrap_err();
    assert!(matches!(err, PeerError::CurveRefused { .. }), "{err:?}");
    // Nor does a downgraded (version-1) one.
    assert!(
        net.nodes[0]
            .handle_beacon(&Beacon::new(id(2), 0), net.ips[1], now)
            .is_err()
    );
    net.pump();
    assert!(net.kinds(0).is_empty());
    assert_eq!(net.nodes[0].peers(), [id(2)]);
    // Node 2 really leaving: its port-0 beacon, then nothing answers node 1's PING.
    net.nodes[1].stop();
    net.pump();
    assert!(
        net.kinds(0).is_empty(),
        "not at once: the beacon may be forged"
    );
    net.run_until(net.now - net.t0 + LEAVE_CHECK);
    assert_eq!(net.kinds(0), ["EXIT 2"]);
}

/// M1: a beacon copying a ready peer's UUID and (public) key neither moves it (another port or
/// address) nor removes it (port 0, answered by the live peer's PING-OK).
#[test]
fn curve_beacon_copying_a_ready_peers_key_neither_moves_nor_removes_it() {
    let mut net = curve_met(2);
    let now = net.now;
    let moved = Beacon {
        curve_key: Some(key(2)),
        ..Beacon::new(id(2), 50000)
    };
    let err = net.nodes[0]
        .handle_beacon(&moved, net.ips[1], now)
        .unwrap_err();
    assert!(matches!(err, PeerError::CurveRefused { .. }), "{err:?}");
    let err = net.nodes[0]
        .handle_beacon(&moved, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9)), now)
        .unwrap_err();
    assert!(matches!(err, PeerError::CurveRefused { .. }), "{err:?}");
    let outs: Vec<Output> = std::iter::from_fn(|| net.nodes[0].poll_output()).collect();
    assert!(outs.is_empty(), "{outs:?}");
    // A forged port-0 beacon: node 1 PINGs node 2, which answers; it stays.
    let leaving = Beacon {
        curve_key: Some(key(2)),
        ..Beacon::new(id(2), 0)
    };
    net.nodes[0]
        .handle_beacon(&leaving, net.ips[1], now)
        .unwrap();
    net.pump();
    assert!(
        net.sent
            .iter()
            .any(|(from, to, m)| *from == 0 && *to == id(2) && m.body == Body::Ping)
    );
    net.run_until(net.now - net.t0 + 3 * LEAVE_CHECK);
    assert!(net.kinds(0).is_empty());
    assert_eq!(net.nodes[0].peers(), [id(2)]);
    assert_eq!(
        net.nodes[0].peer_address(id(2)),
        Some("tcp://127.0.0.2:49152")
    );
    assert!(
        net.errors
            .iter()
            .all(|(_, e)| matches!(e, PeerError::CurveRefused { .. }))
    );
}

/// A HELLO from `uuid` at `endpoint` announcing `key` in `X-PUBLICKEY`, as frames.
fn hello_frames(endpoint: &str, key: &[u8; 32], header: (&str, &str)) -> Vec<Bytes> {
    Message {
        sequence: 1,
        body: Body::Hello(dafka_zre_proto::Hello {
            endpoint: s(endpoint),
            groups: vec!["G".to_owned()],
            status: 1,
            name: s("evil"),
            headers: vec![
                (s(X_PUBLICKEY), dafka_zmtp_proto::z85_encode(key)),
                (s(header.0), header.1.to_owned()),
            ],
        }),
    }
    .to_frames()
}

/// H1: node 3 is admitted (its key is allowed) but connects with node 2's identity. Whatever
/// its HELLO announces, and whatever it sends after, node 1 refuses it: the key its connection
/// authenticated with is node 3's, not node 2's. Node 2 stays, with its own headers.
#[test]
fn curve_impersonation_by_an_admitted_node_is_refused() {
    let mut net = curve_met(3);
    assert_eq!(net.nodes[0].peers(), [id(2), id(3)]);
    let now = net.now;
    let victim = id(2).dealer_identity();
    let attacker = key(3);
    let refused = |r: Result<(), PeerError>| match r {
        Err(PeerError::CurveRefused { peer, reason }) if peer == id(2) => reason,
        other => panic!("not refused: {other:?}"),
    };
    // The victim's key in X-PUBLICKEY, on a connection authenticated with the attacker's.
    let h = hello_frames("tcp://127.0.0.3:40000", &key(2), ("X-DAFKA", "evil"));
    let r = net.nodes[0].handle_authenticated_message(&victim, Some(&attacker), &h, now);
    assert!(refused(r).contains("another key than the peer's"));
    // Its own key in X-PUBLICKEY under the victim's UUID.
    let h = hello_frames("tcp://127.0.0.3:40000", &key(3), ("X-DAFKA", "evil"));
    let r = net.nodes[0].handle_authenticated_message(&victim, Some(&attacker), &h, now);
    assert!(refused(r).contains("another key than the peer's"));
    // A WHISPER and a SHOUT as the victim, with a sequence that would be a gap.
    for body in [
        Body::Whisper {
            content: vec![Bytes::from_static(b"forged")],
        },
        Body::Shout {
            group: s("G"),
            content: vec![Bytes::from_static(b"forged")],
        },
    ] {
        let m = Message { sequence: 9, body }.to_frames();
        let r = net.nodes[0].handle_authenticated_message(&victim, Some(&attacker), &m, now);
        refused(r);
    }
    // No connection key at all (plaintext path) is refused in CURVE mode too.
    let r = net.nodes[0].handle_message(&victim, &h, now);
    refused(r);
    net.pump();
    assert!(net.kinds(0).is_empty(), "no EXIT, ENTER, WHISPER or SHOUT");
    assert_eq!(net.nodes[0].peers(), [id(2), id(3)]);
    assert_eq!(net.nodes[0].peer_header(id(2), "X-DAFKA"), None);
    // A HELLO under a new UUID must announce the key it authenticated with.
    let newcomer = id(9).dealer_identity();
    let h = hello_frames("tcp://127.0.0.3:40001", &key(2), ("X-DAFKA", "evil"));
    let r = net.nodes[0].handle_authenticated_message(&newcomer, Some(&attacker), &h, now);
    match r {
        Err(PeerError::CurveRefused { reason, .. }) => {
            assert!(reason.contains("not the key its connection authenticated with"))
        }
        other => panic!("not refused: {other:?}"),
    }
    // The real node 2 still talks.
    net.nodes[1]
        .whisper(id(1), vec![Bytes::from_static(b"real")])
        .unwrap();
    net.pump();
    assert!(matches!(&net.take(0)[..], [Event::Whisper { peer, .. }] if *peer == id(2)));
}

#[test]
fn curve_mode_refuses_known_endpoints_and_gossip() {
    let curve = Some(Curve::new(key(1)));
    let no_beacons = Config::new(id(1))
        .with_curve(curve.clone())
        .with_beacons(false);
    assert!(matches!(Node::new(no_beacons), Err(CallerError::Config(_))));
    let hub = Config::new(id(1))
        .with_curve(curve.clone())
        .with_gossip_hub(true);
    assert!(matches!(Node::new(hub), Err(CallerError::Config(_))));
    let mut n = Node::new(Config::new(id(1)).with_curve(curve)).unwrap();
    n.start(s("tcp://127.0.0.1:1"), 1, Instant::now()).unwrap();
    while n.poll_output().is_some() {}
    n.connect_endpoint(s("tcp://127.0.0.2:2"));
    assert_eq!(n.poll_output(), None, "an endpoint names no key");
}
