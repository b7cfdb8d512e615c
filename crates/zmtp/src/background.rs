//! Sockets closed in the background, and [`term`], which waits for them.
//!
//! [`Socket::close_in_background`](crate::Socket::close_in_background) (and
//! dropping the last handle) returns at once; the socket keeps flushing its
//! queued messages for up to its linger in a task of its runtime. A
//! process-wide registry lists those sockets until they are done, so that a
//! program (or Python's `atexit`) can wait for the flushes with a bounded
//! timeout before it exits.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::error::TermTimeout;
use crate::socket::Inner;
use crate::{lock, wait_until};

/// The sockets still flushing in the background.
static CLOSING: Mutex<Vec<Arc<Inner>>> = Mutex::new(Vec::new());
/// The process `CLOSING` belongs to: a forked child inherits the parent's
/// entries, whose tasks do not run in the child, and starts empty instead.
static OWNER: AtomicU32 = AtomicU32::new(0);
/// Woken whenever a background close ends.
static DONE: Notify = Notify::const_new();

fn closing() -> MutexGuard<'static, Vec<Arc<Inner>>> {
    let mut list = lock(&CLOSING);
    let pid = std::process::id();
    if OWNER.swap(pid, Ordering::Relaxed) != pid {
        // Leaked, not dropped: their tasks and runtime exist only in the parent.
        std::mem::forget(std::mem::take(&mut *list));
    }
    list
}

/// Close `inner` in a task of its runtime, flushing for up to `linger`, and
/// list it until that is done. Does nothing if the socket was closed already
/// (the first close decides the linger).
pub(crate) fn close(inner: &Arc<Inner>, linger: Option<Duration>) {
    if !inner.begin_close() {
        return;
    }
    closing().push(inner.clone());
    /// Unlists the socket when the close task ends, even if it was cancelled
    /// (runtime shut down).
    struct Unlist(Arc<Inner>);
    impl Drop for Unlist {
        fn drop(&mut self) {
            closing().retain(|i| !Arc::ptr_eq(i, &self.0));
            DONE.notify_waiters();
        }
    }
    let unlist = Unlist(inner.clone());
    inner.runtime.spawn(async move {
        let unlist = unlist;
        unlist.0.close(linger).await;
    });
}

/// How many sockets closed in the background are still flushing.
pub fn pending_closes() -> usize {
    closing().len()
}

/// Wait until every socket closed in the background (with
/// [`Socket::close_in_background`](crate::Socket::close_in_background) or by
/// dropping its last handle) has flushed its queued messages or reached its
/// linger, for at most `timeout`. Sockets still flushing then are terminated:
/// their queued messages are dropped and [`TermTimeout`] says how many there
/// were. Sockets closed after `term` returns are not affected.
///
/// Call it before the process exits (Python's `dafka.zmtp.term()` and its
/// `atexit` hook do), as libzmq's `zmq_ctx_term` is called; unlike it, the
/// wait is bounded.
pub async fn term(timeout: Duration) -> Result<(), TermTimeout> {
    let all_done = wait_until(&DONE, || closing().is_empty());
    if tokio::time::timeout(timeout, all_done).await.is_ok() {
        return Ok(());
    }
    let pending: Vec<Arc<Inner>> = closing().clone();
    for inner in &pending {
        inner.terminate();
    }
    Err(TermTimeout {
        abandoned: pending.len(),
    })
}
