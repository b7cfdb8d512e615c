//! The socket-pattern layer: peers (pipes), load balancing, routing,
//! subscriptions, REQ/REP state. Transport-independent.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::{Notify, watch};

use crate::drive::CoTask;
use crate::error::{Error, SendError};
use crate::monitor::{Events, PeerId, Rejection, SocketEvent, SubscriptionLimit};
use crate::options::Options;
use crate::pipe::{Inbound, Out, Padded, Pipe};
use crate::subs::{MatchRun, SubSet};
use crate::{Message, SocketType, lock, wait_until};

/// Lifecycle of a socket, observed by all of its tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Running,
    /// `close` was called: flush queued output (linger), accept nothing new.
    Closing,
    /// Linger expired or everything flushed: every task exits now.
    Terminated,
}

/// A stop signal for the tasks of one endpoint (`unbind` / `disconnect`).
#[derive(Debug, Default)]
pub(crate) struct Stop {
    flag: AtomicBool,
    notify: Notify,
}

impl Stop {
    pub(crate) fn stop(&self) {
        self.flag.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Resolves once [`stop`](Stop::stop) was called.
    pub(crate) async fn wait(&self) {
        wait_until(&self.notify, || self.is_stopped()).await;
    }
}

/// An endpoint given to `bind` or `connect`, for `unbind` / `disconnect`.
#[derive(Debug)]
struct EndpointEntry {
    /// The strings it can be named by (as given, and as resolved by bind).
    names: Vec<String>,
    bound: bool,
    stop: Arc<Stop>,
    /// A connected endpoint's pipe, removed at once by `disconnect`.
    pipe: Option<u64>,
}

/// A connection's handle on its attached pipe.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    pub(crate) pipe: Arc<Pipe>,
    /// ROUTER: routing id prepended to every received message.
    pub(crate) route_prefix: Option<Bytes>,
    /// ROUTER with `router_peer_key`: the frame put after the routing id (the peer's
    /// authenticated CURVE key, or empty).
    pub(crate) key_prefix: Option<Bytes>,
    /// Stopped when this connection must end (ROUTER handover).
    pub(crate) evicted: Arc<Stop>,
}

#[derive(Debug)]
struct PipeEntry {
    pipe: Arc<Pipe>,
    /// Handshake complete (a connect-side pipe exists before that).
    ready: bool,
    routing_id: Option<Bytes>,
    /// PUB/XPUB: what the peer on this pipe subscribed to (set semantics).
    peer_subs: SubSet,
    /// The attached connection's [`Link::evicted`].
    evict: Arc<Stop>,
}

#[derive(Debug, Default)]
struct State {
    pipes: Vec<PipeEntry>,
    /// Next pipe index for round-robin.
    rr: usize,
    /// ROUTER: routing id -> the pipe to that peer.
    routes: HashMap<Bytes, Arc<Pipe>>,
    next_routing_id: u32,
    /// SUB/XSUB: our subscriptions. XPUB: for each prefix, how many peers
    /// subscribed to it.
    subs: SubSet,
    /// REQ: the pipe the outstanding request went to.
    req_waiting: Option<u64>,
    /// REP: the envelope of the request being answered, and its pipe.
    rep_envelope: Option<(u64, Vec<Bytes>)>,
    /// Names registered in the inproc registry by `bind`.
    inproc_names: Vec<String>,
    /// Bound and connected endpoints.
    endpoints: Vec<EndpointEntry>,
}

impl State {
    fn entry_mut(&mut self, id: u64) -> Option<&mut PipeEntry> {
        self.pipes.iter_mut().find(|e| e.pipe.id == id)
    }
}

/// Shared state of one socket; tasks hold `Arc<Inner>`.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) socket_type: SocketType,
    pub(crate) options: Options,
    state: Padded<Mutex<State>>,
    /// Set once, by `close`, under the state lock: readable without the lock
    /// on hot paths, and stable while the lock is held.
    closed: AtomicBool,
    pub(crate) inbound: Inbound,
    /// Wakes blocked senders (a pipe drained below its HWM, a peer arrived,
    /// the socket closed).
    pub(crate) send_space: Notify,
    phase_tx: watch::Sender<Phase>,
    tasks: AtomicUsize,
    tasks_done: Notify,
    next_pipe_id: AtomicU64,
    /// Where [`SocketEvent`]s go when a monitor is attached.
    pub(crate) events: Events,
    pub(crate) runtime: tokio::runtime::Handle,
    /// The connection tasks (see [`crate::drive`]), as one shared snapshot.
    connections: Mutex<Arc<[Arc<CoTask>]>>,
}

/// Most connections a waiting receiver drives itself (see [`crate::drive`]).
const INLINE_MAX: usize = 4;

/// Decrements the live-task count of a socket when a task ends.
pub(crate) struct TaskGuard(Arc<Inner>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        if self.0.tasks.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.tasks_done.notify_waiters();
        }
    }
}

impl Inner {
    pub(crate) fn new(
        socket_type: SocketType,
        options: Options,
        runtime: tokio::runtime::Handle,
    ) -> Inner {
        let (phase_tx, _) = watch::channel(Phase::Running);
        Inner {
            socket_type,
            inbound: Inbound::new(options.effective_rcvhwm()),
            options,
            state: Padded(Mutex::new(State::default())),
            closed: AtomicBool::new(false),
            send_space: Notify::new(),
            phase_tx,
            tasks: AtomicUsize::new(0),
            tasks_done: Notify::new(),
            next_pipe_id: AtomicU64::new(1),
            events: Events::default(),
            runtime,
            connections: Mutex::new(Arc::from(Vec::new())),
        }
    }

    /// Spawns a connection task (a connector, or an accepted connection).
    /// For REQ, REP, DEALER, ROUTER and PAIR sockets, waiting receivers may
    /// also drive it (see [`crate::drive`]). A streaming consumer (PULL, SUB,
    /// XSUB, XPUB) gains more from its connection tasks reading ahead, in
    /// parallel on a multi-thread runtime, than from one hop less per message,
    /// so its connections stay plain tasks and are never listed.
    pub(crate) fn spawn_connection<F>(self: &Arc<Self>, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        /// Unlists the connection when its task ends, and drops its future
        /// then even if the task was cancelled (runtime shut down), so the
        /// stream closes with the task as it would without sharing.
        struct Unlist(Arc<Inner>, Arc<CoTask>);
        impl Drop for Unlist {
            fn drop(&mut self) {
                self.1.finish();
                self.0
                    .relist(|all| all.retain(|c| !Arc::ptr_eq(c, &self.1)));
            }
        }
        if !matches!(
            self.socket_type,
            SocketType::Req
                | SocketType::Rep
                | SocketType::Dealer
                | SocketType::Router
                | SocketType::Pair
        ) {
            self.spawn(fut);
            return;
        }
        let co = CoTask::new(fut);
        self.relist(|all| all.push(co.clone()));
        let unlist = Unlist(self.clone(), co.clone());
        self.spawn(async move {
            let _unlist = unlist;
            co.run().await;
        });
    }

    /// Replaces the snapshot of driveable connections by an edited copy.
    fn relist(&self, edit: impl FnOnce(&mut Vec<Arc<CoTask>>)) {
        let mut list = lock(&self.connections);
        let mut all = list.to_vec();
        edit(&mut all);
        *list = Arc::from(all);
    }

    /// The connections a receiver waiting on this thread may drive itself:
    /// none on another runtime (their I/O belongs to this one) or when there
    /// are more than [`INLINE_MAX`] (each wait would poll them all).
    pub(crate) fn inline_connections(&self) -> Option<Arc<[Arc<CoTask>]>> {
        let list = lock(&self.connections).clone();
        if list.is_empty() || list.len() > INLINE_MAX {
            return None;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.id() == self.runtime.id() => Some(list),
            _ => None,
        }
    }

    /// Spawn a task that counts towards the socket's lifetime (close waits for it).
    pub(crate) fn spawn<F>(self: &Arc<Self>, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.tasks.fetch_add(1, Ordering::AcqRel);
        let guard = TaskGuard(self.clone());
        self.runtime.spawn(async move {
            let _guard = guard;
            fut.await;
        });
    }

    pub(crate) fn phase(&self) -> watch::Receiver<Phase> {
        self.phase_tx.subscribe()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// A fresh peer id (the id of the pipe that peer will get).
    pub(crate) fn next_peer(&self) -> PeerId {
        PeerId(self.next_pipe_id.fetch_add(1, Ordering::Relaxed))
    }

    pub(crate) fn new_pipe(&self) -> Arc<Pipe> {
        self.pipe_for(self.next_peer())
    }

    fn pipe_for(&self, peer: PeerId) -> Arc<Pipe> {
        Arc::new(Pipe::new(peer.0, self.options.effective_sndhwm()))
    }

    /// `pipe` refused a message at its HWM: tell the monitor (once until it
    /// drains). Called from the refusal branches only, so that a send that
    /// is queued runs no monitor code (a wrapper checking the result cost
    /// 7 instructions per 128 B PUSH message under callgrind).
    #[cold]
    fn queue_full(&self, pipe: &Pipe) {
        if self.events.on() && !pipe.full_reported.swap(true, Ordering::Relaxed) {
            self.events.emit(|| SocketEvent::SendQueueFull {
                peer: PeerId(pipe.id),
            });
        }
    }

    /// A pipe that was at its HWM was taken by its connection: tell the
    /// monitor if it was told the pipe was full. Call when the take reported
    /// the pipe full (a rare path).
    pub(crate) fn queue_drained(&self, pipe: &Pipe) {
        if pipe.full_reported.swap(false, Ordering::Relaxed) {
            self.events.emit(|| SocketEvent::SendQueueDrained {
                peer: PeerId(pipe.id),
            });
        }
    }

    /// Register a connect-side pipe: it exists (and queues messages) before
    /// and between connections, like libzmq without `ZMQ_IMMEDIATE`.
    pub(crate) fn add_connect_pipe(&self) -> Result<Arc<Pipe>, Error> {
        let pipe = self.new_pipe();
        let mut st = lock(&self.state);
        if self.is_closed() {
            return Err(Error::Closed);
        }
        st.pipes.push(PipeEntry {
            pipe: pipe.clone(),
            ready: false,
            routing_id: None,
            peer_subs: SubSet::default(),
            evict: Arc::default(),
        });
        drop(st);
        self.send_space.notify_waiters();
        Ok(pipe)
    }

    /// Remove a pipe for good (connector gave up, socket terminating), and
    /// the endpoint entry of its connector.
    pub(crate) fn remove_pipe(&self, id: u64) {
        let mut st = lock(&self.state);
        st.endpoints.retain(|e| e.pipe != Some(id));
        if let Some(idx) = st.pipes.iter().position(|e| e.pipe.id == id) {
            let entry = st.pipes.remove(idx);
            self.forget_peer(&mut st, entry);
        }
    }

    pub(crate) fn register_inproc_name(&self, name: String) {
        lock(&self.state).inproc_names.push(name);
    }

    /// Remember an endpoint so that `unbind`/`disconnect` can stop it.
    pub(crate) fn register_endpoint(&self, names: Vec<String>, pipe: Option<u64>, stop: Arc<Stop>) {
        lock(&self.state).endpoints.push(EndpointEntry {
            names,
            bound: pipe.is_none(),
            stop,
            pipe,
        });
    }

    /// Stop the tasks of a bound (`bound`) or connected endpoint.
    pub(crate) fn stop_endpoint(&self, name: &str, bound: bool) -> Result<(), Error> {
        let mut st = lock(&self.state);
        let idx = st
            .endpoints
            .iter()
            .position(|e| e.bound == bound && e.names.iter().any(|n| n == name))
            .ok_or_else(|| Error::UnknownEndpoint(name.to_owned()))?;
        let entry = st.endpoints.remove(idx);
        if bound {
            for n in &entry.names {
                if let Some(inproc) = n.strip_prefix("inproc://") {
                    st.inproc_names.retain(|x| x != inproc);
                }
            }
        }
        if let Some(id) = entry.pipe
            && let Some(idx) = st.pipes.iter().position(|e| e.pipe.id == id)
        {
            let removed = st.pipes.remove(idx);
            self.forget_peer(&mut st, removed);
        }
        drop(st);
        entry.stop.stop();
        Ok(())
    }

    /// A connection finished its handshake: attach it (bind side: a new
    /// pipe; connect side: the pipe created by `connect`).
    pub(crate) fn attach(
        &self,
        existing: Option<&Arc<Pipe>>,
        peer: PeerId,
        peer_type: SocketType,
        peer_identity: &Bytes,
        peer_key: Option<[u8; 32]>,
    ) -> Result<Link, Rejection> {
        if !self.socket_type.is_compatible(peer_type) {
            return Err(Rejection::Incompatible(peer_type));
        }
        let mut st = lock(&self.state);
        // While lingering, connect-side pipes may still complete a handshake
        // to flush; new peers are refused.
        if self.is_closed() && existing.is_none() {
            return Err(Rejection::Closed);
        }
        let own_id = existing.map(|p| p.id);
        if self.socket_type == SocketType::Pair
            && st
                .pipes
                .iter()
                .any(|e| Some(e.pipe.id) != own_id && (e.ready || existing.is_none()))
        {
            return Err(Rejection::PairBusy);
        }
        let routing_id = if self.socket_type == SocketType::Router {
            if peer_identity.is_empty() {
                // libzmq: a peer without identity gets 0x00 + 32-bit counter.
                let rid = loop {
                    st.next_routing_id = st.next_routing_id.wrapping_add(1);
                    let mut b = BytesMut::with_capacity(5);
                    b.put_u8(0x00);
                    b.put_u32(st.next_routing_id);
                    let b = b.freeze();
                    if !st.routes.contains_key(&b) {
                        break b;
                    }
                };
                Some(rid)
            } else if let Some(old) = st.routes.get(peer_identity).map(|p| p.id) {
                if !self.options.router_handover {
                    return Err(Rejection::DuplicateRoutingId);
                }
                // Handover: the old connection is closed (as libzmq
                // terminates its pipe); replies go to the new one.
                if let Some(e) = st.entry_mut(old) {
                    e.routing_id = None;
                    e.evict.stop();
                }
                Some(peer_identity.clone())
            } else {
                Some(peer_identity.clone())
            }
        } else {
            None
        };
        let pipe = match existing {
            Some(p) => p.clone(),
            None => self.pipe_for(peer),
        };
        if let Some(rid) = &routing_id {
            st.routes.insert(rid.clone(), pipe.clone());
        }
        let evicted = Arc::new(Stop::default());
        match st.entry_mut(pipe.id) {
            Some(e) => {
                e.ready = true;
                e.routing_id = routing_id.clone();
                e.peer_subs.clear();
                e.evict = evicted.clone();
            }
            None => st.pipes.push(PipeEntry {
                pipe: pipe.clone(),
                ready: true,
                routing_id: routing_id.clone(),
                peer_subs: SubSet::default(),
                evict: evicted.clone(),
            }),
        }
        if self.socket_type == SocketType::Xpub
            && let Some(welcome) = &self.options.xpub_welcome_msg
        {
            pipe.push_force(Out::Msg(Message::from(welcome.clone())));
        }
        if matches!(self.socket_type, SocketType::Sub | SocketType::Xsub) {
            // Send our subscriptions first on every (re)connection; drop
            // subscription traffic queued for a previous connection.
            let prefixes: Vec<Bytes> = st.subs.prefixes().cloned().collect();
            pipe.with_queue(|q| {
                q.retain(|o| match o {
                    Out::Msg(m) => !is_subscription_message(m),
                    Out::Sub(_) | Out::Cancel(_) => false,
                });
                for p in prefixes.into_iter().rev() {
                    q.push_front(Out::Sub(p));
                }
            });
            pipe.wake.notify_one();
        }
        drop(st);
        self.send_space.notify_waiters();
        let key_prefix = (routing_id.is_some() && self.options.router_peer_key)
            .then(|| peer_key.map_or_else(Bytes::new, |k| Bytes::copy_from_slice(&k)));
        Ok(Link {
            pipe,
            route_prefix: routing_id,
            key_prefix,
            evicted,
        })
    }

    /// A connection ended. Bind-side pipes go away with their queue;
    /// connect-side pipes stay (with `unsent` put back) for the reconnect.
    pub(crate) fn detach(&self, link: &Link, connect_side: bool, unsent: VecDeque<Out>) {
        let mut st = lock(&self.state);
        let Some(idx) = st.pipes.iter().position(|e| e.pipe.id == link.pipe.id) else {
            return;
        };
        if connect_side {
            let entry = &mut st.pipes[idx];
            entry.ready = false;
            let old = PipeEntry {
                pipe: entry.pipe.clone(),
                ready: false,
                routing_id: entry.routing_id.take(),
                peer_subs: std::mem::take(&mut entry.peer_subs),
                evict: entry.evict.clone(),
            };
            link.pipe.put_back(unsent);
            self.forget_peer(&mut st, old);
        } else {
            let entry = st.pipes.remove(idx);
            self.forget_peer(&mut st, entry);
        }
    }

    /// Drop routing and subscription state of a departed peer.
    fn forget_peer(&self, st: &mut State, entry: PipeEntry) {
        if let Some(rid) = &entry.routing_id
            && st.routes.get(rid).map(|p| p.id) == Some(entry.pipe.id)
        {
            st.routes.remove(rid);
        }
        if self.socket_type == SocketType::Xpub {
            for prefix in entry.peer_subs.prefixes() {
                if st.subs.remove(prefix) {
                    self.inbound
                        .push_one(entry.pipe.id, subscription_message(0x00, prefix));
                }
            }
        }
    }

    /// An item that arrived from a peer: a message, or a subscription or
    /// cancellation (command form). Fails when the peer broke a
    /// subscription limit.
    pub(crate) fn on_item(
        &self,
        link: &Link,
        item: Out,
        batch: &mut VecDeque<(u64, Message)>,
    ) -> Result<(), SubscriptionLimit> {
        match item {
            Out::Msg(m) => self.on_message(link, m, batch),
            Out::Sub(p) => self.on_subscription(link, p, true),
            Out::Cancel(p) => self.on_subscription(link, p, false),
        }
    }

    /// A message arrived from a peer. Decoded messages are appended to
    /// `batch` (pushed to the receive queue once per read). An error means
    /// the peer broke a subscription limit: close its connection.
    pub(crate) fn on_message(
        &self,
        link: &Link,
        mut msg: Message,
        batch: &mut VecDeque<(u64, Message)>,
    ) -> Result<(), SubscriptionLimit> {
        match self.socket_type {
            SocketType::Pub | SocketType::Xpub => {
                // 29/PUBSUB: subscriptions may arrive as messages whose first
                // byte is 0x01 (subscribe) or 0x00 (cancel) (3.0 peers, XSUB).
                let first = msg.frames().first().cloned().unwrap_or_default();
                match first.first() {
                    Some(&0x01) if msg.len() == 1 => {
                        return self.on_subscription(link, first.slice(1..), true);
                    }
                    Some(&0x00) if msg.len() == 1 => {
                        return self.on_subscription(link, first.slice(1..), false);
                    }
                    _ if self.socket_type == SocketType::Xpub => {
                        batch.push_back((link.pipe.id, msg))
                    }
                    _ => {}
                }
            }
            SocketType::Router => {
                if let Some(key) = &link.key_prefix {
                    msg.push_front(key.clone());
                }
                if let Some(rid) = &link.route_prefix {
                    msg.push_front(rid.clone());
                }
                batch.push_back((link.pipe.id, msg));
            }
            // PUSH never receives: a peer sending to it is ignored.
            SocketType::Push => {}
            // `conn::decode` does the same for these types without calling this.
            _ => batch.push_back((link.pipe.id, msg)),
        }
        Ok(())
    }

    /// SUBSCRIBE / CANCEL from a peer (command or 0x01/0x00 message form).
    /// Fails when the prefix is longer than `max_subscription_size` or the
    /// peer would exceed `max_subscriptions`: close its connection then.
    pub(crate) fn on_subscription(
        &self,
        link: &Link,
        prefix: Bytes,
        subscribe: bool,
    ) -> Result<(), SubscriptionLimit> {
        if !matches!(self.socket_type, SocketType::Pub | SocketType::Xpub) {
            return Ok(());
        }
        let max = self.options.max_subscription_size;
        if max != 0 && prefix.len() > max {
            return Err(SubscriptionLimit::PrefixTooLong {
                len: prefix.len(),
                max,
            });
        }
        let xpub = self.socket_type == SocketType::Xpub;
        let verbose = self.options.xpub_verbose;
        let mut st = lock(&self.state);
        let Some(entry) = st.entry_mut(link.pipe.id) else {
            return Ok(());
        };
        if subscribe {
            let mut new_overall = false;
            if !entry.peer_subs.contains(&prefix) {
                let max = self.options.max_subscriptions;
                if max != 0 && entry.peer_subs.len() >= max {
                    return Err(SubscriptionLimit::TooMany(max));
                }
                // A copy: a slice would pin the whole read chunk it came in.
                let owned = Bytes::copy_from_slice(&prefix);
                entry.peer_subs.add(owned.clone());
                new_overall = xpub && st.subs.add(owned);
            }
            if xpub && (new_overall || verbose) {
                self.inbound
                    .push_one(link.pipe.id, subscription_message(0x01, &prefix));
            }
            self.events.emit(|| SocketEvent::Subscribed {
                peer: PeerId(link.pipe.id),
                prefix: Bytes::copy_from_slice(&prefix),
            });
        } else if entry.peer_subs.remove(&prefix) {
            if xpub && st.subs.remove(&prefix) {
                self.inbound
                    .push_one(link.pipe.id, subscription_message(0x00, &prefix));
            }
            self.events.emit(|| SocketEvent::Unsubscribed {
                peer: PeerId(link.pipe.id),
                prefix: Bytes::copy_from_slice(&prefix),
            });
        }
        Ok(())
    }

    fn check_message(&self, msg: &Message) -> Result<(), Error> {
        match self.options.limits.check_message(msg) {
            Ok(()) => Ok(()),
            Err(dafka_zmtp_proto::LimitError::FrameTooLarge { size, max }) => {
                Err(Error::MessageTooLarge { size, limit: max })
            }
            Err(dafka_zmtp_proto::LimitError::MessageTooLarge { size, max }) => {
                Err(Error::MessageTooLarge { size, limit: max })
            }
            Err(_) => Err(Error::MessageTooLarge {
                size: msg.byte_len() as u64,
                limit: self.options.limits.max_message_size,
            }),
        }
    }

    fn not_supported(&self, operation: &'static str) -> Error {
        Error::NotSupported {
            socket_type: self.socket_type.as_str(),
            operation,
        }
    }

    /// Round-robin over all pipes (only connected ones with `immediate`),
    /// skipping full ones. Returns the pipe id.
    // Inlined into each send path, as it was when it had one caller: called,
    // it moves the message in and out (callgrind: +40 instructions per
    // 128 B PUSH message).
    #[inline(always)]
    fn load_balance(&self, st: &mut State, mut msg: Message) -> Result<u64, Message> {
        let immediate = self.options.immediate;
        let n = st.pipes.len();
        let mut idx = st.rr;
        for _ in 0..n {
            if idx >= n {
                idx = 0;
            }
            let entry = &st.pipes[idx];
            if immediate && !entry.ready {
                idx += 1;
                continue;
            }
            let pipe = &entry.pipe;
            match pipe.try_push(msg) {
                Ok(()) => {
                    st.rr = idx + 1;
                    return Ok(pipe.id);
                }
                Err(m) => {
                    self.queue_full(pipe);
                    msg = m;
                }
            }
            idx += 1;
        }
        Err(msg)
    }

    /// Non-blocking send according to the socket pattern.
    pub(crate) fn try_send(&self, mut msg: Message) -> Result<(), SendError> {
        if msg.is_empty() {
            return Err(SendError::Fail(Error::EmptyMessage));
        }
        // The limits apply to the message as it goes on the wire: REQ and REP
        // check it once their envelope is on.
        if !matches!(self.socket_type, SocketType::Req | SocketType::Rep) {
            self.check_message(&msg).map_err(SendError::Fail)?;
        }
        let mut st = lock(&self.state);
        if self.is_closed() {
            return Err(SendError::Fail(Error::Closed));
        }
        match self.socket_type {
            SocketType::Push | SocketType::Dealer => self
                .load_balance(&mut st, msg)
                .map(|_| ())
                .map_err(SendError::Block),
            SocketType::Req => {
                if st.req_waiting.is_some() {
                    return Err(SendError::Fail(Error::InvalidState(
                        "REQ must receive the reply before sending again",
                    )));
                }
                // 28/REQREP: "The REQ socket MUST prefix the message with an
                // empty delimiter frame."
                msg.push_front(Bytes::new());
                self.check_message(&msg).map_err(SendError::Fail)?;
                match self.load_balance(&mut st, msg) {
                    Ok(id) => {
                        st.req_waiting = Some(id);
                        Ok(())
                    }
                    Err(mut m) => {
                        m.pop_front();
                        Err(SendError::Block(m))
                    }
                }
            }
            SocketType::Rep => {
                let Some((pipe_id, envelope)) = &st.rep_envelope else {
                    return Err(SendError::Fail(Error::InvalidState(
                        "REP must receive a request before sending",
                    )));
                };
                let pipe_id = *pipe_id;
                let mut out: Message = envelope.iter().cloned().collect();
                for f in msg.into_frames() {
                    out.push(f);
                }
                // Refused: the request stays answerable.
                self.check_message(&out).map_err(SendError::Fail)?;
                st.rep_envelope = None;
                // The requester may be gone or full: the reply is dropped, as
                // in libzmq.
                if let Some(e) = st.entry_mut(pipe_id)
                    && e.pipe.try_push(out).is_err()
                {
                    self.queue_full(&e.pipe);
                }
                Ok(())
            }
            SocketType::Router => {
                let Some(rid) = msg.pop_front() else {
                    return Err(SendError::Fail(Error::EmptyMessage));
                };
                let mandatory = self.options.router_mandatory;
                // Every route is to a pipe in `st.pipes`: `forget_peer` removes it with its pipe.
                match st.routes.get(&rid) {
                    None if mandatory => Err(SendError::Fail(Error::HostUnreachable(rid))),
                    None => Ok(()),
                    Some(_) if msg.is_empty() => Ok(()),
                    Some(p) => match p.try_push(msg) {
                        Ok(()) => Ok(()),
                        Err(mut m) if mandatory => {
                            self.queue_full(p);
                            m.push_front(rid);
                            Err(SendError::Block(m))
                        }
                        Err(_) => {
                            self.queue_full(p);
                            Ok(())
                        }
                    },
                }
            }
            SocketType::Pub | SocketType::Xpub => {
                let topic = msg.frames().first().cloned().unwrap_or_default();
                for e in st.pipes.iter().filter(|e| e.ready) {
                    if e.peer_subs.matches(&topic) {
                        // A slow subscriber loses messages (29/PUBSUB).
                        if e.pipe.try_push(msg.clone()).is_err() {
                            self.queue_full(&e.pipe);
                        }
                    }
                }
                Ok(())
            }
            SocketType::Xsub => {
                if is_subscription_message(&msg) {
                    let first = &msg.frames()[0];
                    let prefix = first.slice(1..);
                    let forward = if first.first() == Some(&0x01) {
                        st.subs.add(prefix);
                        true
                    } else {
                        st.subs.remove(&prefix)
                    };
                    if forward {
                        for e in st.pipes.iter().filter(|e| e.ready) {
                            e.pipe.push_force(Out::Msg(msg.clone()));
                        }
                    }
                } else {
                    for e in st.pipes.iter().filter(|e| e.ready) {
                        if e.pipe.try_push(msg.clone()).is_err() {
                            self.queue_full(&e.pipe);
                        }
                    }
                }
                Ok(())
            }
            SocketType::Pair => match st.pipes.first() {
                Some(e) if e.ready || !self.options.immediate => {
                    e.pipe.try_push(msg).map_err(|m| {
                        self.queue_full(&e.pipe);
                        SendError::Block(m)
                    })
                }
                _ => Err(SendError::Block(msg)),
            },
            SocketType::Sub | SocketType::Pull => Err(SendError::Fail(self.not_supported("send"))),
        }
    }

    /// The types that take messages as they come: no rules beyond `closed`.
    #[inline]
    fn takes_as_is(&self) -> bool {
        matches!(
            self.socket_type,
            SocketType::Pull
                | SocketType::Dealer
                | SocketType::Pair
                | SocketType::Router
                | SocketType::Xsub
                | SocketType::Xpub
        )
    }

    /// Non-blocking receive according to the socket pattern.
    #[inline]
    pub(crate) fn try_recv(&self) -> Result<Message, Error> {
        if self.takes_as_is() {
            if self.is_closed() {
                return Err(Error::Closed);
            }
            return match self.inbound.pop() {
                Some((_, msg)) => Ok(msg),
                None => Err(Error::WouldBlock),
            };
        }
        self.try_recv_checked()
    }

    /// Non-blocking receive of up to `max` messages, appended to `out`:
    /// [`Error::WouldBlock`] when none is queued.
    pub(crate) fn try_recv_many(&self, max: usize, out: &mut Vec<Message>) -> Result<usize, Error> {
        if max == 0 {
            return Ok(0);
        }
        if self.takes_as_is() {
            if self.is_closed() {
                return Err(Error::Closed);
            }
            return match self.inbound.pop_many(max, out) {
                0 => Err(Error::WouldBlock),
                n => Ok(n),
            };
        }
        if self.socket_type == SocketType::Sub {
            return self.try_recv_many_sub(max, out);
        }
        // REQ and REP take one message per turn: one at a time.
        let mut n = 0;
        while n < max {
            match self.try_recv_checked() {
                Ok(m) => {
                    out.push(m);
                    n += 1;
                }
                Err(e) if n == 0 => return Err(e),
                // What was taken is returned; the error shows again on the
                // next call if it persists.
                Err(_) => break,
            }
        }
        Ok(n)
    }

    /// Non-blocking send of messages from the front of `msgs` until one would
    /// wait: returns how many were queued ([`Error::WouldBlock`] for none). A
    /// refused message is dropped and its error returned; the messages after
    /// it stay in `msgs`.
    pub(crate) fn try_send_many(&self, msgs: &mut VecDeque<Message>) -> Result<usize, Error> {
        let mut n = 0;
        if matches!(self.socket_type, SocketType::Push | SocketType::Dealer) {
            // One lock of the socket state for the whole batch.
            let mut st = lock(&self.state);
            if self.is_closed() {
                return Err(Error::Closed);
            }
            while let Some(msg) = msgs.pop_front() {
                if msg.is_empty() {
                    return Err(Error::EmptyMessage);
                }
                self.check_message(&msg)?;
                match self.load_balance(&mut st, msg) {
                    Ok(_) => n += 1,
                    Err(m) => {
                        msgs.push_front(m);
                        break;
                    }
                }
            }
        } else if matches!(self.socket_type, SocketType::Pub | SocketType::Xpub) {
            // A PUB never waits: the batch goes to every matching subscriber under one lock
            // of the socket state and one lock (and at most one wake-up) per pipe.
            // The batch is the front of `msgs` up to the first refused message (taken in
            // place: a batch is up to thousands of messages, not worth a list of its own).
            let mut refused = None;
            let mut k = 0;
            for msg in msgs.iter() {
                if msg.is_empty() {
                    refused = Some(Error::EmptyMessage);
                    break;
                }
                if let Err(e) = self.check_message(msg) {
                    refused = Some(e);
                    break;
                }
                k += 1;
            }
            // Taken (and the refused one dropped) whatever happens below.
            let taken = k + usize::from(refused.is_some());
            let st = lock(&self.state);
            if self.is_closed() {
                msgs.drain(..taken);
                return Err(Error::Closed);
            }
            let batch = &msgs.make_contiguous()[..k];
            for e in st.pipes.iter().filter(|e| e.ready) {
                let mut run = MatchRun::default();
                let matches = |m: &Message| match m.frames().first() {
                    Some(topic) => e.peer_subs.matches_in_run(topic, &mut run),
                    None => e.peer_subs.matches(&[]),
                };
                // A slow subscriber loses messages (29/PUBSUB).
                if e.pipe.try_push_each(batch, matches) > 0 {
                    self.queue_full(&e.pipe);
                }
            }
            drop(st);
            msgs.drain(..taken);
            n = k;
            if let Some(e) = refused {
                return if n == 0 { Err(e) } else { Ok(n) };
            }
        } else {
            while let Some(msg) = msgs.pop_front() {
                match self.try_send(msg) {
                    Ok(()) => n += 1,
                    Err(SendError::Block(m)) => {
                        msgs.push_front(m);
                        break;
                    }
                    Err(SendError::Fail(e)) => return Err(e),
                }
            }
        }
        if n == 0 && !msgs.is_empty() {
            return Err(Error::WouldBlock);
        }
        Ok(n)
    }

    /// `try_recv` for the types with rules (PUSH, PUB, SUB, REQ, REP).
    fn try_recv_checked(&self) -> Result<Message, Error> {
        match self.socket_type {
            SocketType::Push | SocketType::Pub => return Err(self.not_supported("recv")),
            _ => {}
        }
        if matches!(self.socket_type, SocketType::Req | SocketType::Rep) {
            return self.try_recv_lockstep();
        }
        // Only SUB is left (libzmq's XSUB passes every message through): pop
        // and filter under one lock of the state, in the order `try_recv_lockstep`
        // takes the locks too.
        debug_assert_eq!(self.socket_type, SocketType::Sub);
        let st = lock(&self.state);
        if self.is_closed() {
            return Err(Error::Closed);
        }
        loop {
            let Some((_, msg)) = self.inbound.pop() else {
                return Err(Error::WouldBlock);
            };
            let topic = msg.frames().first().map_or(&[][..], |f| &f[..]);
            if st.subs.matches(topic) {
                return Ok(msg);
            }
        }
    }

    /// `try_recv_many` for SUB: what `try_recv_checked` does for one message, for up to `max`
    /// under one lock of the state, popped in batches, the subscriptions matched over the run.
    fn try_recv_many_sub(&self, max: usize, out: &mut Vec<Message>) -> Result<usize, Error> {
        let st = lock(&self.state);
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let mut run = MatchRun::default();
        let mut taken = Vec::new();
        let mut n = 0;
        while n < max && self.inbound.pop_many(max - n, &mut taken) > 0 {
            for msg in taken.drain(..) {
                let wanted = match msg.frames().first() {
                    Some(topic) => st.subs.matches_in_run(topic, &mut run),
                    None => st.subs.matches(&[]),
                };
                if wanted {
                    out.push(msg);
                    n += 1;
                }
            }
        }
        if n == 0 {
            return Err(Error::WouldBlock);
        }
        Ok(n)
    }

    /// `try_recv` for REQ and REP: the state checks, the pop and the state
    /// update happen under one lock of the socket state.
    fn try_recv_lockstep(&self) -> Result<Message, Error> {
        let mut st = lock(&self.state);
        loop {
            if self.is_closed() {
                return Err(Error::Closed);
            }
            if self.socket_type == SocketType::Req && st.req_waiting.is_none() {
                return Err(Error::InvalidState(
                    "REQ must send a request before receiving",
                ));
            }
            if self.socket_type == SocketType::Rep && st.rep_envelope.is_some() {
                return Err(Error::InvalidState(
                    "REP must send the reply before receiving",
                ));
            }
            // A waiting REQ or REP polls an empty queue twice per message.
            if self.inbound.surely_empty() {
                return Err(Error::WouldBlock);
            }
            let Some((pipe_id, mut msg)) = self.inbound.pop() else {
                return Err(Error::WouldBlock);
            };
            if self.socket_type == SocketType::Req {
                // Only the reply from the peer we asked, starting with the
                // empty delimiter, is accepted; anything else is dropped.
                if st.req_waiting != Some(pipe_id)
                    || msg.frames().first().is_none_or(|f| !f.is_empty())
                {
                    continue;
                }
                msg.pop_front();
                if msg.is_empty() {
                    continue;
                }
                st.req_waiting = None;
                return Ok(msg);
            }
            // REP, 28/REQREP: strip everything up to and including the empty
            // delimiter; it is restored on the reply. Split once (a message of
            // millions of frames must not cost one shift of the rest per
            // envelope frame).
            let Some(delimiter) = msg.frames().iter().position(|f| f.is_empty()) else {
                continue;
            };
            let envelope = msg.split_front(delimiter + 1).into_frames();
            if msg.is_empty() {
                continue;
            }
            st.rep_envelope = Some((pipe_id, envelope));
            return Ok(msg);
        }
    }

    /// SUB: add or cancel a subscription and tell every connected publisher.
    pub(crate) fn set_subscription(&self, prefix: &[u8], subscribe: bool) -> Result<(), Error> {
        if self.socket_type != SocketType::Sub {
            return Err(self.not_supported(if subscribe {
                "subscribe"
            } else {
                "unsubscribe"
            }));
        }
        let prefix = Bytes::copy_from_slice(prefix);
        let mut st = lock(&self.state);
        if self.is_closed() {
            return Err(Error::Closed);
        }
        // libzmq forwards every subscribe, but a cancel only once the last
        // reference to the prefix is gone.
        let item = if subscribe {
            st.subs.add(prefix.clone());
            Out::Sub(prefix)
        } else if st.subs.remove(&prefix) {
            Out::Cancel(prefix)
        } else {
            return Ok(());
        };
        for e in st.pipes.iter().filter(|e| e.ready) {
            e.pipe.push_force(item.clone());
        }
        Ok(())
    }

    /// Are all outgoing queues empty? (Used by linger.)
    pub(crate) fn pipes_empty(&self) -> bool {
        lock(&self.state).pipes.iter().all(|e| e.pipe.is_empty())
    }

    /// Mark the socket closed and start lingering: stop accepting, unbind
    /// inproc names, wake every waiter. Returns `true` for the call that
    /// closed it.
    pub(crate) fn begin_close(self: &Arc<Self>) -> bool {
        let (first, names): (bool, Vec<String>) = {
            let mut st = lock(&self.state);
            // Set under the state lock, so a check made under it stays true
            // until the lock is released.
            if self.closed.swap(true, Ordering::AcqRel) {
                (false, Vec::new())
            } else {
                (true, st.inproc_names.drain(..).collect())
            }
        };
        // Outside the state lock (the registry lock is never taken inside it).
        for name in names {
            crate::inproc::unregister(&name, self);
        }
        if *self.phase_tx.borrow() == Phase::Running {
            self.phase_tx.send_replace(Phase::Closing);
        }
        self.send_space.notify_waiters();
        self.inbound.data.notify_waiters();
        first
    }

    /// End lingering now: every task exits, queued messages are dropped.
    pub(crate) fn terminate(&self) {
        self.phase_tx.send_replace(Phase::Terminated);
    }

    /// Close: mark closed, flush for up to `linger` (or until
    /// [`terminate`](Inner::terminate)), then stop every task.
    pub(crate) async fn close(self: &Arc<Self>, linger: Option<std::time::Duration>) {
        self.begin_close();
        let flushed = self.wait_flushed();
        let mut phase = self.phase();
        let terminated = phase.wait_for(|p| *p == Phase::Terminated);
        tokio::select! {
            _ = async {
                match linger {
                    None => flushed.await,
                    Some(d) => {
                        let _ = tokio::time::timeout(d, flushed).await;
                    }
                }
            } => {}
            _ = terminated => {}
        }
        self.terminate();
        self.wait_tasks().await;
        // Release queued messages and state.
        {
            let mut st = lock(&self.state);
            st.pipes.clear();
            st.routes.clear();
        }
        self.events.close();
    }

    /// Attach a monitor (replacing any previous one).
    pub(crate) fn monitor(&self, capacity: usize) -> crate::monitor::Monitor {
        self.events.attach(capacity)
    }

    /// Wait until every task ended and every pipe is empty (pipes towards
    /// inproc peers are drained by the peer's tasks, so they are polled).
    async fn wait_flushed(&self) {
        loop {
            self.wait_tasks().await;
            if self.pipes_empty() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    async fn wait_tasks(&self) {
        wait_until(&self.tasks_done, || self.tasks.load(Ordering::Acquire) == 0).await;
    }
}

/// `0x01 + prefix` (subscribe) or `0x00 + prefix` (cancel) as a one-frame message.
pub(crate) fn subscription_message(kind: u8, prefix: &[u8]) -> Message {
    let mut b = BytesMut::with_capacity(prefix.len() + 1);
    b.put_u8(kind);
    b.put_slice(prefix);
    Message::from(b.freeze())
}

fn is_subscription_message(m: &Message) -> bool {
    m.len() == 1
        && matches!(
            m.frames().first().and_then(|f| f.first()),
            Some(0x00 | 0x01)
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two threads receiving on one REP at the same instant: exactly one gets
    /// the request, the other is told to reply first (their envelopes used to
    /// overwrite each other: a reply went to the wrong requester).
    #[test]
    fn concurrent_rep_receivers_cannot_both_take_a_request() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let inner = {
            let _guard = rt.enter();
            Arc::new(Inner::new(
                SocketType::Rep,
                Options::default(),
                rt.handle().clone(),
            ))
        };
        let request = |peer: &'static [u8]| -> Message {
            [
                Bytes::from_static(peer),
                Bytes::new(),
                Bytes::from_static(b"req"),
            ]
            .into_iter()
            .collect()
        };
        for round in 0..3000 {
            inner.inbound.push_one(1, request(b"p1"));
            inner.inbound.push_one(2, request(b"p2"));
            let barrier = Arc::new(std::sync::Barrier::new(2));
            let receivers: Vec<_> = (0..2)
                .map(|_| {
                    let inner = inner.clone();
                    let barrier = barrier.clone();
                    std::thread::spawn(move || {
                        barrier.wait();
                        inner.try_recv().is_ok()
                    })
                })
                .collect();
            let ok = receivers
                .into_iter()
                .map(|h| h.join().unwrap())
                .filter(|&got| got)
                .count();
            assert_eq!(ok, 1, "round {round}: both receivers took a request");
            // Answer (drop) it and discard the other request.
            lock(&inner.state).rep_envelope = None;
            while inner.inbound.pop().is_some() {}
        }
    }
}
