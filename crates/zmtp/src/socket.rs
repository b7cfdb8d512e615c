//! A socket's shared state: its pattern (the sans-IO [`Pattern`] over its pipes), endpoints,
//! lifecycle and tasks. Transport-independent.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use dafka_zmtp_proto::pattern::{
    self, AttachError, MatchRun, Pattern, PatternConfig, Receive, Received, Subscription,
};
use tokio::sync::{Notify, watch};

use crate::drive::CoTask;
use crate::error::{Error, SendError};
use crate::monitor::{Events, PeerId, Rejection, SocketEvent, SubscriptionLimit};
use crate::options::Options;
use crate::pipe::{Inbound, Out, Padded, Pipe};
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
    /// What the connection does with a received message (the pattern's rule for this peer).
    pub(crate) receive: Receive,
    /// Stopped when this connection must end (ROUTER handover).
    pub(crate) evicted: Arc<Stop>,
}

#[derive(Debug)]
struct State {
    /// The peers' pipes and the pattern of the socket type.
    pattern: Pattern<Pipe>,
    /// The attached connections' [`Link::evicted`], by pipe.
    evicts: HashMap<u64, Arc<Stop>>,
    /// Names registered in the inproc registry by `bind`.
    inproc_names: Vec<String>,
    /// Bound and connected endpoints.
    endpoints: Vec<EndpointEntry>,
}

/// Shared state of one socket; tasks hold `Arc<Inner>`.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) socket_type: SocketType,
    pub(crate) options: Options,
    /// Received messages go to the application as they come (no lockstep, no filter).
    as_is: bool,
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
        let config = PatternConfig {
            immediate: options.immediate,
            router_mandatory: options.router_mandatory,
            router_handover: options.router_handover,
            router_peer_key: options.router_peer_key,
            max_subscription_size: options.max_subscription_size,
            max_subscriptions: options.max_subscriptions,
            xpub_verbose: options.xpub_verbose,
            xpub_welcome: options.xpub_welcome_msg.clone(),
        };
        let state = State {
            pattern: Pattern::new(socket_type, config),
            evicts: HashMap::new(),
            inproc_names: Vec::new(),
            endpoints: Vec::new(),
        };
        Inner {
            socket_type,
            as_is: pattern::receives_as_is(socket_type),
            inbound: Inbound::new(options.effective_rcvhwm()),
            options,
            state: Padded(Mutex::new(state)),
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
        st.pattern.add_pending(pipe.clone());
        drop(st);
        self.send_space.notify_waiters();
        Ok(pipe)
    }

    /// Remove a pipe for good (connector gave up, socket terminating), and
    /// the endpoint entry of its connector.
    pub(crate) fn remove_pipe(&self, id: u64) {
        let mut st = lock(&self.state);
        st.endpoints.retain(|e| e.pipe != Some(id));
        self.forget_peer(&mut st, id, None);
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
        if let Some(id) = entry.pipe {
            self.forget_peer(&mut st, id, None);
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
        let attached = st
            .pattern
            .attach(existing, || self.pipe_for(peer), peer_identity, peer_key)
            .map_err(|e| match e {
                AttachError::PairBusy => Rejection::PairBusy,
                AttachError::DuplicateRoutingId => Rejection::DuplicateRoutingId,
            })?;
        if let Some(old) = attached.evicted.and_then(|id| st.evicts.get(&id)) {
            old.stop();
        }
        let evicted = Arc::new(Stop::default());
        st.evicts.insert(attached.pipe.id, evicted.clone());
        drop(st);
        self.send_space.notify_waiters();
        Ok(Link {
            pipe: attached.pipe,
            receive: attached.receive,
            evicted,
        })
    }

    /// A connection ended. Bind-side pipes go away with their queue;
    /// connect-side pipes stay (with `unsent` put back) for the reconnect.
    pub(crate) fn detach(&self, link: &Link, connect_side: bool, unsent: VecDeque<Out>) {
        let mut st = lock(&self.state);
        let known = self.forget_peer(&mut st, link.pipe.id, Some(connect_side));
        if known && connect_side {
            link.pipe.put_back(unsent);
        }
    }

    /// Drop a departed peer (`connect_side`: keep its pipe for the reconnect; `None`: remove
    /// it for good) with its routing and subscription state. Returns whether it was known.
    fn forget_peer(&self, st: &mut State, id: u64, connect_side: Option<bool>) -> bool {
        let inbound = &self.inbound;
        // XPUB: the cancels of prefixes no other peer holds go up to the application.
        let hand_up = |pipe, sub: Subscription| inbound.push_one(pipe, sub.to_message());
        let known = match connect_side {
            Some(connect_side) => st.pattern.detach(id, connect_side, hand_up),
            None => {
                st.pattern.remove(id, hand_up);
                true
            }
        };
        st.evicts.remove(&id);
        known
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
            Out::Sub(p) => self.on_subscription(link, Subscription::Subscribe(p)),
            Out::Cancel(p) => self.on_subscription(link, Subscription::Cancel(p)),
        }
    }

    /// A message arrived from a peer. Decoded messages are appended to
    /// `batch` (pushed to the receive queue once per read). An error means
    /// the peer broke a subscription limit: close its connection.
    pub(crate) fn on_message(
        &self,
        link: &Link,
        msg: Message,
        batch: &mut VecDeque<(u64, Message)>,
    ) -> Result<(), SubscriptionLimit> {
        match link.receive.on_receive(msg) {
            Received::Message(m) => batch.push_back((link.pipe.id, m)),
            Received::Subscription(sub) => return self.on_subscription(link, sub),
            Received::Ignored => {}
        }
        Ok(())
    }

    /// SUBSCRIBE / CANCEL from a peer (command or 0x01/0x00 message form).
    /// Fails when the prefix is longer than `max_subscription_size` or the
    /// peer would exceed `max_subscriptions`: close its connection then.
    pub(crate) fn on_subscription(
        &self,
        link: &Link,
        sub: Subscription,
    ) -> Result<(), SubscriptionLimit> {
        let id = link.pipe.id;
        let Some(change) = lock(&self.state).pattern.on_subscription(id, sub)? else {
            return Ok(());
        };
        let sub = change.subscription;
        if change.hand_up {
            self.inbound.push_one(id, sub.to_message());
        }
        self.events.emit(|| {
            let (peer, prefix) = (PeerId(id), Bytes::copy_from_slice(sub.prefix()));
            if sub.is_subscribe() {
                SocketEvent::Subscribed { peer, prefix }
            } else {
                SocketEvent::Unsubscribed { peer, prefix }
            }
        });
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

    /// Non-blocking send according to the socket pattern.
    pub(crate) fn try_send(&self, msg: Message) -> Result<(), SendError> {
        let mut st = lock(&self.state);
        let closed = self.is_closed();
        st.pattern
            .on_send(
                msg,
                closed,
                |m| self.check_message(m),
                |p| self.queue_full(p),
            )
            .map(drop)
            .map_err(SendError::from)
    }

    /// Non-blocking receive according to the socket pattern.
    #[inline]
    pub(crate) fn try_recv(&self) -> Result<Message, Error> {
        if self.as_is {
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
        if self.as_is {
            if self.is_closed() {
                return Err(Error::Closed);
            }
            return match self.inbound.pop_many(max, out) {
                0 => Err(Error::WouldBlock),
                n => Ok(n),
            };
        }
        if let Some(res) = self.try_recv_many_filtered(max, out) {
            return res;
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
        // One lock of the socket state for the whole batch.
        let mut st = lock(&self.state);
        let closed = self.is_closed();
        let n = st.pattern.on_send_many(
            msgs,
            closed,
            |m| self.check_message(m),
            |p| self.queue_full(p),
        )?;
        drop(st);
        if n == 0 && !msgs.is_empty() {
            return Err(Error::WouldBlock);
        }
        Ok(n)
    }

    /// `try_recv` for the types with rules (PUSH, PUB, SUB, REQ, REP): the state checks, the
    /// pop and the pattern's verdict happen under one lock of the socket state.
    fn try_recv_checked(&self) -> Result<Message, Error> {
        let mut st = lock(&self.state);
        loop {
            st.pattern.check_receive(self.is_closed())?;
            // A waiting REQ or REP polls an empty queue twice per message.
            if self.inbound.surely_empty() {
                return Err(Error::WouldBlock);
            }
            let Some((pipe_id, msg)) = self.inbound.pop() else {
                return Err(Error::WouldBlock);
            };
            if let Some(msg) = st.pattern.on_receive(pipe_id, msg) {
                return Ok(msg);
            }
        }
    }

    /// `try_recv_many` for SUB: what `try_recv_checked` does for one message, for up to `max`
    /// under one lock of the state, popped in batches, the subscriptions matched over the run.
    /// `None` for the types without a filter.
    fn try_recv_many_filtered(
        &self,
        max: usize,
        out: &mut Vec<Message>,
    ) -> Option<Result<usize, Error>> {
        let st = lock(&self.state);
        let subs = st.pattern.filter()?;
        if self.is_closed() {
            return Some(Err(Error::Closed));
        }
        let mut run = MatchRun::default();
        let mut taken = Vec::new();
        let mut n = 0;
        while n < max && self.inbound.pop_many(max - n, &mut taken) > 0 {
            for msg in taken.drain(..) {
                let wanted = match msg.frames().first() {
                    Some(topic) => subs.matches_in_run(topic, &mut run),
                    None => subs.matches(&[]),
                };
                if wanted {
                    out.push(msg);
                    n += 1;
                }
            }
        }
        if n == 0 {
            return Some(Err(Error::WouldBlock));
        }
        Some(Ok(n))
    }

    /// SUB: add or cancel a subscription and tell every connected publisher.
    pub(crate) fn set_subscription(&self, prefix: &[u8], subscribe: bool) -> Result<(), Error> {
        let mut st = lock(&self.state);
        let closed = self.is_closed();
        Ok(st.pattern.subscribe(prefix, subscribe, closed)?)
    }

    /// Are all outgoing queues empty? (Used by linger.)
    pub(crate) fn pipes_empty(&self) -> bool {
        lock(&self.state)
            .pattern
            .peers()
            .iter()
            .all(|e| e.pipe().is_empty())
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
            st.pattern.clear();
            st.evicts.clear();
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
            inner.try_send(Message::from(&b"rep"[..])).unwrap();
            while inner.inbound.pop().is_some() {}
        }
    }
}
