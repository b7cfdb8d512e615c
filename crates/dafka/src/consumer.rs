//! The consumer node: [`dafka_proto::Consumer`] on an XPUB publisher (as the reference's: a
//! store reader's `'W'` + id subscription reaching it asks for a CONSUMER-HELLO) and a SUB
//! subscribed to `'D'`, `'V'`, `'E'`, `'L'` + its id and `'T'`, `'M'`, `'H'` + each topic +
//! `0x00` (exact).
//!
//! The node's task hands every received message to the state machine and moves the records
//! it delivers, with their metadata (stamped with the time they were received when they came
//! without, from a reference producer), to a queue of at most
//! [`ConsumerOptions::max_buffered`] records; while that queue is full it stops reading its
//! subscriber. [`ConsumerNode::poll`] takes batches from the queue.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dafka_proto::consumer::PastEnd;
use dafka_proto::group::{GroupEvent, GroupMember, GroupName, Membership, MembershipConfig};
use dafka_proto::{
    Bounds, CallerError, Consumer, ConsumerConfig, GroupOffset, Kind, Limits, Listing, Loss,
    Message, NodeId, OffsetReset, PeerError, RecordMeta, TimeOffset, Topic,
};
use dafka_zmtp::{Socket, SocketType};

use crate::error::Error;
use crate::node::{
    Control, NodeConfig, NodeStats, NodeTask, Plumbing, Role, TowerWait, log_refused, new_node_id,
    publish, take_up_to,
};
use crate::producer::now_us;

/// A record as the consumer delivers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// The topic.
    pub topic: Topic,
    /// The partition: its producer's id.
    pub partition: NodeId,
    /// The offset within the partition.
    pub offset: u64,
    /// The value.
    pub value: Bytes,
    /// Its timestamp (the producer's, the same for every reader), key and headers. A record
    /// from a reference producer has none on the wire: the time a store of ours appended it
    /// when it came from one, else the time this consumer received it, as
    /// [`TimestampType::LogAppendTime`](dafka_proto::TimestampType::LogAppendTime).
    pub meta: RecordMeta,
}

/// The next offset a consumer delivers in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The topic.
    pub topic: Topic,
    /// The partition.
    pub partition: NodeId,
    /// The next offset to deliver.
    pub next: u64,
}

/// Settings of a [`ConsumerNode`] beyond those every node has.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConsumerOptions {
    /// The consumer's id (`None`: a new one).
    pub id: Option<NodeId>,
    /// The state machine's settings: where to start in a partition without a position
    /// (`offset_reset`: earliest or latest, the default), the reordering limits, the FETCH
    /// retry delays, the heads refresh. Its `id` is replaced by the node's ([`id`](Self::id)).
    pub protocol: ConsumerConfig,
    /// Explicit start offsets: (topic, partition, next offset).
    pub start_offsets: Vec<(String, NodeId, u64)>,
    /// Most records received and not yet polled; past it the node stops reading its peers.
    pub max_buffered: usize,
    /// The consumer group to join (`None`: read every partition of the topics, alone).
    pub group: Option<GroupOptions>,
}

/// A consumer group's settings (see `docs/groups.md`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GroupOptions {
    /// The group's name (1-255 bytes, no NUL).
    pub name: String,
    /// Session timeout, heartbeat interval, settle time, most members.
    pub membership: MembershipConfig,
    /// Commit what the application took this often (`None`: only on `commit` and when a
    /// partition is given up or the consumer closes). Default 5 s.
    pub auto_commit: Option<Duration>,
    /// Ask the stores for the topics' partitions this often (new producers get an owner).
    /// Default: the heartbeat interval.
    pub discovery: Duration,
}

impl GroupOptions {
    /// Group `name` with the default settings (a 10 s session timeout, auto-commit every 5 s).
    pub fn new(name: impl Into<String>) -> Self {
        let membership = MembershipConfig::default();
        GroupOptions {
            name: name.into(),
            membership,
            auto_commit: Some(Duration::from_secs(5)),
            discovery: membership.heartbeat_interval,
        }
    }

    /// Sets the session timeout (the heartbeat interval, settle time and discovery interval
    /// follow it).
    #[must_use]
    pub fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.membership = MembershipConfig::with_session_timeout(timeout);
        self.discovery = self.membership.heartbeat_interval;
        self
    }

    /// Sets [`auto_commit`](Self::auto_commit).
    #[must_use]
    pub fn with_auto_commit(mut self, every: Option<Duration>) -> Self {
        self.auto_commit = every;
        self
    }
}

impl Default for ConsumerOptions {
    /// The state machine's defaults (see [`ConsumerConfig::new`]), no explicit offsets, and
    /// 100 000 records buffered.
    fn default() -> Self {
        ConsumerOptions {
            id: None,
            protocol: ConsumerConfig::new(NodeId::from_bytes([0; 16])),
            start_offsets: Vec::new(),
            max_buffered: 100_000,
            group: None,
        }
    }
}

impl ConsumerOptions {
    /// Sets [`id`](Self::id).
    #[must_use]
    pub fn with_id(mut self, id: Option<NodeId>) -> Self {
        self.id = id;
        self
    }

    /// Sets the [`protocol`](Self::protocol)'s `offset_reset`.
    #[must_use]
    pub fn with_offset_reset(mut self, reset: OffsetReset) -> Self {
        self.protocol.offset_reset = reset;
        self
    }

    /// Adds an explicit start offset.
    #[must_use]
    pub fn with_start_offset(mut self, topic: &str, partition: NodeId, next: u64) -> Self {
        self.start_offsets.push((topic.to_owned(), partition, next));
        self
    }

    /// Joins the consumer group `group` (see [`GroupOptions`]).
    #[must_use]
    pub fn with_group(mut self, group: GroupOptions) -> Self {
        self.group = Some(group);
        self
    }

    /// Sets [`max_buffered`](Self::max_buffered).
    #[must_use]
    pub fn with_max_buffered(mut self, max: usize) -> Self {
        self.max_buffered = max;
        self
    }

    /// Sets the [`protocol`](Self::protocol)'s `fetch_retry` and `fetch_retry_max`.
    #[must_use]
    pub fn with_fetch_retry(mut self, first: Duration, max: Duration) -> Self {
        self.protocol.fetch_retry = first;
        self.protocol.fetch_retry_max = max;
        self
    }
}

/// How long [`ConsumerNode::offsets`] waits with no new answer and no newly reachable store
/// before it returns what it heard.
pub const OFFSETS_SETTLE: Duration = Duration::from_millis(150);
const OFFSETS_TICK: Duration = Duration::from_millis(10);

struct State {
    consumer: Consumer,
    records: VecDeque<ConsumerRecord>,
    group: Option<GroupState>,
    /// Groups this consumer listens to without joining (`observe_group`): their members as
    /// their heartbeats say (at most [`MAX_OBSERVED`] groups named, [`MAX_OBSERVED_ALL`] when
    /// it listens to every group).
    observed: BTreeMap<GroupName, Membership>,
    /// Listening to every group's heartbeats (`observe_groups`) as this node, with this
    /// session timeout.
    observe_all: Option<(NodeId, MembershipConfig)>,
}

/// Most groups one consumer observes by name.
const MAX_OBSERVED: usize = 64;

/// Most groups one consumer listening to every group keeps (heartbeats of further ones are
/// ignored: made-up group names cannot grow the map without bound).
const MAX_OBSERVED_ALL: usize = 1024;

/// A consumer group member's state, beside its consumer's.
struct GroupState {
    name: GroupName,
    member: GroupMember,
    /// Changes for the group's driver task, oldest first (revokes are applied at once, in
    /// [`apply_group_changes`]; their commits wait in `to_commit`).
    events: VecDeque<GroupEvent>,
    /// Per partition, the offset after the last record of the application's latest take: not
    /// yet known processed (Kafka's rule: records count as processed once the application
    /// polls again, or calls `commit`).
    polled: BTreeMap<(Topic, NodeId), u64>,
    /// Per partition, the offset after the last record of the takes before the latest: what
    /// auto-commit and a revoke commit.
    processed: BTreeMap<(Topic, NodeId), u64>,
    /// Offsets of revoked partitions, to commit.
    to_commit: BTreeMap<(Topic, NodeId), u64>,
    /// Partitions moved by `seek` since their last commit: committed as seeks (even
    /// backwards).
    seeked: std::collections::BTreeSet<(Topic, NodeId)>,
    /// Per partition, its end as the last discovery found it (for the lag).
    ends: BTreeMap<(Topic, NodeId), u64>,
    /// Partitions started (`true`) and stopped, oldest first, for the application's
    /// callbacks ([`ConsumerNode::assignment_changes`]); the oldest are dropped past
    /// [`MAX_CHANGES`].
    changes: VecDeque<(bool, (Topic, NodeId))>,
    /// Partitions read but paused by the application.
    paused: std::collections::BTreeSet<(Topic, NodeId)>,
    /// The member's topics of which the last discovery found no partition (an "assigned"
    /// consumer keeps no census of its own: see [`ConsumerNode::topics_not_held`]).
    not_held: std::collections::BTreeSet<Topic>,
    /// Since when the node reads no input (the queue full: the application is behind), so
    /// hears no heartbeat: the others are not dropped for that silence
    /// ([`GroupMember::handle_deaf`]).
    deaf_since: Option<Instant>,
}

/// Most assignment changes kept for an application that does not take them.
const MAX_CHANGES: usize = 10_000;

impl GroupState {
    fn changed(&mut self, assigned: bool, key: (Topic, NodeId)) {
        if self.changes.len() >= MAX_CHANGES {
            self.changes.pop_front();
        }
        self.changes.push_back((assigned, key));
    }
}

fn raise(map: &mut BTreeMap<(Topic, NodeId), u64>, key: (Topic, NodeId), next: u64) {
    let at = map.entry(key).or_insert(next);
    *at = (*at).max(next);
}

/// An observed group's members heard from within its session timeout as of `now`, in id
/// order, without the observer `me`.
fn observed_view(m: &mut Membership, now: Instant, me: NodeId) -> Vec<NodeId> {
    m.handle_timeout(now);
    while m.poll_event().is_some() {}
    m.view().into_iter().filter(|id| *id != me).collect()
}

/// Whether two records are of one partition (the topic compared by its bytes only when the
/// two do not share them, as the records of one message do).
fn same_partition(a: &ConsumerRecord, b: &ConsumerRecord) -> bool {
    let (x, y) = (a.topic.as_bytes(), b.topic.as_bytes());
    a.partition == b.partition && (std::ptr::eq(x, y) || x == y)
}

/// The partition of a run's last record, and the offset after it.
fn run_end(last: &ConsumerRecord) -> (Topic, NodeId, u64) {
    (
        last.topic.clone(),
        last.partition,
        last.offset.saturating_add(1),
    )
}

/// Moves the group member's changes out: a revoked partition stops at once (no record of it
/// delivered from now on, its queued records dropped, what the application processed of it
/// kept to commit); the others go to the driver. Whether the driver has anything new.
fn apply_group_changes(shared: &Shared, state: &mut State) -> bool {
    let Some(g) = &mut state.group else {
        return false;
    };
    let mut revoked = Vec::new();
    let mut news = false;
    while let Some(e) = g.member.poll_event() {
        match e {
            GroupEvent::Revoked(key) => {
                g.changed(false, key.clone());
                g.paused.remove(&key);
                g.polled.remove(&key);
                if let Some(next) = g.processed.remove(&key) {
                    raise(&mut g.to_commit, key.clone(), next);
                }
                news |= g.to_commit.contains_key(&key);
                revoked.push(key);
            }
            other => {
                g.events.push_back(other);
                news = true;
            }
        }
    }
    for (topic, partition) in &revoked {
        state.consumer.unassign(topic, partition);
        tracing::debug!(topic = %topic, partition = %partition, "partition revoked");
    }
    if !revoked.is_empty() {
        shared.unqueue(state, |q| {
            q.retain(|r| {
                !revoked
                    .iter()
                    .any(|(t, p)| *p == r.partition && *t == r.topic)
            })
        });
    }
    news
}

struct Shared {
    state: Mutex<State>,
    publisher: Socket,
    subscriber: Socket,
    control: Arc<Control>,
    max_buffered: usize,
    /// The group's driver has changes to act on.
    group_changed: tokio::sync::Notify,
    /// One group offsets commit or query at a time (the state machine runs one).
    group_asks: tokio::sync::Mutex<()>,
    /// One offsets query at a time (see [`Shared::offsets`]).
    offsets_asks: tokio::sync::Mutex<()>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The queue is full: the task reads nothing until a poll makes room.
    fn full(&self, state: &State) -> bool {
        state.records.len() >= self.max_buffered
    }

    /// Whether the node reads its input: not while the queue is full, but for the answers
    /// to a group offsets commit or query, which come in on the same socket as the records
    /// (the application may be the one waiting, in `commit`), for as long as the ask runs.
    fn reading(&self, state: &State) -> bool {
        !self.full(state) || state.consumer.group_asking()
    }

    /// Removes queued records with `remove`. If that took any from a full queue, the FETCH
    /// retries are put off (the answers may be waiting unread in the socket) and the task is
    /// woken to read again.
    fn unqueue<R>(
        &self,
        state: &mut State,
        remove: impl FnOnce(&mut VecDeque<ConsumerRecord>) -> R,
    ) -> R {
        let (was_full, before) = (self.full(state), state.records.len());
        let out = remove(&mut state.records);
        if was_full && state.records.len() < before {
            state.consumer.resume(crate::node::now());
            self.control.wake.notify_one();
        }
        out
    }

    /// Returns `publish`'s refusal, for [`log_refused`] once the lock is released.
    #[must_use]
    fn publish_queued(&self, state: &mut State) -> Option<dafka_zmtp::Error> {
        publish(
            &self.publisher,
            std::iter::from_fn(|| state.consumer.poll_transmit()),
        )
    }
}

impl Shared {
    /// [`ConsumerNode::assign`] (its documentation).
    pub(crate) fn assign(
        &self,
        topic: &Topic,
        partition: NodeId,
        next: u64,
        end: Option<u64>,
    ) -> Result<(), Error> {
        let shared = self;
        let mut state = shared.lock();
        shared.unqueue(&mut state, |q| {
            q.retain(|r| r.topic != *topic || r.partition != partition);
        });
        let subscriptions =
            state
                .consumer
                .assign(topic.clone(), partition, next, end, crate::node::now());
        for s in subscriptions.iter().flatten() {
            shared.subscriber.subscribe(s)?;
        }
        let refused = shared.publish_queued(&mut state);
        drop(state);
        log_refused(refused);
        // The FETCH retry timer is new: let the task take its deadline.
        shared.control.wake.notify_one();
        Ok(())
    }

    /// [`ConsumerNode::unassign`] (its documentation).
    pub(crate) fn unassign(&self, topic: &Topic, partition: NodeId) {
        let mut state = self.lock();
        state.consumer.unassign(topic, &partition);
        self.unqueue(&mut state, |q| {
            q.retain(|r| r.topic != *topic || r.partition != partition);
        });
    }

    /// [`ConsumerNode::offsets`] (its documentation).
    pub(crate) async fn offsets(
        &self,
        topic: &Topic,
        timeout: Duration,
    ) -> Result<Vec<(NodeId, Bounds)>, Error> {
        // One offsets query at a time: the state machine keeps one per topic, and a group's
        // driver asks too.
        let _one = self.offsets_asks.lock().await;
        let heard = self
            .ask_stores(
                timeout,
                |c| c.query_offsets(topic.clone()),
                |c| (c.query_answered(topic), c.offsets(topic).cloned()),
                |c| c.finish_query(topic),
            )
            .await?;
        Ok(heard.unwrap_or_default().into_iter().collect())
    }

    /// [`ConsumerNode::commit_offsets`] (its documentation).
    pub(crate) async fn commit_offsets(
        &self,
        group: &GroupName,
        offsets: &[(Topic, NodeId, u64)],
        seek: bool,
        timeout: Duration,
    ) -> Result<BTreeMap<(Topic, NodeId), u64>, Error> {
        let max = Limits::DEFAULT.max_offsets;
        if offsets.is_empty() || offsets.len() > max {
            return Err(Error::Caller(CallerError::OffsetCount {
                count: offsets.len(),
                max,
            }));
        }
        // One group ask at a time: the driver's and the application's would replace each
        // other's in the state machine.
        let _one = self.group_asks.lock().await;
        let list: Vec<GroupOffset> = offsets
            .iter()
            .map(|(topic, partition, offset)| GroupOffset {
                topic: topic.clone(),
                partition: *partition,
                offset: *offset,
            })
            .collect();
        // A store answers a commit once it is on its disk; a reference store never does: the
        // commit may end short of every reachable store's answer only when each partition
        // was acknowledged by one of ours.
        let keys: Vec<(Topic, NodeId)> = offsets.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
        let heard = self
            .ask_stores_settling(
                timeout,
                |c| c.commit_offsets(group.clone(), list, seek),
                |c| (c.group_answered(), c.group_heard().cloned()),
                Consumer::finish_group_ask,
                |so_far| so_far.is_some_and(|h| keys.iter().all(|k| h.contains_key(k))),
                COMMIT_SETTLE,
            )
            .await?
            .unwrap_or_default();
        let missing: Vec<String> = offsets
            .iter()
            .filter(|(t, p, _)| !heard.contains_key(&(t.clone(), *p)))
            .map(|(t, p, _)| format!("{t}/{p}"))
            .collect();
        if !missing.is_empty() {
            return Err(Error::NotCommitted { missing });
        }
        Ok(heard)
    }

    /// [`ConsumerNode::committed_offsets`] (its documentation).
    pub(crate) async fn committed_offsets(
        &self,
        group: &GroupName,
        partitions: &[(Topic, NodeId)],
        timeout: Duration,
    ) -> Result<BTreeMap<(Topic, NodeId), u64>, Error> {
        let max = Limits::DEFAULT.max_offsets;
        if partitions.len() > max {
            return Err(Error::Caller(CallerError::OffsetCount {
                count: partitions.len(),
                max,
            }));
        }
        let _one = self.group_asks.lock().await;
        let list = partitions.to_vec();
        // Every reachable store's answer is awaited (the largest offset counts: one answer
        // missing could be the newest), up to `timeout`.
        let heard = self
            .ask_stores_settling(
                timeout,
                |c| c.query_committed(group.clone(), list),
                |c| (c.group_answered(), c.group_heard().cloned()),
                Consumer::finish_group_ask,
                |_| false,
                COMMIT_SETTLE,
            )
            .await?;
        Ok(heard.unwrap_or_default())
    }

    /// A query of the stores: `start` sends it; then, until a store reader is reachable both
    /// ways and every reachable one ended its answers (`heard` says whether, and what was
    /// heard so far), or else until [`OFFSETS_SETTLE`] passes with nothing new (a reference
    /// store sends no end marker); `finish` ends it and returns what it heard. Fails with
    /// [`Error::NoStore`] when no store became reachable within `timeout`.
    async fn ask_stores<T: PartialEq + Clone>(
        &self,
        timeout: Duration,
        start: impl FnOnce(&mut Consumer),
        heard: impl Fn(&Consumer) -> (bool, Option<T>),
        finish: impl Fn(&mut Consumer) -> Option<T>,
    ) -> Result<Option<T>, Error> {
        self.ask_stores_settling(timeout, start, heard, finish, |_| true, OFFSETS_SETTLE)
            .await
    }

    /// [`ask_stores`](Self::ask_stores) where, short of every reachable store's answer, what
    /// was heard is returned after `settle` with nothing new only if `may_settle` says it is
    /// enough (else the wait goes on until `timeout`, then returns it).
    async fn ask_stores_settling<T: PartialEq + Clone>(
        &self,
        timeout: Duration,
        start: impl FnOnce(&mut Consumer),
        heard: impl Fn(&Consumer) -> (bool, Option<T>),
        finish: impl Fn(&mut Consumer) -> Option<T>,
        may_settle: impl Fn(Option<&T>) -> bool,
        settle: Duration,
    ) -> Result<Option<T>, Error> {
        let shared = self;
        let deadline = tokio::time::Instant::now() + timeout;
        let refused = {
            let mut state = shared.lock();
            start(&mut state.consumer);
            shared.publish_queued(&mut state)
        };
        log_refused(refused);
        // A task that stopped reading (queue full) reads again while a group ask runs.
        shared.control.wake.notify_one();
        let finish = |shared: &Shared| finish(&mut shared.lock().consumer);
        let mut seen = None;
        let mut quiet_since = None;
        loop {
            if shared.control.stopping() {
                return Err(Error::Closed);
            }
            let now = tokio::time::Instant::now();
            let (reachable, (answered, so_far)) = {
                let state = shared.lock();
                (state.consumer.stores_reachable(), heard(&state.consumer))
            };
            if answered {
                return Ok(finish(shared));
            }
            if reachable == 0 {
                if now >= deadline {
                    finish(shared);
                    return Err(Error::NoStore { waited: timeout });
                }
            } else if quiet_since.is_none() || seen != Some((reachable, so_far.as_ref().cloned())) {
                seen = Some((reachable, so_far));
                quiet_since = Some(now);
            } else if now >= deadline
                || (quiet_since.is_some_and(|t| now.duration_since(t) >= settle)
                    && may_settle(so_far.as_ref()))
            {
                return Ok(finish(shared));
            }
            tokio::time::sleep(OFFSETS_TICK).await;
        }
    }
}

/// A group name given as text, checked.
fn group_name(group: &str) -> Result<GroupName, Error> {
    Ok(GroupName::new(Bytes::copy_from_slice(group.as_bytes()))?)
}

/// How long a commit waits, once every partition was acknowledged by a store, for the other
/// reachable stores to answer (a reference store never does; one of ours syncing its offsets
/// file slowly does within it).
const COMMIT_SETTLE: Duration = Duration::from_secs(1);
/// How long a group member's commit on close waits for the stores.
const CLOSE_COMMIT: Duration = Duration::from_secs(5);
/// How long the group's driver waits for the stores' answers about partitions and offsets.
const GROUP_ASK: Duration = Duration::from_secs(5);

impl Shared {
    /// The group's name, if this consumer is a member of one.
    fn group_name(&self) -> Option<GroupName> {
        self.lock().group.as_ref().map(|g| g.name.clone())
    }

    /// Commits the offsets the application took of the partitions read (see
    /// [`ConsumerNode::commit`]).
    ///
    /// `everything`: also the application's latest take (an explicit commit, a close), else
    /// only what it polled before it (auto-commit). The offsets of revoked partitions waiting
    /// to be committed go with it; they are forgotten once committed.
    async fn commit_taken(
        &self,
        timeout: Duration,
        everything: bool,
    ) -> Result<BTreeMap<(Topic, NodeId), u64>, Error> {
        let (name, list) = {
            let mut state = self.lock();
            let Some(g) = &mut state.group else {
                return Err(Error::Caller(CallerError::Config(
                    "commit needs a consumer group (ConsumerOptions::with_group)",
                )));
            };
            if everything {
                for (key, next) in std::mem::take(&mut g.polled) {
                    raise(&mut g.processed, key, next);
                }
            }
            let owned: std::collections::BTreeSet<&(Topic, NodeId)> = g.member.owned().collect();
            let mut all: BTreeMap<(Topic, NodeId), u64> = (g.processed.iter())
                .filter(|(k, _)| owned.contains(k))
                .map(|(k, o)| (k.clone(), *o))
                .collect();
            for (key, next) in &g.to_commit {
                raise(&mut all, key.clone(), *next);
            }
            let (seeks, forward): (Vec<_>, Vec<_>) = (all.into_iter())
                .map(|((t, p), o)| (t, p, o))
                .partition(|(t, p, _)| g.seeked.contains(&(t.clone(), *p)));
            (g.name.clone(), (seeks, forward))
        };
        let (seeks, list) = list;
        let mut done = self.commit_list(&name, &list, false, timeout).await?;
        if !seeks.is_empty() {
            done.extend(self.commit_list(&name, &seeks, true, timeout).await?);
            if let Some(g) = &mut self.lock().group {
                for (t, p, _) in &seeks {
                    g.seeked.remove(&(t.clone(), *p));
                }
            }
        }
        if let Some(g) = &mut self.lock().group {
            g.to_commit
                .retain(|k, next| done.get(k).is_none_or(|d| *d < *next));
        }
        Ok(done)
    }

    /// Commits `offsets` for the group, in pieces of at most `Limits::max_offsets`.
    async fn commit_list(
        &self,
        name: &GroupName,
        offsets: &[(Topic, NodeId, u64)],
        seek: bool,
        timeout: Duration,
    ) -> Result<BTreeMap<(Topic, NodeId), u64>, Error> {
        let mut done = BTreeMap::new();
        for piece in offsets.chunks(Limits::DEFAULT.max_offsets) {
            done.extend(self.commit_offsets(name, piece, seek, timeout).await?);
        }
        Ok(done)
    }
}

/// A group member's driver: learns the partitions of its topics from the stores (so that
/// each gets an owner), starts each partition given at the group's committed offset (or
/// where `reset` says when there is none), commits and stops each one taken away, and
/// commits what the application took every `auto_commit`.
async fn drive_group(
    shared: Arc<Shared>,
    topics: Vec<Topic>,
    reset: OffsetReset,
    options: GroupOptions,
) {
    let Some(name) = shared.group_name() else {
        return;
    };
    let mut bounds: BTreeMap<(Topic, NodeId), Bounds> = BTreeMap::new();
    let mut next_discovery = tokio::time::Instant::now();
    let mut next_commit = options.auto_commit.map(|e| tokio::time::Instant::now() + e);
    let mut retry: Vec<GroupEvent> = Vec::new();
    loop {
        if shared.control.stopping() {
            return;
        }
        let now = tokio::time::Instant::now();
        if now >= next_discovery {
            next_discovery = now + options.discovery;
            for topic in &topics {
                let Ok(found) = shared.offsets(topic, GROUP_ASK).await else {
                    continue;
                };
                let keys: Vec<(Topic, NodeId)> = (found.iter())
                    .map(|(partition, _)| (topic.clone(), *partition))
                    .collect();
                bounds.extend(keys.iter().cloned().zip(found.into_iter().map(|(_, b)| b)));
                let mut state = shared.lock();
                if let Some(g) = &mut state.group {
                    if keys.is_empty() {
                        g.not_held.insert(topic.clone());
                    } else {
                        g.not_held.remove(topic);
                    }
                    for key in &keys {
                        if let Some(b) = bounds.get(key) {
                            g.ends.insert(key.clone(), b.end);
                        }
                    }
                }
                let refused = (state.group.as_mut())
                    .map_or(0, |g| g.member.add_partitions(keys, crate::node::now()));
                apply_group_changes(&shared, &mut state);
                drop(state);
                if refused > 0 {
                    tracing::warn!(topic = %topic, refused,
                        "too many partitions to share: some have no owner");
                }
                shared.control.wake.notify_one();
            }
        }
        let events: Vec<GroupEvent> = {
            let mut state = shared.lock();
            state
                .group
                .as_mut()
                .map(|g| g.events.drain(..).collect())
                .unwrap_or_default()
        };
        for event in events {
            match event {
                GroupEvent::Joined(member) => {
                    tracing::info!(group = %name, member = %member, "a member joined the group")
                }
                GroupEvent::Left(member, cause) => {
                    tracing::info!(group = %name, member = %member, ?cause, "a member left the group")
                }
                GroupEvent::Assigned((topic, partition)) => {
                    let key = (topic.clone(), partition);
                    let still = shared
                        .lock()
                        .group
                        .as_ref()
                        .is_some_and(|g| g.member.owned().any(|k| *k == key));
                    if !still {
                        continue; // revoked meanwhile
                    }
                    let committed = match shared
                        .committed_offsets(&name, std::slice::from_ref(&key), GROUP_ASK)
                        .await
                    {
                        Ok(c) => c.get(&key).copied(),
                        Err(e) => {
                            // Not "nothing committed": ask again soon, never start at the
                            // reset offset for want of an answer.
                            tracing::warn!(error = %e, topic = %topic, partition = %partition,
                                "the group's committed offset could not be read: asking again");
                            retry.push(GroupEvent::Assigned(key));
                            continue;
                        }
                    };
                    let b = bounds.get(&key);
                    let next = match (committed, reset) {
                        (Some(c), _) => c,
                        (None, OffsetReset::Earliest) => b.map_or(0, |b| b.low),
                        (None, _) => b.map_or(0, |b| b.end),
                    };
                    if let Err(e) = shared.assign(&topic, partition, next, None) {
                        tracing::warn!(error = %e, topic = %topic, partition = %partition, "a partition given could not be started");
                    } else if let Some(g) = &mut shared.lock().group {
                        g.changed(true, key.clone());
                        // Where it starts counts as processed: what `resume` restarts from
                        // and what a commit keeps until records are taken.
                        raise(&mut g.processed, key.clone(), next);
                    }
                    tracing::info!(group = %name, topic = %topic, partition = %partition, next, "partition assigned");
                }
                GroupEvent::Revoked(_) => {} // applied at once by `apply_group_changes`
            }
        }
        let retrying = !retry.is_empty();
        if retrying && let Some(g) = &mut shared.lock().group {
            g.events.extend(retry.drain(..));
        }
        let revoked_to_commit = shared
            .lock()
            .group
            .as_ref()
            .is_some_and(|g| !g.to_commit.is_empty());
        let commit_due = next_commit.is_some_and(|at| tokio::time::Instant::now() >= at);
        if commit_due || revoked_to_commit {
            if let Some(at) = next_commit
                && commit_due
            {
                next_commit = options.auto_commit.map(|e| at + e);
            }
            if let Err(e) = shared.commit_taken(GROUP_ASK, false).await {
                tracing::warn!(error = %e, group = %name, "commit failed");
            }
        }
        let soon = retrying.then(|| tokio::time::Instant::now() + Duration::from_millis(200));
        let wake = [Some(next_discovery), next_commit, soon]
            .into_iter()
            .flatten()
            .min();
        let changed = shared.group_changed.notified();
        match wake {
            Some(at) => {
                let _ = tokio::time::timeout_at(at, changed).await;
            }
            None => changed.await,
        }
    }
}

/// A running consumer. Dropping it stops the node; [`close`](Self::close) also waits for its
/// task.
pub struct ConsumerNode {
    shared: Arc<Shared>,
    id: NodeId,
    towers: TowerWait,
    /// The consumer group's driver task, for a member of one.
    driver: Option<tokio::task::JoinHandle<()>>,
    task: NodeTask,
}

impl std::fmt::Debug for ConsumerNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerNode")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl ConsumerNode {
    /// Starts a consumer of `topics` on the current tokio runtime.
    pub async fn start(
        topics: &[&str],
        node: NodeConfig,
        options: ConsumerOptions,
    ) -> Result<ConsumerNode, Error> {
        let id = options.id.map_or_else(new_node_id, Ok)?;
        let mut config = options.protocol;
        config.id = id;
        let reset = config.offset_reset;
        let group = match &options.group {
            None => None,
            Some(g) => {
                if g.auto_commit.is_some_and(|d| d.is_zero()) || g.discovery.is_zero() {
                    return Err(Error::Caller(CallerError::Config(
                        "a group's auto_commit and discovery intervals must be above zero",
                    )));
                }
                let name = group_name(&g.name)?;
                let member = GroupMember::new(name.clone(), id, g.membership, crate::node::now())?;
                // A member reads only the partitions its group gives it, each from the
                // group's committed offset (or `reset` where there is none).
                config.offset_reset = OffsetReset::Assigned;
                Some(GroupState {
                    name,
                    member,
                    events: VecDeque::new(),
                    polled: BTreeMap::new(),
                    processed: BTreeMap::new(),
                    to_commit: BTreeMap::new(),
                    seeked: Default::default(),
                    ends: BTreeMap::new(),
                    changes: VecDeque::new(),
                    paused: Default::default(),
                    not_held: Default::default(),
                    deaf_since: None,
                })
            }
        };
        let mut consumer = Consumer::new(config)?;
        for (topic, partition, next) in &options.start_offsets {
            consumer.set_position(Topic::try_from(topic.as_str())?, *partition, *next);
        }
        let plumbing = Plumbing::open(id, node, SocketType::Xpub).await?;
        for s in consumer.subscriptions() {
            plumbing.subscriber.subscribe(&s)?;
        }
        if let Some(g) = &group {
            plumbing
                .subscriber
                .subscribe(&dafka_proto::subscription::group(&g.name))?;
        }
        let towers = plumbing.tower_wait();
        let control = Arc::new(Control::default());
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                consumer,
                records: VecDeque::new(),
                group,
                observed: BTreeMap::new(),
                observe_all: None,
            }),
            publisher: plumbing.publisher.clone(),
            subscriber: plumbing.subscriber.clone(),
            control: control.clone(),
            max_buffered: options.max_buffered.max(1),
            group_changed: tokio::sync::Notify::new(),
            group_asks: tokio::sync::Mutex::new(()),
            offsets_asks: tokio::sync::Mutex::new(()),
        });
        let driver = options.group.map(|g| {
            let topics: Vec<Topic> = (topics.iter())
                .filter_map(|t| Topic::try_from(*t).ok())
                .collect();
            tokio::spawn(drive_group(shared.clone(), topics, reset, g))
        });
        let node = ConsumerNode {
            shared: shared.clone(),
            id,
            towers,
            driver,
            task: NodeTask::spawn(
                plumbing,
                ConsumerRole {
                    shared,
                    received: None,
                    delivered: false,
                    reset,
                },
                control,
            ),
        };
        for topic in topics {
            node.subscribe(topic)?;
        }
        Ok(node)
    }

    /// The consumer's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Subscribes to `topic` (exact name). An "earliest" consumer also asks the stores for
    /// the topic's heads.
    pub fn subscribe(&self, topic: &str) -> Result<(), Error> {
        let topic = Topic::try_from(topic)?;
        let shared = &self.shared;
        let mut state = shared.lock();
        if state.consumer.topics().contains(&topic) {
            return Ok(());
        }
        for s in state.consumer.subscribe(topic) {
            shared.subscriber.subscribe(&s)?;
        }
        let refused = shared.publish_queued(&mut state);
        drop(state);
        log_refused(refused);
        Ok(())
    }

    /// Unsubscribes from `topic` and forgets its positions.
    pub fn unsubscribe(&self, topic: &str) -> Result<(), Error> {
        let topic = Topic::try_from(topic)?;
        let shared = &self.shared;
        let mut state = shared.lock();
        if !state.consumer.topics().contains(&topic) {
            return Ok(());
        }
        for s in state.consumer.unsubscribe(&topic) {
            shared.subscriber.unsubscribe(&s)?;
        }
        shared.unqueue(&mut state, |q| q.retain(|r| r.topic != topic));
        Ok(())
    }

    /// Starts (or moves) a partition at offset `next`.
    pub fn set_position(&self, topic: &str, partition: NodeId, next: u64) -> Result<(), Error> {
        let topic = Topic::try_from(topic)?;
        self.shared
            .lock()
            .consumer
            .set_position(topic, partition, next);
        Ok(())
    }

    /// Waits until `max_records` records are here or `timeout` passes, whichever comes first,
    /// and returns them (possibly none), in offset order per partition.
    ///
    /// Cancel-safe: records leave the queue only in the synchronous step that returns them,
    /// never across an `.await`, so a poll dropped while waiting (a `select!` branch losing,
    /// an asyncio task cancelled, Ctrl-C in Python) loses nothing and the next poll returns
    /// what arrived. While waiting, a batch counts as complete once the queue holds
    /// `max_records` or is full ([`ConsumerOptions::max_buffered`]: the node has stopped
    /// reading and no more can come until a poll takes some).
    ///
    /// Fails with [`Error::NoTower`] when no tower answered within
    /// [`NodeConfig::connect_timeout`] (at that moment, for a poll waiting then).
    pub async fn poll(
        &self,
        max_records: usize,
        timeout: Duration,
    ) -> Result<Vec<ConsumerRecord>, Error> {
        self.ready(max_records, timeout).await?;
        Ok(self.take(max_records))
    }

    /// Waits, taking nothing, until a batch of `max_records` is complete (as
    /// [`poll`](Self::poll) defines it) or `timeout` passes; then [`take`](Self::take) gets the
    /// records. For callers that must take records only where they can hand them on at once
    /// (an asyncio future that may have been cancelled meanwhile).
    pub async fn ready(&self, max_records: usize, timeout: Duration) -> Result<(), Error> {
        let shared = &self.shared;
        let deadline = tokio::time::Instant::now() + timeout;
        let enough = max_records.min(shared.max_buffered);
        loop {
            let arrived = shared.control.changed.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            if shared.control.stopping() {
                return Err(Error::Closed);
            }
            if shared.lock().records.len() >= enough {
                return Ok(());
            }
            self.towers.check()?;
            // Woken when the towers' time runs out too, to say so then.
            let wake = self.towers.pending().map_or(deadline, |t| t.min(deadline));
            if tokio::time::timeout_at(wake, arrived).await.is_err() && wake == deadline {
                return Ok(());
            }
        }
    }

    /// Takes up to `max` received records now, without waiting (possibly none).
    pub fn take(&self, max: usize) -> Vec<ConsumerRecord> {
        let shared = &self.shared;
        let mut state = shared.lock();
        let grouped = state.group.is_some();
        // For a group member, the next offset after each run of one partition taken: records
        // come in runs of one partition, in offset order, so the last of a run is its
        // partition's furthest. Found as the records are moved (each is then in the cache),
        // not by another pass over the batch.
        let mut ends: Vec<(Topic, NodeId, u64)> = Vec::new();
        let taken: Vec<ConsumerRecord> = shared.unqueue(&mut state, |q| {
            let drained = q.drain(..max.min(q.len()));
            if !grouped {
                return drained.collect();
            }
            let mut taken: Vec<ConsumerRecord> = Vec::with_capacity(drained.len());
            for r in drained {
                if let Some(last) = taken.last()
                    && !same_partition(last, &r)
                {
                    ends.push(run_end(last));
                }
                taken.push(r);
            }
            ends.extend(taken.last().map(run_end));
            taken
        });
        if let Some(g) = &mut state.group {
            // Polling again says the previous batch was processed.
            for (key, next) in std::mem::take(&mut g.polled) {
                raise(&mut g.processed, key, next);
            }
            for (topic, partition, next) in ends {
                raise(&mut g.polled, (topic, partition), next);
            }
        }
        taken
    }

    /// The partitions this member of a consumer group reads now (empty without a group).
    pub fn assignment(&self) -> Vec<(Topic, NodeId)> {
        let state = self.shared.lock();
        state
            .group
            .as_ref()
            .map(|g| g.member.owned().cloned().collect())
            .unwrap_or_default()
    }

    /// Moves this group member's reading of a partition it reads to `offset`: the next
    /// records delivered start there (records of it already queued are dropped), and the
    /// next commit of it sets the group's offset there, even backwards.
    /// [`Error::NotAssigned`] for a partition it does not read (or without a group).
    pub fn seek(&self, topic: &str, partition: NodeId, offset: u64) -> Result<(), Error> {
        let key = self.owned_key(topic, partition)?;
        let paused = (self.shared.lock().group.as_ref()).is_some_and(|g| g.paused.contains(&key));
        if !paused {
            self.shared.assign(&key.0, partition, offset, None)?;
        }
        if let Some(g) = &mut self.shared.lock().group {
            g.polled.remove(&key);
            g.processed.insert(key.clone(), offset);
            g.seeked.insert(key);
        }
        Ok(())
    }

    /// Stops delivering a partition this group member reads, keeping it (the group does not
    /// give it to another member; records of it already received are dropped, and read again
    /// on `resume`). [`Error::NotAssigned`] for a partition it does not read.
    pub fn pause(&self, topic: &str, partition: NodeId) -> Result<(), Error> {
        let key = self.owned_key(topic, partition)?;
        let mut state = self.shared.lock();
        let newly = (state.group.as_mut()).is_some_and(|g| g.paused.insert(key.clone()));
        if newly {
            state.consumer.unassign(&key.0, &key.1);
            self.shared.unqueue(&mut state, |q| {
                q.retain(|r| r.partition != key.1 || r.topic != key.0)
            });
        }
        Ok(())
    }

    /// Delivers a paused partition again, from the record after the last one the application
    /// took of it. [`Error::NotAssigned`] for a partition it does not read.
    pub fn resume(&self, topic: &str, partition: NodeId) -> Result<(), Error> {
        let key = self.owned_key(topic, partition)?;
        let next = {
            let mut state = self.shared.lock();
            let Some(g) = &mut state.group else {
                return Ok(());
            };
            if !g.paused.remove(&key) {
                return Ok(());
            }
            // The record after the last one the application took, or where it started.
            let polled = g.polled.get(&key).copied();
            polled.max(g.processed.get(&key).copied())
        };
        match next {
            Some(next) => self.shared.assign(&key.0, partition, next, None),
            None => Ok(()),
        }
    }

    /// The partitions this group member reads and has paused.
    pub fn paused(&self) -> Vec<(Topic, NodeId)> {
        (self.shared.lock().group.as_ref())
            .map(|g| g.paused.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether this group member reads `partition` of `topic` (as `seek`, `pause` and
    /// `resume` need): [`Error::NotAssigned`] if not.
    pub fn check_assigned(&self, topic: &str, partition: NodeId) -> Result<(), Error> {
        self.owned_key(topic, partition).map(|_| ())
    }

    /// `(topic, partition)` if this group member reads it, else [`Error::NotAssigned`].
    fn owned_key(&self, topic: &str, partition: NodeId) -> Result<(Topic, NodeId), Error> {
        let key = (Topic::try_from(topic)?, partition);
        let owned = (self.shared.lock().group.as_ref())
            .is_some_and(|g| g.member.owned().any(|k| *k == key));
        if owned {
            Ok(key)
        } else {
            Err(Error::NotAssigned {
                partition: format!("{}/{}", key.0, key.1),
            })
        }
    }

    /// Per partition this group member reads, the records after its position: the
    /// partition's end as the stores last reported it (every discovery, a heartbeat interval)
    /// less the next offset to deliver (empty without a group).
    pub fn lag(&self) -> BTreeMap<(Topic, NodeId), u64> {
        let state = self.shared.lock();
        let Some(g) = &state.group else {
            return BTreeMap::new();
        };
        let next: BTreeMap<(Topic, NodeId), u64> = (state.consumer.positions())
            .map(|(t, p, n)| ((t.clone(), *p), n))
            .collect();
        g.member
            .owned()
            .map(|key| {
                let end = g.ends.get(key).copied().unwrap_or(0);
                let at = next.get(key).copied().unwrap_or(end);
                (key.clone(), end.saturating_sub(at))
            })
            .collect()
    }

    /// The partitions this group member started (`true`) and stopped since the last call,
    /// oldest first: for an application's `on_assign` / `on_revoke`. A partition stops
    /// before it is reported (nothing of it is delivered from then on); one starts when its
    /// first records can come.
    pub fn assignment_changes(&self) -> Vec<(bool, (Topic, NodeId))> {
        (self.shared.lock().group.as_mut())
            .map(|g| g.changes.drain(..).collect())
            .unwrap_or_default()
    }

    /// Listens to consumer group `group`'s heartbeats without joining it (nothing is sent:
    /// the group does not see this consumer), so that
    /// [`observed_members`](Self::observed_members) can say who is in it. `session_timeout`
    /// is the group's (a member not heard from for that long is dropped).
    pub fn observe_group(&self, group: &str, session_timeout: Duration) -> Result<(), Error> {
        let name = group_name(group)?;
        let config = MembershipConfig::with_session_timeout(session_timeout);
        let mut state = self.shared.lock();
        if state.observed.contains_key(&name) {
            return Ok(());
        }
        if state.observed.len() >= MAX_OBSERVED {
            return Err(Error::Caller(CallerError::Config(
                "a consumer observes at most 64 groups",
            )));
        }
        let observer = Membership::new(name.clone(), self.id, config, crate::node::now())?;
        self.shared
            .subscriber
            .subscribe(&dafka_proto::subscription::group(&name))?;
        state.observed.insert(name, observer);
        Ok(())
    }

    /// Listens to every consumer group's heartbeats without joining any, so that
    /// [`observed_groups`](Self::observed_groups) can say which groups have members and who
    /// they are (at most 1,024 groups; `session_timeout` is taken as every group's).
    pub fn observe_groups(&self, session_timeout: Duration) -> Result<(), Error> {
        let config = MembershipConfig::with_session_timeout(session_timeout);
        config.validate()?;
        let mut state = self.shared.lock();
        if state.observe_all.is_none() {
            self.shared
                .subscriber
                .subscribe(&dafka_proto::subscription::all(Kind::GroupHeartbeat))?;
        }
        state.observe_all = Some((self.id, config));
        Ok(())
    }

    /// Every observed group (by name, or heard while listening to every group) with its
    /// members heard from within its session timeout, in name then id order.
    pub fn observed_groups(&self) -> Vec<(GroupName, Vec<NodeId>)> {
        let mut state = self.shared.lock();
        let now = crate::node::now();
        (state.observed.iter_mut())
            .map(|(name, m)| (name.clone(), observed_view(m, now, self.id)))
            .collect()
    }

    /// Every consumer group with offsets committed in a reachable store (GROUPS-QUERY, an
    /// extension). Waits as [`offsets`](Self::offsets) does.
    pub async fn groups(&self, timeout: Duration) -> Result<Vec<GroupName>, Error> {
        let names = self.list(Listing::Groups, timeout).await?;
        // Every name was checked as a group's when its DIRECT-GROUPS was decoded.
        Ok(names
            .into_iter()
            .filter_map(|t| GroupName::new(t.to_bytes()).ok())
            .collect())
    }

    /// The members of an observed group heard from within its session timeout, in id order
    /// (empty for a group not observed).
    pub fn observed_members(&self, group: &str) -> Vec<NodeId> {
        let Ok(name) = group_name(group) else {
            return Vec::new();
        };
        let mut state = self.shared.lock();
        let Some(m) = state.observed.get_mut(&name) else {
            return Vec::new();
        };
        observed_view(m, crate::node::now(), self.id)
    }

    /// The name of this consumer's group, if it is a member of one.
    pub fn group_name(&self) -> Option<String> {
        self.shared
            .group_name()
            .map(|n| String::from_utf8_lossy(n.as_bytes()).into_owned())
    }

    /// The members of this consumer's group it hears, itself included (empty without one).
    pub fn group_members(&self) -> Vec<NodeId> {
        let state = self.shared.lock();
        state
            .group
            .as_ref()
            .map(|g| g.member.view())
            .unwrap_or_default()
    }

    /// Commits, for every partition this group member reads, the offset after the last
    /// record the application took (see [`commit_offsets`](Self::commit_offsets)); nothing
    /// when it took none. [`Error::Caller`] without a group.
    pub async fn commit(&self, timeout: Duration) -> Result<BTreeMap<(Topic, NodeId), u64>, Error> {
        self.shared.commit_taken(timeout, true).await
    }

    /// The next offset to deliver in every partition known.
    pub fn positions(&self) -> Vec<Position> {
        self.shared
            .lock()
            .consumer
            .positions()
            .map(|(topic, partition, next)| Position {
                topic: topic.clone(),
                partition: *partition,
                next,
            })
            .collect()
    }

    /// Reads `partition` of `topic` from offset `next` at once (see
    /// [`Consumer::assign`](dafka_proto::Consumer::assign)): drops records of the partition
    /// already queued and, with `end`, reads the range `next..end` (FETCHed at once, nothing
    /// past it delivered). Subscribes to the topic if needed, except for a range of an
    /// [`OffsetReset::Assigned`] consumer, which reads only the stores' answers to it. With
    /// [`OffsetReset::Assigned`] only assigned partitions are delivered.
    pub fn assign(
        &self,
        topic: &str,
        partition: NodeId,
        next: u64,
        end: Option<u64>,
    ) -> Result<(), Error> {
        self.shared
            .assign(&Topic::try_from(topic)?, partition, next, end)
    }

    /// Stops reading `partition` of `topic`: forgets its position and drops its queued records.
    pub fn unassign(&self, topic: &str, partition: NodeId) -> Result<(), Error> {
        self.shared.unassign(&Topic::try_from(topic)?, partition);
        Ok(())
    }

    /// The partitions of `topic` the stores hold, with their [`Bounds`] (first offset held, one
    /// past the last), by partition id; the topic need not be subscribed.
    ///
    /// Sends GET-HEADS (and HEADS-QUERY) and waits for a store reader to be reachable both ways
    /// (its STORE-HELLO heard, its `'W'` subscription seen: it then has the question and its
    /// answers reach us), then until every reachable store ended its answers with a HEADS-END
    /// (our stores do), or else until [`OFFSETS_SETTLE`] passes with no new answer (a
    /// reference store sends no HEADS-END: it sends all its answers at once, others may be
    /// slower). Fails with [`Error::NoStore`] when no store became reachable
    /// within `timeout` (towers unreachable, or no store running). A store out of reach then
    /// is not counted: its partitions may be missing.
    pub async fn offsets(
        &self,
        topic: &str,
        timeout: Duration,
    ) -> Result<Vec<(NodeId, Bounds)>, Error> {
        self.shared.offsets(&Topic::try_from(topic)?, timeout).await
    }

    /// Commits `offsets` (topic, partition, next offset to read) of consumer group `group` to
    /// the stores: each store reader that holds one of the partitions writes its offset to
    /// disk (synced) before it answers; a forward commit keeps the larger of the stored and
    /// the committed offset, `seek` sets it even backwards. Returns, once every store reader
    /// reachable answered (as [`offsets`](Self::offsets) waits), each partition's offset
    /// after the commit (the largest any store holds); [`Error::NotCommitted`] when no store
    /// acknowledged some of them (no store holds those partitions).
    pub async fn commit_offsets(
        &self,
        group: &str,
        offsets: &[(Topic, NodeId, u64)],
        seek: bool,
        timeout: Duration,
    ) -> Result<BTreeMap<(Topic, NodeId), u64>, Error> {
        self.shared
            .commit_offsets(&group_name(group)?, offsets, seek, timeout)
            .await
    }

    /// Consumer group `group`'s committed offsets of `partitions` (all the stores hold when
    /// empty): per partition, the largest any store reachable holds. Waits as
    /// [`offsets`](Self::offsets) does; only our stores answer (COMMITTED-QUERY, an
    /// extension).
    pub async fn committed_offsets(
        &self,
        group: &str,
        partitions: &[(Topic, NodeId)],
        timeout: Duration,
    ) -> Result<BTreeMap<(Topic, NodeId), u64>, Error> {
        self.shared
            .committed_offsets(&group_name(group)?, partitions, timeout)
            .await
    }

    /// For each partition of `topic` the stores hold, the first offset whose record's
    /// timestamp is at or after `time` (microseconds since the epoch, UTC; the lowest any store
    /// holds), `None` when no store holds a record that recent. Waits as
    /// [`offsets`](Self::offsets) does; only our stores answer (TIME-QUERY, an extension).
    pub async fn offsets_for_time(
        &self,
        topic: &str,
        time: i64,
        timeout: Duration,
    ) -> Result<Vec<(NodeId, TimeOffset)>, Error> {
        let topic = Topic::try_from(topic)?;
        let heard = self
            .shared
            .ask_stores(
                timeout,
                |c| c.query_time(topic.clone(), time),
                |c| (c.time_answered(&topic), c.time_offsets(&topic).cloned()),
                |c| c.finish_time_query(&topic),
            )
            .await?;
        Ok(heard.unwrap_or_default().into_iter().collect())
    }

    /// Every topic of which a reachable store holds a partition. Waits as
    /// [`offsets`](Self::offsets) does; only our stores answer (TOPICS-QUERY, an extension).
    pub async fn topics(&self, timeout: Duration) -> Result<Vec<Topic>, Error> {
        self.list(Listing::Topics, timeout).await
    }

    /// The names the reachable stores list in answer to a TOPICS-QUERY or GROUPS-QUERY.
    async fn list(&self, what: Listing, timeout: Duration) -> Result<Vec<Topic>, Error> {
        let heard = self
            .shared
            .ask_stores(
                timeout,
                |c| c.query_names(what),
                |c| (c.names_answered(what), c.names_heard(what).cloned()),
                |c| c.finish_names_query(what),
            )
            .await?;
        Ok(heard.unwrap_or_default().into_iter().collect())
    }

    /// The subscribed topics no store holds: every store reachable now answered that it holds
    /// no partition of them, and no record of them came (a typo, or a topic nothing was
    /// written to yet; see [`dafka_proto::Consumer::topics_not_held`]). Empty until the
    /// stores have answered. Each is also logged once (a warning for an "earliest" consumer).
    /// For a group member, the topics of which the group's last discovery (every heartbeat
    /// interval) found no partition.
    pub fn topics_not_held(&self) -> Vec<Topic> {
        let state = self.shared.lock();
        match &state.group {
            Some(g) => g.not_held.iter().cloned().collect(),
            None => state.consumer.topics_not_held(),
        }
    }

    /// Offsets skipped so far because no store that answers holds them (their records were
    /// damaged on every store that had them; each run is logged once).
    pub fn lost(&self) -> u64 {
        self.shared.lock().consumer.lost()
    }

    /// Input the node dropped.
    pub fn stats(&self) -> &NodeStats {
        &self.task.stats
    }

    /// Stops the node: pending and later calls fail with [`Error::Closed`]. A group member
    /// first commits what the application took and says it leaves (the others take its
    /// partitions over without waiting for the session timeout).
    pub async fn close(mut self) {
        if let Some(driver) = self.driver.take() {
            driver.abort();
            let _ = driver.await;
            if let Err(e) = self.shared.commit_taken(CLOSE_COMMIT, true).await {
                tracing::warn!(error = %e, "the group's offsets were not committed on close");
            }
            let bye = {
                let mut state = self.shared.lock();
                state.group.as_mut().map(|g| {
                    let bye = g.member.close();
                    g.events.clear();
                    bye
                })
            };
            if let Some(bye) = bye {
                log_refused(publish(
                    &self.shared.publisher,
                    std::iter::once(Message::GroupHeartbeat(bye)),
                ));
            }
        }
        self.task.close().await;
    }
}

/// The node task's side of a consumer. It never logs while it holds the state lock: a
/// logger may block, and Python's (every record reaches Python `logging` through the
/// bindings) waits for the GIL, which a Python thread waiting for that same lock (in
/// `positions`, say) may hold: both threads then wait forever (a Spark task reading a record
/// damaged on every store hung so, in `PartitionReader.position`).
struct ConsumerRole {
    shared: Arc<Shared>,
    /// The receive time of the current input batch, in microseconds since the epoch (one
    /// clock read per batch, for records that came without a timestamp).
    received: Option<i64>,
    /// Records were queued during the current input batch: wake `poll` after it.
    delivered: bool,
    /// Where the consumer starts: a topic not held is a warning for "earliest".
    reset: OffsetReset,
}

impl Role for ConsumerRole {
    fn on_message(&mut self, message: Message, now: Instant) -> Result<(), PeerError> {
        let mut state = self.shared.lock();
        if let Message::GroupHeartbeat(hb) = &message {
            if let Some((me, config)) = state.observe_all
                && !state.observed.contains_key(&hb.group)
                && state.observed.len() < MAX_OBSERVED_ALL
                && let Ok(m) = Membership::new(hb.group.clone(), me, config, now)
            {
                state.observed.insert(hb.group.clone(), m);
            }
            if let Some(m) = state.observed.get_mut(&hb.group) {
                m.handle_heartbeat(hb, now);
                while m.poll_event().is_some() {}
            }
            if let Some(g) = &mut state.group {
                g.member.handle_heartbeat(hb, now);
            }
            if apply_group_changes(&self.shared, &mut state) {
                self.shared.group_changed.notify_one();
            }
            return Ok(());
        }
        let result = state.consumer.handle(message, now);
        let before = state.records.len();
        while let Some(d) = state.consumer.poll_record() {
            let meta = match d.meta {
                Some(meta) => meta,
                None => RecordMeta::log_append(*self.received.get_or_insert_with(now_us)),
            };
            state.records.push_back(ConsumerRecord {
                topic: d.topic,
                partition: d.partition,
                offset: d.offset,
                value: d.content,
                meta,
            });
        }
        let losses: Vec<Loss> = std::iter::from_fn(|| state.consumer.poll_loss()).collect();
        let not_held: Vec<Topic> = std::iter::from_fn(|| state.consumer.poll_not_held()).collect();
        self.delivered |= state.records.len() > before;
        // Logged unlocked: a log record may need the GIL (pyo3-log) that a Python thread
        // waiting for this lock holds.
        drop(state);
        for loss in losses {
            // Once per run of offsets: the consumer has moved past them.
            tracing::warn!(topic = %loss.topic, partition = %loss.partition, from = loss.from,
                to = loss.to, "offsets held by no store that answers (damaged on disk): skipped");
        }
        for topic in not_held {
            if self.reset == OffsetReset::Earliest {
                tracing::warn!(topic = %topic, "no store holds topic '{topic}': every store \
                    reachable answered that it holds no partition of it (a typo?)");
            } else {
                tracing::info!(topic = %topic, "no store holds topic '{topic}' yet: waiting \
                    for new records");
            }
        }
        result
    }

    fn after_input(&mut self) {
        self.received = None;
        if std::mem::take(&mut self.delivered) {
            self.shared.control.changed.notify_waiters();
        }
        let mut state = self.shared.lock();
        if !self.shared.reading(&state)
            && let Some(g) = &mut state.group
        {
            // The node stops reading here until a poll makes room.
            g.deaf_since.get_or_insert_with(crate::node::now);
        }
    }

    fn on_subscription(&mut self, prefix: &[u8], now: Instant) {
        self.shared.lock().consumer.handle_subscription(prefix, now);
    }

    fn on_unsubscription(&mut self, prefix: &[u8]) {
        self.shared.lock().consumer.handle_unsubscription(prefix);
    }

    fn on_timeout(&mut self, now: Instant) {
        let past: Vec<PastEnd> = {
            let mut state = self.shared.lock();
            let reading = self.shared.reading(&state);
            if let Some(g) = &mut state.group {
                if !reading {
                    // Also found here: reading stops without an input batch when a group ask
                    // that kept it going ends (the driver ends it); at most a heartbeat
                    // interval late, as the task wakes for each heartbeat meanwhile.
                    g.deaf_since.get_or_insert(now);
                } else {
                    // Listening again: the others' silence while deaf was not theirs.
                    if let Some(since) = g.deaf_since.take() {
                        g.member.handle_deaf(since, now);
                    }
                    if g.member.poll_timeout().is_some_and(|t| t <= now) {
                        g.member.handle_timeout(now);
                    }
                }
            }
            if apply_group_changes(&self.shared, &mut state) {
                self.shared.group_changed.notify_one();
            }
            state.consumer.handle_timeout(now);
            // Found only when a timeout is handled (every store had time to answer).
            std::iter::from_fn(|| state.consumer.poll_past_end()).collect()
        };
        for p in past {
            tracing::warn!(topic = %p.topic, partition = %p.partition, next = p.next, end = p.end,
                "positioned past the end the stores hold: waiting for records to be written there");
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let state = self.shared.lock();
        // While the queue is full the node reads nothing: a FETCH retry then would only have
        // the stores send again what waits to be read (a store rewinds its answer to the
        // offset asked), growing what is queued towards us. A poll that makes room puts the
        // retries off by `fetch_retry` (`Shared::unqueue`) and wakes the task.
        let reading = self.shared.reading(&state);
        let group = state
            .group
            .as_ref()
            .and_then(|g| match (reading, g.deaf_since) {
                (true, None) => g.member.poll_timeout(),
                // Listening again: the deaf span ends now, before any member can expire.
                (true, Some(_)) => Some(crate::node::now()),
                // Deaf: only its own heartbeats are due (the others are not dropped meanwhile).
                (false, _) => g.member.heartbeat_due(),
            });
        if self.shared.full(&state) {
            return group;
        }
        match (state.consumer.poll_timeout(), group) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn transmit(&mut self, out: &mut Vec<Message>, max: usize) -> bool {
        let mut state = self.shared.lock();
        let state = &mut *state;
        if let Some(g) = &mut state.group
            && out.len() < max
            && let Some(hb) = g.member.poll_transmit(crate::node::now())
        {
            out.push(Message::GroupHeartbeat(hb));
        }
        take_up_to(out, max, || state.consumer.poll_transmit())
    }

    fn wants_input(&self) -> bool {
        self.shared.reading(&self.shared.lock())
    }
}
