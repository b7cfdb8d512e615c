//! In-memory outboxes and a socket around a [`Pattern`] for the pattern tests.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::{
    AttachError, Outbox, Pattern, PatternConfig, PatternError, Refused, Route, Subscription,
};
use crate::{Message, SocketType};

/// A message of `|`-separated frames.
pub(crate) fn msg(text: &str) -> Message {
    text.split('|')
        .map(|f| Bytes::copy_from_slice(f.as_bytes()))
        .collect()
}

/// `msg` back as text; subscriptions as `+prefix` / `-prefix`.
fn text(m: &Message) -> String {
    let frames: Vec<String> = m
        .frames()
        .iter()
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect();
    frames.join("|")
}

#[derive(Debug)]
enum Item {
    Msg(Message),
    Sub(Subscription),
}

/// An outbox holding what it is given, up to `hwm` messages.
#[derive(Debug)]
pub(crate) struct TestPipe {
    id: u64,
    hwm: usize,
    q: Mutex<VecDeque<Item>>,
}

impl TestPipe {
    /// What it holds, as text, in order.
    pub(crate) fn texts(&self) -> Vec<String> {
        self.q
            .lock()
            .unwrap()
            .iter()
            .map(|i| match i {
                Item::Msg(m) => text(m),
                Item::Sub(s) => {
                    let sign = if s.is_subscribe() { '+' } else { '-' };
                    format!("{sign}{}", String::from_utf8_lossy(s.prefix()))
                }
            })
            .collect()
    }
}

impl Outbox for TestPipe {
    fn id(&self) -> u64 {
        self.id
    }

    fn try_push(&self, msg: Message) -> Result<(), Message> {
        if self.q.lock().unwrap().len() >= self.hwm {
            return Err(msg);
        }
        self.q.lock().unwrap().push_back(Item::Msg(msg));
        Ok(())
    }

    fn try_push_each(&self, batch: &[Message], mut wanted: impl FnMut(&Message) -> bool) -> usize {
        let mut dropped = 0;
        for m in batch.iter().filter(|m| wanted(m)) {
            if self.try_push(m.clone()).is_err() {
                dropped += 1;
            }
        }
        dropped
    }

    fn push_force(&self, msg: Message) {
        self.q.lock().unwrap().push_back(Item::Msg(msg));
    }

    fn push_subscription(&self, sub: Subscription) {
        self.q.lock().unwrap().push_back(Item::Sub(sub));
    }

    fn resubscribe(&self, prefixes: Vec<Bytes>) {
        let mut q = self.q.lock().unwrap();
        q.retain(|i| match i {
            Item::Msg(m) => !Subscription::is_message(m),
            Item::Sub(_) => false,
        });
        for p in prefixes.into_iter().rev() {
            q.push_front(Item::Sub(Subscription::Subscribe(p)));
        }
    }
}

/// A socket of one type around a [`Pattern`] of in-memory outboxes.
pub(crate) struct Sock {
    pub(crate) pattern: Pattern<TestPipe>,
    /// The ids of the outboxes reported full, in order.
    pub(crate) full: RefCell<Vec<u64>>,
    /// The subscriptions handed up on detach, with their peer.
    pub(crate) handed_up: Vec<(u64, Subscription)>,
}

impl Sock {
    pub(crate) fn new(socket_type: SocketType) -> Self {
        Sock::with(socket_type, |_| {})
    }

    pub(crate) fn with(socket_type: SocketType, config: impl FnOnce(&mut PatternConfig)) -> Self {
        let mut c = PatternConfig::default();
        config(&mut c);
        Sock {
            pattern: Pattern::new(socket_type, c),
            full: RefCell::default(),
            handed_up: Vec::new(),
        }
    }

    pub(crate) fn pipe(id: u64, hwm: usize) -> Arc<TestPipe> {
        Arc::new(TestPipe {
            id,
            hwm,
            q: Mutex::default(),
        })
    }

    /// A bound side's peer without identity, attached.
    pub(crate) fn bound(&mut self, id: u64, hwm: usize) -> Arc<TestPipe> {
        self.attach(id, hwm, b"").unwrap()
    }

    /// A bound side's peer announcing `identity`, attached.
    pub(crate) fn attach(
        &mut self,
        id: u64,
        hwm: usize,
        identity: &[u8],
    ) -> Result<Arc<TestPipe>, AttachError> {
        let identity = Bytes::copy_from_slice(identity);
        let a = self
            .pattern
            .attach(None, || Self::pipe(id, hwm), &identity, None)?;
        Ok(a.pipe)
    }

    /// A connecting side's outbox, before its handshake.
    pub(crate) fn pending(&mut self, id: u64, hwm: usize) -> Arc<TestPipe> {
        let p = Self::pipe(id, hwm);
        self.pattern.add_pending(p.clone());
        p
    }

    pub(crate) fn send(&mut self, m: Message) -> Result<Route, Refused<PatternError>> {
        let full = &self.full;
        self.pattern.on_send(
            m,
            false,
            |_| Ok(()),
            |p: &TestPipe| full.borrow_mut().push(p.id),
        )
    }

    pub(crate) fn send_many(
        &mut self,
        msgs: &mut VecDeque<Message>,
    ) -> Result<usize, PatternError> {
        let full = &self.full;
        self.pattern.on_send_many(
            msgs,
            false,
            |_| Ok(()),
            |p: &TestPipe| full.borrow_mut().push(p.id),
        )
    }

    pub(crate) fn detach(&mut self, id: u64, connect_side: bool) -> bool {
        let handed = &mut self.handed_up;
        self.pattern
            .detach(id, connect_side, |p, s| handed.push((p, s)))
    }

    /// What the application receives of `m` from peer `pipe`, as text.
    pub(crate) fn receive(&mut self, pipe: u64, m: &str) -> Option<String> {
        self.pattern.on_receive(pipe, msg(m)).map(|m| text(&m))
    }
}
