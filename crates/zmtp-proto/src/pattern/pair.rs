//! PAIR: one peer.

use super::{AttachError, Outbox, PatternError, Peer, Refused, Route};
use crate::Message;

/// The exclusive pair.
#[derive(Debug, Default)]
pub struct Pair;

impl Pair {
    /// Refuses a second peer: one other than `own` (the connecting side's outbox) that is
    /// ready, or any other peer at all for a bound side.
    pub(super) fn check_free<P: Outbox>(
        peers: &[Peer<P>],
        own: Option<u64>,
    ) -> Result<(), AttachError> {
        let busy = peers
            .iter()
            .any(|e| Some(e.pipe.id()) != own && (e.ready || own.is_none()));
        if busy {
            return Err(AttachError::PairBusy);
        }
        Ok(())
    }

    /// Queues `msg` to the peer (before its handshake too, unless `immediate`), or hands it
    /// back.
    pub fn on_send<P: Outbox, E: From<PatternError>>(
        peers: &[Peer<P>],
        immediate: bool,
        msg: Message,
        mut full: impl FnMut(&P),
    ) -> Result<Route, Refused<E>> {
        match peers.first() {
            Some(e) if e.ready || !immediate => match e.pipe.try_push(msg) {
                Ok(()) => Ok(Route::Peer(e.pipe.id())),
                Err(m) => {
                    full(&e.pipe);
                    Err(Refused::Block(m))
                }
            },
            _ => Err(Refused::Block(msg)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Sock, msg};
    use super::super::{AttachError, Refused, Route};
    use crate::SocketType;

    #[test]
    fn one_peer_only() {
        let mut s = Sock::new(SocketType::Pair);
        let a = s.bound(1, 1);
        assert_eq!(s.attach(2, 1, b"").unwrap_err(), AttachError::PairBusy);
        assert_eq!(s.send(msg("x")).unwrap(), Route::Peer(1));
        assert!(matches!(s.send(msg("y")), Err(Refused::Block(_))));
        assert_eq!(a.texts(), ["x"]);
        s.detach(1, false);
        s.bound(2, 1);
    }

    #[test]
    fn a_connecting_side_reattaches_its_own_pipe() {
        let mut s = Sock::new(SocketType::Pair);
        let p = s.pending(1, 4);
        let id = bytes::Bytes::new();
        let again = s.pattern.attach(Some(&p), || unreachable!(), &id, None);
        assert!(again.is_ok());
        // A bound peer is refused while the connecting side's pipe exists, ready or not.
        s.detach(1, true);
        assert_eq!(s.attach(2, 1, b"").unwrap_err(), AttachError::PairBusy);
    }
}
