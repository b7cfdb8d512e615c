//! PULL, SUB and XSUB: messages taken from every peer in turn (the driver's receive queue is
//! fair); SUB filters them by its subscriptions, XSUB sends to every peer.

use bytes::Bytes;

use super::{Outbox, Peer, Route, SubSet, Subscription, ready};
use crate::{Message, SocketType};

/// The receiving side of PULL, SUB and XSUB.
#[derive(Debug)]
pub struct FairQueue {
    socket_type: SocketType,
    /// SUB, XSUB: our subscriptions (counted), sent first to every new peer.
    subs: SubSet,
}

impl FairQueue {
    pub(super) fn new(socket_type: SocketType) -> Self {
        FairQueue {
            socket_type,
            subs: SubSet::default(),
        }
    }

    fn subscribes(&self) -> bool {
        self.socket_type != SocketType::Pull
    }

    /// SUB, XSUB: a new connection gets our subscriptions first.
    pub(super) fn resubscribe<P: Outbox>(&self, pipe: &P) {
        if self.subscribes() {
            pipe.resubscribe(self.subs.prefixes().cloned().collect());
        }
    }

    /// XSUB: a subscription message (`0x01`/`0x00` + prefix) updates our subscriptions and goes
    /// to every ready peer whatever its high-water mark (a cancel only once its last reference
    /// is gone); any other message goes to every ready peer with room. `None` (not supported)
    /// for PULL and SUB.
    pub fn on_send<P: Outbox>(
        &mut self,
        peers: &[Peer<P>],
        msg: Message,
        mut full: impl FnMut(&P),
    ) -> Option<Route> {
        if self.socket_type != SocketType::Xsub {
            return None;
        }
        if let Some(sub) = Subscription::from_message(&msg) {
            let forward = match sub {
                Subscription::Subscribe(prefix) => {
                    self.subs.add(prefix);
                    true
                }
                Subscription::Cancel(prefix) => self.subs.remove(&prefix),
            };
            if forward {
                for e in ready(peers) {
                    e.pipe.push_force(msg.clone());
                }
            }
        } else {
            for e in ready(peers) {
                if e.pipe.try_push(msg.clone()).is_err() {
                    full(&e.pipe);
                }
            }
        }
        Some(Route::Fanned)
    }

    /// SUB: whether the application gets `msg` (its first frame starts with a subscribed
    /// prefix). The others take every message.
    pub fn on_receive(&self, msg: Message) -> Option<Message> {
        if self.socket_type != SocketType::Sub {
            return Some(msg);
        }
        let topic = msg.frames().first().map_or(&[][..], |f| &f[..]);
        self.subs.matches(topic).then_some(msg)
    }

    /// SUB: the subscriptions received messages are filtered by.
    pub fn filter(&self) -> Option<&SubSet> {
        (self.socket_type == SocketType::Sub).then_some(&self.subs)
    }

    /// SUB: adds a subscription, or cancels one reference to it, and tells every ready peer
    /// (libzmq forwards every subscribe, but a cancel only once the last reference is gone).
    pub(super) fn subscribe<P: Outbox>(&mut self, peers: &[Peer<P>], prefix: &[u8], on: bool) {
        let prefix = Bytes::copy_from_slice(prefix);
        let item = if on {
            self.subs.add(prefix.clone());
            Subscription::Subscribe(prefix)
        } else if self.subs.remove(&prefix) {
            Subscription::Cancel(prefix)
        } else {
            return;
        };
        for e in ready(peers) {
            e.pipe.push_subscription(item.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Sock, msg};
    use super::super::{PatternError, Refused};
    use crate::SocketType;

    #[test]
    fn sub_filters_and_tells_its_peers() {
        let mut s = Sock::new(SocketType::Sub);
        let a = s.bound(1, 10);
        assert_eq!(s.receive(1, "t.1"), None);
        s.pattern.subscribe(b"t.", true, false).unwrap();
        s.pattern.subscribe(b"t.", true, false).unwrap();
        assert_eq!(s.receive(1, "t.1|x").as_deref(), Some("t.1|x"));
        assert_eq!(s.receive(1, "u"), None);
        s.pattern.subscribe(b"t.", false, false).unwrap();
        s.pattern.subscribe(b"t.", false, false).unwrap();
        s.pattern.subscribe(b"never", false, false).unwrap();
        assert_eq!(a.texts(), ["+t.", "+t.", "-t."]);
        assert!(matches!(
            s.send(msg("x")),
            Err(Refused::Fail(PatternError::NotSupported { .. }))
        ));
        assert_eq!(
            s.pattern.subscribe(b"x", true, true),
            Err(PatternError::Closed)
        );
    }

    #[test]
    fn a_reconnection_gets_the_subscriptions_first() {
        let mut s = Sock::new(SocketType::Sub);
        let p = s.pending(1, 10);
        s.pattern.subscribe(b"a", true, false).unwrap();
        s.pattern.subscribe(b"b", true, false).unwrap();
        // Not ready: nothing told yet.
        assert!(p.texts().is_empty());
        let id = bytes::Bytes::new();
        s.pattern
            .attach(Some(&p), || unreachable!(), &id, None)
            .unwrap();
        let mut got = p.texts();
        got.sort();
        assert_eq!(got, ["+a", "+b"]);
        // Reconnected: the subscriptions once, not again on top.
        s.detach(1, true);
        s.pattern
            .attach(Some(&p), || unreachable!(), &id, None)
            .unwrap();
        assert_eq!(p.texts().len(), 2);
    }

    #[test]
    fn xsub_forwards_subscriptions_and_messages() {
        let mut s = Sock::new(SocketType::Xsub);
        let a = s.bound(1, 1);
        s.send(msg("\x01t")).unwrap();
        s.send(msg("\x01t")).unwrap();
        s.send(msg("\x00t")).unwrap();
        s.send(msg("\x00t")).unwrap();
        s.send(msg("\x00never")).unwrap();
        assert_eq!(a.texts(), ["\x01t", "\x01t", "\x00t"]);
        // Past the high-water mark an ordinary message is dropped.
        s.send(msg("up")).unwrap();
        assert_eq!(s.full.borrow().as_slice(), [1]);
        // XSUB passes every message through.
        assert_eq!(s.receive(1, "any").as_deref(), Some("any"));
    }

    #[test]
    fn pull_neither_sends_nor_filters() {
        let mut s = Sock::new(SocketType::Pull);
        s.bound(1, 1);
        assert!(s.send(msg("x")).is_err());
        assert_eq!(s.receive(1, "x").as_deref(), Some("x"));
        assert!(s.pattern.subscribe(b"x", true, false).is_err());
    }
}
