//! `dafka.PartitionReader`: a consumer of explicitly assigned partition ranges, with the
//! offsets query (`dafka-node`'s `ConsumerNode::offsets`). What Spark's planner (offsets) and
//! its tasks (one range at a time, on a reader cached per Python worker) use. Conversion only.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_pyarrow::ToPyArrow;
use dafka_node::{ConsumerNode, ConsumerOptions, NodeId, OffsetReset};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::arrow_batch::{self, records_batch};
use crate::dafka::{Slot, node_config, partition_id, seconds};
use crate::{errors, runtime};

crate::dafka::node_lifecycle!(PyPartitionReader, ConsumerNode::close);

/// A query's error: no store reachable is a `dafka.TimeoutError` naming the towers.
fn no_store(e: dafka_node::Error, towers: &str) -> PyErr {
    match e {
        dafka_node::Error::NoStore { .. } => errors::timeout(format!("towers {towers}: {e}")),
        other => errors::node(other),
    }
}

/// `offsets_for_times` of `Consumer` and `PartitionReader` (see the latter's).
pub(crate) fn offsets_for_times<'py>(
    py: Python<'py>,
    node: Arc<ConsumerNode>,
    towers: &str,
    topic: String,
    times: &Bound<'py, PyAny>,
    timeout: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let timeout = seconds("timeout", Some(timeout))?.unwrap_or_default();
    // Each partition asked for with its time (a dict), or `None`: every partition at one time.
    let asked: Option<Vec<(String, NodeId, i64)>> = match times.cast::<PyDict>() {
        Ok(d) => {
            let mut asked = Vec::with_capacity(d.len());
            for (k, v) in d.iter() {
                let partition: String = k
                    .extract()
                    .map_err(|_| errors::invalid("offsets_for_times: partitions must be str"))?;
                let id = partition_id(&partition)?;
                asked.push((partition, id, time_of(&v)?));
            }
            Some(asked)
        }
        Err(_) => None,
    };
    let mut distinct: Vec<i64> = match &asked {
        Some(a) => a.iter().map(|&(_, _, t)| t).collect(),
        None => vec![time_of(times)?],
    };
    distinct.sort_unstable();
    distinct.dedup();
    let answers = runtime::wait_for(py, async move {
        let mut answers = Vec::with_capacity(distinct.len());
        for t in distinct {
            answers.push((t, node.offsets_for_time(&topic, t, timeout).await?));
        }
        Ok::<_, dafka_node::Error>(answers)
    })?
    .map_err(|e| no_store(e, towers))?;
    let out = PyDict::new(py);
    let offset_at = |t: i64, partition: &NodeId| {
        answers
            .iter()
            .find(|(at, _)| *at == t)
            .and_then(|(_, heard)| heard.iter().find(|(p, _)| p == partition))
            .and_then(|(_, o)| o.offset)
    };
    match asked {
        Some(asked) => {
            for (partition, id, t) in asked {
                out.set_item(&partition, offset_at(t, &id))?;
            }
        }
        None => {
            for (_, heard) in &answers {
                for (partition, o) in heard {
                    out.set_item(partition.to_string(), o.offset)?;
                }
            }
        }
    }
    Ok(out)
}

/// `topics` of `Consumer` and `PartitionReader`.
pub(crate) fn topics(
    py: Python<'_>,
    node: Arc<ConsumerNode>,
    towers: &str,
    timeout: f64,
) -> PyResult<Vec<String>> {
    let timeout = seconds("timeout", Some(timeout))?.unwrap_or_default();
    let topics = runtime::wait_for(py, async move { node.topics(timeout).await })?
        .map_err(|e| no_store(e, towers))?;
    Ok(topics.iter().map(|t| text(t.as_bytes())).collect())
}

/// A topic's or group's name as text (bytes that are not UTF-8 replaced).
fn text(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// A time for `offsets_for_times`: microseconds since the epoch or an aware `datetime`.
fn time_of(v: &Bound<'_, PyAny>) -> PyResult<i64> {
    crate::records_in::timestamp_of(v)?
        .ok_or_else(|| errors::invalid("offsets_for_times: a time cannot be None"))
}

/// A consumer that reads only the partitions assigned to it, and asks the stores for a topic's
/// partitions and their offset bounds.
#[pyclass(name = "PartitionReader", module = "dafka", frozen)]
pub(crate) struct PyPartitionReader {
    node: Slot<ConsumerNode>,
    towers: String,
}

#[pymethods]
impl PyPartitionReader {
    #[new]
    #[pyo3(signature = (towers, *, curve = None))]
    fn new(
        py: Python<'_>,
        towers: &str,
        curve: Option<&Bound<'_, crate::cluster_keys::PyClusterKeys>>,
    ) -> PyResult<Self> {
        let node = node_config(towers)?.with_security(crate::cluster_keys::security(curve));
        let options = ConsumerOptions::default().with_offset_reset(OffsetReset::Assigned);
        let consumer = runtime::wait_for(py, ConsumerNode::start(&[], node, options))?
            .map_err(errors::node)?;
        Ok(PyPartitionReader {
            node: Slot::new(consumer),
            towers: towers.to_owned(),
        })
    }

    /// `{partition: (low, end)}` for every partition of `topic` the stores hold: `low` the
    /// first offset still held, `end` one past the last. Raises `dafka.TimeoutError` when no
    /// store is reachable within `timeout` seconds.
    #[pyo3(signature = (topic, timeout = 10.0))]
    fn offsets<'py>(
        &self,
        py: Python<'py>,
        topic: String,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let timeout = seconds("timeout", Some(timeout))?.unwrap_or_default();
        let node = self.node.get("reader")?;
        let towers = self.towers.clone();
        let bounds = runtime::wait_for(py, async move { node.offsets(&topic, timeout).await })?
            .map_err(|e| no_store(e, &towers))?;
        let out = PyDict::new(py);
        for (partition, b) in bounds {
            out.set_item(partition.to_string(), (b.low, b.end))?;
        }
        Ok(out)
    }

    /// `{partition: offset}`: for each partition of `topic`, the first offset whose record's
    /// timestamp is at or after the time, `None` when no store holds a record that recent.
    /// `times` is one time for every partition the stores hold, or a dict `{partition:
    /// time}` for those partitions only (`None` for one no store holds); a time is
    /// microseconds since the epoch (UTC) or a timezone-aware `datetime`. Asks the stores
    /// once per distinct time. Raises `dafka.TimeoutError` when no store is reachable within
    /// `timeout` seconds.
    #[pyo3(signature = (topic, times, timeout = 10.0))]
    fn offsets_for_times<'py>(
        &self,
        py: Python<'py>,
        topic: String,
        times: &Bound<'py, PyAny>,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let node = self.node.get("reader")?;
        offsets_for_times(py, node, &self.towers, topic, times, timeout)
    }

    /// Every topic of which a reachable store holds a partition, sorted. Raises
    /// `dafka.TimeoutError` when no store is reachable within `timeout` seconds.
    #[pyo3(signature = (timeout = 10.0))]
    fn topics(&self, py: Python<'_>, timeout: f64) -> PyResult<Vec<String>> {
        let node = self.node.get("reader")?;
        topics(py, node, &self.towers, timeout)
    }

    /// The members of consumer group `group` (their ids) heard within `wait` seconds (at
    /// least one heartbeat interval, a quarter of `session_timeout`), without joining it.
    #[pyo3(signature = (group, wait = 3.0, session_timeout = 10.0))]
    fn group_members(
        &self,
        py: Python<'_>,
        group: String,
        wait: f64,
        session_timeout: f64,
    ) -> PyResult<Vec<String>> {
        let node = self.node.get("reader")?;
        let (wait, session) = listen_times(wait, session_timeout)?;
        py.detach(|| node.observe_group(&group, session))
            .map_err(errors::node)?;
        runtime::wait_for(py, async move { tokio::time::sleep(wait).await })?;
        Ok(py
            .detach(|| node.observed_members(&group))
            .iter()
            .map(NodeId::to_string)
            .collect())
    }

    /// Every consumer group heard within `wait` seconds (its members' heartbeats; at least
    /// one heartbeat interval, a quarter of `session_timeout`), with its members' ids, by
    /// group name; without joining any.
    #[pyo3(signature = (wait = 3.0, session_timeout = 10.0))]
    fn groups_heard(
        &self,
        py: Python<'_>,
        wait: f64,
        session_timeout: f64,
    ) -> PyResult<BTreeMap<String, Vec<String>>> {
        let node = self.node.get("reader")?;
        let (wait, session) = listen_times(wait, session_timeout)?;
        py.detach(|| node.observe_groups(session))
            .map_err(errors::node)?;
        runtime::wait_for(py, async move { tokio::time::sleep(wait).await })?;
        Ok(py
            .detach(|| node.observed_groups())
            .into_iter()
            .map(|(group, members)| {
                let members = members.iter().map(NodeId::to_string).collect();
                (text(group.as_bytes()), members)
            })
            .collect())
    }

    /// Every consumer group with offsets committed in a reachable store, sorted (listed by
    /// the stores, without joining any). Raises `dafka.TimeoutError` when no store is
    /// reachable within `timeout` seconds.
    #[pyo3(signature = (timeout = 10.0))]
    fn groups(&self, py: Python<'_>, timeout: f64) -> PyResult<Vec<String>> {
        let node = self.node.get("reader")?;
        let wait = seconds("timeout", Some(timeout))?.unwrap_or_default();
        let groups = runtime::wait_for(py, async move { node.groups(wait).await })?
            .map_err(|e| no_store(e, &self.towers))?;
        Ok(groups.iter().map(|g| text(g.as_bytes())).collect())
    }

    /// Consumer group `group`'s committed offsets the reachable stores hold, by
    /// `(topic, partition)` (without joining the group). Raises `dafka.TimeoutError` when no
    /// store is reachable within `timeout` seconds.
    #[pyo3(signature = (group, timeout = 10.0))]
    fn committed<'py>(
        &self,
        py: Python<'py>,
        group: String,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let node = self.node.get("reader")?;
        let wait = seconds("timeout", Some(timeout))?.unwrap_or_default();
        let towers = self.towers.clone();
        let got = runtime::wait_for(py, async move {
            node.committed_offsets(&group, &[], wait).await
        })?
        .map_err(|e| no_store(e, &towers))?;
        crate::dafka::offsets_dict(py, got)
    }

    /// Reads `partition` of `topic` from `offset` on; with `end` (exclusive) only the range
    /// `offset..end`, FETCHed at once from the stores (nothing past `end` is delivered; the
    /// topic's live records are not received unless an assign without `end` subscribed this
    /// reader to it). Records of the partition already received are dropped.
    #[pyo3(signature = (topic, partition, offset, end = None))]
    fn assign(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: &str,
        offset: u64,
        end: Option<u64>,
    ) -> PyResult<()> {
        let partition = partition_id(partition)?;
        let node = self.node.get("reader")?;
        py.detach(|| node.assign(topic, partition, offset, end))
            .map_err(errors::node)
    }

    /// The next offset the reader delivers in `partition` of `topic`, or `None` when it is
    /// not assigned. Above every offset polled so far when the stores no longer hold the ones
    /// between (retention: a DIRECT-LOW-WATER moved the partition up); read it *before* a poll
    /// that comes back empty to tell the records skipped from those not yet arrived.
    fn position(&self, py: Python<'_>, topic: &str, partition: &str) -> PyResult<Option<u64>> {
        let partition = partition_id(partition)?;
        let node = self.node.get("reader")?;
        Ok(py
            .detach(|| node.positions())
            .into_iter()
            .find(|p| p.partition == partition && p.topic.as_bytes() == topic.as_bytes())
            .map(|p| p.next))
    }

    /// Stops reading `partition` of `topic`.
    fn unassign(&self, py: Python<'_>, topic: &str, partition: &str) -> PyResult<()> {
        let partition = partition_id(partition)?;
        let node = self.node.get("reader")?;
        py.detach(|| node.unassign(topic, partition))
            .map_err(errors::node)
    }

    /// Records of the assigned partitions that arrived within `timeout` seconds, at most
    /// `max_records`, as a `pyarrow.RecordBatch` (possibly empty), in offset order per
    /// partition. The schema is `dafka.Consumer.poll`'s; with `headers=False` the `headers`
    /// column is all nulls (not built, for a caller that drops it).
    #[pyo3(signature = (max_records = 10000, timeout = 1.0, headers = true))]
    fn poll(
        &self,
        py: Python<'_>,
        max_records: usize,
        timeout: f64,
        headers: bool,
    ) -> PyResult<Py<PyAny>> {
        if max_records == 0 {
            return Err(errors::invalid("max_records must be at least 1"));
        }
        let timeout = seconds("timeout", Some(timeout))?.unwrap_or(Duration::ZERO);
        let node = self.node.get("reader")?;
        let records = runtime::wait_for(py, async move { node.poll(max_records, timeout).await })?
            .map_err(errors::node)?;
        py.detach(|| records_batch(records, headers))
            .map_err(arrow_batch::batch_error)?
            .to_pyarrow(py)
            .map(Bound::unbind)
    }

    /// The towers string it was made with.
    #[getter]
    fn towers(&self) -> &str {
        &self.towers
    }

    fn __repr__(&self) -> String {
        format!("<dafka.PartitionReader towers={:?}>", self.towers)
    }
}

/// The owner of each `(topic, partition)` among `members` (ids, 32 hex digits) as every
/// member of a consumer group computes it (`docs/groups.md`, *Assignment*); `{}` without
/// members.
#[pyfunction]
pub(crate) fn group_assignment(
    members: Vec<String>,
    partitions: Vec<(String, String)>,
) -> PyResult<std::collections::BTreeMap<(String, String), String>> {
    let members: Vec<NodeId> = members
        .iter()
        .map(|m| partition_id(m))
        .collect::<PyResult<_>>()?;
    let keys: Vec<(dafka_node::Topic, NodeId)> = partitions
        .iter()
        .map(|(t, p)| {
            let topic = dafka_node::Topic::try_from(t.as_str())
                .map_err(|e| errors::invalid(format!("topic {t:?}: {e}")))?;
            Ok((topic, partition_id(p)?))
        })
        .collect::<PyResult<_>>()?;
    let owners = dafka_node::group_assign(&members, &keys).unwrap_or_default();
    Ok(partitions
        .into_iter()
        .zip(owners.iter().map(NodeId::to_string))
        .collect())
}

/// `wait` and `session_timeout` of the group listeners, checked.
fn listen_times(wait: f64, session_timeout: f64) -> PyResult<(Duration, Duration)> {
    let wait = seconds("wait", Some(wait))?.unwrap_or_default();
    let session = seconds("session_timeout", Some(session_timeout))?
        .filter(|t| !t.is_zero())
        .ok_or_else(|| errors::invalid("session_timeout must be above 0"))?;
    Ok((wait, session))
}
