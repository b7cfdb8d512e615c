//! Errors, split by who is at fault.

use thiserror::Error;

/// A message or beacon could not be decoded.
///
/// | Variant | Who is at fault | What a node does |
/// |---|---|---|
/// | [`DecodeError::Malformed`] | the peer: bytes that break the Dafka grammar | drop the message, log (rate limited) |
/// | [`DecodeError::Limit`] | the peer: a well-formed message over [`Limits`](crate::Limits) | drop the message, log |
///
/// Neither closes anything: Dafka runs over PUB/SUB, where one bad message says nothing about
/// the next one.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes do not follow the Dafka grammar.
    #[error("malformed Dafka message: {0}")]
    Malformed(#[from] MalformedError),
    /// The message is well formed but larger than the configured limits.
    #[error("Dafka message over a limit: {0}")]
    Limit(#[from] LimitError),
}

impl From<dafka_wire::ReadError> for DecodeError {
    fn from(e: dafka_wire::ReadError) -> Self {
        DecodeError::Malformed(MalformedError::Wire(e))
    }
}

/// The peer's bytes break the Dafka grammar (as the reference implementation writes it).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum MalformedError {
    /// A message with no frame at all.
    #[error("message has no frame")]
    NoFrames,
    /// Frame 1 starts with a byte that is no Dafka command id.
    #[error("unknown Dafka command id {id:#04x}")]
    UnknownId {
        /// The first byte of frame 1.
        id: u8,
    },
    /// The message has the wrong number of frames for its kind.
    #[error("{kind} has {got} frames, expected {expected}")]
    FrameCount {
        /// The message kind (or "beacon").
        kind: &'static str,
        /// Frames the kind has on the wire.
        expected: usize,
        /// Frames received.
        got: usize,
    },
    /// The version byte after the topic prefix is not `0x01`.
    #[error("version byte is {version:#04x}, expected 0x01")]
    Version {
        /// The byte received.
        version: u8,
    },
    /// A field ran past the end of frame 1 ([`Truncated`](dafka_wire::ReadError::Truncated)),
    /// frame 1 had bytes left after its last field
    /// ([`TrailingBytes`](dafka_wire::ReadError::TrailingBytes)), or the topic prefix had no
    /// terminating NUL ([`Unterminated`](dafka_wire::ReadError::Unterminated)).
    #[error("{0}")]
    Wire(#[from] dafka_wire::ReadError),
    /// An address (node UUID) is not 32 upper-case hexadecimal characters.
    #[error("{what} is not a node UUID as 32 upper-case hex characters ({len} bytes)")]
    Address {
        /// The field (or topic prefix) that should hold the UUID.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// A record's extras start with flags holding a bit this version does not
    /// know (see [`record`](crate::record)).
    #[error("record flags {flags:#04x} are not a known combination")]
    RecordFlags {
        /// The flags byte received.
        flags: u8,
    },
    /// A record header name is not UTF-8.
    #[error("record header name is not UTF-8")]
    HeaderName,
    /// A message with records and their metadata (META-RECORD, DIRECT-META-RECORDS) whose
    /// frame 1 ends before the metadata of every record.
    #[error("{kind} carries {records} records but metadata for fewer")]
    MetaCount {
        /// The message kind.
        kind: &'static str,
        /// Records (content frames) in the message.
        records: usize,
    },
    /// A group message's group name breaks the rules of
    /// [`GroupName`](crate::group::GroupName).
    #[error("{kind}: {error}")]
    GroupName {
        /// The message kind.
        kind: &'static str,
        /// What is wrong with it.
        error: GroupNameError,
    },
    /// A GROUP-HEARTBEAT's or OFFSET-COMMIT's flags hold a bit this version does not know.
    #[error("{kind} flags {flags:#04x} hold an unknown bit")]
    GroupFlags {
        /// The message kind.
        kind: &'static str,
        /// The flags byte received.
        flags: u8,
    },
    /// An OFFSET-COMMIT with no offset.
    #[error("OFFSET-COMMIT without offsets")]
    NoOffsets,
    /// A topic name breaks the rules of [`Topic`](crate::Topic).
    #[error("{what}: {error}")]
    Topic {
        /// The field holding the topic.
        what: &'static str,
        /// What is wrong with it.
        error: TopicError,
    },
    /// A RECORD or HEAD whose topic prefix differs from its `subject` field (the reference
    /// always writes the same topic name in both).
    #[error("{kind}: the topic prefix and the subject field name different topics")]
    TopicMismatch {
        /// The message kind.
        kind: &'static str,
    },
    /// A DIRECT-RECORDS whose records would run past the largest offset (`u64::MAX`).
    #[error("DIRECT-RECORDS: the offsets of its records run past 2^64 - 1")]
    OffsetOverflow,
    /// A DIRECT-MISSING whose range is empty (its end not above its first offset).
    #[error("DIRECT-MISSING: empty range {from}..{to}")]
    EmptyRange {
        /// First offset.
        from: u64,
        /// End.
        to: u64,
    },
    /// A beacon frame that should be text is not UTF-8.
    #[error("beacon {what} is not UTF-8")]
    NotUtf8 {
        /// The frame.
        what: &'static str,
    },
    /// A node beacon's port frame is not a decimal number from 0 to 65535 without leading zeros.
    #[error("beacon port {text:?} is not a decimal port number")]
    Port {
        /// The frame as received (lossy UTF-8).
        text: String,
    },
    /// A message on the beacon sockets that is neither a beacon (`B`) nor the welcome (`W`).
    #[error("beacon-socket message starts with an unknown frame ({len} bytes)")]
    UnknownBeacon {
        /// Length of its first frame.
        len: usize,
    },
}

/// A well-formed message over a configured [`Limits`](crate::Limits) value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LimitError {
    /// A record's content is larger than `Limits::max_content`.
    #[error("record content of {len} bytes is over the limit of {max} bytes")]
    ContentTooLarge {
        /// Content length received.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A CONSUMER-HELLO or DIRECT-TOPICS announces more topics than `Limits::max_topics`;
    /// refused before any list is allocated.
    #[error("{kind} announces {count} topics, over the limit of {max}")]
    TooManyTopics {
        /// The message kind.
        kind: &'static str,
        /// The announced count.
        count: u32,
        /// The limit.
        max: usize,
    },
    /// A group message announces more offsets than `Limits::max_offsets`; refused before
    /// any list is allocated.
    #[error("{kind} announces {count} offsets, over the limit of {max}")]
    TooManyOffsets {
        /// The message kind.
        kind: &'static str,
        /// The announced count.
        count: u32,
        /// The limit.
        max: usize,
    },
    /// A record announces more headers than `Limits::max_headers`; refused before any list
    /// is allocated.
    #[error("record announces {count} headers, over the limit of {max}")]
    TooManyHeaders {
        /// The announced count.
        count: u32,
        /// The limit.
        max: usize,
    },
    /// A beacon text field (host, endpoint) is longer than `Limits::max_endpoint`.
    #[error("beacon {what} of {len} bytes is over the limit of {max} bytes")]
    BeaconFieldTooLong {
        /// The frame.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// A topic name that cannot be put on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TopicError {
    /// Longer than 255 bytes: the `subject` field has a 1-byte length.
    #[error("topic name is {len} bytes long; at most 255 fit the subject field")]
    TooLong {
        /// The length given.
        len: usize,
    },
    /// Contains a NUL byte, which ends the topic prefix of frame 1.
    #[error("topic name contains a NUL byte, which ends the topic prefix on the wire")]
    ContainsNul,
}

/// A consumer group name that cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum GroupNameError {
    /// Empty: a consumer without a group is given none, not an empty one.
    #[error("a group name cannot be empty")]
    Empty,
    /// Longer than 255 bytes (a topic name's limit: the name is its heartbeats' topic prefix).
    #[error("group name is {len} bytes long; at most 255")]
    TooLong {
        /// The length given.
        len: usize,
    },
    /// Contains a NUL byte, which would end its subscription prefix on the wire.
    #[error("group name contains a NUL byte")]
    ContainsNul,
}

/// Well-formed messages that a peer should not have sent to this node. The state machine
/// ignores them (its state is unchanged); the driver logs the reason.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PeerError {
    /// A message about another topic than this node's.
    #[error("{kind} for topic {got:?}, this node's topic is {ours:?}")]
    WrongTopic {
        /// The message kind.
        kind: &'static str,
        /// The topic received (lossy UTF-8).
        got: String,
        /// This node's topic (lossy UTF-8).
        ours: String,
    },
    /// A message addressed to another partition or node (a subscription prefix matched more
    /// than it should, or a peer sent it to the wrong node).
    #[error("{kind} addressed to {to}, not to this node")]
    NotForUs {
        /// The message kind.
        kind: &'static str,
        /// The node it names.
        to: crate::NodeId,
    },
    /// A message of a new partition while the consumer already tracks its maximum.
    #[error("a new partition would exceed the limit of {max} partitions")]
    PartitionLimit {
        /// The limit.
        max: usize,
    },
    /// An ACK for an offset this producer has not produced yet.
    #[error("ACK for offset {acked}, but the next offset to produce is {next}")]
    AckBeyondHead {
        /// The offset acknowledged.
        acked: u64,
        /// This producer's next offset.
        next: u64,
    },
}

/// A peer announcement the discovery refuses ([`Discovery`](crate::Discovery)). Its state is
/// unchanged but for a known peer that announced an unusable new endpoint, which is dropped;
/// the driver logs the reason.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// A new peer while [`DiscoveryConfig::max_peers`](crate::DiscoveryConfig::max_peers) are
    /// connected.
    #[error("peer {node} ignored: {max} peers connected already")]
    TooManyPeers {
        /// The peer announced.
        node: crate::NodeId,
        /// The limit.
        max: usize,
    },
    /// A publisher endpoint other than `tcp://host:port`.
    #[error("peer {node}: endpoint {endpoint:?} is not tcp://host:port")]
    BadEndpoint {
        /// The peer announced.
        node: crate::NodeId,
        /// The endpoint it announced.
        endpoint: String,
    },
}

/// The local program used the API wrongly.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CallerError {
    /// A record larger than the configured maximum.
    #[error("record of {len} bytes is over the maximum of {max} bytes")]
    RecordTooLarge {
        /// The record's length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// A record with more headers than any reader takes (`Limits::max_headers`, 1024).
    #[error("record has {count} headers, over the maximum of {max}")]
    TooManyHeaders {
        /// The headers given.
        count: usize,
        /// The maximum.
        max: usize,
    },
    /// A configuration value out of range.
    #[error("invalid configuration: {0}")]
    Config(&'static str),
    /// A group offsets commit of no offset, or a commit or query of more than
    /// `Limits::max_offsets` in one message.
    #[error("{count} group offsets in one commit or query: 1 to {max} allowed")]
    OffsetCount {
        /// The offsets given.
        count: usize,
        /// The maximum.
        max: usize,
    },
}

/// A record could not be queued.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SendError {
    /// The unacknowledged buffer is full (records or bytes): wait for ACKs (the driver waits up
    /// to its send timeout) and retry.
    #[error(
        "unacknowledged buffer full: {records} records, {bytes} bytes (limits {max_records}, {max_bytes})"
    )]
    Full {
        /// Records held.
        records: usize,
        /// Bytes held.
        bytes: usize,
        /// The record limit.
        max_records: usize,
        /// The byte limit.
        max_bytes: usize,
    },
    /// The caller's mistake (the record is too large).
    #[error(transparent)]
    Caller(#[from] CallerError),
}
