//! `dafka._native.ZreNode`: a `dafka-zre` node, converted and kept alive; no protocol logic.
//! `python/dafka/zre.py` wraps it as `dafka.zre.Node` (the contract of issue 12).
//!
//! Events cross as tuples `(type, peer_uuid, peer_name, group, frames, headers, address)`,
//! which `dafka.zre.Event` names. Events a caller did not take (left in the queue at `stop()`,
//! or received for an awaitable `recv` cancelled meanwhile) wait in a stash that every
//! receive empties first, so none is lost and STOP stays last.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use dafka_zmtp::CurveKeyPair;
use dafka_zre::{Event, Options, PeerId, ZreNode};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use tokio::sync::oneshot;

use crate::asyncio::{lock, new_future};
use crate::{errors, runtime};

struct Shared {
    node: ZreNode,
    stash: Mutex<VecDeque<Event>>,
    /// Held by a receive from taking an event until it is handed over (for an awaitable one:
    /// until the loop ran [`Deliver`], which may put it back into the stash), so receives are
    /// served in call order and events come out in the order they arrived.
    turn: tokio::sync::Mutex<()>,
}

impl Shared {
    /// The next event; the caller holds `turn`. Cancel-safe.
    async fn next(&self) -> Option<Event> {
        if let Some(e) = lock(&self.stash).pop_front() {
            return Some(e);
        }
        self.node.next_event().await
    }
}

/// A running ZRE node (started by the constructor).
#[pyclass(name = "ZreNode", module = "dafka._native", frozen)]
pub(crate) struct PyZreNode {
    shared: Arc<Shared>,
    uuid: String,
    endpoint: String,
}

fn seconds(name: &str, s: f64) -> PyResult<Duration> {
    Ok(crate::dafka::seconds(name, Some(s))?.unwrap_or_default())
}

fn peer_id(text: &str) -> PyResult<PeerId> {
    text.parse::<PeerId>().map_err(|_| {
        errors::invalid(format!(
            "peer {text:?} is not a UUID of 32 hexadecimal digits"
        ))
    })
}

/// The event as the tuple `dafka.zre.Event` is built from.
fn event_tuple(py: Python<'_>, e: Event) -> PyResult<Bound<'_, PyTuple>> {
    let none = || py.None().into_bound(py);
    let frames = |content: Vec<Bytes>| -> PyResult<Bound<'_, PyAny>> {
        let list = PyList::empty(py);
        for f in content {
            list.append(PyBytes::new(py, &f))?;
        }
        Ok(list.into_any())
    };
    let empty = || PyList::empty(py).into_any();
    let headers = PyDict::new(py);
    let (kind, peer, name, group, content, address) = match e {
        Event::Enter {
            peer,
            name,
            headers: h,
            address,
        } => {
            for (k, v) in h {
                headers.set_item(k, v)?;
            }
            (
                "ENTER",
                Some(peer),
                Some(name),
                None,
                empty(),
                Some(address),
            )
        }
        Event::Exit { peer, name } => ("EXIT", Some(peer), Some(name), None, empty(), None),
        Event::Join { peer, name, group } => {
            ("JOIN", Some(peer), Some(name), Some(group), empty(), None)
        }
        Event::Leave { peer, name, group } => {
            ("LEAVE", Some(peer), Some(name), Some(group), empty(), None)
        }
        Event::Whisper {
            peer,
            name,
            content,
        } => (
            "WHISPER",
            Some(peer),
            Some(name),
            None,
            frames(content)?,
            None,
        ),
        Event::Shout {
            peer,
            name,
            group,
            content,
        } => (
            "SHOUT",
            Some(peer),
            Some(name),
            Some(group),
            frames(content)?,
            None,
        ),
        Event::Evasive { peer, name } => ("EVASIVE", Some(peer), Some(name), None, empty(), None),
        Event::Silent { peer, name } => ("SILENT", Some(peer), Some(name), None, empty(), None),
        _ => ("STOP", None, None, None, empty(), None),
    };
    let text = |s: Option<String>| match s {
        Some(s) => s.into_pyobject(py).map(Bound::into_any),
        None => Ok(none()),
    };
    PyTuple::new(
        py,
        [
            kind.into_pyobject(py)?.into_any(),
            text(peer.map(|p| p.to_string()))?,
            text(name)?,
            text(group)?,
            content,
            headers.into_any(),
            text(address)?,
        ],
    )
}

fn stopped() -> PyErr {
    errors::closed("the ZRE node has stopped")
}

impl PyZreNode {
    fn query<R: Send + 'static>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&dafka_zre::Node) -> R + Send + 'static,
    ) -> PyResult<R> {
        let shared = Arc::clone(&self.shared);
        runtime::wait_for(py, async move { shared.node.query(f).await })?.map_err(errors::zre)
    }
}

#[pymethods]
impl PyZreNode {
    #[new]
    #[pyo3(signature = (
        uuid, name = None, headers = None, interface = None, port = 5670, interval = 1.0,
        *, ipv6 = false, multicast = None, beacons = true, known_endpoints = None,
        gossip_hub = false, local_inproc = true, evasive = 5.0, silent = 10.0, expired = 30.0,
        curve_secretkey = None, curve_publickey = None, allowed_keys = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        uuid: &[u8],
        name: Option<String>,
        headers: Option<Vec<(String, String)>>,
        interface: Option<&str>,
        port: u16,
        interval: f64,
        ipv6: bool,
        multicast: Option<&str>,
        beacons: bool,
        known_endpoints: Option<Vec<String>>,
        gossip_hub: bool,
        local_inproc: bool,
        evasive: f64,
        silent: f64,
        expired: f64,
        curve_secretkey: Option<Bound<'_, PyAny>>,
        curve_publickey: Option<Bound<'_, PyAny>>,
        allowed_keys: Option<Vec<Bound<'_, PyAny>>>,
    ) -> PyResult<Self> {
        let curve = curve_options(
            curve_secretkey.as_ref(),
            curve_publickey.as_ref(),
            allowed_keys.as_deref(),
        )?;
        let uuid: [u8; 16] = uuid
            .try_into()
            .map_err(|_| errors::invalid("uuid must be 16 bytes"))?;
        let mut options = match interface {
            Some(spec) => Options::interface(spec, port, ipv6).map_err(|e| match e {
                dafka_zre::Error::Caller(c) => errors::invalid(format!("interface {spec:?}: {c}")),
                other => errors::zre(other),
            }),
            None => Options::default_interface(port).map_err(errors::zre),
        }?
        .with_uuid(uuid)
        .with_interval(seconds("interval", interval)?)
        .with_timeouts(
            seconds("evasive", evasive)?,
            seconds("silent", silent)?,
            seconds("expired", expired)?,
        );
        if let Some(group) = multicast {
            let group = group.parse().map_err(|_| {
                errors::invalid(format!("multicast {group:?} is not an IP address"))
            })?;
            options = options.with_multicast(group).map_err(errors::zre)?;
        }
        if let Some(name) = name {
            options = options.with_name(name);
        }
        for (k, v) in headers.into_iter().flatten() {
            options = options.with_header(k, v);
        }
        if !beacons {
            options = options.without_beacons();
        }
        if gossip_hub {
            options = options.with_gossip_hub();
        }
        if !local_inproc {
            options = options.without_local_inproc();
        }
        for e in known_endpoints.into_iter().flatten() {
            options = options.with_known_endpoint(e);
        }
        if let Some((keypair, allowed)) = curve {
            options = options.with_curve(keypair);
            if let Some(allowed) = allowed {
                options = options.with_curve_allowed(allowed);
            }
        }
        let node = runtime::wait_for(py, ZreNode::start(options))?.map_err(errors::zre)?;
        Ok(PyZreNode {
            uuid: node.uuid().to_string(),
            endpoint: node.endpoint().to_owned(),
            shared: Arc::new(Shared {
                node,
                stash: Mutex::new(VecDeque::new()),
                turn: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// This node's id: 32 upper-case hex digits.
    #[getter]
    fn uuid(&self) -> &str {
        &self.uuid
    }

    /// The mailbox, `tcp://ip:port`.
    #[getter]
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Whether the node has stopped.
    #[getter]
    fn stopped(&self) -> bool {
        self.shared.node.is_stopped()
    }

    /// The next event as a tuple; `TimeoutError` after `timeout` seconds, `ClosedError` once
    /// the node has stopped and every event was taken.
    #[pyo3(signature = (timeout = None))]
    fn recv<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyTuple>> {
        let limit = timeout.map(|t| seconds("timeout", t)).transpose()?;
        let shared = Arc::clone(&self.shared);
        let next = async move {
            let _turn = shared.turn.lock().await;
            shared.next().await
        };
        match runtime::wait_for_at_most(py, limit, next)? {
            None => Err(errors::timeout(format!(
                "no ZRE event within {} s",
                timeout.unwrap_or_default()
            ))),
            Some(None) => Err(stopped()),
            Some(Some(e)) => event_tuple(py, e),
        }
    }

    /// [`recv`] as an `asyncio.Future` of the running loop. Cancelling it loses nothing.
    fn recv_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (fut, handoff, cancel) = new_future(py)?;
        let shared = Arc::clone(&self.shared);
        runtime::handle().spawn(async move {
            let (_turn, event) = tokio::select! {
                biased;
                () = cancel.wait() => return,
                e = async {
                    let turn = shared.turn.lock().await;
                    (turn, shared.next().await)
                } => e,
            };
            let (done, ran) = oneshot::channel();
            let scheduled = runtime::attach(|py| {
                let deliver = Deliver {
                    fut: handoff.fut.clone_ref(py),
                    event: Mutex::new(Some(event)),
                    shared: Arc::clone(&shared),
                    done: Mutex::new(Some(done)),
                };
                let scheduled = Py::new(py, deliver).and_then(|d| {
                    handoff
                        .event_loop
                        .bind(py)
                        .call_method1("call_soon_threadsafe", (d.clone_ref(py),))
                        .map_err(|e| (e, d))
                        .map_err(|(e, d)| {
                            // The loop is closed: the event goes back for the next receive.
                            d.get().keep();
                            e
                        })
                });
                if let Err(e) = &scheduled {
                    log::debug!("dafka: asyncio loop gone before a ZRE event: {e}");
                }
                scheduled.is_ok()
            });
            // (Not scheduled when Python is exiting: no loop will run it.)
            if scheduled == Some(true) {
                // Keep the turn until the event is in the future or back in the stash.
                let _ = ran.await;
            }
        });
        Ok(fut)
    }

    fn join(&self, py: Python<'_>, group: String) -> PyResult<()> {
        let shared = Arc::clone(&self.shared);
        runtime::wait_for(py, async move { shared.node.join(&group).await })?.map_err(errors::zre)
    }

    fn leave(&self, py: Python<'_>, group: String) -> PyResult<()> {
        let shared = Arc::clone(&self.shared);
        runtime::wait_for(py, async move { shared.node.leave(&group).await })?.map_err(errors::zre)
    }

    fn shout(&self, py: Python<'_>, group: String, frames: Vec<Vec<u8>>) -> PyResult<()> {
        let frames = frames.into_iter().map(Bytes::from).collect();
        let shared = Arc::clone(&self.shared);
        runtime::wait_for(py, async move { shared.node.shout(&group, frames).await })?
            .map_err(errors::zre)
    }

    fn whisper(&self, py: Python<'_>, peer: &str, frames: Vec<Vec<u8>>) -> PyResult<()> {
        let peer = peer_id(peer)?;
        let frames = frames.into_iter().map(Bytes::from).collect();
        let shared = Arc::clone(&self.shared);
        runtime::wait_for(py, async move { shared.node.whisper(peer, frames).await })?
            .map_err(errors::zre)
    }

    /// Peers that said HELLO, sorted.
    fn peers(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.query(py, |n| n.peers().iter().map(ToString::to_string).collect())
    }

    /// Groups some peer is in, sorted.
    fn peer_groups(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.query(py, |n| n.peer_groups())
    }

    /// Groups this node is in, in join order.
    fn own_groups(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.query(py, |n| n.own_groups())
    }

    fn peers_by_group(&self, py: Python<'_>, group: String) -> PyResult<Vec<String>> {
        self.query(py, move |n| {
            n.peers_by_group(&group)
                .iter()
                .map(ToString::to_string)
                .collect()
        })
    }

    fn peer_header(&self, py: Python<'_>, peer: &str, key: String) -> PyResult<Option<String>> {
        let peer = peer_id(peer)?;
        self.query(py, move |n| n.peer_header(peer, &key).map(str::to_owned))
    }

    fn peer_address(&self, py: Python<'_>, peer: &str) -> PyResult<Option<String>> {
        let peer = peer_id(peer)?;
        self.query(py, move |n| n.peer_address(peer).map(str::to_owned))
    }

    fn peer_name(&self, py: Python<'_>, peer: &str) -> PyResult<Option<String>> {
        let peer = peer_id(peer)?;
        self.query(py, move |n| n.peer_name(peer).map(str::to_owned))
    }

    /// Stops (a port-0 beacon, connections closed) and waits; the events still queued, STOP
    /// last, remain for `recv`.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let shared = Arc::clone(&self.shared);
        let left = runtime::wait_for(py, async move { shared.node.close().await })?;
        lock(&self.shared.stash).extend(left);
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!(
            "<dafka._native.ZreNode uuid={} endpoint={}>",
            self.uuid, self.endpoint
        )
    }
}

/// Runs on the event loop's thread and resolves an awaitable `recv`.
#[pyclass(frozen)]
struct Deliver {
    fut: Py<PyAny>,
    event: Mutex<Option<Option<Event>>>,
    shared: Arc<Shared>,
    done: Mutex<Option<oneshot::Sender<()>>>,
}

impl Deliver {
    /// Nobody takes the event: it goes back to the front of the stash.
    fn keep(&self) {
        if let Some(Some(e)) = lock(&self.event).take() {
            lock(&self.shared.stash).push_front(e);
        }
        self.ran();
    }

    fn ran(&self) {
        if let Some(done) = lock(&self.done).take() {
            let _ = done.send(());
        }
    }
}

#[pymethods]
impl Deliver {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let fut = self.fut.bind(py);
        if fut.call_method0("done")?.is_truthy()? {
            self.keep();
            return Ok(());
        }
        let Some(event) = lock(&self.event).take() else {
            self.ran();
            return Ok(());
        };
        // Whatever happens below, the receive's turn ends with this call.
        let _ran = RanOnDrop(self);
        match event {
            Some(e) => match event_tuple(py, e) {
                Ok(t) => fut.call_method1("set_result", (t,))?,
                Err(err) => fut.call_method1("set_exception", (err.into_value(py),))?,
            },
            None => fut.call_method1("set_exception", (stopped().into_value(py),))?,
        };
        Ok(())
    }
}

struct RanOnDrop<'a>(&'a Deliver);

impl Drop for RanOnDrop<'_> {
    fn drop(&mut self) {
        self.0.ran();
    }
}

/// CURVE mode from `curve_secretkey` (Z85 or 32 raw bytes), the optional `curve_publickey`
/// (checked against it) and `allowed_keys`.
#[allow(clippy::type_complexity)]
fn curve_options(
    secret: Option<&Bound<'_, PyAny>>,
    public: Option<&Bound<'_, PyAny>>,
    allowed: Option<&[Bound<'_, PyAny>]>,
) -> PyResult<Option<(CurveKeyPair, Option<Vec<[u8; 32]>>)>> {
    let secret = match secret {
        Some(s) => crate::security::key("curve_secretkey", s)?,
        None => None,
    };
    let public = match public {
        Some(p) => crate::security::key("curve_publickey", p)?,
        None => None,
    };
    let Some(secret) = secret else {
        if public.is_some() || allowed.is_some() {
            return Err(errors::invalid(
                "curve_publickey and allowed_keys need curve_secretkey (CURVE mode)",
            ));
        }
        return Ok(None);
    };
    let keypair = CurveKeyPair::from_secret(secret);
    if public.is_some_and(|p| &p != keypair.public()) {
        return Err(errors::invalid(
            "curve_publickey is not the public key of curve_secretkey",
        ));
    }
    let allowed = allowed
        .map(|keys| crate::security::keys("allowed_keys", keys))
        .transpose()?;
    Ok(Some((keypair, allowed)))
}
