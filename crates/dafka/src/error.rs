//! Errors of the nodes, typed by fault: the caller's mistake, a wait that ran out, the
//! sockets underneath. Malformed input from peers never reaches the caller: it is dropped and
//! logged (see [`NodeStats`](crate::NodeStats)).

use std::time::Duration;

/// What a node's API call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting, topic or record the caller gave is invalid (a record over the maximum, a
    /// bad configuration).
    #[error(transparent)]
    Caller(#[from] dafka_proto::CallerError),
    /// A topic name that cannot go on the wire.
    #[error(transparent)]
    Topic(#[from] dafka_proto::TopicError),
    /// An endpoint or tower address the node cannot use.
    #[error("bad endpoint {endpoint:?}: {reason}")]
    Endpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// `send` waited `waited` for room in the unacknowledged buffer (full of records no store
    /// acknowledged yet) and found none.
    #[error(
        "the unacknowledged buffer stayed full ({records} records, {bytes} bytes) for {waited:?}"
    )]
    SendTimeout {
        /// Records held unacknowledged.
        records: usize,
        /// Content bytes held unacknowledged.
        bytes: usize,
        /// How long `send` waited.
        waited: Duration,
    },
    /// `flush` ran out of time with records still unacknowledged; says how many stores
    /// could have acknowledged them.
    #[error(
        "{unacked} records still unacknowledged after {} s: {}",
        waited.as_secs_f64(),
        reachable_stores(*stores, *min_acks, topic)
    )]
    FlushTimeout {
        /// Records not yet acknowledged by `min_acks` stores.
        unacked: usize,
        /// How long `flush` waited.
        waited: Duration,
        /// The producer's topic.
        topic: dafka_proto::Topic,
        /// Store writers that hear the producer now (their subscription to every RECORD
        /// reached its publisher).
        stores: usize,
        /// Distinct stores that must acknowledge a record.
        min_acks: usize,
    },
    /// A store refused records of the producer's partition and said why (STORE-REFUSAL, the
    /// extension): a record over its size limit (skipped there), or the store can no longer
    /// write (a full or failing disk; nothing is acknowledged by it until it is restarted).
    #[error("store {store} refused records from offset {offset}: {detail}{}", if *unacked > 0 { format!(" ({unacked} records still unacknowledged)") } else { String::new() })]
    StoreRefused {
        /// The store writer that refused.
        store: dafka_proto::NodeId,
        /// The first offset it refused.
        offset: u64,
        /// Why.
        reason: dafka_proto::RefusalReason,
        /// The store's words.
        detail: String,
        /// Records not yet acknowledged by `min_acks` stores.
        unacked: usize,
    },
    /// A producer resuming a saved partition heard no store report the partition's head
    /// within `waited` (no store reachable, or none holds a record of it).
    #[error("no store reported the partition's head within {waited:?}")]
    ResumeTimeout {
        /// How long it waited.
        waited: Duration,
    },
    /// No tower answered a producer or consumer within `waited` of its start
    /// ([`NodeConfig::connect_timeout`](crate::NodeConfig::connect_timeout)): a wrong
    /// address or port, or no tower running there.
    #[error(
        "no tower answered within {} s at {towers} (is a tower running there? each towers \
         endpoint names a tower's SUB port)",
        waited.as_secs_f64()
    )]
    NoTower {
        /// The towers, as given.
        towers: String,
        /// How long the node waited.
        waited: Duration,
    },
    /// An offsets query found no store reachable within `waited`: the towers are unreachable,
    /// or no store runs.
    #[error("no store answered within {waited:?}: are the towers reachable and a store running?")]
    NoStore {
        /// How long it waited.
        waited: Duration,
    },
    /// The producer state machine refused a record for a reason of its own.
    #[error(transparent)]
    Refused(dafka_proto::SendError),
    /// No store acknowledged the commit of these partitions (`topic/partition`): no store
    /// reachable holds them, or the offset is past the partition's end, or no store could
    /// write it.
    #[error(
        "no store acknowledged the commit of {} (does a store hold them? is the offset past \
         the partition's end?)",
        missing.join(", ")
    )]
    NotCommitted {
        /// The partitions not acknowledged.
        missing: Vec<String>,
    },
    /// `seek`, `pause` or `resume` of a partition this group member does not read.
    #[error(
        "partition {partition} is not assigned to this consumer (seek, pause and resume need \
         one it reads)"
    )]
    NotAssigned {
        /// `topic/partition`.
        partition: String,
    },
    /// A consumer group name breaks the rules (empty, over 255 bytes, or with a NUL byte).
    #[error("bad group name: {0}")]
    GroupName(#[from] dafka_proto::GroupNameError),
    /// The node was closed.
    #[error("the node is closed")]
    Closed,
    /// The store directory could not be opened or recovered.
    #[error(transparent)]
    Storage(#[from] dafka_store::OpenError),
    /// The store's committed offsets (consumer groups) could not be opened.
    #[error(transparent)]
    Offsets(#[from] dafka_store::OffsetsError),
    /// The operating system's random source (for a new node id) failed.
    #[error("the operating system's random source failed: {0}")]
    Random(#[source] std::io::Error),
    /// A socket failed (binding a port in use, a runtime missing, ...).
    #[error(transparent)]
    Socket(#[from] dafka_zmtp::Error),
    /// ZRE discovery could not start (`towers = "zre://..."`).
    #[error(transparent)]
    Zre(#[from] dafka_zre::Error),
}

/// What [`Error::FlushTimeout`] says of the stores a producer reaches.
fn reachable_stores(stores: usize, min_acks: usize, topic: &dafka_proto::Topic) -> String {
    let reached = match stores {
        0 => {
            return format!(
                "no store is reachable for topic '{topic}' (is one running, on the same towers?)"
            );
        }
        1 => "1 store reachable".to_owned(),
        n => format!("{n} stores reachable"),
    };
    if stores < min_acks {
        format!("{reached} for topic '{topic}', {min_acks} must acknowledge")
    } else {
        format!("{reached} for topic '{topic}'")
    }
}
