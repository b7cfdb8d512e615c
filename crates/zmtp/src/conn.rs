//! One ZMTP connection over a byte stream (TCP or Unix socket): the task
//! that owns the stream, a read buffer, a write buffer and the sans-IO
//! [`Connection`].

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use dafka_zmtp_proto::{Command, Config, Connection, Event, Heartbeat, Metadata, SocketType};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::Message;
use crate::budget::{Charge, MemoryLimit};
use crate::failures::FailureLog;
use crate::inproc::announced_identity;
use crate::life::{Life, lingered};
use crate::monitor::{ConnectionEnd, PeerId, Rejection};
use crate::pipe::{Out, Pipe};
use crate::socket::{Inner, Link, Phase, Stop};

/// Read in chunks of this size.
const READ_CHUNK: usize = 64 * 1024;
/// Yield to other tasks (the consumer) after reading this much.
const YIELD_AFTER: usize = 256 * 1024;
/// Largest read chunk for a peer that keeps our reads full.
const MAX_READ_CHUNK: usize = 256 * 1024;
/// Largest read made in advance for a peer that has sent large frames.
const MAX_READ_AHEAD: usize = 1024 * 1024;
/// Read chunk before the handshake completes: a flood of connections that
/// never finish their handshake costs little memory each.
const HANDSHAKE_CHUNK: usize = 1024;
/// Stop draining the outgoing queue into the write buffer beyond this size.
const WRITE_BUDGET: usize = 256 * 1024;
/// Frame bodies above this size are written from their own `Bytes` (vectored
/// write) instead of being copied into the write buffer. 4 KiB, as the raw TCP
/// benchmark peer: at 8 KiB, paired runs on the shared machine showed 8% less
/// CPU per message (both sides) than with 16 KiB, throughput within noise.
const COPY_MAX: usize = 4 * 1024;
/// At most this many buffers per vectored write.
const MAX_IOV: usize = 64;
/// Stop reading while this much is waiting to be written: a peer that sends
/// PINGs but never reads our PONGs must not grow the write buffer forever.
const MAX_UNWRITTEN: usize = 4 * WRITE_BUDGET;

/// The smallest receive low-water mark worth a system call: below it, reads
/// happen as bytes arrive.
const LOWAT_MIN: usize = 64 * 1024;

/// The read half of a stream transport, and the one socket option the
/// connection tunes while it reads.
pub(crate) trait StreamRead: AsyncRead + Send + Unpin {
    /// Asks the kernel to report the stream readable only once `bytes` bytes
    /// wait (or the peer closes, or an error is pending): `SO_RCVLOWAT`, see
    /// [`crate::sys`]. Transports without such a mark return an error and are
    /// not asked again.
    fn set_recv_lowat(&mut self, _bytes: usize) -> std::io::Result<()> {
        Err(std::io::ErrorKind::Unsupported.into())
    }
}

impl StreamRead for tokio::net::tcp::OwnedReadHalf {
    fn set_recv_lowat(&mut self, bytes: usize) -> std::io::Result<()> {
        use std::os::fd::AsFd;
        crate::sys::set_recv_lowat(self.as_ref().as_fd(), bytes)
    }
}

// A Unix stream socket honours the mark in blocking reads only, not in poll.
impl StreamRead for tokio::net::unix::OwnedReadHalf {}

impl<T: AsyncRead + Send> StreamRead for tokio::io::ReadHalf<T> {}

impl StreamRead for BoxRead {
    fn set_recv_lowat(&mut self, bytes: usize) -> std::io::Result<()> {
        (**self).set_recv_lowat(bytes)
    }
}

/// The read half of any stream transport.
pub(crate) type BoxRead = Box<dyn StreamRead>;
/// The write half of any stream transport.
pub(crate) type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// Summary returned to the connector (decides whether to reconnect).
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) end: ConnectionEnd,
    /// The handshake completed.
    pub(crate) was_ready: bool,
}

pub(crate) fn config(inner: &Inner) -> Config {
    config_for(inner.socket_type, &inner.options)
}

/// The protocol configuration of a socket of type `socket_type` with options `o`.
pub(crate) fn config_for(socket_type: SocketType, o: &crate::Options) -> Config {
    let cap = cap_duration;
    let heartbeat = o.heartbeat_ivl.map(|interval| Heartbeat {
        interval: cap(interval),
        ttl: cap(o.heartbeat_ttl.unwrap_or_default()),
        timeout: cap(o.heartbeat_timeout.unwrap_or(interval)),
    });
    Config {
        socket_type,
        identity: announced_identity(socket_type, o),
        properties: o.properties.clone(),
        limits: o.limits,
        recv_limits: o.recv_limits,
        mechanism: o.mechanism.clone(),
        peer_address: String::new(),
        heartbeat,
        handshake_timeout: o.handshake_timeout.map(cap),
    }
}

/// Drive one connection until it ends. `connect_pipe` is the persistent pipe
/// of a connecting socket; a bound socket gets a fresh pipe at handshake. How the peer made it
/// end is logged through `failures`, the listener's (or the connector's) rate limit.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run<R, W>(
    inner: Arc<Inner>,
    rd: R,
    wr: W,
    connect_pipe: Option<Arc<Pipe>>,
    id: PeerId,
    stop: &Stop,
    peer: &str,
    failures: &FailureLog,
) -> Outcome
where
    R: StreamRead,
    W: AsyncWrite + Unpin,
{
    let mut config = config(&inner);
    config.peer_address = peer.to_owned();
    let conn = match Connection::try_new(config, now()) {
        Ok(c) => c,
        Err(e) => {
            // Options are validated by bind/connect; this is a safety net.
            tracing::error!(peer, error = %e, "invalid socket options");
            return Outcome {
                end: ConnectionEnd::Protocol(e.into()),
                was_ready: false,
            };
        }
    };
    let mut task = Task::new(inner, (rd, wr), connect_pipe, conn, id, stop, peer);
    let end = task.drive().await;
    task.close(end, failures).await
}

/// The task of one connection: the stream, its buffers, the sans-IO [`Connection`], the link
/// to the socket once attached, and the wake-ups it waits on. [`Task::drive`] turns the loop:
/// hand over what was decoded, encode what is queued, size the next read, then wait for the
/// first of the wake-ups and hand it to its method.
struct Task<'a, R, W> {
    inner: Arc<Inner>,
    rd: R,
    wr: W,
    /// The persistent pipe of a connecting socket.
    connect_pipe: Option<Arc<Pipe>>,
    id: PeerId,
    stop: &'a Stop,
    peer: &'a str,
    conn: Connection,
    rbuf: BytesMut,
    wbuf: BytesMut,
    /// Large bodies and the bytes encoded before them; on the wire they come before `wbuf`.
    parts: VecDeque<Bytes>,
    /// Items taken from the pipe, not yet encoded.
    local: VecDeque<Out>,
    link: Option<Link>,
    /// Decoded messages not yet in the receive queue.
    batch: VecDeque<(u64, Message)>,
    sizing: ReadSizing,
    /// Bytes read since this task last yielded to the consumer.
    unyielded: usize,
    phase: watch::Receiver<Phase>,
    /// Read again only when it changed (a version check, where reading takes the channel's lock).
    ph: Phase,
    /// The connection's own next deadline.
    deadline: Option<Instant>,
    /// A failure is acted on after the events decoded before it were handled (complete
    /// messages that preceded the bad bytes are delivered, as libzmq).
    failure: Option<ConnectionEnd>,
    /// Complete frames may wait undecoded in `rbuf` (no room in the receive queue for them).
    undecoded: bool,
    /// What the peer makes us hold: the partial frame in `rbuf` and the parts of an incomplete
    /// message (as of the last decode that left no complete frame behind).
    held: usize,
    /// The peer's share of the process-wide budget, until it proves who it is (`budget.rs`).
    charge: Option<Charge>,
    /// The unit being received (as `Connection::units_decoded` counted it) and since when,
    /// while something is held and the connection reads: `message_timeout` runs from then.
    receiving: Option<(u64, Instant)>,
    message_timeout: Option<std::time::Duration>,
    /// When the one timer fires: the earliest of the connection's own timers and
    /// `message_timeout` as they were when it was set (`None`: not set).
    wake: Option<Instant>,
    /// The receive low-water mark set on the stream (1 is the kernel's default); `None` once
    /// the transport has refused one.
    lowat: Option<usize>,
    wakes: Wakes<'a>,
}

/// Wake-up sources that live across turns of the loop: creating (and registering, and
/// dropping) them on every turn costs more than the rest of a small message's trip through the
/// task. The rare ones (stop, phase change, eviction) are polled only when a cheap check says
/// they may have fired: polling a registered `Notified` takes a lock.
struct Wakes<'a> {
    sleep: Pin<Box<tokio::time::Sleep>>,
    stopped: Gated<dyn Future<Output = ()> + Send + 'a>,
    phase_probe: watch::Receiver<Phase>,
    phase_change: Gated<dyn Future<Output = watch::Receiver<Phase>> + Send>,
    pipe: Option<Pin<Box<dyn Future<Output = Arc<Pipe>> + Send>>>,
    eviction: Eviction,
}

/// What one turn decided before waiting, for the wait and its handlers.
#[derive(Clone, Copy)]
struct Turn {
    reading: bool,
    inbound_full: bool,
    unwritten: usize,
    can_fill: bool,
    /// The length of the frame at the front of `rbuf`, when its header is there.
    frame_len: Option<usize>,
    /// Free room in `rbuf` for the read.
    room: usize,
    /// When the unit being received stalls (`message_timeout`).
    stall: Option<Instant>,
}

impl<'a, R, W> Task<'a, R, W>
where
    R: StreamRead,
    W: AsyncWrite + Unpin,
{
    fn new(
        inner: Arc<Inner>,
        (rd, wr): (R, W),
        connect_pipe: Option<Arc<Pipe>>,
        conn: Connection,
        id: PeerId,
        stop: &'a Stop,
        peer: &'a str,
    ) -> Self {
        let mut phase = inner.phase();
        let ph = *phase.borrow_and_update();
        let deadline = conn.poll_timeout();
        let wakes = Wakes {
            sleep: Box::pin(tokio::time::sleep_until(to_tokio(deadline))),
            stopped: Gated::new(Box::pin(stop.wait())),
            phase_probe: inner.phase(),
            phase_change: Gated::new(Box::pin(phase_changed(inner.phase()))),
            pipe: None,
            eviction: None,
        };
        Task {
            message_timeout: inner.options.message_timeout.map(cap_duration),
            inner,
            rd,
            wr,
            connect_pipe,
            id,
            stop,
            peer,
            conn,
            rbuf: BytesMut::new(),
            wbuf: BytesMut::new(),
            parts: VecDeque::new(),
            local: VecDeque::new(),
            link: None,
            batch: VecDeque::new(),
            sizing: ReadSizing::new(),
            unyielded: 0,
            phase,
            ph,
            deadline,
            failure: None,
            undecoded: false,
            held: 0,
            charge: Some(Charge::default()),
            receiving: None,
            wake: deadline,
            lowat: Some(1),
            wakes,
        }
    }

    /// Turns the loop until the connection ends, and says how.
    async fn drive(&mut self) -> ConnectionEnd {
        loop {
            self.decode_waiting();
            if let Err(end) = self.surface_events() {
                return end;
            }
            match self.hand_over() {
                Ok(true) => tokio::task::yield_now().await,
                Ok(false) => {}
                Err(end) => return end,
            }
            // Everything pending goes into one write buffer.
            self.conn.poll_transmit(&mut self.wbuf);
            if let Some(l) = &self.link {
                fill(
                    &self.inner,
                    &mut self.conn,
                    l,
                    &mut self.local,
                    &mut self.wbuf,
                    &mut self.parts,
                );
            }
            self.deadline = self.conn.poll_timeout();
            if self.phase_ends() {
                return ConnectionEnd::Closed;
            }
            let turn = self.prepare_turn();
            let w = &mut self.wakes;
            // Unbiased: under sustained load neither reading nor writing starves.
            let handled = tokio::select! {
                r = write_out(&mut self.wr, &self.parts, &self.wbuf), if turn.unwritten > 0 => {
                    self.on_written(r)
                }
                r = self.rd.read_buf(&mut self.rbuf), if turn.reading => self.on_read(r, turn),
                _ = self.inner.inbound.wait_room(), if turn.inbound_full => Ok(()),
                pipe = poll_some(&mut w.pipe), if turn.can_fill => {
                    self.wakes.pipe = Some(pipe_woken(pipe));
                    Ok(())
                }
                _ = &mut w.sleep, if self.wake.is_some() => self.on_timer(turn.stall),
                rx = w.phase_change.poll_if(|| w.phase_probe.has_changed().unwrap_or(true)) => {
                    self.wakes.phase_probe.mark_unchanged();
                    self.wakes.phase_change = Gated::new(Box::pin(phase_changed(rx)));
                    Ok(())
                }
                _ = w.stopped.poll_if(|| self.stop.is_stopped()) => Err(ConnectionEnd::Closed),
                _ = evicted(&mut w.eviction) => {
                    Err(ConnectionEnd::Rejected(Rejection::HandedOver))
                }
            };
            if let Err(end) = handled {
                return end;
            }
        }
    }

    /// Decodes the complete frames left waiting in `rbuf` for room in the receive queue, once
    /// there is room (not on top of messages decoded by this turn's read, not yet handed over).
    fn decode_waiting(&mut self) {
        if self.undecoded
            && self.batch.is_empty()
            && self.failure.is_none()
            && self.inner.inbound.has_space()
        {
            self.decode();
        }
    }

    /// Decodes what `rbuf` holds and accounts for what the peer makes us hold.
    fn decode(&mut self) {
        match decode(
            &self.inner,
            &mut self.conn,
            self.link.as_ref(),
            &mut self.rbuf,
            &mut self.batch,
        ) {
            Ok(more) => {
                self.undecoded = more;
                self.failure = account(
                    &self.conn,
                    &self.rbuf,
                    self.undecoded,
                    &mut self.held,
                    self.charge.as_mut(),
                );
            }
            Err(e) => self.failure = Some(e),
        }
    }

    /// Surfaces what the last input produced: the handshake's end (attaching to the socket) and
    /// the messages and subscriptions of the event path. `Err` ends the connection at once.
    fn surface_events(&mut self) -> Result<(), ConnectionEnd> {
        while let Some(ev) = self.conn.poll_event() {
            let item = match ev {
                Event::Ready {
                    peer_socket_type,
                    peer_identity,
                    peer_metadata,
                } => {
                    self.on_ready(peer_socket_type, peer_identity, peer_metadata)?;
                    continue;
                }
                Event::Message(m) => Out::Msg(m),
                Event::Subscribe(p) => Out::Sub(p),
                Event::Cancel(p) => Out::Cancel(p),
                _ => continue,
            };
            if let Some(l) = &self.link
                && let Err(e) = self.inner.on_item(l, item, &mut self.batch)
            {
                self.failure = Some(ConnectionEnd::Subscription(e));
                break;
            }
        }
        Ok(())
    }

    /// The handshake completed: attach to the socket and tell the monitor.
    fn on_ready(
        &mut self,
        peer_socket_type: SocketType,
        peer_identity: Bytes,
        peer_metadata: Metadata,
    ) -> Result<(), ConnectionEnd> {
        let l = self
            .inner
            .attach(
                self.connect_pipe.as_ref(),
                self.id,
                peer_socket_type,
                &peer_identity,
                self.conn.curve_client_key(),
            )
            .map_err(ConnectionEnd::Rejected)?;
        self.life()
            .handshake_succeeded(&l, peer_socket_type, || (peer_identity, peer_metadata));
        self.wakes.pipe = Some(pipe_woken(l.pipe.clone()));
        tracing::debug!(
            peer = self.peer,
            peer_type = peer_socket_type.as_str(),
            "handshake complete"
        );
        self.wakes.eviction = eviction_of(&l);
        self.link = Some(l);
        // A peer that proved who it is no longer counts against the budget for strangers.
        if self.inner.options.mechanism.authenticates_peer() {
            self.charge = None;
        }
        Ok(())
    }

    /// Hands the decoded messages to the receive queue, then ends the connection on a failure
    /// found while decoding them. `Ok(true)`: let the consumer run before going on.
    fn hand_over(&mut self) -> Result<bool, ConnectionEnd> {
        let woke_consumer = self.inner.inbound.push_fair(&mut self.batch);
        if let Some(f) = self.failure.take() {
            return Err(f);
        }
        // The consumer was waiting for these: let it run first (on a current-thread runtime it
        // otherwise waits for this whole turn).
        // After reading a lot in one go, let the consumer run before reading on: a
        // current-thread runtime would otherwise keep polling this task (up to its coop budget)
        // and queue many large messages at once, each in fresh memory, instead of reusing what
        // the consumer freed.
        if woke_consumer || self.unyielded >= YIELD_AFTER {
            self.unyielded = 0;
            return Ok(true);
        }
        Ok(false)
    }

    /// Whether the socket's phase lets the connection go now (linger done, or terminated).
    fn phase_ends(&mut self) -> bool {
        if self.phase.has_changed().unwrap_or(true) {
            self.ph = *self.phase.borrow_and_update();
        }
        lingered(self.ph, || {
            self.wbuf.is_empty()
                && self.parts.is_empty()
                && self.local.is_empty()
                && self
                    .link
                    .as_ref()
                    .map(|l| &l.pipe)
                    .or(self.connect_pipe.as_ref())
                    .is_none_or(|p| p.is_empty())
        })
    }

    /// Decides what this turn waits for: whether to read (back-pressure), the timer, the read
    /// buffer's room and the receive low-water mark.
    fn prepare_turn(&mut self) -> Turn {
        // Keep reading while closing: a lingering handshake must complete. Messages not yet
        // delivered (no room) hold further reading back, but only once attached: a handshake
        // (a new peer, a reconnect) must complete while the receive queue is full.
        let inbound_full = self.link.is_some()
            && (self.undecoded || !self.batch.is_empty() || !self.inner.inbound.has_space());
        let unwritten = queued(&self.parts, &self.wbuf);
        let reading = reads(inbound_full, unwritten);
        let stall = self.set_timer(reading);
        let frame_len = self.size_read_buffer(reading);
        let room = self.rbuf.capacity() - self.rbuf.len();
        if reading {
            self.set_lowat(frame_len, room);
        }
        Turn {
            reading,
            inbound_full,
            unwritten,
            can_fill: self.link.is_some() && self.local.is_empty() && unwritten < WRITE_BUDGET,
            frame_len,
            room,
            stall,
        }
    }

    /// Sets the one timer for the connection's deadline and `message_timeout`; returns when
    /// the unit being received stalls.
    fn set_timer(&mut self, reading: bool) -> Option<Instant> {
        // A unit stopped short is timed only while we read: our own back-pressure is no fault
        // of the peer's, and the clock starts again when reading resumes.
        self.receiving = match self.receiving {
            _ if !reading || self.held == 0 || self.message_timeout.is_none() => None,
            Some((unit, since)) if unit == self.conn.units_decoded() => Some((unit, since)),
            _ => Some((self.conn.units_decoded(), now())),
        };
        let stall = self
            .receiving
            .zip(self.message_timeout)
            .map(|((_, t), d)| t + d);
        let next = match (self.deadline, stall) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // The timer is moved earlier at once, but never later: when it fires early, nothing has
        // expired and it is set again from what is due then. (With a unit completing at
        // nearly every read of a busy stream, moving it at every read would cost a timer
        // update per read.)
        if let Some(n) = next
            && self.wake.is_none_or(|w| n < w)
        {
            self.wake = next;
            self.wakes.sleep.as_mut().reset(to_tokio(self.wake));
        }
        stall
    }

    /// Gives `rbuf` room for the next read; returns the length of the frame at its front.
    fn size_read_buffer(&mut self, reading: bool) -> Option<usize> {
        let chunk = self.sizing.chunk(self.link.is_some());
        if reading && self.rbuf.capacity() - self.rbuf.len() < chunk / 4 {
            self.rbuf.reserve(chunk);
        }
        // A large frame whose header arrived and passed the size limits: make room for more of
        // it in a fresh buffer (one copy of what arrived so far, no regrowth), so its body is
        // read in large pieces straight into place, with room for the start of the next frame
        // (whose header then sets the next low-water mark). Not before the handshake
        // completes: a connection that never finishes its handshake must stay cheap.
        let frame_len = self
            .link
            .as_ref()
            .and_then(|_| self.conn.frame_len_hint(&self.rbuf));
        if let Some(want) = frame_len.and_then(|f| self.sizing.large_frame(f, self.rbuf.len()))
            && want > self.rbuf.capacity()
        {
            let mut fresh = BytesMut::with_capacity(want);
            fresh.extend_from_slice(&self.rbuf);
            self.rbuf = fresh;
        }
        frame_len
    }

    /// The rest of a large frame will take several segments to arrive: be woken once for all
    /// of them (see `crate::sys`). Not while a timer runs (heartbeats): bytes held below the
    /// mark are not yet "traffic" to the protocol.
    fn set_lowat(&mut self, frame_len: Option<usize>, room: usize) {
        let Some(current) = self.lowat else {
            return;
        };
        let missing = match (frame_len, self.deadline) {
            (Some(f), None) => f.saturating_sub(self.rbuf.len()),
            _ => 0,
        };
        let want = lowat_for(missing, room);
        if want != current {
            self.lowat = match self.rd.set_recv_lowat(want) {
                Ok(()) => Some(want),
                Err(e) => {
                    if e.kind() != std::io::ErrorKind::Unsupported {
                        tracing::debug!(peer = self.peer, error = %e, "SO_RCVLOWAT refused");
                    }
                    None
                }
            };
        }
    }

    /// A write of `n` bytes (or its failure).
    fn on_written(&mut self, r: std::io::Result<usize>) -> Result<(), ConnectionEnd> {
        match r {
            Ok(0) => Err(ConnectionEnd::Io(std::io::ErrorKind::WriteZero.into())),
            Ok(n) => {
                advance_out(&mut self.parts, &mut self.wbuf, n);
                Ok(())
            }
            Err(e) => Err(ConnectionEnd::Io(e)),
        }
    }

    /// A read of `n` bytes (or the peer's close, or a failure): size the next, decode.
    fn on_read(&mut self, r: std::io::Result<usize>, turn: Turn) -> Result<(), ConnectionEnd> {
        match r {
            Ok(0) => Err(ConnectionEnd::PeerClosed),
            Ok(n) => {
                self.unyielded += n;
                self.sizing
                    .after_read(n, turn.room, turn.frame_len, self.rbuf.len());
                self.decode();
                Ok(())
            }
            Err(e) => Err(ConnectionEnd::Io(e)),
        }
    }

    /// The timer fired: a stalled unit, or the connection's own deadlines.
    fn on_timer(&mut self, stall: Option<Instant>) -> Result<(), ConnectionEnd> {
        self.wake = None;
        let t = now();
        if let (Some(s), Some(d)) = (stall, self.message_timeout)
            && t >= s
        {
            return Err(ConnectionEnd::Memory(MemoryLimit::Stalled(d)));
        }
        self.conn.handle_timeout(t).map_err(ConnectionEnd::Protocol)
    }

    fn life(&self) -> Life<'_> {
        Life {
            inner: &self.inner,
            id: self.id,
            address: self.peer,
        }
    }

    /// Ends the connection: a best-effort ERROR to the peer, the pipe handed back, the monitor
    /// told, the peer's failure logged.
    async fn close(mut self, end: ConnectionEnd, failures: &FailureLog) -> Outcome {
        // A failing connection may have queued an ERROR command: best effort.
        if matches!(end, ConnectionEnd::Protocol(_) | ConnectionEnd::Rejected(_)) {
            self.conn.poll_transmit(&mut self.wbuf);
            if !self.wbuf.is_empty() || !self.parts.is_empty() {
                let (wr, parts, wbuf) = (&mut self.wr, &self.parts, &self.wbuf);
                let flush = async {
                    for part in parts {
                        wr.write_all(part).await?;
                    }
                    wr.write_all(wbuf).await
                };
                let _ = tokio::time::timeout(std::time::Duration::from_millis(100), flush).await;
            }
        }
        let was_ready = self.link.is_some();
        let local = std::mem::take(&mut self.local);
        let life = self.life();
        life.detach(self.link.as_ref(), self.connect_pipe.is_some(), local);
        life.ended(was_ready, &end);
        failures.log_end(self.peer, &end);
        Outcome { end, was_ready }
    }
}

/// Deadlines are `Instant + Duration`, which panics on overflow: absurd values from the options
/// are capped (ten years is "never" here).
fn cap_duration(d: std::time::Duration) -> std::time::Duration {
    d.min(std::time::Duration::from_secs(10 * 365 * 86_400))
}

/// After a decode: what the peer makes us hold now, in `held`, charged to the budget for
/// unauthenticated peers while `charge` is there. Not while complete frames wait undecoded
/// (`undecoded`: we stopped decoding, not the peer sending; nothing is read meanwhile, so what
/// is held does not grow). `Some` ends the connection: the budget would be passed.
fn account(
    conn: &Connection,
    rbuf: &BytesMut,
    undecoded: bool,
    held: &mut usize,
    charge: Option<&mut Charge>,
) -> Option<ConnectionEnd> {
    if undecoded {
        return None;
    }
    let partial = usize::try_from(conn.partial_message_cost()).unwrap_or(usize::MAX);
    *held = rbuf.len().saturating_add(partial);
    let charge = charge?;
    charge.hold(*held).err().map(ConnectionEnd::Memory)
}

/// How much the connection reads at a time. The chunk grows while reads fill the buffer (a
/// busy peer), shrinks back when they do not, and covers the last large frame; a peer that has
/// sent large frames earns room for the next ones before they arrive (`frame_ahead`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReadSizing {
    /// Size of the next read once attached.
    chunk: usize,
    /// Room a large frame may get before it has arrived: twice the largest complete frame so
    /// far (see [`frame_room`]), at most [`MAX_READ_AHEAD`].
    frame_ahead: usize,
}

impl ReadSizing {
    const fn new() -> Self {
        ReadSizing {
            chunk: READ_CHUNK,
            frame_ahead: 0,
        }
    }

    /// The read chunk: small until the handshake completes (`attached`), so a flood of
    /// connections that never finish it costs little memory each.
    fn chunk(&self, attached: bool) -> usize {
        if attached {
            self.chunk
        } else {
            HANDSHAKE_CHUNK
        }
    }

    /// The frame at the front of the buffer is `frame_len` bytes long (header included) and
    /// `have` bytes of it are there: for a large frame, the capacity the buffer should have
    /// (see [`frame_room`]); `None` for an ordinary one. Large frames again: reads go as far
    /// ahead as the earlier ones justify.
    fn large_frame(&mut self, frame_len: usize, have: usize) -> Option<usize> {
        if frame_len <= READ_CHUNK {
            return None;
        }
        self.chunk = self.chunk.max(self.frame_ahead);
        Some(frame_room(frame_len, have, self.frame_ahead))
    }

    /// A read of `n` bytes into `room` free bytes, after which the buffer holds `buffered`
    /// bytes; `frame_len` was the length of the frame at its front before the read.
    fn after_read(&mut self, n: usize, room: usize, frame_len: Option<usize>, buffered: usize) {
        if let Some(f) = frame_len
            && buffered >= f
        {
            // All of a frame arrived: the next is likely as large, so later reads take up to
            // two such frames.
            self.frame_ahead = self
                .frame_ahead
                .max(f.saturating_mul(2).min(MAX_READ_AHEAD));
        }
        if n == room {
            // (Never below what a large frame asked for.)
            self.chunk = (self.chunk * 2).min(MAX_READ_CHUNK.max(self.chunk));
        } else if n < self.chunk / 8 {
            self.chunk = (self.chunk / 2).max(READ_CHUNK);
        }
    }
}

/// Whether the connection reads: not while messages wait for room in the receive queue
/// (`inbound_full`: back-pressure reaches the sender), nor while `unwritten` bytes pass
/// [`MAX_UNWRITTEN`] (a peer that sends PINGs but never reads our PONGs).
fn reads(inbound_full: bool, unwritten: usize) -> bool {
    !inbound_full && unwritten < MAX_UNWRITTEN
}

/// Capacity to give the read buffer while it holds the first `have` bytes of
/// a frame of `frame_len` bytes (header included): the whole frame and a read
/// chunk beyond it, but no more than twice what has arrived, or than `ahead`
/// (what the peer's earlier, complete frames justify), whichever is larger.
/// An announced length by itself reserves nothing: memory is spent on bytes
/// that arrived.
fn frame_room(frame_len: usize, have: usize, ahead: usize) -> usize {
    frame_len
        .saturating_add(READ_CHUNK)
        .min(ahead.max(have.saturating_mul(2)).max(READ_CHUNK))
}

/// The receive low-water mark for `missing` more bytes of the frame being
/// read into a buffer with `room` free: whole multiples of [`LOWAT_MIN`] up to
/// [`MAX_READ_AHEAD`] (fewer distinct values, fewer system calls), or 1 (the
/// kernel's default: wake at every arrival) when little is missing.
fn lowat_for(missing: usize, room: usize) -> usize {
    let mark = missing.min(room).min(MAX_READ_AHEAD);
    if mark < LOWAT_MIN {
        1
    } else {
        mark - mark % LOWAT_MIN
    }
}

/// Decode what `rbuf` holds. Once attached, messages go straight into `batch`
/// (no detour through the event queue), at most this connection's share of
/// the room in the receive queue: the frames beyond stay undecoded in `rbuf`
/// (returns `true` then) instead of waiting in `batch`, so a full batch is
/// handed over in O(1). PUB/XPUB keep the event path: there a message may be
/// a subscription that breaks a limit.
fn decode(
    inner: &Inner,
    conn: &mut Connection,
    link: Option<&Link>,
    rbuf: &mut BytesMut,
    batch: &mut VecDeque<(u64, Message)>,
) -> Result<bool, ConnectionEnd> {
    let Some(l) = link.filter(|l| !l.receive.takes_subscriptions()) else {
        conn.handle_input(rbuf, now())?;
        return Ok(false);
    };
    let max = inner.inbound.fair_room();
    if l.receive.is_as_is() {
        // What `Inner::on_message` does for these types, without a call and a
        // match per message: queue the message as it is.
        return Ok(decode_as_is(conn, rbuf, max, l.pipe.id, batch)? == max);
    }
    let mut broke = None;
    let res = conn.handle_input_into(rbuf, now(), max, |m| {
        // After a broken limit, the rest is dropped (as on the event path).
        if broke.is_none()
            && let Err(e) = inner.on_message(l, m, batch)
        {
            broke = Some(e);
        }
    });
    if let Some(e) = broke {
        return Err(ConnectionEnd::Subscription(e));
    }
    Ok(res? == max)
}

/// `decode`'s path for the messages queued as they come (PULL, SUB, DEALER, ...). Never
/// inlined: inlined into `decode`, the decoder's loop called `VecDeque::push_back` out of line
/// (cachegrind: about 19 instructions more per 64 B message a SUB receives).
#[inline(never)]
fn decode_as_is(
    conn: &mut Connection,
    rbuf: &mut BytesMut,
    max: usize,
    id: u64,
    batch: &mut VecDeque<(u64, Message)>,
) -> Result<usize, dafka_zmtp_proto::Error> {
    conn.handle_input_into(rbuf, now(), max, |m| batch.push_back((id, m)))
}

/// Resolves (handing the pipe back) once the pipe's owner signals new items.
fn pipe_woken(pipe: Arc<Pipe>) -> Pin<Box<dyn Future<Output = Arc<Pipe>> + Send>> {
    Box::pin(async move {
        pipe.wake.notified().await;
        pipe
    })
}

/// Resolves (handing the receiver back) on the next change of the socket's phase.
async fn phase_changed(mut rx: watch::Receiver<Phase>) -> watch::Receiver<Phase> {
    if rx.changed().await.is_err() {
        // The socket outlives its connections; never resolve rather than spin.
        std::future::pending::<()>().await;
    }
    rx
}

/// A future that, once polled (and so registered for its wake-up), is polled
/// again only when a cheap check says it may have completed.
struct Gated<F: ?Sized> {
    inner: Pin<Box<F>>,
    armed: bool,
}

impl<F: Future + ?Sized> Gated<F> {
    fn new(inner: Pin<Box<F>>) -> Self {
        Gated {
            inner,
            armed: false,
        }
    }

    /// Awaits the inner future, skipping polls while `may_be_ready` is false.
    ///
    /// Sound only for wake-ups that keep the first poll's waker, i.e. within
    /// one task, and when `may_be_ready` becomes true no later than the inner
    /// future becomes ready.
    fn poll_if<'a>(
        &'a mut self,
        may_be_ready: impl Fn() -> bool + 'a,
    ) -> impl Future<Output = F::Output> + 'a {
        let this = self;
        std::future::poll_fn(move |cx: &mut Context<'_>| {
            if this.armed && !may_be_ready() {
                return Poll::Pending;
            }
            this.armed = true;
            this.inner.as_mut().poll(cx)
        })
    }
}

/// Awaits the future in `slot`, or never when there is none.
async fn poll_some<F: Future + Unpin>(slot: &mut Option<F>) -> F::Output {
    match slot {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// The attached connection's eviction flag (ROUTER handover) and a wait on
/// it kept across loop turns, like the other rare wake-ups.
type Eviction = Option<(Arc<Stop>, Gated<Pin<Box<dyn Future<Output = ()> + Send>>>)>;

fn eviction_of(link: &Link) -> Eviction {
    let flag = Arc::clone(&link.evicted);
    let waiter = Arc::clone(&link.evicted);
    let wait: Pin<Box<dyn Future<Output = ()> + Send>> =
        Box::pin(async move { waiter.wait().await });
    Some((flag, Gated::new(Box::pin(wait))))
}

/// Resolves when the attached connection must end (ROUTER handover).
async fn evicted(slot: &mut Eviction) {
    match slot {
        Some((flag, wait)) => {
            let flag: &Stop = flag;
            wait.poll_if(|| flag.is_stopped()).await
        }
        None => std::future::pending().await,
    }
}

/// The current time on tokio's clock (so paused test time drives timeouts).
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

fn to_tokio(deadline: Option<Instant>) -> tokio::time::Instant {
    match deadline {
        Some(d) => tokio::time::Instant::from_std(d),
        // Far future; the branch is disabled anyway.
        None => tokio::time::Instant::now() + std::time::Duration::from_secs(86400 * 365),
    }
}

/// Bytes waiting to be written: `parts`, then `wbuf`.
fn queued(parts: &VecDeque<Bytes>, wbuf: &BytesMut) -> usize {
    parts.iter().map(Bytes::len).sum::<usize>() + wbuf.len()
}

/// One write of what is queued: a plain write of `wbuf` when there are no
/// separate parts, else a vectored write of the parts followed by `wbuf`.
async fn write_out<W: AsyncWrite + Unpin>(
    wr: &mut W,
    parts: &VecDeque<Bytes>,
    wbuf: &BytesMut,
) -> std::io::Result<usize> {
    if parts.is_empty() {
        return wr.write(wbuf).await;
    }
    let mut iov: Vec<std::io::IoSlice<'_>> = parts
        .iter()
        .filter(|p| !p.is_empty())
        .take(MAX_IOV)
        .map(|p| std::io::IoSlice::new(p))
        .collect();
    if iov.len() < MAX_IOV && !wbuf.is_empty() {
        iov.push(std::io::IoSlice::new(wbuf));
    }
    wr.write_vectored(&iov).await
}

/// Drop `n` written bytes from the front of `parts`, then of `wbuf`.
fn advance_out(parts: &mut VecDeque<Bytes>, wbuf: &mut BytesMut, mut n: usize) {
    while let Some(front) = parts.front_mut() {
        if n < front.len() {
            front.advance(n);
            return;
        }
        n -= front.len();
        parts.pop_front();
    }
    wbuf.advance(n);
}

/// Encode queued items into `wbuf` (large bodies into `parts`) until the
/// budget is reached.
fn fill(
    inner: &Inner,
    conn: &mut Connection,
    link: &Link,
    local: &mut VecDeque<Out>,
    wbuf: &mut BytesMut,
    parts: &mut VecDeque<Bytes>,
) {
    let mut budget = queued(parts, wbuf);
    while budget < WRITE_BUDGET {
        if local.is_empty() {
            if link.pipe.take_all(local) {
                inner.send_space.notify_waiters();
                inner.queue_drained(&link.pipe);
            }
            if local.is_empty() {
                break;
            }
        }
        let Some(item) = local.pop_front() else {
            break;
        };
        let res = match item {
            Out::Msg(m) => conn.send_message_parts(&m, wbuf, parts, COPY_MAX),
            // To a ZMTP 3.0 peer the connection sends these as 0x01/0x00 messages.
            Out::Sub(p) => conn.send_command(&Command::Subscribe(p), wbuf),
            Out::Cancel(p) => conn.send_command(&Command::Cancel(p), wbuf),
        };
        if let Err(e) = res {
            tracing::warn!(error = %e, "dropping an outgoing message");
        }
        budget = queued(parts, wbuf);
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll};
    use std::time::Duration;

    use bytes::Bytes;
    use dafka_zmtp_proto::{Error as ProtoError, PeerError};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    use super::*;
    use crate::{Options, SocketType};

    #[test]
    fn frame_room_follows_arrived_bytes_not_announcements() {
        const MIB: usize = 1 << 20;
        // A bare header for 16 MiB gets an ordinary read chunk.
        assert_eq!(frame_room(16 * MIB, 9, 0), READ_CHUNK);
        // Then at most twice what arrived.
        assert_eq!(frame_room(16 * MIB, 300_000, 0), 600_000);
        // A frame smaller than that gets its size plus a read chunk.
        assert_eq!(frame_room(100_000, 90_000, 0), 100_000 + READ_CHUNK);
        // Earlier complete frames justify reading a whole one into place at once.
        assert_eq!(frame_room(262_153, 100, 524_306), 262_153 + READ_CHUNK);
        assert_eq!(frame_room(16 * MIB, 100, MAX_READ_AHEAD), MAX_READ_AHEAD);
        assert_eq!(frame_room(usize::MAX, usize::MAX, 0), usize::MAX);
    }

    #[test]
    fn lowat_marks_are_coarse_and_bounded() {
        assert_eq!(lowat_for(0, 1 << 20), 1);
        assert_eq!(lowat_for(LOWAT_MIN - 1, 1 << 20), 1);
        assert_eq!(lowat_for(LOWAT_MIN, 1 << 20), LOWAT_MIN);
        assert_eq!(lowat_for(200_000, 1 << 20), 3 * LOWAT_MIN);
        // Never above the room the next read has, nor the read-ahead.
        assert_eq!(lowat_for(200_000, 100_000), LOWAT_MIN);
        assert_eq!(lowat_for(usize::MAX, usize::MAX), MAX_READ_AHEAD);
    }

    #[test]
    fn reads_are_small_until_the_handshake_completes() {
        let sizing = ReadSizing::new();
        assert_eq!(sizing.chunk(false), HANDSHAKE_CHUNK);
        assert_eq!(sizing.chunk(true), READ_CHUNK);
    }

    #[test]
    fn the_read_chunk_grows_while_reads_fill_it_and_shrinks_back() {
        let mut sizing = ReadSizing::new();
        // Reads that fill the room double the chunk, up to its maximum.
        sizing.after_read(READ_CHUNK, READ_CHUNK, None, READ_CHUNK);
        assert_eq!(sizing.chunk(true), 2 * READ_CHUNK);
        for _ in 0..10 {
            sizing.after_read(1000, 1000, None, 1000);
        }
        assert_eq!(sizing.chunk(true), MAX_READ_CHUNK);
        // A read between an eighth and all of the chunk changes nothing.
        sizing.after_read(MAX_READ_CHUNK / 8, MAX_READ_CHUNK, None, 0);
        assert_eq!(sizing.chunk(true), MAX_READ_CHUNK);
        // Small reads halve it, down to the ordinary chunk.
        sizing.after_read(MAX_READ_CHUNK / 8 - 1, MAX_READ_CHUNK, None, 0);
        assert_eq!(sizing.chunk(true), MAX_READ_CHUNK / 2);
        for _ in 0..10 {
            sizing.after_read(1, MAX_READ_CHUNK, None, 0);
        }
        assert_eq!(sizing.chunk(true), READ_CHUNK);
        // Nothing here learned about large frames.
        assert_eq!(sizing.frame_ahead, 0);
    }

    #[test]
    fn large_frames_earn_read_ahead_once_they_have_arrived() {
        const MIB: usize = 1 << 20;
        let mut sizing = ReadSizing::new();
        // Ordinary frames get no special room.
        assert_eq!(sizing.large_frame(READ_CHUNK, 9), None);
        // The first large frame: room only for what arrived (see `frame_room`).
        assert_eq!(sizing.large_frame(300_000, 9), Some(READ_CHUNK));
        assert_eq!(sizing.chunk(true), READ_CHUNK);
        // Only part of it arrived: nothing learned.
        sizing.after_read(1000, 50_000, Some(300_000), 100_000);
        assert_eq!(sizing.frame_ahead, 0);
        // All of it arrived: the next may get twice its size before arriving.
        sizing.after_read(1000, 50_000, Some(300_000), 300_000);
        assert_eq!(sizing.frame_ahead, 600_000);
        assert_eq!(sizing.large_frame(300_000, 9), Some(300_000 + READ_CHUNK));
        // And reads go that far ahead, above the usual maximum: full reads keep them there,
        // neither growing past it nor shrinking below.
        assert_eq!(sizing.chunk(true), 600_000);
        sizing.after_read(600_000, 600_000, None, 600_000);
        assert_eq!(sizing.chunk(true), 600_000);
        // What a frame earns is bounded, whatever its announced length.
        sizing.after_read(1, MIB, Some(usize::MAX), usize::MAX);
        assert_eq!(sizing.frame_ahead, MAX_READ_AHEAD);
        // Small frames do not lower it.
        sizing.after_read(1, MIB, Some(10), 10);
        assert_eq!(sizing.frame_ahead, MAX_READ_AHEAD);
    }

    #[test]
    fn reading_stops_under_back_pressure() {
        assert!(reads(false, 0));
        assert!(reads(false, MAX_UNWRITTEN - 1));
        // Our receive queue is full: the sender waits.
        assert!(!reads(true, 0));
        // The peer does not read what we write (PONGs to its PINGs).
        assert!(!reads(false, MAX_UNWRITTEN));
    }

    fn peer_handshake(socket_type: &str) -> Vec<u8> {
        let mut g = vec![0xFFu8, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3, 1];
        let mut mech = b"NULL".to_vec();
        mech.resize(20, 0);
        g.extend_from_slice(&mech);
        g.resize(64, 0);
        let mut body = vec![5u8];
        body.extend_from_slice(b"READY");
        body.push(11);
        body.extend_from_slice(b"Socket-Type");
        body.extend_from_slice(&(socket_type.len() as u32).to_be_bytes());
        body.extend_from_slice(socket_type.as_bytes());
        g.push(0x04);
        g.push(body.len() as u8);
        g.extend_from_slice(&body);
        g
    }

    /// Counts `poll_write` calls that wrote something.
    struct CountingWriter {
        inner: tokio::io::WriteHalf<DuplexStream>,
        writes: Arc<AtomicUsize>,
    }

    impl AsyncWrite for CountingWriter {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let r = Pin::new(&mut self.inner).poll_write(cx, buf);
            if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
            r
        }
        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }
        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// The socket state of a `socket_type` socket with `options`, on this runtime.
    fn inner(socket_type: SocketType, options: Options) -> Arc<Inner> {
        Arc::new(Inner::new(
            socket_type,
            options,
            tokio::runtime::Handle::current(),
        ))
    }

    /// Runs an accept-side PULL connection with `options` over `ours` until it ends: its
    /// outcome and how long it ran.
    async fn run_pull_to_end(options: Options, ours: DuplexStream) -> (Outcome, Duration) {
        run_accepted(inner(SocketType::Pull, options), ours).await
    }

    /// Runs an accept-side connection of the socket `inner` over `ours` until it ends: its
    /// outcome and how long it ran.
    async fn run_accepted(inner: Arc<Inner>, ours: DuplexStream) -> (Outcome, Duration) {
        let (rd, wr) = tokio::io::split(ours);
        let start = tokio::time::Instant::now();
        let outcome = run(
            inner,
            rd,
            wr,
            None,
            PeerId(1),
            &Stop::default(),
            "test",
            &FailureLog::default(),
        )
        .await;
        (outcome, start.elapsed())
    }

    /// Reads from the peer side until `total` bytes came, and no more.
    async fn read_total(theirs: &mut DuplexStream, total: usize) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        while got.len() < total {
            let n = theirs.read(&mut buf).await.unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got.len(), total);
        got
    }

    /// Runs a connect-side connection over `rd`/`wr` in a task.
    fn spawn_connect_side<R, W>(
        inner: &Arc<Inner>,
        rd: R,
        wr: W,
        pipe: Arc<Pipe>,
    ) -> tokio::task::JoinHandle<Outcome>
    where
        R: StreamRead + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let inner = inner.clone();
        tokio::spawn(async move {
            let id = PeerId(pipe.id);
            run(
                inner,
                rd,
                wr,
                Some(pipe),
                id,
                &Stop::default(),
                "test",
                &FailureLog::default(),
            )
            .await
        })
    }

    #[tokio::test(start_paused = true)]
    async fn handshake_timeout_closes_a_silent_peer() {
        let options = Options {
            handshake_timeout: Some(Duration::from_secs(5)),
            ..Default::default()
        };
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        let (outcome, elapsed) = run_pull_to_end(options, ours).await;
        assert!(
            matches!(
                outcome.end,
                ConnectionEnd::Protocol(ProtoError::Peer(PeerError::HandshakeTimeout(_)))
            ),
            "{:?}",
            outcome.end
        );
        assert!(!outcome.was_ready);
        assert!(elapsed >= Duration::from_secs(5) && elapsed < Duration::from_millis(5100));
        // Our greeting went out at once.
        let mut g = [0u8; 64];
        theirs.read_exact(&mut g).await.unwrap();
        assert_eq!(g[0], 0xFF);
        assert_eq!(g[9], 0x7F);
    }

    /// A long frame header announcing `len` bytes, and `have` of them.
    fn partial_frame(len: u64, have: usize) -> Vec<u8> {
        let mut f = vec![0x02];
        f.extend_from_slice(&len.to_be_bytes());
        f.resize(9 + have, 0xAB);
        f
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_that_stops_arriving_is_closed_after_message_timeout() {
        let options = Options {
            message_timeout: Some(Duration::from_secs(2)),
            ..Default::default()
        };
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        theirs.write_all(&peer_handshake("PUSH")).await.unwrap();
        // Whole messages keep coming for longer than the timeout: each restarts the clock.
        let writer = tokio::spawn(async move {
            for _ in 0..10 {
                theirs.write_all(&[0x00, 0x02, b'o', b'k']).await.unwrap();
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            // Then half a frame, and nothing more.
            theirs.write_all(&partial_frame(1000, 500)).await.unwrap();
            tokio::time::sleep(Duration::from_secs(3600)).await;
            theirs
        });
        let (outcome, elapsed) = run_pull_to_end(options, ours).await;
        assert!(
            matches!(
                outcome.end,
                ConnectionEnd::Memory(MemoryLimit::Stalled(d)) if d == Duration::from_secs(2)
            ),
            "{:?}",
            outcome.end
        );
        assert!(outcome.was_ready);
        // 5 s of messages, then the 2 s of the stalled frame.
        assert!(
            elapsed >= Duration::from_secs(7) && elapsed < Duration::from_millis(7100),
            "{elapsed:?}"
        );
        writer.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_greeting_that_stops_arriving_is_closed_after_message_timeout() {
        let options = Options {
            message_timeout: Some(Duration::from_secs(1)),
            ..Default::default()
        };
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        theirs
            .write_all(&peer_handshake("PUSH")[..20])
            .await
            .unwrap();
        let (outcome, elapsed) = run_pull_to_end(options, ours).await;
        assert!(
            matches!(outcome.end, ConnectionEnd::Memory(MemoryLimit::Stalled(_))),
            "{:?}",
            outcome.end
        );
        assert!(!outcome.was_ready);
        assert!(elapsed >= Duration::from_secs(1) && elapsed < Duration::from_millis(1100));
    }

    /// While our receive queue is full the connection does not read: a partial frame behind
    /// the messages waiting is not the peer's fault, and its clock starts only once reading
    /// resumes.
    #[tokio::test(start_paused = true)]
    async fn message_timeout_does_not_run_while_we_hold_reading_back() {
        let options = Options {
            message_timeout: Some(Duration::from_secs(2)),
            rcvhwm: 1,
            ..Default::default()
        };
        let inner = inner(SocketType::Pull, options);
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        let mut wire = peer_handshake("PUSH");
        // Two messages (the second finds the queue full), then half a frame.
        wire.extend_from_slice(&[0x00, 0x01, b'a', 0x00, 0x01, b'b']);
        wire.extend_from_slice(&partial_frame(1000, 500));
        theirs.write_all(&wire).await.unwrap();
        let task = tokio::spawn(run_accepted(inner.clone(), ours));
        // Nobody takes the messages for a long while: the connection stays.
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!task.is_finished(), "closed while we held its reading back");
        assert_eq!(&inner.try_recv().unwrap().frames()[0][..], b"a");
        // (The connection decodes the second once there is room.)
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(&inner.try_recv().unwrap().frames()[0][..], b"b");
        // Reading resumes: now the half frame is the peer's, and 2 s later it is closed.
        let (outcome, elapsed) = task.await.unwrap();
        assert!(
            matches!(outcome.end, ConnectionEnd::Memory(MemoryLimit::Stalled(_))),
            "{:?}",
            outcome.end
        );
        assert!(
            elapsed >= Duration::from_secs(32) && elapsed < Duration::from_millis(32200),
            "{elapsed:?}"
        );
        drop(theirs);
    }

    #[tokio::test(start_paused = true)]
    async fn heartbeat_timeout_after_handshake() {
        let options = Options {
            heartbeat_ivl: Some(Duration::from_secs(1)),
            heartbeat_timeout: Some(Duration::from_secs(3)),
            ..Default::default()
        };
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        theirs.write_all(&peer_handshake("PUSH")).await.unwrap();
        let (outcome, elapsed) = run_pull_to_end(options, ours).await;
        assert!(
            matches!(
                outcome.end,
                ConnectionEnd::Protocol(ProtoError::Peer(PeerError::HeartbeatTimeout(_)))
            ),
            "{:?}",
            outcome.end
        );
        assert!(outcome.was_ready);
        assert!(elapsed >= Duration::from_secs(4) && elapsed < Duration::from_millis(4100));
    }

    #[tokio::test(start_paused = true)]
    async fn large_bodies_written_from_their_own_buffers_keep_wire_order() {
        let inner = inner(SocketType::Push, Options::default());
        let pipe = inner.add_connect_pipe().unwrap();
        let big = |n: usize, seed: u8| {
            Bytes::from(
                (0..n)
                    .map(|i| (i as u8).wrapping_mul(7) ^ seed)
                    .collect::<Vec<u8>>(),
            )
        };
        let msgs = vec![
            crate::Message::from(Bytes::from_static(b"small")),
            crate::Message::from(big(100_000, 1)),
            crate::Message::from(Bytes::from_static(b"between")),
            crate::Message::from(vec![big(COPY_MAX + 1, 2), Bytes::from_static(b"tail")]),
            crate::Message::from(big(300_000, 3)),
        ];
        let mut expected = Vec::new();
        for m in &msgs {
            let mut b = BytesMut::new();
            dafka_zmtp_proto::encode_message(m, &mut b);
            expected.extend_from_slice(&b);
            pipe.try_push(m.clone()).unwrap();
        }
        // A small duplex buffer forces many partial writes.
        let (ours, mut theirs) = tokio::io::duplex(8 * 1024);
        theirs.write_all(&peer_handshake("PULL")).await.unwrap();
        let (rd, wr) = tokio::io::split(ours);
        let conn = spawn_connect_side(&inner, rd, wr, pipe);
        let total = 64 + 28 + expected.len();
        let got = read_total(&mut theirs, total).await;
        assert!(got[64 + 28..] == expected[..], "wire bytes differ");
        drop(theirs);
        let outcome = conn.await.unwrap();
        assert!(matches!(
            outcome.end,
            ConnectionEnd::PeerClosed | ConnectionEnd::Io(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn queued_messages_are_batched_into_few_writes() {
        let inner = inner(SocketType::Push, Options::default());
        let pipe = inner.add_connect_pipe().unwrap();
        for i in 0..1000u32 {
            pipe.try_push(crate::Message::from(Bytes::copy_from_slice(
                &i.to_be_bytes(),
            )))
            .unwrap();
        }
        let (ours, mut theirs) = tokio::io::duplex(1 << 20);
        theirs.write_all(&peer_handshake("PULL")).await.unwrap();
        let (rd, wr) = tokio::io::split(ours);
        let writes = Arc::new(AtomicUsize::new(0));
        let wr = CountingWriter {
            inner: wr,
            writes: writes.clone(),
        };
        let conn = spawn_connect_side(&inner, rd, wr, pipe);
        // Greeting, READY (28 bytes: Socket-Type PUSH), then 1000 frames of
        // 2 + 4 bytes.
        let total = 64 + 28 + 6000;
        let got = read_total(&mut theirs, total).await;
        let frames = &got[64 + 28..];
        for (i, f) in frames.chunks(6).enumerate() {
            assert_eq!(f[..2], [0x00, 4]);
            assert_eq!(f[2..], (i as u32).to_be_bytes());
        }
        // Greeting, READY and all 1000 messages in at most a few writes.
        assert!(writes.load(Ordering::Relaxed) <= 4, "{writes:?}");
        drop(theirs);
        let outcome = conn.await.unwrap();
        assert!(matches!(
            outcome.end,
            ConnectionEnd::PeerClosed | ConnectionEnd::Io(_)
        ));
    }
}
