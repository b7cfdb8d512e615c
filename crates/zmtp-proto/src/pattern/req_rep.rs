//! REQ and REP (28/REQREP): lockstep, and the envelope of the request.

use bytes::Bytes;

use super::{LoadBalance, Outbox, PatternError, Peer, Refused, Route};
use crate::Message;

/// REQ: one request at a time, load-balanced, its reply taken from the peer asked only.
#[derive(Debug, Default)]
pub struct Req {
    lb: LoadBalance,
    /// The peer the outstanding request went to.
    waiting: Option<u64>,
}

impl Req {
    /// Sends a request: the empty delimiter in front, then load-balanced. `check` (the size
    /// limits) sees it with its delimiter.
    pub fn on_send<P: Outbox, E: From<PatternError>>(
        &mut self,
        peers: &[Peer<P>],
        immediate: bool,
        mut msg: Message,
        check: impl Fn(&Message) -> Result<(), E>,
        full: impl FnMut(&P),
    ) -> Result<Route, Refused<E>> {
        if self.waiting.is_some() {
            return Err(Refused::Fail(
                PatternError::InvalidState("REQ must receive the reply before sending again")
                    .into(),
            ));
        }
        // 28/REQREP: "The REQ socket MUST prefix the message with an empty delimiter frame."
        msg.push_front(Bytes::new());
        check(&msg).map_err(Refused::Fail)?;
        match self.lb.on_send(peers, immediate, msg, full) {
            Ok(id) => {
                self.waiting = Some(id);
                Ok(Route::Peer(id))
            }
            Err(mut m) => {
                m.pop_front();
                Err(Refused::Block(m))
            }
        }
    }

    pub(super) fn check_receive(&self) -> Result<(), PatternError> {
        match self.waiting {
            None => Err(PatternError::InvalidState(
                "REQ must send a request before receiving",
            )),
            Some(_) => Ok(()),
        }
    }

    /// Only the reply from the peer asked, starting with the empty delimiter, is accepted
    /// (without it); anything else is dropped.
    pub fn on_receive(&mut self, pipe: u64, mut msg: Message) -> Option<Message> {
        if self.waiting != Some(pipe) || msg.frames().first().is_none_or(|f| !f.is_empty()) {
            return None;
        }
        msg.pop_front();
        if msg.is_empty() {
            return None;
        }
        self.waiting = None;
        Some(msg)
    }
}

/// REP: one request at a time, the reply sent with the request's envelope to its peer.
#[derive(Debug, Default)]
pub struct Rep {
    /// The envelope of the request being answered, and its peer.
    envelope: Option<(u64, Vec<Bytes>)>,
}

impl Rep {
    /// Sends the reply: the request's envelope in front, to the requester. `check` (the size
    /// limits) sees it with its envelope; refused, the request stays answerable. A requester
    /// that left or is full loses the reply, as in libzmq.
    pub fn on_send<P: Outbox, E: From<PatternError>>(
        &mut self,
        peers: &[Peer<P>],
        msg: Message,
        check: impl Fn(&Message) -> Result<(), E>,
        mut full: impl FnMut(&P),
    ) -> Result<Route, Refused<E>> {
        let Some((pipe, envelope)) = &self.envelope else {
            return Err(Refused::Fail(
                PatternError::InvalidState("REP must receive a request before sending").into(),
            ));
        };
        let pipe = *pipe;
        let mut out: Message = envelope.iter().cloned().collect();
        for f in msg.into_frames() {
            out.push(f);
        }
        check(&out).map_err(Refused::Fail)?;
        self.envelope = None;
        let Some(e) = peers.iter().find(|e| e.pipe.id() == pipe) else {
            return Ok(Route::Dropped);
        };
        match e.pipe.try_push(out) {
            Ok(()) => Ok(Route::Peer(pipe)),
            Err(_) => {
                full(&e.pipe);
                Ok(Route::Dropped)
            }
        }
    }

    pub(super) fn check_receive(&self) -> Result<(), PatternError> {
        match self.envelope {
            Some(_) => Err(PatternError::InvalidState(
                "REP must send the reply before receiving",
            )),
            None => Ok(()),
        }
    }

    /// 28/REQREP: strips everything up to and including the empty delimiter, kept for the
    /// reply. A request without delimiter or without body is dropped.
    pub fn on_receive(&mut self, pipe: u64, mut msg: Message) -> Option<Message> {
        // Split once (a message of millions of frames must not cost one shift of the rest per
        // envelope frame).
        let delimiter = msg.frames().iter().position(|f| f.is_empty())?;
        let envelope = msg.split_front(delimiter + 1).into_frames();
        if msg.is_empty() {
            return None;
        }
        self.envelope = Some((pipe, envelope));
        Some(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Sock, msg};
    use super::super::{PatternError, Refused, Route};
    use crate::SocketType;

    #[test]
    fn req_prefixes_the_delimiter_and_takes_only_its_reply() {
        let mut s = Sock::new(SocketType::Req);
        assert!(s.pattern.check_receive(false).is_err());
        let a = s.bound(1, 10);
        let _b = s.bound(2, 10);
        assert_eq!(s.send(msg("q")).unwrap(), Route::Peer(1));
        assert_eq!(a.texts(), ["|q"]);
        assert!(matches!(
            s.send(msg("again")),
            Err(Refused::Fail(PatternError::InvalidState(_)))
        ));
        assert_eq!(s.pattern.check_receive(false), Ok(()));
        // Another peer's message, and one without delimiter, are dropped.
        assert_eq!(s.receive(2, "|r"), None);
        assert_eq!(s.receive(1, "r"), None);
        assert_eq!(s.receive(1, ""), None);
        assert_eq!(s.receive(1, "|r").as_deref(), Some("r"));
        assert!(s.pattern.check_receive(false).is_err());
        assert_eq!(s.send(msg("q2")).unwrap(), Route::Peer(2));
    }

    #[test]
    fn req_without_room_hands_back_the_request_as_given() {
        let mut s = Sock::new(SocketType::Req);
        let _a = s.bound(1, 0);
        let Err(Refused::Block(m)) = s.send(msg("q")) else {
            panic!("not handed back");
        };
        assert_eq!(m, msg("q"));
        assert!(s.pattern.check_receive(false).is_err());
    }

    #[test]
    fn rep_replies_with_the_envelope_to_the_requester() {
        let mut s = Sock::new(SocketType::Rep);
        let a = s.bound(1, 10);
        assert!(matches!(
            s.send(msg("r")),
            Err(Refused::Fail(PatternError::InvalidState(_)))
        ));
        assert_eq!(s.receive(1, "no delimiter"), None);
        assert_eq!(s.receive(1, "id|"), None);
        assert_eq!(s.receive(1, "id|hop||q").as_deref(), Some("q"));
        assert!(s.pattern.check_receive(false).is_err());
        assert_eq!(s.send(msg("r")).unwrap(), Route::Peer(1));
        assert_eq!(a.texts(), ["id|hop||r"]);
        // The requester left: the reply is dropped.
        assert_eq!(s.receive(9, "|q").as_deref(), Some("q"));
        assert_eq!(s.send(msg("r")).unwrap(), Route::Dropped);
    }
}
