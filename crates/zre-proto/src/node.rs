//! The peer table and its timers: one ZRE node as a state machine with time passed in.
//!
//! The driver owns the UDP socket, the ROUTER mailbox and one DEALER per peer. It feeds the
//! node what arrives ([`Node::handle_beacon`], [`Node::handle_message`]), what the application
//! asks ([`Node::join`], [`Node::shout`], ...), what its sockets report
//! ([`Node::handle_send_blocked`], [`Node::handle_connection_failed`]) and the time
//! ([`Node::handle_timeout`] at [`Node::poll_timeout`]); it then drains [`Node::poll_output`]:
//! beacons to broadcast, DEALERs to open and close, frames to send, events for the application.
//!
//! What it follows, from zyre 2.0.1 where the RFCs say nothing or otherwise:
//!
//! * A beacon (port not 0) from an unknown UUID creates the peer: its DEALER is connected to
//!   `tcp://<beacon source>:<port>` and HELLO (sequence 1) is sent at once. A known UUID with
//!   another endpoint is a restarted peer: the old one leaves (EXIT), the new one is created.
//! * A HELLO from an unknown peer is discovery too (it often arrives before the sender's
//!   beacon): the peer is created from the HELLO's endpoint. A HELLO from a peer that already
//!   said HELLO, from another mailbox, is a restart: EXIT, then the new peer; from the same
//!   mailbox, in CURVE mode, it keeps the peer and is answered on its DEALER, at most
//!   [`HELLO_ANSWERS`] times in a row (zyre takes it for a restart, which can loop forever
//!   when nodes share a key pair); in plain mode it is a restart, as in zyre.
//! * ENTER goes to the application when the peer's HELLO arrives, followed by a JOIN per group
//!   in it. Any other command from a peer before its HELLO is ignored.
//! * Sequence numbers: HELLO is 1, then each message one more (wrapping). A gap means lost
//!   messages: the peer is dropped (EXIT) and found again by its next beacon, as zyre does.
//!   pyre wraps one step early (65534 -> 0); 0 is accepted where 65535 is expected.
//! * Liveness is refreshed by TCP messages only (zyre; [`Config::beacons_refresh`] adds
//!   beacons, as pyre does). After [`Config::evasive`] of silence the peer is sent PING and
//!   EVASIVE goes out; after [`Config::silent`], SILENT; after [`Config::expired`], EXIT.
//! * Without beacons ([`Config::beacons`] off), [`Node::connect_endpoint`] finds the node at a
//!   known endpoint: HELLO goes out on a probe DEALER, the node connects back and says HELLO,
//!   the probe becomes its DEALER. A lost peer's endpoint is probed again. Stopping sends
//!   GOODBYE to every peer instead of the port-0 beacon.
//! * A beacon with port 0, a GOODBYE, a failed connection or a send queue full for longer than
//!   [`Config::send_stall`] drop the peer (EXIT). zyre never notices a full send queue.
//!   In CURVE mode a beacon never moves or drops a ready peer: one with another endpoint is
//!   ignored, one with port 0 sends the peer PING and drops it only if nothing comes from it
//!   within [`LEAVE_CHECK`] (anyone can copy its UUID and public key into a beacon).
//! * Group status counts this node's joins and leaves (wrapping); a peer's status is taken as
//!   it comes (pyre overflows it).
//! * In CURVE mode ([`Config::curve`], [`crate::curve`]) beacons are the 54-byte version-3
//!   form, HELLO carries `X-PUBLICKEY`, [`Output::Connect`] names the peer's key, and beacons
//!   or HELLOs without an acceptable key are ignored.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::beacon::Beacon;
use crate::curve::{Curve, X_PUBLICKEY};
use crate::error::{CallerError, PeerError};
use crate::message::{Body, Hello, Limits, Message};
use crate::{ShortStr, Uuid};

/// A node's settings.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// This node's id.
    pub uuid: Uuid,
    /// This node's name (zyre's default is the first six hex characters of the UUID).
    pub name: ShortStr,
    /// Headers announced in HELLO (e.g. `X-NAME` = `tcp://ip:port` for a service endpoint).
    pub headers: Vec<(ShortStr, String)>,
    /// Time between beacons (zyre: 1 s).
    pub beacon_interval: Duration,
    /// Silence after which a peer is sent PING and reported EVASIVE (zyre: 5 s).
    pub evasive: Duration,
    /// Silence after which a peer is reported SILENT (10 s).
    pub silent: Duration,
    /// Silence after which a peer is dropped with EXIT (zyre: 30 s).
    pub expired: Duration,
    /// How long a peer's send queue may stay full before the peer is dropped (5 s).
    pub send_stall: Duration,
    /// Whether beacons refresh a peer's liveness (pyre: yes; zyre: no, TCP only).
    pub beacons_refresh: bool,
    /// Whether this node beacons at all. Without beacons, peers are found through
    /// [`Node::connect_endpoint`] (known endpoints) and through their HELLOs.
    pub beacons: bool,
    /// Whether this node is a gossip hub ([`crate::gossip`]): it tells each peer that says
    /// HELLO of the others, and the others of it (no).
    pub gossip_hub: bool,
    /// Most peers in the table; further ones are ignored.
    pub max_peers: usize,
    /// Most peers in the table found by a beacon whose HELLO has not arrived yet (256);
    /// further beacons from unknown nodes are ignored (a HELLO still gets a node in). Beacons
    /// are not authenticated: this keeps forged ones from filling the table.
    pub max_pending: usize,
    /// Decode limits.
    pub limits: Limits,
    /// CURVE mode (43/ZRE version 3): `None` is plain mode, which ignores version-3 beacons.
    pub curve: Option<Curve>,
}

impl Config {
    /// zyre's defaults for a node with this id; the name is the first six hex characters.
    pub fn new(uuid: Uuid) -> Self {
        let hex = uuid.to_string();
        Config {
            uuid,
            name: ShortStr::new(&hex[..6]).unwrap_or_default(),
            headers: Vec::new(),
            beacon_interval: Duration::from_secs(1),
            evasive: Duration::from_secs(5),
            silent: Duration::from_secs(10),
            expired: Duration::from_secs(30),
            send_stall: Duration::from_secs(5),
            beacons_refresh: false,
            beacons: true,
            gossip_hub: false,
            max_peers: 4096,
            max_pending: 256,
            limits: Limits::DEFAULT,
            curve: None,
        }
    }

    /// In CURVE mode ([`crate::curve`]), or not.
    pub fn with_curve(mut self, curve: Option<Curve>) -> Self {
        self.curve = curve;
        self
    }

    /// As a gossip hub, or not ([`crate::gossip`]).
    pub fn with_gossip_hub(mut self, yes: bool) -> Self {
        self.gossip_hub = yes;
        self
    }

    /// With another name.
    pub fn with_name(mut self, name: ShortStr) -> Self {
        self.name = name;
        self
    }

    /// With one more header.
    pub fn with_header(mut self, key: ShortStr, value: impl Into<String>) -> Self {
        self.headers.push((key, value.into()));
        self
    }

    /// With another beacon interval.
    pub fn with_beacon_interval(mut self, d: Duration) -> Self {
        self.beacon_interval = d;
        self
    }

    /// With other evasive, silent and expired timeouts.
    pub fn with_timeouts(mut self, evasive: Duration, silent: Duration, expired: Duration) -> Self {
        self.evasive = evasive;
        self.silent = silent;
        self.expired = expired;
        self
    }

    /// With another send-stall timeout.
    pub fn with_send_stall(mut self, d: Duration) -> Self {
        self.send_stall = d;
        self
    }

    /// With beacons refreshing liveness or not.
    pub fn with_beacons_refresh(mut self, yes: bool) -> Self {
        self.beacons_refresh = yes;
        self
    }

    /// With beaconing on or off.
    pub fn with_beacons(mut self, yes: bool) -> Self {
        self.beacons = yes;
        self
    }

    /// With another peer limit.
    pub fn with_max_peers(mut self, n: usize) -> Self {
        self.max_peers = n;
        self
    }

    /// With another limit on peers whose HELLO has not arrived yet.
    pub fn with_max_pending(mut self, n: usize) -> Self {
        self.max_pending = n;
        self
    }

    /// With other decode limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    fn check(&self) -> Result<(), CallerError> {
        if self.beacon_interval.is_zero() {
            return Err(CallerError::Config("beacon interval must not be zero"));
        }
        if self.evasive.is_zero() || self.silent < self.evasive || self.expired < self.silent {
            return Err(CallerError::Config(
                "timeouts must satisfy 0 < evasive <= silent <= expired",
            ));
        }
        if self.curve.is_some() && !self.beacons {
            return Err(CallerError::Config(
                "CURVE mode needs beacons: they carry the peers' public keys",
            ));
        }
        if self.curve.is_some() && self.gossip_hub {
            return Err(CallerError::Config(
                "CURVE mode cannot gossip: gossip carries no public keys",
            ));
        }
        Ok(())
    }
}

/// What the application hears.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A peer said HELLO.
    Enter {
        /// The peer.
        peer: Uuid,
        /// Its name.
        name: String,
        /// Its headers, in wire order.
        headers: Vec<(String, String)>,
        /// Its mailbox endpoint, `tcp://ip:port`.
        address: String,
    },
    /// A peer left, expired or was dropped.
    Exit {
        /// The peer.
        peer: Uuid,
        /// Its name.
        name: String,
    },
    /// A peer joined a group.
    Join {
        /// The peer.
        peer: Uuid,
        /// Its name.
        name: String,
        /// The group.
        group: String,
    },
    /// A peer left a group.
    Leave {
        /// The peer.
        peer: Uuid,
        /// Its name.
        name: String,
        /// The group.
        group: String,
    },
    /// A peer sent this node content.
    Whisper {
        /// The peer.
        peer: Uuid,
        /// Its name.
        name: String,
        /// The content frames.
        content: Vec<Bytes>,
    },
    /// A peer sent content to a group.
    Shout {
        /// The peer.
        peer: Uuid,
        /// Its name.
        name: String,
        /// The group.
        group: String,
        /// The content frames.
        content: Vec<Bytes>,
    },
    /// A peer has been quiet for the evasive timeout; it was sent PING.
    Evasive {
        /// The peer.
        peer: Uuid,
        /// Its name.
        name: String,
    },
    /// A peer has been quiet for the silent timeout.
    Silent {
        /// The peer.
        peer: Uuid,
        /// Its name.
        name: String,
    },
    /// This node stopped.
    Stop,
}

/// What the driver must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Output {
    /// Broadcast this beacon.
    Beacon(Beacon),
    /// Open a DEALER with identity [`Uuid::dealer_identity`] of this node, connected to
    /// `endpoint`, for `peer`.
    Connect {
        /// The peer.
        peer: Uuid,
        /// Its mailbox.
        endpoint: String,
        /// In CURVE mode, the peer's public key: the DEALER is a CURVE client with this node's
        /// key pair and this server key. `None` in plain mode.
        server_key: Option<[u8; 32]>,
    },
    /// Send these frames on `peer`'s DEALER (without waiting: if its queue is full, drop them
    /// and call [`Node::handle_send_blocked`]).
    Send {
        /// The peer.
        peer: Uuid,
        /// The frames.
        frames: Vec<Bytes>,
    },
    /// Close `peer`'s DEALER.
    Disconnect {
        /// The peer.
        peer: Uuid,
    },
    /// Open a DEALER (identity as for [`Output::Connect`]) to a known endpoint whose node is
    /// not known yet, and send it `hello`. It becomes a peer's DEALER through [`Output::Adopt`].
    Probe {
        /// The endpoint.
        endpoint: String,
        /// HELLO, sequence 1.
        hello: Vec<Bytes>,
    },
    /// The node at `endpoint` said HELLO: the DEALER opened by [`Output::Probe`] for it is now
    /// `peer`'s (its HELLO counts as sent on that connection).
    Adopt {
        /// The probed endpoint.
        endpoint: String,
        /// The peer behind it.
        peer: Uuid,
    },
    /// Hand this event to the application.
    Event(Event),
}

#[derive(Debug)]
struct Peer {
    endpoint: String,
    ready: bool,
    name: String,
    headers: Vec<(String, String)>,
    groups: BTreeSet<String>,
    status: u8,
    sent_sequence: u16,
    want_sequence: u16,
    last_seen: Instant,
    evasive_reported: bool,
    silent_reported: bool,
    blocked_since: Option<Instant>,
    /// Its CURVE public key (CURVE mode).
    curve_key: Option<[u8; 32]>,
    /// CURVE mode: when a port-0 beacon said this ready peer leaves; it was sent PING and is
    /// dropped at [`LEAVE_CHECK`] after that unless it says something first.
    leaving_since: Option<Instant>,
    /// Second HELLOs of this (ready) peer answered with this node's HELLO since the peer
    /// last sent anything else ([`HELLO_ANSWERS`]).
    answers: u8,
}

/// CURVE mode: how long a ready peer announced as leaving by a port-0 beacon (which anyone
/// can forge, the key being public) has to answer the PING sent then before it is dropped.
pub const LEAVE_CHECK: Duration = Duration::from_secs(1);

/// CURVE mode: a ready peer's second HELLO from the same mailbox is answered with this node's
/// HELLO, on the DEALER the peer already has, at most this many times in a row: the count
/// starts again when the peer sends anything other than HELLO.
///
/// Such a HELLO comes from a peer that dropped this node without this node noticing (a
/// waiting entry dropped for another UUID's HELLO with the same key, a sequence gap, a failed
/// connection) and met it again: it may wait for this node's HELLO (it met it again by a
/// beacon), or not (it met it again by this node's HELLO, and its own is the answer). Which,
/// this node cannot tell. Taking it for a restart (EXIT, a new DEALER, a HELLO on it) as zyre
/// does made two nodes trade HELLOs and DEALERs forever when the peer did not wait, each
/// taking the other's answer for a restart: a connection per round trip (issue 13's CI run:
/// ROUTER handovers, then no ephemeral port left). Answering on the existing DEALER gives a
/// waiting peer its HELLO; two answers in a row let a peer that drops this node twice before
/// saying anything else still get one each time, and end an exchange of answers after two
/// rounds (an answer answers an answer only while the count allows). A time limit instead
/// left a peer that dropped this node twice within it waiting until it expired this node.
/// A restarted peer announces another mailbox (its port is ephemeral): that is still EXIT
/// and a new peer.
pub const HELLO_ANSWERS: u8 = 2;

impl Peer {
    fn deadline(&self, cfg: &Config) -> Instant {
        let next = if !self.evasive_reported {
            cfg.evasive
        } else if !self.silent_reported {
            cfg.silent
        } else {
            cfg.expired
        };
        let quiet = self.last_seen + next;
        let due = match self.blocked_since {
            Some(t) => quiet.min(t + cfg.send_stall),
            None => quiet,
        };
        match self.leaving_since {
            Some(t) => due.min(t + LEAVE_CHECK),
            None => due,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Running,
    Stopped,
}

/// One ZRE node: its groups, its peers and their timers.
#[derive(Debug)]
pub struct Node {
    cfg: Config,
    phase: Phase,
    endpoint: String,
    port: u16,
    status: u8,
    /// In join order, so HELLO lists them as the application joined them.
    own_groups: Vec<ShortStr>,
    peers: HashMap<Uuid, Peer>,
    peer_groups: BTreeMap<String, BTreeSet<Uuid>>,
    next_beacon: Option<Instant>,
    out: VecDeque<Output>,
    /// Endpoints given to [`Node::connect_endpoint`]; probed again whenever their peer leaves.
    known: BTreeSet<String>,
    /// Open probes: endpoint -> the groups this node was in when the probe's HELLO went out.
    probes: BTreeMap<String, Vec<ShortStr>>,
}

impl Node {
    /// A node that is not started yet: it may join groups, and says nothing.
    pub fn new(cfg: Config) -> Result<Self, CallerError> {
        cfg.check()?;
        Ok(Node {
            cfg,
            phase: Phase::Idle,
            endpoint: String::new(),
            port: 0,
            status: 0,
            own_groups: Vec::new(),
            peers: HashMap::new(),
            peer_groups: BTreeMap::new(),
            next_beacon: None,
            out: VecDeque::new(),
            known: BTreeSet::new(),
            probes: BTreeMap::new(),
        })
    }

    /// This node's id.
    pub fn uuid(&self) -> Uuid {
        self.cfg.uuid
    }

    /// This node's settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Starts beaconing: `endpoint` is this node's mailbox as peers reach it
    /// (`tcp://ip:port`), `port` its port. The first beacon is due at once.
    pub fn start(
        &mut self,
        endpoint: ShortStr,
        port: u16,
        now: Instant,
    ) -> Result<(), CallerError> {
        if self.phase != Phase::Idle {
            return Err(CallerError::State("already started"));
        }
        if port == 0 {
            return Err(CallerError::Config("a mailbox port of 0 means leaving"));
        }
        self.phase = Phase::Running;
        self.endpoint = endpoint.into();
        self.port = port;
        if self.cfg.beacons {
            self.next_beacon = Some(now);
        }
        let known: Vec<String> = self.known.iter().cloned().collect();
        for endpoint in known {
            self.probe(endpoint);
        }
        Ok(())
    }

    /// Stops: a beacon with port 0, every DEALER closed, STOP. Peers hear the beacon and drop
    /// this node at once; no EXIT is reported here for them (zyre reports none either).
    pub fn stop(&mut self) {
        if self.phase != Phase::Running {
            self.phase = Phase::Stopped;
            return;
        }
        self.phase = Phase::Stopped;
        self.next_beacon = None;
        if self.cfg.beacons {
            self.out.push_back(Output::Beacon(self.beacon(0)));
        }
        self.probes.clear();
        if !self.cfg.beacons {
            // No port-0 beacon to say it: GOODBYE to every peer, as zyre does in gossip mode.
            self.send_all(|| Body::Goodbye);
        }
        let mut peers: Vec<Uuid> = self.peers.keys().copied().collect();
        peers.sort();
        for peer in peers {
            self.out.push_back(Output::Disconnect { peer });
        }
        self.peers.clear();
        self.peer_groups.clear();
        self.out.push_back(Output::Event(Event::Stop));
    }

    /// The next thing to do, or `None`.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// When [`Node::handle_timeout`] must next run, or `None` if no timer is armed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.phase != Phase::Running {
            return None;
        }
        self.peers
            .values()
            .map(|p| p.deadline(&self.cfg))
            .chain(self.next_beacon)
            .min()
    }

    /// Runs the timers due at `now`: the beacon, and each peer's evasive, silent, expired and
    /// send-stall deadlines.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.phase != Phase::Running {
            return;
        }
        if let Some(due) = self.next_beacon
            && now >= due
        {
            self.out.push_back(Output::Beacon(self.beacon(self.port)));
            // Skipped beats are dropped rather than sent in a burst.
            let mut next = due + self.cfg.beacon_interval;
            if next <= now {
                next = now + self.cfg.beacon_interval;
            }
            self.next_beacon = Some(next);
        }
        let mut due: Vec<Uuid> = self
            .peers
            .iter()
            .filter(|(_, p)| p.deadline(&self.cfg) <= now)
            .map(|(id, _)| *id)
            .collect();
        due.sort();
        for id in due {
            self.run_peer_timers(id, now);
        }
    }

    fn run_peer_timers(&mut self, id: Uuid, now: Instant) {
        let Some(p) = self.peers.get_mut(&id) else {
            return;
        };
        let quiet = now.saturating_duration_since(p.last_seen);
        let stalled = p
            .blocked_since
            .is_some_and(|t| now.saturating_duration_since(t) >= self.cfg.send_stall);
        let left = p
            .leaving_since
            .is_some_and(|t| now.saturating_duration_since(t) >= LEAVE_CHECK);
        if quiet >= self.cfg.expired || stalled || left {
            self.remove_peer(id);
            return;
        }
        if quiet >= self.cfg.evasive && !p.evasive_reported {
            p.evasive_reported = true;
            let name = p.name.clone();
            let ready = p.ready;
            self.send(id, Body::Ping);
            if ready {
                self.event(Event::Evasive { peer: id, name });
            }
        }
        let Some(p) = self.peers.get_mut(&id) else {
            return;
        };
        if quiet >= self.cfg.silent && !p.silent_reported {
            p.silent_reported = true;
            if p.ready {
                let name = p.name.clone();
                self.event(Event::Silent { peer: id, name });
            }
        }
    }

    /// A beacon from `from` (its UDP source address). Own beacons and beacons before `start`
    /// are ignored; so are version-3 (CURVE) beacons in plain mode. In CURVE mode, beacons
    /// without a key, with a key not allowed, or with another key than the peer's known one
    /// are ignored with [`PeerError::CurveRefused`].
    pub fn handle_beacon(
        &mut self,
        beacon: &Beacon,
        from: IpAddr,
        now: Instant,
    ) -> Result<(), PeerError> {
        // 43/ZRE: "a node SHALL discard beacons that it receives from itself"; a node without
        // CURVE cannot talk to one with it.
        if self.phase != Phase::Running || beacon.uuid == self.cfg.uuid {
            return Ok(());
        }
        let Some(curve) = &self.cfg.curve else {
            if beacon.curve_key.is_some() {
                return Ok(());
            }
            return self.on_beacon(beacon, None, from, now);
        };
        let refused = |reason| PeerError::CurveRefused {
            peer: beacon.uuid,
            reason,
        };
        let Some(key) = beacon.curve_key else {
            // No downgrade: a CURVE node never talks plaintext.
            return Err(refused("a beacon without a CURVE key (version 1)"));
        };
        // The address as the mailbox's authenticator sees a client's: `ip:port` (here the
        // beacon's source address and the mailbox port it announces).
        if !curve.allows(&key, &SocketAddr::new(from, beacon.port).to_string()) {
            return Err(refused("a beacon with a key not on the allow-list"));
        }
        if let Some(p) = self.peers.get_mut(&beacon.uuid) {
            if p.curve_key != Some(key) {
                return Err(refused("a beacon with another key than the peer's"));
            }
            // A ready peer's key and UUID are public, so a beacon cannot move or remove it: a
            // restart shows as a HELLO on a connection authenticated with its key.
            if p.ready && beacon.port == 0 {
                // Leaving, or forged: PING it; a live peer answers before LEAVE_CHECK.
                if p.leaving_since.is_none() {
                    p.leaving_since = Some(now);
                    self.send(beacon.uuid, Body::Ping);
                }
                return Ok(());
            }
            if p.ready && p.endpoint != beacon_endpoint(from, beacon.port) {
                return Err(refused("a beacon with another endpoint for a ready peer"));
            }
        } else if self.pending_with_key(&key).next().is_some() {
            // At most one UUID per key waits for its HELLO: copies of a (public) key under
            // other UUIDs cannot fill the table. Nodes sharing a key pair still all get in (by
            // their HELLOs, authenticated with it, or one beacon after the other).
            return Err(refused(
                "a beacon with a key another peer awaiting HELLO has",
            ));
        }
        self.on_beacon(beacon, Some(key), from, now)
    }

    fn on_beacon(
        &mut self,
        beacon: &Beacon,
        key: Option<[u8; 32]>,
        from: IpAddr,
        now: Instant,
    ) -> Result<(), PeerError> {
        if beacon.port == 0 {
            // 43/ZRE: "if the port is zero, this indicates the peer is disconnecting".
            if self.peers.contains_key(&beacon.uuid) {
                self.remove_peer(beacon.uuid);
            }
            return Ok(());
        }
        let endpoint = beacon_endpoint(from, beacon.port);
        if !self.peers.contains_key(&beacon.uuid) {
            let pending = self.peers.values().filter(|p| !p.ready).count();
            if pending >= self.cfg.max_pending {
                return Err(PeerError::TooManyPeers {
                    peer: beacon.uuid,
                    max: self.cfg.max_pending,
                });
            }
        }
        self.require_peer(beacon.uuid, endpoint, key, now)?;
        if self.cfg.beacons_refresh
            && let Some(p) = self.peers.get_mut(&beacon.uuid)
        {
            refresh(p, now);
        }
        Ok(())
    }

    /// A multipart message from the ROUTER mailbox: `routing_id` is the sender's DEALER
    /// identity, `frames` the rest. In plain mode; in CURVE mode every message is refused
    /// this way ([`Node::handle_authenticated_message`] names the connection's key).
    pub fn handle_message(
        &mut self,
        routing_id: &[u8],
        frames: &[Bytes],
        now: Instant,
    ) -> Result<(), PeerError> {
        self.handle_authenticated_message(routing_id, None, frames, now)
    }

    /// [`Node::handle_message`] with the CURVE public key the message's connection
    /// authenticated with (the mailbox is a CURVE server; `None` without CURVE). In CURVE mode
    /// the DEALER identity (`0x01` + UUID) is only a claim, the key is what counts:
    ///
    /// * a HELLO's `X-PUBLICKEY` must be that key (zyre's DEALER presents the key it
    ///   announces), so no node can announce another node's key;
    /// * any message from a known peer must come with the peer's pinned key (from its first
    ///   beacon or HELLO), so a node claiming another's UUID is refused before its message
    ///   counts: no EXIT of the real peer, no sequence check, no ENTER, WHISPER or SHOUT.
    ///
    /// Each refusal is [`PeerError::CurveRefused`] and leaves the peer table as it was.
    pub fn handle_authenticated_message(
        &mut self,
        routing_id: &[u8],
        curve_key: Option<&[u8; 32]>,
        frames: &[Bytes],
        now: Instant,
    ) -> Result<(), PeerError> {
        if self.phase != Phase::Running {
            return Ok(());
        }
        let Some(id) = Uuid::from_dealer_identity(routing_id) else {
            return Err(PeerError::Identity {
                len: routing_id.len(),
            });
        };
        if self.cfg.curve.is_some() {
            let refused = |reason| PeerError::CurveRefused { peer: id, reason };
            let Some(key) = curve_key else {
                return Err(refused("a message on a connection without a CURVE key"));
            };
            if let Some(p) = self.peers.get(&id)
                && p.curve_key.as_ref() != Some(key)
            {
                return Err(refused(
                    "a message authenticated with another key than the peer's",
                ));
            }
        }
        let msg = Message::decode(frames, &self.cfg.limits)?;
        if let Body::Hello(hello) = &msg.body {
            if hello.endpoint.as_str() == self.endpoint {
                return Err(PeerError::OwnEndpoint { peer: id });
            }
            let key = self.hello_key(id, hello, curve_key)?;
            if let Some(key) = key {
                // The key's holder (authenticated) is here: entries for its key that wait for
                // a HELLO under other UUIDs came from copied beacons (or an earlier run).
                let stale: Vec<Uuid> = self.pending_with_key(&key).filter(|u| *u != id).collect();
                for other in stale {
                    self.remove_peer(other);
                }
            }
            let again = self.peers.get(&id).filter(|p| p.ready).map(|p| {
                // The same mailbox: the peer met this node again; another one: it restarted.
                p.endpoint == hello.endpoint.as_str()
            });
            // A second HELLO from another mailbox: the peer restarted with the same UUID. From
            // the same mailbox, in plain mode, too (zyre's rule; a restart that keeps its UUID
            // and port shows as EXIT and ENTER); in CURVE mode the peer stays
            // ([`HELLO_ANSWERS`]).
            if again.is_some_and(|same_mailbox| !same_mailbox || self.cfg.curve.is_none()) {
                self.remove_peer(id);
            }
            self.require_peer(id, hello.endpoint.to_string(), key, now)?;
        }
        let Some(p) = self
            .peers
            .get_mut(&id)
            .filter(|p| p.ready || is_hello(&msg))
        else {
            return Err(PeerError::BeforeHello {
                kind: msg.body.name(),
                peer: id,
            });
        };
        // zyre: HELLO starts the count at 1, every other message is one more.
        let expected = if is_hello(&msg) {
            1
        } else {
            p.want_sequence.wrapping_add(1)
        };
        let pyre_wrap = expected == u16::MAX && msg.sequence == 0;
        if msg.sequence != expected && !pyre_wrap {
            self.remove_peer(id);
            return Err(PeerError::SequenceGap {
                peer: id,
                expected,
                got: msg.sequence,
            });
        }
        p.want_sequence = msg.sequence;
        refresh(p, now);
        if !is_hello(&msg) {
            p.answers = 0;
        }
        let name = p.name.clone();
        match msg.body {
            Body::Hello(hello) => self.on_hello(id, hello),
            Body::Whisper { content } => match crate::gossip::decode(&content) {
                // Gossip: nodes to find, as known endpoints (any peer may gossip). In CURVE
                // mode it names no keys: ignored.
                Some(_) if self.cfg.curve.is_some() => {}
                Some(nodes) => {
                    for (uuid, endpoint) in nodes {
                        if uuid != self.cfg.uuid && !self.peers.contains_key(&uuid) {
                            self.connect_endpoint(endpoint);
                        }
                    }
                }
                None => self.event(Event::Whisper {
                    peer: id,
                    name,
                    content,
                }),
            },
            Body::Shout { group, content } => self.event(Event::Shout {
                peer: id,
                name,
                group: group.into(),
                content,
            }),
            Body::Join { group, status } => {
                p.status = status;
                if p.groups.insert(group.to_string()) {
                    self.peer_groups
                        .entry(group.to_string())
                        .or_default()
                        .insert(id);
                    self.event(Event::Join {
                        peer: id,
                        name,
                        group: group.into(),
                    });
                }
            }
            Body::Leave { group, status } => {
                p.status = status;
                if p.groups.remove(group.as_str()) {
                    self.drop_from_group(group.as_str(), id);
                    self.event(Event::Leave {
                        peer: id,
                        name,
                        group: group.into(),
                    });
                }
            }
            Body::Ping => self.send(id, Body::PingOk),
            Body::Goodbye => self.remove_peer(id),
            // The refresh above is all these do: PING-OK answers our PING; leader contests
            // are not implemented, their messages only keep the count.
            Body::PingOk | Body::Elect { .. } | Body::Leader { .. } => {}
        }
        Ok(())
    }

    /// In CURVE mode, the key a HELLO announces in `X-PUBLICKEY`: required, the key its
    /// connection authenticated with (`authenticated`), and the peer's known key if it is
    /// known. `None` in plain mode. The authenticator is not asked again: the mailbox's (the
    /// same, [`Curve::authenticator`]) admitted that key at the handshake, with the
    /// connection's address.
    fn hello_key(
        &self,
        id: Uuid,
        hello: &Hello,
        authenticated: Option<&[u8; 32]>,
    ) -> Result<Option<[u8; 32]>, PeerError> {
        if self.cfg.curve.is_none() {
            return Ok(None);
        }
        let refused = |reason| PeerError::CurveRefused { peer: id, reason };
        let key = hello
            .headers
            .iter()
            .find(|(k, _)| k.as_str() == X_PUBLICKEY)
            .and_then(|(_, v)| crate::curve::parse_header(v))
            .ok_or(refused("a HELLO without a valid X-PUBLICKEY header"))?;
        if authenticated != Some(&key) {
            return Err(refused(
                "a HELLO whose X-PUBLICKEY is not the key its connection authenticated with",
            ));
        }
        if let Some(p) = self.peers.get(&id)
            && p.curve_key != Some(key)
        {
            return Err(refused("a HELLO with another key than the peer's"));
        }
        Ok(Some(key))
    }

    fn on_hello(&mut self, id: Uuid, hello: Hello) {
        let Some(p) = self.peers.get_mut(&id) else {
            return;
        };
        // A ready peer's HELLO from its mailbox (CURVE mode, [`HELLO_ANSWERS`]): it stays (no
        // EXIT or ENTER), its groups become those the HELLO lists (the difference as JOIN and
        // LEAVE), and it is sent this node's HELLO on its DEALER, unless it was answered
        // [`HELLO_ANSWERS`] times since it last sent anything else.
        let again = std::mem::replace(&mut p.ready, true);
        let left: Vec<String> = match again {
            true => p
                .groups
                .iter()
                .filter(|g| !hello.groups.contains(g))
                .cloned()
                .collect(),
            false => Vec::new(),
        };
        for g in &left {
            p.groups.remove(g);
        }
        let answer = again && p.answers < HELLO_ANSWERS;
        if answer {
            p.answers += 1;
            // HELLO starts the count again on that connection.
            p.sent_sequence = 0;
        }
        p.name = hello.name.to_string();
        p.headers = hello
            .headers
            .into_iter()
            .map(|(k, v)| (k.into(), v))
            .collect();
        p.status = hello.status;
        let joined: Vec<String> = hello
            .groups
            .into_iter()
            .filter(|g| p.groups.insert(g.clone()))
            .collect();
        let name = p.name.clone();
        let enter = Event::Enter {
            peer: id,
            name: name.clone(),
            headers: p.headers.clone(),
            address: p.endpoint.clone(),
        };
        let endpoint = p.endpoint.clone();
        for group in left {
            self.drop_from_group(&group, id);
            self.event(Event::Leave {
                peer: id,
                name: name.clone(),
                group,
            });
        }
        if answer {
            let hello = self.hello();
            self.send(id, Body::Hello(hello));
        }
        if !again {
            self.event(enter);
            if self.cfg.gossip_hub {
                self.gossip_about(id, &endpoint);
            }
        }
        for group in joined {
            self.peer_groups
                .entry(group.clone())
                .or_default()
                .insert(id);
            self.event(Event::Join {
                peer: id,
                name: name.clone(),
                group,
            });
        }
    }

    /// The driver could not connect `peer`'s DEALER, or lost it for good: the peer is dropped.
    pub fn handle_connection_failed(&mut self, peer: Uuid) {
        if self.peers.contains_key(&peer) {
            self.remove_peer(peer);
        }
    }

    /// `peer`'s send queue is full (a message was dropped): if it stays full for
    /// [`Config::send_stall`], the peer is dropped as not responding.
    pub fn handle_send_blocked(&mut self, peer: Uuid, now: Instant) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.blocked_since.get_or_insert(now);
        }
    }

    /// `peer`'s send queue has room again.
    pub fn handle_send_drained(&mut self, peer: Uuid) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.blocked_since = None;
        }
    }

    /// Joins `group`: JOIN goes to every peer. Joining a group twice does nothing.
    pub fn join(&mut self, group: ShortStr) {
        if self.own_groups.contains(&group) {
            return;
        }
        self.own_groups.push(group.clone());
        self.status = self.status.wrapping_add(1);
        let status = self.status;
        self.send_all(|| Body::Join {
            group: group.clone(),
            status,
        });
    }

    /// Leaves `group`: LEAVE goes to every peer. Leaving a group not joined does nothing.
    pub fn leave(&mut self, group: &str) {
        let Some(at) = self.own_groups.iter().position(|g| g.as_str() == group) else {
            return;
        };
        let group = self.own_groups.remove(at);
        self.status = self.status.wrapping_add(1);
        let status = self.status;
        self.send_all(|| Body::Leave {
            group: group.clone(),
            status,
        });
    }

    /// Sends `content` to every peer in `group` (this node need not be in it).
    pub fn shout(&mut self, group: ShortStr, content: Vec<Bytes>) {
        let members: Vec<Uuid> = self
            .peer_groups
            .get(group.as_str())
            .map(|m| m.iter().copied().collect())
            .unwrap_or_default();
        for peer in members {
            self.send(
                peer,
                Body::Shout {
                    group: group.clone(),
                    content: content.clone(),
                },
            );
        }
    }

    /// As a hub: tells `newcomer` of every other ready peer, and every other ready peer of it.
    fn gossip_about(&mut self, newcomer: Uuid, endpoint: &str) {
        let others: Vec<(Uuid, String)> = self
            .peers
            .iter()
            .filter(|(id, p)| **id != newcomer && p.ready)
            .map(|(id, p)| (*id, p.endpoint.clone()))
            .collect();
        for chunk in others.chunks(crate::gossip::MAX_GOSSIP_ENTRIES) {
            let content = crate::gossip::encode(chunk.iter().map(|(u, e)| (*u, e.as_str())));
            self.send(newcomer, Body::Whisper { content });
        }
        let about = crate::gossip::encode([(newcomer, endpoint)]);
        for (id, _) in others {
            self.send(
                id,
                Body::Whisper {
                    content: about.clone(),
                },
            );
        }
    }

    /// Sends `content` to `peer`, which must have said HELLO.
    pub fn whisper(&mut self, peer: Uuid, content: Vec<Bytes>) -> Result<(), CallerError> {
        if !self.peers.get(&peer).is_some_and(|p| p.ready) {
            return Err(CallerError::UnknownPeer(peer));
        }
        self.send(peer, Body::Whisper { content });
        Ok(())
    }

    /// Finds the node at `endpoint` (`tcp://ip:port`) without beacons: a DEALER is opened to it
    /// and sent HELLO ([`Output::Probe`]); the node answers by connecting back and saying HELLO,
    /// which makes it a peer on that DEALER ([`Output::Adopt`]). Whenever that peer leaves, the
    /// endpoint is probed again (the DEALER reconnects until a node listens there). Before
    /// `start`, the endpoint is kept and probed at `start`. In CURVE mode it does nothing (an
    /// endpoint names no key; the driver refuses known endpoints with CURVE).
    pub fn connect_endpoint(&mut self, endpoint: ShortStr) {
        if self.cfg.curve.is_some() {
            return;
        }
        let endpoint = String::from(endpoint);
        if !self.known.insert(endpoint.clone()) || self.phase != Phase::Running {
            return;
        }
        if !self.peers.values().any(|p| p.endpoint == endpoint) {
            self.probe(endpoint);
        }
    }

    fn probe(&mut self, endpoint: String) {
        if endpoint == self.endpoint || self.probes.contains_key(&endpoint) {
            return;
        }
        let hello = Message {
            sequence: 1,
            body: Body::Hello(self.hello()),
        };
        self.probes
            .insert(endpoint.clone(), self.own_groups.clone());
        self.out.push_back(Output::Probe {
            endpoint,
            hello: hello.to_frames(),
        });
    }

    fn hello(&self) -> Hello {
        let mut headers = self.cfg.headers.clone();
        if let Some(curve) = &self.cfg.curve {
            // zyre's header; the application's own X-PUBLICKEY, if any, gives way.
            headers.retain(|(k, _)| k.as_str() != X_PUBLICKEY);
            headers.push((
                ShortStr::new(X_PUBLICKEY).unwrap_or_default(),
                curve.header_value(),
            ));
        }
        Hello {
            endpoint: ShortStr::new(self.endpoint.clone()).unwrap_or_default(),
            groups: self.own_groups.iter().map(ToString::to_string).collect(),
            status: self.status,
            name: self.cfg.name.clone(),
            headers,
        }
    }

    /// This node's beacon with `port`: version 3 with the public key in CURVE mode.
    fn beacon(&self, port: u16) -> Beacon {
        Beacon {
            curve_key: self.cfg.curve.as_ref().map(|c| c.public_key),
            ..Beacon::new(self.cfg.uuid, port)
        }
    }

    /// Peers that said HELLO, sorted.
    pub fn peers(&self) -> Vec<Uuid> {
        let mut v: Vec<Uuid> = self
            .peers
            .iter()
            .filter(|(_, p)| p.ready)
            .map(|(id, _)| *id)
            .collect();
        v.sort();
        v
    }

    /// Peers in the table, including those whose HELLO has not arrived yet.
    pub fn peer_count(&self) -> usize {
        self.peers.len()
    }

    /// The members of `group`, sorted.
    pub fn peers_by_group(&self, group: &str) -> Vec<Uuid> {
        self.peer_groups
            .get(group)
            .map(|m| m.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Groups some peer is in, sorted.
    pub fn peer_groups(&self) -> Vec<String> {
        self.peer_groups.keys().cloned().collect()
    }

    /// Groups this node is in, in join order.
    pub fn own_groups(&self) -> Vec<String> {
        self.own_groups.iter().map(ToString::to_string).collect()
    }

    /// A header `peer` announced.
    pub fn peer_header(&self, peer: Uuid, key: &str) -> Option<&str> {
        self.peers
            .get(&peer)?
            .headers
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `peer`'s mailbox endpoint.
    pub fn peer_address(&self, peer: Uuid) -> Option<&str> {
        self.peers
            .get(&peer)
            .filter(|p| p.ready)
            .map(|p| p.endpoint.as_str())
    }

    /// `peer`'s name, once its HELLO arrived.
    pub fn peer_name(&self, peer: Uuid) -> Option<&str> {
        self.peers
            .get(&peer)
            .filter(|p| p.ready)
            .map(|p| p.name.as_str())
    }

    fn require_peer(
        &mut self,
        id: Uuid,
        endpoint: String,
        curve_key: Option<[u8; 32]>,
        now: Instant,
    ) -> Result<(), PeerError> {
        if let Some(p) = self.peers.get(&id) {
            if p.endpoint == endpoint {
                return Ok(());
            }
            // Same UUID, another mailbox: the peer restarted before we noticed.
            self.remove_peer(id);
        }
        if self.peers.len() >= self.cfg.max_peers {
            return Err(PeerError::TooManyPeers {
                peer: id,
                max: self.cfg.max_peers,
            });
        }
        self.peers.insert(
            id,
            Peer {
                endpoint: endpoint.clone(),
                ready: false,
                name: String::new(),
                headers: Vec::new(),
                groups: BTreeSet::new(),
                status: 0,
                sent_sequence: 0,
                want_sequence: 0,
                last_seen: now,
                evasive_reported: false,
                silent_reported: false,
                blocked_since: None,
                curve_key,
                leaving_since: None,
                answers: 0,
            },
        );
        if let Some(groups_then) = self.probes.remove(&endpoint) {
            // Our HELLO already went out on the probe, as message 1; tell the peer what changed
            // in our groups since.
            if let Some(p) = self.peers.get_mut(&id) {
                p.sent_sequence = 1;
            }
            self.out.push_back(Output::Adopt { endpoint, peer: id });
            let status = self.status;
            let joined: Vec<ShortStr> = self
                .own_groups
                .iter()
                .filter(|g| !groups_then.contains(g))
                .cloned()
                .collect();
            for group in joined {
                self.send(id, Body::Join { group, status });
            }
            for group in groups_then {
                if !self.own_groups.contains(&group) {
                    self.send(id, Body::Leave { group, status });
                }
            }
            return Ok(());
        }
        self.out.push_back(Output::Connect {
            peer: id,
            endpoint,
            server_key: curve_key,
        });
        let hello = self.hello();
        self.send(id, Body::Hello(hello));
        Ok(())
    }

    /// The peers with this CURVE key whose HELLO has not arrived yet.
    fn pending_with_key<'a>(&'a self, key: &'a [u8; 32]) -> impl Iterator<Item = Uuid> + 'a {
        self.peers
            .iter()
            .filter(move |(_, p)| !p.ready && p.curve_key.as_ref() == Some(key))
            .map(|(id, _)| *id)
    }

    fn remove_peer(&mut self, id: Uuid) {
        let Some(p) = self.peers.remove(&id) else {
            return;
        };
        for g in &p.groups {
            self.drop_from_group(g, id);
        }
        self.out.push_back(Output::Disconnect { peer: id });
        if p.ready {
            self.event(Event::Exit {
                peer: id,
                name: p.name,
            });
        }
        if self.known.contains(&p.endpoint) && self.phase == Phase::Running {
            self.probe(p.endpoint);
        }
    }

    fn drop_from_group(&mut self, group: &str, id: Uuid) {
        if let Some(members) = self.peer_groups.get_mut(group) {
            members.remove(&id);
            if members.is_empty() {
                self.peer_groups.remove(group);
            }
        }
    }

    fn send(&mut self, id: Uuid, body: Body) {
        let Some(p) = self.peers.get_mut(&id) else {
            return;
        };
        p.sent_sequence = p.sent_sequence.wrapping_add(1);
        let msg = Message {
            sequence: p.sent_sequence,
            body,
        };
        self.out.push_back(Output::Send {
            peer: id,
            frames: msg.to_frames(),
        });
    }

    fn send_all(&mut self, body: impl Fn() -> Body) {
        let mut ids: Vec<Uuid> = self.peers.keys().copied().collect();
        ids.sort();
        for id in ids {
            self.send(id, body());
        }
    }

    fn event(&mut self, e: Event) {
        self.out.push_back(Output::Event(e));
    }
}

fn is_hello(msg: &Message) -> bool {
    matches!(msg.body, Body::Hello(_))
}

/// The mailbox a beacon from `from` with `port` names.
fn beacon_endpoint(from: IpAddr, port: u16) -> String {
    match from {
        IpAddr::V4(ip) => format!("tcp://{ip}:{port}"),
        IpAddr::V6(ip) => format!("tcp://[{ip}]:{port}"),
    }
}

fn refresh(p: &mut Peer, now: Instant) {
    p.leaving_since = None;
    p.last_seen = now;
    p.evasive_reported = false;
    p.silent_reported = false;
}
