//! Issue 13 bug: nodes in CURVE mode where several UUIDs share one key pair (a Dafka store's
//! writer and reader, every member of a cluster given one member key), with beacons and
//! HELLOs delivered in any order. Before the fix two nodes could answer each other's HELLO
//! with a new HELLO on a new DEALER forever (each taking the other's for a restart): a
//! connection per round trip, the ROUTER handovers and the port exhaustion of the CI run.
//!
//! The network here holds every message in flight: each DEALER connection is a FIFO (TCP),
//! beacons are datagrams in no order, and a seeded generator picks what arrives next, so every
//! interleaving these tests find is replayed exactly by its seed.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dafka_testkit::Rng;
use dafka_zre_proto::{Beacon, Config, Curve, Event, Node, Output, ShortStr, Uuid};

fn id(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

fn key(n: u8) -> [u8; 32] {
    [n ^ 0x5A; 32]
}

/// One DEALER of `from` to the mailbox at `to`, and the frames queued on it.
struct Conn {
    from: usize,
    to: String,
    server_key: [u8; 32],
    queue: std::collections::VecDeque<Vec<Bytes>>,
}

struct Lab {
    t0: Instant,
    now: Instant,
    nodes: Vec<Node>,
    keys: Vec<[u8; 32]>,
    /// Open and closing connections by id; a closed one still flushes (the driver's linger).
    conns: BTreeMap<u64, Conn>,
    next_conn: u64,
    /// (node, peer) -> its current DEALER.
    dealers: HashMap<(usize, Uuid), u64>,
    /// Beacons in flight: (from node, beacon, to node).
    datagrams: Vec<(usize, Beacon, usize)>,
    /// DEALERs opened per (node, peer).
    connects: HashMap<(usize, Uuid), usize>,
    exits: Vec<(usize, Uuid)>,
    /// WHISPERs received: (node, from).
    whispers: Vec<(usize, Uuid)>,
    /// HELLOs sent, all nodes together.
    hellos: usize,
    delivered: usize,
}

impl Lab {
    /// Nodes 1..=keys.len(), node i with the key `key(keys[i - 1])`, all in CURVE mode with
    /// an allow-list of those keys.
    fn new(keys: &[u8]) -> Lab {
        let t0 = Instant::now();
        let allowed: Vec<[u8; 32]> = keys.iter().map(|&k| key(k)).collect();
        let mut lab = Lab {
            t0,
            now: t0,
            nodes: Vec::new(),
            keys: Vec::new(),
            conns: BTreeMap::new(),
            next_conn: 0,
            dealers: HashMap::new(),
            datagrams: Vec::new(),
            connects: HashMap::new(),
            exits: Vec::new(),
            whispers: Vec::new(),
            hellos: 0,
            delivered: 0,
        };
        for (i, &k) in keys.iter().enumerate() {
            let n = u8::try_from(i + 1).unwrap();
            let curve = Curve::new(key(k)).with_allowed(allowed.clone());
            let cfg = Config::new(id(n))
                .with_beacon_interval(Duration::from_millis(100))
                .with_curve(Some(curve));
            lab.nodes.push(Node::new(cfg).unwrap());
            lab.keys.push(key(k));
        }
        lab
    }

    fn endpoint(i: usize) -> String {
        format!("tcp://127.0.0.{}:49152", i + 1)
    }

    fn ip(i: usize) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, u8::try_from(i + 1).unwrap()))
    }

    fn start(&mut self, i: usize) {
        let ep = ShortStr::new(Self::endpoint(i)).unwrap();
        self.nodes[i].start(ep, 49152, self.now).unwrap();
        self.nodes[i].handle_timeout(self.now);
        self.collect(i);
    }

    /// Takes node `i`'s outputs into the network.
    fn collect(&mut self, i: usize) {
        while let Some(out) = self.nodes[i].poll_output() {
            match out {
                Output::Beacon(b) => {
                    for j in (0..self.nodes.len()).filter(|&j| j != i) {
                        self.datagrams.push((i, b, j));
                    }
                }
                Output::Connect {
                    peer,
                    endpoint,
                    server_key,
                } => {
                    *self.connects.entry((i, peer)).or_default() += 1;
                    self.next_conn += 1;
                    self.conns.insert(
                        self.next_conn,
                        Conn {
                            from: i,
                            to: endpoint,
                            server_key: server_key.expect("CURVE mode names the key"),
                            queue: Default::default(),
                        },
                    );
                    self.dealers.insert((i, peer), self.next_conn);
                }
                Output::Disconnect { peer } => {
                    self.dealers.remove(&(i, peer));
                }
                Output::Send { peer, frames } => {
                    if dafka_zre_proto::Message::decode(&frames, &Default::default())
                        .is_ok_and(|m| matches!(m.body, dafka_zre_proto::Body::Hello(_)))
                    {
                        self.hellos += 1;
                    }
                    let c = self.dealers[&(i, peer)];
                    self.conns.get_mut(&c).unwrap().queue.push_back(frames);
                }
                Output::Event(Event::Exit { peer, .. }) => self.exits.push((i, peer)),
                Output::Event(Event::Whisper { peer, .. }) => self.whispers.push((i, peer)),
                Output::Event(_) => {}
                other => panic!("unexpected in CURVE mode: {other:?}"),
            }
        }
    }

    /// Delivers the head of connection `c`: to the node listening at its endpoint, if the
    /// CURVE handshake would complete (the server key is that node's).
    fn deliver_conn(&mut self, c: u64) {
        let conn = self.conns.get_mut(&c).unwrap();
        let Some(frames) = conn.queue.pop_front() else {
            return;
        };
        let (from, to, server_key) = (conn.from, conn.to.clone(), conn.server_key);
        let open = self.dealers.values().any(|&d| d == c);
        if !open && conn.queue.is_empty() {
            self.conns.remove(&c);
        }
        self.delivered += 1;
        let Some(j) = (0..self.nodes.len()).find(|&j| Self::endpoint(j) == to) else {
            return;
        };
        if self.keys[j] != server_key {
            return;
        }
        let identity = self.nodes[from].uuid().dealer_identity();
        let client_key = self.keys[from];
        let _ = self.nodes[j].handle_authenticated_message(
            &identity,
            Some(&client_key),
            &frames,
            self.now,
        );
        self.collect(j);
    }

    fn deliver_datagram(&mut self, at: usize) {
        let (from, beacon, to) = self.datagrams.swap_remove(at);
        self.delivered += 1;
        let _ = self.nodes[to].handle_beacon(&beacon, Self::ip(from), self.now);
        self.collect(to);
    }

    /// Runs until `until` (since start) with arrivals in the order `rng` picks, a virtual
    /// 5 ms passing now and then; false if more than `budget` deliveries were needed
    /// (a message storm).
    fn run(&mut self, rng: &mut Rng, until: Duration, budget: usize) -> bool {
        let end = self.t0 + until;
        while self.now < end {
            if self.delivered > budget {
                return false;
            }
            let busy: Vec<u64> = self
                .conns
                .iter()
                .filter(|(_, c)| !c.queue.is_empty())
                .map(|(&id, _)| id)
                .collect();
            let choices = busy.len() + self.datagrams.len();
            if choices == 0 || rng.chance(10) {
                self.now += Duration::from_millis(5);
                for i in 0..self.nodes.len() {
                    if self.nodes[i].poll_timeout().is_some_and(|t| t <= self.now) {
                        self.nodes[i].handle_timeout(self.now);
                        self.collect(i);
                    }
                }
                continue;
            }
            let pick = usize::try_from(rng.below(choices as u64)).unwrap();
            match busy.get(pick) {
                Some(&c) => self.deliver_conn(c),
                None => self.deliver_datagram(pick - busy.len()),
            }
        }
        true
    }
}

/// A Dafka cluster over `zre://` with keys: node 1 (a producer) with its own key, nodes 2 and
/// 3 (a store's writer and reader) sharing one, node 4 (a consumer) with its own, started
/// together, every arrival order a seed gives. Each pair meets, no node opens more than two
/// DEALERs to a peer, nobody leaves, and the traffic stays that of a meeting.
#[test]
fn nodes_sharing_a_key_meet_in_any_order_without_a_connection_storm() {
    let mut failures = Vec::new();
    for seed in 1..=100u64 {
        let mut lab = Lab::new(&[1, 2, 2, 4]);
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for i in 0..lab.nodes.len() {
            lab.start(i);
        }
        let calm = lab.run(&mut rng, Duration::from_secs(2), 5_000);
        let n = lab.nodes.len();
        let met = (0..n).all(|i| {
            let want: Vec<Uuid> = (0..n)
                .filter(|&j| j != i)
                .map(|j| lab.nodes[j].uuid())
                .collect();
            lab.nodes[i].peers() == want
        });
        let most = lab.connects.values().copied().max().unwrap_or(0);
        if !calm || !met || most > 2 || !lab.exits.is_empty() {
            failures.push(format!(
                "seed {seed}: calm {calm}, met {met}, most DEALERs to one peer {most}, \
                 exits {:?}, {} deliveries",
                lab.exits.len(),
                lab.delivered
            ));
        }
    }
    assert!(failures.is_empty(), "{}\n", failures.join("\n"));
}

/// The interleaving of the CI run, by hand: node 1 (own key) meets nodes 2 and 3 (one shared
/// key). Node 1 drops its waiting entry for node 2 when node 3's HELLO comes (one waiting UUID
/// per key), node 2's HELLO then arrives for a node 1 that no longer knows it, and node 2
/// already had node 1 for ready. Node 1 answers with its HELLO on a new DEALER; node 2 must
/// not take that for a restart of node 1 (EXIT, a new DEALER, its HELLO on it): it answers on
/// the DEALER it has, and that answer is not answered again.
#[test]
fn a_hello_answering_ours_is_no_restart() {
    let mut lab = Lab::new(&[1, 2, 2]);
    for i in 0..3 {
        lab.start(i);
    }
    let take_beacon = |lab: &mut Lab, from: usize, to: usize| {
        let at = lab
            .datagrams
            .iter()
            .position(|(f, _, t)| *f == from && *t == to)
            .unwrap();
        lab.deliver_datagram(at);
    };
    let conn = |lab: &Lab, from: usize, peer: u8| lab.dealers[&(from, id(peer))];
    // Node 2's beacon reaches node 1 (entry waiting for HELLO, HELLO sent); node 3's, with
    // the same key, is ignored meanwhile.
    take_beacon(&mut lab, 1, 0);
    take_beacon(&mut lab, 2, 0);
    assert_eq!(lab.nodes[0].peer_count(), 1);
    // Node 1's beacon reaches nodes 2 and 3: each sends node 1 its HELLO.
    take_beacon(&mut lab, 0, 1);
    take_beacon(&mut lab, 0, 2);
    // Node 1's HELLO reaches node 2: node 1 is ready there.
    lab.deliver_conn(conn(&lab, 0, 2));
    assert_eq!(lab.nodes[1].peers(), [id(1)]);
    // Node 3's HELLO reaches node 1, which drops its waiting entry for node 2 (same key).
    lab.deliver_conn(conn(&lab, 2, 1));
    assert_eq!(lab.nodes[0].peers(), [id(3)]);
    assert_eq!(lab.nodes[0].peer_count(), 1);
    // Node 2's HELLO: node 1 knows it again, ready, and sends its HELLO on a new DEALER.
    lab.deliver_conn(conn(&lab, 1, 1));
    assert_eq!(lab.nodes[0].peers(), [id(2), id(3)]);
    assert_eq!(lab.connects[&(0, id(2))], 2);
    // That HELLO reaches node 2, which had node 1 for ready: an answer, not a restart.
    lab.deliver_conn(conn(&lab, 0, 2));
    assert_eq!(
        lab.connects[&(1, id(1))],
        1,
        "node 2 opened no second DEALER"
    );
    assert!(lab.exits.is_empty(), "{:?}", lab.exits);
    // Everything else in flight arrives, in order; a few beacons go round.
    let mut rng = Rng(7);
    assert!(lab.run(&mut rng, Duration::from_secs(2), 2_000));
    // Each node's first HELLO to each peer (6), node 1's on its new DEALER to node 2 (1), and
    // the answers nodes 1 and 2 trade, which end after HELLO_ANSWERS each (4). Unbounded
    // answers made 407 here.
    assert!(lab.hellos <= 11, "{} HELLOs", lab.hellos);
    assert!(lab.exits.is_empty(), "{:?}", lab.exits);
    assert_eq!(lab.nodes[0].peers(), [id(2), id(3)]);
    assert_eq!(lab.nodes[1].peers(), [id(1), id(3)]);
    assert_eq!(lab.nodes[2].peers(), [id(1), id(2)]);
    assert!(lab.connects.values().all(|&n| n <= 2), "{:?}", lab.connects);
    // And the pairs talk: a WHISPER from node 2 to node 1 arrives (sequences agree).
    lab.nodes[1]
        .whisper(id(1), vec![Bytes::from_static(b"after")])
        .unwrap();
    lab.collect(1);
    let c = conn(&lab, 1, 1);
    while !lab.conns[&c].queue.is_empty() {
        lab.deliver_conn(c);
    }
    assert_eq!(lab.whispers, [(0, id(2))]);
    assert_eq!(lab.nodes[0].peers(), [id(2), id(3)]);
}

/// A ready peer's second HELLO from the same mailbox keeps it (its groups follow the HELLO,
/// as JOIN and LEAVE) and is answered up to `HELLO_ANSWERS` (2) times in a row: a peer that
/// drops this node twice before it says anything else still gets an answer each time; a
/// third is not answered until the peer sends something other than HELLO. From another
/// mailbox it is a restart: EXIT, then ENTER.
#[test]
fn a_second_hello_from_the_same_mailbox_keeps_the_peer_another_mailbox_is_a_restart() {
    use dafka_zre_proto::{Body, HELLO_ANSWERS, Hello, Message, X_PUBLICKEY};
    assert_eq!(HELLO_ANSWERS, 2);
    let mut lab = Lab::new(&[1, 2]);
    lab.start(0);
    lab.start(1);
    let mut rng = Rng(3);
    assert!(lab.run(&mut rng, Duration::from_millis(500), 1_000));
    assert_eq!(lab.nodes[0].peers(), [id(2)]);
    let hello = |endpoint: &str, groups: &[&str]| {
        Message {
            sequence: 1,
            body: Body::Hello(Hello {
                endpoint: ShortStr::new(endpoint).unwrap(),
                groups: groups.iter().map(|g| (*g).to_owned()).collect(),
                status: 2,
                name: ShortStr::new("n2").unwrap(),
                headers: vec![(
                    ShortStr::new(X_PUBLICKEY).unwrap(),
                    dafka_zmtp_proto::z85_encode(&key(2)),
                )],
            }),
        }
        .to_frames()
    };
    let from = id(2).dealer_identity();
    let events = |lab: &mut Lab, frames: Vec<Bytes>| {
        let now = lab.now;
        lab.nodes[0]
            .handle_authenticated_message(&from, Some(&key(2)), &frames, now)
            .unwrap();
        let mut out = Vec::new();
        while let Some(o) = lab.nodes[0].poll_output() {
            out.push(match o {
                Output::Event(Event::Join { group, .. }) => format!("JOIN {group}"),
                Output::Event(Event::Leave { group, .. }) => format!("LEAVE {group}"),
                Output::Event(Event::Enter { .. }) => "ENTER".to_owned(),
                Output::Event(Event::Exit { .. }) => "EXIT".to_owned(),
                Output::Connect { .. } => "CONNECT".to_owned(),
                Output::Disconnect { .. } => "DISCONNECT".to_owned(),
                Output::Send { frames, .. } => {
                    let m = Message::decode(&frames, &Default::default()).unwrap();
                    format!("SEND {} {}", m.body.name(), m.sequence)
                }
                other => format!("{other:?}"),
            });
        }
        out
    };
    let here = Lab::endpoint(1);
    assert_eq!(
        events(&mut lab, hello(&here, &["A", "B"])),
        ["SEND HELLO 1", "JOIN A", "JOIN B"]
    );
    // Dropped again before saying anything else: answered again.
    assert_eq!(
        events(&mut lab, hello(&here, &["B", "C"])),
        ["LEAVE A", "SEND HELLO 1", "JOIN C"]
    );
    // A third in a row is not answered (an exchange of answers ends here).
    assert_eq!(events(&mut lab, hello(&here, &["C"])), ["LEAVE B"]);
    // Anything else from the peer (here a PING, answered) starts the count again.
    let ping = Message {
        sequence: 2,
        body: Body::Ping,
    }
    .to_frames();
    assert_eq!(events(&mut lab, ping), ["SEND PING-OK 2"]);
    assert_eq!(events(&mut lab, hello(&here, &["C"])), ["SEND HELLO 1"]);
    assert!(lab.exits.is_empty());
    // Another mailbox: the peer restarted.
    let out = events(&mut lab, hello("tcp://127.0.0.2:50000", &[]));
    assert_eq!(out[..3], ["DISCONNECT", "EXIT", "CONNECT"], "{out:?}");
    assert!(out.contains(&"ENTER".to_owned()), "{out:?}");
}
