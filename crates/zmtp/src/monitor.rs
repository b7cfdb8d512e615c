//! Socket events for the layers above, as libzmq's `zmq_socket_monitor`
//! gives them: [`Socket::monitor`](crate::Socket::monitor) returns a
//! [`Monitor`], a bounded stream of [`SocketEvent`]s.
//!
//! Events are produced only on rare paths (connection set-up and end,
//! subscriptions, a send queue reaching its HWM); with no monitor attached
//! each of those costs one relaxed atomic load, and the per-message paths
//! have none at all.
//!
//! The queue is bounded: when it is full the **oldest** event is dropped and
//! counted ([`Monitor::dropped`]), so a monitor nobody reads never holds more
//! than its capacity and always shows the latest state.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dafka_zmtp_proto::{Metadata, SocketType};
use tokio::sync::Notify;

use crate::{lock, wait_until};

/// Names one peer of a socket in its events. Unique within the socket and
/// never reused. A `connect`ed endpoint keeps its id across reconnections (its
/// queue survives them, as in libzmq); each connection accepted on a bound
/// endpoint gets a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub(crate) u64);

impl PeerId {
    /// The id as a number (for logs and maps).
    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for PeerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "peer#{}", self.0)
    }
}

/// What happened to a socket. See `docs/driver.md` for when each is sent.
#[derive(Debug)]
#[non_exhaustive]
pub enum SocketEvent {
    /// `bind` succeeded: the socket listens on `endpoint` (port resolved).
    Listening {
        /// The endpoint as resolved (`tcp://127.0.0.1:41234`).
        endpoint: String,
    },
    /// A bound endpoint accepted a connection (TCP, IPC), or an inproc peer
    /// connected to a bound name. The handshake follows.
    Accepted {
        /// The bound endpoint it arrived on.
        endpoint: String,
        /// The peer's address (`127.0.0.1:50312`, `ipc://...`, `inproc://name`).
        address: String,
        /// The peer, in the events that follow.
        peer: PeerId,
    },
    /// A `connect`ed endpoint's connection was established (the handshake
    /// follows); again after every reconnection.
    Connected {
        /// The endpoint given to `connect`.
        endpoint: String,
        /// The address connected to.
        address: String,
        /// The peer, in the events that follow.
        peer: PeerId,
    },
    /// A connection attempt failed or a connection ended: the connector
    /// tries again after `delay`.
    ConnectRetried {
        /// The endpoint given to `connect`.
        endpoint: String,
        /// The peer (the connector's id).
        peer: PeerId,
        /// When the next attempt is made.
        delay: Duration,
    },
    /// The ZMTP handshake completed: the peer's READY metadata is known.
    HandshakeSucceeded {
        /// The peer.
        peer: PeerId,
        /// The peer's address.
        address: String,
        /// The peer's socket type (READY `Socket-Type`).
        socket_type: SocketType,
        /// The peer's READY `Identity` (empty when it sent none).
        identity: Bytes,
        /// Every READY property, `Socket-Type` and `Identity` included, and
        /// the application's `X-` properties.
        metadata: Metadata,
        /// ROUTER: the routing id its messages carry (the identity, or the
        /// one generated for it).
        routing_id: Option<Bytes>,
    },
    /// The connection ended before its handshake completed.
    HandshakeFailed {
        /// The peer.
        peer: PeerId,
        /// The peer's address.
        address: String,
        /// Why.
        reason: ConnectionEnd,
    },
    /// A connection whose handshake had completed ended.
    Disconnected {
        /// The peer.
        peer: PeerId,
        /// The peer's address.
        address: String,
        /// Why.
        reason: ConnectionEnd,
    },
    /// The queue towards `peer` reached the send HWM: a message was dropped
    /// (PUB, XPUB, ROUTER) or a sender has to wait (PUSH, DEALER, REQ, PAIR,
    /// mandatory ROUTER). Sent once until [`SendQueueDrained`](SocketEvent::SendQueueDrained);
    /// a peer that stays here is not reading (ZRE treats it as unresponsive).
    SendQueueFull {
        /// The peer.
        peer: PeerId,
    },
    /// The queue towards `peer`, full before, was taken by its connection.
    SendQueueDrained {
        /// The peer.
        peer: PeerId,
    },
    /// PUB/XPUB: `peer` subscribed to `prefix` (every subscription a peer
    /// sends, including those XPUB does not pass on because another peer
    /// holds the same prefix).
    Subscribed {
        /// The subscribing peer.
        peer: PeerId,
        /// The prefix.
        prefix: Bytes,
    },
    /// PUB/XPUB: `peer` cancelled one subscription to `prefix`.
    Unsubscribed {
        /// The peer.
        peer: PeerId,
        /// The prefix.
        prefix: Bytes,
    },
    /// The socket closed (after its linger); the last event of a monitor.
    Closed,
}

/// Why a connection ended (in [`SocketEvent::HandshakeFailed`] and
/// [`SocketEvent::Disconnected`]), by fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionEnd {
    /// The peer closed the connection.
    #[error("peer closed the connection")]
    PeerClosed,
    /// The operating system reported an error.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The peer broke the protocol, sent malformed bytes or timed out (the
    /// proto crate's error says which).
    #[error("protocol error: {0}")]
    Protocol(#[from] dafka_zmtp_proto::Error),
    /// The socket refused the peer after its handshake.
    #[error("rejected after handshake: {0}")]
    Rejected(#[from] Rejection),
    /// The peer broke a subscription limit of the options.
    #[error("subscription limit: {0}")]
    Subscription(#[from] SubscriptionLimit),
    /// The peer held more memory than it may, or held it too long: a frame that stopped
    /// arriving, or an unauthenticated peer past the process-wide budget.
    #[error("memory limit: {0}")]
    Memory(#[from] crate::budget::MemoryLimit),
    /// Our side ended it: the socket closed, or the endpoint was unbound or
    /// disconnected.
    #[error("closed by this socket")]
    Closed,
}

impl ConnectionEnd {
    /// A copy for the monitor (an I/O error keeps its code or kind and text).
    pub(crate) fn duplicate(&self) -> ConnectionEnd {
        match self {
            ConnectionEnd::PeerClosed => ConnectionEnd::PeerClosed,
            ConnectionEnd::Io(e) => ConnectionEnd::Io(match e.raw_os_error() {
                Some(code) => std::io::Error::from_raw_os_error(code),
                None => std::io::Error::new(e.kind(), e.to_string()),
            }),
            ConnectionEnd::Protocol(e) => ConnectionEnd::Protocol(e.clone()),
            ConnectionEnd::Rejected(r) => ConnectionEnd::Rejected(*r),
            ConnectionEnd::Subscription(s) => ConnectionEnd::Subscription(*s),
            ConnectionEnd::Memory(m) => ConnectionEnd::Memory(*m),
            ConnectionEnd::Closed => ConnectionEnd::Closed,
        }
    }
}

/// Why a socket refused a peer whose handshake completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The peer's socket type cannot talk to ours.
    #[error("peer socket type {} is not compatible", .0.as_str())]
    Incompatible(SocketType),
    /// ROUTER: another peer holds the routing id (without `router_handover`).
    #[error("routing id already in use by another peer")]
    DuplicateRoutingId,
    /// PAIR: the socket has a peer already.
    #[error("PAIR socket already has a peer")]
    PairBusy,
    /// The socket is closing.
    #[error("socket is closing")]
    Closed,
    /// ROUTER: a new peer took over the routing id (`router_handover`).
    #[error("routing id taken over by a new peer (router_handover)")]
    HandedOver,
}

/// A peer's subscriptions broke a limit of the options (defined by the pattern layer).
pub use dafka_zmtp_proto::pattern::SubscriptionLimit;

/// The bounded queue between a socket and its monitor.
#[derive(Debug)]
struct Queue {
    events: Mutex<VecDeque<SocketEvent>>,
    capacity: usize,
    dropped: AtomicU64,
    /// The socket closed (no event follows `Closed`), or the monitor was
    /// replaced.
    ended: AtomicBool,
    notify: Notify,
}

/// The socket's side: where events go, if a monitor is attached.
#[derive(Debug, Default)]
pub(crate) struct Events {
    /// Read on every event site: no lock while nobody monitors.
    attached: AtomicBool,
    slot: Mutex<Slot>,
}

#[derive(Debug, Default)]
struct Slot {
    queue: Option<Arc<Queue>>,
    /// The socket has closed: a monitor attached now gets only `Closed`.
    closed: bool,
}

impl Events {
    /// Is a monitor attached? One relaxed load.
    #[inline]
    pub(crate) fn on(&self) -> bool {
        self.attached.load(Ordering::Relaxed)
    }

    /// Send the event made by `make`, if a monitor is attached (`make` is
    /// not called otherwise).
    #[inline]
    pub(crate) fn emit(&self, make: impl FnOnce() -> SocketEvent) {
        if self.on() {
            self.push(make());
        }
    }

    #[cold]
    fn push(&self, event: SocketEvent) {
        let queue = lock(&self.slot).queue.clone();
        if let Some(q) = queue {
            q.push(event);
        }
    }

    /// Attach a new monitor (ending the previous one).
    pub(crate) fn attach(&self, capacity: usize) -> Monitor {
        let q = Arc::new(Queue {
            events: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            dropped: AtomicU64::new(0),
            ended: AtomicBool::new(false),
            notify: Notify::new(),
        });
        let mut slot = lock(&self.slot);
        if slot.closed {
            lock(&q.events).push_back(SocketEvent::Closed);
            q.ended.store(true, Ordering::Release);
        } else {
            if let Some(old) = slot.queue.replace(q.clone()) {
                old.end();
            }
            self.attached.store(true, Ordering::Relaxed);
        }
        Monitor { queue: q }
    }

    /// The socket closed: send [`SocketEvent::Closed`] and end the stream.
    pub(crate) fn close(&self) {
        let mut slot = lock(&self.slot);
        slot.closed = true;
        self.attached.store(false, Ordering::Relaxed);
        if let Some(q) = slot.queue.take() {
            q.push(SocketEvent::Closed);
            q.end();
        }
    }
}

impl Queue {
    /// Append, dropping (and counting) the oldest event when full.
    fn push(&self, event: SocketEvent) {
        let mut events = lock(&self.events);
        if events.len() >= self.capacity {
            events.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        events.push_back(event);
        drop(events);
        self.notify.notify_waiters();
    }

    fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }
}

/// A socket's event stream, from [`Socket::monitor`](crate::Socket::monitor).
///
/// Holds at most its capacity of events: when full, the oldest is dropped
/// and counted in [`dropped`](Monitor::dropped). The stream ends after
/// [`SocketEvent::Closed`], or when another monitor replaces it.
#[derive(Debug)]
pub struct Monitor {
    queue: Arc<Queue>,
}

impl Monitor {
    /// The next event; `None` once the stream has ended and every event was
    /// taken. Cancel-safe.
    pub async fn recv(&mut self) -> Option<SocketEvent> {
        let q = &self.queue;
        wait_until(&q.notify, || {
            !lock(&q.events).is_empty() || q.ended.load(Ordering::Acquire)
        })
        .await;
        lock(&q.events).pop_front()
    }

    /// The next event if one is queued.
    pub fn try_recv(&mut self) -> Option<SocketEvent> {
        lock(&self.queue.events).pop_front()
    }

    /// Has the stream ended (the socket closed, or the monitor was replaced)?
    /// Queued events may still be taken.
    pub fn is_ended(&self) -> bool {
        self.queue.ended.load(Ordering::Acquire)
    }

    /// How many events were dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.queue.dropped.load(Ordering::Relaxed)
    }
}
