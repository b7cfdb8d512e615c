//! Connection tasks that a waiting receiver may also drive.
//!
//! Every TCP or IPC connection runs as a spawned task. A receiver waiting in
//! [`Socket::recv`](crate::Socket::recv) on an empty queue would otherwise be
//! woken by that task once it has read and decoded a message: one more hop on
//! the path of every reply. On tokio's current-thread runtime a `block_on`
//! future woken by a task runs only after another (non-blocking) `epoll_wait`;
//! on a multi-thread runtime the hop is a cross-thread wake-up. So a waiting
//! receiver polls the connection futures itself, when the socket has few of
//! them and the receiver runs on the socket's runtime: the stream's readiness
//! then wakes the receiver directly, which reads and decodes the reply in its
//! own poll, as a caller owning the connection would.
//!
//! A connection future is shared by its task and by receivers behind a mutex
//! taken with `try_lock`, never waited for. A poller that finds it taken
//! leaves a request (`again`) that the holder serves before it returns, so a
//! wake-up is never lost. Wake-ups of the future reach its task and the one
//! receiver registered at the time.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::task::{Context, Poll, Wake, Waker};

use crate::lock;

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A future polled by its own task and, while they wait, by receivers.
pub(crate) struct CoTask {
    /// `None` once the future has completed.
    fut: Mutex<Option<BoxFuture>>,
    /// Set by a poller that found `fut` locked: the holder polls once more.
    again: AtomicBool,
    /// Who to wake when the future is woken.
    wakers: Mutex<Wakers>,
}

/// The pollers of a [`CoTask`] to wake.
#[derive(Default)]
struct Wakers {
    /// The spawned task that owns the future.
    task: Option<Waker>,
    /// A receiver waiting for what the future may produce.
    receiver: Option<Waker>,
}

impl std::fmt::Debug for CoTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoTask")
            .field("again", &self.again.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Wake for CoTask {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Taken, not cloned: each poller registers again when it polls.
        let Wakers { task, receiver } = std::mem::take(&mut *lock(&self.wakers));
        for w in [receiver, task].into_iter().flatten() {
            w.wake();
        }
    }
}

impl CoTask {
    pub(crate) fn new(fut: impl Future<Output = ()> + Send + 'static) -> Arc<Self> {
        Arc::new(CoTask {
            fut: Mutex::new(Some(Box::pin(fut))),
            again: AtomicBool::new(false),
            wakers: Mutex::new(Wakers::default()),
        })
    }

    /// The body of the spawned task: drives the future to completion.
    pub(crate) async fn run(self: Arc<Self>) {
        std::future::poll_fn(|cx| {
            register(&mut lock(&self.wakers).task, cx.waker());
            if self.drive() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    /// Polls the future on behalf of a receiver. Wake-ups raised while it
    /// does (the receiver looks at the queue right after) go to the task only.
    pub(crate) fn drive_for_receiver(self: &Arc<Self>) {
        lock(&self.wakers).receiver = None;
        self.drive();
    }

    /// Wakes `waker` at the future's next wake-up (one receiver at a time).
    pub(crate) fn register_receiver(&self, waker: &Waker) {
        register(&mut lock(&self.wakers).receiver, waker);
    }

    /// Drops the future (its task has ended or was cancelled).
    pub(crate) fn finish(&self) {
        // Dropped after the lock is released: the future's drop may wake others.
        let fut = lock(&self.fut).take();
        drop(fut);
    }

    /// Whether the future has completed.
    #[cfg(test)]
    fn is_done(&self) -> bool {
        match self.fut.try_lock() {
            Ok(slot) => slot.is_none(),
            Err(TryLockError::Poisoned(_)) => true,
            Err(TryLockError::WouldBlock) => false,
        }
    }

    /// Polls the future unless another poller holds it (that one then polls
    /// again for us). Returns whether the future has completed.
    fn drive(self: &Arc<Self>) -> bool {
        self.again.store(true, Ordering::SeqCst);
        while self.again.load(Ordering::SeqCst) {
            let mut slot = match self.fut.try_lock() {
                Ok(slot) => slot,
                Err(TryLockError::WouldBlock) => return false,
                // A poll panicked: the future is in no state to go on.
                Err(TryLockError::Poisoned(p)) => {
                    p.into_inner().take();
                    return true;
                }
            };
            self.again.store(false, Ordering::SeqCst);
            let Some(fut) = slot.as_mut() else {
                return true;
            };
            let waker = Waker::from(self.clone());
            if fut
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_ready()
            {
                *slot = None;
                drop(slot);
                // Completed by a receiver's poll: the task must see it to end.
                let task = lock(&self.wakers).task.take();
                if let Some(w) = task {
                    w.wake();
                }
                return true;
            }
        }
        false
    }
}

fn register(slot: &mut Option<Waker>, waker: &Waker) {
    if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
        *slot = Some(waker.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts its wake-ups.
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn wakes_reach_the_task_and_the_registered_receiver() {
        let (tx, rx) = std::sync::mpsc::channel::<Waker>();
        let polls = Arc::new(AtomicUsize::new(0));
        let p = polls.clone();
        let co = CoTask::new(std::future::poll_fn(move |cx| {
            p.fetch_add(1, Ordering::SeqCst);
            tx.send(cx.waker().clone()).unwrap();
            Poll::<()>::Pending
        }));
        let task = Arc::new(Count(AtomicUsize::new(0)));
        let receiver = Arc::new(Count(AtomicUsize::new(0)));
        register(&mut lock(&co.wakers).task, &Waker::from(task.clone()));
        assert!(!co.drive());
        co.register_receiver(&Waker::from(receiver.clone()));
        rx.recv().unwrap().wake();
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        assert_eq!(receiver.0.load(Ordering::SeqCst), 1);
        // A receiver's own poll does not wake itself.
        co.register_receiver(&Waker::from(receiver.clone()));
        co.drive_for_receiver();
        rx.recv().unwrap().wake();
        assert_eq!(receiver.0.load(Ordering::SeqCst), 1);
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn completion_in_a_receivers_poll_wakes_the_task() {
        let co = CoTask::new(std::future::ready(()));
        let task = Arc::new(Count(AtomicUsize::new(0)));
        register(&mut lock(&co.wakers).task, &Waker::from(task.clone()));
        co.drive_for_receiver();
        assert!(co.is_done());
        assert_eq!(
            task.0.load(Ordering::SeqCst),
            1,
            "the task would wait forever"
        );
    }

    #[test]
    fn a_poll_requested_while_locked_is_served_by_the_holder() {
        let co_slot: Arc<Mutex<Option<Arc<CoTask>>>> = Arc::new(Mutex::new(None));
        let polls = Arc::new(AtomicUsize::new(0));
        let (p, s) = (polls.clone(), co_slot.clone());
        let co = CoTask::new(std::future::poll_fn(move |_| {
            let n = p.fetch_add(1, Ordering::SeqCst) + 1;
            if n == 1 {
                // Another poller arrives while this poll holds the future.
                let other = lock(&s).clone().unwrap();
                assert!(!other.drive());
            }
            if n == 2 {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }));
        *lock(&co_slot) = Some(co.clone());
        assert!(co.drive(), "the holder polls again and sees completion");
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert!(co.is_done());
        *lock(&co_slot) = None;
    }
}
