//! Security mechanisms.
//!
//! A mechanism names itself in the greeting, sends its first handshake commands once the peer's
//! greeting is accepted, and consumes handshake commands until it yields the peer's metadata.
//! [`Connection`](crate::Connection) drives it through the private [`Mechanism`] trait: NULL
//! (below), PLAIN ([`crate::plain`]) and CURVE ([`crate::curve`]). A mechanism that encrypts
//! traffic hands the connection a [`Cipher`] once its handshake is complete.

use bytes::{BufMut, Bytes, BytesMut};
use dafka_wire::Reader;

use crate::auth::Authenticator;
use crate::command::{Command, Metadata, put_ready};
use crate::curve::{Cipher, CurveClient, CurveKeyPair, CurveServer};
use crate::error::{CallerError, Error, MalformedError, PeerError};
use crate::frame::{FLAG_COMMAND, put_header};
use crate::plain::{PlainClient, PlainServer};

pub(crate) const HELLO: &[u8] = b"HELLO";
pub(crate) const WELCOME: &[u8] = b"WELCOME";
pub(crate) const INITIATE: &[u8] = b"INITIATE";
pub(crate) const READY: &[u8] = b"READY";

/// Which security mechanism a connection uses, and its role and keys.
///
/// The server side of PLAIN and CURVE asks an [`Authenticator`] about each client (the effect
/// of ZAP in libzmq); [`Authenticator::allow_all`] lets every client in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MechanismConfig {
    /// NULL: no authentication, no encryption (37/ZMTP "The NULL Security Mechanism").
    #[default]
    Null,
    /// PLAIN client (24/ZMTP-PLAIN): credentials in clear, no encryption.
    PlainClient {
        /// At most 255 bytes.
        username: Bytes,
        /// At most 255 bytes.
        password: Bytes,
    },
    /// PLAIN server: the authenticator decides on each client's credentials.
    PlainServer {
        /// Decides per connection.
        authenticator: Authenticator,
    },
    /// CURVE client (25/ZMTP-CURVE, 26/CurveZMQ): authenticated encryption; the server is
    /// known by its long-term public key.
    CurveClient {
        /// Our long-term key pair (the server's authenticator sees the public half).
        keypair: CurveKeyPair,
        /// The server's long-term public key.
        server_key: [u8; 32],
    },
    /// CURVE server: the authenticator decides on each client's public key.
    CurveServer {
        /// Our long-term key pair; clients must know the public half.
        keypair: CurveKeyPair,
        /// Decides per connection.
        authenticator: Authenticator,
    },
}

impl MechanismConfig {
    /// Checks the values a caller gave: PLAIN username and password at most 255 bytes, a
    /// CURVE server key that is not a low-order point (no secret could be shared with it).
    pub fn validate(&self) -> Result<(), CallerError> {
        if let MechanismConfig::CurveClient {
            keypair,
            server_key,
        } = self
            && crate::nacl::BoxKey::precompute(server_key, keypair.secret()).is_none()
        {
            return Err(CallerError::CurveWeakServerKey);
        }
        if let MechanismConfig::PlainClient { username, password } = self {
            for (what, value) in [("username", username), ("password", password)] {
                if value.len() > 255 {
                    return Err(CallerError::CredentialTooLong {
                        what,
                        len: value.len(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether this is the server role (sent as the greeting's as-server flag).
    pub fn is_server(&self) -> bool {
        matches!(
            self,
            MechanismConfig::PlainServer { .. } | MechanismConfig::CurveServer { .. }
        )
    }

    /// Whether a completed handshake proves who the peer is: a CURVE handshake in either role
    /// (the server by its long-term key, the client by its vouch and our authenticator), and
    /// the PLAIN server role (our authenticator admitted the credentials). NULL proves nothing,
    /// nor does a PLAIN client's handshake (the server sends no credentials). A driver trusts
    /// an authenticated peer with more memory than a stranger.
    pub fn authenticates_peer(&self) -> bool {
        matches!(
            self,
            MechanismConfig::PlainServer { .. }
                | MechanismConfig::CurveClient { .. }
                | MechanismConfig::CurveServer { .. }
        )
    }

    pub(crate) fn build(&self, peer_address: &str) -> Box<dyn Mechanism + Send + Sync> {
        match self {
            MechanismConfig::Null => Box::new(NullMechanism),
            MechanismConfig::PlainClient { username, password } => {
                Box::new(PlainClient::new(username.clone(), password.clone()))
            }
            MechanismConfig::PlainServer { authenticator } => Box::new(PlainServer::new(
                authenticator.clone(),
                peer_address.to_owned(),
            )),
            MechanismConfig::CurveClient {
                keypair,
                server_key,
            } => Box::new(CurveClient::new(keypair.clone(), *server_key)),
            MechanismConfig::CurveServer {
                keypair,
                authenticator,
            } => Box::new(CurveServer::new(
                keypair.clone(),
                authenticator.clone(),
                peer_address.to_owned(),
            )),
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

    /// A command frame's body arrived during the handshake (never ERROR: the connection fails
    /// on that for every mechanism); any reply goes to `out`. Returns the peer's metadata once
    /// the handshake is complete, `None` while it goes on.
    fn on_command(&mut self, body: Bytes, out: &mut BytesMut) -> Result<Option<Metadata>, Error>;

    /// Once the handshake is complete: the cipher protecting traffic, if this mechanism
    /// encrypts.
    fn take_cipher(&mut self) -> Option<Cipher> {
        None
    }

    /// Once the handshake is complete, on a CURVE server: the public key the client proved it
    /// holds (the one its authenticator allowed). `None` for every other mechanism and role.
    fn curve_client_key(&self) -> Option<[u8; 32]> {
        None
    }
}

/// Where the client of PLAIN or CURVE is: both wait for WELCOME, then READY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientStep {
    Welcome,
    Ready,
    Done,
}

impl ClientStep {
    pub(crate) fn expecting(self) -> &'static str {
        match self {
            ClientStep::Welcome => "WELCOME",
            ClientStep::Ready | ClientStep::Done => "READY",
        }
    }
}

/// Where the server of PLAIN or CURVE is: both wait for HELLO, then INITIATE, and speak only
/// when the client's HELLO has arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerStep {
    Hello,
    Initiate,
    Done,
}

impl ServerStep {
    pub(crate) fn expecting(self) -> &'static str {
        match self {
            ServerStep::Hello => "HELLO",
            ServerStep::Initiate | ServerStep::Done => "INITIATE",
        }
    }
}

/// Splits a command frame body into its name and a reader over its data.
pub(crate) fn parse_command(body: Bytes) -> Result<(Bytes, Reader), MalformedError> {
    let mut r = Reader::new(body);
    let name_len = r.u8("command name length")?;
    if name_len == 0 {
        return Err(MalformedError::EmptyCommandName);
    }
    let name = r.take(usize::from(name_len), "command name")?;
    Ok((name, r))
}

/// Appends a command frame named `name` whose data is `parts` concatenated.
pub(crate) fn put_command(out: &mut BytesMut, name: &[u8], parts: &[&[u8]]) {
    let len = 1 + name.len() + parts.iter().map(|p| p.len()).sum::<usize>();
    out.reserve(9 + len);
    put_header(out, FLAG_COMMAND, len);
    out.put_u8(name.len() as u8);
    out.put_slice(name);
    for p in parts {
        out.put_slice(p);
    }
}

/// The error for a command the handshake does not expect now.
pub(crate) fn unexpected(expected: &'static str, got: &[u8]) -> Error {
    PeerError::UnexpectedDuringHandshake {
        expected,
        got: String::from_utf8_lossy(got).into_owned(),
    }
    .into()
}

/// Refuses a client: queues `ERROR "400"` (the ZAP status code libzmq sends) and returns the
/// error that fails the connection.
pub(crate) fn refuse(
    mechanism: &'static str,
    (client, reason): (String, String),
    out: &mut BytesMut,
) -> Error {
    // Cannot fail: three bytes of reason.
    let _ = Command::Error {
        reason: Bytes::from_static(b"400"),
    }
    .encode(out);
    PeerError::AuthenticationRefused {
        mechanism,
        client,
        reason,
    }
    .into()
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

    fn on_command(&mut self, body: Bytes, _out: &mut BytesMut) -> Result<Option<Metadata>, Error> {
        match Command::decode(body)? {
            Command::Ready(peer) => Ok(Some(peer)),
            other => Err(unexpected("READY", other.name())),
        }
    }
}
