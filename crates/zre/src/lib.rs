//! ZRE nodes on tokio: the thin driver of `dafka-zre-proto`'s [`Node`] state machine.
//!
//! Each [`ZreNode`] is one task owning a UDP socket for beacons (bound to the beacon port with
//! `SO_REUSEADDR` and `SO_REUSEPORT`, so several nodes on one host, or in one process, share
//! it), a ROUTER mailbox on an ephemeral TCP port, one DEALER per peer (identity `0x01` + this
//! node's UUID) and one timer, set to the state machine's next deadline. Everything the state
//! machine decides (beacons, connections, frames, events) it carries out; it parses nothing
//! itself.
//!
//! * Without beacons ([`Options::without_beacons`]) no UDP socket is opened; nodes are found
//!   through [`Options::known_endpoints`] (a DEALER to each, sending HELLO, reconnecting until a
//!   node listens there) and through the HELLOs of the nodes that know this one.
//! * Beacons go to [`Options::broadcast`] only. Beacons that do not decode (wrong size, wrong
//!   header) and this node's own are dropped silently.
//! * A DEALER's send queue that is full makes the message drop there (never waiting), and the
//!   state machine drops the peer if the queue stays full for its `send_stall` timeout; the
//!   queue draining (the ZMTP `SendQueueDrained` event) clears that.
//! * Events reach the application through [`ZreNode::recv`], a bounded queue: while it is
//!   full the node stops reading its sockets.
//! * In CURVE mode ([`Options::with_curve`], 43/ZRE version 3, as zyre with a certificate) the
//!   node beacons its public key (54-byte beacons), its mailbox is a CURVE server with its key
//!   pair (and [`Options::curve_allowed`] or [`Options::curve_authenticator`] as
//!   authenticator, the same one that judges beacons and HELLOs), each DEALER a CURVE client with
//!   the peer's key from its beacon (or its HELLO's `X-PUBLICKEY`) as server key. 22-byte
//!   beacons are ignored, plaintext clients fail the handshake, and the `inproc://` shortcut
//!   between nodes of one process is off (it would skip the handshake). The mailbox hands
//!   the state machine, with each message, the key its connection authenticated with
//!   (`router_peer_key`), so a node cannot say HELLO or talk under another node's key or
//!   UUID ([`Node::handle_authenticated_message`]). Known endpoints and
//!   gossip carry no keys: [`ZreNode::start`] refuses them with CURVE.
//!
//! ```no_run
//! use dafka_zre::{Options, ZreNode};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), dafka_zre::Error> {
//! let mut node = ZreNode::start(Options::loopback(5670).with_name("doc")).await?;
//! node.join("CHAT").await?;
//! while let Some(event) = node.recv().await {
//!     println!("{event:?}");
//! }
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dafka_zmtp::{
    Authenticator, CurveKeyPair, MechanismConfig, Message, Socket, SocketEvent, SocketType,
    local::LocalAlias,
};
use dafka_zre_proto::{Beacon, Config, Curve, Output, ShortStr, Uuid};
use thiserror::Error;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};

pub use dafka_zre_proto::{CallerError, Event, Node, Uuid as PeerId};

/// Default UDP port of ZRE beacons (IANA "zre-disc").
pub const DEFAULT_PORT: u16 = 5670;

/// How long a closed DEALER may still flush (a GOODBYE at stop).
const DEALER_LINGER: Duration = Duration::from_millis(200);

/// The longest wait between a DEALER's reconnection attempts (from 100 ms, doubling).
const DEALER_RECONNECT_MAX: Duration = Duration::from_secs(2);

/// What went wrong.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// A socket could not be set up.
    #[error("ZRE socket: {0}")]
    Io(#[from] std::io::Error),
    /// The ZMTP layer refused (bind, socket options).
    #[error("ZRE mailbox: {0}")]
    Zmtp(#[from] dafka_zmtp::Error),
    /// The caller's mistake (a name too long, an unknown peer, a bad timeout).
    #[error(transparent)]
    Caller(#[from] CallerError),
    /// The node has stopped.
    #[error("the ZRE node has stopped")]
    Stopped,
}

/// A node's settings. [`Options::loopback`] beacons on `127.255.255.255` only,
/// [`Options::interface`] on an interface chosen by name or address, [`Options::on`] on the
/// interface address and broadcast address given.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// The address peers reach the mailbox at (announced in HELLO as `tcp://ip:port`).
    pub ip: IpAddr,
    /// Where beacons go: a broadcast address, or a multicast group (IPv4, or IPv6 such as
    /// `ff02::1`), with the beacon port.
    pub broadcast: SocketAddr,
    /// The interface's index, for IPv6 multicast (0: let the kernel choose).
    pub interface_index: u32,
    /// This node's id (default: 16 random bytes).
    pub uuid: Option<[u8; 16]>,
    /// The node's name (default: first six hex characters of its UUID).
    pub name: Option<String>,
    /// Headers announced in HELLO.
    pub headers: Vec<(String, String)>,
    /// Beacon interval (1 s).
    pub interval: Duration,
    /// Evasive, silent and expired timeouts (5 s, 10 s, 30 s).
    pub timeouts: (Duration, Duration, Duration),
    /// How long a peer's send queue may stay full (5 s).
    pub send_stall: Duration,
    /// Messages queued per peer before its queue counts as full (1000).
    pub sndhwm: usize,
    /// Events queued for the application before the node stops reading (1024).
    pub event_queue: usize,
    /// Whether to beacon over UDP (yes). Without, no UDP socket is opened at all and peers are
    /// found through [`Options::known_endpoints`] and their HELLOs.
    pub beacons: bool,
    /// Mailboxes (`tcp://ip:port`) of nodes to find without beacons.
    pub known_endpoints: Vec<String>,
    /// Whether this node is a gossip hub (no): it tells every peer of every other, so nodes
    /// that know only the hub's mailbox mesh fully (`dafka_zre_proto::gossip`).
    pub gossip_hub: bool,
    /// Whether DEALERs to nodes of this process go through `inproc://` (yes): no TCP
    /// connection and no descriptor per pair. Off, every peer is reached over TCP (to measure
    /// or test the TCP path between nodes of one process).
    pub local_inproc: bool,
    /// CURVE mode: this node's key pair (`None`: plaintext, the default).
    pub curve: Option<CurveKeyPair>,
    /// In CURVE mode, the peer public keys allowed (`None`: any peer that knows this node's
    /// public key). Peers with other keys are refused by the mailbox and their beacons and
    /// HELLOs ignored. Not together with [`Options::curve_authenticator`]
    /// ([`ZreNode::start`] refuses both).
    pub curve_allowed: Option<Vec<[u8; 32]>>,
    /// In CURVE mode, an authenticator deciding on peer keys instead of
    /// [`Options::curve_allowed`] (a Dafka cluster's allow-list): the mailbox's, and peers
    /// whose key it refuses are ignored too. One authenticator judges both, so they cannot
    /// disagree.
    pub curve_authenticator: Option<Authenticator>,
}

/// The IPv4 broadcast address of loopback (`lo` has no broadcast flag, yet the kernel delivers
/// a datagram sent there to every socket bound to the port on this host).
pub const LOOPBACK_BROADCAST: Ipv4Addr = Ipv4Addr::new(127, 255, 255, 255);

/// The IPv6 all-nodes link-local multicast group, where IPv6 beacons go by default.
pub const IPV6_ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x0001);

impl Options {
    /// On loopback: mailbox on 127.0.0.1, beacons to `127.255.255.255:port`, which reaches every
    /// node bound to `port` on this host and nothing else.
    pub fn loopback(port: u16) -> Self {
        Options::on(
            Ipv4Addr::LOCALHOST,
            SocketAddrV4::new(LOOPBACK_BROADCAST, port),
        )
    }

    /// On the interface with address `ip`, beaconing to `broadcast` (its subnet's broadcast
    /// address and the beacon port).
    pub fn on(ip: Ipv4Addr, broadcast: SocketAddrV4) -> Self {
        Options {
            ip: IpAddr::V4(ip),
            broadcast: SocketAddr::V4(broadcast),
            interface_index: 0,
            uuid: None,
            name: None,
            headers: Vec::new(),
            interval: Duration::from_secs(1),
            timeouts: (
                Duration::from_secs(5),
                Duration::from_secs(10),
                Duration::from_secs(30),
            ),
            send_stall: Duration::from_secs(5),
            sndhwm: 1000,
            event_queue: 1024,
            beacons: true,
            known_endpoints: Vec::new(),
            gossip_hub: false,
            local_inproc: true,
            curve: None,
            curve_allowed: None,
            curve_authenticator: None,
        }
    }

    /// On the interface named `spec` (`"eth0"`, `"lo"`) or holding the address `spec`
    /// (`"10.0.0.1"`, `"fd00::1"`), beaconing to `port`. A name picks the interface's first
    /// IPv4 address, or its first IPv6 one when `ipv6`; an address picks its own family.
    /// IPv4 beacons go to the interface's broadcast address (`127.255.255.255` on loopback),
    /// IPv6 ones to [`IPV6_ALL_NODES`] on that interface.
    pub fn interface(spec: &str, port: u16, ipv6: bool) -> Result<Self, Error> {
        let interfaces = if_addrs::get_if_addrs()?;
        let by_addr: Option<IpAddr> = spec.parse().ok();
        let matching = |i: &&if_addrs::Interface| match by_addr {
            Some(a) => i.ip() == a,
            None => i.name == spec && i.ip().is_ipv6() == ipv6,
        };
        // By name, an IPv6 address peers can reach without a scope comes first: a link-local
        // one would be announced in HELLO, and `tcp://[fe80::..]:port` names no interface.
        let link_local = |i: &&if_addrs::Interface| match i.ip() {
            IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
            IpAddr::V4(_) => false,
        };
        let found = interfaces
            .iter()
            .filter(matching)
            .find(|i| !link_local(i))
            .or_else(|| interfaces.iter().find(matching));
        let Some(found) = found else {
            let known: Vec<String> = interfaces
                .iter()
                .map(|i| format!("{} {}", i.name, i.ip()))
                .collect();
            return Err(Error::Caller(CallerError::Config(if by_addr.is_some() {
                "no interface holds that address"
            } else if ipv6 {
                "no interface of that name has an IPv6 address"
            } else {
                "no interface of that name has an IPv4 address"
            })))
            .inspect_err(|_| tracing::debug!("ZRE interfaces: {known:?}"));
        };
        Ok(Self::for_addr(&found.addr, found.index.unwrap_or(0), port))
    }

    /// On the first interface that is up, not loopback and has an IPv4 broadcast address, as
    /// zyre chooses (the top complaint of its users being that this guess is wrong on
    /// machines with several interfaces: name one with [`Options::interface`] there).
    pub fn default_interface(port: u16) -> Result<Self, Error> {
        let interfaces = if_addrs::get_if_addrs()?;
        interfaces
            .iter()
            .find(|i| {
                !i.is_loopback()
                    && matches!(&i.addr, if_addrs::IfAddr::V4(v4) if v4.broadcast.is_some())
            })
            .map(|i| Self::for_addr(&i.addr, i.index.unwrap_or(0), port))
            .ok_or(Error::Caller(CallerError::Config(
                "no interface is up with an IPv4 broadcast address: name one",
            )))
    }

    fn for_addr(addr: &if_addrs::IfAddr, index: u32, port: u16) -> Self {
        match addr {
            if_addrs::IfAddr::V4(v4) => {
                // The subnet's broadcast address, from the netmask, as zyre sends to (and
                // 127.255.255.255 on loopback). Not the interface's own broadcast field: an
                // address added without `brd` has none, and getifaddrs then reports the
                // interface's own address there.
                let broadcast = Ipv4Addr::from(u32::from(v4.ip) | !u32::from(v4.netmask));
                Options::on(v4.ip, SocketAddrV4::new(broadcast, port))
            }
            if_addrs::IfAddr::V6(v6) => {
                let mut o = Options::loopback(port);
                o.ip = IpAddr::V6(v6.ip);
                o.broadcast = SocketAddr::V6(SocketAddrV6::new(IPV6_ALL_NODES, port, 0, index));
                o.interface_index = index;
                o
            }
        }
    }

    /// Beacons to the multicast `group` instead (IPv4 such as `225.25.25.25`, or IPv6 such
    /// as `ff02::1`, of the same family as the interface), same port. The beacon socket joins
    /// the group on the interface.
    pub fn with_multicast(mut self, group: IpAddr) -> Result<Self, Error> {
        if !group.is_multicast() || group.is_ipv4() != self.ip.is_ipv4() {
            return Err(Error::Caller(CallerError::Config(
                "the multicast group must be a multicast address of the interface's family",
            )));
        }
        self.broadcast = match group {
            IpAddr::V4(g) => SocketAddr::V4(SocketAddrV4::new(g, self.broadcast.port())),
            IpAddr::V6(g) => SocketAddr::V6(SocketAddrV6::new(
                g,
                self.broadcast.port(),
                0,
                self.interface_index,
            )),
        };
        Ok(self)
    }

    /// With this UUID rather than a random one.
    pub fn with_uuid(mut self, uuid: [u8; 16]) -> Self {
        self.uuid = Some(uuid);
        self
    }

    /// With a name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// With one more header.
    pub fn with_header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((key.into(), value.into()));
        self
    }

    /// With another beacon interval.
    pub fn with_interval(mut self, d: Duration) -> Self {
        self.interval = d;
        self
    }

    /// With other evasive, silent and expired timeouts.
    pub fn with_timeouts(mut self, evasive: Duration, silent: Duration, expired: Duration) -> Self {
        self.timeouts = (evasive, silent, expired);
        self
    }

    /// With another send-stall timeout.
    pub fn with_send_stall(mut self, d: Duration) -> Self {
        self.send_stall = d;
        self
    }

    /// Without UDP beacons: discovery through known endpoints only (networks where broadcast
    /// does not pass). The mailbox still binds to [`Options::ip`].
    pub fn without_beacons(mut self) -> Self {
        self.beacons = false;
        self
    }

    /// With one more known endpoint to find a node at, beacons or not.
    pub fn with_known_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.known_endpoints.push(endpoint.into());
        self
    }

    /// As a gossip hub: peers that know only this node's mailbox learn of each other.
    pub fn with_gossip_hub(mut self) -> Self {
        self.gossip_hub = true;
        self
    }

    /// With peers of this process reached over TCP too, not `inproc://`.
    pub fn without_local_inproc(mut self) -> Self {
        self.local_inproc = false;
        self
    }

    /// In CURVE mode with this key pair (43/ZRE version 3).
    pub fn with_curve(mut self, keypair: CurveKeyPair) -> Self {
        self.curve = Some(keypair);
        self
    }

    /// In CURVE mode, talking only to peers with these public keys.
    pub fn with_curve_allowed(mut self, keys: impl IntoIterator<Item = [u8; 32]>) -> Self {
        self.curve_allowed = Some(keys.into_iter().collect());
        self
    }

    /// In CURVE mode, with this authenticator on the mailbox, deciding on peers' beacons and
    /// HELLOs too.
    pub fn with_curve_authenticator(mut self, authenticator: Authenticator) -> Self {
        self.curve_authenticator = Some(authenticator);
        self
    }

    /// With another per-peer send queue size.
    pub fn with_sndhwm(mut self, n: usize) -> Self {
        self.sndhwm = n;
        self
    }

    fn config(&self, uuid: Uuid) -> Result<Config, Error> {
        let text =
            |what, s: &str| ShortStr::new(s).map_err(|error| CallerError::String { what, error });
        let mut cfg = Config::new(uuid)
            .with_beacon_interval(self.interval)
            .with_timeouts(self.timeouts.0, self.timeouts.1, self.timeouts.2)
            .with_send_stall(self.send_stall)
            .with_beacons(self.beacons)
            .with_gossip_hub(self.gossip_hub)
            .with_curve(self.curve.as_ref().map(|k| {
                let mode = Curve::new(*k.public());
                match self.curve_peers() {
                    Some(auth) => mode.with_authenticator(auth),
                    None => mode,
                }
            }));
        if let Some(name) = &self.name {
            cfg = cfg.with_name(text("name", name)?);
        }
        for (k, v) in &self.headers {
            cfg = cfg.with_header(text("header key", k)?, v.clone());
        }
        Ok(cfg)
    }

    /// The one authenticator of CURVE mode, from [`Options::curve_authenticator`] or
    /// [`Options::curve_allowed`]: the mailbox's, and the judge of beacons and HELLOs.
    fn curve_peers(&self) -> Option<Authenticator> {
        match (&self.curve_authenticator, &self.curve_allowed) {
            (Some(auth), _) => Some(auth.clone()),
            (None, Some(keys)) => Some(Authenticator::curve_keys(keys.iter().copied())),
            (None, None) => None,
        }
    }

    fn known(&self) -> Result<Vec<ShortStr>, Error> {
        if self.curve_allowed.is_some() && self.curve_authenticator.is_some() {
            return Err(Error::Caller(CallerError::Config(
                "CURVE: give curve_allowed or curve_authenticator, not both",
            )));
        }
        if self.curve.is_some() && !self.known_endpoints.is_empty() {
            return Err(Error::Caller(CallerError::Config(
                "CURVE mode takes no known endpoints: an endpoint carries no public key",
            )));
        }
        self.known_endpoints
            .iter()
            .map(|e| {
                ShortStr::new(e.as_str()).map_err(|error| {
                    Error::Caller(CallerError::String {
                        what: "known endpoint",
                        error,
                    })
                })
            })
            .collect()
    }
}

type Query = Box<dyn FnOnce(&Node) + Send>;

enum Command {
    Join(ShortStr),
    Leave(String),
    Shout(ShortStr, Vec<Bytes>),
    /// Sent only to a peer the ready set held; it may have left since (then it is dropped).
    Whisper(Uuid, Vec<Bytes>),
    Query(Query),
    Stop,
}

/// A running ZRE node.
pub struct ZreNode {
    uuid: Uuid,
    endpoint: String,
    commands: mpsc::Sender<Command>,
    /// Peers that said HELLO (kept by the task from the ENTER and EXIT it reports).
    ready: Arc<Mutex<HashSet<Uuid>>>,
    /// Behind an async mutex so that [`ZreNode::next_event`] and [`ZreNode::close`] work from
    /// a shared reference (the Python bindings hold the node in an `Arc`).
    events: tokio::sync::Mutex<mpsc::Receiver<Event>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl ZreNode {
    /// Binds the beacon port and the mailbox, and starts beaconing (the first beacon at once).
    pub async fn start(options: Options) -> Result<ZreNode, Error> {
        let uuid = Uuid::from_bytes(options.uuid.unwrap_or_else(rand::random));
        let mut node = Node::new(options.config(uuid)?)?;
        for endpoint in options.known()? {
            node.connect_endpoint(endpoint);
        }
        let udp = match options.beacons {
            true => Some(beacon_socket(&options)?),
            false => None,
        };
        if options
            .curve
            .as_ref()
            .is_some_and(|k| k.public()[0] == 0x00)
        {
            // zyre_node_recv_beacon drops version-3 beacons whose key starts with 0.
            tracing::warn!(
                "ZRE CURVE public key starts with 0x00: zyre peers ignore this node's beacons \
                 (dafka peers do not); use another key pair to talk to zyre"
            );
        }
        let mailbox = match &options.curve {
            Some(keypair) => MechanismConfig::CurveServer {
                keypair: keypair.clone(),
                authenticator: options
                    .curve_peers()
                    .unwrap_or_else(Authenticator::allow_all),
            },
            None => MechanismConfig::Null,
        };
        let router = Socket::new(
            SocketType::Router,
            dafka_zmtp::Options::default()
                .with_router_handover(true)
                // In CURVE mode each message names the key its connection authenticated with.
                .with_router_peer_key(options.curve.is_some())
                .with_mechanism(mailbox),
        )?;
        let endpoint = router
            .bind(&match options.ip {
                IpAddr::V4(ip) => format!("tcp://{ip}:0"),
                IpAddr::V6(ip) => format!("tcp://[{ip}]:0"),
            })
            .await?;
        let port = endpoint
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("no port in {endpoint}")))?;
        let announced = ShortStr::new(endpoint.clone()).map_err(|error| CallerError::String {
            what: "endpoint",
            error,
        })?;
        // Nodes of this process reach the mailbox through its inproc alias (`mailbox_alias`).
        let alias = mailbox_alias(&router, &endpoint, &options, uuid, port).await?;
        node.start(announced, port, Instant::now())?;
        let (commands, command_rx) = mpsc::channel(256);
        let (event_tx, events) = mpsc::channel(options.event_queue.max(1));
        let (peer_tx, peer_rx) = mpsc::channel(1024);
        let ready = Arc::new(Mutex::new(HashSet::new()));
        let driver = Driver {
            local_inproc: options.local_inproc && options.curve.is_none(),
            curve: options.curve.clone(),
            alias,
            ready: Arc::clone(&ready),
            node,
            udp,
            router,
            broadcast: options.broadcast,
            sndhwm: options.sndhwm,
            dealers: HashMap::new(),
            probes: HashMap::new(),
            events: event_tx,
            peer_tx,
            peer_rx,
            drops: dafka_wire::LogWindow::default(),
        };
        let task = tokio::spawn(driver.run(command_rx));
        Ok(ZreNode {
            uuid,
            endpoint,
            commands,
            events: tokio::sync::Mutex::new(events),
            task: Mutex::new(Some(task)),
            ready,
        })
    }

    /// This node's id.
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    /// This node's mailbox, `tcp://ip:port`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The next event; `None` once the node has stopped and every event was taken.
    pub async fn recv(&mut self) -> Option<Event> {
        self.events.get_mut().recv().await
    }

    /// [`ZreNode::recv`] from a shared reference: callers take events in call order.
    /// Cancel-safe (an event is either returned or stays queued).
    pub async fn next_event(&self) -> Option<Event> {
        self.events.lock().await.recv().await
    }

    /// The next event if one is queued now; never waits. `None` also while another caller
    /// is waiting in [`ZreNode::next_event`].
    pub fn try_next_event(&self) -> Option<Event> {
        self.events.try_lock().ok()?.try_recv().ok()
    }

    /// Joins `group`.
    pub async fn join(&self, group: &str) -> Result<(), Error> {
        let group = ShortStr::new(group).map_err(|error| CallerError::String {
            what: "group",
            error,
        })?;
        self.command(Command::Join(group)).await
    }

    /// Leaves `group`.
    pub async fn leave(&self, group: &str) -> Result<(), Error> {
        self.command(Command::Leave(group.to_owned())).await
    }

    /// Sends `frames` to every peer in `group`.
    pub async fn shout(&self, group: &str, frames: Vec<Bytes>) -> Result<(), Error> {
        let group = ShortStr::new(group).map_err(|error| CallerError::String {
            what: "group",
            error,
        })?;
        self.command(Command::Shout(group, frames)).await
    }

    /// Sends `frames` to `peer`.
    pub async fn whisper(&self, peer: Uuid, frames: Vec<Bytes>) -> Result<(), Error> {
        // Checked against the peers that said HELLO without a round trip to the node's task
        // (which cost 5x in WHISPER throughput); a peer leaving meanwhile drops the message,
        // as a peer leaving just after it was sent would.
        if !lock(&self.ready).contains(&peer) {
            return Err(CallerError::UnknownPeer(peer).into());
        }
        self.command(Command::Whisper(peer, frames)).await
    }

    /// Runs `f` on the state machine, in the node's task (peers, groups, headers).
    pub async fn query<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Node) -> R + Send + 'static,
    ) -> Result<R, Error> {
        let (tx, rx) = oneshot::channel();
        self.command(Command::Query(Box::new(move |n| {
            let _ = tx.send(f(n));
        })))
        .await?;
        rx.await.map_err(|_| Error::Stopped)
    }

    /// Peers that said HELLO.
    pub async fn peers(&self) -> Result<Vec<Uuid>, Error> {
        self.query(Node::peers).await
    }

    /// Stops: a port-0 beacon, every connection closed, then [`Event::Stop`] is the last event.
    pub async fn stop(&mut self) {
        self.close().await;
    }

    /// [`ZreNode::stop`] from a shared reference; returns the events that were still queued,
    /// [`Event::Stop`] last (unless another caller took them first).
    pub async fn close(&self) -> Vec<Event> {
        let mut left = Vec::new();
        let _ = self.commands.send(Command::Stop).await;
        let task = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut task) = task {
            // Keep draining events so a full event queue cannot hold the task up.
            loop {
                tokio::select! {
                    _ = &mut task => break,
                    e = self.next_event() => match e {
                        Some(e) => left.push(e),
                        None => { let _ = (&mut task).await; break; }
                    },
                }
            }
        }
        while let Some(e) = self.try_next_event() {
            left.push(e);
        }
        left
    }

    /// Whether the node's task has ended (after [`ZreNode::close`], or a closed mailbox).
    pub fn is_stopped(&self) -> bool {
        self.commands.is_closed()
    }

    async fn command(&self, c: Command) -> Result<(), Error> {
        self.commands.send(c).await.map_err(|_| Error::Stopped)
    }
}

impl Drop for ZreNode {
    fn drop(&mut self) {
        // Without `stop`, the task ends when it sees the command channel closed (it then stops
        // politely too, if the runtime still runs).
        let _ = self.commands.try_send(Command::Stop);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The mailbox's inproc alias (`dafka_zmtp::local`): nodes of this process reach it there, so
/// a mesh of one process costs no TCP connection and no descriptor per pair (over TCP a full
/// mesh of 100 nodes needs 19 800 descriptors, two connections per pair with both ends here,
/// over the 20 000 of a common `ulimit -n`). None in CURVE mode: an inproc pipe has no
/// handshake, so no CURVE either.
async fn mailbox_alias(
    router: &Socket,
    endpoint: &str,
    options: &Options,
    uuid: Uuid,
    port: u16,
) -> Result<Option<LocalAlias>, Error> {
    if options.curve.is_some() {
        return Ok(None);
    }
    let name = format!("zre-mailbox-{uuid}-{port}");
    Ok(Some(LocalAlias::bind(router, endpoint, &name).await?))
}

/// The UDP socket beacons are sent and received on, shared by every node of the host:
/// bound to the wildcard address and the beacon port with `SO_REUSEADDR` and `SO_REUSEPORT`
/// (the kernel hands a broadcast or multicast datagram to every socket bound so). For
/// multicast it joins the group on the interface and sends there, looping its datagrams back
/// so nodes of this host see each other (own beacons are dropped by UUID).
///
/// Beacons leave from the interface's address when it is IPv6 (a link-local source would
/// reach peers without its scope, and they connect to the beacon's source address): a second
/// socket bound to `[ip]:0` sends them.
fn beacon_socket(options: &Options) -> Result<Beacons, Error> {
    use socket2::{Domain, Protocol, Socket as RawSocket, Type};
    let port = options.broadcast.port();
    let v6 = options.broadcast.is_ipv6();
    let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
    let s = RawSocket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    #[cfg(unix)]
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    match (options.broadcast, options.ip) {
        (SocketAddr::V4(dest), IpAddr::V4(ip)) => {
            s.set_broadcast(true)?;
            if dest.ip().is_multicast() {
                s.join_multicast_v4(dest.ip(), &ip)?;
                s.set_multicast_if_v4(&ip)?;
                s.set_multicast_loop_v4(true)?;
                s.set_multicast_ttl_v4(1)?;
            }
            s.bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)).into())?;
        }
        (SocketAddr::V6(dest), _) => {
            s.set_only_v6(true)?;
            s.join_multicast_v6(dest.ip(), options.interface_index)?;
            s.set_multicast_if_v6(options.interface_index)?;
            s.set_multicast_loop_v6(true)?;
            s.set_multicast_hops_v6(1)?;
            s.bind(&SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)).into())?;
        }
        _ => {
            return Err(Error::Caller(CallerError::Config(
                "the beacon address and the interface address differ in family",
            )));
        }
    }
    let recv = UdpSocket::from_std(s.into())?;
    let send = match options.ip {
        IpAddr::V6(ip) => {
            let t = RawSocket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
            t.set_only_v6(true)?;
            t.set_multicast_if_v6(options.interface_index)?;
            t.set_multicast_loop_v6(true)?;
            t.set_multicast_hops_v6(1)?;
            t.set_nonblocking(true)?;
            t.bind(&SocketAddr::V6(SocketAddrV6::new(ip, 0, 0, options.interface_index)).into())?;
            Some(UdpSocket::from_std(t.into())?)
        }
        IpAddr::V4(_) => None,
    };
    Ok(Beacons { recv, send })
}

/// The beacon socket, and for IPv6 the one beacons leave from.
struct Beacons {
    recv: UdpSocket,
    send: Option<UdpSocket>,
}

impl Beacons {
    fn sender(&self) -> &UdpSocket {
        self.send.as_ref().unwrap_or(&self.recv)
    }
}

struct Driver {
    /// Whether to reach nodes of this process through their `inproc://` names.
    local_inproc: bool,
    /// CURVE mode: this node's key pair, presented by every DEALER.
    curve: Option<CurveKeyPair>,
    /// The mailbox's inproc alias for nodes of this process (none in CURVE mode).
    alias: Option<LocalAlias>,
    node: Node,
    ready: Arc<Mutex<HashSet<Uuid>>>,
    udp: Option<Beacons>,
    router: Socket,
    /// DEALERs opened to known endpoints whose node has not said HELLO yet.
    probes: HashMap<String, Socket>,
    broadcast: SocketAddr,
    sndhwm: usize,
    dealers: HashMap<Uuid, Socket>,
    events: mpsc::Sender<Event>,
    /// DEALER monitor events, forwarded by one small task per peer. Bounded: a forwarder waits
    /// when it is full, and its monitor then drops its oldest events.
    peer_tx: mpsc::Sender<(Uuid, SocketEvent)>,
    peer_rx: mpsc::Receiver<(Uuid, SocketEvent)>,
    /// Messages dropped (a peer's bad or out-of-place input) are logged at most
    /// [`DROPS_LOGGED_PER_SECOND`] a second, then counted.
    drops: dafka_wire::LogWindow,
}

/// Most "ZRE message dropped" lines a node logs at `warn` a second (a peer can send bad
/// messages as fast as it likes; the others go to `debug` and are counted).
pub const DROPS_LOGGED_PER_SECOND: u32 = 10;

impl Driver {
    async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let mut buf = [0u8; 64];
        let mut inbox = Vec::new();
        loop {
            if self.carry_out().await {
                break;
            }
            let deadline = self.node.poll_timeout();
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            };
            let udp = async {
                match &self.udp {
                    Some(udp) => udp.recv.recv_from(&mut buf).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = udp => match r {
                    // A datagram longer than the buffer is cut to 64 bytes, which is no beacon
                    // size either, so it is dropped like any other malformed one.
                    Ok((n, from)) => self.on_datagram(buf.get(..n).unwrap_or(&[]), from.ip()),
                    Err(e) => tracing::warn!("ZRE beacon socket: {e}"),
                },
                r = self.router.recv_many(256, &mut inbox) => match r {
                    Ok(_) => {
                        let now = Instant::now();
                        for msg in inbox.drain(..) {
                            self.on_mailbox(msg, now);
                        }
                    }
                    Err(e) => {
                        tracing::warn!("ZRE mailbox closed: {e}");
                        self.node.stop();
                    }
                },
                c = commands.recv() => match c {
                    Some(c) => self.on_command(c),
                    None => self.node.stop(),
                },
                Some((peer, e)) = self.peer_rx.recv() => self.on_peer_event(peer, e),
                () = sleep => self.node.handle_timeout(Instant::now()),
            }
        }
        self.alias = None;
        for (_, probe) in self.probes.drain() {
            probe.close_in_background_with(Some(Duration::ZERO));
        }
        self.router.close_in_background_with(Some(Duration::ZERO));
    }

    fn on_datagram(&mut self, payload: &[u8], from: IpAddr) {
        // 43/ZRE: "a node that receives an invalid beacon SHALL silently discard it".
        let Ok(beacon) = Beacon::decode(payload) else {
            return;
        };
        if let Err(e) = self.node.handle_beacon(&beacon, from, Instant::now()) {
            tracing::debug!("ZRE beacon from {from}: {e}");
        }
    }

    fn on_mailbox(&mut self, msg: Message, now: Instant) {
        let Some((id, frames)) = msg.frames().split_first() else {
            return;
        };
        // CURVE mode: [routing id, authenticated key, ZRE frames...] (`router_peer_key`).
        let (key, frames) = match (&self.curve, frames.split_first()) {
            (None, _) => (None, frames),
            (Some(_), Some((key, rest))) => (<&[u8; 32]>::try_from(&key[..]).ok(), rest),
            (Some(_), None) => return,
        };
        if let Err(e) = self.node.handle_authenticated_message(id, key, frames, now) {
            match self.drops.admit(now, DROPS_LOGGED_PER_SECOND) {
                Some(0) => tracing::warn!("ZRE message dropped: {e}"),
                Some(n) => tracing::warn!("ZRE message dropped: {e} ({n} more dropped before)"),
                None => tracing::debug!("ZRE message dropped: {e}"),
            }
        }
    }

    fn on_command(&mut self, c: Command) {
        match c {
            Command::Join(g) => self.node.join(g),
            Command::Leave(g) => self.node.leave(&g),
            Command::Shout(g, frames) => self.node.shout(g, frames),
            Command::Whisper(peer, frames) => {
                if let Err(e) = self.node.whisper(peer, frames) {
                    tracing::debug!("ZRE WHISPER dropped: {e}");
                }
            }
            Command::Query(f) => f(&self.node),
            Command::Stop => self.node.stop(),
        }
    }

    fn on_peer_event(&mut self, peer: Uuid, e: SocketEvent) {
        match e {
            SocketEvent::SendQueueFull { .. } => {
                self.node.handle_send_blocked(peer, Instant::now())
            }
            SocketEvent::SendQueueDrained { .. } => self.node.handle_send_drained(peer),
            SocketEvent::HandshakeFailed { reason, .. } => {
                tracing::debug!("ZRE peer {peer}: handshake failed: {reason}");
            }
            _ => {}
        }
    }

    /// Carries out everything the state machine asked for; true once it reported STOP.
    async fn carry_out(&mut self) -> bool {
        let mut stopped = false;
        while let Some(out) = self.node.poll_output() {
            match out {
                Output::Beacon(b) => {
                    let Some(udp) = &self.udp else { continue };
                    if let Err(e) = udp.sender().send_to(&b.encode(), self.broadcast).await {
                        tracing::warn!("ZRE beacon to {}: {e}", self.broadcast);
                    }
                }
                Output::Connect {
                    peer,
                    endpoint,
                    server_key,
                } => {
                    if let Some(dealer) = self.open(&endpoint, server_key).await {
                        self.adopt(peer, dealer);
                    } else {
                        self.node.handle_connection_failed(peer);
                    }
                }
                Output::Probe { endpoint, hello } => {
                    if let Some(dealer) = self.open(&endpoint, None).await {
                        // Queued until a node listens there (the DEALER keeps reconnecting).
                        let _ = dealer.try_send(Message::from(hello));
                        if let Some(old) = self.probes.insert(endpoint, dealer) {
                            old.close_in_background_with(Some(Duration::ZERO));
                        }
                    }
                }
                Output::Adopt { endpoint, peer } => {
                    if let Some(dealer) = self.probes.remove(&endpoint) {
                        self.adopt(peer, dealer);
                    }
                }
                Output::Send { peer, frames } => {
                    let Some(dealer) = self.dealers.get(&peer) else {
                        continue;
                    };
                    if dealer.try_send(Message::from(frames)).is_err() {
                        self.node.handle_send_blocked(peer, Instant::now());
                    }
                }
                Output::Disconnect { peer } => {
                    if let Some(d) = self.dealers.remove(&peer) {
                        d.close_in_background();
                    }
                }
                Output::Event(e) => {
                    match &e {
                        Event::Enter { peer, .. } => {
                            lock(&self.ready).insert(*peer);
                        }
                        Event::Exit { peer, .. } => {
                            lock(&self.ready).remove(peer);
                        }
                        Event::Stop => lock(&self.ready).clear(),
                        _ => {}
                    }
                    stopped |= matches!(e, Event::Stop);
                    if self.events.send(e).await.is_err() && !stopped {
                        // Nobody listens any more: stop.
                        self.node.stop();
                    }
                }
                _ => {}
            }
        }
        stopped
    }

    /// A DEALER with this node's identity, connecting to `endpoint`; in CURVE mode a CURVE
    /// client with `server_key` (a CURVE node never connects without one).
    async fn open(&mut self, endpoint: &str, server_key: Option<[u8; 32]>) -> Option<Socket> {
        let mechanism = match (&self.curve, server_key) {
            (Some(keypair), Some(server_key)) => MechanismConfig::CurveClient {
                keypair: keypair.clone(),
                server_key,
            },
            (None, _) => MechanismConfig::Null,
            (Some(_), None) => {
                tracing::warn!("ZRE DEALER to {endpoint}: no CURVE key for it, not connected");
                return None;
            }
        };
        let options = dafka_zmtp::Options::default()
            .with_mechanism(mechanism)
            .with_routing_id(Some(Bytes::copy_from_slice(
                &self.node.uuid().dealer_identity(),
            )))
            .with_sndhwm(self.sndhwm)
            // A peer that does not listen (gone, or a forged beacon's address) is retried
            // ever less often, not every 100 ms until it expires.
            .with_reconnect_ivl_max(Some(DEALER_RECONNECT_MAX))
            // Long enough to flush a GOODBYE at stop, short enough for a dead peer.
            .with_linger(Some(DEALER_LINGER));
        let dealer = match Socket::new(SocketType::Dealer, options) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("ZRE DEALER to {endpoint}: {e}");
                return None;
            }
        };
        // A node of this process: through its inproc name.
        let local = match self.local_inproc {
            true => dafka_zmtp::local::alias_of(endpoint),
            false => None,
        };
        if let Err(e) = dealer.connect(local.as_deref().unwrap_or(endpoint)).await {
            tracing::warn!("ZRE DEALER to {endpoint}: {e}");
            dealer.close_in_background_with(Some(Duration::ZERO));
            return None;
        }
        Some(dealer)
    }

    /// Makes `dealer` `peer`'s, forwarding its monitor events to the state machine.
    fn adopt(&mut self, peer: Uuid, dealer: Socket) {
        let mut monitor = dealer.monitor(64);
        let tx = self.peer_tx.clone();
        tokio::spawn(async move {
            while let Some(e) = monitor.recv().await {
                if tx.send((peer, e)).await.is_err() {
                    break;
                }
            }
        });
        if let Some(old) = self.dealers.insert(peer, dealer) {
            old.close_in_background_with(Some(Duration::ZERO));
        }
    }
}
