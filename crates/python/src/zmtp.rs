//! `dafka.zmtp.Socket`: a ZeroMQ socket for Python over `dafka_zmtp::Socket`,
//! shaped like pyzmq's (`send`/`recv` of one frame with flags, `*_multipart`,
//! `setsockopt`/`getsockopt` with libzmq's option numbers and units).
//!
//! Conversion and lifetime only: options to [`Options`], frames to and from
//! Python objects ([`crate::frame`]), errors to `dafka.errors`. Blocking
//! methods release the GIL and stay interruptible (see [`runtime::wait_for`]);
//! the `*_async` methods return asyncio futures completed from the runtime.
//!
//! The core socket is created at the first call that needs it (bind, connect,
//! send, receive, subscribe, poll), so that options set with `setsockopt`
//! before that apply, as in libzmq; options are validated when they are set.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arrow_pyarrow::ToPyArrow;
use bytes::Bytes;
use dafka_zmtp::{Limits, Message, Options, SendError, Socket, SocketType};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::asyncio::{self, Receivers, Stash, lock};
use crate::frame::{self, Frame};
use crate::security::{self, Security};
use crate::{arrow_batch, errors, runtime};

/// `flags` bits, as in libzmq.
pub(crate) const NOBLOCK: i32 = 1;
pub(crate) const SNDMORE: i32 = 2;

/// libzmq's option numbers (`zmq.h`), by the name used in messages and in
/// keyword options. The one table of them: `dafka.zmtp`'s constants (`SNDHWM`, ...) are read
/// from it (`_native.OPTION_NUMBERS`).
const OPTION_NUMBERS: &[(i32, &str)] = &[
    (5, "routing_id"),
    (6, "subscribe"),
    (7, "unsubscribe"),
    (13, "rcvmore"),
    (15, "events"),
    (16, "type"),
    (17, "linger"),
    (18, "reconnect_ivl"),
    (21, "reconnect_ivl_max"),
    (22, "maxmsgsize"),
    (23, "sndhwm"),
    (24, "rcvhwm"),
    (27, "rcvtimeo"),
    (28, "sndtimeo"),
    (32, "last_endpoint"),
    (33, "router_mandatory"),
    (39, "immediate"),
    (40, "xpub_verbose"),
    (56, "router_handover"),
    (66, "handshake_ivl"),
    (72, "xpub_welcome_msg"),
    (75, "heartbeat_ivl"),
    (76, "heartbeat_ttl"),
    (77, "heartbeat_timeout"),
    (79, "connect_timeout"),
];

/// `{name: number}` of every option `setsockopt`/`getsockopt` take, security options included.
pub(crate) fn option_numbers(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let table = PyDict::new(py);
    for (number, name) in OPTION_NUMBERS.iter().chain(security::OPTION_NUMBERS) {
        table.set_item(*name, *number)?;
    }
    Ok(table)
}

fn option_name(option: i32) -> PyResult<&'static str> {
    OPTION_NUMBERS
        .iter()
        .chain(security::OPTION_NUMBERS)
        .find(|(n, _)| *n == option)
        .map(|(_, name)| *name)
        .ok_or_else(|| errors::invalid(format!("unknown or unsupported socket option {option}")))
}

/// How durations are given: seconds (keyword options, dafka's convention) or
/// milliseconds (`setsockopt`, libzmq's).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    Seconds,
    Millis,
}

/// Settings the Python layer applies itself (libzmq keeps them on the socket).
#[derive(Default)]
struct Settings {
    rcvtimeo: Option<Duration>,
    sndtimeo: Option<Duration>,
    /// `linger` set after the core socket was created: used by `close`.
    linger: Option<Option<Duration>>,
    last_endpoint: String,
}

/// A ZeroMQ socket speaking ZMTP 3.1: `Socket(socket_type, **options)`.
///
/// See the `dafka.zmtp` module for socket types, endpoints and options.
#[pyclass(name = "Socket", module = "dafka.zmtp", frozen)]
pub(crate) struct PySocket {
    socket_type: SocketType,
    /// Created on first use, from `options`.
    socket: OnceLock<Arc<Socket>>,
    options: Mutex<Options>,
    /// PLAIN/CURVE options, made into `options.mechanism` when the socket starts.
    security: Mutex<Security>,
    settings: Mutex<Settings>,
    /// The frames after the one `recv` returned, of the current message.
    partial: Mutex<Option<Message>>,
    /// Frames sent with `SNDMORE`, waiting for the message's last frame.
    outgoing: Mutex<Vec<Bytes>>,
    /// Messages received for a caller that stopped waiting (see `asyncio`)
    /// or taken by a `Poller`: the oldest, handed out first.
    stash: Stash,
    receivers: Arc<Receivers>,
    /// The process that created the socket: after `fork()` its runtime's
    /// threads exist only in the parent.
    pid: u32,
}

#[pymethods]
impl PySocket {
    #[new]
    #[pyo3(signature = (socket_type, **options))]
    fn new(socket_type: &str, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let socket_type: SocketType = socket_type.parse().map_err(|_| {
            errors::invalid(format!(
                "unknown socket type {socket_type:?}; expected one of REQ, REP, DEALER, \
                 ROUTER, PUB, SUB, XPUB, XSUB, PUSH, PULL, PAIR"
            ))
        })?;
        let mut o = Options::default();
        let mut sec = Security::default();
        if let Some(kwargs) = options {
            for (key, value) in kwargs.iter() {
                let key: String = key.extract()?;
                if !sec.set(&key, &value)? {
                    set_option(&mut o, &key, &value, Unit::Seconds)?;
                }
            }
        }
        // All keyword options are known: a missing key is reported here already.
        o.mechanism = sec.mechanism()?;
        o.validate(socket_type).map_err(errors::zmtp)?;
        Ok(PySocket {
            socket_type,
            socket: OnceLock::new(),
            options: Mutex::new(o),
            security: Mutex::new(sec),
            settings: Mutex::default(),
            partial: Mutex::default(),
            outgoing: Mutex::default(),
            stash: Arc::default(),
            receivers: Arc::default(),
            pid: runtime::pid(),
        })
    }

    /// The socket type, in its canonical upper-case spelling.
    #[getter]
    fn socket_type(&self) -> &'static str {
        self.socket_type.as_str()
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.socket.get().is_some_and(|s| s.is_closed())
    }

    /// Bind to `endpoint` and return the endpoint actually bound (a port of 0
    /// or `*` resolved).
    fn bind(&self, py: Python<'_>, endpoint: &str) -> PyResult<String> {
        let socket = self.socket()?;
        let bound = runtime::wait_for(py, socket.bind(endpoint))?.map_err(errors::zmtp)?;
        lock(&self.settings).last_endpoint.clone_from(&bound);
        Ok(bound)
    }

    /// Connect to `endpoint`; the connection (and every reconnection) is made
    /// in the background.
    fn connect(&self, py: Python<'_>, endpoint: &str) -> PyResult<()> {
        let socket = self.socket()?;
        runtime::wait_for(py, socket.connect(endpoint))?.map_err(errors::zmtp)?;
        lock(&self.settings).last_endpoint = endpoint.to_owned();
        Ok(())
    }

    /// Stop listening on an endpoint returned by `bind`.
    fn unbind(&self, py: Python<'_>, endpoint: &str) -> PyResult<()> {
        let socket = self.socket()?;
        runtime::wait_for(py, socket.unbind(endpoint))?.map_err(errors::zmtp)
    }

    /// Drop the connection to an endpoint given to `connect` (and stop
    /// reconnecting to it).
    fn disconnect(&self, py: Python<'_>, endpoint: &str) -> PyResult<()> {
        let socket = self.socket()?;
        runtime::wait_for(py, socket.disconnect(endpoint))?.map_err(errors::zmtp)
    }

    /// Send one frame (`bytes`, a `Frame` or any buffer), as pyzmq does:
    /// with `SNDMORE` in `flags` it is held until the message's last frame is
    /// sent. A list or tuple of frames is sent as one multipart message.
    /// `NOBLOCK`: raise `WouldBlockError` rather than wait at the high-water
    /// mark. Waits at most `timeout` seconds (else the `SNDTIMEO` option),
    /// then raises `TimeoutError` with nothing sent.
    #[pyo3(signature = (data, flags = 0, copy = true, *, timeout = None))]
    fn send(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        flags: i32,
        copy: bool,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        check_flags(flags, NOBLOCK | SNDMORE)?;
        let socket = self.socket()?;
        let sequence = data.is_instance_of::<PyList>() || data.is_instance_of::<PyTuple>();
        let mut outgoing = lock(&self.outgoing);
        if !sequence && flags & SNDMORE == 0 && outgoing.is_empty() {
            // The common case, one whole frame: no list of held frames to build.
            drop(outgoing);
            reject_str(data)?;
            let msg = Message::from(frame::to_bytes(data, copy)?);
            return self.send_message(py, socket, msg, flags, timeout);
        }
        let mut held = std::mem::take(&mut *outgoing);
        drop(outgoing);
        if sequence {
            for item in data.try_iter()? {
                held.push(frame::to_bytes(&item?, copy)?);
            }
            if held.is_empty() {
                return Err(errors::invalid(
                    "a message needs at least one frame (it may be b\"\")",
                ));
            }
        } else {
            reject_str(data)?;
            held.push(frame::to_bytes(data, copy)?);
        }
        if flags & SNDMORE != 0 {
            *lock(&self.outgoing) = held;
            return Ok(());
        }
        self.send_message(py, socket, Message::from(held), flags, timeout)
    }

    /// Send `msg_parts` (a sequence of frames) as one message; `flags`,
    /// `copy` and `timeout` as for `send`.
    #[pyo3(signature = (msg_parts, flags = 0, copy = true, *, timeout = None))]
    fn send_multipart(
        &self,
        py: Python<'_>,
        msg_parts: &Bound<'_, PyAny>,
        flags: i32,
        copy: bool,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        check_flags(flags, NOBLOCK)?;
        let socket = self.socket()?;
        reject_str(msg_parts)?;
        if msg_parts.is_instance_of::<PyBytes>() {
            return Err(PyTypeError::new_err(
                "send_multipart takes a sequence of frames, not bytes (use send)",
            ));
        }
        let mut msg = Message::new();
        for item in msg_parts.try_iter()? {
            let item = item?;
            reject_str(&item)?;
            msg.push(frame::to_bytes(&item, copy)?);
        }
        if msg.is_empty() {
            return Err(errors::invalid(
                "a message needs at least one frame (it may be b\"\")",
            ));
        }
        self.send_message(py, socket, msg, flags, timeout)
    }

    /// Receive one frame, as pyzmq does: `bytes` (or a zero-copy `Frame`
    /// with `copy=False`). The frames of a multipart message come one per
    /// call; `getsockopt(RCVMORE)` says whether more follow (or use
    /// `recv_multipart`). `NOBLOCK`: raise `WouldBlockError` when nothing is
    /// queued. Waits at most `timeout` seconds (else the `RCVTIMEO` option),
    /// then raises `TimeoutError` having consumed nothing.
    #[pyo3(signature = (flags = 0, copy = true, *, timeout = None))]
    fn recv<'py>(
        &self,
        py: Python<'py>,
        flags: i32,
        copy: bool,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        check_flags(flags, NOBLOCK)?;
        let socket = self.socket()?;
        let mut msg = match lock(&self.partial).take() {
            Some(rest) => rest,
            None => self.recv_message(py, socket, flags, timeout)?,
        };
        let first = msg.pop_front().unwrap_or_default();
        if !msg.is_empty() {
            *lock(&self.partial) = Some(msg);
        }
        frame_to_py(py, first, copy)
    }

    /// Receive one whole message as a list of frames (`bytes`, or `Frame`s
    /// with `copy=False`); after `recv` took its first frames, the rest of
    /// that message. `flags` and `timeout` as for `recv`.
    #[pyo3(signature = (flags = 0, copy = true, *, timeout = None))]
    fn recv_multipart<'py>(
        &self,
        py: Python<'py>,
        flags: i32,
        copy: bool,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyList>> {
        check_flags(flags, NOBLOCK)?;
        let socket = self.socket()?;
        let msg = match lock(&self.partial).take() {
            Some(rest) => rest,
            None => self.recv_message(py, socket, flags, timeout)?,
        };
        message_to_list(py, msg, copy)
    }

    /// Receive up to `max_messages` messages as one `pyarrow.RecordBatch`
    /// with a single column `frames: list<binary>`, built in Rust. Waits up
    /// to `timeout` seconds (`None`: forever) for the first message, then
    /// takes only what is already queued. An empty batch means the timeout
    /// passed with nothing to receive.
    #[pyo3(signature = (max_messages = 10_000, timeout = None))]
    fn recv_batch<'py>(
        &self,
        py: Python<'py>,
        max_messages: usize,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let socket = Arc::clone(self.socket()?);
        if max_messages == 0 {
            return Err(errors::invalid("max_messages must be at least 1"));
        }
        let timeout = timeout.map(|t| seconds("timeout", t)).transpose()?;
        // Stashed messages first (they are the oldest), then the socket.
        let mut received: Vec<Message> = {
            let mut stash = lock(&self.stash);
            let n = stash.len().min(max_messages);
            stash.drain(..n).collect()
        };
        if let Some(rest) = lock(&self.partial).take() {
            received.insert(0, rest);
        }
        if received.is_empty() {
            // One wake-up takes everything queued (up to the count): the
            // core's batch receive, not a loop of single receives.
            let fut = async move {
                let mut out = Vec::new();
                socket.recv_many(max_messages, &mut out).await.map(|_| out)
            };
            if let Some(got) = runtime::wait_for_at_most(py, timeout, fut)? {
                received = got.map_err(errors::zmtp)?;
            }
        }
        // Building the batch needs no Python: it runs without the GIL.
        let built = py.detach(|| {
            let mut batch = arrow_batch::Pending::new(max_messages);
            let mut rest = received.into_iter();
            for msg in rest.by_ref() {
                if let Err(msg) = batch.push(msg) {
                    // Arrow's 2 GiB of offsets: the rest opens the next batch.
                    let size = msg.byte_len();
                    let mut stash = lock(&self.stash);
                    for m in rest.rev() {
                        stash.push_front(m);
                    }
                    stash.push_front(msg);
                    if batch.is_empty() {
                        return Err(errors::invalid(format!(
                            "a message of {size} bytes does not fit in an Arrow batch \
                             (2 GiB at most); receive it with recv_multipart()"
                        )));
                    }
                    break;
                }
            }
            arrow_batch::frames_batch(&batch.into_messages()).map_err(arrow_batch::batch_error)
        })?;
        built.to_pyarrow(py)
    }

    /// Subscribe a SUB socket to messages starting with `topic` (`str` is
    /// encoded as UTF-8; `b""`: everything).
    fn subscribe(&self, topic: &Bound<'_, PyAny>) -> PyResult<()> {
        let socket = self.socket()?;
        socket.subscribe(&topic_bytes(topic)?).map_err(errors::zmtp)
    }

    /// Cancel one earlier `subscribe(topic)`.
    fn unsubscribe(&self, topic: &Bound<'_, PyAny>) -> PyResult<()> {
        let socket = self.socket()?;
        socket
            .unsubscribe(&topic_bytes(topic)?)
            .map_err(errors::zmtp)
    }

    /// Set an option by its libzmq number (`dafka.zmtp.SNDHWM`, ...), in
    /// libzmq's units: durations in milliseconds (`-1`: forever where libzmq
    /// allows it). Options that shape connections can only be set before the
    /// first bind, connect, send or receive; `SUBSCRIBE`, `UNSUBSCRIBE`,
    /// `LINGER`, `RCVTIMEO` and `SNDTIMEO` at any time.
    fn setsockopt(&self, option: i32, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_process()?;
        let name = option_name(option)?;
        match name {
            "subscribe" => return self.subscribe(value),
            "unsubscribe" => return self.unsubscribe(value),
            "rcvtimeo" | "sndtimeo" => {
                let timeout = duration(name, value, Unit::Millis, Forever::Negative)?;
                let mut settings = lock(&self.settings);
                if name == "rcvtimeo" {
                    settings.rcvtimeo = timeout;
                } else {
                    settings.sndtimeo = timeout;
                }
                return Ok(());
            }
            "rcvmore" | "events" | "type" | "last_endpoint" => {
                return Err(errors::invalid(format!("option {name} is read-only")));
            }
            _ => {}
        }
        if name == "linger" && self.socket.get().is_some() {
            let linger = duration(name, value, Unit::Millis, Forever::Negative)?;
            lock(&self.settings).linger = Some(linger);
            return Ok(());
        }
        let mut options = lock(&self.options);
        if self.socket.get().is_some() {
            return Err(errors::state(format!(
                "option {name} must be set before the socket's first bind, connect, \
                 send or receive (dafka fixes it when the socket starts)"
            )));
        }
        // Security options may come in any order (curve_server before its key): they are
        // checked together when the socket starts.
        if lock(&self.security).set(name, value)? {
            return Ok(());
        }
        let mut changed = options.clone();
        set_option(&mut changed, name, value, Unit::Millis)?;
        changed.validate(self.socket_type).map_err(errors::zmtp)?;
        *options = changed;
        Ok(())
    }

    /// Read an option by its libzmq number, in libzmq's units.
    fn getsockopt<'py>(&self, py: Python<'py>, option: i32) -> PyResult<Bound<'py, PyAny>> {
        self.check_process()?;
        let name = option_name(option)?;
        let o = match self.socket.get() {
            Some(s) => s.options().clone(),
            None => lock(&self.options).clone(),
        };
        if let Some(v) = lock(&self.security).get(py, name)? {
            return Ok(v);
        }
        let settings = lock(&self.settings);
        let ms = |d: Option<Duration>, none: i64| -> i64 {
            d.map_or(none, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        };
        let bytes = |b: &Option<Bytes>| PyBytes::new(py, b.as_deref().unwrap_or_default());
        Ok(match name {
            "routing_id" => bytes(&o.routing_id).into_any(),
            "xpub_welcome_msg" => bytes(&o.xpub_welcome_msg).into_any(),
            "last_endpoint" => PyBytes::new(py, settings.last_endpoint.as_bytes()).into_any(),
            "rcvmore" => i64::from(lock(&self.partial).is_some())
                .into_pyobject(py)?
                .into_any(),
            "events" => {
                drop(settings);
                let out = if crate::poller::can_send(self.socket_type) {
                    crate::poller::POLLOUT
                } else {
                    0
                };
                (self.events()? | out).into_pyobject(py)?.into_any()
            }
            "type" => libzmq_type(self.socket_type).into_pyobject(py)?.into_any(),
            "linger" => ms(settings.linger.unwrap_or(o.linger), -1)
                .into_pyobject(py)?
                .into_any(),
            "rcvtimeo" => ms(settings.rcvtimeo, -1).into_pyobject(py)?.into_any(),
            "sndtimeo" => ms(settings.sndtimeo, -1).into_pyobject(py)?.into_any(),
            "reconnect_ivl" => ms(Some(o.reconnect_ivl), 0).into_pyobject(py)?.into_any(),
            "reconnect_ivl_max" => ms(o.reconnect_ivl_max, 0).into_pyobject(py)?.into_any(),
            "handshake_ivl" => ms(o.handshake_timeout, 0).into_pyobject(py)?.into_any(),
            "heartbeat_ivl" => ms(o.heartbeat_ivl, 0).into_pyobject(py)?.into_any(),
            "heartbeat_ttl" => ms(o.heartbeat_ttl, 0).into_pyobject(py)?.into_any(),
            "heartbeat_timeout" => ms(o.heartbeat_timeout, -1).into_pyobject(py)?.into_any(),
            "connect_timeout" => ms(o.connect_timeout, 0).into_pyobject(py)?.into_any(),
            "maxmsgsize" => o.limits.max_frame_size.into_pyobject(py)?.into_any(),
            "sndhwm" => o.sndhwm.into_pyobject(py)?.into_any(),
            "rcvhwm" => o.rcvhwm.into_pyobject(py)?.into_any(),
            "router_mandatory" => i64::from(o.router_mandatory).into_pyobject(py)?.into_any(),
            "router_handover" => i64::from(o.router_handover).into_pyobject(py)?.into_any(),
            "immediate" => i64::from(o.immediate).into_pyobject(py)?.into_any(),
            "xpub_verbose" => i64::from(o.xpub_verbose).into_pyobject(py)?.into_any(),
            _ => return Err(errors::invalid(format!("option {name} is write-only"))),
        })
    }

    /// Close the socket and return at once: queued messages keep being sent
    /// in the background for up to `linger` milliseconds (`None`: the
    /// socket's `LINGER`; negative: until sent), while the process lives;
    /// `dafka.zmtp.term()` (run at exit) waits for them, bounded. Idempotent.
    #[pyo3(signature = (linger = None))]
    fn close(&self, linger: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        if runtime::pid() != self.pid {
            // Inherited across fork(): nothing of it runs in this process.
            return Ok(());
        }
        let linger = match linger {
            Some(v) => Some(duration("linger", v, Unit::Millis, Forever::Negative)?),
            None => lock(&self.settings).linger,
        };
        let socket = self.socket()?;
        match linger {
            Some(linger) => socket.close_in_background_with(linger),
            None => socket.close_in_background(),
        }
        lock(&self.partial).take();
        lock(&self.outgoing).clear();
        Ok(())
    }

    /// The socket's events from now on (connections, handshakes with the
    /// peer's metadata, disconnections with their reason, subscriptions,
    /// full send queues, close), at most `capacity` queued; see
    /// `dafka.zmtp.Monitor`. Replaces an earlier monitor of the socket.
    #[pyo3(signature = (capacity = 1024))]
    fn monitor(&self, capacity: usize) -> PyResult<crate::monitor::PyMonitor> {
        if capacity == 0 {
            return Err(errors::invalid("monitor capacity must be at least 1"));
        }
        Ok(crate::monitor::PyMonitor::new(
            self.socket()?.monitor(capacity),
        ))
    }

    /// Awaitable `send_multipart` (a `bytes` is one frame), for asyncio.
    fn send_async<'py>(
        &self,
        py: Python<'py>,
        frames: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let socket = Arc::clone(self.socket()?);
        let msg = to_message(frames)?;
        asyncio::send(py, socket, msg)
    }

    /// Awaitable `recv_multipart`, for asyncio. Cancelling the await loses
    /// no message, and messages keep their order.
    fn recv_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let socket = Arc::clone(self.socket()?);
        asyncio::recv(
            py,
            socket,
            Arc::clone(&self.receivers),
            Arc::clone(&self.stash),
        )
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        exc_type: &Bound<'_, PyAny>,
        exc_value: &Bound<'_, PyAny>,
        traceback: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let _ = (exc_type, exc_value, traceback);
        self.close(None)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<dafka.zmtp.Socket {}>", self.socket_type.as_str())
    }
}

impl PySocket {
    /// The core socket, created on first use.
    pub(crate) fn socket(&self) -> PyResult<&Arc<Socket>> {
        self.check_process()?;
        if let Some(s) = self.socket.get() {
            return Ok(s);
        }
        let options = lock(&self.options);
        if let Some(s) = self.socket.get() {
            return Ok(s);
        }
        let mut options = options.clone();
        options.mechanism = lock(&self.security).mechanism()?;
        let socket =
            Socket::new_in(self.socket_type, options, runtime::handle()).map_err(errors::zmtp)?;
        Ok(self.socket.get_or_init(|| Arc::new(socket)))
    }

    /// Refuse use from a forked child: the socket's tasks live on the
    /// parent's runtime, whose threads were not copied by `fork()`.
    fn check_process(&self) -> PyResult<()> {
        let pid = runtime::pid();
        if pid == self.pid {
            return Ok(());
        }
        Err(errors::state(format!(
            "this socket was created in process {} and cannot be used after fork() \
             (in process {pid}); create sockets in the process that uses them",
            self.pid
        )))
    }

    fn send_message(
        &self,
        py: Python<'_>,
        socket: &Arc<Socket>,
        msg: Message,
        flags: i32,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        frame::settle_releases(py);
        // Fast path: queue without leaving the calling thread; a message that
        // must wait comes back for the slow path.
        let msg = match socket.try_send_keeping(msg) {
            Ok(()) => return Ok(()),
            Err(SendError::Fail(e)) => return Err(errors::zmtp(e)),
            Err(SendError::Block(msg)) => msg,
        };
        if flags & NOBLOCK != 0 {
            return Err(errors::zmtp(dafka_zmtp::Error::WouldBlock));
        }
        let timeout = match timeout {
            Some(t) => Some(seconds("timeout", t)?),
            None => lock(&self.settings).sndtimeo,
        };
        runtime::wait_for_at_most(py, timeout, socket.send(msg))?
            .ok_or_else(|| errors::timeout("send timed out; the message was not sent"))?
            .map_err(errors::zmtp)
    }

    /// The next whole message: stashed first, then queued, then waited for.
    fn recv_message(
        &self,
        py: Python<'_>,
        socket: &Arc<Socket>,
        flags: i32,
        timeout: Option<f64>,
    ) -> PyResult<Message> {
        if let Some(msg) = lock(&self.stash).pop_front() {
            return Ok(msg);
        }
        match socket.try_recv() {
            Err(dafka_zmtp::Error::WouldBlock) if flags & NOBLOCK == 0 => {}
            ready => return ready.map_err(errors::zmtp),
        }
        let timeout = match timeout {
            Some(t) => Some(seconds("timeout", t)?),
            None => lock(&self.settings).rcvtimeo,
        };
        runtime::wait_for_at_most(py, timeout, socket.recv())?
            .ok_or_else(|| errors::timeout("nothing received before the timeout"))?
            .map_err(errors::zmtp)
    }

    /// `POLLIN` when a message is ready (taking it from the core socket into
    /// the stash, in order), as libzmq's `ZMQ_EVENTS`.
    pub(crate) fn events(&self) -> PyResult<i32> {
        if !receives(self.socket_type) {
            return Ok(0);
        }
        let socket = self.socket()?;
        if lock(&self.partial).is_some() || !lock(&self.stash).is_empty() {
            return Ok(crate::poller::POLLIN);
        }
        match socket.try_recv() {
            Ok(msg) => {
                lock(&self.stash).push_back(msg);
                Ok(crate::poller::POLLIN)
            }
            Err(dafka_zmtp::Error::WouldBlock) => Ok(0),
            Err(e) => Err(errors::zmtp(e)),
        }
    }

    pub(crate) fn socket_type_value(&self) -> SocketType {
        self.socket_type
    }

    /// Keep a message a poller received for this socket.
    pub(crate) fn stash_received(&self, msg: Message) {
        lock(&self.stash).push_back(msg);
    }
}

/// Socket types that receive messages (PUSH and PUB only send).
pub(crate) fn receives(t: SocketType) -> bool {
    !matches!(t, SocketType::Push | SocketType::Pub)
}

fn check_flags(flags: i32, allowed: i32) -> PyResult<()> {
    if flags & !allowed != 0 {
        return Err(errors::invalid(format!(
            "unsupported flags {flags:#x} (allowed here: {allowed:#x}: NOBLOCK=1, SNDMORE=2)"
        )));
    }
    Ok(())
}

fn reject_str(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "a message must be bytes or a sequence of bytes, not str (encode it first)",
        ));
    }
    Ok(())
}

fn topic_bytes(topic: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(s) = topic.cast::<PyString>() {
        return Ok(Bytes::copy_from_slice(s.to_str()?.as_bytes()));
    }
    frame::to_bytes(topic, true)
}

/// libzmq's `ZMQ_TYPE` numbers.
fn libzmq_type(t: SocketType) -> i32 {
    match t {
        SocketType::Pair => 0,
        SocketType::Pub => 1,
        SocketType::Sub => 2,
        SocketType::Req => 3,
        SocketType::Rep => 4,
        SocketType::Dealer => 5,
        SocketType::Router => 6,
        SocketType::Pull => 7,
        SocketType::Push => 8,
        SocketType::Xpub => 9,
        SocketType::Xsub => 10,
    }
}

/// Which values of a duration option mean "no limit" / "off" (`None`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Forever {
    /// Python `None` only.
    NoneOnly,
    /// `None` or a negative number (libzmq's `-1`).
    Negative,
    /// `None` or `0` in milliseconds (libzmq's "0 disables").
    ZeroMillis,
}

/// A duration option in `unit`, `None` where `forever` says so.
fn duration(
    name: &str,
    value: &Bound<'_, PyAny>,
    unit: Unit,
    forever: Forever,
) -> PyResult<Option<Duration>> {
    if value.is_none() {
        return Ok(None);
    }
    let n: f64 = value.extract().map_err(|_| {
        errors::invalid(format!(
            "{name} must be a number of {}, not {}",
            unit_name(unit),
            type_name(value)
        ))
    })?;
    if (forever == Forever::Negative && n < 0.0)
        || (forever == Forever::ZeroMillis && unit == Unit::Millis && n == 0.0)
    {
        return Ok(None);
    }
    let secs = if unit == Unit::Millis { n / 1000.0 } else { n };
    Duration::try_from_secs_f64(secs).map(Some).map_err(|_| {
        errors::invalid(format!(
            "{name} must be a finite number of {} >= 0, got {n}",
            unit_name(unit)
        ))
    })
}

fn unit_name(unit: Unit) -> &'static str {
    match unit {
        Unit::Seconds => "seconds",
        Unit::Millis => "milliseconds",
    }
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

/// An integer option, refused with its name when negative or not an integer.
fn count<T: for<'a, 'py> FromPyObject<'a, 'py>>(
    name: &str,
    value: &Bound<'_, PyAny>,
) -> PyResult<T> {
    value.extract::<T>().map_err(|_| {
        errors::invalid(format!(
            "{name} must be an integer >= 0 within range, not {}",
            value
                .repr()
                .map_or_else(|_| "?".to_owned(), |r| r.to_string())
        ))
    })
}

fn flag(name: &str, value: &Bound<'_, PyAny>) -> PyResult<bool> {
    value.is_truthy().map_err(|_| {
        errors::invalid(format!(
            "{name} must be true or false, not {}",
            type_name(value)
        ))
    })
}

fn opt_frame(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Option<Bytes>> {
    if value.is_none() {
        return Ok(None);
    }
    if value.is_instance_of::<PyString>() {
        return Err(errors::invalid(format!("{name} must be bytes, not str")));
    }
    frame::to_bytes(value, true)
        .map(Some)
        .map_err(|_| errors::invalid(format!("{name} must be bytes, not {}", type_name(value))))
}

/// Set option `name` (libzmq's name, lower case) from a Python value; every
/// refusal is an `InvalidArgumentError` naming the option.
fn set_option(o: &mut Options, name: &str, value: &Bound<'_, PyAny>, unit: Unit) -> PyResult<()> {
    // libzmq turns "0" into "off" for these; dafka's keyword form (seconds)
    // always took `None` for off.
    let off = if unit == Unit::Millis {
        Forever::ZeroMillis
    } else {
        Forever::NoneOnly
    };
    match name {
        "sndhwm" => o.sndhwm = count(name, value)?,
        "rcvhwm" => o.rcvhwm = count(name, value)?,
        // None or a negative number: wait until everything is sent.
        "linger" => o.linger = duration(name, value, unit, Forever::Negative)?,
        "heartbeat_ivl" => o.heartbeat_ivl = duration(name, value, unit, off)?,
        "heartbeat_ttl" => o.heartbeat_ttl = duration(name, value, unit, off)?,
        "heartbeat_timeout" => {
            let forever = if unit == Unit::Millis {
                Forever::Negative
            } else {
                Forever::NoneOnly
            };
            o.heartbeat_timeout = duration(name, value, unit, forever)?;
        }
        "reconnect_ivl" => {
            o.reconnect_ivl = duration(name, value, unit, Forever::NoneOnly)?
                .ok_or_else(|| errors::invalid("reconnect_ivl cannot be None"))?;
        }
        "reconnect_ivl_max" => o.reconnect_ivl_max = duration(name, value, unit, off)?,
        "connect_timeout" => o.connect_timeout = duration(name, value, unit, off)?,
        "handshake_timeout" | "handshake_ivl" => {
            o.handshake_timeout = duration(name, value, unit, off)?;
        }
        "routing_id" => o.routing_id = opt_frame(name, value)?,
        "router_mandatory" => o.router_mandatory = flag(name, value)?,
        "router_handover" => o.router_handover = flag(name, value)?,
        "immediate" => o.immediate = flag(name, value)?,
        "xpub_welcome_msg" => o.xpub_welcome_msg = opt_frame(name, value)?,
        "xpub_verbose" => o.xpub_verbose = flag(name, value)?,
        // libzmq's ZMQ_MAXMSGSIZE: the largest frame a peer may send (libzmq checks
        // each part). A message as a whole keeps its own limit, raised if need be so
        // that one frame of `limit` bytes fits. libzmq's -1 (no limit) is refused:
        // dafka always bounds what a peer may make it buffer.
        "maxmsgsize" => {
            let limit: u64 = value.extract().map_err(|_| {
                errors::invalid(format!(
                    "maxmsgsize must be a number of bytes >= 0, not {} (libzmq's -1, \
                     no limit, is not supported: give the largest frame you accept)",
                    value
                        .repr()
                        .map_or_else(|_| "?".to_owned(), |r| r.to_string())
                ))
            })?;
            let one_frame = Limits::message_cost(1, usize::try_from(limit).unwrap_or(usize::MAX));
            o.limits = o
                .limits
                .with_max_frame_size(limit)
                .with_max_message_size(o.limits.max_message_size.max(one_frame));
        }
        "max_frame_size" => o.limits = o.limits.with_max_frame_size(count(name, value)?),
        "max_subscriptions" => o.max_subscriptions = count(name, value)?,
        "max_subscription_size" => o.max_subscription_size = count(name, value)?,
        "max_connections" => o.max_connections = count(name, value)?,
        "properties" => {
            let props = value
                .cast::<PyDict>()
                .map_err(|_| errors::invalid("properties must be a dict of str to bytes"))?;
            o.properties = props
                .iter()
                .map(|(k, v)| {
                    let k: String = k
                        .extract()
                        .map_err(|_| errors::invalid("properties names must be str"))?;
                    let v = opt_frame("properties", &v)?.unwrap_or_default();
                    Ok((k, v))
                })
                .collect::<PyResult<_>>()?;
        }
        other => return Err(errors::invalid(format!("unknown socket option {other:?}"))),
    }
    Ok(())
}

fn seconds(name: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| {
        errors::invalid(format!(
            "{name} must be a finite number of seconds >= 0, got {s}"
        ))
    })
}

/// `bytes` (or any one buffer) -> a one-frame message; a sequence of
/// bytes-likes -> multipart.
fn to_message(frames: &Bound<'_, PyAny>) -> PyResult<Message> {
    reject_str(frames)?;
    let sequence = frames.is_instance_of::<PyList>() || frames.is_instance_of::<PyTuple>();
    if !sequence {
        return Ok(Message::from(frame::to_bytes(frames, true)?));
    }
    let mut msg = Message::new();
    for item in frames.try_iter()? {
        let item = item?;
        reject_str(&item)?;
        msg.push(frame::to_bytes(&item, true)?);
    }
    if msg.is_empty() {
        return Err(errors::invalid(
            "a message needs at least one frame (it may be b\"\")",
        ));
    }
    Ok(msg)
}

fn frame_to_py(py: Python<'_>, data: Bytes, copy: bool) -> PyResult<Bound<'_, PyAny>> {
    if copy {
        frame::to_py_bytes(py, &data)
    } else {
        Ok(Bound::new(py, Frame::new(data))?.into_any())
    }
}

fn message_to_list(py: Python<'_>, msg: Message, copy: bool) -> PyResult<Bound<'_, PyList>> {
    let list = PyList::empty(py);
    for f in msg.into_frames() {
        list.append(frame_to_py(py, f, copy)?)?;
    }
    Ok(list)
}

/// A message as `asyncio` hands it over: `list[bytes]`.
pub(crate) fn frames_to_list(py: Python<'_>, msg: Message) -> PyResult<Bound<'_, PyList>> {
    message_to_list(py, msg, true)
}

/// Wait until every socket closed in the background has sent its queued
/// messages or reached its linger, for at most `timeout` seconds; sockets
/// still flushing then drop their messages. Returns how many were cut short
/// (0: everything was flushed). Runs at interpreter exit (`atexit`).
#[pyfunction]
#[pyo3(signature = (timeout = 5.0))]
pub(crate) fn term(py: Python<'_>, timeout: f64) -> PyResult<usize> {
    let timeout = seconds("timeout", timeout)?;
    if dafka_zmtp::pending_closes() == 0 {
        return Ok(0);
    }
    Ok(match runtime::wait_for(py, dafka_zmtp::term(timeout))? {
        Ok(()) => 0,
        Err(e) => e.abandoned,
    })
}
