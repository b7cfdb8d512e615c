//! The socket patterns, sans-IO: which peer a message goes to, what a received message becomes,
//! what a subscription changes.
//!
//! One type per pattern family, each with `on_send` (the route a message takes), the receive
//! rule and `on_subscription` where it has one:
//!
//! | family | socket types | send | receive |
//! | --- | --- | --- | --- |
//! | [`LoadBalance`] | PUSH, DEALER | round-robin over peers with room | as is (PUSH: none) |
//! | [`Req`], [`Rep`] | REQ, REP | empty delimiter / the request's envelope | lockstep, envelope checked |
//! | [`Router`] | ROUTER | to the peer the first frame names | routing id prepended |
//! | [`FanOut`] | PUB, XPUB | every peer subscribed to the topic | subscriptions (XPUB: hands them up) |
//! | [`FairQueue`] | PULL, SUB, XSUB | none (XSUB: every peer) | as is (SUB: filtered) |
//! | [`Pair`] | PAIR | the one peer | as is |
//!
//! [`Pattern`] holds the peer table and one family and dispatches to it once. The driver owns
//! the queues towards the peers and hands them in as [`Outbox`]es; everything here is a pure
//! function of the table, the family's state and what the outboxes accept, so it is tested
//! with in-memory queues.

mod fair_queue;
mod fan_out;
mod load_balance;
mod pair;
mod receive;
mod req_rep;
mod router;
mod subs;
mod subscription;

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;

use crate::{Message, SocketType};

pub use fair_queue::FairQueue;
pub use fan_out::FanOut;
pub use load_balance::LoadBalance;
pub use pair::Pair;
pub use receive::{Receive, Received};
pub use req_rep::{Rep, Req};
pub use router::Router;
pub use subs::{MatchRun, SubSet};
pub use subscription::{CANCEL_FLAG, SUBSCRIBE_FLAG, Subscription, encode, parse};

/// The driver's queue towards one peer.
pub trait Outbox {
    /// Unique within the socket; received messages are tagged with it.
    fn id(&self) -> u64;
    /// Queues `msg` unless the queue is at its high-water mark (then hands it back).
    fn try_push(&self, msg: Message) -> Result<(), Message>;
    /// Queues, in order, each message of `batch` that `wanted` accepts, dropping those that find
    /// the queue at its high-water mark. Returns how many were dropped.
    fn try_push_each(&self, batch: &[Message], wanted: impl FnMut(&Message) -> bool) -> usize;
    /// Queues `msg` whatever the high-water mark (an XSUB's subscription, an XPUB's welcome).
    fn push_force(&self, msg: Message);
    /// Queues a subscription (a SUBSCRIBE or CANCEL command) whatever the high-water mark.
    fn push_subscription(&self, sub: Subscription);
    /// A new connection: drops the subscription traffic queued for an earlier one and puts
    /// SUBSCRIBE `prefixes` first.
    fn resubscribe(&self, prefixes: Vec<Bytes>);
}

/// What the pattern needs of the socket's options.
#[derive(Debug, Clone, Default)]
pub struct PatternConfig {
    /// Send only to peers whose handshake completed (`ZMQ_IMMEDIATE`).
    pub immediate: bool,
    /// ROUTER: an unknown routing id or a full peer is an error (`ZMQ_ROUTER_MANDATORY`).
    pub router_mandatory: bool,
    /// ROUTER: a peer announcing a routing id in use takes it over (`ZMQ_ROUTER_HANDOVER`).
    pub router_handover: bool,
    /// ROUTER: put the peer's CURVE key (or an empty frame) after the routing id.
    pub router_peer_key: bool,
    /// PUB/XPUB: longest subscription prefix a peer may send (0: no limit).
    pub max_subscription_size: usize,
    /// PUB/XPUB: most distinct prefixes per peer (0: no limit).
    pub max_subscriptions: usize,
    /// XPUB: hand up every subscribe, not only new ones (`ZMQ_XPUB_VERBOSE`).
    pub xpub_verbose: bool,
    /// XPUB: a message sent to every new peer (`ZMQ_XPUB_WELCOME_MSG`).
    pub xpub_welcome: Option<Bytes>,
}

/// Why the pattern refused an operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatternError {
    /// A message without frames.
    #[error("message has no frames")]
    EmptyMessage,
    /// The socket is closed.
    #[error("socket is closed")]
    Closed,
    /// REQ/REP out of turn.
    #[error("{0}")]
    InvalidState(&'static str),
    /// ROUTER with `router_mandatory`: no peer has this routing id.
    #[error("no peer with this routing id")]
    HostUnreachable(Bytes),
    /// The socket type does not do this.
    #[error("{} sockets do not support {operation}", socket_type.as_str())]
    NotSupported {
        /// The socket's type.
        socket_type: SocketType,
        /// What was asked.
        operation: &'static str,
    },
}

/// Why a peer whose handshake completed is refused by the pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachError {
    /// PAIR: the socket has a peer already.
    PairBusy,
    /// ROUTER: another peer holds the routing id (without `router_handover`).
    DuplicateRoutingId,
}

/// A peer's subscriptions broke a limit of the options: its connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubscriptionLimit {
    /// A prefix longer than `max_subscription_size`.
    #[error("subscription prefix of {len} bytes exceeds the limit of {max}")]
    PrefixTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// More distinct prefixes than `max_subscriptions`.
    #[error("peer exceeded the limit of {0} subscriptions")]
    TooMany(usize),
}

/// A send the pattern did not queue.
#[derive(Debug)]
pub enum Refused<E> {
    /// No peer has room now: the message is handed back.
    Block(Message),
    /// Refused (dropped).
    Fail(E),
}

/// Where a message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To this peer.
    Peer(u64),
    /// To every peer that wanted it (PUB, XPUB, XSUB).
    Fanned,
    /// Nowhere, by the pattern's rule (ROUTER: unknown routing id; REP: the requester left).
    Dropped,
}

/// A peer attached by [`Pattern::attach`].
#[derive(Debug)]
pub struct Attached<P> {
    /// Its outbox (the existing one of a connecting side, else the new one).
    pub pipe: Arc<P>,
    /// How its connection turns what it receives into messages for the socket.
    pub receive: Receive,
    /// ROUTER with `router_handover`: the peer that held the routing id, to be disconnected.
    pub evicted: Option<u64>,
}

/// A peer's subscription changed what it receives (for the monitor, and an XPUB's application).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionChange {
    /// What the peer did.
    pub subscription: Subscription,
    /// XPUB: hand the subscription up to the application (new overall, or verbose).
    pub hand_up: bool,
}

/// One peer of the socket.
#[derive(Debug)]
pub struct Peer<P> {
    pipe: Arc<P>,
    /// Handshake complete (a connecting side's outbox exists before that).
    ready: bool,
    /// ROUTER: the routing id it is reached by.
    routing_id: Option<Bytes>,
    /// PUB/XPUB: what it subscribed to (set semantics).
    subs: SubSet,
}

impl<P> Peer<P> {
    fn new(pipe: Arc<P>, ready: bool) -> Self {
        Peer {
            pipe,
            ready,
            routing_id: None,
            subs: SubSet::default(),
        }
    }

    /// Its outbox.
    pub fn pipe(&self) -> &Arc<P> {
        &self.pipe
    }

    /// Whether its handshake completed.
    pub fn is_ready(&self) -> bool {
        self.ready
    }
}

/// The ready peers of `peers`.
fn ready<P>(peers: &[Peer<P>]) -> impl Iterator<Item = &Peer<P>> {
    peers.iter().filter(|e| e.ready)
}

#[derive(Debug)]
enum Family<P> {
    LoadBalance(LoadBalance),
    Req(Req),
    Rep(Rep),
    Router(Router<P>),
    FanOut(FanOut),
    FairQueue(FairQueue),
    Pair(Pair),
}

/// A socket's pattern: its peers and the family of its type.
#[derive(Debug)]
pub struct Pattern<P> {
    socket_type: SocketType,
    /// REQ, REP: the size limits apply once the envelope is on (kept apart from `family`: one
    /// load on the send path, not a test of the variant).
    enveloped: bool,
    config: PatternConfig,
    peers: Vec<Peer<P>>,
    family: Family<P>,
}

impl<P: Outbox> Pattern<P> {
    /// The pattern of `socket_type`, without peers.
    pub fn new(socket_type: SocketType, config: PatternConfig) -> Self {
        use SocketType::*;
        let family = match socket_type {
            Push | Dealer => Family::LoadBalance(LoadBalance::default()),
            Req => Family::Req(self::Req::default()),
            Rep => Family::Rep(self::Rep::default()),
            Router => Family::Router(self::Router::default()),
            Pub | Xpub => Family::FanOut(FanOut::new(socket_type == Xpub)),
            Pull | Sub | Xsub => Family::FairQueue(FairQueue::new(socket_type)),
            Pair => Family::Pair(self::Pair),
        };
        Pattern {
            socket_type,
            enveloped: matches!(family, Family::Req(_) | Family::Rep(_)),
            config,
            peers: Vec::new(),
            family,
        }
    }

    /// The socket type.
    pub fn socket_type(&self) -> SocketType {
        self.socket_type
    }

    /// Every peer, ready or not.
    pub fn peers(&self) -> &[Peer<P>] {
        &self.peers
    }

    fn not_supported(&self, operation: &'static str) -> PatternError {
        PatternError::NotSupported {
            socket_type: self.socket_type,
            operation,
        }
    }

    /// A connecting side's outbox, before its handshake: it queues messages (unless
    /// `immediate`) before and between connections, as libzmq does.
    pub fn add_pending(&mut self, pipe: Arc<P>) {
        self.peers.push(Peer::new(pipe, false));
    }

    /// A connection finished its handshake with a peer announcing `identity` (and, under
    /// CURVE, `key`): attach it to `existing` (a connecting side's outbox) or to a new outbox
    /// made by `new_pipe`. The peer type's compatibility is the driver's to check first.
    pub fn attach(
        &mut self,
        existing: Option<&Arc<P>>,
        new_pipe: impl FnOnce() -> Arc<P>,
        identity: &Bytes,
        key: Option<[u8; 32]>,
    ) -> Result<Attached<P>, AttachError> {
        let own = existing.map(|p| p.id());
        let mut evicted = None;
        let routing_id = match &mut self.family {
            Family::Pair(_) => {
                Pair::check_free(&self.peers, own)?;
                None
            }
            Family::Router(r) => {
                let (rid, old) =
                    r.assign(identity, self.config.router_handover, &mut self.peers)?;
                evicted = old;
                Some(rid)
            }
            _ => None,
        };
        let pipe = existing.cloned().unwrap_or_else(new_pipe);
        let id = pipe.id();
        if let (Family::Router(r), Some(rid)) = (&mut self.family, &routing_id) {
            r.insert(rid.clone(), pipe.clone());
        }
        match self.peers.iter_mut().find(|e| e.pipe.id() == id) {
            Some(e) => {
                e.ready = true;
                e.routing_id = routing_id.clone();
                e.subs.clear();
            }
            None => {
                let mut peer = Peer::new(pipe.clone(), true);
                peer.routing_id = routing_id.clone();
                self.peers.push(peer);
            }
        }
        match &self.family {
            Family::FanOut(f) => f.welcome(&*pipe, self.config.xpub_welcome.as_ref()),
            Family::FairQueue(f) => f.resubscribe(&*pipe),
            _ => {}
        }
        let key_prefix = (routing_id.is_some() && self.config.router_peer_key)
            .then(|| key.map_or_else(Bytes::new, |k| Bytes::copy_from_slice(&k)));
        let receive = Receive::new(self.socket_type, routing_id, key_prefix);
        Ok(Attached {
            pipe,
            receive,
            evicted,
        })
    }

    /// A connection ended: a connecting side's outbox stays (not ready) for the next one, a
    /// bound side's goes. `hand_up` gets the cancels an XPUB hands to its application. Returns
    /// whether the peer was known.
    pub fn detach(
        &mut self,
        id: u64,
        connect_side: bool,
        hand_up: impl FnMut(u64, Subscription),
    ) -> bool {
        let Some(idx) = self.peers.iter().position(|e| e.pipe.id() == id) else {
            return false;
        };
        let gone = if connect_side {
            let e = &mut self.peers[idx];
            e.ready = false;
            Peer {
                pipe: e.pipe.clone(),
                ready: false,
                routing_id: e.routing_id.take(),
                subs: std::mem::take(&mut e.subs),
            }
        } else {
            self.peers.remove(idx)
        };
        self.forget(gone, hand_up);
        true
    }

    /// Removes a peer for good (its connector gave up, or `disconnect`).
    pub fn remove(&mut self, id: u64, hand_up: impl FnMut(u64, Subscription)) {
        if let Some(idx) = self.peers.iter().position(|e| e.pipe.id() == id) {
            let gone = self.peers.remove(idx);
            self.forget(gone, hand_up);
        }
    }

    /// Drops every peer (the socket ended).
    pub fn clear(&mut self) {
        self.peers.clear();
        if let Family::Router(r) = &mut self.family {
            r.clear();
        }
    }

    /// Drops the routing and subscription state of a departed peer.
    fn forget(&mut self, gone: Peer<P>, hand_up: impl FnMut(u64, Subscription)) {
        match &mut self.family {
            Family::Router(r) => r.forget(&gone),
            Family::FanOut(f) => f.forget(&gone, hand_up),
            _ => {}
        }
    }

    /// Sends `msg` by the pattern: refused when empty, when `check` (the size limits) refuses
    /// it as it goes on the wire, or when the socket is `closed`; handed back when no peer has
    /// room. `full` is told of each outbox found at its high-water mark.
    #[inline]
    pub fn on_send<E: From<PatternError>>(
        &mut self,
        mut msg: Message,
        closed: bool,
        check: impl Fn(&Message) -> Result<(), E>,
        full: impl FnMut(&P),
    ) -> Result<Route, Refused<E>> {
        if msg.is_empty() {
            return Err(Refused::Fail(PatternError::EmptyMessage.into()));
        }
        // The limits apply to the message as it goes on the wire: REQ and REP check it once
        // their envelope is on.
        if !self.enveloped {
            check(&msg).map_err(Refused::Fail)?;
        }
        if closed {
            return Err(Refused::Fail(PatternError::Closed.into()));
        }
        let immediate = self.config.immediate;
        match &mut self.family {
            Family::LoadBalance(lb) => lb
                .on_send(&self.peers, immediate, msg, full)
                .map(Route::Peer)
                .map_err(Refused::Block),
            Family::Req(req) => req.on_send(&self.peers, immediate, msg, check, full),
            Family::Rep(rep) => rep.on_send(&self.peers, msg, check, full),
            Family::Router(r) => {
                let Some(rid) = msg.pop_front() else {
                    return Err(Refused::Fail(PatternError::EmptyMessage.into()));
                };
                r.on_send(rid, msg, self.config.router_mandatory, full)
            }
            Family::FanOut(_) => Ok(FanOut::on_send(&self.peers, &msg, full)),
            Family::FairQueue(fq) => match fq.on_send(&self.peers, msg, full) {
                Some(route) => Ok(route),
                None => Err(Refused::Fail(self.not_supported("send").into())),
            },
            Family::Pair(_) => Pair::on_send(&self.peers, immediate, msg, full),
        }
    }

    /// Sends messages from the front of `msgs` until one would wait, as [`on_send`] each
    /// (PUSH and DEALER: under the caller's one lock; PUB and XPUB: the batch to each peer at
    /// once). Returns how many were queued. A refused message is dropped and its error returned
    /// (PUB, XPUB: `Ok` for what went before it); the messages after it stay in `msgs`.
    ///
    /// [`on_send`]: Pattern::on_send
    pub fn on_send_many<E: From<PatternError>>(
        &mut self,
        msgs: &mut VecDeque<Message>,
        closed: bool,
        check: impl Fn(&Message) -> Result<(), E>,
        full: impl FnMut(&P),
    ) -> Result<usize, E> {
        let immediate = self.config.immediate;
        match &mut self.family {
            Family::LoadBalance(lb) => {
                lb.on_send_many(&self.peers, immediate, msgs, closed, check, full)
            }
            Family::FanOut(_) => FanOut::on_send_many(&self.peers, msgs, closed, check, full),
            _ => self.on_send_each(msgs, closed, check, full),
        }
    }

    /// [`on_send_many`](Self::on_send_many) one message at a time.
    fn on_send_each<E: From<PatternError>>(
        &mut self,
        msgs: &mut VecDeque<Message>,
        closed: bool,
        check: impl Fn(&Message) -> Result<(), E>,
        mut full: impl FnMut(&P),
    ) -> Result<usize, E> {
        let mut n = 0;
        while let Some(msg) = msgs.pop_front() {
            match self.on_send(msg, closed, &check, &mut full) {
                Ok(_) => n += 1,
                Err(Refused::Block(m)) => {
                    msgs.push_front(m);
                    break;
                }
                Err(Refused::Fail(e)) => return Err(e),
            }
        }
        Ok(n)
    }

    /// Whether a receive may be tried now: the types that never receive, a `closed` socket,
    /// REQ before its request and REP before its reply are refused.
    pub fn check_receive(&self, closed: bool) -> Result<(), PatternError> {
        match &self.family {
            Family::LoadBalance(_) if self.socket_type == SocketType::Push => {
                return Err(self.not_supported("recv"));
            }
            Family::FanOut(_) if self.socket_type == SocketType::Pub => {
                return Err(self.not_supported("recv"));
            }
            _ => {}
        }
        if closed {
            return Err(PatternError::Closed);
        }
        match &self.family {
            Family::Req(req) => req.check_receive(),
            Family::Rep(rep) => rep.check_receive(),
            _ => Ok(()),
        }
    }

    /// A message taken from the receive queue (it came from peer `pipe`): what the
    /// application gets, if anything (REQ: only the reply to its request; REP: the request
    /// without its envelope, kept for the reply; SUB: only what it subscribed to).
    pub fn on_receive(&mut self, pipe: u64, msg: Message) -> Option<Message> {
        match &mut self.family {
            Family::Req(req) => req.on_receive(pipe, msg),
            Family::Rep(rep) => rep.on_receive(pipe, msg),
            Family::FairQueue(fq) => fq.on_receive(msg),
            _ => Some(msg),
        }
    }

    /// SUB: the subscriptions messages are filtered by (to filter a batch in one run).
    pub fn filter(&self) -> Option<&SubSet> {
        match &self.family {
            Family::FairQueue(fq) => fq.filter(),
            _ => None,
        }
    }

    /// SUB: subscribes to (or cancels one subscription of) `prefix`, telling every ready peer.
    pub fn subscribe(
        &mut self,
        prefix: &[u8],
        subscribe: bool,
        closed: bool,
    ) -> Result<(), PatternError> {
        let op = if subscribe {
            "subscribe"
        } else {
            "unsubscribe"
        };
        let Family::FairQueue(fq) = &mut self.family else {
            return Err(self.not_supported(op));
        };
        if self.socket_type != SocketType::Sub {
            return Err(self.not_supported(op));
        }
        if closed {
            return Err(PatternError::Closed);
        }
        fq.subscribe(&self.peers, prefix, subscribe);
        Ok(())
    }

    /// SUBSCRIBE / CANCEL from peer `pipe` (command or message form). PUB and XPUB keep it;
    /// the other types ignore it. Fails when it breaks a limit of the config: close the
    /// peer's connection then.
    pub fn on_subscription(
        &mut self,
        pipe: u64,
        sub: Subscription,
    ) -> Result<Option<SubscriptionChange>, SubscriptionLimit> {
        let Family::FanOut(f) = &mut self.family else {
            return Ok(None);
        };
        FanOut::check_prefix(&sub, &self.config)?;
        let Some(peer) = self.peers.iter_mut().find(|e| e.pipe.id() == pipe) else {
            return Ok(None);
        };
        f.on_subscription(&mut peer.subs, sub, &self.config)
    }
}

/// Whether received messages of `socket_type` reach the application as they come (no
/// lockstep, no filter): the driver's fast path.
pub fn receives_as_is(socket_type: SocketType) -> bool {
    use SocketType::*;
    matches!(socket_type, Pull | Dealer | Pair | Router | Xsub | Xpub)
}

#[cfg(test)]
pub(crate) mod testing;
