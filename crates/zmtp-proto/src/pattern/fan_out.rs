//! PUB and XPUB (29/PUBSUB): every message to each peer subscribed to its topic.

use std::collections::VecDeque;

use bytes::Bytes;

use super::{
    MatchRun, Outbox, PatternConfig, PatternError, Peer, Route, SubSet, Subscription,
    SubscriptionChange, SubscriptionLimit, ready,
};
use crate::Message;

/// The subscriptions of a PUB or XPUB (each peer's are in its [`Peer`]).
#[derive(Debug)]
pub struct FanOut {
    xpub: bool,
    /// XPUB: for each prefix, how many peers subscribed to it.
    overall: SubSet,
}

impl FanOut {
    pub(super) fn new(xpub: bool) -> Self {
        FanOut {
            xpub,
            overall: SubSet::default(),
        }
    }

    /// XPUB: the welcome message goes to every new peer first.
    pub(super) fn welcome<P: Outbox>(&self, pipe: &P, welcome: Option<&Bytes>) {
        if self.xpub
            && let Some(w) = welcome
        {
            pipe.push_force(Message::from(w.clone()));
        }
    }

    /// A peer left: XPUB hands up the cancel of each prefix no other peer holds.
    pub(super) fn forget<P>(&mut self, gone: &Peer<P>, mut hand_up: impl FnMut(u64, Subscription))
    where
        P: Outbox,
    {
        if !self.xpub {
            return;
        }
        for prefix in gone.subs.prefixes() {
            if self.overall.remove(prefix) {
                hand_up(gone.pipe.id(), Subscription::Cancel(prefix.clone()));
            }
        }
    }

    /// Queues `msg` to every ready peer subscribed to its topic (its first frame). A slow
    /// subscriber loses messages (29/PUBSUB): `full` is told.
    pub fn on_send<P: Outbox>(peers: &[Peer<P>], msg: &Message, mut full: impl FnMut(&P)) -> Route {
        let topic = msg.frames().first().map_or(&[][..], |f| &f[..]);
        for e in ready(peers) {
            if e.subs.matches(topic) && e.pipe.try_push(msg.clone()).is_err() {
                full(&e.pipe);
            }
        }
        Route::Fanned
    }

    /// Sends the front of `msgs` up to the first message refused (empty, or by `check`;
    /// dropped) to every matching peer: one [`Outbox::try_push_each`] per peer, the topics
    /// matched over the run. A PUB never waits: `msgs` is left with what follows the refused
    /// message. `Ok` with the count if any was sent.
    pub fn on_send_many<P: Outbox, E: From<PatternError>>(
        peers: &[Peer<P>],
        msgs: &mut VecDeque<Message>,
        closed: bool,
        check: impl Fn(&Message) -> Result<(), E>,
        mut full: impl FnMut(&P),
    ) -> Result<usize, E> {
        // The batch is the front of `msgs` (taken in place: a batch is up to thousands of
        // messages, not worth a list of its own).
        let mut refused = None;
        let mut k = 0;
        for msg in msgs.iter() {
            if msg.is_empty() {
                refused = Some(PatternError::EmptyMessage.into());
                break;
            }
            if let Err(e) = check(msg) {
                refused = Some(e);
                break;
            }
            k += 1;
        }
        // Taken (and the refused one dropped) whatever happens below.
        let taken = k + usize::from(refused.is_some());
        if closed {
            msgs.drain(..taken);
            return Err(PatternError::Closed.into());
        }
        let batch = &msgs.make_contiguous()[..k];
        for e in ready(peers) {
            let mut run = MatchRun::default();
            let matches = |m: &Message| match m.frames().first() {
                Some(topic) => e.subs.matches_in_run(topic, &mut run),
                None => e.subs.matches(&[]),
            };
            if e.pipe.try_push_each(batch, matches) > 0 {
                full(&e.pipe);
            }
        }
        msgs.drain(..taken);
        match refused {
            Some(e) if k == 0 => Err(e),
            _ => Ok(k),
        }
    }

    /// Refuses a prefix longer than `max_subscription_size`.
    pub(super) fn check_prefix(
        sub: &Subscription,
        config: &PatternConfig,
    ) -> Result<(), SubscriptionLimit> {
        let (len, max) = (sub.prefix().len(), config.max_subscription_size);
        if max != 0 && len > max {
            return Err(SubscriptionLimit::PrefixTooLong { len, max });
        }
        Ok(())
    }

    /// A peer's SUBSCRIBE or CANCEL (its prefix checked), into its `subs`. Fails when the peer
    /// would exceed `max_subscriptions`.
    pub(super) fn on_subscription(
        &mut self,
        subs: &mut SubSet,
        sub: Subscription,
        config: &PatternConfig,
    ) -> Result<Option<SubscriptionChange>, SubscriptionLimit> {
        let prefix = sub.prefix();
        if !sub.is_subscribe() {
            if !subs.remove(prefix) {
                return Ok(None);
            }
            let hand_up = self.xpub && self.overall.remove(prefix);
            return Ok(Some(SubscriptionChange {
                subscription: sub,
                hand_up,
            }));
        }
        let mut new_overall = false;
        if !subs.contains(prefix) {
            let max = config.max_subscriptions;
            if max != 0 && subs.len() >= max {
                return Err(SubscriptionLimit::TooMany(max));
            }
            // A copy: a slice would pin the whole read chunk it came in.
            let owned = Bytes::copy_from_slice(prefix);
            subs.add(owned.clone());
            new_overall = self.xpub && self.overall.add(owned);
        }
        Ok(Some(SubscriptionChange {
            subscription: sub,
            hand_up: self.xpub && (new_overall || config.xpub_verbose),
        }))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::testing::{Sock, msg};
    use super::super::{Subscription, SubscriptionChange, SubscriptionLimit};
    use crate::SocketType;

    fn sub(p: &'static [u8]) -> Subscription {
        Subscription::Subscribe(Bytes::from_static(p))
    }

    fn cancel(p: &'static [u8]) -> Subscription {
        Subscription::Cancel(Bytes::from_static(p))
    }

    #[test]
    fn messages_go_to_matching_subscribers_only() {
        let mut s = Sock::new(SocketType::Pub);
        let a = s.bound(1, 10);
        let b = s.bound(2, 10);
        s.pattern.on_subscription(1, sub(b"w.")).unwrap();
        s.pattern.on_subscription(2, sub(b"")).unwrap();
        s.send(msg("w.paris|20")).unwrap();
        s.send(msg("s.result")).unwrap();
        assert_eq!(a.texts(), ["w.paris|20"]);
        assert_eq!(b.texts(), ["w.paris|20", "s.result"]);
        s.pattern.on_subscription(1, cancel(b"w.")).unwrap();
        s.send(msg("w.rome")).unwrap();
        assert_eq!(a.texts().len(), 1);
    }

    #[test]
    fn a_batch_matches_like_single_sends_and_drops_at_the_hwm() {
        let mut s = Sock::new(SocketType::Pub);
        let a = s.bound(1, 2);
        s.pattern.on_subscription(1, sub(b"a")).unwrap();
        let mut msgs = ["a1", "b", "a2", "a3"].map(msg).into_iter().collect();
        assert_eq!(s.send_many(&mut msgs), Ok(4));
        assert!(msgs.is_empty());
        assert_eq!(a.texts(), ["a1", "a2"]);
        assert_eq!(s.full.borrow().as_slice(), [1]);
        // An empty message ends the batch: what went before is sent, it is dropped.
        let mut msgs = [msg("x"), crate::Message::new(), msg("y")]
            .into_iter()
            .collect();
        assert_eq!(s.send_many(&mut msgs), Ok(1));
        assert_eq!(msgs.len(), 1);
    }

    #[test]
    fn xpub_hands_up_new_prefixes_and_the_last_cancel() {
        let mut s = Sock::new(SocketType::Xpub);
        s.bound(1, 10);
        s.bound(2, 10);
        let up = |c: Option<SubscriptionChange>| c.map(|c| c.hand_up);
        assert_eq!(
            up(s.pattern.on_subscription(1, sub(b"t")).unwrap()),
            Some(true)
        );
        assert_eq!(
            up(s.pattern.on_subscription(2, sub(b"t")).unwrap()),
            Some(false)
        );
        // Twice from one peer: set semantics, still reported to the monitor.
        assert_eq!(
            up(s.pattern.on_subscription(2, sub(b"t")).unwrap()),
            Some(false)
        );
        assert_eq!(
            up(s.pattern.on_subscription(1, cancel(b"t")).unwrap()),
            Some(false)
        );
        assert_eq!(
            up(s.pattern.on_subscription(1, cancel(b"t")).unwrap()),
            None
        );
        // The last holder leaves: its cancel is handed up.
        s.detach(2, false);
        assert_eq!(s.handed_up, [(2, cancel(b"t"))]);
    }

    #[test]
    fn xpub_verbose_hands_up_every_subscribe_and_welcomes() {
        let mut s = Sock::with(SocketType::Xpub, |c| {
            c.xpub_verbose = true;
            c.xpub_welcome = Some(Bytes::from_static(b"hello"));
        });
        let a = s.bound(1, 10);
        assert_eq!(a.texts(), ["hello"]);
        s.bound(2, 10);
        for peer in [1, 2] {
            let c = s.pattern.on_subscription(peer, sub(b"t")).unwrap().unwrap();
            assert!(c.hand_up);
        }
    }

    #[test]
    fn limits_are_enforced_per_peer() {
        let mut s = Sock::with(SocketType::Pub, |c| {
            c.max_subscription_size = 3;
            c.max_subscriptions = 2;
        });
        s.bound(1, 10);
        assert_eq!(
            s.pattern.on_subscription(1, sub(b"long")),
            Err(SubscriptionLimit::PrefixTooLong { len: 4, max: 3 })
        );
        s.pattern.on_subscription(1, sub(b"a")).unwrap();
        s.pattern.on_subscription(1, sub(b"b")).unwrap();
        s.pattern.on_subscription(1, sub(b"a")).unwrap();
        assert_eq!(
            s.pattern.on_subscription(1, sub(b"c")),
            Err(SubscriptionLimit::TooMany(2))
        );
        // Unknown peers and other socket types ignore subscriptions.
        assert_eq!(s.pattern.on_subscription(9, sub(b"a")), Ok(None));
        let mut pull = Sock::new(SocketType::Pull);
        pull.bound(1, 10);
        assert_eq!(pull.pattern.on_subscription(1, sub(b"a")), Ok(None));
    }
}
