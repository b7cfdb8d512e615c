//! Sans-IO Dafka: the wire format of the reference implementation (zeromq/dafka), and the
//! node state machines. No sockets, no runtime, no clock: the driver passes
//! frames and the current time in, and takes messages to publish and the next deadline out.
//!
//! * [`Message`] and its kinds ([`Record`], [`DirectRecord`], [`Fetch`], [`Ack`], [`Head`],
//!   [`DirectHead`], [`GetHeads`], [`ConsumerHello`], [`StoreHello`], and our extensions
//!   [`StoreAck`], [`DirectLowWater`], [`HeadsQuery`], [`HeadsEnd`], [`DirectRecords`],
//!   [`DirectMissing`], [`StoreRefusal`]): one
//!   ZeroMQ multipart message each (byte tables in the [`message`] docs and `docs/dafka.md`).
//! * [`BeaconMessage`]: node beacons, tower beacons, the tower's welcome.
//! * [`subscription`]: the subscription prefixes each node makes or acts on.
//! * [`NodeId`], [`Topic`]: validated once, so encoding never fails.
//! * [`Producer`]: offsets, the HEAD timer, the bounded unacknowledged buffer, FETCH answers,
//!   cumulative ACKs from `min_acks` stores.
//! * [`Consumer`]: exact topics, earliest/latest/explicit start, gap FETCHes retried on a timer
//!   with backoff, a bounded reorder buffer, duplicates dropped, in-order delivery.
//! * [`StoreWriter`], [`StoreReader`]: the two halves of a store (the reference's writer and
//!   reader nodes): replication with gap FETCHes on a timer, ACKs only for durable records,
//!   FETCH, GET-HEADS, CONSUMER-HELLO and STORE-HELLO answered from a [`StoreLog`].
//! * [`Discovery`]: the peers a node's subscriber is connected to (from tower beacons or ZRE),
//!   the beacon timer with its newcomer answers, silent peers dropped, at most `max_peers`.
//! * [`group`]: consumer groups without a coordinator: each member's view of the group
//!   ([`group::Membership`]: heartbeats, session timeout, leaving), which member owns which
//!   partition, computed by every member from the same view ([`group::assign`]), and the
//!   hand-over of partitions between members ([`group::Ownership`]).
//! * [`DecodeError`]: typed by fault ([`MalformedError`], [`LimitError`]), checked against
//!   [`Limits`] before anything is allocated.
//!
//! # Mapping onto ZeroMQ sockets
//!
//! | message | frames | from socket | to socket | subscription matched |
//! |---|---|---|---|---|
//! | RECORD, HEAD | 2, 1 | producer PUB | consumer / store writer SUB | `'M'`/`'H'` + topic |
//! | DIRECT-RECORD | 2 | producer PUB, store reader XPUB | consumer / store writer SUB | `'D'` + requester |
//! | FETCH | 1 | consumer XPUB, store writer PUB | producer / store reader SUB | `'F'` + producer |
//! | ACK | 1 | store writer PUB | producer SUB | `'K'` + producer |
//! | GET-HEADS | 1 | consumer XPUB | store reader SUB | `'G'` (+ topic) |
//! | DIRECT-HEAD | 1 | store reader XPUB | consumer SUB | `'E'` + consumer |
//! | CONSUMER-HELLO | 1 | consumer XPUB | store reader SUB | `'W'` + store reader |
//! | STORE-HELLO | 1 | store reader XPUB | consumer SUB | `'L'` + consumer |
//! | STORE-ACK (extension) | 1 | store writer PUB | producer SUB (`min_acks` > 1) | `'A'` + producer |
//! | DIRECT-LOW-WATER (extension) | 1 | store reader XPUB | consumer SUB | `'O'` + consumer |
//! | HEADS-QUERY (extension) | 1 | consumer XPUB | store reader SUB | `'Q'` |
//! | HEADS-END (extension) | 1 | store reader XPUB | consumer SUB | `'R'` + consumer |
//! | DIRECT-RECORDS (extension) | 1 + records | store reader XPUB | consumer SUB | `'B'` + consumer |
//! | node beacon | 4 | node beacon PUB | tower XSUB | `"B"` |
//! | tower beacon, welcome | 3, 1 | tower XPUB | node beacon SUB | `"B"`, `"W"` |
//!
//! ```
//! use bytes::Bytes;
//! use dafka_proto::{Head, Limits, Message, NodeId, Topic};
//!
//! let head = Message::Head(Head {
//!     producer: "986108951EB145A1BFBDC5601975F614".parse()?,
//!     topic: Topic::try_from("golden")?,
//!     sequence: 2,
//! });
//! let frames = head.to_frames();
//! assert_eq!(&frames[0][..9], b"Hgolden\x00\x01");
//! assert_eq!(Message::decode(&frames, &Limits::DEFAULT)?, head);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod beacon;
pub mod consumer;
pub mod discovery;
mod error;
pub mod group;
mod id;
pub mod message;
pub mod producer;
pub mod record;
mod retry;
pub mod store;
pub mod subscription;

pub use beacon::{BEACON_TOPIC, BeaconMessage, NodeBeacon, TowerBeacon, WELCOME_TOPIC};
pub use consumer::{
    Bounds, Consumer, ConsumerConfig, Delivery, Listing, Loss, MISSING_REPORTS, OffsetReset,
    TimeOffset,
};
pub use discovery::{ANSWER_BEACON_GAP, Action, Cause, Discovery, DiscoveryConfig, split_tcp};
pub use error::{
    CallerError, DecodeError, DiscoveryError, GroupNameError, LimitError, MalformedError,
    PeerError, SendError, TopicError,
};
pub use id::{MAX_TOPIC_LEN, NODE_ID_HEX_LEN, NodeId, ParseNodeIdError, Topic};
pub use message::{
    Ack, COMMIT_SEEK, CommittedQuery, ConsumerHello, DirectCommitted, DirectGroups, DirectHead,
    DirectLowWater, DirectMetaRecords, DirectMissing, DirectRecord, DirectRecords,
    DirectTimeOffset, DirectTopics, Fetch, GetHeads, GroupHeartbeat, GroupOffset, GroupsQuery,
    Head, HeadsEnd, HeadsQuery, Kind, Limits, Message, MetaRecord, MetaRecordRef, OffsetCommit,
    PREFIX_END, Record, RefusalReason, StoreAck, StoreHello, StoreRefusal, TimeQuery, TopicsQuery,
    VERSION,
};
pub use producer::{MAX_REFUSALS, Producer, ProducerConfig};
pub use record::{Header, HeaderRef, MetaParts, RecordMeta, TimestampType};
pub use retry::FETCH_WINDOW;
pub use store::{
    LogRead, REPEATED_REFUSALS, StoreLog, StoreReader, StoreReaderConfig, StoreWriter,
    StoreWriterConfig,
};
