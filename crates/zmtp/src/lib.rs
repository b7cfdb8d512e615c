//! ZeroMQ sockets on tokio, speaking ZMTP 3.1 through `dafka-zmtp-proto`.
//!
//! Every classic socket type is provided: REQ, REP, DEALER, ROUTER, PUB,
//! SUB, XPUB, XSUB, PUSH, PULL and PAIR, over `tcp://`, `ipc://` (Unix domain
//! sockets) and `inproc://` (same process, no encoding). Peers may be libzmq,
//! pyzmq, JeroMQ or this crate.
//!
//! ```
//! use dafka_zmtp::{Message, Options, Socket, SocketType};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), dafka_zmtp::Error> {
//! let pull = Socket::new(SocketType::Pull, Options::default())?;
//! let endpoint = pull.bind("tcp://127.0.0.1:0").await?; // port 0: the OS picks one
//! let push = Socket::new(SocketType::Push, Options::default())?;
//! push.connect(&endpoint).await?;
//!
//! push.send(Message::from(&b"hello"[..])).await?;
//! let msg = pull.recv().await?;
//! assert_eq!(msg.frames()[0], &b"hello"[..]);
//!
//! push.close().await;
//! pull.close().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Design
//!
//! * The wire protocol lives in the sans-IO crate `dafka-zmtp-proto`; this
//!   crate only moves bytes. Each connection is one task owning the stream, a
//!   read buffer, a write buffer and the protocol `Connection`.
//! * Outgoing messages wait in a per-peer queue bounded by
//!   [`Options::sndhwm`]; the connection task drains the whole queue into its
//!   write buffer before writing, so small messages are batched under load and
//!   written at once when idle.
//! * Received messages go to one queue per socket bounded by
//!   [`Options::rcvhwm`]; when it is full the connections stop reading
//!   (TCP back-pressure). Nothing is dropped on the receive side.
//! * A peer that breaks the protocol loses its connection (logged with
//!   `tracing` at WARN); the socket keeps serving everyone else.
//! * [`Socket::recv_many`] and [`Socket::send_many`] move batches under one
//!   lock; [`Socket::monitor`] streams [`SocketEvent`]s (connections,
//!   handshakes with the peer's READY metadata, queues at their HWM, who
//!   subscribed); [`Socket::close_in_background`] returns at once and
//!   [`term`] waits, bounded, for such closes to flush.
// One function in `sys` calls setsockopt(2); everything else is safe code.
#![deny(unsafe_code)]

mod background;
mod budget;
mod conn;
mod drive;
mod endpoint;
mod error;
mod failures;
mod inproc;
mod life;
pub mod local;
mod monitor;
mod options;
mod pipe;
mod socket;
mod sys;
mod transport;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use bytes::Bytes;
/// The subscription bytes (`0x01`/`0x00` + prefix) an XPUB hands up and an XSUB sends.
pub use dafka_zmtp_proto::pattern::Subscription;
pub use dafka_zmtp_proto::{
    AuthDecision, AuthRequest, Authenticator, Credentials, CurveKeyPair, Limits, MechanismConfig,
    Message, Metadata, SocketType, Z85Error, z85_decode_key, z85_encode,
};

pub use crate::background::{pending_closes, term};
pub use crate::budget::{
    DEFAULT_UNAUTHENTICATED_BUDGET, MemoryLimit, UNAUTHENTICATED_BUDGET_ENV,
    set_unauthenticated_budget, unauthenticated_budget, unauthenticated_held,
};
pub use crate::error::{Error, SendError, TermTimeout};
pub use crate::failures::FAILURES_LOGGED_PER_SECOND;
pub use crate::monitor::{
    ConnectionEnd, Monitor, PeerId, Rejection, SocketEvent, SubscriptionLimit,
};
pub use crate::options::Options;

use crate::endpoint::Endpoint;
use crate::socket::Inner;

/// Lock a mutex, ignoring poisoning (no code path panics while holding one).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Resolves once `ready()` holds, re-checking at every notification of
/// `notify`. The waiter registers before each check, so a notification
/// between the check and the wait is not lost.
pub(crate) async fn wait_until(notify: &tokio::sync::Notify, ready: impl Fn() -> bool) {
    loop {
        let n = notify.notified();
        tokio::pin!(n);
        n.as_mut().enable();
        if ready() {
            return;
        }
        n.await;
    }
}

/// A ZeroMQ socket.
///
/// `Socket` is a cheap handle: clones share the same socket, and it is
/// `Send + Sync`, so several tasks may send and receive concurrently. The socket
/// closes when [`close`](Socket::close) is awaited or, in the background,
/// when the last handle is dropped.
///
/// `send` and `recv` are cancel-safe in the sense that a cancelled `recv`
/// never loses a message; a cancelled `send` drops the message it was given.
///
/// ```
/// use dafka_zmtp::{Message, Options, Socket, SocketType};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), dafka_zmtp::Error> {
/// let rep = Socket::new(SocketType::Rep, Options::default())?;
/// rep.bind("inproc://doc-example").await?;
/// let req = Socket::new(SocketType::Req, Options::default())?;
/// req.connect("inproc://doc-example").await?;
///
/// req.send(Message::from(&b"ping"[..])).await?;
/// let request = rep.recv().await?;
/// assert_eq!(request.frames()[0], &b"ping"[..]);
/// rep.send(Message::from(&b"pong"[..])).await?;
/// assert_eq!(req.recv().await?.frames()[0], &b"pong"[..]);
///
/// // REQ is lock-step: a second send before the reply is a caller error.
/// req.send(Message::from(&b"again"[..])).await?;
/// assert!(matches!(
///     req.send(Message::from(&b"too soon"[..])).await,
///     Err(dafka_zmtp::Error::InvalidState(_))
/// ));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Socket {
    handle: Arc<Handle>,
}

/// Closes the socket when the last user handle goes away.
struct Handle {
    inner: Arc<Inner>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        if !self.inner.is_closed() {
            background::close(&self.inner, self.inner.options.linger);
        }
    }
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket")
            .field("socket_type", &self.handle.inner.socket_type)
            .finish_non_exhaustive()
    }
}

impl Socket {
    /// Create a socket whose tasks run on the current tokio runtime.
    ///
    /// Fails with [`Error::NoRuntime`] outside a runtime (see
    /// [`new_in`](Socket::new_in)), and with [`Error::InvalidOption`] when
    /// [`Options::validate`] does.
    pub fn new(socket_type: SocketType, options: Options) -> Result<Socket, Error> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        Socket::new_in(socket_type, options, runtime)
    }

    /// Create a socket whose tasks run on `runtime` (callable from any
    /// thread). Fails with [`Error::InvalidOption`] when
    /// [`Options::validate`] does.
    pub fn new_in(
        socket_type: SocketType,
        options: Options,
        runtime: tokio::runtime::Handle,
    ) -> Result<Socket, Error> {
        options.validate(socket_type)?;
        Ok(Socket {
            handle: Arc::new(Handle {
                inner: Arc::new(Inner::new(socket_type, options, runtime)),
            }),
        })
    }

    fn inner(&self) -> &Arc<Inner> {
        &self.handle.inner
    }

    /// The socket's type.
    pub fn socket_type(&self) -> SocketType {
        self.inner().socket_type
    }

    /// Has [`close`](Socket::close) been called (or the last handle dropped)?
    pub fn is_closed(&self) -> bool {
        self.inner().is_closed()
    }

    /// The options the socket was created with.
    pub fn options(&self) -> &Options {
        &self.inner().options
    }

    /// Listen on an endpoint and return the actual endpoint (port 0 and `*`
    /// resolved, e.g. `tcp://127.0.0.1:41234`).
    ///
    /// * `tcp://host:port`: `host` is an IPv4 address, a bracketed IPv6
    ///   address (`[::1]`), a host name or `*` (all IPv4 interfaces);
    ///   `port` may be `0` or `*` for an ephemeral port.
    /// * `ipc:///path`: a stale socket file nobody listens on is replaced.
    /// * `inproc://name`: the name must not be bound already.
    pub async fn bind(&self, endpoint: &str) -> Result<String, Error> {
        let inner = self.inner();
        self.check_usable()?;
        match Endpoint::parse(endpoint)? {
            Endpoint::Tcp { host, port } => transport::bind_tcp(inner, &host, port, endpoint).await,
            Endpoint::Ipc(path) => transport::bind_ipc(inner, &path, endpoint).await,
            Endpoint::Inproc(name) => inproc::bind(inner, &name),
        }
    }

    /// Connect to an endpoint. Returns at once: the connection is made (and
    /// remade after failures, with backoff) in the background, and messages
    /// sent meanwhile are queued for it up to the HWM.
    pub async fn connect(&self, endpoint: &str) -> Result<(), Error> {
        let inner = self.inner();
        self.check_usable()?;
        match Endpoint::parse(endpoint)? {
            Endpoint::Tcp { host, port } => {
                if host == "*" || port == 0 {
                    return Err(Error::endpoint(
                        endpoint,
                        "connect needs an explicit host and port",
                    ));
                }
                transport::connect_tcp(inner, host, port, endpoint)
            }
            Endpoint::Ipc(path) => transport::connect_ipc(inner, path, endpoint),
            Endpoint::Inproc(name) => inproc::connect(inner, &name),
        }
    }

    fn check_usable(&self) -> Result<(), Error> {
        if self.inner().is_closed() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Stop listening on an endpoint given to (or returned by)
    /// [`bind`](Socket::bind), and close the connections accepted from it.
    /// [`Error::UnknownEndpoint`] if it is not bound.
    pub async fn unbind(&self, endpoint: &str) -> Result<(), Error> {
        let inner = self.inner();
        match Endpoint::parse(endpoint)? {
            Endpoint::Inproc(name) => inproc::unbind(inner, &name),
            _ => inner.stop_endpoint(endpoint, true),
        }
    }

    /// Stop connecting to an endpoint given to [`connect`](Socket::connect):
    /// the connection is closed, reconnection stops and messages still queued
    /// for it are dropped. [`Error::UnknownEndpoint`] if it is not connected.
    pub async fn disconnect(&self, endpoint: &str) -> Result<(), Error> {
        Endpoint::parse(endpoint)?;
        self.inner().stop_endpoint(endpoint, false)
    }

    /// Send a message, waiting while the socket's pattern says so (HWM
    /// reached on PUSH/DEALER/REQ/PAIR, or no peer yet). PUB/XPUB and ROUTER
    /// never wait (they drop, per ZeroMQ semantics), except ROUTER with
    /// `router_mandatory`.
    ///
    /// A ROUTER routes by the first frame (the peer's routing id, as it was
    /// prepended on receive):
    ///
    /// ```
    /// use dafka_zmtp::{Bytes, Message, Options, Socket, SocketType};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), dafka_zmtp::Error> {
    /// let router = Socket::new(SocketType::Router, Options::default())?;
    /// let endpoint = router.bind("tcp://127.0.0.1:0").await?;
    /// let dealer = Socket::new(
    ///     SocketType::Dealer,
    ///     Options::default().with_routing_id(Some(Bytes::from_static(b"worker-1"))),
    /// )?;
    /// dealer.connect(&endpoint).await?;
    ///
    /// dealer.send(Message::from(&b"ready"[..])).await?;
    /// let msg = router.recv().await?;
    /// assert_eq!(msg.frames()[0], &b"worker-1"[..]);
    /// assert_eq!(msg.frames()[1], &b"ready"[..]);
    ///
    /// let reply: Message = vec![msg.frames()[0].clone(), Bytes::from_static(b"job")].into();
    /// router.send(reply).await?;
    /// assert_eq!(dealer.recv().await?.frames()[0], &b"job"[..]);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send(&self, msg: Message) -> Result<(), Error> {
        let inner = self.inner();
        let mut msg = match inner.try_send(msg) {
            Ok(()) => return Ok(()),
            Err(SendError::Fail(e)) => return Err(e),
            Err(SendError::Block(m)) => m,
        };
        loop {
            let notified = inner.send_space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            msg = match inner.try_send(msg) {
                Ok(()) => return Ok(()),
                Err(SendError::Fail(e)) => return Err(e),
                Err(SendError::Block(m)) => m,
            };
            notified.await;
        }
    }

    /// Send every message of `msgs`, from the front, waiting for room as
    /// [`send`](Socket::send) does. Sent messages are removed from `msgs` as
    /// they are queued, so after an error, or when the future is dropped, the
    /// unsent ones are still in `msgs` (a refused message is dropped with its
    /// error, as by `send`).
    ///
    /// Cheaper than one `send` per message: PUSH and DEALER queue a whole
    /// batch under one lock of the socket.
    ///
    /// ```
    /// use std::collections::VecDeque;
    /// use dafka_zmtp::{Message, Options, Socket, SocketType};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), dafka_zmtp::Error> {
    /// let pull = Socket::new(SocketType::Pull, Options::default())?;
    /// pull.bind("inproc://doc-many").await?;
    /// let push = Socket::new(SocketType::Push, Options::default())?;
    /// push.connect("inproc://doc-many").await?;
    ///
    /// let mut batch: VecDeque<Message> = (0..100u32)
    ///     .map(|i| Message::from(dafka_zmtp::Bytes::from(i.to_be_bytes().to_vec())))
    ///     .collect();
    /// push.send_many(&mut batch).await?;
    /// assert!(batch.is_empty());
    ///
    /// let mut got = Vec::new();
    /// while got.len() < 100 {
    ///     pull.recv_many(1000, &mut got).await?; // everything queued, at least one
    /// }
    /// assert_eq!(got[99].frames()[0], &99u32.to_be_bytes()[..]);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send_many(&self, msgs: &mut VecDeque<Message>) -> Result<(), Error> {
        let inner = self.inner();
        loop {
            if msgs.is_empty() {
                return Ok(());
            }
            match inner.try_send_many(msgs) {
                Ok(_) => continue,
                Err(Error::WouldBlock) => {}
                Err(e) => return Err(e),
            }
            let notified = inner.send_space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match inner.try_send_many(msgs) {
                Ok(_) => continue,
                Err(Error::WouldBlock) => notified.await,
                Err(e) => return Err(e),
            }
        }
    }

    /// Queue messages from the front of `msgs` without waiting, until one
    /// would wait: returns how many were queued (they are removed from
    /// `msgs`), [`Error::WouldBlock`] if none could be. A refused message is
    /// dropped with its error; the messages after it stay in `msgs`.
    pub fn try_send_many(&self, msgs: &mut VecDeque<Message>) -> Result<usize, Error> {
        self.inner().try_send_many(msgs)
    }

    /// Send without waiting: [`Error::WouldBlock`] when [`send`](Socket::send)
    /// would wait (the message is dropped in that case).
    pub fn try_send(&self, msg: Message) -> Result<(), Error> {
        self.try_send_keeping(msg).map_err(|e| match e {
            SendError::Fail(e) => e,
            SendError::Block(_) => Error::WouldBlock,
        })
    }

    /// Like [`try_send`](Socket::try_send), but a message that would have to
    /// wait is handed back ([`SendError::Block`]), e.g. to wait for room with
    /// [`send`](Socket::send).
    pub fn try_send_keeping(&self, msg: Message) -> Result<(), SendError> {
        self.inner().try_send(msg)
    }

    /// Receive the next message. Cancel-safe: if the future is dropped, no
    /// message is lost.
    // The future of `recv_with` itself, not one wrapping it: a caller that
    // moves it (into a timeout, say) copies less (callgrind: 7 instructions
    // per 128 B message).
    pub fn recv(&self) -> impl Future<Output = Result<Message, Error>> + Send + '_ {
        let inner = self.inner();
        self.recv_with(move || inner.try_recv())
    }

    /// Receive at least one message, and every further one already queued up
    /// to `max` in all, appended to `out`; returns how many. Waits as
    /// [`recv`](Socket::recv) does for the first one; the others cost no
    /// wake-up each, so a consumer drains thousands per wake-up. Cancel-safe:
    /// messages are appended only when the call completes.
    ///
    /// REQ and REP take one message per call, as their lock-step requires.
    /// With `max == 0`, returns `Ok(0)` at once.
    pub async fn recv_many(&self, max: usize, out: &mut Vec<Message>) -> Result<usize, Error> {
        if max == 0 {
            return Ok(0);
        }
        let inner = self.inner();
        self.recv_with(|| inner.try_recv_many(max, out)).await
    }

    /// Receive without waiting up to `max` queued messages, appended to
    /// `out`: returns how many, [`Error::WouldBlock`] when nothing is queued.
    pub fn try_recv_many(&self, max: usize, out: &mut Vec<Message>) -> Result<usize, Error> {
        self.inner().try_recv_many(max, out)
    }

    /// Waits until `attempt` stops failing with [`Error::WouldBlock`].
    async fn recv_with<T>(
        &self,
        mut attempt: impl FnMut() -> Result<T, Error>,
    ) -> Result<T, Error> {
        let inner = self.inner();
        // Something received, or a failure (closed socket); `None`: nothing yet.
        let mut queued = || match attempt() {
            Err(Error::WouldBlock) => None,
            other => Some(other),
        };
        if let Some(r) = queued() {
            return r;
        }
        // With few connections, wait by driving them (see `drive`): a reply
        // is then read and decoded in this task's poll, one hop fewer.
        let conns = inner.inline_connections();
        loop {
            if let Some(conns) = &conns {
                for c in conns.iter() {
                    c.drive_for_receiver();
                }
                if let Some(r) = queued() {
                    return r;
                }
            }
            let notified = inner.inbound.data.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(r) = queued() {
                return r;
            }
            match &conns {
                None => notified.await,
                // Woken by the queue or by any of the connections: drive again.
                Some(conns) => {
                    let mut registered = false;
                    std::future::poll_fn(|cx| {
                        if notified.as_mut().poll(cx).is_ready() || registered {
                            return std::task::Poll::Ready(());
                        }
                        for c in conns.iter() {
                            c.register_receiver(cx.waker());
                        }
                        registered = true;
                        std::task::Poll::Pending
                    })
                    .await;
                }
            }
        }
    }

    /// Receive without waiting: [`Error::WouldBlock`] when nothing is queued.
    pub fn try_recv(&self) -> Result<Message, Error> {
        self.inner().try_recv()
    }

    /// SUB: receive messages whose first frame starts with `prefix` (the empty
    /// prefix matches everything). XSUB: sends the `0x01 + prefix`
    /// subscription message upstream. Other types:
    /// [`Error::NotSupported`].
    ///
    /// Subscriptions reach the publisher asynchronously (and again after every
    /// reconnect); messages published before that are not delivered.
    ///
    /// ```
    /// use dafka_zmtp::{Message, Options, Socket, SocketType};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), dafka_zmtp::Error> {
    /// // XPUB reports subscriptions, which tells us when the SUB is ready.
    /// let publisher = Socket::new(SocketType::Xpub, Options::default())?;
    /// publisher.bind("inproc://doc-pubsub").await?;
    /// let sub = Socket::new(SocketType::Sub, Options::default())?;
    /// sub.connect("inproc://doc-pubsub").await?;
    /// sub.subscribe(b"weather.")?;
    /// assert_eq!(publisher.recv().await?.frames()[0], &b"\x01weather."[..]);
    ///
    /// publisher.send(Message::from(&b"sports.result"[..])).await?; // filtered out
    /// publisher.send(Message::from(&b"weather.paris"[..])).await?;
    /// assert_eq!(sub.recv().await?.frames()[0], &b"weather.paris"[..]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn subscribe(&self, prefix: &[u8]) -> Result<(), Error> {
        self.set_subscription(prefix, true)
    }

    /// Cancel one earlier [`subscribe`](Socket::subscribe) of the same prefix.
    pub fn unsubscribe(&self, prefix: &[u8]) -> Result<(), Error> {
        self.set_subscription(prefix, false)
    }

    fn set_subscription(&self, prefix: &[u8], subscribe: bool) -> Result<(), Error> {
        let inner = self.inner();
        if inner.socket_type == SocketType::Xsub {
            let msg = Message::from(dafka_zmtp_proto::pattern::encode(subscribe, prefix));
            return self.try_send(msg);
        }
        inner.set_subscription(prefix, subscribe)
    }

    /// Attach a monitor: the socket's [`SocketEvent`]s from now on (see
    /// `docs/driver.md` for the list), at most `capacity` of them queued
    /// (when full, the oldest is dropped and counted in
    /// [`Monitor::dropped`]). Replaces (ends) an earlier monitor of the
    /// socket. On a closed socket the monitor holds just
    /// [`SocketEvent::Closed`].
    ///
    /// ```
    /// use dafka_zmtp::{Options, Socket, SocketEvent, SocketType};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), dafka_zmtp::Error> {
    /// let router = Socket::new(SocketType::Router, Options::default())?;
    /// let mut events = router.monitor(1024);
    /// let endpoint = router.bind("tcp://127.0.0.1:0").await?;
    /// let dealer = Socket::new(
    ///     SocketType::Dealer,
    ///     Options::default()
    ///         .with_routing_id(Some("mailbox-7".into()))
    ///         .with_property("X-Name", "node-7"),
    /// )?;
    /// dealer.connect(&endpoint).await?;
    /// loop {
    ///     match events.recv().await {
    ///         Some(SocketEvent::HandshakeSucceeded { identity, metadata, .. }) => {
    ///             assert_eq!(identity, "mailbox-7");
    ///             assert_eq!(metadata.get("X-Name").unwrap(), "node-7");
    ///             break;
    ///         }
    ///         Some(_) => {} // Listening, Accepted
    ///         None => unreachable!("the socket is open"),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn monitor(&self, capacity: usize) -> Monitor {
        self.inner().monitor(capacity)
    }

    /// Close the socket: stop accepting, flush queued messages for up to
    /// [`Options::linger`], then drop every connection. Pending and later
    /// calls fail with [`Error::Closed`]. Idempotent.
    ///
    /// With the default linger (`None`) this waits for as long as a message
    /// is queued for a peer that never comes; see
    /// [`close_in_background`](Socket::close_in_background) for a close that
    /// returns at once.
    pub async fn close(&self) {
        self.inner().close(self.inner().options.linger).await;
    }

    /// Close the socket and return at once: queued messages keep being
    /// flushed in a task of the socket's runtime for up to
    /// [`Options::linger`], as [`close`](Socket::close) would, while the
    /// runtime runs. [`term`] waits for every such flush, with a bound.
    /// Dropping the last handle of an open socket does the same. Idempotent;
    /// on a socket closed already it does nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dafka_zmtp::{Message, Options, Socket, SocketType};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), dafka_zmtp::Error> {
    /// let push = Socket::new(SocketType::Push, Options::default())?;
    /// push.connect("tcp://127.0.0.1:1").await?; // nobody listens there
    /// push.send(Message::from(&b"never delivered"[..])).await?;
    /// push.close_in_background(); // returns at once
    /// // At exit: wait up to 100 ms for background flushes, then drop them.
    /// assert!(dafka_zmtp::term(Duration::from_millis(100)).await.is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn close_in_background(&self) {
        background::close(self.inner(), self.inner().options.linger);
    }

    /// [`close_in_background`](Socket::close_in_background) with `linger` in
    /// place of [`Options::linger`] (`None`: until everything is sent or
    /// [`term`] ends it; `Some(Duration::ZERO)`: drop queued messages now).
    pub fn close_in_background_with(&self, linger: Option<Duration>) {
        background::close(self.inner(), linger);
    }
}
