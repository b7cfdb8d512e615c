//! The `inproc://` transport: sockets of one process exchange [`Message`]s
//! directly, without encoding.
//!
//! A process-wide registry maps names to bound sockets. `connect` creates its
//! pipe at once and a task that waits for the name to be bound (so
//! connect-before-bind works, as in libzmq 4.x), then moves messages between
//! the two sockets' queues, honouring both HWMs, until either side closes;
//! after that it waits for the name to be bound again.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::error::Error;
use crate::life::{Life, lingered};
use crate::monitor::{ConnectionEnd, PeerId, SocketEvent};
use crate::pipe::{Out, Pipe};
use crate::socket::{Inner, Link, Phase, Stop};
use crate::{Message, SocketType, lock};

/// name -> (bound socket, its `unbind` signal).
type Names = HashMap<String, (Weak<Inner>, Arc<Stop>)>;

/// The locked registry. A forked child inherits the parent's entries, whose
/// sockets have no tasks in the child: the registry remembers the process it
/// belongs to and starts empty in any other.
fn registry() -> MutexGuard<'static, Names> {
    static REGISTRY: OnceLock<Mutex<Names>> = OnceLock::new();
    static OWNER: AtomicU32 = AtomicU32::new(0);
    let mut names = lock(REGISTRY.get_or_init(|| Mutex::new(HashMap::new())));
    let pid = std::process::id();
    if OWNER.swap(pid, Ordering::Relaxed) != pid {
        names.clear();
    }
    names
}

/// Woken whenever a name is bound.
static BOUND: Notify = Notify::const_new();

pub(crate) fn bind(inner: &Arc<Inner>, name: &str) -> Result<String, Error> {
    let endpoint = format!("inproc://{name}");
    let stop = {
        let mut reg = registry();
        if let Some(existing) = reg.get(name).and_then(|(w, _)| w.upgrade())
            && !existing.is_closed()
        {
            return Err(Error::AddrInUse(endpoint));
        }
        if inner.is_closed() {
            return Err(Error::Closed);
        }
        let stop = Arc::new(Stop::default());
        reg.insert(name.to_owned(), (Arc::downgrade(inner), stop.clone()));
        stop
    };
    // Lock order: never take the socket state while holding the registry.
    inner.register_endpoint(vec![endpoint.clone()], None, stop);
    inner.register_inproc_name(name.to_owned());
    crate::transport::listening(inner, &endpoint);
    BOUND.notify_waiters();
    Ok(endpoint)
}

/// Remove `name` if it still points at `inner`.
pub(crate) fn unregister(name: &str, inner: &Arc<Inner>) {
    let mut reg = registry();
    if reg
        .get(name)
        .is_some_and(|(w, _)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(inner)))
    {
        reg.remove(name);
    }
}

/// `unbind`: forget the name and end its sessions.
pub(crate) fn unbind(inner: &Arc<Inner>, name: &str) -> Result<(), Error> {
    inner.stop_endpoint(&format!("inproc://{name}"), true)?;
    unregister(name, inner);
    Ok(())
}

fn lookup(name: &str) -> Option<(Arc<Inner>, Arc<Stop>)> {
    registry()
        .get(name)
        .and_then(|(w, stop)| w.upgrade().map(|s| (s, stop.clone())))
        .filter(|(s, stop)| !s.is_closed() && !stop.is_stopped())
}

pub(crate) fn connect(inner: &Arc<Inner>, name: &str) -> Result<(), Error> {
    let pipe = inner.add_connect_pipe()?;
    let stop = Arc::new(Stop::default());
    inner.register_endpoint(
        vec![format!("inproc://{name}")],
        Some(pipe.id),
        stop.clone(),
    );
    let task_inner = inner.clone();
    let name = name.to_owned();
    inner.spawn(async move { connector(task_inner, pipe, name, stop).await });
    Ok(())
}

/// The identity a socket announces to its peers (libzmq: REQ, DEALER and
/// ROUTER send their routing id).
pub(crate) fn announced_identity(socket_type: SocketType, options: &crate::Options) -> Bytes {
    match socket_type {
        SocketType::Req | SocketType::Dealer | SocketType::Router => {
            options.routing_id.clone().unwrap_or_default()
        }
        _ => Bytes::new(),
    }
}

async fn connector(inner: Arc<Inner>, pipe: Arc<Pipe>, name: String, stop: Arc<Stop>) {
    let mut phase = inner.phase();
    loop {
        let ph = *phase.borrow_and_update();
        if ph == Phase::Terminated || (ph == Phase::Closing && pipe.is_empty()) || stop.is_stopped()
        {
            break;
        }
        let bound = BOUND.notified();
        tokio::pin!(bound);
        bound.as_mut().enable();
        match lookup(&name) {
            None => {
                tokio::select! {
                    _ = bound => {}
                    _ = phase.changed() => {}
                    _ = stop.wait() => {}
                }
            }
            Some((peer, peer_stop)) => {
                let stops = [&*stop, &*peer_stop];
                if !session(&inner, &pipe, &peer, stops, &name).await {
                    break;
                }
            }
        }
    }
    inner.remove_pipe(pipe.id);
}

/// Run one inproc connection. Returns `false` if the connector should give
/// up (incompatible peer, or its routing id was taken over).
async fn session(
    a: &Arc<Inner>,
    a_pipe: &Arc<Pipe>,
    b: &Arc<Inner>,
    stops: [&Stop; 2],
    name: &str,
) -> bool {
    if !a.socket_type.is_compatible(b.socket_type) {
        tracing::warn!(
            ours = a.socket_type.as_str(),
            peer = b.socket_type.as_str(),
            "inproc: incompatible socket types, not connecting"
        );
        return false;
    }
    let endpoint = format!("inproc://{name}");
    let a_id = PeerId(a_pipe.id);
    let b_id = b.next_peer();
    a.events.emit(|| SocketEvent::Connected {
        endpoint: endpoint.clone(),
        address: endpoint.clone(),
        peer: a_id,
    });
    b.events.emit(|| SocketEvent::Accepted {
        endpoint: endpoint.clone(),
        address: endpoint.clone(),
        peer: b_id,
    });
    let b_link = match b.attach(
        None,
        b_id,
        a.socket_type,
        &announced_identity(a.socket_type, &a.options),
        None,
    ) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "inproc: bound socket rejected the connection");
            // Retry once the bound side changes (or stop when we close).
            let mut pb = b.phase();
            let mut pa = a.phase();
            tokio::select! {
                _ = pb.changed() => {}
                _ = pa.changed() => {}
            }
            return true;
        }
    };
    let a_link = match a.attach(
        Some(a_pipe),
        a_id,
        b.socket_type,
        &announced_identity(b.socket_type, &b.options),
        None,
    ) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "inproc: connection rejected");
            b.detach(&b_link, false, VecDeque::new());
            return false;
        }
    };
    let lives = [
        Life {
            inner: a,
            id: a_id,
            address: &endpoint,
        },
        Life {
            inner: b,
            id: b_id,
            address: &endpoint,
        },
    ];
    handshake_succeeded(&lives[0], &a_link, b);
    handshake_succeeded(&lives[1], &b_link, a);
    let reconnect = pump(a, &a_link, b, &b_link, stops).await;
    // Our undelivered messages stay queued for the next connection; the bound
    // side's pipe goes away with the connection, as for TCP.
    lives[0].detach(Some(&a_link), true, VecDeque::new());
    lives[1].detach(Some(&b_link), false, VecDeque::new());
    // Ended by this side (closed, or its endpoint stopped) or by the other.
    for (life, own_stop) in lives.iter().zip(stops) {
        let end = if life.inner.is_closed() || own_stop.is_stopped() {
            ConnectionEnd::Closed
        } else {
            ConnectionEnd::PeerClosed
        };
        life.ended(true, &end);
    }
    reconnect
}

/// Moves messages both ways between the attached sockets `a` and `b` until the connection
/// ends: a stop signal, a phase that lets it go (linger), or a ROUTER handover. Returns
/// `false` after a handover (the connector gives up).
async fn pump(a: &Inner, a_link: &Link, b: &Inner, b_link: &Link, stops: [&Stop; 2]) -> bool {
    let mut pa = a.phase();
    let mut pb = b.phase();
    let mut scratch = Scratch::default();
    let mut reconnect = true;
    loop {
        // disconnect (ours) or unbind (theirs): stop before moving anything.
        if stops.iter().any(|s| s.is_stopped()) {
            break;
        }
        let blocked_a = transfer(a, a_link, b, b_link, &mut scratch);
        let blocked_b = transfer(b, b_link, a, a_link, &mut scratch);
        let pha = *pa.borrow_and_update();
        let phb = *pb.borrow_and_update();
        // Linger: a closing side leaves once its queue is delivered.
        if lingered(pha, || a_link.pipe.is_empty()) || lingered(phb, || b_link.pipe.is_empty()) {
            break;
        }
        tokio::select! {
            _ = a_link.pipe.wake.notified(), if !blocked_a => {}
            _ = b_link.pipe.wake.notified(), if !blocked_b => {}
            _ = b.inbound.wait_room(), if blocked_a => {}
            _ = a.inbound.wait_room(), if blocked_b => {}
            _ = pa.changed() => {}
            _ = pb.changed() => {}
            // disconnect (ours) or unbind (theirs)
            _ = stops[0].wait() => break,
            _ = stops[1].wait() => break,
            // ROUTER handover on either side: an inproc connection is not
            // re-established (as in libzmq, which has no inproc reconnect).
            _ = a_link.evicted.wait() => {
                reconnect = false;
                break;
            }
            _ = b_link.evicted.wait() => {
                reconnect = false;
                break;
            }
        }
    }
    reconnect
}

/// Tell the monitor of `ours` about the attached in-process peer `theirs`, with
/// the READY metadata it would have sent over a stream.
fn handshake_succeeded(ours: &Life<'_>, link: &Link, theirs: &Inner) {
    ours.handshake_succeeded(link, theirs.socket_type, || {
        (
            announced_identity(theirs.socket_type, &theirs.options),
            crate::conn::config_for(theirs.socket_type, &theirs.options)
                .metadata()
                .unwrap_or_default(),
        )
    });
}

/// Buffers reused across transfers (no allocation per batch).
#[derive(Default)]
struct Scratch {
    items: VecDeque<Out>,
    batch: VecDeque<(u64, Message)>,
}

/// Move what fits from `src`'s pipe into `dst`'s receive queue. Returns
/// `true` if messages are waiting for room in `dst`.
fn transfer(
    src: &Inner,
    src_link: &Link,
    dst: &Inner,
    dst_link: &Link,
    scratch: &mut Scratch,
) -> bool {
    let room = dst.inbound.fair_room();
    let Scratch { items, batch } = scratch;
    if src_link.pipe.take_up_to(room, items) {
        src.send_space.notify_waiters();
        src.queue_drained(&src_link.pipe);
    }
    for item in items.drain(..) {
        // An in-process peer is not hostile: the subscription is dropped.
        if let Err(e) = dst.on_item(dst_link, item, batch) {
            tracing::warn!(error = %e, "inproc: dropping a subscription");
        }
    }
    dst.inbound.push_batch(batch);
    // Anything left is waiting for room (or arrived just now: the caller
    // then finds room at once and comes back).
    !src_link.pipe.is_empty()
}
