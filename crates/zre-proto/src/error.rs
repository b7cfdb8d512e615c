//! Errors, split by who is at fault.

use thiserror::Error;

use crate::Uuid;

/// A beacon could not be decoded. Beacons that fail are dropped silently (43/ZRE: "a node that
/// receives an invalid beacon SHALL silently discard it"); the driver may count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BeaconError {
    /// Neither 22 (version `0x01`) nor 54 bytes (version `0x03`, with a CURVE key).
    #[error("beacon of {len} bytes: a ZRE beacon is 22 or 54 bytes")]
    Size {
        /// Bytes received.
        len: usize,
    },
    /// The first three bytes are not `Z R E`.
    #[error("beacon does not start with \"ZRE\"")]
    Protocol,
    /// The version byte does not match the size (`0x01` for 22 bytes, `0x03` for 54).
    #[error("beacon version {version:#04x} with {len} bytes")]
    Version {
        /// The version byte.
        version: u8,
        /// Bytes received.
        len: usize,
    },
}

/// A ZRE message could not be decoded.
///
/// | Variant | Who is at fault | What a node does |
/// |---|---|---|
/// | [`DecodeError::Malformed`] | the peer: bytes that break the ZRE grammar | drop the message, log |
/// | [`DecodeError::Limit`] | the peer: a well-formed message over [`Limits`](crate::Limits) | drop the message, log |
///
/// Neither counts as a sequence gap: the message is dropped before its sequence is read into
/// the peer's state, so the next good message (one number further) shows the gap and the peer
/// is dropped then, as zyre does.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes do not follow the ZRE grammar.
    #[error("malformed ZRE message: {0}")]
    Malformed(#[from] MalformedError),
    /// The message is well formed but larger than the configured limits.
    #[error("ZRE message over a limit: {0}")]
    Limit(#[from] LimitError),
}

impl From<dafka_wire::ReadError> for DecodeError {
    fn from(e: dafka_wire::ReadError) -> Self {
        DecodeError::Malformed(MalformedError::Wire(e))
    }
}

/// The peer's bytes break the ZRE grammar (as zyre and pyre write it).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum MalformedError {
    /// A message with no frame at all.
    #[error("message has no frame")]
    NoFrames,
    /// Frame 1 does not start with the signature `AA A1`.
    #[error("signature is {0:#06x}, expected 0xaaa1")]
    Signature(u16),
    /// An id byte that is no ZRE command.
    #[error("unknown ZRE command id {id:#04x}")]
    UnknownId {
        /// The id byte.
        id: u8,
    },
    /// A version byte other than 2 (what zyre and pyre send) or 3 (what 43/ZRE says).
    #[error("version byte is {version:#04x}, expected 0x02 or 0x03")]
    Version {
        /// The byte received.
        version: u8,
    },
    /// A command that carries no content arrived with more than one frame.
    #[error("{kind} has {got} frames, expected 1")]
    FrameCount {
        /// The command.
        kind: &'static str,
        /// Frames received.
        got: usize,
    },
    /// A field ran past the end of frame 1, or frame 1 had bytes left after its last field.
    #[error("{0}")]
    Wire(#[from] dafka_wire::ReadError),
    /// A text field (group, name, endpoint, header) is not UTF-8.
    #[error("{what} is not UTF-8")]
    NotUtf8 {
        /// The field.
        what: &'static str,
    },
}

/// A well-formed message over a configured [`Limits`](crate::Limits) value. Counts are refused
/// before any list is allocated.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LimitError {
    /// A HELLO announces more groups than `Limits::max_groups`.
    #[error("HELLO announces {count} groups, over the limit of {max}")]
    TooManyGroups {
        /// The announced count.
        count: u32,
        /// The limit.
        max: usize,
    },
    /// A HELLO announces more headers than `Limits::max_headers`.
    #[error("HELLO announces {count} headers, over the limit of {max}")]
    TooManyHeaders {
        /// The announced count.
        count: u32,
        /// The limit.
        max: usize,
    },
    /// A `longstr` field (group in HELLO, header value) longer than `Limits::max_long_string`.
    #[error("{what} of {len} bytes is over the limit of {max} bytes")]
    StringTooLong {
        /// The field.
        what: &'static str,
        /// Its announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// WHISPER or SHOUT content over `Limits::max_content_frames` frames.
    #[error("content of {count} frames is over the limit of {max} frames")]
    TooManyFrames {
        /// Content frames received.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// WHISPER or SHOUT content over `Limits::max_content_bytes` bytes in all.
    #[error("content of {len} bytes is over the limit of {max} bytes")]
    ContentTooLarge {
        /// Content bytes received.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// A text the caller gave cannot go into a ZRE `string` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum StringError {
    /// Longer than 255 bytes: the field has a 1-byte length.
    #[error("{len} bytes; a ZRE string field holds at most 255")]
    TooLong {
        /// The length given.
        len: usize,
    },
}

/// Well-formed input that a peer should not have sent. The node ignores it, or drops the peer
/// as zyre does (said per variant); its other peers are untouched. The driver logs the reason.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PeerError {
    /// The ROUTER routing id is not `0x01` + a 16-byte UUID (a DEALER that is no ZRE peer).
    #[error("routing id of {len} bytes is not 0x01 + a 16-byte UUID")]
    Identity {
        /// Its length.
        len: usize,
    },
    /// A message that did not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A command other than HELLO from a peer whose HELLO has not arrived: ignored (zyre: "ignore
    /// command if peer isn't ready").
    #[error("{kind} from {peer} before its HELLO: ignored")]
    BeforeHello {
        /// The command.
        kind: &'static str,
        /// The sender.
        peer: Uuid,
    },
    /// A sequence number other than the next one: messages were lost, so the peer is dropped
    /// (EXIT) and found again by its next beacon or HELLO, as zyre does.
    #[error("sequence gap from {peer}: expected {expected}, got {got}; peer dropped")]
    SequenceGap {
        /// The sender.
        peer: Uuid,
        /// The number expected.
        expected: u16,
        /// The number received.
        got: u16,
    },
    /// A new peer while the table already holds `Config::max_peers`: ignored.
    #[error("peer table full ({max} peers): {peer} ignored")]
    TooManyPeers {
        /// The peer refused.
        peer: Uuid,
        /// The limit.
        max: usize,
    },
    /// A HELLO whose endpoint is this node's own (a node talking to itself through a second
    /// identity): ignored, as zyre does.
    #[error("HELLO from {peer} announces this node's own endpoint: ignored")]
    OwnEndpoint {
        /// The sender.
        peer: Uuid,
    },
    /// CURVE mode: a beacon or HELLO without an acceptable public key (none, not on the
    /// allow-list, or another than the peer's known one): ignored, no downgrade.
    #[error("{reason} from {peer}: ignored (CURVE mode)")]
    CurveRefused {
        /// The sender.
        peer: Uuid,
        /// What was wrong.
        reason: &'static str,
    },
}

/// The local program used the API wrongly.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CallerError {
    /// A WHISPER to a peer this node does not know (or whose HELLO has not arrived).
    #[error("no peer {0} to whisper to")]
    UnknownPeer(Uuid),
    /// An operation that needs a started node (`start` first), or a second `start`.
    #[error("node is {0}")]
    State(&'static str),
    /// A text too long for its field.
    #[error("{what}: {error}")]
    String {
        /// The field.
        what: &'static str,
        /// What is wrong.
        error: StringError,
    },
    /// A configuration value out of range.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
}
