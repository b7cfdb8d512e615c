//! Errors, split by who is at fault.

use thiserror::Error;

/// Any error of this crate. Match on the variant to know who is at fault.
///
/// | Variant            | Who is at fault | What the driver does                          |
/// |--------------------|-----------------|-----------------------------------------------|
/// | [`Error::Malformed`] | the peer: bytes that break the ZMTP grammar | log, close this connection |
/// | [`Error::Peer`]      | the peer: well-formed bytes, but a protocol violation, an incompatible peer, a timeout | log, close (flush [`Connection::poll_transmit`](crate::Connection::poll_transmit) first: it may hold an ERROR command) |
/// | [`Error::Limit`]     | the peer (or the caller, when sending): a frame or message over [`Limits`](crate::Limits) | log, close |
/// | [`Error::Caller`]    | the local program: an API used out of order or with invalid arguments | report to the caller; the connection itself is unaffected unless it already failed |
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// The peer sent bytes that do not follow the ZMTP grammar.
    #[error("malformed input from peer: {0}")]
    Malformed(#[from] MalformedError),
    /// The peer sent well-formed bytes that violate the protocol, is incompatible, or went silent.
    #[error("peer error: {0}")]
    Peer(#[from] PeerError),
    /// A frame or message is larger than the configured [`Limits`](crate::Limits).
    #[error("limit exceeded: {0}")]
    Limit(#[from] LimitError),
    /// The local caller used the API wrongly.
    #[error("caller error: {0}")]
    Caller(#[from] CallerError),
}

/// A field read by the shared [`dafka_wire::Reader`] is reported in ZMTP's terms.
impl From<dafka_wire::ReadError> for MalformedError {
    fn from(e: dafka_wire::ReadError) -> Self {
        match e {
            dafka_wire::ReadError::Truncated {
                what,
                needed,
                available,
            } => MalformedError::Truncated {
                what,
                needed,
                available,
            },
            dafka_wire::ReadError::TrailingBytes { what, count } => {
                MalformedError::TrailingBytes { what, count }
            }
            // ReadError is non_exhaustive; any later variant is still the peer's bytes.
            other => MalformedError::Wire(other),
        }
    }
}

/// The peer's bytes break the ZMTP grammar.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum MalformedError {
    /// A frame's flags byte has one of the reserved bits 7-3 set.
    #[error(
        "frame flags {flags:#04x} set reserved bits (ZMTP: bits 7-3 are reserved and must be zero)"
    )]
    ReservedFlags {
        /// The flags byte as received.
        flags: u8,
    },
    /// A command frame had the MORE flag set; commands are always a single frame.
    #[error("command frame has the MORE flag set (ZMTP: a command is always a single frame)")]
    CommandWithMore,
    /// A long frame announced a size with the most significant bit set.
    #[error("long frame size {size:#018x} has its top bit set")]
    LongSizeTopBit {
        /// The 64-bit size as received.
        size: u64,
    },
    /// A field ran past the end of its enclosing body.
    #[error("{what} is truncated: needs {needed} bytes, only {available} left in the body")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        available: usize,
    },
    /// A body had bytes left over after its last field.
    #[error("{what} has {count} unexpected trailing bytes")]
    TrailingBytes {
        /// The body being decoded.
        what: &'static str,
        /// How many bytes were left over.
        count: usize,
    },
    /// Any other fault of the shared wire reader.
    #[error("{0}")]
    Wire(dafka_wire::ReadError),
    /// A command frame had an empty name.
    #[error("command name is empty (ZMTP: a command name is 1 to 255 characters)")]
    EmptyCommandName,
    /// A metadata property had an empty name.
    #[error("metadata property name is empty (ZMTP: a zero-sized name is not valid)")]
    EmptyPropertyName,
    /// A metadata property name was not valid UTF-8.
    #[error("metadata property name is not valid UTF-8")]
    PropertyNameNotUtf8,
    /// A security handshake command whose size its mechanism does not allow (CURVE commands
    /// have fixed sizes or minimum sizes).
    #[error("{command} command of {size} bytes, expected {expected}")]
    CommandSize {
        /// The command.
        command: &'static str,
        /// Its body size as received.
        size: usize,
        /// What the mechanism requires, e.g. `"200 bytes"`.
        expected: &'static str,
    },
    /// A CURVE HELLO announcing a CurveZMQ version other than 1.0.
    #[error("CURVE HELLO announces version {major}.{minor}, only 1.0 exists")]
    CurveVersion {
        /// Major version byte.
        major: u8,
        /// Minor version byte.
        minor: u8,
    },
    /// After a CURVE handshake, a frame that is not a MESSAGE command.
    #[error("frame after the CURVE handshake is not a MESSAGE box (all traffic is boxed)")]
    NotCurveMessage,
    /// A CURVE MESSAGE box whose flags byte sets bits other than MORE (0x01) and COMMAND (0x02).
    #[error("CURVE MESSAGE flags {0:#04x} set reserved bits")]
    CurveFlags(u8),
    /// A PING or PONG context was longer than 16 bytes.
    #[error("{command} context is {len} bytes long (ZMTP: the context must not exceed 16 octets)")]
    ContextTooLong {
        /// `"PING"` or `"PONG"`.
        command: &'static str,
        /// The context length received.
        len: usize,
    },
}

/// The peer's bytes are well-formed but the peer misbehaved, cannot be talked to, or went silent.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PeerError {
    /// The peer's greeting did not start with the ZMTP 3 signature (a ZMTP 1.0 peer, or not ZMTP at all).
    #[error(
        "peer did not send a ZMTP 3 signature (byte 0 = {byte0:#04x}, byte 9 = {byte9:#04x}): a ZMTP 1.0 peer or not ZeroMQ"
    )]
    NotZmtp3 {
        /// Byte 0 of the greeting (ZMTP 2+/3 send 0xFF).
        byte0: u8,
        /// Byte 9 of the greeting (ZMTP 2+/3 send a byte with bit 0 set, 0x7F); 0 if not yet received.
        byte9: u8,
    },
    /// The peer announced a major version below 3 (ZMTP 2.0); only ZMTP 3.x is spoken.
    #[error("peer speaks ZMTP major version {major}; only ZMTP 3.0 and later are supported")]
    UnsupportedVersion {
        /// The major version byte received.
        major: u8,
    },
    /// The peer's security mechanism differs from ours.
    #[error(
        "peer uses security mechanism {theirs:?} but we use {ours:?} (ZMTP: the mechanisms must match exactly)"
    )]
    MechanismMismatch {
        /// Our mechanism name.
        ours: String,
        /// The peer's mechanism name (NUL padding removed, lossy UTF-8).
        theirs: String,
    },
    /// A command other than the one the handshake expects (or a message) arrived during the handshake.
    #[error("peer sent {got} during the handshake, expected {expected}")]
    UnexpectedDuringHandshake {
        /// What the handshake expected.
        expected: &'static str,
        /// What arrived (a command name or "a message frame").
        got: String,
    },
    /// The peer's READY had no Socket-Type property.
    #[error("peer's READY has no Socket-Type property (ZMTP: the sender must specify it)")]
    MissingSocketType,
    /// The peer's Socket-Type is not a socket type this implementation knows.
    #[error("peer announced unknown Socket-Type {0:?}")]
    UnknownSocketType(String),
    /// The peer's socket type cannot talk to ours.
    #[error("peer socket type {theirs} is not compatible with our {ours}")]
    IncompatibleSocketType {
        /// Our socket type name.
        ours: &'static str,
        /// The peer's socket type name.
        theirs: &'static str,
    },
    /// The peer sent an ERROR command.
    #[error("peer sent ERROR: {reason:?}")]
    ErrorCommand {
        /// The reason the peer gave (lossy UTF-8).
        reason: String,
    },
    /// A command frame arrived between two frames of a multipart message.
    #[error("peer sent a command frame inside a multipart message")]
    CommandInsideMessage,
    /// Our authenticator refused the client (we sent ERROR "400").
    #[error("{mechanism} client {client:?} refused: {reason}")]
    AuthenticationRefused {
        /// `"PLAIN"` or `"CURVE"`.
        mechanism: &'static str,
        /// The client: its CURVE public key in Z85, or its PLAIN username (lossy UTF-8).
        client: String,
        /// The authenticator's reason.
        reason: String,
    },
    /// A CURVE box did not open: the peer used another key than the one we expect (a wrong
    /// server key, an impostor) or the bytes were altered on the way.
    #[error("CURVE {what} box does not open (wrong key, or tampered)")]
    CurveBox {
        /// Which box: `"HELLO"`, `"WELCOME"`, `"cookie"`, `"INITIATE"`, `"vouch"`, `"READY"`, `"MESSAGE"`.
        what: &'static str,
    },
    /// A CURVE box opened but its contents contradict the handshake (a cookie or vouch for
    /// another connection, a HELLO signature that is not zeros).
    #[error("CURVE {0} does not match this connection")]
    CurveMismatch(&'static str),
    /// A CURVE nonce that is not greater than the last one accepted: a replayed or reordered
    /// box.
    #[error("CURVE nonce {got} is not above the last accepted {last} (replayed or reordered)")]
    CurveNonce {
        /// The nonce received.
        got: u64,
        /// The last nonce accepted from this peer.
        last: u64,
    },
    /// The handshake did not complete within the configured time.
    #[error("handshake did not complete within {0:?}")]
    HandshakeTimeout(std::time::Duration),
    /// Nothing arrived within the heartbeat timeout after we sent a PING.
    #[error("no traffic from peer within the heartbeat timeout of {0:?} after our PING")]
    HeartbeatTimeout(std::time::Duration),
    /// Nothing arrived within the TTL the peer announced in its PING.
    #[error("no traffic from peer within the {0:?} TTL it announced in its PING")]
    PingTtlExpired(std::time::Duration),
}

/// A frame or a message exceeds the configured [`Limits`](crate::Limits).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LimitError {
    /// One frame's body is larger than `max_frame_size`.
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// The frame size (announced or attempted).
        size: u64,
        /// The configured maximum.
        max: u64,
    },
    /// A multipart message's cumulative size is larger than `max_message_size`.
    #[error(
        "message of at least {size} bytes (bodies + 32 bytes per frame) exceeds the limit of {max} bytes"
    )]
    MessageTooLarge {
        /// The cumulative cost so far, see [`Limits`](crate::Limits).
        size: u64,
        /// The configured maximum.
        max: u64,
    },
}

/// The local caller used the API wrongly; nothing the peer did.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CallerError {
    /// Messages and post-handshake commands can be sent only after the handshake.
    #[error("the handshake is not complete yet")]
    NotReady,
    /// The connection already failed; it must be closed.
    #[error("the connection has already failed and must be closed")]
    Closed,
    /// A message needs at least one frame.
    #[error("a message needs at least one frame")]
    EmptyMessage,
    /// READY and ERROR belong to the security handshake and are sent by the [`Connection`](crate::Connection) itself.
    #[error("{0} is a handshake command and cannot be sent by the caller")]
    HandshakeCommand(&'static str),
    /// A metadata property name is empty, longer than 255 bytes, or uses a character outside `A-Z a-z 0-9 - _ . +`.
    #[error("invalid metadata property name {0:?} (1 to 255 of A-Z a-z 0-9 - _ . +)")]
    InvalidPropertyName(String),
    /// A metadata property value is longer than 2^31-1 bytes.
    #[error("metadata property value of {0} bytes exceeds 2^31-1")]
    PropertyValueTooLong(usize),
    /// `Socket-Type` and `Identity` are set by the [`Connection`](crate::Connection) from [`Config`](crate::Config).
    #[error(
        "property {0:?} is set by the connection itself; use Config.socket_type / Config.identity"
    )]
    ReservedProperty(String),
    /// The identity is longer than 255 bytes (libzmq caps routing ids at 255).
    #[error("identity of {0} bytes exceeds 255 bytes")]
    IdentityTooLong(usize),
    /// A command name is empty or longer than 255 bytes.
    #[error("command name of {0} bytes is not 1 to 255 bytes long")]
    InvalidCommandName(usize),
    /// An ERROR reason is longer than 255 bytes.
    #[error("ERROR reason of {0} bytes exceeds 255 bytes")]
    ErrorReasonTooLong(usize),
    /// A PING or PONG context is longer than 16 bytes.
    #[error("PING/PONG context of {0} bytes exceeds 16 bytes")]
    ContextTooLong(usize),
    /// A PLAIN username or password is longer than 255 bytes.
    #[error("PLAIN {what} of {len} bytes exceeds 255 bytes")]
    CredentialTooLong {
        /// `"username"` or `"password"`.
        what: &'static str,
        /// Its length.
        len: usize,
    },
    /// A CURVE server key that is a low-order point: X25519 with it gives a secret everyone
    /// knows, so libsodium (and libzmq) refuse it.
    #[error("CURVE server key is a low-order point (no shared secret)")]
    CurveWeakServerKey,
}
