//! `dafka.Tower`, `dafka.Store`, `dafka.Producer` and `dafka.Consumer`: the
//! Dafka nodes of `dafka-node`, converted and kept alive; no protocol logic.
//!
//! Every node lives in a `Mutex<Option<Arc<..>>>`: a call clones the `Arc`
//! and runs with the GIL released ([`runtime::wait_for`]), `close()` takes it
//! out and closes it (or, with a call still running on another thread, drops
//! it, which stops the node when that call returns).
//!
//! Calls that only take a node's state lock (`positions`, `lost`, `subscribe`, and the
//! `PartitionReader`'s `assign`, `position`, `unassign`) release the GIL too: the node's
//! thread may hold that lock while it waits for the GIL (to log), and a thread holding the
//! GIL while it waits for the lock would deadlock with it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_pyarrow::ToPyArrow;
use dafka_node::{
    ConsumerNode, ConsumerOptions, GroupOptions, NodeConfig, NodeId, OffsetReset, ProducerNode,
    ProducerOptions, StoreNode, StoreOptions, SyncPolicy, Tower, TowerConfig,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::arrow_batch::{self, records_batch};
use crate::cluster_keys::{PyClusterKeys, security};
use crate::{dafka_async, errors, records_in, runtime};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A node held by a Python object until `close()`.
pub(crate) struct Slot<T>(Mutex<Option<Arc<T>>>);

impl<T> Slot<T> {
    pub(crate) fn new(node: T) -> Self {
        Slot(Mutex::new(Some(Arc::new(node))))
    }

    pub(crate) fn get(&self, what: &str) -> PyResult<Arc<T>> {
        lock(&self.0)
            .clone()
            .ok_or_else(|| errors::closed(format!("the {what} is closed")))
    }

    fn take(&self) -> Option<T> {
        let node = lock(&self.0).take()?;
        // A call still running on another thread holds a clone: dropping ours stops the node
        // once that call returns.
        Arc::try_unwrap(node).ok()
    }

    /// Takes the node out and waits for `close` (the node's own) to finish.
    pub(crate) fn close_with<F>(&self, py: Python<'_>, close: impl FnOnce(T) -> F) -> PyResult<()>
    where
        F: std::future::Future<Output = ()> + Send,
    {
        match self.take() {
            Some(node) => runtime::wait_for(py, close(node)),
            None => Ok(()),
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.0).is_none()
    }
}

/// The lifecycle every node class shares, written once: `closed`, `close()` (stops the node
/// and waits for it; closing again does nothing) and the context manager that closes on
/// exit. The class keeps its node in a [`Slot`] named `node`; `$close` is the node's own close.
macro_rules! node_lifecycle {
    ($class:ty, $close:path) => {
        #[pymethods]
        impl $class {
            /// Whether `close()` was called.
            #[getter]
            fn closed(&self) -> bool {
                self.node.is_closed()
            }

            fn __enter__(slf: Py<Self>) -> Py<Self> {
                slf
            }

            fn __exit__(
                &self,
                py: Python<'_>,
                exc_type: &Bound<'_, PyAny>,
                exc_value: &Bound<'_, PyAny>,
                traceback: &Bound<'_, PyAny>,
            ) -> PyResult<bool> {
                let _ = (exc_type, exc_value, traceback);
                self.close(py)?;
                Ok(false)
            }

            /// Stops the node and waits for it.
            fn close(&self, py: Python<'_>) -> PyResult<()> {
                self.node.close_with(py, $close)
            }
        }
    };
}
pub(crate) use node_lifecycle;

node_lifecycle!(PyTower, Tower::close);
node_lifecycle!(PyStore, StoreNode::close);
node_lifecycle!(PyProducer, ProducerNode::close);
node_lifecycle!(PyConsumer, ConsumerNode::close);

/// `(topic, partition)` pairs as given to `pause` / `resume`, the partitions checked.
fn partitions_of(partitions: &[(String, String)]) -> PyResult<Vec<(String, NodeId)>> {
    partitions
        .iter()
        .map(|(t, p)| Ok((t.clone(), partition_id(p)?)))
        .collect()
}

/// Offsets by partition as Python's `{(topic, partition): offset}`.
pub(crate) fn offsets_dict(
    py: Python<'_>,
    offsets: std::collections::BTreeMap<(dafka_node::Topic, NodeId), u64>,
) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for ((topic, partition), offset) in offsets {
        let key = (
            String::from_utf8_lossy(topic.as_bytes()).into_owned(),
            partition.to_string(),
        );
        out.set_item(key, offset)?;
    }
    Ok(out)
}

/// The node settings for `towers`: tower endpoints, or `zre://CLUSTER` (no towers: ZRE).
pub(crate) fn node_config(towers: &str) -> PyResult<NodeConfig> {
    let config = NodeConfig::from_towers(towers).map_err(errors::node)?;
    if config.towers.is_empty() && config.zre.is_none() {
        return Err(errors::invalid(
            "towers is empty: give at least one \"tcp://host:port\", or \"zre://CLUSTER\"",
        ));
    }
    Ok(config)
}

/// [`node_config`] with the address the node announces (`host`) and the one it listens on
/// (`bind`, default: `host`); tcp towers only (through ZRE the interface's address is both).
pub(crate) fn node_config_at(
    towers: &str,
    host: Option<String>,
    bind: Option<String>,
) -> PyResult<NodeConfig> {
    let mut config = node_config(towers)?;
    if config.zre.is_some() && (host.is_some() || bind.is_some()) {
        return Err(errors::invalid(
            "host and bind apply with towers (tcp://...); through zre:// a node announces its ZRE \
             interface's address (zre://CLUSTER?interface=...)",
        ));
    }
    if let Some(host) = host {
        config = config.with_host(host);
    }
    Ok(config.with_bind(bind))
}

pub(crate) fn seconds(name: &str, value: Option<f64>) -> PyResult<Option<Duration>> {
    value
        .map(|s| {
            Duration::try_from_secs_f64(s).map_err(|_| {
                errors::invalid(format!(
                    "{name} must be a non-negative number of seconds, not {s}"
                ))
            })
        })
        .transpose()
}

pub(crate) fn partition_id(text: &str) -> PyResult<NodeId> {
    text.parse::<NodeId>().map_err(|_| {
        errors::invalid(format!(
            "partition {text:?} is not 32 hexadecimal digits (a producer's id as on the wire)"
        ))
    })
}

/// A tower: forwards beacons between nodes.
#[pyclass(name = "Tower", module = "dafka", frozen)]
pub(crate) struct PyTower {
    node: Slot<Tower>,
    towers: String,
}

#[pymethods]
impl PyTower {
    #[new]
    #[pyo3(signature = (sub = "tcp://*:5556", r#pub = None, *, curve = None))]
    fn new(
        py: Python<'_>,
        sub: &str,
        r#pub: Option<String>,
        curve: Option<&Bound<'_, PyClusterKeys>>,
    ) -> PyResult<Self> {
        let mut config = TowerConfig::new(sub).with_security(security(curve));
        if let Some(p) = r#pub {
            config = config.with_publ(p);
        }
        let tower = runtime::wait_for(py, Tower::start(config))?.map_err(errors::node)?;
        Ok(PyTower {
            towers: tower.towers(),
            node: Slot::new(tower),
        })
    }

    /// The string to hand to other nodes: `tcp://host:SUBPORT`.
    #[getter]
    fn towers(&self) -> &str {
        &self.towers
    }

    fn __repr__(&self) -> String {
        format!("<dafka.Tower towers={:?}>", self.towers)
    }
}

fn sync_policy(sync: &Bound<'_, PyAny>) -> PyResult<SyncPolicy> {
    if let Ok(s) = sync.cast::<PyString>() {
        return match s.to_str()? {
            "always" => Ok(SyncPolicy::Always),
            "never" => Ok(SyncPolicy::Never),
            other => Err(errors::invalid(format!(
                "sync must be \"always\", \"never\" or a sync interval in seconds, not {other:?}"
            ))),
        };
    }
    let secs: f64 = sync.extract().map_err(|_| {
        errors::invalid("sync must be \"always\", \"never\" or a sync interval in seconds")
    })?;
    let interval = seconds("sync", Some(secs))?.unwrap_or_default();
    Ok(SyncPolicy::Interval(interval))
}

/// A store: keeps every partition on disk and answers FETCH from it. `host`: the address it
/// announces (default 127.0.0.1; on a cluster, one the other machines reach); `bind`: where it
/// listens, if not there.
#[pyclass(name = "Store", module = "dafka", frozen)]
pub(crate) struct PyStore {
    node: Slot<StoreNode>,
    path: String,
}

#[pymethods]
impl PyStore {
    #[new]
    #[pyo3(signature = (
        path, towers, sync = None, *, curve = None, segment_bytes = None, retention_bytes = None,
        retention_ms = None, max_record_bytes = None, host = None, bind = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: std::path::PathBuf,
        towers: &str,
        sync: Option<&Bound<'_, PyAny>>,
        curve: Option<&Bound<'_, PyClusterKeys>>,
        segment_bytes: Option<u64>,
        retention_bytes: Option<u64>,
        retention_ms: Option<u64>,
        max_record_bytes: Option<usize>,
        host: Option<String>,
        bind: Option<String>,
    ) -> PyResult<Self> {
        let sync = sync
            .map(sync_policy)
            .transpose()?
            .unwrap_or(SyncPolicy::Always);
        let node = node_config_at(towers, host, bind)?.with_security(security(curve));
        let mut options = StoreOptions::with_sync(sync);
        if let Some(bytes) = segment_bytes {
            options.engine.segment_bytes = bytes;
        }
        options.engine.retention.max_bytes = retention_bytes;
        // By the records' own timestamps: a segment goes once its newest record is older.
        options.engine.retention.max_age = retention_ms.map(Duration::from_millis);
        if let Some(bytes) = max_record_bytes {
            options.engine.max_record_bytes = bytes;
        }
        let open = StoreNode::open(path.clone(), node, options);
        let store = runtime::wait_for(py, open)?.map_err(errors::node)?;
        Ok(PyStore {
            node: Slot::new(store),
            path: path.to_string_lossy().into_owned(),
        })
    }

    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    fn __repr__(&self) -> String {
        format!("<dafka.Store path={:?}>", self.path)
    }
}

/// A producer of one topic, writing its own partition.
///
/// `connect_timeout` (seconds, 5 by default; `None`: no limit): with no tower answering by
/// then, `send` and `flush` raise `dafka.TimeoutError` saying so. `host`: the address it
/// announces (default 127.0.0.1); `bind`: where it listens, if not there.
#[pyclass(name = "Producer", module = "dafka", frozen)]
pub(crate) struct PyProducer {
    node: Slot<ProducerNode>,
    partition: String,
    topic: String,
}

/// `values` as `Bytes`: a list (or any iterable) of bytes, or an Arrow
/// binary/string array read through the C data interface, its value buffer
/// copied once and sliced (no per-value Python work).
#[pymethods]
impl PyProducer {
    #[new]
    #[pyo3(signature = (
        topic, towers, min_acks = 1, partition = None, *, curve = None, max_record_bytes = None,
        connect_timeout = Some(5.0), host = None, bind = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        topic: &str,
        towers: &str,
        min_acks: usize,
        partition: Option<&str>,
        curve: Option<&Bound<'_, PyClusterKeys>>,
        max_record_bytes: Option<usize>,
        connect_timeout: Option<f64>,
        host: Option<String>,
        bind: Option<String>,
    ) -> PyResult<Self> {
        let partition = partition.map(partition_id).transpose()?;
        let node = node_config_at(towers, host, bind)?
            .with_security(security(curve))
            .with_connect_timeout(seconds("connect_timeout", connect_timeout)?);
        let mut options = ProducerOptions::default()
            .with_min_acks(min_acks)
            .with_partition(partition);
        if let Some(bytes) = max_record_bytes {
            options = options.with_max_record(bytes);
        }
        let producer = runtime::wait_for(py, ProducerNode::start(topic, node, options))?
            .map_err(errors::node)?;
        Ok(PyProducer {
            partition: producer.partition().to_string(),
            node: Slot::new(producer),
            topic: topic.to_owned(),
        })
    }

    /// The partition (this producer's id): 32 upper-case hex digits.
    #[getter]
    fn partition(&self) -> &str {
        &self.partition
    }

    #[getter]
    fn topic(&self) -> &str {
        &self.topic
    }

    /// Records acknowledged by the stores so far (acknowledged durable under the stores'
    /// `sync="always"`): every offset below this one.
    #[getter]
    fn acknowledged(&self, py: Python<'_>) -> PyResult<u64> {
        let node = self.node.get("producer")?;
        // The node's task holds this lock while publishing: never wait for it holding the GIL.
        Ok(py.detach(|| node.acknowledged_records()))
    }

    /// Sends one record; returns its offset. `key`, `headers` and `timestamp` as in
    /// `records_in`; the timestamp defaults to the producer's clock (microseconds UTC).
    ///
    /// With room in the unacknowledged buffer it returns at once, the GIL held: the record is
    /// queued for the node's task to publish (no runtime entry, no wake-up per record). Only a
    /// full buffer releases the GIL and waits (`send_timeout`, Ctrl-C checked).
    #[pyo3(signature = (value, key = None, headers = None, timestamp = None))]
    fn send(
        &self,
        py: Python<'_>,
        value: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamp: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let value = records_in::one_record(value, key, headers, timestamp)?;
        let node = self.node.get("producer")?;
        // Never wait for the producer's lock holding the GIL: the node's task holds it while
        // publishing, and a log record there may need the GIL (pyo3-log).
        let value = match node.try_send_uncontended(value).map_err(errors::node)? {
            Ok(offset) => return Ok(offset),
            Err(value) => value,
        };
        match py.detach(|| node.try_send(value)).map_err(errors::node)? {
            Ok(offset) => Ok(offset),
            Err(value) => {
                runtime::wait_for(py, async move { node.send(value).await })?.map_err(errors::node)
            }
        }
    }

    /// Sends every record in order; returns the offset of the first. Every record is
    /// converted before the first is sent: a bad one sends none.
    #[pyo3(signature = (values, keys = None, headers = None, timestamps = None))]
    fn send_many(
        &self,
        py: Python<'_>,
        values: &Bound<'_, PyAny>,
        keys: Option<&Bound<'_, PyAny>>,
        headers: Option<&Bound<'_, PyAny>>,
        timestamps: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let values = records_in::records_of(values, keys, headers, timestamps)?;
        let node = self.node.get("producer")?;
        runtime::wait_for(py, async move { node.send_many_encoded(values).await })?
            .map_err(errors::node)
    }

    /// Awaitable `send`: resolves to the offset.
    #[pyo3(signature = (value, key = None, headers = None, timestamp = None))]
    fn send_async<'py>(
        &self,
        py: Python<'py>,
        value: &Bound<'py, PyAny>,
        key: Option<&Bound<'py, PyAny>>,
        headers: Option<&Bound<'py, PyAny>>,
        timestamp: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let value = records_in::one_record(value, key, headers, timestamp)?;
        let node = self.node.get("producer")?;
        let send = async move { node.send(value).await };
        dafka_async::awaitable(py, send, dafka_async::offset)
    }

    /// Awaitable `send_many`: resolves to the offset of the first.
    #[pyo3(signature = (values, keys = None, headers = None, timestamps = None))]
    fn send_many_async<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyAny>,
        keys: Option<&Bound<'py, PyAny>>,
        headers: Option<&Bound<'py, PyAny>>,
        timestamps: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let values = records_in::records_of(values, keys, headers, timestamps)?;
        let node = self.node.get("producer")?;
        let send = async move { node.send_many_encoded(values).await };
        dafka_async::awaitable(py, send, dafka_async::offset)
    }

    /// Awaitable `flush`.
    #[pyo3(signature = (timeout = None))]
    fn flush_async<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let timeout = seconds("timeout", timeout)?;
        let node = self.node.get("producer")?;
        let flush = async move { node.flush(timeout).await };
        dafka_async::awaitable(py, flush, dafka_async::done)
    }

    /// Waits until every record sent is acknowledged by `min_acks` stores.
    #[pyo3(signature = (timeout = None))]
    fn flush(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let timeout = seconds("timeout", timeout)?;
        let node = self.node.get("producer")?;
        runtime::wait_for(py, async move { node.flush(timeout).await })?.map_err(errors::node)
    }

    fn __repr__(&self) -> String {
        format!(
            "<dafka.Producer topic={:?} partition={}>",
            self.topic, self.partition
        )
    }
}

/// A consumer of exact topics, delivering Arrow record batches.
///
/// `connect_timeout` (seconds, 5 by default; `None`: no limit): with no tower answering by
/// then, `poll` raises `dafka.TimeoutError` saying so. `host`: the address it announces
/// (default 127.0.0.1); `bind`: where it listens, if not there.
#[pyclass(name = "Consumer", module = "dafka", frozen)]
pub(crate) struct PyConsumer {
    node: Slot<ConsumerNode>,
    towers: String,
    /// `on_assign(consumer, partitions)` / `on_revoke(consumer, partitions)`, called from
    /// `poll` and iteration with the `(topic, partition)`s started or stopped since.
    on_assign: Option<Py<PyAny>>,
    on_revoke: Option<Py<PyAny>>,
}

fn topics_of(topics: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(s) = topics.cast::<PyString>() {
        return Ok(vec![s.to_str()?.to_owned()]);
    }
    topics
        .extract::<Vec<String>>()
        .map_err(|_| errors::invalid("topics must be a str or a list of str"))
}

fn check_max_records(max_records: usize) -> PyResult<()> {
    if max_records == 0 {
        return Err(errors::invalid("max_records must be at least 1"));
    }
    Ok(())
}

impl PyConsumer {
    fn batch(
        &self,
        py: Python<'_>,
        max_records: usize,
        timeout: Duration,
    ) -> PyResult<RecordBatch> {
        check_max_records(max_records)?;
        let node = self.node.get("consumer")?;
        let records = runtime::wait_for(py, async move { node.poll(max_records, timeout).await })?
            .map_err(errors::node)?;
        py.detach(|| records_batch(records, true))
            .map_err(arrow_batch::batch_error)
    }

    /// `apply` to each of `partitions`, once every one is known to be read by this member
    /// (none applied otherwise).
    fn each_read(
        &self,
        py: Python<'_>,
        partitions: &[(String, String)],
        apply: fn(&ConsumerNode, &str, NodeId) -> Result<(), dafka_node::Error>,
    ) -> PyResult<()> {
        let node = self.node.get("consumer")?;
        let keys = partitions_of(partitions)?;
        py.detach(|| {
            for (t, p) in &keys {
                node.check_assigned(t, *p)?;
            }
            keys.iter().try_for_each(|(t, p)| apply(&node, t, *p))
        })
        .map_err(errors::node)
    }

    /// Calls `on_revoke`, then `on_assign`, with the partitions stopped and started since the
    /// last call (each only when some were). An exception of a callback is raised by the
    /// `poll` that called it.
    fn fire_callbacks(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        if this.on_assign.is_none() && this.on_revoke.is_none() {
            return Ok(());
        }
        let Ok(node) = this.node.get("consumer") else {
            return Ok(());
        };
        let py = slf.py();
        let changes = py.detach(|| node.assignment_changes());
        let name = |(t, p): &(dafka_node::Topic, NodeId)| {
            (
                String::from_utf8_lossy(t.as_bytes()).into_owned(),
                p.to_string(),
            )
        };
        let (assigned, revoked): (Vec<_>, Vec<_>) = changes.iter().partition(|(a, _)| *a);
        for (callback, list) in [(&this.on_revoke, revoked), (&this.on_assign, assigned)] {
            if let Some(cb) = callback
                && !list.is_empty()
            {
                let partitions: Vec<(String, String)> = list.iter().map(|(_, k)| name(k)).collect();
                cb.call1(py, (slf, partitions))?;
            }
        }
        Ok(())
    }
}

#[pymethods]
impl PyConsumer {
    #[new]
    #[pyo3(signature = (
        topics, towers, offset_reset = "latest", start_offsets = None, *, curve = None,
        connect_timeout = Some(5.0), host = None, bind = None, group = None,
        session_timeout = 10.0, enable_auto_commit = true, auto_commit_interval = 5.0,
        on_assign = None, on_revoke = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        topics: &Bound<'_, PyAny>,
        towers: &str,
        offset_reset: &str,
        start_offsets: Option<&Bound<'_, PyDict>>,
        curve: Option<&Bound<'_, PyClusterKeys>>,
        connect_timeout: Option<f64>,
        host: Option<String>,
        bind: Option<String>,
        group: Option<String>,
        session_timeout: f64,
        enable_auto_commit: bool,
        auto_commit_interval: f64,
        on_assign: Option<Py<PyAny>>,
        on_revoke: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        if (on_assign.is_some() || on_revoke.is_some()) && group.is_none() {
            return Err(errors::invalid(
                "on_assign and on_revoke need a consumer group: Consumer(..., group=\"name\")",
            ));
        }
        for (name, cb) in [("on_assign", &on_assign), ("on_revoke", &on_revoke)] {
            if let Some(cb) = cb
                && !cb.bind(py).is_callable()
            {
                return Err(errors::invalid(format!("{name} must be callable")));
            }
        }
        let topics = topics_of(topics)?;
        let reset = match offset_reset {
            "latest" => OffsetReset::Latest,
            "earliest" => OffsetReset::Earliest,
            other => {
                return Err(errors::invalid(format!(
                    "offset_reset must be \"earliest\" or \"latest\", not {other:?}"
                )));
            }
        };
        let mut options = ConsumerOptions::default().with_offset_reset(reset);
        for (key, next) in start_offsets.into_iter().flatten() {
            let (topic, partition): (String, String) = key.extract().map_err(|_| {
                errors::invalid("start_offsets keys must be (topic, partition) tuples of str")
            })?;
            let next: u64 = next
                .extract()
                .map_err(|_| errors::invalid("start_offsets values must be offsets (int >= 0)"))?;
            options = options.with_start_offset(&topic, partition_id(&partition)?, next);
        }
        if let Some(name) = group {
            if start_offsets.is_some_and(|d| !d.is_empty()) {
                return Err(errors::invalid(
                    "start_offsets and group exclude each other: a group member starts each \
                     partition at its group's committed offset",
                ));
            }
            let session = seconds("session_timeout", Some(session_timeout))?
                .filter(|t| *t >= Duration::from_millis(100))
                .ok_or_else(|| errors::invalid("session_timeout must be at least 0.1 s"))?;
            let every = if enable_auto_commit {
                Some(
                    seconds("auto_commit_interval", Some(auto_commit_interval))?
                        .filter(|t| !t.is_zero())
                        .ok_or_else(|| errors::invalid("auto_commit_interval must be above 0"))?,
                )
            } else {
                None
            };
            options = options.with_group(
                GroupOptions::new(name)
                    .with_session_timeout(session)
                    .with_auto_commit(every),
            );
        }
        let node = node_config_at(towers, host, bind)?
            .with_security(security(curve))
            .with_connect_timeout(seconds("connect_timeout", connect_timeout)?);
        let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
        let consumer = runtime::wait_for(py, ConsumerNode::start(&refs, node, options))?
            .map_err(errors::node)?;
        Ok(PyConsumer {
            node: Slot::new(consumer),
            towers: towers.to_owned(),
            on_assign,
            on_revoke,
        })
    }

    /// Records that arrived within `timeout` seconds, at most `max_records`,
    /// as a `pyarrow.RecordBatch` (possibly empty).
    #[pyo3(signature = (max_records = 10000, timeout = 1.0))]
    fn poll(slf: &Bound<'_, Self>, max_records: usize, timeout: f64) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let timeout = seconds("timeout", Some(timeout))?.unwrap_or_default();
        let batch = slf.get().batch(py, max_records, timeout)?;
        Self::fire_callbacks(slf)?;
        batch.to_pyarrow(py).map(Bound::unbind)
    }

    /// Awaitable `poll`. Cancelling the await loses no record: records are
    /// taken only for a future still pending.
    #[pyo3(signature = (max_records = 10000, timeout = 1.0))]
    fn poll_async<'py>(
        &self,
        py: Python<'py>,
        max_records: usize,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let timeout = seconds("timeout", Some(timeout))?.unwrap_or_default();
        check_max_records(max_records)?;
        let node = self.node.get("consumer")?;
        dafka_async::poll(py, node, max_records, timeout)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next non-empty batch; stops when the consumer is closed.
    fn __next__(slf: &Bound<'_, Self>) -> PyResult<Option<Py<PyAny>>> {
        let py = slf.py();
        loop {
            if slf.get().node.is_closed() {
                return Ok(None);
            }
            let batch = slf.get().batch(py, 10_000, Duration::from_secs(1));
            if batch.is_ok() {
                Self::fire_callbacks(slf)?;
            }
            match batch {
                Ok(b) if b.num_rows() == 0 => {}
                Ok(b) => return b.to_pyarrow(py).map(|b| Some(b.unbind())),
                Err(e) if e.is_instance_of::<errors::ClosedError>(py) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    /// The subscribed topics no store holds, once every reachable store answered (a typo, or
    /// nothing written yet); empty until then.
    #[getter]
    fn topics_not_held(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let node = self.node.get("consumer")?;
        let topics = py.detach(|| node.topics_not_held());
        Ok(topics
            .iter()
            .map(|t| String::from_utf8_lossy(t.as_bytes()).into_owned())
            .collect())
    }

    /// Offsets skipped so far because no store that answers holds them (their records were
    /// damaged on disk, or refused, on every store that had them); each run is logged once.
    #[getter]
    fn lost(&self, py: Python<'_>) -> PyResult<u64> {
        let node = self.node.get("consumer")?;
        Ok(py.detach(|| node.lost()))
    }

    /// As `PartitionReader.offsets_for_times`: the first offset of each partition of `topic`
    /// at or after a time (or `{partition: time}`), `None` where no store holds one that
    /// recent; asks the stores.
    #[pyo3(signature = (topic, times, timeout = 10.0))]
    fn offsets_for_times<'py>(
        &self,
        py: Python<'py>,
        topic: String,
        times: &Bound<'py, PyAny>,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let node = self.node.get("consumer")?;
        crate::dafka_admin::offsets_for_times(py, node, &self.towers, topic, times, timeout)
    }

    /// As `PartitionReader.topics`: every topic of which a reachable store holds a partition.
    #[pyo3(signature = (timeout = 10.0))]
    fn topics(&self, py: Python<'_>, timeout: f64) -> PyResult<Vec<String>> {
        let node = self.node.get("consumer")?;
        crate::dafka_admin::topics(py, node, &self.towers, timeout)
    }

    /// The next offset to deliver, per `(topic, partition)`.
    fn positions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let node = self.node.get("consumer")?;
        let out = PyDict::new(py);
        for p in py.detach(|| node.positions()) {
            let key = (
                String::from_utf8_lossy(p.topic.as_bytes()).into_owned(),
                p.partition.to_string(),
            );
            out.set_item(key, p.next)?;
        }
        Ok(out)
    }

    /// The partitions this group member reads now, as `(topic, partition)` (empty without
    /// a group).
    fn assignment(&self, py: Python<'_>) -> PyResult<Vec<(String, String)>> {
        let node = self.node.get("consumer")?;
        Ok(py
            .detach(|| node.assignment())
            .into_iter()
            .map(|(t, p)| {
                (
                    String::from_utf8_lossy(t.as_bytes()).into_owned(),
                    p.to_string(),
                )
            })
            .collect())
    }

    /// Commits, for every partition this group member reads, the offset after the last
    /// record `poll` returned, on every store that holds the partition (written to disk
    /// before the stores answer); returns the committed offsets by `(topic, partition)`.
    /// With `asynchronous=True` it returns `None` at once and the outcome is logged.
    #[pyo3(signature = (asynchronous = false, timeout = 10.0))]
    fn commit<'py>(
        &self,
        py: Python<'py>,
        asynchronous: bool,
        timeout: f64,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let node = self.node.get("consumer")?;
        let timeout = seconds("timeout", Some(timeout))?.unwrap_or_default();
        if asynchronous {
            // The task holds the node only while it commits: a `close()` right after still
            // closes it (the close commits too).
            let weak = Arc::downgrade(&node);
            drop(node);
            runtime::handle().spawn(async move {
                let Some(node) = weak.upgrade() else { return };
                if let Err(e) = node.commit(timeout).await {
                    tracing::warn!(error = %e, "asynchronous commit failed");
                }
            });
            return Ok(None);
        }
        let done = runtime::wait_for(py, async move { node.commit(timeout).await })?
            .map_err(errors::node)?;
        offsets_dict(py, done).map(Some)
    }

    /// Moves this group member's reading of a partition it reads to `offset` (the next
    /// records come from there; the next commit sets the group's offset there, even
    /// backwards). `dafka.StateError` for a partition it does not read.
    fn seek(&self, py: Python<'_>, topic: &str, partition: &str, offset: u64) -> PyResult<()> {
        let node = self.node.get("consumer")?;
        let partition = partition_id(partition)?;
        py.detach(|| node.seek(topic, partition, offset))
            .map_err(errors::node)
    }

    /// Stops delivering `(topic, partition)`s this group member reads, keeping them (the
    /// group does not give them to another member). `dafka.StateError` for one it does not
    /// read; nothing is paused then.
    fn pause(&self, py: Python<'_>, partitions: Vec<(String, String)>) -> PyResult<()> {
        self.each_read(py, &partitions, ConsumerNode::pause)
    }

    /// Delivers paused partitions again, from the record after the last one `poll` returned.
    fn resume(&self, py: Python<'_>, partitions: Vec<(String, String)>) -> PyResult<()> {
        self.each_read(py, &partitions, ConsumerNode::resume)
    }

    /// The `(topic, partition)`s this group member reads and has paused.
    fn paused(&self, py: Python<'_>) -> PyResult<Vec<(String, String)>> {
        let node = self.node.get("consumer")?;
        Ok(py
            .detach(|| node.paused())
            .into_iter()
            .map(|(t, p)| {
                (
                    String::from_utf8_lossy(t.as_bytes()).into_owned(),
                    p.to_string(),
                )
            })
            .collect())
    }

    /// Per partition this group member reads, the records after its position (the end as
    /// the stores last reported it, every heartbeat interval); `{}` without a group.
    fn lag<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let node = self.node.get("consumer")?;
        offsets_dict(py, py.detach(|| node.lag()))
    }

    /// The group's committed offsets the reachable stores hold, by `(topic, partition)`.
    #[pyo3(signature = (timeout = 10.0))]
    fn committed<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyDict>> {
        let node = self.node.get("consumer")?;
        let Some(group) = py.detach(|| node.group_name()) else {
            return Err(errors::invalid(
                "committed() needs a consumer group: Consumer(..., group=\"name\")",
            ));
        };
        let timeout = seconds("timeout", Some(timeout))?.unwrap_or_default();
        let got = runtime::wait_for(py, async move {
            node.committed_offsets(&group, &[], timeout).await
        })?
        .map_err(errors::node)?;
        offsets_dict(py, got)
    }

    fn subscribe(&self, py: Python<'_>, topic: &str) -> PyResult<()> {
        let node = self.node.get("consumer")?;
        py.detach(|| node.subscribe(topic)).map_err(errors::node)
    }

    fn unsubscribe(&self, py: Python<'_>, topic: &str) -> PyResult<()> {
        let node = self.node.get("consumer")?;
        py.detach(|| node.unsubscribe(topic)).map_err(errors::node)
    }
}
