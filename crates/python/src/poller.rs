//! `dafka.zmtp.Poller`: wait until one of several sockets has a message, as
//! `zmq.Poller` does.
//!
//! A message that makes a socket readable is taken from the core socket into
//! that socket's stash (in order), where its next receive finds it: the core
//! socket has no "peek", and this keeps readiness exact.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use dafka_zmtp::{Error, Message, SocketType};
use pyo3::prelude::*;

use crate::asyncio::{self, lock};
use crate::zmtp::{PySocket, receives};
use crate::{errors, runtime};

/// `zmq.POLLIN` / `zmq.POLLOUT`.
pub(crate) const POLLIN: i32 = 1;
pub(crate) const POLLOUT: i32 = 2;

/// Sockets and the events each is polled for.
#[pyclass(module = "dafka.zmtp", frozen, subclass)]
#[derive(Default)]
pub(crate) struct Poller {
    entries: Mutex<Vec<(Py<PySocket>, i32)>>,
}

type Received = Pin<Box<dyn Future<Output = Result<Message, Error>> + Send>>;

#[pymethods]
impl Poller {
    #[new]
    fn new() -> Self {
        Poller::default()
    }

    /// Poll `socket` for `flags` (`POLLIN | POLLOUT` by default, as pyzmq);
    /// `flags=0` unregisters it. Registering again replaces its flags.
    #[pyo3(signature = (socket, flags = 3))]
    fn register(&self, socket: Bound<'_, PySocket>, flags: i32) -> PyResult<()> {
        if flags & !(POLLIN | POLLOUT) != 0 {
            return Err(errors::invalid(format!(
                "unsupported poll flags {flags:#x} (POLLIN=1, POLLOUT=2)"
            )));
        }
        let mut entries = lock(&self.entries);
        entries.retain(|(s, _)| !s.is(&socket));
        if flags != 0 {
            entries.push((socket.unbind(), flags));
        }
        Ok(())
    }

    /// Change the flags of a registered socket.
    #[pyo3(signature = (socket, flags = 3))]
    fn modify(&self, socket: Bound<'_, PySocket>, flags: i32) -> PyResult<()> {
        self.register(socket, flags)
    }

    /// Stop polling `socket`.
    fn unregister(&self, socket: Bound<'_, PySocket>) -> PyResult<()> {
        let mut entries = lock(&self.entries);
        let before = entries.len();
        entries.retain(|(s, _)| !s.is(&socket));
        if entries.len() == before {
            return Err(errors::invalid(
                "the socket is not registered with this poller",
            ));
        }
        Ok(())
    }

    /// Wait up to `timeout` milliseconds (`None` or negative: forever) until a
    /// registered socket is ready, and return `[(socket, events), ...]`
    /// (empty when the timeout passed), as pyzmq's `Poller.poll`.
    #[pyo3(signature = (timeout = None))]
    fn poll<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<(Bound<'py, PySocket>, i32)>> {
        let entries: Vec<(Bound<'py, PySocket>, i32)> = lock(&self.entries)
            .iter()
            .map(|(s, f)| (s.bind(py).clone(), *f))
            .collect();
        let ready = scan(&entries)?;
        let limit = milliseconds(timeout)?;
        if !ready.is_empty() || limit.is_some_and(|l| l.is_zero()) {
            return Ok(ready);
        }
        let first = first_message(&entries)?;
        match runtime::wait_for_at_most(py, limit, first)? {
            None => Ok(Vec::new()),
            Some(received) => {
                received.map_err(errors::zmtp)?;
                scan(&entries)
            }
        }
    }

    /// An asyncio future resolving to `None` once a socket registered for
    /// `POLLIN` has a message (taken into its stash) or `timeout`
    /// milliseconds passed (`None` or negative: no limit). The loop is never
    /// blocked; cancelling loses no message. `dafka.zmtp.Poller.poll_async`
    /// builds on it.
    #[pyo3(signature = (timeout = None))]
    fn _wait_async<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let entries: Vec<(Bound<'py, PySocket>, i32)> = lock(&self.entries)
            .iter()
            .map(|(s, f)| (s.bind(py).clone(), *f))
            .collect();
        let limit = milliseconds(timeout)?;
        let first = first_message(&entries)?;
        asyncio::done_when(py, async move {
            match limit {
                None => first.await,
                Some(limit) => tokio::time::timeout(limit, first).await.unwrap_or(Ok(())),
            }
        })
    }
}

/// `None` for no limit (absent or negative), else the duration.
fn milliseconds(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    match timeout {
        Some(ms) if ms >= 0.0 => Duration::try_from_secs_f64(ms / 1000.0)
            .map(Some)
            .map_err(|_| errors::invalid(format!("timeout must be finite, got {ms}"))),
        _ => Ok(None),
    }
}

/// A future that receives the first message of any socket polled for
/// `POLLIN` and puts it into that socket's stash, where its next receive
/// finds it. Never resolves when no socket is polled for `POLLIN`. Dropping
/// it loses nothing: every socket receive is cancel-safe.
fn first_message(
    entries: &[(Bound<'_, PySocket>, i32)],
) -> PyResult<impl Future<Output = Result<(), Error>> + Send + 'static> {
    let mut waiting: Vec<Py<PySocket>> = Vec::new();
    let mut futures: Vec<Received> = Vec::new();
    for (s, flags) in entries {
        if flags & POLLIN != 0 && receives(s.get().socket_type_value()) {
            let socket = Arc::clone(s.get().socket()?);
            futures.push(Box::pin(async move { socket.recv().await }));
            waiting.push(s.clone().unbind());
        }
    }
    Ok(async move {
        let (i, received) = std::future::poll_fn(|cx| {
            for (i, f) in futures.iter_mut().enumerate() {
                if let Poll::Ready(r) = f.as_mut().poll(cx) {
                    return Poll::Ready((i, r));
                }
            }
            Poll::Pending
        })
        .await;
        waiting[i].get().stash_received(received?);
        Ok(())
    })
}

/// The sockets ready now, without waiting.
fn scan<'py>(
    entries: &[(Bound<'py, PySocket>, i32)],
) -> PyResult<Vec<(Bound<'py, PySocket>, i32)>> {
    let mut ready = Vec::new();
    for (s, flags) in entries {
        let mut events = 0;
        if flags & POLLIN != 0 {
            events |= s.get().events()?;
        }
        if flags & POLLOUT != 0 && can_send(s.get().socket_type_value()) {
            events |= POLLOUT;
        }
        if events != 0 {
            ready.push((s.clone(), events));
        }
    }
    Ok(ready)
}

/// `POLLOUT` is reported for every socket type that sends at all: the core
/// socket has no "would a send wait" query, so a send may still wait at the
/// high-water mark (`NOBLOCK` then raises `WouldBlockError`).
pub(crate) fn can_send(t: SocketType) -> bool {
    !matches!(t, SocketType::Pull | SocketType::Sub)
}
