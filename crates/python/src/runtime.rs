//! The process-wide tokio runtime, blocking with the GIL released, and the
//! fork guard.
//!
//! PySpark forks its Python workers. A tokio runtime built before `fork()` is
//! useless in the child: its worker threads were not copied, so anything sent
//! to them never runs. [`handle`] therefore remembers the pid that built the
//! runtime; a call from another pid leaks the parent's runtime (dropping it
//! would try to join threads that do not exist in this process) and builds a
//! fresh one for the child.
//!
//! The runtime's threads outlive the interpreter: nodes the program never closed are dropped
//! while Python finalizes, and their threads keep running (and logging) until the process
//! ends. A thread that enters Python once it is no longer initialized panics, so threads enter
//! it through [`attach`] only, which the `atexit` hook [`python_exiting`] closes.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, Once, PoisonError};
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::{Builder, Handle, Runtime};

/// How often a blocking call wakes up to let Python handle signals (Ctrl-C).
const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(50);

struct Owned {
    pid: u32,
    runtime: Runtime,
}

static RUNTIME: Mutex<Option<Owned>> = Mutex::new(None);

/// This process's id, kept current across `fork()` by a `pthread_atfork`
/// handler: every socket call checks it, and `getpid()` is a system call
/// (glibc no longer caches it), which cost a fifth of a 64-byte `recv`.
static PID: AtomicU32 = AtomicU32::new(0);
static PID_HOOK: Once = Once::new();
/// Set when the handler could not be registered: then ask the kernel.
static PID_UNHOOKED: AtomicBool = AtomicBool::new(false);

/// Set by [`python_exiting`]: threads no longer enter Python.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Threads inside [`attach`] (running Python or waiting for the GIL).
static ATTACHED: AtomicUsize = AtomicUsize::new(0);
/// How long [`python_exiting`] waits for the threads inside [`attach`] to leave.
const EXIT_WAIT: Duration = Duration::from_secs(2);

extern "C" fn refresh_pid() {
    // Async-signal-safe: getpid and atomic stores. The child has none of the parent's
    // other threads, so none is inside `attach`.
    PID.store(std::process::id(), Ordering::Relaxed);
    ATTACHED.store(0, Ordering::SeqCst);
}

/// The current process id, without a system call.
pub(crate) fn pid() -> u32 {
    PID_HOOK.call_once(|| {
        refresh_pid();
        // SAFETY: registers a handler that only calls getpid and stores an atomic.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(refresh_pid)) };
        if rc != 0 {
            PID_UNHOOKED.store(true, Ordering::Relaxed);
        }
    });
    if PID_UNHOOKED.load(Ordering::Relaxed) {
        return std::process::id();
    }
    PID.load(Ordering::Relaxed)
}

/// Runs `f` attached to the interpreter, unless Python is exiting (then `None`, and `f` does
/// not run). What runtime threads (and any thread not started by Python) use to enter Python.
pub(crate) fn attach<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            ATTACHED.fetch_sub(1, Ordering::SeqCst);
        }
    }
    if EXITING.load(Ordering::SeqCst) {
        return None;
    }
    ATTACHED.fetch_add(1, Ordering::SeqCst);
    let _leave = Leave;
    // Counted before this second look: `python_exiting` either sees this thread inside and
    // waits for it, or set the flag first and this thread sees it.
    if EXITING.load(Ordering::SeqCst) {
        return None;
    }
    Python::try_attach(f)
}

/// The `atexit` hook: from now on no thread enters Python through [`attach`]; returns once
/// the threads already inside have left (with the GIL released so that they can finish),
/// before the interpreter finalizes, or after [`EXIT_WAIT`].
#[pyfunction]
pub(crate) fn python_exiting(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let deadline = std::time::Instant::now() + EXIT_WAIT;
        while ATTACHED.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// A handle on this process's runtime, built on first use and rebuilt once in
/// a forked child.
pub(crate) fn handle() -> Handle {
    let pid = pid();
    let mut slot = RUNTIME.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(owned) = slot.as_ref()
        && owned.pid == pid
    {
        return owned.runtime.handle().clone();
    }
    if let Some(stale) = slot.take() {
        // Inherited across fork(): its threads are gone. Never drop it.
        std::mem::forget(stale);
        log::debug!("dafka: fork detected (pid {pid}); building a fresh tokio runtime");
    }
    let runtime = Builder::new_multi_thread()
        .worker_threads(runtime_threads())
        .thread_name("dafka-io")
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("dafka: cannot start the tokio runtime: {e}"));
    let handle = runtime.handle().clone();
    *slot = Some(Owned { pid, runtime });
    handle
}

/// Worker threads: `DAFKA_IO_THREADS` if set, otherwise at most two (network
/// I/O rarely needs more, and Spark runs one Python worker per core).
fn runtime_threads() -> usize {
    std::env::var("DAFKA_IO_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get().min(2))
                .unwrap_or(1)
        })
}

/// Run `fut` to completion on the runtime with the GIL released, waking every
/// [`SIGNAL_CHECK_INTERVAL`] to run Python's signal handlers, so Ctrl-C
/// interrupts a blocking call with `KeyboardInterrupt`.
///
/// The future is dropped when a signal handler raises; every future passed
/// here must therefore be cancel-safe.
pub(crate) fn wait_for<F>(py: Python<'_>, fut: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let handle = handle();
    py.detach(|| {
        handle.block_on(async move {
            tokio::pin!(fut);
            loop {
                tokio::select! {
                    out = &mut fut => return Ok(out),
                    () = tokio::time::sleep(SIGNAL_CHECK_INTERVAL) => {
                        Python::attach(|py| py.check_signals())?;
                    }
                }
            }
        })
    })
}

/// [`wait_for`] with an optional time limit: `Ok(None)` when `limit` passed
/// first (and `fut` was dropped, so it must be cancel-safe).
pub(crate) fn wait_for_at_most<F>(
    py: Python<'_>,
    limit: Option<Duration>,
    fut: F,
) -> PyResult<Option<F::Output>>
where
    F: Future + Send,
    F::Output: Send,
{
    match limit {
        None => wait_for(py, fut).map(Some),
        // The timer must be created inside the runtime, hence the async block.
        Some(limit) => wait_for(
            py,
            async move { tokio::time::timeout(limit, fut).await.ok() },
        ),
    }
}
