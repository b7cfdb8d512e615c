//! Security mechanisms.
//!
//! A mechanism names itself in the greeting, sends its first handshake commands once the peer's
//! greeting is accepted, and consumes handshake commands until it yields the peer's metadata.
//! [`Connection`](crate::Connection) drives it through the private [`Mechanism`] trait, so another
//! mechanism (PLAIN, CURVE) is a new [`MechanismConfig`] variant plus one trait implementation.
//! Only NULL exists today.

use bytes::BytesMut;

use crate::command::{Command, Metadata, put_ready};
use crate::error::{Error, PeerError};

/// Which security mechanism a connection uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MechanismConfig {
    /// NULL: no authentication, no encryption (37/ZMTP "The NULL Security Mechanism").
    #[default]
    Null,
}

impl MechanismConfig {
    pub(crate) fn build(&self) -> Box<dyn Mechanism + Send + Sync> {
        match self {
            MechanismConfig::Null => Box::new(NullMechanism),
        }
    }
}

/// One side of a security handshake.
pub(crate) trait Mechanism {
    /// The name announced in the greeting.
    fn name(&self) -> &'static str;

    /// The greeting's as-server flag.
    fn as_server(&self) -> bool;

    /// What the handshake waits for next (for error messages).
    fn expecting(&self) -> &'static str;

    /// The peer's greeting was accepted: append the first handshake commands to `out`.
    fn start(&mut self, local: &Metadata, out: &mut BytesMut);

    /// A command arrived during the handshake; any reply goes to `out`. Returns the peer's
    /// metadata once the handshake is complete, `None` while it goes on.
    fn on_command(&mut self, cmd: Command, out: &mut BytesMut) -> Result<Option<Metadata>, Error>;
}

/// NULL: both sides send READY with their metadata at once; the handshake is complete when the
/// peer's READY arrives.
///
/// > To complete a NULL security handshake, both peers SHALL send each other a READY command.
/// > (37/ZMTP) -- and "null = ready *message | error".
struct NullMechanism;

impl Mechanism for NullMechanism {
    fn name(&self) -> &'static str {
        "NULL"
    }

    /// "When a peer uses the NULL security mechanism, the as-server field MUST be zero."
    fn as_server(&self) -> bool {
        false
    }

    fn expecting(&self) -> &'static str {
        "READY"
    }

    fn start(&mut self, local: &Metadata, out: &mut BytesMut) {
        put_ready(local, out);
    }

    fn on_command(&mut self, cmd: Command, _out: &mut BytesMut) -> Result<Option<Metadata>, Error> {
        match cmd {
            Command::Ready(peer) => Ok(Some(peer)),
            // (An ERROR never gets here: the connection fails on it for every mechanism.)
            other => Err(PeerError::UnexpectedDuringHandshake {
                expected: "READY",
                got: String::from_utf8_lossy(other.name()).into_owned(),
            }
            .into()),
        }
    }
}
