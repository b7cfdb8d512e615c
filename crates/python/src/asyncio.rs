//! Awaitable socket operations: asyncio futures completed from the runtime.
//!
//! Each call spawns one task on the runtime and returns an `asyncio.Future`
//! of the running loop. The task hands its outcome to the loop's thread with
//! `call_soon_threadsafe`, where [`Complete`] resolves the future.
//!
//! Cancellation never loses a message: cancelling the future stops the work
//! only while it is still waiting on the socket (every socket operation is
//! cancel-safe). Awaitable receives are served strictly in call order by one
//! pump task per socket ([`Receivers`]), which finishes one hand-over before
//! it receives the next message; a message received for a future cancelled in
//! the meantime goes back to the front of the socket's stash. So messages come
//! out in the order they arrived, whatever is cancelled.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use dafka_zmtp::{Message, Socket};
use pyo3::prelude::*;
use tokio::sync::{Notify, oneshot};

use crate::zmtp::frames_to_list;
use crate::{errors, runtime};

/// Messages received for a caller that stopped waiting: handed out first by
/// the next receive (blocking or awaitable).
pub(crate) type Stash = Arc<Mutex<VecDeque<Message>>>;

/// The pending awaitable receives of one socket, in call order, and whether
/// a pump task is serving them.
#[derive(Default)]
pub(crate) struct Receivers {
    state: Mutex<ReceiversState>,
}

#[derive(Default)]
struct ReceiversState {
    waiting: VecDeque<Waiter>,
    pumping: bool,
}

struct Waiter {
    handoff: Handoff,
    cancel: Arc<Cancel>,
}

type Outcome = Result<Option<Message>, dafka_zmtp::Error>;

/// `socket.send(msg)` as an asyncio future resolving to `None`.
pub(crate) fn send(
    py: Python<'_>,
    socket: Arc<Socket>,
    msg: Message,
) -> PyResult<Bound<'_, PyAny>> {
    done_when(py, async move { socket.send(msg).await })
}

/// An asyncio future resolving to `None` when `work` completes (or to its
/// error). Cancelling the asyncio future drops `work`, which must therefore
/// be cancel-safe.
pub(crate) fn done_when<F>(py: Python<'_>, work: F) -> PyResult<Bound<'_, PyAny>>
where
    F: Future<Output = Result<(), dafka_zmtp::Error>> + Send + 'static,
{
    let (fut, handoff, cancel) = new_future(py)?;
    runtime::handle().spawn(async move {
        let outcome = tokio::select! {
            biased;
            () = cancel.wait() => return,
            done = work => done.map(|()| None),
        };
        handoff.complete(outcome, None).await;
    });
    Ok(fut)
}

/// `socket.recv()` as an asyncio future resolving to `list[bytes]`.
pub(crate) fn recv(
    py: Python<'_>,
    socket: Arc<Socket>,
    receivers: Arc<Receivers>,
    stash: Stash,
) -> PyResult<Bound<'_, PyAny>> {
    let (fut, handoff, cancel) = new_future(py)?;
    let start_pump = {
        let mut state = lock(&receivers.state);
        state.waiting.push_back(Waiter { handoff, cancel });
        !std::mem::replace(&mut state.pumping, true)
    };
    if start_pump {
        runtime::handle().spawn(pump(socket, receivers, stash));
    }
    Ok(fut)
}

/// Serve the waiting receives one at a time, oldest first, until none is left.
async fn pump(socket: Arc<Socket>, receivers: Arc<Receivers>, stash: Stash) {
    loop {
        let waiter = {
            let mut state = lock(&receivers.state);
            match state.waiting.pop_front() {
                Some(w) => w,
                None => {
                    state.pumping = false;
                    return;
                }
            }
        };
        if waiter.cancel.is_set() {
            continue;
        }
        let stashed = lock(&stash).pop_front();
        let outcome = match stashed {
            Some(msg) => Ok(Some(msg)),
            None => tokio::select! {
                biased;
                () = waiter.cancel.wait() => continue,
                received = socket.recv() => received.map(Some),
            },
        };
        waiter
            .handoff
            .complete(outcome, Some(Arc::clone(&stash)))
            .await;
    }
}

/// A future of the running loop, its hand-over, and its cancellation flag.
pub(crate) fn new_future(py: Python<'_>) -> PyResult<(Bound<'_, PyAny>, Handoff, Arc<Cancel>)> {
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let fut = event_loop.call_method0("create_future")?;
    let cancel = Arc::new(Cancel::default());
    fut.call_method1(
        "add_done_callback",
        (CancelOnDone {
            cancel: Arc::clone(&cancel),
        },),
    )?;
    let handoff = Handoff {
        event_loop: event_loop.unbind(),
        fut: fut.clone().unbind(),
    };
    Ok((fut, handoff, cancel))
}

/// Set once when the asyncio future is cancelled.
#[derive(Default)]
pub(crate) struct Cancel {
    set: AtomicBool,
    notify: Notify,
}

impl Cancel {
    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Resolves once the future has been cancelled.
    pub(crate) async fn wait(&self) {
        while !self.is_set() {
            let notified = self.notify.notified();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}

/// Where a task delivers its outcome.
pub(crate) struct Handoff {
    pub(crate) event_loop: Py<PyAny>,
    pub(crate) fut: Py<PyAny>,
}

impl Handoff {
    /// Schedule [`Complete`] on the loop and wait until it has run, so the
    /// outcome is either in the future or (cancelled) back in the stash.
    async fn complete(self, outcome: Outcome, stash: Option<Stash>) {
        let (done, ran) = oneshot::channel();
        // (Not scheduled when Python is exiting: no loop will run it.)
        let scheduled = runtime::attach(|py| {
            let complete = Py::new(
                py,
                Complete {
                    fut: self.fut.clone_ref(py),
                    outcome: Mutex::new(Some(outcome)),
                    stash: stash.clone(),
                    done: Mutex::new(Some(done)),
                },
            )?;
            match self
                .event_loop
                .bind(py)
                .call_method1("call_soon_threadsafe", (complete.clone_ref(py),))
            {
                Ok(_) => Ok(()),
                Err(e) => {
                    // The loop is closed: nobody will take the outcome.
                    log::debug!("dafka: asyncio loop gone before completion: {e}");
                    complete.get().keep(None);
                    Err(e)
                }
            }
        });
        if scheduled.is_some_and(|s| s.is_ok()) {
            let _ = ran.await;
        }
    }
}

/// Runs on the event loop's thread and resolves the future.
#[pyclass(frozen)]
struct Complete {
    fut: Py<PyAny>,
    outcome: Mutex<Option<Outcome>>,
    stash: Option<Stash>,
    done: Mutex<Option<oneshot::Sender<()>>>,
}

impl Complete {
    /// The future is gone: a received message returns to the stash's front
    /// (it is older than anything received after it). Signals `done`.
    fn keep(&self, outcome: Option<Outcome>) {
        let outcome = outcome.or_else(|| lock(&self.outcome).take());
        if let (Some(Ok(Some(msg))), Some(stash)) = (outcome, &self.stash) {
            lock(stash).push_front(msg);
        }
        if let Some(done) = lock(&self.done).take() {
            let _ = done.send(());
        }
    }
}

#[pymethods]
impl Complete {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let Some(outcome) = lock(&self.outcome).take() else {
            return Ok(());
        };
        let fut = self.fut.bind(py);
        if fut.call_method0("done")?.is_truthy()? {
            self.keep(Some(outcome));
            return Ok(());
        }
        let resolved = match outcome {
            Ok(Some(msg)) => match frames_to_list(py, msg) {
                Ok(frames) => fut.call_method1("set_result", (frames,)),
                Err(e) => fut.call_method1("set_exception", (e.into_value(py),)),
            },
            Ok(None) => fut.call_method1("set_result", (py.None(),)),
            Err(e) => fut.call_method1("set_exception", (errors::zmtp(e).into_value(py),)),
        };
        self.keep(None);
        resolved.map(|_| ())
    }
}

/// Done-callback: a cancelled future stops its work if it is still waiting.
#[pyclass(frozen)]
struct CancelOnDone {
    cancel: Arc<Cancel>,
}

#[pymethods]
impl CancelOnDone {
    fn __call__(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0("cancelled")?.is_truthy()? {
            self.cancel.set.store(true, Ordering::Release);
            self.cancel.notify.notify_waiters();
        }
        Ok(())
    }
}

/// A std mutex guard that shrugs off poisoning (the data stays consistent:
/// every critical section is a single push or pop).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
