//! ROUTER: peers by routing id.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use super::{AttachError, Outbox, PatternError, Peer, Refused, Route};
use crate::Message;

/// The routing table of a ROUTER.
#[derive(Debug)]
pub struct Router<P> {
    /// Routing id -> the outbox of that peer. Every route is to a peer of the table: `forget`
    /// removes it with its peer.
    routes: HashMap<Bytes, Arc<P>>,
    /// The last generated routing id.
    last_id: u32,
}

impl<P> Default for Router<P> {
    fn default() -> Self {
        Router {
            routes: HashMap::new(),
            last_id: 0,
        }
    }
}

impl<P: Outbox> Router<P> {
    /// The routing id of a peer announcing `identity`, and the peer it is taken from (with
    /// `handover`; that peer loses its id in `peers`).
    pub(super) fn assign(
        &mut self,
        identity: &Bytes,
        handover: bool,
        peers: &mut [Peer<P>],
    ) -> Result<(Bytes, Option<u64>), AttachError> {
        if identity.is_empty() {
            // libzmq: a peer without identity gets 0x00 + a 32-bit counter.
            let rid = loop {
                self.last_id = self.last_id.wrapping_add(1);
                let mut b = BytesMut::with_capacity(5);
                b.put_u8(0x00);
                b.put_u32(self.last_id);
                let b = b.freeze();
                if !self.routes.contains_key(&b) {
                    break b;
                }
            };
            return Ok((rid, None));
        }
        let Some(old) = self.routes.get(identity).map(|p| p.id()) else {
            return Ok((identity.clone(), None));
        };
        if !handover {
            return Err(AttachError::DuplicateRoutingId);
        }
        // Handover: the old connection is closed (as libzmq terminates its pipe); replies go to
        // the new one.
        if let Some(e) = peers.iter_mut().find(|e| e.pipe.id() == old) {
            e.routing_id = None;
        }
        Ok((identity.clone(), Some(old)))
    }

    pub(super) fn insert(&mut self, rid: Bytes, pipe: Arc<P>) {
        self.routes.insert(rid, pipe);
    }

    pub(super) fn forget(&mut self, gone: &Peer<P>) {
        if let Some(rid) = &gone.routing_id
            && self.routes.get(rid).map(|p| p.id()) == Some(gone.pipe.id())
        {
            self.routes.remove(rid);
        }
    }

    pub(super) fn clear(&mut self) {
        self.routes.clear();
    }

    /// Sends `msg` (its routing id `rid` taken off) to the peer `rid` names. Unknown ids and
    /// full peers drop the message, or with `mandatory` fail and hand it back (routing id on).
    pub fn on_send<E: From<PatternError>>(
        &self,
        rid: Bytes,
        msg: Message,
        mandatory: bool,
        mut full: impl FnMut(&P),
    ) -> Result<Route, Refused<E>> {
        match self.routes.get(&rid) {
            None if mandatory => Err(Refused::Fail(PatternError::HostUnreachable(rid).into())),
            None => Ok(Route::Dropped),
            Some(_) if msg.is_empty() => Ok(Route::Dropped),
            Some(p) => match p.try_push(msg) {
                Ok(()) => Ok(Route::Peer(p.id())),
                Err(mut m) if mandatory => {
                    full(p);
                    m.push_front(rid);
                    Err(Refused::Block(m))
                }
                Err(_) => {
                    full(p);
                    Ok(Route::Dropped)
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Sock, msg};
    use super::super::{AttachError, PatternError, Refused, Route};
    use crate::SocketType;

    #[test]
    fn routes_by_identity_and_generated_ids() {
        let mut s = Sock::new(SocketType::Router);
        let a = s.attach(1, 10, b"alice").unwrap();
        let anon = s.attach(2, 10, b"").unwrap();
        assert_eq!(s.send(msg("alice|hi")).unwrap(), Route::Peer(1));
        assert_eq!(a.texts(), ["hi"]);
        assert_eq!(s.send(msg("\0\0\0\0\x01|yo")).unwrap(), Route::Peer(2));
        assert_eq!(anon.texts(), ["yo"]);
        assert_eq!(s.send(msg("bob|lost")).unwrap(), Route::Dropped);
        // Only the routing id: nothing to deliver.
        assert_eq!(s.send(msg("alice")).unwrap(), Route::Dropped);
    }

    #[test]
    fn mandatory_fails_unknown_ids_and_hands_back_when_full() {
        let mut s = Sock::with(SocketType::Router, |c| c.router_mandatory = true);
        let _a = s.attach(1, 1, b"a").unwrap();
        assert!(matches!(
            s.send(msg("b|x")),
            Err(Refused::Fail(PatternError::HostUnreachable(_)))
        ));
        s.send(msg("a|1")).unwrap();
        let Err(Refused::Block(back)) = s.send(msg("a|2")) else {
            panic!("not handed back");
        };
        assert_eq!(back, msg("a|2"));
        assert_eq!(s.full.borrow().as_slice(), [1]);
    }

    #[test]
    fn duplicate_identity_is_refused_or_handed_over() {
        let mut s = Sock::new(SocketType::Router);
        s.attach(1, 10, b"x").unwrap();
        assert_eq!(
            s.attach(2, 10, b"x").unwrap_err(),
            AttachError::DuplicateRoutingId
        );
        let mut s = Sock::with(SocketType::Router, |c| c.router_handover = true);
        s.attach(1, 10, b"x").unwrap();
        let id = bytes::Bytes::from_static(b"x");
        let new = s
            .pattern
            .attach(None, || Sock::pipe(2, 10), &id, None)
            .unwrap();
        assert_eq!(new.evicted, Some(1));
        assert_eq!(s.send(msg("x|to the new one")).unwrap(), Route::Peer(2));
        // The old peer leaving does not take the route with it.
        s.detach(1, false);
        assert_eq!(s.send(msg("x|again")).unwrap(), Route::Peer(2));
    }

    #[test]
    fn a_departed_peer_loses_its_route() {
        let mut s = Sock::with(SocketType::Router, |c| c.router_mandatory = true);
        s.attach(1, 10, b"a").unwrap();
        assert!(s.detach(1, false));
        assert!(matches!(
            s.send(msg("a|x")),
            Err(Refused::Fail(PatternError::HostUnreachable(_)))
        ));
    }
}
