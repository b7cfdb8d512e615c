//! Queues between the socket API and the per-connection tasks.
//!
//! * A [`Pipe`] is the outgoing queue towards one peer, bounded by `sndhwm`
//!   (in messages). The socket pattern pushes into it; the peer's connection
//!   task drains it whole into its write buffer.
//! * The [`Inbound`] queue is shared by every connection of one socket and
//!   bounded by `rcvhwm`. When it is full the connection tasks stop reading
//!   from their streams (TCP back-pressure); nothing is ever dropped there.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use dafka_zmtp_proto::pattern::{Outbox, Subscription};
use tokio::sync::Notify;

use crate::Message;
use crate::{lock, wait_until};

/// Keeps a value on its own cache line(s), so that locks and counters used by
/// different threads do not slow each other down (false sharing).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// One item queued towards a peer.
#[derive(Debug, Clone)]
pub(crate) enum Out {
    /// An application message.
    Msg(Message),
    /// A subscription (SUB/XSUB): a SUBSCRIBE command to 3.1 peers, a
    /// `0x01 + prefix` message to 3.0 peers.
    Sub(Bytes),
    /// A cancellation: CANCEL command or `0x00 + prefix` message.
    Cancel(Bytes),
}

/// The outgoing queue towards one peer.
#[derive(Debug)]
pub(crate) struct Pipe {
    /// Unique within its socket; inbound messages are tagged with it.
    pub(crate) id: u64,
    queue: Padded<Mutex<VecDeque<Out>>>,
    /// Wakes the connection task that drains this pipe (single consumer, so
    /// `notify_one` semantics: a notification is never lost).
    pub(crate) wake: Notify,
    hwm: usize,
    /// The monitor was told this pipe reached its HWM (and not yet that it
    /// drained).
    pub(crate) full_reported: AtomicBool,
}

impl Pipe {
    pub(crate) fn new(id: u64, hwm: usize) -> Self {
        Pipe {
            id,
            queue: Padded(Mutex::new(VecDeque::new())),
            wake: Notify::new(),
            hwm,
            full_reported: AtomicBool::new(false),
        }
    }

    /// Queue a message unless the pipe holds `hwm` items already.
    pub(crate) fn try_push(&self, msg: Message) -> Result<(), Message> {
        let q = lock(&self.queue);
        if q.len() >= self.hwm {
            return Err(msg);
        }
        self.push_locked(q, Out::Msg(msg));
        Ok(())
    }

    /// Queue, in order and under one lock, each message of `batch` that `wanted` accepts,
    /// dropping those that find the pipe at its HWM (PUB semantics); wakes the connection
    /// task once. Returns how many were dropped.
    pub(crate) fn try_push_each(
        &self,
        batch: &[Message],
        mut wanted: impl FnMut(&Message) -> bool,
    ) -> usize {
        let mut q = lock(&self.queue);
        let was_empty = q.is_empty();
        let mut dropped = 0;
        for msg in batch.iter().filter(|m| wanted(m)) {
            if q.len() >= self.hwm {
                dropped += 1;
            } else {
                q.push_back(Out::Msg(msg.clone()));
            }
        }
        let wake = was_empty && !q.is_empty();
        drop(q);
        if wake {
            self.wake.notify_one();
        }
        dropped
    }

    /// Queue an item regardless of the HWM (subscriptions are never dropped).
    pub(crate) fn push_force(&self, item: Out) {
        self.push_locked(lock(&self.queue), item);
    }

    /// Append to the locked queue; wake the connection task (after unlocking)
    /// if the queue was empty. Always inlined: on every send's path (`try_push`), and left
    /// to itself the inliner decides by how the crate happens to be split into codegen units
    /// (moving code in `conn.rs` made it a call: 15 more instructions per 64 B message pushed,
    /// counted with cachegrind).
    #[inline(always)]
    fn push_locked(&self, mut q: MutexGuard<'_, VecDeque<Out>>, item: Out) {
        q.push_back(item);
        let was_empty = q.len() == 1;
        drop(q);
        if was_empty {
            self.wake.notify_one();
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        lock(&self.queue).is_empty()
    }

    /// Move every queued item into `into` (O(1) when `into` is empty: the two
    /// deques are swapped). Returns `true` if the pipe was at its HWM, i.e.
    /// blocked senders may now proceed.
    pub(crate) fn take_all(&self, into: &mut VecDeque<Out>) -> bool {
        self.take_up_to(usize::MAX, into)
    }

    /// Move queued items into `into` until `max_msgs` messages were moved
    /// (subscription items do not count). Returns `true` if the pipe was at
    /// its HWM.
    pub(crate) fn take_up_to(&self, max_msgs: usize, into: &mut VecDeque<Out>) -> bool {
        let mut q = lock(&self.queue);
        let was_full = q.len() >= self.hwm;
        if q.len() <= max_msgs && into.is_empty() {
            // Everything fits: O(1).
            std::mem::swap(&mut *q, into);
            return was_full;
        }
        let mut n = 0;
        while let Some(front) = q.front() {
            if matches!(front, Out::Msg(_)) {
                if n == max_msgs {
                    break;
                }
                n += 1;
            }
            if let Some(item) = q.pop_front() {
                into.push_back(item);
            }
        }
        was_full
    }

    /// Put items that were taken but never written back at the head of the
    /// queue (connection lost: they go out on the next connection).
    pub(crate) fn put_back(&self, mut items: VecDeque<Out>) {
        if items.is_empty() {
            return;
        }
        let mut q = lock(&self.queue);
        items.append(&mut q);
        *q = items;
    }

    /// Apply `f` to the queue under its lock.
    pub(crate) fn with_queue<R>(&self, f: impl FnOnce(&mut VecDeque<Out>) -> R) -> R {
        f(&mut lock(&self.queue))
    }
}

/// The pattern layer pushes into pipes through this; each method is the pipe's own, inlined.
impl Outbox for Pipe {
    #[inline(always)]
    fn id(&self) -> u64 {
        self.id
    }

    #[inline(always)]
    fn try_push(&self, msg: Message) -> Result<(), Message> {
        Pipe::try_push(self, msg)
    }

    #[inline]
    fn try_push_each(&self, batch: &[Message], wanted: impl FnMut(&Message) -> bool) -> usize {
        Pipe::try_push_each(self, batch, wanted)
    }

    fn push_force(&self, msg: Message) {
        Pipe::push_force(self, Out::Msg(msg));
    }

    fn push_subscription(&self, sub: Subscription) {
        Pipe::push_force(
            self,
            match sub {
                Subscription::Subscribe(p) => Out::Sub(p),
                Subscription::Cancel(p) => Out::Cancel(p),
            },
        );
    }

    fn resubscribe(&self, prefixes: Vec<Bytes>) {
        // Drop subscription traffic queued for a previous connection; ours go first.
        self.with_queue(|q| {
            q.retain(|o| match o {
                Out::Msg(m) => !Subscription::is_message(m),
                Out::Sub(_) | Out::Cancel(_) => false,
            });
            for p in prefixes.into_iter().rev() {
                q.push_front(Out::Sub(p));
            }
        });
        self.wake.notify_one();
    }
}

/// The consumer's private side of the receive queue.
#[derive(Debug, Default)]
struct Cache {
    q: VecDeque<(u64, Message)>,
    /// Popped but not yet subtracted from `Inbound::total`.
    popped: usize,
}

/// At most this many pops are batched into one update of `Inbound::total`
/// (fewer for small HWMs: an eighth of it).
const RELEASE_EVERY: usize = 32;

/// The receive queue of a socket, shared by all its connections.
///
/// Producers (connection tasks) append batches to `shared`; the consumer
/// swaps the whole of `shared` into its private `cache` when the cache runs
/// dry, so producer and consumer meet on one lock once per batch rather than
/// once per message. `total` counts both.
#[derive(Debug)]
pub(crate) struct Inbound {
    shared: Padded<Mutex<VecDeque<(u64, Message)>>>,
    cache: Padded<Mutex<Cache>>,
    total: Padded<AtomicUsize>,
    /// Connection tasks waiting for room (to split free room fairly).
    blocked: AtomicUsize,
    /// Pops batched per update of `total`.
    release_every: usize,
    /// Wakes `recv` callers when the queue becomes non-empty.
    pub(crate) data: Notify,
    /// Wakes connection tasks when the queue drains to its low-water mark.
    pub(crate) space: Notify,
    hwm: usize,
}

impl Inbound {
    pub(crate) fn new(hwm: usize) -> Self {
        Inbound {
            shared: Padded(Mutex::new(VecDeque::new())),
            cache: Padded(Mutex::new(Cache::default())),
            total: Padded(AtomicUsize::new(0)),
            blocked: AtomicUsize::new(0),
            release_every: (hwm / 8).clamp(1, RELEASE_EVERY),
            data: Notify::new(),
            space: Notify::new(),
            hwm,
        }
    }

    /// Below the HWM: connection tasks may read more from their streams.
    pub(crate) fn has_space(&self) -> bool {
        self.total.load(Ordering::Acquire) < self.hwm
    }

    /// How many more messages fit below the HWM.
    pub(crate) fn room(&self) -> usize {
        self.hwm.saturating_sub(self.total.load(Ordering::Acquire))
    }

    /// Append a batch (already decoded from one read; may overshoot the HWM
    /// by that batch, after which the producer stops reading).
    pub(crate) fn push_batch(&self, batch: &mut VecDeque<(u64, Message)>) {
        if batch.is_empty() {
            return;
        }
        let n = batch.len();
        let mut shared = lock(&self.shared);
        // Counted before the consumer can see (and release) the messages, so
        // the count never wraps; whether the queue was empty is decided under
        // the lock too.
        let was_empty = self.total.fetch_add(n, Ordering::AcqRel) == 0;
        if shared.is_empty() {
            // The usual case (the consumer keeps swapping `shared` out):
            // hand the whole batch over in O(1).
            std::mem::swap(&mut *shared, batch);
        } else {
            shared.append(batch);
        }
        drop(shared);
        if was_empty {
            self.data.notify_waiters();
        }
    }

    /// This producer's share of the free room: split between it and the
    /// producers waiting for room (at least one message if there is room).
    pub(crate) fn fair_room(&self) -> usize {
        let room = self.room();
        if room == 0 {
            return 0;
        }
        let waiting = self.blocked.load(Ordering::Acquire);
        (room / waiting.saturating_add(1)).max(1)
    }

    /// Append this producer's fair share of the free room from the front of
    /// `batch`; the rest stays in `batch` (the producer stops reading until it
    /// is delivered). The queue never exceeds the HWM this way. Returns
    /// `true` when the queue was empty before (a waiting consumer was woken).
    pub(crate) fn push_fair(&self, batch: &mut VecDeque<(u64, Message)>) -> bool {
        if batch.is_empty() {
            return false;
        }
        let n = self.fair_room().min(batch.len());
        if n == 0 {
            return false;
        }
        let mut shared = lock(&self.shared);
        // Counted under the lock, before the consumer can release them.
        let was_empty = self.total.fetch_add(n, Ordering::AcqRel) == 0;
        if n == batch.len() {
            if shared.is_empty() {
                // The usual case: hand the whole batch over in O(1).
                std::mem::swap(&mut *shared, batch);
            } else {
                shared.append(batch);
            }
        } else {
            shared.extend(batch.drain(..n));
        }
        drop(shared);
        if was_empty {
            self.data.notify_waiters();
            return true;
        }
        false
    }

    /// Wait for room as a blocked producer (counted for fair shares). If
    /// there is room already, yield once so other producers get a turn.
    pub(crate) async fn wait_room(&self) {
        if self.has_space() {
            tokio::task::yield_now().await;
            return;
        }
        struct Blocked<'a>(&'a AtomicUsize);
        impl Drop for Blocked<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.blocked.fetch_add(1, Ordering::AcqRel);
        let _blocked = Blocked(&self.blocked);
        self.wait_space().await;
    }

    /// Append one message regardless of the HWM (XPUB subscription
    /// notifications, which must not be lost).
    pub(crate) fn push_one(&self, pipe: u64, msg: Message) {
        let mut shared = lock(&self.shared);
        // Counted under the lock, before the consumer can release it.
        let was_empty = self.total.fetch_add(1, Ordering::AcqRel) == 0;
        shared.push_back((pipe, msg));
        drop(shared);
        if was_empty {
            self.data.notify_waiters();
        }
    }

    /// Nothing is queued: `total` is raised before a batch becomes visible
    /// and lowered only after its messages were popped, so zero means there
    /// is nothing to pop (a cheap test, without the consumer's lock).
    pub(crate) fn surely_empty(&self) -> bool {
        self.total.load(Ordering::Acquire) == 0
    }

    #[inline]
    pub(crate) fn pop(&self) -> Option<(u64, Message)> {
        let mut cache = lock(&self.cache);
        let item = match cache.q.pop_front() {
            Some(item) => item,
            None => self.refill(&mut cache)?,
        };
        cache.popped += 1;
        if cache.popped >= self.release_every || cache.q.is_empty() {
            self.release(&mut cache);
        }
        Some(item)
    }

    /// Pop up to `max` messages into `out` under one lock of the consumer's
    /// side (and one update of the count). Returns how many.
    pub(crate) fn pop_many(&self, max: usize, out: &mut Vec<Message>) -> usize {
        let mut cache = lock(&self.cache);
        let mut n = 0;
        while n < max {
            let item = match cache.q.pop_front() {
                Some(item) => item,
                None => match self.refill(&mut cache) {
                    Some(item) => item,
                    None => break,
                },
            };
            out.push(item.1);
            cache.popped += 1;
            n += 1;
        }
        self.release(&mut cache);
        n
    }

    /// The cache ran dry: take everything the producers queued since (kept
    /// out of `pop`'s hot path) and return its first message.
    #[cold]
    #[inline(never)]
    fn refill(&self, cache: &mut Cache) -> Option<(u64, Message)> {
        self.release(cache);
        std::mem::swap(&mut *lock(&self.shared), &mut cache.q);
        interleave(&mut cache.q);
        cache.q.pop_front()
    }

    /// Subtract the messages popped since the last release from `total`
    /// (batched: one contended atomic per up to [`RELEASE_EVERY`] messages) and
    /// wake blocked producers when the count crosses the low-water mark.
    fn release(&self, cache: &mut Cache) {
        let n = std::mem::take(&mut cache.popped);
        if n == 0 {
            return;
        }
        let before = self.total.fetch_sub(n, Ordering::AcqRel);
        let low = self.hwm / 2;
        if before > low && before - n <= low {
            self.space.notify_waiters();
        }
    }

    /// Wait until the queue is below its HWM.
    pub(crate) async fn wait_space(&self) {
        wait_until(&self.space, || self.has_space()).await;
    }
}

/// Fair queuing: reorder a batch taken from the shared queue so that the
/// peers present in it take turns, one message each, keeping each peer's own
/// order. A batch from a single peer (the common case) is left alone.
fn interleave(batch: &mut VecDeque<(u64, Message)>) {
    let Some(&(first, _)) = batch.front() else {
        return;
    };
    if batch.iter().all(|(p, _)| *p == first) {
        return;
    }
    let mut index: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let mut buckets: Vec<(u64, VecDeque<Message>)> = Vec::new();
    for (p, m) in batch.drain(..) {
        let i = *index.entry(p).or_insert_with(|| {
            buckets.push((p, VecDeque::new()));
            buckets.len() - 1
        });
        if let Some(b) = buckets.get_mut(i) {
            b.1.push_back(m);
        }
    }
    loop {
        let mut any = false;
        for (p, q) in &mut buckets {
            if let Some(m) = q.pop_front() {
                batch.push_back((*p, m));
                any = true;
            }
        }
        if !any {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(b: &'static [u8]) -> Message {
        Message::from(Bytes::from_static(b))
    }

    #[test]
    fn pipe_respects_hwm_and_put_back_keeps_order() {
        let p = Pipe::new(1, 2);
        assert!(p.try_push(msg(b"a")).is_ok());
        assert!(p.try_push(msg(b"b")).is_ok());
        assert!(p.try_push(msg(b"c")).is_err());
        let mut taken = VecDeque::new();
        assert!(p.take_all(&mut taken));
        assert_eq!(taken.len(), 2);
        assert!(p.try_push(msg(b"c")).is_ok());
        p.put_back(taken);
        let mut all = VecDeque::new();
        assert!(!p.take_all(&mut all) || all.len() == 3);
        let order: Vec<_> = all
            .into_iter()
            .map(|o| match o {
                Out::Msg(m) => m.frames()[0].clone(),
                _ => Bytes::new(),
            })
            .collect();
        assert_eq!(order, vec![&b"a"[..], &b"b"[..], &b"c"[..]]);
    }

    #[test]
    fn pop_interleaves_peers_and_keeps_each_peers_order() {
        let q = Inbound::new(100);
        let mut batch: VecDeque<_> = [
            (1, msg(b"a1")),
            (1, msg(b"a2")),
            (1, msg(b"a3")),
            (2, msg(b"b1")),
            (2, msg(b"b2")),
        ]
        .into_iter()
        .collect();
        q.push_fair(&mut batch);
        let got: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|(_, m)| m.frames()[0].clone())
            .collect();
        assert_eq!(got, vec![&b"a1"[..], b"b1", b"a2", b"b2", b"a3"]);
    }

    #[test]
    fn push_fair_never_exceeds_the_hwm() {
        let q = Inbound::new(4);
        let mut batch: VecDeque<_> = (0..10).map(|_| (1, msg(b"x"))).collect();
        q.push_fair(&mut batch);
        assert_eq!(batch.len(), 6);
        assert!(!q.has_space());
        q.push_fair(&mut batch);
        assert_eq!(batch.len(), 6);
        for _ in 0..2 {
            q.pop();
        }
        q.push_fair(&mut batch);
        assert_eq!(batch.len(), 4);
    }

    /// Producers on their own threads race a consumer popping as fast as it
    /// can: the count must never drop below what is queued (it used to be
    /// raised only after the messages were visible, so the consumer could
    /// release them first and wrap it to ~`usize::MAX`).
    #[test]
    fn total_never_wraps_with_racing_producers_and_consumer() {
        const PRODUCERS: usize = 3;
        const N: usize = 400_000;
        let q = std::sync::Arc::new(Inbound::new(usize::MAX));
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let q = q.clone();
                std::thread::spawn(move || {
                    for i in 0..N {
                        let mut b: VecDeque<_> = [(p as u64, msg(b"x"))].into_iter().collect();
                        match i % 3 {
                            0 => q.push_one(p as u64, msg(b"x")),
                            1 => q.push_batch(&mut b),
                            _ => {
                                q.push_fair(&mut b);
                            }
                        }
                    }
                })
            })
            .collect();
        let mut got = 0;
        while got < PRODUCERS * N {
            if q.pop().is_some() {
                got += 1;
            }
            let total = q.total.load(Ordering::Acquire);
            assert!(
                total <= PRODUCERS * N,
                "receive queue count wrapped: {total}"
            );
        }
        for p in producers {
            p.join().unwrap();
        }
        assert!(q.pop().is_none());
        assert_eq!(q.total.load(Ordering::Acquire), 0);
    }

    #[test]
    fn inbound_room_and_order() {
        let q = Inbound::new(3);
        assert_eq!(q.room(), 3);
        let mut batch: VecDeque<_> = [(1, msg(b"x")), (2, msg(b"y"))].into_iter().collect();
        q.push_batch(&mut batch);
        assert!(batch.is_empty());
        assert_eq!(q.room(), 1);
        q.push_one(3, msg(b"z"));
        assert!(!q.has_space());
        assert_eq!(q.pop().map(|(p, _)| p), Some(1));
        assert_eq!(q.pop().map(|(p, _)| p), Some(2));
        assert_eq!(q.pop().map(|(p, _)| p), Some(3));
        assert!(q.pop().is_none());
    }
}
