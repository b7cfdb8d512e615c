//! The Dafka messages as the reference implementation puts them on the wire.
//!
//! Every message is one ZeroMQ multipart message. Frame 1 is the header; RECORD and
//! DIRECT-RECORD add frame 2, the record's content, exactly as sent (zero-copy both ways);
//! DIRECT-RECORDS (an extension) adds one such frame per record:
//!
//! ```text
//! frame 1:     | id (1) | topic prefix (n, no 0x00) | 0x00 | version 0x01 | fields ... |
//! frame 2:     | content (RECORD and DIRECT-RECORD; DIRECT-RECORDS: the first record) |
//! frame 3 ...: | content of the next records (DIRECT-RECORDS only)                    |
//! ```
//!
//! The id byte plus the topic prefix is what a ZeroMQ subscriber matches (PUB/SUB prefix
//! matching), so the "topic frame" of 46/DAFKA is that prefix inside frame 1. Field types:
//!
//! | type | bytes |
//! |---|---|
//! | `string` | length (1 byte), then the bytes |
//! | `address` | a `string` of 32 upper-case hex characters: `0x20` + UUID as hex |
//! | `number-4`, `number-8` | big-endian unsigned |
//! | `strings` | count (`number-4`), then each entry as length (`number-4`) + bytes |
//!
//! Per kind (`topic prefix` after the id byte; fields after the version byte):
//!
//! | id | kind | topic prefix | fields | frames |
//! |---|---|---|---|---|
//! | `0x4D` 'M' | RECORD | topic name | address = producer, subject = topic, sequence (8) | 2 |
//! | `0x44` 'D' | DIRECT-RECORD | requester's UUID | address = producer, subject, sequence (8) | 2 |
//! | `0x46` 'F' | FETCH | producer's UUID | address = sender, subject, sequence (8), count (4) | 1 |
//! | `0x4B` 'K' | ACK | producer's UUID | subject, sequence (8) | 1 |
//! | `0x48` 'H' | HEAD | topic name | address = producer, subject = topic, sequence (8) | 1 |
//! | `0x45` 'E' | DIRECT-HEAD | requesting consumer's UUID | address = producer, subject, sequence (8) | 1 |
//! | `0x47` 'G' | GET-HEADS | topic name | address = consumer | 1 |
//! | `0x57` 'W' | CONSUMER-HELLO | store reader's UUID | address = consumer, subjects = topics | 1 |
//! | `0x4C` 'L' | STORE-HELLO | consumer's UUID | address = store reader | 1 |
//! | `0x41` 'A' | STORE-ACK (extension) | producer's UUID | address = store writer, subject, sequence (8) | 1 |
//! | `0x4F` 'O' | DIRECT-LOW-WATER (extension) | requesting consumer's UUID | address = producer, subject, sequence (8) = first offset held | 1 |
//! | `0x51` 'Q' | HEADS-QUERY (extension) | topic name | address = consumer, subject = topic, sequence (8) = query number | 1 |
//! | `0x52` 'R' | HEADS-END (extension) | requesting consumer's UUID | address = store reader, subject = topic, sequence (8) = query number | 1 |
//! | `0x42` 'B' | DIRECT-RECORDS (extension) | requester's UUID | address = producer, subject, sequence (8) = offset of the first record | 1 + records (at least 2) |
//! | `0x58` 'X' | STORE-REFUSAL (extension) | producer's UUID | address = store writer, subject, sequence (8) = first offset refused, reason (1), detail (string) | 1 |
//! | `0x4E` 'N' | DIRECT-MISSING (extension) | requester's UUID | address = producer, subject, sequence (8) = first offset missing, end (8) = first offset after them, address = store reader | 1 |
//! | `0x4A` 'J' | GROUP-HEARTBEAT (extension) | consumer group name (1-255 bytes) | address = member, flags (1): `0x01` leaving | 1 |
//! | `0x73` 's' | GROUPS-QUERY (extension) | requesting consumer's UUID | query number (8) | 1 |
//! | `0x63` 'c' | DIRECT-GROUPS (extension) | requesting consumer's UUID | address = store reader, query number (8), group names (`strings`) | 1 |
//!
//! Where this differs from 46/DAFKA (no `AA A5` signature, version after the prefix, UUIDs as
//! hex text, no address in ACK, the prefixes of FETCH, HEAD, DIRECT-RECORD and DIRECT-HEAD) is
//! listed with the reasons in `docs/dafka.md`.

use bytes::{BufMut, Bytes, BytesMut};
use dafka_wire::Reader;

use crate::error::{DecodeError, LimitError, MalformedError};
use crate::group::GroupName;
use crate::id::{NODE_ID_HEX_LEN, NodeId, Topic};
use crate::record::{RecordMeta, TIMESTAMP_LEN};

/// The version byte that follows the topic prefix's NUL.
pub const VERSION: u8 = 0x01;

/// The byte that ends the topic prefix.
pub const PREFIX_END: u8 = 0x00;

/// Limits checked while decoding, before anything is allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest record content (frame 2 of RECORD and DIRECT-RECORD), in bytes.
    pub max_content: usize,
    /// Most topics in one CONSUMER-HELLO.
    pub max_topics: usize,
    /// Longest beacon host or endpoint frame, in bytes.
    pub max_endpoint: usize,
    /// Most headers of one record.
    pub max_headers: usize,
    /// Most group offsets in one OFFSET-COMMIT, COMMITTED-QUERY or DIRECT-COMMITTED.
    pub max_offsets: usize,
}

impl Limits {
    /// Defaults: 16 MiB of content, 4096 topics, 1024-byte endpoints, 1024 headers a record,
    /// 4096 group offsets a message.
    pub const DEFAULT: Limits = Limits {
        max_content: 16 << 20,
        max_topics: 4096,
        max_endpoint: 1024,
        max_headers: 1024,
        max_offsets: 4096,
    };

    /// The defaults with another content limit.
    pub const fn with_max_content(mut self, max_content: usize) -> Self {
        self.max_content = max_content;
        self
    }

    /// The defaults with another topic-count limit.
    pub const fn with_max_topics(mut self, max_topics: usize) -> Self {
        self.max_topics = max_topics;
        self
    }

    /// The defaults with another limit on the offsets of one group message.
    pub const fn with_max_offsets(mut self, max_offsets: usize) -> Self {
        self.max_offsets = max_offsets;
        self
    }

    /// The defaults with another header-count limit.
    pub const fn with_max_headers(mut self, max_headers: usize) -> Self {
        self.max_headers = max_headers;
        self
    }

    /// The defaults with another endpoint-length limit.
    pub const fn with_max_endpoint(mut self, max_endpoint: usize) -> Self {
        self.max_endpoint = max_endpoint;
        self
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// Declares [`Kind`] and [`Message`] from one table, so the kinds (the reference's nine, then our
/// extensions) are listed once: variant (also the name of the body type), id byte, the RFC's
/// name, frames on the wire (the least number for DIRECT-RECORDS).
macro_rules! kinds {
    ($($variant:ident = $id:literal, $name:literal, $frames:literal;)*) => {
        /// The kinds of Dafka message, with their id bytes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Kind {
            $(
                #[doc = concat!($name, ", id `", stringify!($id), "`.")]
                $variant,
            )*
        }

        impl Kind {
            /// Every kind.
            pub const ALL: &'static [Kind] = &[$(Kind::$variant),*];

            /// The id byte that starts frame 1 (and every subscription to the kind).
            pub const fn id(self) -> u8 {
                match self {
                    $(Kind::$variant => $id,)*
                }
            }

            /// The kind with this id byte.
            pub const fn from_id(id: u8) -> Option<Kind> {
                match id {
                    $($id => Some(Kind::$variant),)*
                    _ => None,
                }
            }

            /// The RFC's name of the kind.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Kind::$variant => $name,)*
                }
            }

            /// Frames on the wire: 2 for the kinds that carry content, else 1; for
            /// DIRECT-RECORDS, the least (one record), as it carries one per record.
            pub const fn frames(self) -> usize {
                match self {
                    $(Kind::$variant => $frames,)*
                }
            }
        }

        /// Any Dafka message.
        #[derive(Debug, Clone, PartialEq, Eq)]
        #[non_exhaustive]
        pub enum Message {
            $(
                #[doc = concat!($name, ".")]
                $variant($variant),
            )*
        }

        impl Message {
            /// The kind of this message.
            pub fn kind(&self) -> Kind {
                match self {
                    $(Message::$variant(_) => Kind::$variant,)*
                }
            }
        }

        $(
            impl From<$variant> for Message {
                fn from(m: $variant) -> Self {
                    Message::$variant(m)
                }
            }
        )*
    };
}

kinds! {
    Record = 0x4D, "RECORD", 2;
    DirectRecord = 0x44, "DIRECT-RECORD", 2;
    Fetch = 0x46, "FETCH", 1;
    Ack = 0x4B, "ACK", 1;
    Head = 0x48, "HEAD", 1;
    DirectHead = 0x45, "DIRECT-HEAD", 1;
    GetHeads = 0x47, "GET-HEADS", 1;
    ConsumerHello = 0x57, "CONSUMER-HELLO", 1;
    StoreHello = 0x4C, "STORE-HELLO", 1;
    DirectLowWater = 0x4F, "DIRECT-LOW-WATER", 1;
    StoreAck = 0x41, "STORE-ACK", 1;
    HeadsQuery = 0x51, "HEADS-QUERY", 1;
    HeadsEnd = 0x52, "HEADS-END", 1;
    DirectRecords = 0x42, "DIRECT-RECORDS", 2;
    DirectMissing = 0x4E, "DIRECT-MISSING", 1;
    StoreRefusal = 0x58, "STORE-REFUSAL", 1;
    MetaRecord = 0x54, "META-RECORD", 2;
    DirectMetaRecords = 0x56, "DIRECT-META-RECORDS", 2;
    TimeQuery = 0x59, "TIME-QUERY", 1;
    DirectTimeOffset = 0x5A, "DIRECT-TIME-OFFSET", 1;
    TopicsQuery = 0x53, "TOPICS-QUERY", 1;
    DirectTopics = 0x43, "DIRECT-TOPICS", 1;
    GroupHeartbeat = 0x4A, "GROUP-HEARTBEAT", 1;
    OffsetCommit = 0x50, "OFFSET-COMMIT", 1;
    CommittedQuery = 0x49, "COMMITTED-QUERY", 1;
    DirectCommitted = 0x55, "DIRECT-COMMITTED", 1;
    GroupsQuery = 0x73, "GROUPS-QUERY", 1;
    DirectGroups = 0x63, "DIRECT-GROUPS", 1;
}

/// GROUP-HEARTBEAT's flag: the member is leaving its group.
pub const GROUP_LEAVING: u8 = 0x01;

/// An extension (not in 46/DAFKA, not sent by the reference): a consumer group member saying
/// it is there, every heartbeat interval, or that it leaves: GROUP-HEARTBEAT (`'J'`), to the
/// other members of its group, which subscribe to `'J'` + group name + `0x00` (see
/// [`group`](crate::group)). Fields: address = member, flags (1: `0x01` leaving, the other
/// bits zero). No reference node subscribes to `'J'`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupHeartbeat {
    /// The group: the topic prefix.
    pub group: GroupName,
    /// The member (its consumer's node id).
    pub member: NodeId,
    /// The member is closing: the others drop it now, not after the session timeout.
    pub leaving: bool,
}

/// OFFSET-COMMIT's flag: the offsets are set, even backwards (a `seek`), not only moved
/// forward.
pub const COMMIT_SEEK: u8 = 0x01;

/// One committed offset of a group: the next offset the group reads in a partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupOffset {
    /// The topic.
    pub topic: Topic,
    /// The partition: its producer's id.
    pub partition: NodeId,
    /// The next offset the group reads.
    pub offset: u64,
}

/// An extension (not in 46/DAFKA, not sent by the reference): a consumer group member
/// commits where it got to in some partitions: OFFSET-COMMIT (`'P'`), to every store reader
/// (they subscribe to `'P'`). A store that holds a partition of the list writes its offset
/// durably and answers with a DIRECT-COMMITTED. Fields: address = member, request (8, the
/// member's number, echoed), flags (1: `0x01` seek, the other bits zero), the offsets
/// (count (4), then per offset: topic (string), partition (address), offset (8)); at most
/// `Limits::max_offsets`, and at least one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommit {
    /// The group: the topic prefix.
    pub group: GroupName,
    /// The member that commits (its consumer's node id): the answer goes to `'U'` + this id.
    pub member: NodeId,
    /// The member's number for the commit, echoed in the answers.
    pub request: u64,
    /// Set the offsets even backwards (`seek`), instead of keeping the larger.
    pub seek: bool,
    /// The offsets.
    pub offsets: Vec<GroupOffset>,
}

/// An extension (not in 46/DAFKA, not sent by the reference): a member asks the store
/// readers for its group's committed offsets: COMMITTED-QUERY (`'I'`), to every store reader
/// (they subscribe to `'I'`), each answering with a DIRECT-COMMITTED of the ones it holds.
/// Fields: address = member, request (8), the partitions (count (4), then per partition:
/// topic (string), partition (address)); none asks for every offset of the group the store
/// holds. At most `Limits::max_offsets`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedQuery {
    /// The group: the topic prefix.
    pub group: GroupName,
    /// The member that asks: the answer goes to `'U'` + this id.
    pub member: NodeId,
    /// The member's number for the query, echoed in the answers.
    pub request: u64,
    /// The partitions asked about; empty for all of them.
    pub partitions: Vec<(Topic, NodeId)>,
}

/// An extension (not in 46/DAFKA, not sent by the reference): a store reader's answer to an
/// OFFSET-COMMIT (once the offsets are on its disk) or a COMMITTED-QUERY:
/// DIRECT-COMMITTED (`'U'`). It lists the group's committed offsets it holds among those
/// asked about, as they are after the commit (a forward commit below the stored offset
/// answers the stored one). Fields: address = store, request (8, echoed), group (string),
/// the offsets as in OFFSET-COMMIT (possibly none). At most `Limits::max_offsets`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectCommitted {
    /// The member that asked: the topic prefix.
    pub to: NodeId,
    /// The store reader that answers.
    pub store: NodeId,
    /// The request number answered.
    pub request: u64,
    /// The group.
    pub group: GroupName,
    /// The group's offsets the store holds among those asked about.
    pub offsets: Vec<GroupOffset>,
}

/// A record a producer publishes: RECORD (`'M'`), and the body of DIRECT-RECORD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The producer, which is also the partition.
    pub producer: NodeId,
    /// The topic.
    pub topic: Topic,
    /// Offset in the partition, from 0.
    pub sequence: u64,
    /// The record's value (frame 2), shared with the received frame.
    pub content: Bytes,
}

/// A record sent to one node in answer to a FETCH: DIRECT-RECORD (`'D'`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectRecord {
    /// The node that asked for it (a consumer or a store writer): the topic prefix.
    pub to: NodeId,
    /// The record.
    pub record: Record,
}

/// An extension (not in 46/DAFKA, not sent by the reference): consecutive records of one
/// partition sent to one node in answer to a FETCH, one content frame each after a header
/// laid out as DIRECT-RECORD's with the first record's offset: DIRECT-RECORDS (`'B'`). The
/// per-record header of DIRECT-RECORD (two node ids in hex, the topic, the offset: 80 bytes
/// and more, as much as a small record) and its decoding are paid once per run of records.
/// A store reader sends it only to a node whose `'B'` + id subscription reached its XPUB,
/// which a reference consumer never is: it gets DIRECT-RECORDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectRecords {
    /// The node that asked for them: the topic prefix.
    pub to: NodeId,
    /// The producer (partition).
    pub producer: NodeId,
    /// The topic.
    pub topic: Topic,
    /// The offset of the first record; the others follow it one by one.
    pub first: u64,
    /// The records' values, from offset `first` on (at least one), each shared with its
    /// received frame.
    pub contents: Vec<Bytes>,
}

/// An extension (not in 46/DAFKA, not sent by the reference): a record with its metadata
/// (timestamp, and key and headers when it has them): META-RECORD (`'T'`). Laid out as
/// RECORD, with the [`RecordMeta`] after the sequence: the 8-byte timestamp, then the extras
/// when the record has any (frame 1 going on past the timestamp says so). A producer sends it
/// to subscribers of `'T'` + topic, and RECORD (the value only) to peers subscribed to
/// `'M'` + topic and not to `'T'` + topic: a reference consumer or store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaRecord {
    /// The record (RECORD's fields and content).
    pub record: Record,
    /// Its metadata.
    pub meta: RecordMeta,
}

/// A META-RECORD borrowed from where its parts are kept (a producer's unacknowledged
/// records): encoded straight into frames with no [`Message`] built, moved and dropped per
/// record, and only the content's reference count taken. The same bytes as
/// [`Message::MetaRecord`].
#[derive(Debug, Clone, Copy)]
pub struct MetaRecordRef<'a> {
    /// The producer: the partition.
    pub producer: &'a NodeId,
    /// The topic.
    pub topic: &'a Topic,
    /// The record's offset.
    pub sequence: u64,
    /// The value.
    pub content: &'a Bytes,
    /// Its metadata.
    pub meta: &'a RecordMeta,
}

impl MetaRecordRef<'_> {
    /// Length of frame 1 in bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        // kind, topic prefix, NUL, version; address, subject, sequence; timestamp, extras.
        1 + self.topic.len()
            + 2
            + 1
            + NODE_ID_HEX_LEN
            + 1
            + self.topic.len()
            + 8
            + TIMESTAMP_LEN
            + self.meta.extras_len()
    }

    /// Appends frame 1 to `out`.
    #[inline]
    pub fn encode_header(&self, out: &mut BytesMut) {
        out.put_u8(Kind::MetaRecord.id());
        out.put_slice(self.topic.as_bytes());
        out.put_u8(PREFIX_END);
        out.put_u8(VERSION);
        self.put_fields(out);
    }

    /// Frame 1's fields after the version: address, subject, sequence, timestamp, extras.
    #[inline]
    fn put_fields(&self, out: &mut BytesMut) {
        put_position(out, self.producer, self.topic, self.sequence);
        self.meta.put_timestamp(out);
        self.meta.put_extras(out);
    }

    /// Appends the frames to `out`: frame 1 encoded at the end of `buf` and split off it (as
    /// [`Message::into_frames_in`]), then the content.
    #[inline]
    pub fn frames_with(&self, buf: &mut BytesMut, out: &mut impl Extend<Bytes>) {
        let header = split_encoded(buf, |b| self.encode_header(b));
        out.extend([header, self.content.clone()]);
    }
}

impl MetaRecord {
    /// Borrowed, to encode.
    pub fn as_ref(&self) -> MetaRecordRef<'_> {
        MetaRecordRef {
            producer: &self.record.producer,
            topic: &self.record.topic,
            sequence: self.record.sequence,
            content: &self.record.content,
            meta: &self.meta,
        }
    }
}

/// An extension (not in 46/DAFKA, not sent by the reference): DIRECT-RECORDS with each
/// record's metadata: DIRECT-META-RECORDS (`'V'`). Frame 1 is DIRECT-RECORDS' header, then
/// the timestamps of the records in order (8 bytes each), then, only when at least one record
/// has extras, the extras of every record in order; one content frame per record follows. A
/// producer or store reader answers a FETCH with it only to a node whose `'V'` + id
/// subscription it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectMetaRecords {
    /// The records: requester, partition, first offset, contents.
    pub run: DirectRecords,
    /// The metadata of each record, in the order of `run.contents` (as many).
    pub metas: Vec<RecordMeta>,
}

/// An extension (not in 46/DAFKA, not sent by the reference): which offset of each partition
/// of a topic is the first at or after a time: TIME-QUERY (`'Y'`). Our store readers
/// answer it with a DIRECT-TIME-OFFSET per partition they hold, then a HEADS-END with the
/// same query number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeQuery {
    /// The consumer that asks: its answers go to `'Z'` and `'R'` + this id.
    pub consumer: NodeId,
    /// The topic: the topic prefix.
    pub topic: Topic,
    /// The consumer's number for the query, echoed in HEADS-END.
    pub query: u64,
    /// The time, microseconds since the Unix epoch, UTC.
    pub time: i64,
}

/// An extension (not in 46/DAFKA, not sent by the reference): a store reader's answer to a
/// TIME-QUERY for one partition: DIRECT-TIME-OFFSET (`'Z'`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectTimeOffset {
    /// The consumer that asked: the topic prefix.
    pub to: NodeId,
    /// The partition (producer).
    pub producer: NodeId,
    /// The topic.
    pub topic: Topic,
    /// The first offset the store holds whose record's timestamp is at or after the time
    /// asked; `end` when it holds none that recent.
    pub offset: u64,
    /// One past the last offset the store holds of the partition.
    pub end: u64,
}

/// An extension (not in 46/DAFKA, not sent by the reference): a consumer asks the store
/// readers which topics they hold: TOPICS-QUERY (`'S'`). Our store readers subscribe to
/// every one and answer with a DIRECT-TOPICS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicsQuery {
    /// The consumer that asks: the topic prefix (the answer goes to `'C'` + this id).
    pub consumer: NodeId,
    /// The consumer's number for the query, echoed in the answer.
    pub query: u64,
}

/// An extension (not in 46/DAFKA, not sent by the reference): the topics one store reader
/// holds, in answer to a TOPICS-QUERY: DIRECT-TOPICS (`'C'`). At most `Limits::max_topics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectTopics {
    /// The consumer that asked: the topic prefix.
    pub to: NodeId,
    /// The store reader that answers.
    pub store: NodeId,
    /// The query number of the TOPICS-QUERY answered.
    pub query: u64,
    /// Every topic of which it holds a partition.
    pub topics: Vec<Topic>,
}

/// An extension (not in 46/DAFKA, not sent by the reference): a consumer asks the store
/// readers which consumer groups have committed offsets with them: GROUPS-QUERY (`'s'`, the
/// lower-case TOPICS-QUERY). Our store readers subscribe to every one and answer with a
/// DIRECT-GROUPS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupsQuery {
    /// The consumer that asks: the topic prefix (the answer goes to `'c'` + this id).
    pub consumer: NodeId,
    /// The consumer's number for the query, echoed in the answer.
    pub query: u64,
}

/// An extension (not in 46/DAFKA, not sent by the reference): the consumer groups with
/// committed offsets in one store, in answer to a GROUPS-QUERY: DIRECT-GROUPS (`'c'`). At
/// most `Limits::max_topics` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectGroups {
    /// The consumer that asked: the topic prefix.
    pub to: NodeId,
    /// The store reader that answers.
    pub store: NodeId,
    /// The query number of the GROUPS-QUERY answered.
    pub query: u64,
    /// Every group with a committed offset of a partition the store holds.
    pub groups: Vec<GroupName>,
}

/// A request for missing records: FETCH (`'F'`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    /// The partition (its producer), the topic prefix: the producer and every store reader
    /// subscribe to it.
    pub producer: NodeId,
    /// Who asks (a consumer or a store writer): the answers go to `'D'` + this id.
    pub sender: NodeId,
    /// The topic.
    pub topic: Topic,
    /// The first missing offset.
    pub sequence: u64,
    /// How many records from `sequence` on.
    pub count: u32,
}

/// A store's acknowledgement to a producer: ACK (`'K'`). Cumulative: every offset up to
/// `sequence` is held by the store that sent it. It names no store (no address field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// The producer acknowledged: the topic prefix.
    pub producer: NodeId,
    /// The topic.
    pub topic: Topic,
    /// The highest offset acknowledged.
    pub sequence: u64,
}

/// A producer's latest offset, published periodically: HEAD (`'H'`), and the body of
/// DIRECT-HEAD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The producer (partition).
    pub producer: NodeId,
    /// The topic.
    pub topic: Topic,
    /// The last offset the producer published.
    pub sequence: u64,
}

/// A head sent to one consumer in answer to GET-HEADS or CONSUMER-HELLO: DIRECT-HEAD (`'E'`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectHead {
    /// The consumer that asked: the topic prefix.
    pub to: NodeId,
    /// The head.
    pub head: Head,
}

/// An extension (not in 46/DAFKA, not sent by the reference): an ACK that names the store
/// writer that sends it, so a producer can count distinct stores for `min_acks > 1`:
/// STORE-ACK (`'A'`). A store sends it beside every ACK; a publisher sends it only to
/// subscribers of `'A'` + producer, which a reference producer never is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreAck {
    /// The store writer that acknowledges.
    pub store: NodeId,
    /// The acknowledgement, as in ACK (the producer is the topic prefix).
    pub ack: Ack,
}

/// An extension (not in 46/DAFKA, not sent by the reference): a store's low-water mark of a
/// partition, sent to one consumer with the DIRECT-HEAD of the same partition when the store no
/// longer holds its first records (retention): DIRECT-LOW-WATER (`'O'`). Same layout as
/// DIRECT-HEAD; `low.sequence` is the first offset the store still holds. A reference consumer
/// never subscribes to `'O'`, so it never receives one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectLowWater {
    /// The consumer that asked: the topic prefix.
    pub to: NodeId,
    /// Producer, topic, and the first offset still held.
    pub low: Head,
}

/// An extension (not in 46/DAFKA, not sent by the reference): GET-HEADS with a query number,
/// answered like GET-HEADS and then with a HEADS-END carrying the same number: HEADS-QUERY
/// (`'Q'`). A consumer sends it right after the GET-HEADS of an offsets query, so that it
/// knows when a store's answers are all in instead of waiting for late ones. No reference
/// node subscribes to `'Q'`, so none receives it (their GET-HEADS answers it for them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadsQuery {
    /// The consumer that asks: its answers go to `'E'`, `'O'` and `'R'` + this id.
    pub consumer: NodeId,
    /// The topic: the topic prefix.
    pub topic: Topic,
    /// The consumer's number for the query, echoed in HEADS-END.
    pub query: u64,
}

/// An extension (not in 46/DAFKA, not sent by the reference): a store reader's last answer to
/// one HEADS-QUERY, sent after its DIRECT-LOW-WATER and DIRECT-HEAD answers to it (on the same
/// connection, so after them) and only when every one of them was queued: HEADS-END (`'R'`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadsEnd {
    /// The consumer that asked: the topic prefix.
    pub to: NodeId,
    /// The store reader that answered.
    pub store: NodeId,
    /// The topic asked about.
    pub topic: Topic,
    /// The query number of the HEADS-QUERY answered.
    pub query: u64,
}

/// An extension (not in 46/DAFKA, not sent by the reference): a store reader's answer to a
/// FETCH for offsets it does not hold although they are below its head (their records were
/// damaged on its disk): DIRECT-MISSING (`'N'`). The store goes on answering the FETCH after
/// them; the consumer FETCHes the offsets from another store, or skips them when no store that
/// answers holds them (as past retention). A store reader sends it only to a node whose
/// `'N'` + id subscription reached its XPUB (a reference consumer waits for the offsets as it
/// would for any store that does not answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectMissing {
    /// The node that asked: the topic prefix.
    pub to: NodeId,
    /// The store reader that does not hold them.
    pub store: NodeId,
    /// The producer (partition).
    pub producer: NodeId,
    /// The topic.
    pub topic: Topic,
    /// The first offset missing.
    pub from: u64,
    /// The first offset after them (greater than `from`).
    pub to_offset: u64,
}

/// Why a store refused records (STORE-REFUSAL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalReason {
    /// `0x01`: the record at the offset is larger than the store keeps; the store skipped it
    /// (it holds no record there) and goes on with the partition.
    TooLarge,
    /// `0x02`: the store cannot write at all (a failed write or sync: a full or failing
    /// disk); nothing from the offset on is acknowledged by it until it is restarted.
    Failed,
    /// A reason this version does not know (a later peer's), kept as received.
    Other(u8),
}

impl RefusalReason {
    /// The reason's byte on the wire.
    pub const fn code(self) -> u8 {
        match self {
            RefusalReason::TooLarge => 0x01,
            RefusalReason::Failed => 0x02,
            RefusalReason::Other(c) => c,
        }
    }

    /// The reason with this byte.
    pub const fn from_code(code: u8) -> Self {
        match code {
            0x01 => RefusalReason::TooLarge,
            0x02 => RefusalReason::Failed,
            c => RefusalReason::Other(c),
        }
    }
}

/// An extension (not in 46/DAFKA, not sent by the reference): a store writer tells a producer
/// it refused records of its partition, and why: STORE-REFUSAL (`'X'`). Without it a producer
/// whose records a store cannot keep saw only an acknowledgement that never came. A store
/// sends it to subscribers of `'X'` + producer, which a reference producer never is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreRefusal {
    /// The producer (partition): the topic prefix.
    pub producer: NodeId,
    /// The store writer that refuses.
    pub store: NodeId,
    /// The topic.
    pub topic: Topic,
    /// The first offset refused.
    pub sequence: u64,
    /// Why.
    pub reason: RefusalReason,
    /// The store's words for people (sizes, the OS error): UTF-8 from our stores, at most 255
    /// bytes on the wire (cut there when encoded; [`StoreRefusal::detail_of`] cuts a text at a
    /// character boundary).
    pub detail: Bytes,
}

impl StoreRefusal {
    /// `text` as a detail: at most 255 bytes, cut at a character boundary.
    pub fn detail_of(text: &str) -> Bytes {
        let mut end = text.len().min(0xFF);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Bytes::copy_from_slice(&text.as_bytes()[..end])
    }

    /// The detail as text (lossy: a peer may send any bytes).
    pub fn detail_text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(detail_bytes(&self.detail))
    }
}

/// A consumer's request for the heads of a topic's partitions: GET-HEADS (`'G'`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetHeads {
    /// The topic: the topic prefix.
    pub topic: Topic,
    /// The consumer that asks.
    pub consumer: NodeId,
}

/// A consumer's hello to one store reader: CONSUMER-HELLO (`'W'`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerHello {
    /// The store reader greeted: the topic prefix.
    pub store: NodeId,
    /// The consumer.
    pub consumer: NodeId,
    /// The consumer's topics. The reference sends an empty list (before the consumer has
    /// subscribed, and always from a "latest" consumer), and sends it more than once.
    pub topics: Vec<Topic>,
}

/// A store reader's hello to one consumer: STORE-HELLO (`'L'`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreHello {
    /// The consumer greeted: the topic prefix.
    pub consumer: NodeId,
    /// The store reader.
    pub store: NodeId,
}

/// The topic prefix of frame 1.
enum Prefix<'a> {
    Topic(&'a Topic),
    Node(&'a NodeId),
}

impl Message {
    /// The record content (frame 2), for RECORD and DIRECT-RECORD.
    pub fn content(&self) -> Option<&Bytes> {
        match self {
            Message::Record(r)
            | Message::DirectRecord(DirectRecord { record: r, .. })
            | Message::MetaRecord(MetaRecord { record: r, .. }) => Some(&r.content),
            _ => None,
        }
    }

    /// The content frames after frame 1: one for RECORD and DIRECT-RECORD, one per record for
    /// DIRECT-RECORDS, none for the others.
    fn contents(&self) -> &[Bytes] {
        match self {
            Message::DirectRecords(d)
            | Message::DirectMetaRecords(DirectMetaRecords { run: d, .. }) => &d.contents,
            _ => self.content().map_or(&[], std::slice::from_ref),
        }
    }

    fn prefix(&self) -> Prefix<'_> {
        match self {
            Message::Record(r) | Message::MetaRecord(MetaRecord { record: r, .. }) => {
                Prefix::Topic(&r.topic)
            }
            Message::Head(h) => Prefix::Topic(&h.topic),
            Message::GetHeads(g) => Prefix::Topic(&g.topic),
            Message::HeadsQuery(q) => Prefix::Topic(&q.topic),
            Message::TimeQuery(q) => Prefix::Topic(&q.topic),
            Message::DirectTimeOffset(d) => Prefix::Node(&d.to),
            Message::TopicsQuery(q) => Prefix::Node(&q.consumer),
            Message::DirectTopics(d) => Prefix::Node(&d.to),
            Message::GroupsQuery(q) => Prefix::Node(&q.consumer),
            Message::DirectGroups(d) => Prefix::Node(&d.to),
            Message::HeadsEnd(e) => Prefix::Node(&e.to),
            Message::DirectRecord(d) => Prefix::Node(&d.to),
            Message::DirectRecords(d)
            | Message::DirectMetaRecords(DirectMetaRecords { run: d, .. }) => Prefix::Node(&d.to),
            Message::DirectHead(d) => Prefix::Node(&d.to),
            Message::DirectLowWater(d) => Prefix::Node(&d.to),
            Message::DirectMissing(d) => Prefix::Node(&d.to),
            Message::StoreRefusal(r) => Prefix::Node(&r.producer),
            Message::Fetch(f) => Prefix::Node(&f.producer),
            Message::Ack(a) => Prefix::Node(&a.producer),
            Message::StoreAck(a) => Prefix::Node(&a.ack.producer),
            Message::ConsumerHello(c) => Prefix::Node(&c.store),
            Message::StoreHello(s) => Prefix::Node(&s.consumer),
            Message::GroupHeartbeat(h) => Prefix::Topic(h.group.as_topic()),
            Message::OffsetCommit(c) => Prefix::Topic(c.group.as_topic()),
            Message::CommittedQuery(q) => Prefix::Topic(q.group.as_topic()),
            Message::DirectCommitted(d) => Prefix::Node(&d.to),
        }
    }

    /// Length of frame 1 in bytes.
    pub fn header_len(&self) -> usize {
        const ADDRESS: usize = 1 + NODE_ID_HEX_LEN;
        let prefix = match self.prefix() {
            Prefix::Topic(t) => t.len(),
            Prefix::Node(_) => NODE_ID_HEX_LEN,
        };
        let fields = match self {
            Message::Record(Record { topic, .. })
            | Message::DirectRecord(DirectRecord {
                record: Record { topic, .. },
                ..
            })
            | Message::Head(Head { topic, .. })
            | Message::DirectHead(DirectHead {
                head: Head { topic, .. },
                ..
            })
            | Message::DirectLowWater(DirectLowWater {
                low: Head { topic, .. },
                ..
            })
            | Message::HeadsQuery(HeadsQuery { topic, .. })
            | Message::HeadsEnd(HeadsEnd { topic, .. })
            | Message::DirectRecords(DirectRecords { topic, .. }) => ADDRESS + 1 + topic.len() + 8,
            Message::MetaRecord(m) => return m.as_ref().header_len(),
            Message::DirectMetaRecords(m) => {
                ADDRESS + 1 + m.run.topic.len() + 8 + metas_len(&m.metas)
            }
            Message::Fetch(f) => ADDRESS + 1 + f.topic.len() + 8 + 4,
            Message::TimeQuery(q) => ADDRESS + 1 + q.topic.len() + 8 + 8,
            Message::DirectTimeOffset(d) => ADDRESS + 1 + d.topic.len() + 8 + 8,
            Message::TopicsQuery(_) | Message::GroupsQuery(_) => 8,
            Message::DirectTopics(d) => ADDRESS + 8 + strings_len(&d.topics),
            Message::DirectGroups(d) => {
                ADDRESS + 8 + strings_len(d.groups.iter().map(GroupName::as_topic))
            }
            Message::DirectMissing(d) => ADDRESS + 1 + d.topic.len() + 8 + 8 + ADDRESS,
            Message::StoreRefusal(r) => {
                ADDRESS + 1 + r.topic.len() + 8 + 1 + 1 + detail_bytes(&r.detail).len()
            }
            Message::Ack(a) => 1 + a.topic.len() + 8,
            Message::StoreAck(a) => ADDRESS + 1 + a.ack.topic.len() + 8,
            Message::GetHeads(_) | Message::StoreHello(_) => ADDRESS,
            Message::ConsumerHello(c) => ADDRESS + strings_len(&c.topics),
            Message::GroupHeartbeat(_) => ADDRESS + 1,
            Message::OffsetCommit(c) => ADDRESS + 8 + 1 + offsets_len(&c.offsets),
            Message::CommittedQuery(q) => {
                ADDRESS
                    + 8
                    + 4
                    + q.partitions
                        .iter()
                        .map(|(t, _)| 1 + t.len() + ADDRESS)
                        .sum::<usize>()
            }
            Message::DirectCommitted(d) => {
                ADDRESS + 8 + 1 + d.group.as_bytes().len() + offsets_len(&d.offsets)
            }
        };
        1 + prefix + 2 + fields
    }

    /// Appends frame 1 (the header) to `out`, which grows as needed: a caller that knows
    /// [`header_len`](Self::header_len) reserves it first. Encoding cannot fail: every field
    /// was validated when its type was built.
    pub fn encode_header(&self, out: &mut BytesMut) {
        out.put_u8(self.kind().id());
        match self.prefix() {
            Prefix::Topic(t) => out.put_slice(t.as_bytes()),
            Prefix::Node(n) => out.put_slice(&n.to_hex()),
        }
        out.put_u8(PREFIX_END);
        out.put_u8(VERSION);
        match self {
            Message::Record(r) | Message::DirectRecord(DirectRecord { record: r, .. }) => {
                put_position(out, &r.producer, &r.topic, r.sequence)
            }
            Message::Head(h)
            | Message::DirectHead(DirectHead { head: h, .. })
            | Message::DirectLowWater(DirectLowWater { low: h, .. }) => {
                put_position(out, &h.producer, &h.topic, h.sequence)
            }
            Message::MetaRecord(m) => m.as_ref().put_fields(out),
            Message::DirectMetaRecords(DirectMetaRecords { run: d, metas }) => {
                put_position(out, &d.producer, &d.topic, d.first);
                put_metas(out, metas);
            }
            Message::Fetch(f) => {
                put_position(out, &f.sender, &f.topic, f.sequence);
                out.put_u32(f.count);
            }
            Message::TimeQuery(q) => {
                put_position(out, &q.consumer, &q.topic, q.query);
                out.put_i64(q.time);
            }
            Message::DirectTimeOffset(d) => {
                put_position(out, &d.producer, &d.topic, d.offset);
                out.put_u64(d.end);
            }
            Message::TopicsQuery(q) => out.put_u64(q.query),
            Message::GroupsQuery(q) => out.put_u64(q.query),
            Message::DirectTopics(d) => {
                d.store.put_string(out);
                out.put_u64(d.query);
                put_strings(out, d.topics.iter());
            }
            Message::DirectGroups(d) => {
                d.store.put_string(out);
                out.put_u64(d.query);
                put_strings(out, d.groups.iter().map(GroupName::as_topic));
            }
            Message::DirectMissing(d) => {
                put_position(out, &d.producer, &d.topic, d.from);
                out.put_u64(d.to_offset);
                d.store.put_string(out);
            }
            Message::StoreRefusal(r) => {
                put_position(out, &r.store, &r.topic, r.sequence);
                out.put_u8(r.reason.code());
                let detail = detail_bytes(&r.detail);
                out.put_u8(detail.len() as u8);
                out.put_slice(detail);
            }
            Message::Ack(a) => {
                a.topic.put_string(out);
                out.put_u64(a.sequence);
            }
            Message::StoreAck(a) => put_position(out, &a.store, &a.ack.topic, a.ack.sequence),
            Message::HeadsQuery(q) => put_position(out, &q.consumer, &q.topic, q.query),
            Message::HeadsEnd(e) => put_position(out, &e.store, &e.topic, e.query),
            Message::DirectRecords(d) => put_position(out, &d.producer, &d.topic, d.first),
            Message::GetHeads(g) => g.consumer.put_string(out),
            Message::ConsumerHello(c) => {
                c.consumer.put_string(out);
                put_strings(out, c.topics.iter());
            }
            Message::StoreHello(s) => s.store.put_string(out),
            Message::GroupHeartbeat(h) => {
                h.member.put_string(out);
                out.put_u8(if h.leaving { GROUP_LEAVING } else { 0 });
            }
            Message::OffsetCommit(c) => {
                c.member.put_string(out);
                out.put_u64(c.request);
                out.put_u8(if c.seek { COMMIT_SEEK } else { 0 });
                put_offsets(out, &c.offsets);
            }
            Message::CommittedQuery(q) => {
                q.member.put_string(out);
                out.put_u64(q.request);
                // At most `Limits::max_offsets` when built by us; a list longer than u32::MAX
                // cannot be built in memory.
                out.put_u32(q.partitions.len() as u32);
                for (topic, partition) in &q.partitions {
                    topic.put_string(out);
                    partition.put_string(out);
                }
            }
            Message::DirectCommitted(d) => {
                d.store.put_string(out);
                out.put_u64(d.request);
                d.group.as_topic().put_string(out);
                put_offsets(out, &d.offsets);
            }
        }
    }

    /// The frames of the ZeroMQ multipart message: frame 1, then the content for RECORD and
    /// DIRECT-RECORD (shared, not copied).
    pub fn to_frames(&self) -> Vec<Bytes> {
        let header = self.header_frame(&mut BytesMut::with_capacity(self.header_len()));
        let contents = self.contents();
        let mut frames = Vec::with_capacity(1 + contents.len());
        frames.push(header);
        frames.extend(contents.iter().cloned());
        frames
    }

    /// [`to_frames`](Self::to_frames) taking the message, with frame 1 encoded at the end of
    /// `buf`: encoding many messages into one buffer reserved for all their headers
    /// ([`header_len`](Self::header_len) each) makes one allocation for all of them, and
    /// their frames share it (a clone per subscriber is a reference count, not a copy); the
    /// contents move into the frames (no reference count taken and dropped per record).
    pub fn into_frames_in(self, buf: &mut BytesMut) -> Vec<Bytes> {
        let mut frames = Vec::new();
        self.into_frames_with(buf, &mut frames);
        frames
    }

    /// [`into_frames_in`](Self::into_frames_in) appending the frames to `out`: straight into
    /// the transport's message, with no list of frames allocated and freed per message.
    pub fn into_frames_with(self, buf: &mut BytesMut, out: &mut impl Extend<Bytes>) {
        let header = self.header_frame(buf);
        match self {
            Message::DirectRecords(DirectRecords { contents, .. })
            | Message::DirectMetaRecords(DirectMetaRecords {
                run: DirectRecords { contents, .. },
                ..
            }) => out.extend(std::iter::once(header).chain(contents)),
            Message::Record(r)
            | Message::DirectRecord(DirectRecord { record: r, .. })
            | Message::MetaRecord(MetaRecord { record: r, .. }) => out.extend([header, r.content]),
            _ => out.extend([header]),
        }
    }

    /// Frame 1 encoded at the end of `buf` and split off it (`split` leaves `buf` empty with
    /// the rest of its capacity for the next message).
    fn header_frame(&self, buf: &mut BytesMut) -> Bytes {
        split_encoded(buf, |b| self.encode_header(b))
    }

    /// Decodes one ZeroMQ multipart message. Frame 1 must be used up exactly; the content
    /// frame is kept as received (zero-copy) and checked against `limits.max_content`.
    pub fn decode(frames: &[Bytes], limits: &Limits) -> Result<Message, DecodeError> {
        Self::decode_from(frames, limits)
    }

    /// [`decode`](Self::decode) taking the frames: frame 1 and the contents move into the
    /// message (each left empty in `frames`, whatever the outcome) instead of being cloned, so
    /// the receive buffer they share is not reference-counted up and down once more per frame.
    pub fn decode_taking(frames: &mut [Bytes], limits: &Limits) -> Result<Message, DecodeError> {
        Self::decode_from(frames, limits)
    }

    fn decode_from(mut frames: impl Frames, limits: &Limits) -> Result<Message, DecodeError> {
        if frames.len() == 0 {
            return Err(MalformedError::NoFrames.into());
        }
        let mut r = Reader::new(frames.take(0));
        let id = r.u8("command id")?;
        let kind = Kind::from_id(id).ok_or(MalformedError::UnknownId { id })?;
        let frames_ok = match kind {
            // One content frame per record, at least one record.
            Kind::DirectRecords | Kind::DirectMetaRecords => frames.len() >= kind.frames(),
            _ => frames.len() == kind.frames(),
        };
        if !frames_ok {
            return Err(MalformedError::FrameCount {
                kind: kind.name(),
                expected: kind.frames(),
                got: frames.len(),
            }
            .into());
        }
        // A node id's hex is parsed from the borrowed bytes (no shared handle made and dropped
        // per message); its error waits for the kind's turn, after the version check.
        let prefix = match kind {
            Kind::Record
            | Kind::MetaRecord
            | Kind::Head
            | Kind::HeadsQuery
            | Kind::TimeQuery
            | Kind::GetHeads
            | Kind::GroupHeartbeat
            | Kind::OffsetCommit
            | Kind::CommittedQuery => ReadPrefix::Topic(r.until(PREFIX_END, "topic prefix")?),
            _ => ReadPrefix::Node(r.until_with(PREFIX_END, "topic prefix", |hex| {
                NodeId::decode(hex, "topic prefix")
            })?),
        };
        let version = r.u8("version")?;
        if version != VERSION {
            return Err(MalformedError::Version { version }.into());
        }
        let message = match kind {
            Kind::Record | Kind::MetaRecord | Kind::Head | Kind::HeadsQuery | Kind::TimeQuery => {
                let (producer, topic, sequence) = position(&mut r)?;
                if prefix.topic()? != topic.as_bytes() {
                    return Err(MalformedError::TopicMismatch { kind: kind.name() }.into());
                }
                if kind == Kind::TimeQuery {
                    Message::TimeQuery(TimeQuery {
                        consumer: producer,
                        topic,
                        query: sequence,
                        time: r.u64("time")? as i64,
                    })
                } else if kind == Kind::MetaRecord {
                    let meta = read_meta(&mut r, limits)?;
                    Message::MetaRecord(MetaRecord {
                        record: Record {
                            producer,
                            topic,
                            sequence,
                            content: content(&mut frames, limits)?,
                        },
                        meta,
                    })
                } else if kind == Kind::HeadsQuery {
                    Message::HeadsQuery(HeadsQuery {
                        consumer: producer,
                        topic,
                        query: sequence,
                    })
                } else if kind == Kind::Record {
                    Message::Record(Record {
                        producer,
                        topic,
                        sequence,
                        content: content(&mut frames, limits)?,
                    })
                } else {
                    Message::Head(Head {
                        producer,
                        topic,
                        sequence,
                    })
                }
            }
            Kind::DirectRecord => {
                let to = prefix.node()?;
                let (producer, topic, sequence) = position(&mut r)?;
                Message::DirectRecord(DirectRecord {
                    to,
                    record: Record {
                        producer,
                        topic,
                        sequence,
                        content: content(&mut frames, limits)?,
                    },
                })
            }
            Kind::DirectRecords | Kind::DirectMetaRecords => {
                let to = prefix.node()?;
                let (producer, topic, first) = position(&mut r)?;
                let count = frames.len() - 1;
                // The offsets must fit: `first + count - 1` is the last one.
                if first.checked_add(count as u64 - 1).is_none() {
                    return Err(MalformedError::OffsetOverflow.into());
                }
                let contents = (1..=count)
                    .map(|i| {
                        let c = frames.take(i);
                        check_content(&c, limits).map(|()| c)
                    })
                    .collect::<Result<Vec<Bytes>, DecodeError>>()?;
                let run = DirectRecords {
                    to,
                    producer,
                    topic,
                    first,
                    contents,
                };
                if kind == Kind::DirectMetaRecords {
                    let metas = read_metas(&mut r, count, limits)?;
                    Message::DirectMetaRecords(DirectMetaRecords { run, metas })
                } else {
                    Message::DirectRecords(run)
                }
            }
            Kind::DirectHead | Kind::DirectLowWater => {
                let to = prefix.node()?;
                let (producer, topic, sequence) = position(&mut r)?;
                let head = Head {
                    producer,
                    topic,
                    sequence,
                };
                if kind == Kind::DirectHead {
                    Message::DirectHead(DirectHead { to, head })
                } else {
                    Message::DirectLowWater(DirectLowWater { to, low: head })
                }
            }
            Kind::DirectTimeOffset => {
                let to = prefix.node()?;
                let (producer, topic, offset) = position(&mut r)?;
                let end = r.u64("end")?;
                Message::DirectTimeOffset(DirectTimeOffset {
                    to,
                    producer,
                    topic,
                    offset,
                    end,
                })
            }
            Kind::GroupHeartbeat => {
                let group = group_name(kind, prefix.topic()?)?;
                let member = address(&mut r)?;
                let flags = r.u8("flags")?;
                if flags & !GROUP_LEAVING != 0 {
                    return Err(MalformedError::GroupFlags {
                        kind: kind.name(),
                        flags,
                    }
                    .into());
                }
                Message::GroupHeartbeat(GroupHeartbeat {
                    group,
                    member,
                    leaving: flags == GROUP_LEAVING,
                })
            }
            Kind::OffsetCommit => {
                let group = group_name(kind, prefix.topic()?)?;
                let member = address(&mut r)?;
                let request = r.u64("request")?;
                let flags = r.u8("flags")?;
                if flags & !COMMIT_SEEK != 0 {
                    return Err(MalformedError::GroupFlags {
                        kind: kind.name(),
                        flags,
                    }
                    .into());
                }
                let offsets = read_offsets(&mut r, kind, limits)?;
                if offsets.is_empty() {
                    return Err(MalformedError::NoOffsets.into());
                }
                Message::OffsetCommit(OffsetCommit {
                    group,
                    member,
                    request,
                    seek: flags == COMMIT_SEEK,
                    offsets,
                })
            }
            Kind::CommittedQuery => {
                let group = group_name(kind, prefix.topic()?)?;
                let member = address(&mut r)?;
                let request = r.u64("request")?;
                let count = offsets_count(&mut r, kind, limits)?;
                // Each entry takes at least 34 bytes: never reserve from the announced count.
                let mut partitions = Vec::with_capacity(count.min(r.remaining() / 34));
                for _ in 0..count {
                    let topic = Topic::decode(r.short_bytes("subject")?, "subject")?;
                    partitions.push((topic, address(&mut r)?));
                }
                Message::CommittedQuery(CommittedQuery {
                    group,
                    member,
                    request,
                    partitions,
                })
            }
            Kind::DirectCommitted => {
                let to = prefix.node()?;
                let store = address(&mut r)?;
                let request = r.u64("request")?;
                let group = group_name(kind, r.short_bytes("group")?)?;
                let offsets = read_offsets(&mut r, kind, limits)?;
                Message::DirectCommitted(DirectCommitted {
                    to,
                    store,
                    request,
                    group,
                    offsets,
                })
            }
            Kind::TopicsQuery => Message::TopicsQuery(TopicsQuery {
                consumer: prefix.node()?,
                query: r.u64("query")?,
            }),
            Kind::DirectTopics => {
                let to = prefix.node()?;
                let store = address(&mut r)?;
                let query = r.u64("query")?;
                let topics = read_strings(&mut r, "DIRECT-TOPICS", limits)?;
                Message::DirectTopics(DirectTopics {
                    to,
                    store,
                    query,
                    topics,
                })
            }
            Kind::GroupsQuery => Message::GroupsQuery(GroupsQuery {
                consumer: prefix.node()?,
                query: r.u64("query")?,
            }),
            Kind::DirectGroups => {
                let to = prefix.node()?;
                let store = address(&mut r)?;
                let query = r.u64("query")?;
                let groups = read_strings(&mut r, "DIRECT-GROUPS", limits)?
                    .into_iter()
                    .map(|name| group_name(kind, name.to_bytes()))
                    .collect::<Result<_, _>>()?;
                Message::DirectGroups(DirectGroups {
                    to,
                    store,
                    query,
                    groups,
                })
            }
            Kind::HeadsEnd => {
                let to = prefix.node()?;
                let (store, topic, query) = position(&mut r)?;
                Message::HeadsEnd(HeadsEnd {
                    to,
                    store,
                    topic,
                    query,
                })
            }
            Kind::DirectMissing => {
                let to = prefix.node()?;
                let (producer, topic, from) = position(&mut r)?;
                let to_offset = r.u64("end")?;
                let store = address(&mut r)?;
                if to_offset <= from {
                    return Err(MalformedError::EmptyRange {
                        from,
                        to: to_offset,
                    }
                    .into());
                }
                Message::DirectMissing(DirectMissing {
                    to,
                    store,
                    producer,
                    topic,
                    from,
                    to_offset,
                })
            }
            Kind::StoreRefusal => {
                let producer = prefix.node()?;
                let (store, topic, sequence) = position(&mut r)?;
                let reason = RefusalReason::from_code(r.u8("reason")?);
                let detail = r.short_bytes("detail")?;
                Message::StoreRefusal(StoreRefusal {
                    producer,
                    store,
                    topic,
                    sequence,
                    reason,
                    detail,
                })
            }
            Kind::Fetch => {
                let producer = prefix.node()?;
                let (sender, topic, sequence) = position(&mut r)?;
                let count = r.u32("count")?;
                Message::Fetch(Fetch {
                    producer,
                    sender,
                    topic,
                    sequence,
                    count,
                })
            }
            Kind::Ack => {
                let producer = prefix.node()?;
                let topic = Topic::decode(r.short_bytes("subject")?, "subject")?;
                let sequence = r.u64("sequence")?;
                Message::Ack(Ack {
                    producer,
                    topic,
                    sequence,
                })
            }
            Kind::StoreAck => {
                let producer = prefix.node()?;
                let (store, topic, sequence) = position(&mut r)?;
                Message::StoreAck(StoreAck {
                    store,
                    ack: Ack {
                        producer,
                        topic,
                        sequence,
                    },
                })
            }
            Kind::GetHeads => Message::GetHeads(GetHeads {
                topic: Topic::decode(prefix.topic()?, "topic prefix")?,
                consumer: address(&mut r)?,
            }),
            Kind::ConsumerHello => {
                let store = prefix.node()?;
                let consumer = address(&mut r)?;
                let topics = read_strings(&mut r, "CONSUMER-HELLO", limits)?;
                Message::ConsumerHello(ConsumerHello {
                    store,
                    consumer,
                    topics,
                })
            }
            Kind::StoreHello => Message::StoreHello(StoreHello {
                consumer: prefix.node()?,
                store: address(&mut r)?,
            }),
        };
        r.finish("frame 1")?;
        Ok(message)
    }
}

/// Length of a `strings` field of topics: count, then each as length + bytes.
fn strings_len<'a>(topics: impl IntoIterator<Item = &'a Topic>) -> usize {
    4 + topics.into_iter().map(|t| 4 + t.len()).sum::<usize>()
}

/// Appends a `strings` field of topics (or of group names, which are topics).
fn put_strings<'a>(out: &mut BytesMut, topics: impl ExactSizeIterator<Item = &'a Topic>) {
    // A list longer than u32::MAX topics cannot be built in memory.
    out.put_u32(topics.len() as u32);
    for t in topics {
        out.put_u32(t.len() as u32);
        out.put_slice(t.as_bytes());
    }
}

/// A group name in a message of `kind`.
fn group_name(kind: Kind, name: Bytes) -> Result<GroupName, DecodeError> {
    GroupName::new(name).map_err(|error| {
        MalformedError::GroupName {
            kind: kind.name(),
            error,
        }
        .into()
    })
}

/// Length of a list of group offsets: count, then topic, partition and offset each.
fn offsets_len(offsets: &[GroupOffset]) -> usize {
    4 + offsets
        .iter()
        .map(|o| 1 + o.topic.len() + 1 + NODE_ID_HEX_LEN + 8)
        .sum::<usize>()
}

/// Appends a list of group offsets.
fn put_offsets(out: &mut BytesMut, offsets: &[GroupOffset]) {
    // At most `Limits::max_offsets` when built by us; a list longer than u32::MAX cannot be
    // built in memory.
    out.put_u32(offsets.len() as u32);
    for o in offsets {
        o.topic.put_string(out);
        o.partition.put_string(out);
        out.put_u64(o.offset);
    }
}

/// A list's announced count, checked against `limits.max_offsets`.
fn offsets_count(r: &mut Reader, kind: Kind, limits: &Limits) -> Result<usize, DecodeError> {
    let count = r.u32("offsets count")?;
    usize::try_from(count)
        .ok()
        .filter(|&n| n <= limits.max_offsets)
        .ok_or_else(|| {
            LimitError::TooManyOffsets {
                kind: kind.name(),
                count,
                max: limits.max_offsets,
            }
            .into()
        })
}

/// Reads a list of group offsets, its count checked before anything is reserved.
fn read_offsets(
    r: &mut Reader,
    kind: Kind,
    limits: &Limits,
) -> Result<Vec<GroupOffset>, DecodeError> {
    let count = offsets_count(r, kind, limits)?;
    // Each entry takes at least 42 bytes: never reserve from the announced count.
    let mut offsets = Vec::with_capacity(count.min(r.remaining() / 42));
    for _ in 0..count {
        let topic = Topic::decode(r.short_bytes("subject")?, "subject")?;
        let partition = address(r)?;
        let offset = r.u64("offset")?;
        offsets.push(GroupOffset {
            topic,
            partition,
            offset,
        });
    }
    Ok(offsets)
}

/// Reads a `strings` field of topics of a `kind` message, its count checked against
/// `limits.max_topics` before anything is reserved.
fn read_strings(
    r: &mut Reader,
    kind: &'static str,
    limits: &Limits,
) -> Result<Vec<Topic>, DecodeError> {
    let count = r.u32("subjects count")?;
    if usize::try_from(count).map_or(true, |n| n > limits.max_topics) {
        return Err(LimitError::TooManyTopics {
            kind,
            count,
            max: limits.max_topics,
        }
        .into());
    }
    // Never reserve from the announced count: each entry takes at least 4 bytes.
    let mut topics = Vec::with_capacity((count as usize).min(r.remaining() / 4));
    for _ in 0..count {
        topics.push(Topic::decode(r.long_bytes("subject")?, "subject")?);
    }
    Ok(topics)
}

/// Length of the metadata of `metas` in frame 1: every timestamp, then every record's extras
/// when any has some.
fn metas_len(metas: &[RecordMeta]) -> usize {
    // One pass: each record's extras (one flags byte for one without) and whether any has some.
    let (extras, any) = metas.iter().fold((0, false), |(sum, any), m| {
        let len = m.extras_len();
        (sum + len.max(1), any || len > 0)
    });
    TIMESTAMP_LEN * metas.len() + if any { extras } else { 0 }
}

/// Appends the metadata of `metas`: every timestamp, then every record's extras when any has
/// some (a record without them then takes one byte, its flags `0x00`).
fn put_metas(out: &mut BytesMut, metas: &[RecordMeta]) {
    for m in metas {
        m.put_timestamp(out);
    }
    if metas.iter().any(RecordMeta::has_extras) {
        for m in metas {
            if m.has_extras() {
                m.put_extras(out);
            } else {
                out.put_u8(0x00);
            }
        }
    }
}

/// [`read_metas`] of one record (a META-RECORD's), without a list.
fn read_meta(r: &mut Reader, limits: &Limits) -> Result<RecordMeta, DecodeError> {
    if r.remaining() < TIMESTAMP_LEN {
        return Err(MalformedError::MetaCount {
            kind: "records",
            records: 1,
        }
        .into());
    }
    let timestamp = RecordMeta::read_timestamp(r)?;
    if r.remaining() == 0 {
        return Ok(RecordMeta::created(timestamp));
    }
    let meta = RecordMeta::read_extras(r, timestamp, limits)?;
    // One encoding per message: extras are there only when the record needs them.
    if !meta.has_extras() {
        return Err(MalformedError::RecordFlags { flags: 0x00 }.into());
    }
    Ok(meta)
}

/// Reads the metadata of `count` records: their timestamps, then, if frame 1 goes on, the
/// extras of each. `count` is bounded by the frames received (one content frame per record),
/// and checked against the bytes left before the list is reserved.
fn read_metas(
    r: &mut Reader,
    count: usize,
    limits: &Limits,
) -> Result<Vec<RecordMeta>, DecodeError> {
    if r.remaining() / TIMESTAMP_LEN < count {
        return Err(MalformedError::MetaCount {
            kind: "records",
            records: count,
        }
        .into());
    }
    let mut metas = Vec::with_capacity(count);
    for _ in 0..count {
        metas.push(RecordMeta::created(RecordMeta::read_timestamp(r)?));
    }
    if r.remaining() > 0 {
        for m in &mut metas {
            *m = RecordMeta::read_extras(r, m.timestamp, limits)?;
        }
        // One encoding per message: extras are there only when a record needs them.
        if !metas.iter().any(RecordMeta::has_extras) {
            return Err(MalformedError::RecordFlags { flags: 0x00 }.into());
        }
    }
    Ok(metas)
}

/// A STORE-REFUSAL's detail as it goes on the wire: at most 255 bytes.
fn detail_bytes(detail: &Bytes) -> &[u8] {
    &detail[..detail.len().min(0xFF)]
}

/// What `encode` appends to `buf`, split off it as a frame (`split` leaves `buf` empty with
/// the rest of its capacity for the next one).
#[inline]
fn split_encoded(buf: &mut BytesMut, encode: impl FnOnce(&mut BytesMut)) -> Bytes {
    let start = buf.len();
    encode(buf);
    buf.split().split_off(start).freeze()
}

fn put_position(out: &mut BytesMut, node: &NodeId, topic: &Topic, sequence: u64) {
    node.put_string(out);
    topic.put_string(out);
    out.put_u64(sequence);
}

fn address(r: &mut Reader) -> Result<NodeId, DecodeError> {
    Ok(r.short_with("address", |hex| NodeId::decode(hex, "address"))??)
}

/// Frame 1's topic prefix as read: a topic's name, or a node's id (parsed as it was read).
enum ReadPrefix {
    Topic(Bytes),
    Node(Result<NodeId, MalformedError>),
}

impl ReadPrefix {
    fn topic(self) -> Result<Bytes, MalformedError> {
        match self {
            ReadPrefix::Topic(name) => Ok(name),
            // Not reached: `decode` reads a topic for exactly the kinds that ask for one.
            ReadPrefix::Node(_) => Err(MalformedError::TopicMismatch {
                kind: "topic prefix",
            }),
        }
    }

    fn node(self) -> Result<NodeId, MalformedError> {
        match self {
            ReadPrefix::Node(node) => node,
            ReadPrefix::Topic(hex) => NodeId::decode(&hex, "topic prefix"),
        }
    }
}

/// `address`, `subject`, `sequence`: the fields RECORD, HEAD and their direct forms share,
/// and FETCH starts with.
fn position(r: &mut Reader) -> Result<(NodeId, Topic, u64), DecodeError> {
    let node = address(r)?;
    let topic = Topic::decode(r.short_bytes("subject")?, "subject")?;
    let sequence = r.u64("sequence")?;
    Ok((node, topic, sequence))
}

fn content(frames: &mut impl Frames, limits: &Limits) -> Result<Bytes, DecodeError> {
    // The frame count was checked against the kind before any field was read.
    let content = frames.take(1);
    check_content(&content, limits)?;
    Ok(content)
}

/// The frames a message is decoded from: borrowed (each frame used is cloned, a reference
/// count) or taken (moved out).
trait Frames {
    fn len(&self) -> usize;
    /// Frame `i` (< `len`), or an empty one.
    fn take(&mut self, i: usize) -> Bytes;
}

impl Frames for &[Bytes] {
    #[inline]
    fn len(&self) -> usize {
        <[Bytes]>::len(self)
    }
    #[inline]
    fn take(&mut self, i: usize) -> Bytes {
        self.get(i).cloned().unwrap_or_default()
    }
}

impl Frames for &mut [Bytes] {
    #[inline]
    fn len(&self) -> usize {
        <[Bytes]>::len(self)
    }
    #[inline]
    fn take(&mut self, i: usize) -> Bytes {
        self.get_mut(i).map(std::mem::take).unwrap_or_default()
    }
}

fn check_content(content: &Bytes, limits: &Limits) -> Result<(), DecodeError> {
    if content.len() > limits.max_content {
        return Err(LimitError::ContentTooLarge {
            len: content.len(),
            max: limits.max_content,
        }
        .into());
    }
    Ok(())
}
