//! `Socket.monitor()`: the core socket's events as Python dicts, the
//! counterpart of pyzmq's `get_monitor_socket()` + `recv_monitor_message()`.
//!
//! Each event is a `dict` with `"event"` (its name, e.g.
//! `"handshake_succeeded"`) and the event's fields: `endpoint` and `address`
//! (`str`), `peer` (an `int`, unique within the socket), `delay` (seconds),
//! `socket_type`, `identity`, `routing_id` and `metadata` (`dict[str, bytes]`)
//! of a handshake, `reason`/`reason_kind`/`errno` of a failure or
//! disconnection, `prefix` of a subscription.

use std::sync::Arc;

use dafka_zmtp::{ConnectionEnd, Monitor, SocketEvent};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::zmtp::NOBLOCK;
use crate::{errors, runtime};

/// A socket's event stream (`Socket.monitor()`). Bounded: when it is full the
/// oldest event is dropped and counted in `dropped`.
#[pyclass(name = "Monitor", module = "dafka.zmtp", frozen)]
pub(crate) struct PyMonitor {
    inner: Arc<tokio::sync::Mutex<Monitor>>,
}

impl PyMonitor {
    pub(crate) fn new(monitor: Monitor) -> Self {
        PyMonitor {
            inner: Arc::new(tokio::sync::Mutex::new(monitor)),
        }
    }
}

#[pymethods]
impl PyMonitor {
    /// The next event as a dict; `None` once the stream ended (the socket
    /// closed: `"closed"` is the last event) and every event was taken.
    /// `NOBLOCK`: raise `WouldBlockError` when none is queued. Waits at most
    /// `timeout` seconds, then raises `TimeoutError`.
    #[pyo3(signature = (flags = 0, *, timeout = None))]
    fn recv<'py>(
        &self,
        py: Python<'py>,
        flags: i32,
        timeout: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let event = if flags & NOBLOCK != 0 {
            let mut m = self
                .inner
                .try_lock()
                .map_err(|_| errors::zmtp(dafka_zmtp::Error::WouldBlock))?;
            match m.try_recv() {
                Some(e) => Some(e),
                None if m.is_ended() => None,
                None => return Err(errors::zmtp(dafka_zmtp::Error::WouldBlock)),
            }
        } else {
            let limit = timeout
                .map(|t| {
                    std::time::Duration::try_from_secs_f64(t).map_err(|_| {
                        errors::invalid(format!("timeout must be a finite number >= 0, got {t}"))
                    })
                })
                .transpose()?;
            let inner = Arc::clone(&self.inner);
            runtime::wait_for_at_most(py, limit, async move { inner.lock().await.recv().await })?
                .ok_or_else(|| errors::timeout("no socket event before the timeout"))?
        };
        event.map(|e| to_dict(py, e)).transpose()
    }

    /// How many events were dropped because the queue was full.
    #[getter]
    fn dropped(&self) -> u64 {
        self.inner.try_lock().map_or(0, |m| m.dropped())
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Iterating blocks for each event and stops when the stream ends.
    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.recv(py, 0, None)
    }
}

fn to_dict(py: Python<'_>, event: SocketEvent) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    let accepted = matches!(event, SocketEvent::Accepted { .. });
    let name = match event {
        SocketEvent::Listening { endpoint } => {
            d.set_item("endpoint", endpoint)?;
            "listening"
        }
        SocketEvent::Accepted {
            endpoint,
            address,
            peer,
        }
        | SocketEvent::Connected {
            endpoint,
            address,
            peer,
        } => {
            d.set_item("endpoint", endpoint)?;
            d.set_item("address", address)?;
            d.set_item("peer", peer.get())?;
            if accepted { "accepted" } else { "connected" }
        }
        SocketEvent::ConnectRetried {
            endpoint,
            peer,
            delay,
        } => {
            d.set_item("endpoint", endpoint)?;
            d.set_item("peer", peer.get())?;
            d.set_item("delay", delay.as_secs_f64())?;
            "connect_retried"
        }
        SocketEvent::HandshakeSucceeded {
            peer,
            address,
            socket_type,
            identity,
            metadata,
            routing_id,
        } => {
            d.set_item("peer", peer.get())?;
            d.set_item("address", address)?;
            d.set_item("socket_type", socket_type.as_str())?;
            d.set_item("identity", PyBytes::new(py, &identity))?;
            let props = PyDict::new(py);
            for (k, v) in metadata.iter() {
                props.set_item(k, PyBytes::new(py, v))?;
            }
            d.set_item("metadata", props)?;
            d.set_item("routing_id", routing_id.map(|r| PyBytes::new(py, &r)))?;
            "handshake_succeeded"
        }
        SocketEvent::HandshakeFailed {
            peer,
            address,
            reason,
        } => {
            d.set_item("peer", peer.get())?;
            d.set_item("address", address)?;
            set_reason(&d, &reason)?;
            "handshake_failed"
        }
        SocketEvent::Disconnected {
            peer,
            address,
            reason,
        } => {
            d.set_item("peer", peer.get())?;
            d.set_item("address", address)?;
            set_reason(&d, &reason)?;
            "disconnected"
        }
        SocketEvent::SendQueueFull { peer } => {
            d.set_item("peer", peer.get())?;
            "send_queue_full"
        }
        SocketEvent::SendQueueDrained { peer } => {
            d.set_item("peer", peer.get())?;
            "send_queue_drained"
        }
        SocketEvent::Subscribed { peer, prefix } => {
            d.set_item("peer", peer.get())?;
            d.set_item("prefix", PyBytes::new(py, &prefix))?;
            "subscribed"
        }
        SocketEvent::Unsubscribed { peer, prefix } => {
            d.set_item("peer", peer.get())?;
            d.set_item("prefix", PyBytes::new(py, &prefix))?;
            "unsubscribed"
        }
        SocketEvent::Closed => "closed",
        // An event added to the core later: named by its debug form.
        other => {
            d.set_item("detail", format!("{other:?}"))?;
            "other"
        }
    };
    d.set_item("event", name)?;
    Ok(d)
}

/// Why a connection ended: `reason` (text), `reason_kind` (who was at fault)
/// and `errno` (I/O errors only).
fn set_reason(d: &Bound<'_, PyDict>, reason: &ConnectionEnd) -> PyResult<()> {
    d.set_item("reason", reason.to_string())?;
    let (kind, errno) = match reason {
        ConnectionEnd::PeerClosed => ("peer_closed", None),
        ConnectionEnd::Io(e) => ("io", e.raw_os_error()),
        ConnectionEnd::Protocol(_) => ("protocol", None),
        ConnectionEnd::Rejected(_) => ("rejected", None),
        ConnectionEnd::Subscription(_) => ("subscription", None),
        ConnectionEnd::Memory(_) => ("memory", None),
        ConnectionEnd::Closed => ("closed", None),
        _ => ("other", None),
    };
    d.set_item("reason_kind", kind)?;
    d.set_item("errno", errno)?;
    Ok(())
}
