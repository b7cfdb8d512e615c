//! Dafka nodes on tokio, over the project's own ZeroMQ sockets (`dafka-zmtp`), driving the
//! sans-IO state machines of `dafka-proto`. This crate holds no protocol logic: it owns
//! sockets, one task per node and one timer, and moves messages between them and the state
//! machines.
//!
//! * [`Tower`]: XSUB + XPUB forwarding beacons (defaults `:5556`/`:5557`), the welcome, node
//!   beacons rewritten to `tcp://host:port`.
//! * [`ProducerNode`]: one topic, one partition (its id); `send`, `send_many`, `flush`.
//! * [`ConsumerNode`]: exact topics, earliest/latest/explicit start offsets, `poll` in
//!   batches, `positions`.
//! * [`StoreNode`]: the store, as the reference's two nodes (writer and reader) over the
//!   storage engine `dafka-store`: replicates every partition, ACKs durable records only,
//!   answers FETCH from disk.
//! * What every node shares (beacons, the publisher, the subscriber connected to every peer,
//!   dropping malformed input with a rate-limited log) is in [`node`].
//!
//! ```
//! use std::time::Duration;
//! use bytes::Bytes;
//! use dafka_node::{
//!     ConsumerNode, ConsumerOptions, NodeConfig, ProducerNode, ProducerOptions, Tower,
//!     TowerAddress, TowerConfig,
//! };
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), dafka_node::Error> {
//! let tower = Tower::start(TowerConfig::new("tcp://127.0.0.1:0")).await?;
//! let towers = TowerAddress::parse_list(&tower.towers())?;
//! let producer = ProducerNode::start(
//!     "weather",
//!     NodeConfig::new(towers.clone()),
//!     ProducerOptions::default().with_head_interval(Duration::from_millis(100)),
//! )
//! .await?;
//! // Start at offset 0 of the producer's partition: records sent before the consumer was
//! // connected are FETCHed from the producer.
//! let consumer = ConsumerNode::start(
//!     &["weather"],
//!     NodeConfig::new(towers),
//!     ConsumerOptions::default().with_start_offset("weather", producer.partition(), 0),
//! )
//! .await?;
//! producer.send(Bytes::from_static(b"sunny")).await?;
//! let mut got = Vec::new();
//! while got.is_empty() {
//!     got = consumer.poll(1, Duration::from_millis(100)).await?;
//! }
//! assert_eq!(got[0].value, &b"sunny"[..]);
//! assert_eq!(got[0].offset, 0);
//! # consumer.close().await; producer.close().await; tower.close().await;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod consumer;
mod error;
pub mod node;
mod producer;
mod security;
mod store;
mod tower;
pub mod zre_discovery;

pub use consumer::{
    ConsumerNode, ConsumerOptions, ConsumerRecord, GroupOptions, OFFSETS_SETTLE, Position,
};
pub use dafka_proto::group::assign as group_assign;
pub use dafka_proto::record::is_header_name;
pub use dafka_proto::{
    Bounds, Header, HeaderRef, MetaParts, NodeId, OffsetReset, RecordMeta, RefusalReason,
    TimestampType, Topic,
};
pub use dafka_store::SyncPolicy;
pub use error::Error;
pub use node::{NodeConfig, NodeStats, TowerAddress};
pub use producer::{
    EncodedRecord, ProducerNode, ProducerOptions, ProducerRecord, REFUSAL_GRACE, RESUME_GRACE,
    now_us,
};
pub use security::ClusterKeys;
pub use store::{StoreNode, StoreOptions};
pub use tower::{Tower, TowerConfig};
pub use zre_discovery::ZreCluster;
