//! Awaitable forms of the Dafka nodes' calls: `Producer.send_async`,
//! `send_many_async`, `flush_async` and `Consumer.poll_async`.
//!
//! Each call returns an `asyncio.Future` of the running loop (made by
//! [`asyncio::new_future`], shared with the socket forms) and spawns one task
//! on the runtime that waits for the node. The result is then produced on the
//! loop's own thread, by [`Resolve`], and only if the future is still pending:
//!
//! * A cancelled future stops the task while it is still waiting (every node
//!   call is cancel-safe: a `send` either queued a record or did not, `flush`
//!   only waits).
//! * `poll_async` waits with [`ConsumerNode::ready`], which takes nothing,
//!   and takes the records in [`Resolve`] on the loop's thread. A future
//!   cancelled at any moment therefore leaves every record in the consumer
//!   for the next poll: none is taken for a future nobody awaits.
//! * A `send_async` cancelled after its record was queued still sends it (the
//!   offset is simply not reported), as a cancelled `send` on a socket does.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_pyarrow::ToPyArrow;
use dafka_node::{ConsumerNode, Error};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;

use crate::arrow_batch::{self, records_batch};
use crate::asyncio::{self, lock};
use crate::{errors, runtime};

type Finish = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// Runs `wait` on the runtime, then `finish(py, output)` on the loop's thread
/// if the returned future is still pending; its value or error resolves it.
pub(crate) fn awaitable<W, F>(py: Python<'_>, wait: W, finish: F) -> PyResult<Bound<'_, PyAny>>
where
    W: Future + Send + 'static,
    W::Output: Send + 'static,
    F: FnOnce(Python<'_>, W::Output) -> PyResult<Py<PyAny>> + Send + 'static,
{
    let (fut, handoff, cancel) = asyncio::new_future(py)?;
    runtime::handle().spawn(async move {
        let output = tokio::select! {
            biased;
            () = cancel.wait() => return,
            output = wait => output,
        };
        // Nothing to resolve when Python is exiting: no loop will run it.
        let _ = runtime::attach(|py| {
            let finish: Finish = Box::new(move |py| finish(py, output));
            let resolve = Resolve {
                fut: handoff.fut.clone_ref(py),
                finish: Mutex::new(Some(finish)),
            };
            if let Err(e) = handoff
                .event_loop
                .bind(py)
                .call_method1("call_soon_threadsafe", (resolve,))
            {
                // The loop is closed: nobody awaits the result.
                log::debug!("dafka: asyncio loop gone before completion: {e}");
            }
        });
    });
    Ok(fut)
}

/// An offset (`send_async`, `send_many_async`).
pub(crate) fn offset(py: Python<'_>, sent: Result<u64, Error>) -> PyResult<Py<PyAny>> {
    sent.map_err(errors::node)?.into_py_any(py)
}

/// `None` (`flush_async`).
pub(crate) fn done(py: Python<'_>, flushed: Result<(), Error>) -> PyResult<Py<PyAny>> {
    flushed.map_err(errors::node)?;
    Ok(py.None())
}

/// `Consumer.poll_async`: waits for a complete batch without taking it; the
/// records are taken on the loop's thread, for a future still pending.
pub(crate) fn poll(
    py: Python<'_>,
    node: Arc<ConsumerNode>,
    max_records: usize,
    timeout: Duration,
) -> PyResult<Bound<'_, PyAny>> {
    let waiting = Arc::clone(&node);
    awaitable(
        py,
        async move { waiting.ready(max_records, timeout).await },
        move |py, ready| {
            ready.map_err(errors::node)?;
            let batch = py
                .detach(|| records_batch(node.take(max_records), true))
                .map_err(arrow_batch::batch_error)?;
            batch.to_pyarrow(py).map(Bound::unbind)
        },
    )
}

/// Runs on the event loop's thread and resolves the future, unless it is
/// already done (cancelled): then `finish` is dropped unrun.
#[pyclass(frozen)]
struct Resolve {
    fut: Py<PyAny>,
    finish: Mutex<Option<Finish>>,
}

#[pymethods]
impl Resolve {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let Some(finish) = lock(&self.finish).take() else {
            return Ok(());
        };
        let fut = self.fut.bind(py);
        if fut.call_method0("done")?.is_truthy()? {
            return Ok(());
        }
        match finish(py) {
            Ok(value) => fut.call_method1("set_result", (value,)),
            Err(e) => fut.call_method1("set_exception", (e.into_value(py),)),
        }
        .map(|_| ())
    }
}
