//! What one connection does with the messages its peer sends, before the socket's receive
//! queue: decided once when the peer attaches, applied without the socket's state.

use bytes::Bytes;

use super::Subscription;
use crate::{Message, SocketType};

/// A connection's receive rule (from [`Pattern::attach`](super::Pattern::attach)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receive {
    /// Queued as it comes (PULL, DEALER, PAIR, REQ, REP, SUB, XSUB: their rules apply when
    /// the application takes it).
    AsIs,
    /// PUSH never receives: what a peer sends it is ignored.
    Ignore,
    /// ROUTER: the peer's routing id (and, with `router_peer_key`, its CURVE key or an empty
    /// frame) put in front.
    Routed {
        /// The routing id.
        routing_id: Bytes,
        /// The frame after it, if any.
        key: Option<Bytes>,
    },
    /// PUB and XPUB: `0x01`/`0x00` + prefix messages are subscriptions (29/PUBSUB: from 3.0
    /// peers and XSUBs); other messages are queued by an XPUB and ignored by a PUB.
    Subscriptions {
        /// XPUB.
        keep_messages: bool,
    },
}

/// A received message, by its connection's [`Receive`] rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// For the socket's receive queue.
    Message(Message),
    /// A subscription from the peer (see
    /// [`Pattern::on_subscription`](super::Pattern::on_subscription)).
    Subscription(Subscription),
    /// Nothing.
    Ignored,
}

impl Receive {
    pub(super) fn new(
        socket_type: SocketType,
        routing_id: Option<Bytes>,
        key: Option<Bytes>,
    ) -> Self {
        match (socket_type, routing_id) {
            (SocketType::Push, _) => Receive::Ignore,
            (SocketType::Pub, _) => Receive::Subscriptions {
                keep_messages: false,
            },
            (SocketType::Xpub, _) => Receive::Subscriptions {
                keep_messages: true,
            },
            (_, Some(routing_id)) => Receive::Routed { routing_id, key },
            _ => Receive::AsIs,
        }
    }

    /// Whether every message is queued as it comes.
    #[inline]
    pub fn is_as_is(&self) -> bool {
        matches!(self, Receive::AsIs)
    }

    /// Whether a message may be a subscription (PUB, XPUB).
    #[inline]
    pub fn takes_subscriptions(&self) -> bool {
        matches!(self, Receive::Subscriptions { .. })
    }

    /// ROUTER: the peer's routing id.
    #[inline]
    pub fn routing_id(&self) -> Option<&Bytes> {
        match self {
            Receive::Routed { routing_id, .. } => Some(routing_id),
            _ => None,
        }
    }

    /// What `msg` from the peer becomes.
    #[inline]
    pub fn on_receive(&self, mut msg: Message) -> Received {
        match self {
            Receive::AsIs => Received::Message(msg),
            Receive::Ignore => Received::Ignored,
            Receive::Routed { routing_id, key } => {
                if let Some(key) = key {
                    msg.push_front(key.clone());
                }
                msg.push_front(routing_id.clone());
                Received::Message(msg)
            }
            Receive::Subscriptions { keep_messages } => match Subscription::from_message(&msg) {
                Some(sub) => Received::Subscription(sub),
                None if *keep_messages => Received::Message(msg),
                None => Received::Ignored,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::testing::msg;
    use super::*;

    #[test]
    fn each_type_receives_by_its_rule() {
        let as_is = Receive::new(SocketType::Dealer, None, None);
        assert_eq!(as_is.on_receive(msg("x")), Received::Message(msg("x")));
        let push = Receive::new(SocketType::Push, None, None);
        assert_eq!(push.on_receive(msg("x")), Received::Ignored);
        let router = Receive::new(
            SocketType::Router,
            Some(Bytes::from_static(b"id")),
            Some(Bytes::new()),
        );
        assert_eq!(router.on_receive(msg("x")), Received::Message(msg("id||x")));
        assert_eq!(router.routing_id().map(|b| &b[..]), Some(&b"id"[..]));
        let publ = Receive::new(SocketType::Pub, None, None);
        let xpub = Receive::new(SocketType::Xpub, None, None);
        let s = Received::Subscription(Subscription::Subscribe(Bytes::from_static(b"t")));
        assert_eq!(publ.on_receive(msg("\x01t")), s);
        assert_eq!(xpub.on_receive(msg("\x01t")), s);
        assert_eq!(publ.on_receive(msg("data")), Received::Ignored);
        assert_eq!(xpub.on_receive(msg("data")), Received::Message(msg("data")));
        // Two frames are a message, whatever the first byte.
        assert_eq!(
            xpub.on_receive(msg("\x01t|x")),
            Received::Message(msg("\x01t|x"))
        );
    }
}
