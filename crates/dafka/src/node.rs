//! What every Dafka node has, whatever its role: a beacon PUB and SUB to the towers, its own
//! publisher, a SUB subscriber connected to every peer the towers announce, and one task that
//! drives a role's state machine from those sockets and one timer.
//!
//! | socket | type | bound / connected | subscriptions |
//! |---|---|---|---|
//! | beacon PUB | PUB | connects to each tower's XSUB (`:5556`) | (the tower subscribes `"B"`) |
//! | beacon SUB | SUB | connects to each tower's XPUB (`:5557`) | `"B"`, `"W"` |
//! | publisher | PUB (producer) or XPUB (consumer) | bound on `tcp://host:port` | (peers subscribe) |
//! | subscriber | SUB | connects to every peer's publisher | the role's |
//!
//! The node beacons its publisher at once, again each time a tower's XSUB subscribes to `"B"`
//! (the reference's first beacon is often lost because it goes out before that subscription
//! arrives), every [`NodeConfig::beacon_interval`], and soon after a tower announces a peer it
//! did not know (at most once per [`ANSWER_BEACON_GAP`]): the newcomer then learns of it at
//! once instead of at its next periodic beacon, up to a whole interval later (a Spark task's
//! new reader waited about 1 s for the store's beacon before it could read). A peer not heard
//! of for [`NodeConfig::peer_timeout`] is disconnected. Undecodable input and messages a state
//! machine refuses are dropped, counted in [`NodeStats`] and logged at WARN, at most
//! [`LOG_BURST`] lines a second.
//!
//! Those decisions (the peer table, the beacon and silence timers, `max_peers`) are
//! [`dafka_proto::Discovery`]'s; [`Plumbing`] feeds it the tower beacons and ZRE's changes and
//! executes its actions on the sockets.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use dafka_proto::{
    Action, BeaconMessage, Cause, Discovery, DiscoveryConfig, DiscoveryError, Limits, Message,
    MetaRecordRef, NodeBeacon, NodeId, PeerError, TowerBeacon,
};
use dafka_zmtp::local::LocalAlias;
use dafka_zmtp::{Monitor, Options, Socket, SocketEvent, SocketType, Subscription};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::security::ClusterKeys;

use crate::error::Error;
use crate::zre_discovery::{Change, ZreCluster, ZreDiscovery};

/// Most malformed-input warnings logged per second; the rest are counted and summed up.
pub const LOG_BURST: u32 = 10;

/// The largest frame a publisher accepts from a peer, and one more than its longest
/// subscription prefix. Only subscriptions and cancels come into a publisher (a producer's or
/// store writer's PUB, a consumer's or store reader's XPUB, a node's beacon PUB, the tower's
/// XPUB), as SUBSCRIBE/CANCEL commands or as `01`/`00` + prefix messages, and the longest
/// prefix Dafka makes is 257 bytes (`M` + a topic of 255 + `00`); 1 KiB leaves room. A peer
/// announcing a larger frame is disconnected from its header (logged), so a stranger on a
/// publisher's port holds at most this (or a 64 KiB command, the floor every ZMTP command
/// has) instead of 64 MiB. What the publisher sends is not limited by it.
pub const SUBSCRIPTION_INPUT_MAX: usize = 1024;

/// Most bytes of a beacon frame other than the host or endpoint: `B` or `W`, a 32-hex UUID, a
/// port of at most 5 digits.
const BEACON_SHORT_FIELD: usize = 64;

/// The limits on what comes into a publisher (see [`SUBSCRIPTION_INPUT_MAX`]): one frame of at
/// most 1 KiB.
pub fn subscription_input_limits() -> dafka_zmtp::Limits {
    let max = SUBSCRIPTION_INPUT_MAX as u64;
    dafka_zmtp::Limits::new(
        max,
        dafka_zmtp::Limits::message_cost(1, SUBSCRIPTION_INPUT_MAX),
    )
}

/// The limits on what comes into a beacon socket (the tower's XSUB, node beacons; a node's
/// beacon SUB, tower beacons and the welcome): at most four frames, the host or endpoint at most
/// `limits.max_endpoint` bytes (1024 by default), the others under 64. 1,344 bytes per message
/// by default; a larger frame closes the connection from its header (logged).
pub fn beacon_input_limits(limits: &Limits) -> dafka_zmtp::Limits {
    let frame = limits.max_endpoint.max(BEACON_SHORT_FIELD);
    dafka_zmtp::Limits::new(
        frame as u64,
        dafka_zmtp::Limits::message_cost(4, 3 * BEACON_SHORT_FIELD + frame),
    )
}

/// `options` for a socket whose input is subscriptions only (a publisher).
pub(crate) fn hears_subscriptions(options: Options) -> Options {
    options
        .with_recv_limits(Some(subscription_input_limits()))
        .with_max_subscription_size(SUBSCRIPTION_INPUT_MAX - 1)
}

pub use dafka_proto::ANSWER_BEACON_GAP;
pub(crate) use dafka_proto::split_tcp;

/// Messages taken from a socket per wake-up.
const BATCH: usize = 1024;

/// Messages a role publishes per turn of the loop before the sockets are looked at again
/// (a FETCH answer can be a million DIRECT-RECORDs).
pub(crate) const TRANSMIT_CHUNK: usize = 4096;

/// Where a tower listens: its XSUB (node beacons in) and its XPUB (tower beacons out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TowerAddress {
    /// The tower's XSUB endpoint, `tcp://host:port` (default port 5556).
    pub sub: String,
    /// The tower's XPUB endpoint (default port 5557).
    pub publ: String,
}

impl TowerAddress {
    /// A tower at these two endpoints.
    pub fn new(sub: impl Into<String>, publ: impl Into<String>) -> Self {
        TowerAddress {
            sub: sub.into(),
            publ: publ.into(),
        }
    }

    /// Parses the `towers` form handed between processes: `tcp://host:SUBPORT`, the XPUB being
    /// on the next port; several towers separated by commas.
    pub fn parse_list(towers: &str) -> Result<Vec<TowerAddress>, Error> {
        towers
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| {
                let bad = |reason| Error::Endpoint {
                    endpoint: t.to_owned(),
                    reason,
                };
                let (host, port) = split_tcp(t).ok_or(bad("expected tcp://host:port"))?;
                let next = port
                    .checked_add(1)
                    .ok_or(bad("the XPUB port (the next one) is out of range"))?;
                Ok(TowerAddress::new(t, format!("tcp://{host}:{next}")))
            })
            .collect()
    }
}

/// Settings every node shares.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeConfig {
    /// The towers to beacon to and hear peers from.
    pub towers: Vec<TowerAddress>,
    /// The host the node announces in its beacons: peers connect to its publisher there.
    /// Also where it listens, unless [`bind`](Self::bind) says otherwise. Always sent
    /// explicitly: the reference tower replaces an empty host, and `127.0.0.1`, with its own
    /// first interface. Default `127.0.0.1`; a node other machines reach sets an address they
    /// reach (not a wildcard such as `0.0.0.0`: peers would connect to themselves).
    pub host: String,
    /// Where the publisher listens, when not on [`host`](Self::host): `0.0.0.0` (every
    /// interface) behind a NAT or in a container whose announced address is not its own.
    /// Without towers (ZRE) the publisher binds the ZRE interface's address and this is not
    /// used.
    pub bind: Option<String>,
    /// The publisher's port; 0 (the default) lets the system pick one.
    pub port: u16,
    /// Interval between beacons (the reference: 1 s).
    pub beacon_interval: Duration,
    /// A peer whose beacon is not heard for this long is disconnected (the reference: 4 s).
    pub peer_timeout: Duration,
    /// Most peers connected at once; beacons of further peers are dropped (logged).
    pub max_peers: usize,
    /// Decode limits for every Dafka message and beacon received.
    pub limits: Limits,
    /// Messages queued per subscriber on the publisher before a slow one loses messages (it
    /// FETCHes them again).
    pub sndhwm: usize,
    /// Messages queued on the subscriber before the node stops reading its peers.
    pub rcvhwm: usize,
    /// How long closing the node keeps flushing its publisher.
    pub linger: Duration,
    /// CURVE on every connection of the node (`None`, the default: plaintext, as the
    /// reference speaks).
    pub security: Option<ClusterKeys>,
    /// Discovery through ZRE instead of towers (`towers = "zre://CLUSTER"`); the publisher then
    /// binds to the ZRE interface's address, not [`host`](Self::host).
    pub zre: Option<ZreCluster>,
    /// How long a producer or consumer waits for a tower to answer (its welcome, or any
    /// beacon) before its calls fail with [`Error::NoTower`] (a wrong port, a tower not
    /// running): `poll` and `flush` end then instead of waiting on, `send` refuses records
    /// nobody would carry. `None` (the default): wait for ever, quietly. Counted from the
    /// node's start; once a tower answered it no longer applies. Not used without towers.
    pub connect_timeout: Option<Duration>,
    /// Whether nodes of this process reach each other's publishers through `inproc://`: no
    /// TCP connection, no system call, no framing between a store and the producers and
    /// consumers beside it (about 20% less CPU per record, and a one-process durable rate no
    /// longer bimodal, in the measurements of issue 23). Peers in other processes connect
    /// over TCP as before, and what goes between two nodes is the same messages either way.
    /// Not with [`security`](Self::security): an inproc pipe has no handshake, so a node
    /// with CURVE neither offers nor uses the shortcut. **Off by default**: with it, a
    /// newcomer sometimes never becomes reachable by a store of the same process
    /// (`offsets.rs` `a_newcomer_reaches_a_store_long_before_its_next_beacon` fails about one
    /// run in four), a race not found yet.
    pub local_inproc: bool,
}

impl NodeConfig {
    /// Defaults for a node reaching `towers`: host `127.0.0.1`, any port, beacons every second,
    /// peers dropped after 4 s of silence, 4096 peers, default limits, HWMs of 100 000.
    pub fn new(towers: Vec<TowerAddress>) -> Self {
        let discovery = DiscoveryConfig::new();
        NodeConfig {
            towers,
            host: "127.0.0.1".to_owned(),
            port: 0,
            beacon_interval: discovery.beacon_interval,
            peer_timeout: discovery.peer_timeout,
            max_peers: discovery.max_peers,
            limits: Limits::DEFAULT,
            sndhwm: 100_000,
            rcvhwm: 100_000,
            linger: Duration::from_millis(500),
            security: None,
            zre: None,
            bind: None,
            connect_timeout: None,
            local_inproc: false,
        }
    }

    /// The settings for a `towers` value: `zre://CLUSTER[?options]` for discovery through ZRE
    /// (see [`ZreCluster::parse`]), else [`TowerAddress::parse_list`].
    pub fn from_towers(towers: &str) -> Result<Self, Error> {
        Ok(match ZreCluster::parse(towers)? {
            Some(cluster) => NodeConfig::new(Vec::new()).with_zre(cluster),
            None => NodeConfig::new(TowerAddress::parse_list(towers)?),
        })
    }

    /// Sets [`zre`](Self::zre).
    #[must_use]
    pub fn with_zre(mut self, cluster: ZreCluster) -> Self {
        self.zre = Some(cluster);
        self
    }

    /// Sets [`security`](Self::security).
    #[must_use]
    pub fn with_security(mut self, keys: Option<ClusterKeys>) -> Self {
        self.security = keys;
        self
    }

    /// Sets [`host`](Self::host).
    #[must_use]
    pub fn with_host(mut self, host: impl Into<String>) -> Self {
        self.host = host.into();
        self
    }

    /// Sets [`bind`](Self::bind).
    #[must_use]
    pub fn with_bind(mut self, bind: Option<String>) -> Self {
        self.bind = bind;
        self
    }

    /// Sets [`local_inproc`](Self::local_inproc).
    #[must_use]
    pub fn with_local_inproc(mut self, local: bool) -> Self {
        self.local_inproc = local;
        self
    }

    /// Sets [`connect_timeout`](Self::connect_timeout).
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The towers, as `towers` strings are written (`tcp://host:SUBPORT`, comma-separated).
    pub fn towers_text(&self) -> String {
        let subs: Vec<&str> = self.towers.iter().map(|t| t.sub.as_str()).collect();
        subs.join(",")
    }

    /// Sets [`port`](Self::port).
    #[must_use]
    pub fn with_port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Sets [`beacon_interval`](Self::beacon_interval).
    #[must_use]
    pub fn with_beacon_interval(mut self, interval: Duration) -> Self {
        self.beacon_interval = interval;
        self
    }

    /// Sets [`peer_timeout`](Self::peer_timeout).
    #[must_use]
    pub fn with_peer_timeout(mut self, timeout: Duration) -> Self {
        self.peer_timeout = timeout;
        self
    }

    /// Sets [`max_peers`](Self::max_peers).
    #[must_use]
    pub fn with_max_peers(mut self, max: usize) -> Self {
        self.max_peers = max;
        self
    }

    /// Sets [`limits`](Self::limits).
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    fn validate(&self) -> Result<(), Error> {
        let bad = |reason| Err(Error::Caller(dafka_proto::CallerError::Config(reason)));
        let unbracketed = self.host.trim_start_matches('[').trim_end_matches(']');
        let wildcard = unbracketed
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
        if self.host.is_empty() || self.host == "*" || wildcard {
            return bad(
                "host is what the node announces: it must name an address peers can reach, not \
                 a wildcard (bind sets where it listens)",
            );
        }
        if self.bind.as_deref().is_some_and(str::is_empty) {
            return bad("bind must name an address to listen on (or be left unset: the host)");
        }
        self.discovery().validate().map_err(Error::Caller)
    }

    /// The settings of the node's [`Discovery`].
    fn discovery(&self) -> DiscoveryConfig {
        let mut c = DiscoveryConfig::new();
        c.beacon_interval = self.beacon_interval;
        c.peer_timeout = self.peer_timeout;
        c.max_peers = self.max_peers;
        c
    }
}

/// A new node id: 16 bytes from the operating system's CSPRNG (`getrandom(2)` through
/// rand's `OsRng`), read afresh for every id.
///
/// Partition ids must never repeat: a producer's id is its partition, and a store appends a
/// record only if its offset continues that partition. A user-space generator seeded once
/// would hand a forked child (Python `multiprocessing`, Spark workers) the parent's next ids;
/// the kernel's generator does not, and its 128 bits make a collision as likely as guessing a
/// key. Ids are public on the wire, so secrecy is not the point, uniqueness is.
pub fn new_node_id() -> Result<NodeId, Error> {
    use rand::TryRngCore;
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| Error::Random(std::io::Error::other(e)))?;
    Ok(NodeId::from_bytes(bytes))
}

/// Counters of input a node dropped. Shared with the node's handle.
#[derive(Debug, Default)]
pub struct NodeStats {
    malformed: AtomicU64,
    refused: AtomicU64,
    peers: AtomicU64,
    /// Notified when `peers` changes.
    peers_changed: Notify,
    tower_answered: AtomicBool,
}

impl NodeStats {
    /// Messages that did not decode (on any socket).
    pub fn malformed(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }

    /// Decoded messages the state machine refused (not for this node, wrong topic, an ACK
    /// beyond the head, too many partitions).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    pub(crate) fn count_malformed(&self) {
        self.malformed.fetch_add(1, Ordering::Relaxed);
    }

    /// Peers connected now.
    pub fn peers(&self) -> u64 {
        self.peers.load(Ordering::Relaxed)
    }

    /// Waits until the count of [`peers`](Self::peers) satisfies `holds` (checked at once and
    /// each time it changes) or `timeout` passes; returns whether it holds.
    pub async fn wait_peers(&self, timeout: Duration, mut holds: impl FnMut(u64) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        wait_until(&self.peers_changed, Some(deadline), || holds(self.peers())).await
    }

    fn set_peers(&self, peers: usize) {
        if self.peers.swap(peers as u64, Ordering::Relaxed) != peers as u64 {
            self.peers_changed.notify_waiters();
        }
    }

    /// Whether a tower ever answered the node: its welcome, a beacon, or its XSUB's
    /// subscription to the node's beacons.
    pub fn tower_answered(&self) -> bool {
        self.tower_answered.load(Ordering::Acquire)
    }

    fn answered_by_tower(&self) {
        if !self.tower_answered() {
            self.tower_answered.store(true, Ordering::Release);
        }
    }
}

/// A producer's or consumer's patience with its towers ([`NodeConfig::connect_timeout`]).
#[derive(Debug, Clone)]
pub(crate) struct TowerWait {
    /// When it runs out, and the timeout; `None` without towers or without a timeout.
    deadline: Option<(tokio::time::Instant, Duration)>,
    towers: String,
    stats: Arc<NodeStats>,
}

impl TowerWait {
    /// When the node gives up, while no tower has answered; `None` once one did (or with no
    /// timeout).
    pub(crate) fn pending(&self) -> Option<tokio::time::Instant> {
        self.deadline
            .filter(|_| !self.stats.tower_answered())
            .map(|(at, _)| at)
    }

    /// [`Error::NoTower`] once the time ran out with no tower answering.
    pub(crate) fn check(&self) -> Result<(), Error> {
        match self.pending() {
            Some(at) if tokio::time::Instant::now() >= at => Err(Error::NoTower {
                towers: self.towers.clone(),
                waited: self.deadline.map(|(_, t)| t).unwrap_or_default(),
            }),
            _ => Ok(()),
        }
    }
}

/// Logs dropped input at most [`LOG_BURST`] times a second, then how many more were dropped.
#[derive(Debug, Default)]
pub(crate) struct LogLimiter(dafka_wire::LogWindow);

impl LogLimiter {
    pub(crate) fn allow(&mut self, now: Instant) -> bool {
        match self.0.admit(now, LOG_BURST) {
            Some(0) => true,
            Some(count) => {
                tracing::warn!(count, "more malformed or refused messages dropped");
                true
            }
            None => false,
        }
    }
}

/// The part of a node that differs by role: it gets the Dafka messages of the subscriber,
/// the subscriptions reaching an XPUB publisher and the timer, and hands back messages to
/// publish. Implementations lock their shared state inside each call.
pub(crate) trait Role: Send + 'static {
    /// A message from the subscriber (the role's to keep: what it holds on to moves out of
    /// it).
    fn on_message(&mut self, message: Message, now: Instant) -> Result<(), PeerError>;
    /// A subscription (`0x01` + prefix) that reached an XPUB publisher.
    fn on_subscription(&mut self, _prefix: &[u8], _now: Instant) {}
    /// A cancelled subscription (`0x00` + prefix) that reached an XPUB publisher: a
    /// subscriber cancelled it or its connection ended.
    fn on_unsubscription(&mut self, _prefix: &[u8]) {}
    /// The time given by `poll_timeout` came.
    fn on_timeout(&mut self, now: Instant);
    /// When `on_timeout` is due next.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Appends up to `max` messages to publish; returns whether more are waiting.
    fn transmit(&mut self, out: &mut Vec<Message>, max: usize) -> bool;
    /// Whether the node should read its subscriber now (false: the application is behind).
    fn wants_input(&self) -> bool {
        true
    }
    /// A batch of messages from the subscriber was handed to `on_message`: wake whoever waits
    /// for their effect once per batch rather than once per message.
    fn after_input(&mut self) {}
    /// The loop ended (stopped, or a socket closed) and the publisher is still open: publish
    /// what must not be lost (a producer's queued RECORDs).
    fn on_stop(&mut self) {}
}

/// Wakes a node's task from its handle, and tells it to stop.
#[derive(Debug, Default)]
pub(crate) struct Control {
    /// Wakes the task (a timer or the room to read changed).
    pub(crate) wake: Notify,
    /// Wakes callers waiting on the state (records arrived, records acknowledged, stopped).
    pub(crate) changed: Notify,
    stop: AtomicBool,
}

impl Control {
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake.notify_one();
        self.changed.notify_waiters();
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

/// A node's task, stopped when dropped.
#[derive(Debug)]
pub(crate) struct NodeTask {
    pub(crate) control: Arc<Control>,
    pub(crate) stats: Arc<NodeStats>,
    task: Option<JoinHandle<()>>,
}

impl NodeTask {
    /// Runs `role` on `plumbing` in a task of the current runtime.
    pub(crate) fn spawn<R: Role>(plumbing: Plumbing, role: R, control: Arc<Control>) -> Self {
        let stats = plumbing.stats();
        NodeTask::new(
            control.clone(),
            stats,
            tokio::spawn(plumbing.run(role, control)),
        )
    }

    /// A task already spawned, stopped through `control`.
    pub(crate) fn new(control: Arc<Control>, stats: Arc<NodeStats>, task: JoinHandle<()>) -> Self {
        NodeTask {
            control,
            stats,
            task: Some(task),
        }
    }

    /// Stops the task and waits for it.
    pub(crate) async fn close(&mut self) {
        self.control.stop();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for NodeTask {
    fn drop(&mut self) {
        self.control.stop();
    }
}

/// Moves up to `max` messages from `next` to `out`; returns whether more may be waiting.
pub(crate) fn take_up_to(
    out: &mut Vec<Message>,
    max: usize,
    mut next: impl FnMut() -> Option<Message>,
) -> bool {
    for _ in 0..max {
        match next() {
            Some(m) => out.push(m),
            None => return false,
        }
    }
    true
}

/// Publishes Dafka messages; a PUB or XPUB never waits (a slow peer loses messages, which it
/// FETCHes again). Returns the last refusal rather than logging it: callers publish under the
/// producer's lock, and a log record may need the GIL (pyo3-log) that a Python thread waiting
/// for that lock holds. Hand it to [`log_refused`] once unlocked.
#[must_use]
pub(crate) fn publish(
    publisher: &Socket,
    messages: impl IntoIterator<Item = Message>,
) -> Option<dafka_zmtp::Error> {
    publish_with(publisher, |out| {
        for m in messages {
            out.push(m);
        }
    })
}

/// Where a [`publish_with`] filler pushes its messages: each is encoded into the batch as it
/// comes (a list of messages, over a hundred bytes each, moved twice more every message).
pub(crate) struct Outbox<'a> {
    batch: &'a mut VecDeque<dafka_zmtp::Message>,
    /// The block the next frame 1 is encoded into.
    headers: BytesMut,
    /// The size of the last block taken.
    block: usize,
}

impl Outbox<'_> {
    /// Queues `m` to publish.
    #[inline]
    pub(crate) fn push(&mut self, m: Message) {
        self.room(m.header_len());
        let mut frames = dafka_zmtp::Message::new();
        m.into_frames_with(&mut self.headers, &mut frames);
        self.batch.push_back(frames);
    }

    /// Queues a META-RECORD encoded from where its parts are kept.
    #[inline]
    pub(crate) fn push_record(&mut self, r: MetaRecordRef<'_>) {
        self.room(r.header_len());
        let mut frames = dafka_zmtp::Message::new();
        r.frames_with(&mut self.headers, &mut frames);
        self.batch.push_back(frames);
    }

    #[inline]
    fn room(&mut self, len: usize) {
        if self.headers.capacity() < len {
            self.new_block(len);
        }
    }

    /// Frame-1 headers are encoded into shared blocks, twice as large as the last each time up
    /// to HEADER_BLOCK: small enough for the allocator to recycle once their frames are sent
    /// (one block for a whole batch, a few hundred KiB, went back to the kernel and was
    /// faulted in again), and a lone message does not hold a large block while it waits in a
    /// subscriber's queue.
    #[cold]
    fn new_block(&mut self, len: usize) {
        self.block = (self.block * 2).clamp(FIRST_HEADER_BLOCK, HEADER_BLOCK);
        self.headers = BytesMut::with_capacity(self.block.max(len));
    }
}

/// [`publish`] of the messages `fill` pushes: a caller that makes them in a loop pushes each
/// straight into the batch (a chain of iterator adapters moved every message, over a hundred
/// bytes, several times).
#[must_use]
pub(crate) fn publish_with(
    publisher: &Socket,
    fill: impl FnOnce(&mut Outbox<'_>),
) -> Option<dafka_zmtp::Error> {
    PUBLISH_SCRATCH.with_borrow_mut(|batch| {
        let mut refused = None;
        fill(&mut Outbox {
            batch,
            headers: BytesMut::new(),
            block: 0,
        });
        // One batch: the PUB/XPUB takes it under one lock, one per subscriber pipe.
        while !batch.is_empty() {
            let before = batch.len();
            if let Err(e) = publisher.try_send_many(batch) {
                refused = Some(e);
                if batch.len() == before {
                    // Closed (or, not for a PUB, full): nothing more goes out.
                    break;
                }
            }
        }
        batch.clear();
        if batch.capacity() > TRANSMIT_CHUNK {
            batch.shrink_to(TRANSMIT_CHUNK);
        }
        refused
    })
}

/// Logs what [`publish`] returned; call it with no lock held.
pub(crate) fn log_refused(refused: Option<dafka_zmtp::Error>) {
    if let Some(e) = refused {
        tracing::debug!(error = %e, "publisher refused a message");
    }
}

/// Gives back what a burst beyond [`TRANSMIT_CHUNK`] messages (a `close` or `flush` publishing
/// every queued record) grew `publish`'s empty lists to: kept, they held 10-20 MB per thread
/// (Python threads included) for the thread's life.
/// Largest block `publish` encodes frame-1 headers into, and the first (of a lone message).
const HEADER_BLOCK: usize = 32 << 10;
const FIRST_HEADER_BLOCK: usize = 512;

thread_local! {
    /// `publish`'s batch, kept (empty) between calls: a batch of 4096 messages takes a few
    /// hundred KiB, which the allocator would otherwise return to the kernel and fault in
    /// again, page by page, for every batch (a fifth of the producer's page faults each).
    static PUBLISH_SCRATCH: std::cell::RefCell<VecDeque<dafka_zmtp::Message>> =
        const { std::cell::RefCell::new(VecDeque::new()) };
}

/// The sockets of a node and its discovery machine, owned by its task.
pub(crate) struct Plumbing {
    config: NodeConfig,
    port: u16,
    beacon: Vec<Bytes>,
    beacon_pub: Socket,
    beacon_events: Monitor,
    beacon_sub: Socket,
    pub(crate) publisher: Socket,
    pub(crate) subscriber: Socket,
    discovery: Discovery,
    log: LogLimiter,
    stats: Arc<NodeStats>,
    zre: Option<ZreDiscovery>,
    /// The publisher's inproc alias for nodes of this process (see
    /// [`NodeConfig::local_inproc`]); removed from the process's map when the node stops.
    _alias: Option<LocalAlias>,
    /// Each peer endpoint connected to through its inproc alias -> that alias (to
    /// disconnect the same).
    via_alias: HashMap<String, String>,
}

/// The next change ZRE reports; never, without ZRE.
async fn next_change(zre: &mut Option<ZreDiscovery>) -> Option<Change> {
    match zre {
        Some(z) => z.next().await,
        None => std::future::pending().await,
    }
}

impl Plumbing {
    /// Binds the publisher (`publisher_type` PUB or XPUB) and connects the beacon sockets to
    /// every tower. The subscriber is created unconnected; the caller subscribes it.
    pub(crate) async fn open(
        id: NodeId,
        config: NodeConfig,
        publisher_type: SocketType,
    ) -> Result<Plumbing, Error> {
        config.validate()?;
        let host = match &config.zre {
            Some(cluster) => cluster.host(id)?,
            None => config.host.clone(),
        };
        let (server, client) = crate::security::mechanisms(config.security.as_ref());
        let quick = Options::default()
            .with_linger(Some(Duration::ZERO))
            .with_mechanism(client);
        let publisher = Socket::new(
            publisher_type,
            hears_subscriptions(
                Options::default()
                    .with_sndhwm(config.sndhwm)
                    .with_linger(Some(config.linger))
                    .with_xpub_verbose(true)
                    .with_mechanism(server),
            ),
        )?;
        let listen = match (&config.zre, &config.bind) {
            (None, Some(bind)) => bind.as_str(),
            _ => host.as_str(),
        };
        let bound = publisher
            .bind(&format!("tcp://{}:{}", bracket(listen), config.port))
            .await?;
        let port = split_tcp(&bound).map(|(_, p)| p).ok_or(Error::Endpoint {
            endpoint: bound.clone(),
            reason: "bound endpoint has no port",
        })?;
        let subscriber = Socket::new(SocketType::Sub, quick.clone().with_rcvhwm(config.rcvhwm))?;
        let beacon_pub = Socket::new(SocketType::Pub, hears_subscriptions(quick.clone()))?;
        let beacon_events = beacon_pub.monitor(64);
        let beacon_sub = Socket::new(
            SocketType::Sub,
            quick.with_recv_limits(Some(beacon_input_limits(&config.limits))),
        )?;
        beacon_sub.subscribe(dafka_proto::BEACON_TOPIC)?;
        beacon_sub.subscribe(dafka_proto::WELCOME_TOPIC)?;
        for tower in &config.towers {
            beacon_pub.connect(&tower.sub).await?;
            beacon_sub.connect(&tower.publ).await?;
        }
        let zre = match &config.zre {
            Some(cluster) => {
                let endpoint = format!("tcp://{}:{port}", bracket(&host));
                let keys = config.security.as_ref();
                Some(ZreDiscovery::start(cluster, id, &endpoint, keys).await?)
            }
            None => None,
        };
        let node_beacon = NodeBeacon {
            node: id,
            host,
            port,
        };
        let announced = TowerBeacon::from_node(&node_beacon).endpoint;
        let beacon = BeaconMessage::Node(node_beacon).to_frames();
        let discovery = Discovery::new(config.discovery(), id, now())?;
        let alias = match config.local_inproc && config.security.is_none() {
            true => {
                let name = format!("dafka-publisher-{id}-{port}");
                Some(LocalAlias::bind(&publisher, &announced, &name).await?)
            }
            false => None,
        };
        Ok(Plumbing {
            config,
            port,
            beacon,
            beacon_pub,
            beacon_events,
            beacon_sub,
            publisher,
            subscriber,
            discovery,
            log: LogLimiter::default(),
            stats: Arc::new(NodeStats::default()),
            zre,
            _alias: alias,
            via_alias: HashMap::new(),
        })
    }

    /// Connects the subscriber to a peer's publisher: through its inproc alias when the peer
    /// is a node of this process and neither uses CURVE, else over TCP.
    async fn connect_peer(&mut self, endpoint: &str) -> Result<(), dafka_zmtp::Error> {
        let local = self.config.local_inproc && self.config.security.is_none();
        match local
            .then(|| dafka_zmtp::local::alias_of(endpoint))
            .flatten()
        {
            Some(alias) => {
                self.subscriber.connect(&alias).await?;
                self.via_alias.insert(endpoint.to_owned(), alias);
                Ok(())
            }
            None => self.subscriber.connect(endpoint).await,
        }
    }

    async fn disconnect_peer(&mut self, endpoint: &str) {
        let target = self.via_alias.remove(endpoint);
        let _ = self
            .subscriber
            .disconnect(target.as_deref().unwrap_or(endpoint))
            .await;
    }

    /// The publisher's port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn stats(&self) -> Arc<NodeStats> {
        self.stats.clone()
    }

    /// The node's patience with its towers, counted from now.
    pub(crate) fn tower_wait(&self) -> TowerWait {
        let deadline = self
            .config
            .connect_timeout
            .filter(|_| !self.config.towers.is_empty())
            .map(|t| (tokio::time::Instant::now() + t, t));
        TowerWait {
            deadline,
            towers: self.config.towers_text(),
            stats: self.stats.clone(),
        }
    }

    async fn on_beacon(&mut self, frames: &[Bytes], now: Instant) {
        let beacon = match BeaconMessage::decode(frames, &self.config.limits) {
            Ok(BeaconMessage::Tower(b)) => {
                self.stats.answered_by_tower();
                b
            }
            Ok(BeaconMessage::Welcome) => {
                self.stats.answered_by_tower();
                return;
            }
            Ok(other) => {
                self.dropped("beacon SUB", &format!("not a tower beacon: {other:?}"), now);
                return;
            }
            Err(e) => {
                self.dropped("beacon SUB", &e.to_string(), now);
                return;
            }
        };
        let learnt = self
            .discovery
            .handle_beacon(beacon.node, &beacon.endpoint, now);
        self.discovered(learnt, "beacon SUB", now).await;
    }

    /// What ZRE reported about the cluster's publishers.
    async fn on_zre_change(&mut self, change: Change, now: Instant) {
        match change {
            Change::Up(node, endpoint) => {
                let learnt = self.discovery.handle_zre_peer(node, &endpoint, now);
                self.discovered(learnt, "ZRE", now).await;
            }
            Change::Down(node) => {
                self.discovery.handle_zre_gone(node);
                self.run_discovery("ZRE", now).await;
            }
        }
    }

    /// Logs what the discovery refused of a peer announcement from `source`, then executes
    /// its actions.
    async fn discovered(
        &mut self,
        learnt: Result<(), DiscoveryError>,
        source: &'static str,
        now: Instant,
    ) {
        match learnt {
            Ok(()) => {}
            Err(DiscoveryError::TooManyPeers { node, max }) => {
                if self.log.allow(now) {
                    tracing::warn!(peer = %node, max, "too many peers; ignored");
                }
            }
            Err(DiscoveryError::BadEndpoint { .. }) => {
                self.dropped(source, "peer endpoint is not tcp://host:port", now);
            }
            Err(e) => self.dropped(source, &e.to_string(), now),
        }
        self.run_discovery(source, now).await;
    }

    /// Executes what the discovery asks for (connects for peers announced by `source`), and
    /// publishes its peer count.
    async fn run_discovery(&mut self, source: &'static str, now: Instant) {
        while let Some(action) = self.discovery.poll_action() {
            match action {
                Action::SendBeacon => {
                    let _ = self.beacon_pub.try_send(self.beacon.clone().into());
                }
                Action::Connect { node, endpoint } => {
                    if let Err(e) = self.connect_peer(&endpoint).await {
                        self.dropped(source, &format!("cannot connect to peer: {e}"), now);
                        self.discovery.handle_connect_failed(node, &endpoint);
                    } else {
                        tracing::debug!(peer = %node, endpoint = %endpoint, "peer connected");
                    }
                }
                Action::Disconnect {
                    node,
                    endpoint,
                    cause,
                } => {
                    match cause {
                        Cause::Silent => tracing::debug!(peer = %node, "peer silent; disconnected"),
                        Cause::Gone => {
                            tracing::debug!(peer = %node, "peer gone (ZRE); disconnected");
                        }
                        _ => {}
                    }
                    self.disconnect_peer(&endpoint).await;
                }
                _ => {}
            }
        }
        self.stats.set_peers(self.discovery.peers());
    }

    fn on_input<R: Role>(&mut self, role: &mut R, frames: &mut [Bytes], now: Instant) {
        match Message::decode_taking(frames, &self.config.limits) {
            Ok(m) => {
                if let Err(e) = role.on_message(m, now) {
                    self.stats.refused.fetch_add(1, Ordering::Relaxed);
                    if self.log.allow(now) {
                        tracing::warn!(error = %e, "message refused");
                    }
                }
            }
            Err(e) => self.dropped("subscriber", &e.to_string(), now),
        }
    }

    fn dropped(&mut self, socket: &'static str, reason: &str, now: Instant) {
        self.stats.count_malformed();
        if self.log.allow(now) {
            tracing::warn!(socket, reason, "malformed message dropped");
        }
    }

    /// The node's loop: until `control` says stop or a socket closes.
    pub(crate) async fn run<R: Role>(mut self, mut role: R, control: Arc<Control>) {
        let xpub = self.publisher.socket_type() == SocketType::Xpub;
        let mut inbox = Vec::new();
        let mut subscriptions = Vec::new();
        let mut beacons = Vec::new();
        let mut out = Vec::new();
        let mut more;
        while !control.stopping() {
            let t = now();
            // The first turn sends the first beacon: it is due from the start.
            self.discovery.handle_timeout(t);
            self.run_discovery("timer", t).await;
            if role.poll_timeout().is_some_and(|d| t >= d) {
                role.on_timeout(t);
            }
            more = role.transmit(&mut out, TRANSMIT_CHUNK);
            log_refused(publish(&self.publisher, out.drain(..)));
            let deadline = [self.discovery.poll_timeout(), role.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let reading = role.wants_input();
            tokio::select! {
                biased;
                _ = control.wake.notified() => {}
                // Publish the rest of a long answer before waiting on anything.
                _ = tokio::task::yield_now(), if more => {}
                // Subscriptions before input: a peer's FETCH is answered knowing every
                // subscription that reached the publisher before it (whether the peer takes
                // DIRECT-META-RECORDS).
                r = self.publisher.recv_many(BATCH, &mut subscriptions), if xpub => {
                    if r.is_err() { break; }
                    let t = now();
                    for m in subscriptions.drain(..) {
                        // XPUB hands up `0x01 + prefix` (subscribe) and `0x00 + prefix`.
                        match Subscription::from_message(&m) {
                            Some(Subscription::Subscribe(prefix)) => role.on_subscription(&prefix, t),
                            Some(Subscription::Cancel(prefix)) => role.on_unsubscription(&prefix),
                            None => {}
                        }
                    }
                }
                r = self.subscriber.recv_many(BATCH, &mut inbox), if reading => {
                    if r.is_err() { break; }
                    let t = now();
                    for mut m in inbox.drain(..) {
                        self.on_input(&mut role, m.frames_mut(), t);
                    }
                    role.after_input();
                }
                r = self.beacon_sub.recv_many(BATCH, &mut beacons) => {
                    if r.is_err() { break; }
                    let t = now();
                    for m in beacons.drain(..) {
                        self.on_beacon(m.frames(), t).await;
                    }
                }
                event = self.beacon_events.recv() => match event {
                    // A tower's XSUB subscribed: beacon now, not one interval later.
                    Some(SocketEvent::Subscribed { prefix, .. }) if dafka_proto::BEACON_TOPIC.starts_with(&prefix) => {
                        self.stats.answered_by_tower();
                        let t = now();
                        self.discovery.handle_tower_subscribed(t);
                        self.run_discovery("beacon PUB", t).await;
                    }
                    Some(_) => {}
                    None => break,
                },
                change = next_change(&mut self.zre) => match change {
                    Some(change) => self.on_zre_change(change, now()).await,
                    None => {
                        tracing::warn!("ZRE discovery stopped; peers found so far stay");
                        self.zre = None;
                    }
                },
                _ = sleep_until(deadline) => {}
            }
        }
        // Every way out: callers see the node closed (`try_send` queues nothing more), then
        // the role publishes what was queued since its last turn, before the publisher closes.
        control.stop();
        role.on_stop();
        if let Some(zre) = self.zre.take() {
            zre.close().await;
        }
        for socket in [&self.beacon_pub, &self.beacon_sub, &self.subscriber] {
            socket.close_in_background_with(Some(Duration::ZERO));
        }
        self.publisher.close_in_background();
    }
}

/// Sleeps until `deadline`; for ever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

/// An IPv6 host in brackets, as endpoints write it.
fn bracket(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// The current time as the state machines take it (tokio's clock, so paused time applies).
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Waits until `ready()` holds or `deadline` passes, re-checking at each notification;
/// returns whether it holds. Registers before each check, so no notification is lost.
pub(crate) async fn wait_until(
    notify: &Notify,
    deadline: Option<tokio::time::Instant>,
    mut ready: impl FnMut() -> bool,
) -> bool {
    loop {
        let n = notify.notified();
        tokio::pin!(n);
        n.as_mut().enable();
        if ready() {
            return true;
        }
        match deadline {
            Some(d) => {
                if tokio::time::timeout_at(d, n).await.is_err() {
                    return ready();
                }
            }
            None => n.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn publish_gives_back_the_room_a_burst_took() {
        let publisher = Socket::new(SocketType::Pub, Options::default()).unwrap();
        let head = Message::Head(dafka_proto::Head {
            producer: new_node_id().unwrap(),
            topic: dafka_proto::Topic::new("t").unwrap(),
            sequence: 1,
        });
        let burst = 5 * TRANSMIT_CHUNK;
        log_refused(publish(&publisher, std::iter::repeat_n(head, burst)));
        // A current-thread runtime: the test's thread is the one `publish` ran on.
        let batch = PUBLISH_SCRATCH.with_borrow(VecDeque::capacity);
        assert!(batch <= TRANSMIT_CHUNK, "{batch} messages kept");
        publisher.close_in_background_with(Some(Duration::ZERO));
    }

    #[test]
    fn log_limiter_allows_a_burst_a_second() {
        let t0 = Instant::now();
        let mut log = LogLimiter::default();
        let allowed = (0..100).filter(|_| log.allow(t0)).count();
        assert_eq!(allowed, LOG_BURST as usize);
        assert!(!log.allow(t0 + Duration::from_millis(999)));
        // The next window: allowed, having said the count (the window's own test counts).
        assert!(log.allow(t0 + Duration::from_secs(1)));
        assert_eq!(log.0.due(None), None, "nothing left unsaid");
    }

    #[test]
    fn node_ids_differ() {
        let ids: std::collections::HashSet<NodeId> = (0..10_000)
            .map(|_| new_node_id().expect("the OS random source"))
            .collect();
        assert_eq!(ids.len(), 10_000);
        // Not a counter or a clock: consecutive ids share no half (a time- or counter-based
        // id keeps its high bytes across calls).
        let a = new_node_id().expect("the OS random source");
        let b = new_node_id().expect("the OS random source");
        assert_ne!(a.as_bytes()[..8], b.as_bytes()[..8]);
        assert_ne!(a.as_bytes()[8..], b.as_bytes()[8..]);
    }

    #[test]
    fn config_checks() {
        let ok = NodeConfig::new(Vec::new());
        assert!(ok.validate().is_ok());
        assert!(ok.clone().with_host("").validate().is_err());
        assert!(ok.clone().with_host("*").validate().is_err());
        assert!(
            ok.with_beacon_interval(Duration::from_secs(5))
                .validate()
                .is_err()
        );
    }
}
