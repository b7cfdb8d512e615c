//! `dafka.zmtp.Socket`: a ZeroMQ socket for Python over `dafka_zmtp::Socket`.
//!
//! Conversion only: keyword options to [`Options`], `bytes` to frames and
//! back, errors to `dafka.errors`. Blocking methods release the GIL and stay
//! interruptible (see [`runtime::wait_for`]); the `*_async` methods return
//! asyncio futures completed from the runtime's threads.

use std::sync::Arc;
use std::time::Duration;

use arrow_pyarrow::ToPyArrow;
use bytes::Bytes;
use dafka_zmtp::{Limits, Message, Options, SendError, Socket, SocketType};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::asyncio::{self, Receivers, Stash, lock};
use crate::{arrow_batch, errors, runtime};

/// A ZeroMQ socket speaking ZMTP 3.1: `Socket(socket_type, **options)`.
///
/// See the `dafka.zmtp` module for socket types, endpoints and options.
#[pyclass(name = "Socket", module = "dafka.zmtp", frozen)]
pub(crate) struct PySocket {
    socket: Arc<Socket>,
    socket_type: SocketType,
    /// Messages received for a caller that stopped waiting (see `asyncio`).
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
        let options = parse_options(options)?;
        let _entered = runtime::handle().enter();
        let socket = Arc::new(Socket::new(socket_type, options).map_err(errors::zmtp)?);
        Ok(PySocket {
            socket,
            socket_type,
            stash: Arc::default(),
            receivers: Arc::default(),
            pid: std::process::id(),
        })
    }

    /// The socket type, in its canonical upper-case spelling.
    #[getter]
    fn socket_type(&self) -> &'static str {
        self.socket_type.as_str()
    }

    /// Bind to `endpoint` and return the endpoint actually bound (a port of 0
    /// or `*` resolved).
    fn bind(&self, py: Python<'_>, endpoint: &str) -> PyResult<String> {
        self.check_process()?;
        runtime::wait_for(py, self.socket.bind(endpoint))?.map_err(errors::zmtp)
    }

    /// Connect to `endpoint`; the connection (and every reconnection) is made
    /// in the background.
    fn connect(&self, py: Python<'_>, endpoint: &str) -> PyResult<()> {
        self.check_process()?;
        runtime::wait_for(py, self.socket.connect(endpoint))?.map_err(errors::zmtp)
    }

    /// Stop listening on an endpoint returned by `bind`.
    fn unbind(&self, py: Python<'_>, endpoint: &str) -> PyResult<()> {
        self.check_process()?;
        runtime::wait_for(py, self.socket.unbind(endpoint))?.map_err(errors::zmtp)
    }

    /// Drop the connection to an endpoint given to `connect` (and stop
    /// reconnecting to it).
    fn disconnect(&self, py: Python<'_>, endpoint: &str) -> PyResult<()> {
        self.check_process()?;
        runtime::wait_for(py, self.socket.disconnect(endpoint))?.map_err(errors::zmtp)
    }

    /// Send one message: `bytes` (one frame) or a sequence of `bytes` frames.
    /// Waits while the socket type blocks at its high-water mark; raises
    /// `TimeoutError` (nothing sent) when `timeout` seconds pass first.
    #[pyo3(signature = (frames, timeout = None))]
    fn send(
        &self,
        py: Python<'_>,
        frames: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        self.check_process()?;
        let msg = to_message(frames)?;
        let timeout = timeout.map(|t| seconds("timeout", t)).transpose()?;
        // Fast path: queue without leaving the calling thread; a message that
        // must wait comes back for the slow path.
        let msg = match self.socket.try_send_keeping(msg) {
            Ok(()) => return Ok(()),
            Err(SendError::Fail(e)) => return Err(errors::zmtp(e)),
            Err(SendError::Block(msg)) => msg,
        };
        runtime::wait_for_at_most(py, timeout, self.socket.send(msg))?
            .ok_or_else(|| errors::timeout("send timed out; the message was not sent"))?
            .map_err(errors::zmtp)
    }

    /// Receive one message as a list of `bytes` frames. Raises `TimeoutError`
    /// when `timeout` seconds pass with nothing to receive.
    #[pyo3(signature = (timeout = None))]
    fn recv<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyList>> {
        self.check_process()?;
        if let Some(msg) = self.take_stashed() {
            return frames_to_list(py, msg);
        }
        let timeout = timeout.map(|t| seconds("timeout", t)).transpose()?;
        let msg = match self.socket.try_recv() {
            Err(dafka_zmtp::Error::WouldBlock) => {
                runtime::wait_for_at_most(py, timeout, self.socket.recv())?
                    .ok_or_else(|| errors::timeout("nothing received before the timeout"))?
            }
            ready => ready,
        }
        .map_err(errors::zmtp)?;
        frames_to_list(py, msg)
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
        self.check_process()?;
        if max_messages == 0 {
            return Err(errors::invalid("max_messages must be at least 1"));
        }
        let timeout = timeout.map(|t| seconds("timeout", t)).transpose()?;
        let mut batch = arrow_batch::Pending::new(max_messages);
        // Stashed messages first (they are the oldest), then the socket.
        let mut next = self.take_stashed();
        if next.is_none()
            && let Some(first) = runtime::wait_for_at_most(py, timeout, self.socket.recv())?
        {
            next = Some(first.map_err(errors::zmtp)?);
        }
        // Draining what is queued and building the batch need no Python: both
        // run without the GIL.
        let built = py.detach(|| {
            while let Some(msg) = next {
                if let Err(msg) = batch.push(msg) {
                    // Full (count or Arrow's 2 GiB of offsets): it opens the next batch.
                    let size = msg.byte_len();
                    lock(&self.stash).push_front(msg);
                    if batch.is_empty() {
                        return Err(errors::invalid(format!(
                            "a message of {size} bytes does not fit in an Arrow batch \
                             (2 GiB at most); receive it with recv()"
                        )));
                    }
                    break;
                }
                // Nothing more queued, or an error the next call will report:
                // what was received is returned first, so nothing is lost.
                next = self.take_stashed().or_else(|| self.socket.try_recv().ok());
            }
            arrow_batch::frames_batch(&batch.into_messages())
                .map_err(|e| errors::invalid(format!("cannot build the Arrow batch: {e}")))
        })?;
        built.to_pyarrow(py)
    }

    /// Subscribe a SUB socket to messages starting with `prefix` (`b""`: all).
    fn subscribe(&self, prefix: &[u8]) -> PyResult<()> {
        self.check_process()?;
        self.socket.subscribe(prefix).map_err(errors::zmtp)
    }

    /// Cancel one earlier `subscribe(prefix)`.
    fn unsubscribe(&self, prefix: &[u8]) -> PyResult<()> {
        self.check_process()?;
        self.socket.unsubscribe(prefix).map_err(errors::zmtp)
    }

    /// Close the socket, flushing queued messages for at most `linger`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if std::process::id() != self.pid {
            // Inherited across fork(): nothing of it runs in this process.
            return Ok(());
        }
        runtime::wait_for(py, self.socket.close())
    }

    /// Awaitable `send`, for asyncio.
    fn send_async<'py>(
        &self,
        py: Python<'py>,
        frames: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.check_process()?;
        let msg = to_message(frames)?;
        asyncio::send(py, Arc::clone(&self.socket), msg)
    }

    /// Awaitable `recv`, for asyncio. Cancelling the await loses no message,
    /// and messages keep their order.
    fn recv_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.check_process()?;
        asyncio::recv(
            py,
            Arc::clone(&self.socket),
            Arc::clone(&self.receivers),
            Arc::clone(&self.stash),
        )
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        exc_value: &Bound<'_, PyAny>,
        traceback: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let _ = (exc_type, exc_value, traceback);
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<dafka.zmtp.Socket {}>", self.socket_type.as_str())
    }
}

impl PySocket {
    /// Refuse use from a forked child: the socket's tasks live on the
    /// parent's runtime, whose threads were not copied by `fork()`.
    fn check_process(&self) -> PyResult<()> {
        let pid = std::process::id();
        if pid == self.pid {
            return Ok(());
        }
        Err(errors::state(format!(
            "this socket was created in process {} and cannot be used after fork() \
             (in process {pid}); create sockets in the process that uses them",
            self.pid
        )))
    }

    fn take_stashed(&self) -> Option<Message> {
        lock(&self.stash).pop_front()
    }
}

/// Keyword options, named as in libzmq and pyzmq; durations in seconds.
fn parse_options(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Options> {
    let mut o = Options::default();
    let Some(kwargs) = kwargs else {
        return Ok(o);
    };
    for (key, value) in kwargs.iter() {
        let key: String = key.extract()?;
        let none = value.is_none();
        match key.as_str() {
            "sndhwm" => o.sndhwm = value.extract()?,
            "rcvhwm" => o.rcvhwm = value.extract()?,
            "linger" => {
                // None or a negative number: wait until everything is sent.
                o.linger = match value.extract::<Option<f64>>()? {
                    Some(s) if s >= 0.0 => Some(seconds("linger", s)?),
                    _ => None,
                }
            }
            "heartbeat_ivl" => o.heartbeat_ivl = opt_seconds(&key, &value)?,
            "heartbeat_ttl" => o.heartbeat_ttl = opt_seconds(&key, &value)?,
            "heartbeat_timeout" => o.heartbeat_timeout = opt_seconds(&key, &value)?,
            "reconnect_ivl" => o.reconnect_ivl = seconds(&key, value.extract()?)?,
            "reconnect_ivl_max" => o.reconnect_ivl_max = opt_seconds(&key, &value)?,
            "connect_timeout" => o.connect_timeout = opt_seconds(&key, &value)?,
            "handshake_timeout" => o.handshake_timeout = opt_seconds(&key, &value)?,
            "routing_id" => {
                o.routing_id = if none {
                    None
                } else {
                    Some(frame_bytes(&value)?)
                }
            }
            "router_mandatory" => o.router_mandatory = value.extract()?,
            "router_handover" => o.router_handover = value.extract()?,
            "immediate" => o.immediate = value.extract()?,
            "xpub_welcome_msg" => {
                o.xpub_welcome_msg = if none {
                    None
                } else {
                    Some(frame_bytes(&value)?)
                }
            }
            "xpub_verbose" => o.xpub_verbose = value.extract()?,
            // libzmq's ZMQ_MAXMSGSIZE: the largest frame a peer may send (libzmq checks
            // each part). A message as a whole keeps its own limit, raised if need be so
            // that one frame of `limit` bytes fits.
            "maxmsgsize" => {
                let limit: u64 = value.extract()?;
                o.limits.max_frame_size = limit;
                let one_frame =
                    Limits::message_cost(1, usize::try_from(limit).unwrap_or(usize::MAX));
                o.limits.max_message_size = o.limits.max_message_size.max(one_frame);
            }
            "max_frame_size" => o.limits.max_frame_size = value.extract()?,
            "max_subscriptions" => o.max_subscriptions = value.extract()?,
            "max_subscription_size" => o.max_subscription_size = value.extract()?,
            "max_connections" => o.max_connections = value.extract()?,
            "properties" => {
                let props = value.cast::<PyDict>()?;
                o.properties = props
                    .iter()
                    .map(|(k, v)| Ok((k.extract::<String>()?, frame_bytes(&v)?)))
                    .collect::<PyResult<_>>()?;
            }
            other => return Err(errors::invalid(format!("unknown socket option {other:?}"))),
        }
    }
    Ok(o)
}

fn opt_seconds(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Option<Duration>> {
    value
        .extract::<Option<f64>>()?
        .map(|s| seconds(name, s))
        .transpose()
}

fn seconds(name: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| {
        errors::invalid(format!(
            "{name} must be a finite number of seconds >= 0, got {s}"
        ))
    })
}

/// One frame's bytes, copied from `bytes`, `bytearray` or `memoryview`.
fn frame_bytes(obj: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Bytes::copy_from_slice(b.as_bytes()));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Bytes::from(b.to_vec()));
    }
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "frames must be bytes, not str (encode it first)",
        ));
    }
    if obj.hasattr(pyo3::intern!(obj.py(), "tobytes"))? {
        let b = obj.call_method0("tobytes")?;
        return Ok(Bytes::copy_from_slice(b.cast::<PyBytes>()?.as_bytes()));
    }
    Err(PyTypeError::new_err(format!(
        "a frame must be bytes, bytearray or memoryview, not {}",
        obj.get_type().name()?
    )))
}

/// `bytes` -> a one-frame message; a sequence of bytes-likes -> multipart.
fn to_message(frames: &Bound<'_, PyAny>) -> PyResult<Message> {
    if frames.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "a message must be bytes or a sequence of bytes, not str",
        ));
    }
    // Lists and tuples (the usual multipart form) skip the attribute probe,
    // which raises and clears an AttributeError for them on every send.
    let sequence = frames.is_instance_of::<PyList>() || frames.is_instance_of::<PyTuple>();
    let single = !sequence
        && (frames.is_instance_of::<PyBytes>()
            || frames.is_instance_of::<PyByteArray>()
            || frames.hasattr(pyo3::intern!(frames.py(), "tobytes"))?);
    if single {
        return Ok(Message::from(frame_bytes(frames)?));
    }
    let mut msg = Message::new();
    for item in frames.try_iter()? {
        msg.push(frame_bytes(&item?)?);
    }
    if msg.is_empty() {
        return Err(errors::invalid(
            "a message needs at least one frame (it may be b\"\")",
        ));
    }
    Ok(msg)
}

/// A message as Python sees it: `list[bytes]`.
pub(crate) fn frames_to_list(py: Python<'_>, msg: Message) -> PyResult<Bound<'_, PyList>> {
    PyList::new(py, msg.frames().iter().map(|f| PyBytes::new(py, f)))
}
