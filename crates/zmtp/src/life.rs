//! What every connection does at the edges of its life, whether it runs over a
//! stream (`conn.rs`) or in process (`inproc.rs`): announcing the handshake,
//! deciding when a closing socket has lingered enough, handing its pipe back
//! and telling the monitor how it ended.

use std::collections::VecDeque;

use bytes::Bytes;
use dafka_zmtp_proto::{Metadata, SocketType};

use crate::monitor::{ConnectionEnd, PeerId, SocketEvent};
use crate::pipe::Out;
use crate::socket::{Inner, Link, Phase};

/// One connection as its socket (`inner`) and that socket's monitor know it.
pub(crate) struct Life<'a> {
    pub(crate) inner: &'a Inner,
    pub(crate) id: PeerId,
    /// The peer's address as the monitor reports it.
    pub(crate) address: &'a str,
}

impl Life<'_> {
    /// Tells the monitor that the peer of type `socket_type` is attached through `link`; `peer`
    /// makes its identity and READY metadata (only when a monitor listens).
    pub(crate) fn handshake_succeeded(
        &self,
        link: &Link,
        socket_type: SocketType,
        peer: impl FnOnce() -> (Bytes, Metadata),
    ) {
        self.inner.events.emit(|| {
            let (identity, metadata) = peer();
            SocketEvent::HandshakeSucceeded {
                peer: self.id,
                address: self.address.to_owned(),
                socket_type,
                identity,
                metadata,
                routing_id: link.receive.routing_id().cloned(),
            }
        });
    }

    /// Hands the pipe of an attached connection back to the socket: a connecting side keeps
    /// it (with `unsent` back at its front) for the next connection, a bound side's goes away.
    pub(crate) fn detach(&self, link: Option<&Link>, connect_side: bool, unsent: VecDeque<Out>) {
        if let Some(l) = link {
            self.inner.detach(l, connect_side, unsent);
        }
    }

    /// Tells the monitor how the connection ended: `Disconnected` once it was attached
    /// (`was_ready`), else `HandshakeFailed`, except when we closed it ourselves during the
    /// handshake (no failure of the peer's).
    pub(crate) fn ended(&self, was_ready: bool, end: &ConnectionEnd) {
        if !was_ready && matches!(end, ConnectionEnd::Closed) {
            return;
        }
        self.inner.events.emit(|| {
            let (peer, address, reason) = (self.id, self.address.to_owned(), end.duplicate());
            if was_ready {
                SocketEvent::Disconnected {
                    peer,
                    address,
                    reason,
                }
            } else {
                SocketEvent::HandshakeFailed {
                    peer,
                    address,
                    reason,
                }
            }
        });
    }
}

/// Whether a socket in phase `phase` lets its connection go: at once once terminated; once
/// closing, only when what it still has to deliver is out (`drained`, asked only then).
pub(crate) fn lingered(phase: Phase, drained: impl FnOnce() -> bool) -> bool {
    match phase {
        Phase::Terminated => true,
        Phase::Closing => drained(),
        _ => false,
    }
}
