//! The tower: an XSUB that node beacons reach and an XPUB that sends them on as tower beacons.
//!
//! * XSUB (default `tcp://*:5556`): nodes' beacon PUBs connect here. Each node beacon
//!   (`"B"`, UUID, host, port) goes out on the XPUB as a tower beacon (`"B"`, UUID,
//!   `tcp://host:port`). A beacon with an empty host is dropped: the reference substitutes
//!   an address there (and its own first interface for `127.0.0.1`), which loses the node's
//!   own choice; our nodes always send the host.
//! * XPUB (default the next port, `:5557`): nodes' beacon SUBs connect here and get the
//!   welcome `"W"` first. Their subscriptions are passed on to the XSUB, except `"W"` (the
//!   welcome is the tower's own), as the reference does, so the XSUB asks the beacon PUBs for
//!   `"B"` only once a node listens.
//!
//! Malformed beacons are dropped, counted in [`NodeStats`] and logged (rate limited).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dafka_proto::{BeaconMessage, Limits, TowerBeacon, WELCOME_TOPIC};
use dafka_zmtp::{Options, Socket, SocketType, Subscription};

use crate::error::Error;
use crate::node::{
    Control, NodeStats, NodeTask, TowerAddress, beacon_input_limits, hears_subscriptions, split_tcp,
};
use crate::security::ClusterKeys;

/// Attempts at finding two consecutive free ports when the XSUB port is 0. Linux gives
/// `bind` odd ephemeral ports and `connect` even ones, so the XPUB's (the next one) is one
/// that outgoing connections, and their `TIME_WAIT`, may hold: many connections at once (a
/// busy test run) can take many of them. Each attempt is one bind and one unbind.
const PORT_PAIR_ATTEMPTS: usize = 256;

/// Settings of a [`Tower`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TowerConfig {
    /// Where the XSUB listens (default `tcp://*:5556`; port 0 picks a free one).
    pub sub: String,
    /// Where the XPUB listens; `None` (the default): the XSUB's host, on the next port, so
    /// the tower is named by one `tcp://host:port` (see [`Tower::towers`]).
    pub publ: Option<String>,
    /// Decode limits for beacons.
    pub limits: Limits,
    /// CURVE on both sockets (`None`, the default: plaintext).
    pub security: Option<ClusterKeys>,
}

impl Default for TowerConfig {
    fn default() -> Self {
        TowerConfig {
            sub: "tcp://*:5556".to_owned(),
            publ: None,
            limits: Limits::DEFAULT,
            security: None,
        }
    }
}

impl TowerConfig {
    /// A tower whose XSUB listens on `sub` and XPUB on the next port.
    pub fn new(sub: impl Into<String>) -> Self {
        TowerConfig {
            sub: sub.into(),
            ..TowerConfig::default()
        }
    }

    /// Sets [`security`](Self::security).
    #[must_use]
    pub fn with_security(mut self, keys: Option<ClusterKeys>) -> Self {
        self.security = keys;
        self
    }

    /// Sets [`publ`](Self::publ).
    #[must_use]
    pub fn with_publ(mut self, publ: impl Into<String>) -> Self {
        self.publ = Some(publ.into());
        self
    }
}

/// A running tower. Dropping it stops it; [`close`](Tower::close) also waits for its task.
#[derive(Debug)]
pub struct Tower {
    address: TowerAddress,
    task: NodeTask,
}

impl Tower {
    /// Binds both sockets and starts forwarding, on the current tokio runtime.
    pub async fn start(config: TowerConfig) -> Result<Tower, Error> {
        let (server, _) = crate::security::mechanisms(config.security.as_ref());
        // Node beacons come into the XSUB and subscriptions into the XPUB, a few hundred bytes
        // each: a stranger announcing more is closed from the frame's header.
        let xsub = Socket::new(
            SocketType::Xsub,
            quick()
                .with_mechanism(server.clone())
                .with_recv_limits(Some(beacon_input_limits(&config.limits))),
        )?;
        let xpub = Socket::new(
            SocketType::Xpub,
            hears_subscriptions(
                quick()
                    .with_xpub_welcome_msg(Some(Bytes::from_static(WELCOME_TOPIC)))
                    .with_mechanism(server),
            ),
        )?;
        let (sub, publ) = bind_pair(&xsub, &xpub, &config).await?;
        let control = Arc::new(Control::default());
        let stats = Arc::new(NodeStats::default());
        let task = tokio::spawn(forward(
            xsub,
            xpub,
            config.limits,
            stats.clone(),
            control.clone(),
        ));
        Ok(Tower {
            address: TowerAddress::new(connectable(&sub), connectable(&publ)),
            task: NodeTask::new(control, stats, task),
        })
    }

    /// The endpoints nodes connect to (a wildcard host given as `127.0.0.1`).
    pub fn address(&self) -> &TowerAddress {
        &self.address
    }

    /// The string handed to other nodes: `tcp://host:SUBPORT` (the XPUB on the next port),
    /// which [`TowerAddress::parse_list`] reads. Only meaningful when the XPUB is on the next
    /// port, as it is unless [`TowerConfig::publ`] says otherwise.
    pub fn towers(&self) -> String {
        self.address.sub.clone()
    }

    /// Dropped input.
    pub fn stats(&self) -> &NodeStats {
        &self.task.stats
    }

    /// Stops forwarding and closes both sockets.
    pub async fn close(mut self) {
        self.task.close().await;
    }
}

fn quick() -> Options {
    Options::default().with_linger(Some(Duration::ZERO))
}

/// Binds the XSUB and the XPUB; with port 0 and no XPUB endpoint, retries until the XPUB gets
/// the port after the XSUB's.
async fn bind_pair(
    xsub: &Socket,
    xpub: &Socket,
    config: &TowerConfig,
) -> Result<(String, String), Error> {
    if let Some(publ) = &config.publ {
        let sub = xsub.bind(&config.sub).await?;
        return Ok((sub, xpub.bind(publ).await?));
    }
    let (host, port) = split_tcp(&config.sub).ok_or_else(|| Error::Endpoint {
        endpoint: config.sub.clone(),
        reason: "expected tcp://host:port",
    })?;
    let attempts = if port == 0 { PORT_PAIR_ATTEMPTS } else { 1 };
    let mut last = None;
    for _ in 0..attempts {
        let sub = xsub.bind(&config.sub).await?;
        let next = split_tcp(&sub).and_then(|(_, p)| p.checked_add(1));
        if let Some(next) = next {
            match xpub.bind(&format!("tcp://{host}:{next}")).await {
                Ok(publ) => return Ok((sub, publ)),
                Err(e) => last = Some(e),
            }
        }
        xsub.unbind(&sub).await?;
    }
    if let Some(e) = last {
        tracing::warn!(
            "tower: no free port after the XSUB's in {attempts} attempts, the last: {e}"
        );
    }
    Err(Error::Endpoint {
        endpoint: config.sub.clone(),
        reason: "no free port after the XSUB's for the XPUB in any attempt: \
                 give the XPUB's endpoint too (`pub`) or free some ephemeral ports",
    })
}

/// A bound endpoint as a peer can connect to it (`0.0.0.0` becomes `127.0.0.1`).
fn connectable(bound: &str) -> String {
    bound
        .replacen("tcp://0.0.0.0:", "tcp://127.0.0.1:", 1)
        .replacen("tcp://[::]:", "tcp://[::1]:", 1)
}

async fn forward(
    xsub: Socket,
    xpub: Socket,
    limits: Limits,
    stats: Arc<NodeStats>,
    control: Arc<Control>,
) {
    let mut beacons = Vec::new();
    let mut subscriptions = Vec::new();
    let mut log = crate::node::LogLimiter::default();
    while !control.stopping() {
        tokio::select! {
            _ = control.wake.notified() => {}
            r = xsub.recv_many(1024, &mut beacons) => {
                if r.is_err() { break; }
                for m in beacons.drain(..) {
                    let reason = match BeaconMessage::decode(m.frames(), &limits) {
                        Ok(BeaconMessage::Node(b)) if !b.host.is_empty() => {
                            let tower = BeaconMessage::Tower(TowerBeacon::from_node(&b));
                            let _ = xpub.try_send(tower.to_frames().into());
                            continue;
                        }
                        Ok(BeaconMessage::Node(_)) => "node beacon with an empty host".to_owned(),
                        Ok(other) => format!("not a node beacon: {other:?}"),
                        Err(e) => e.to_string(),
                    };
                    stats.count_malformed();
                    if log.allow(crate::node::now()) {
                        tracing::warn!(socket = "tower XSUB", reason, "malformed beacon dropped");
                    }
                }
            }
            r = xpub.recv_many(1024, &mut subscriptions) => {
                if r.is_err() { break; }
                for m in subscriptions.drain(..) {
                    // `0x01`/`0x00` + prefix; `W...` stays with the tower (the welcome is its own).
                    let passes = m
                        .frames()
                        .first()
                        .and_then(Subscription::decode)
                        .is_some_and(|s| s.prefix().first().is_some_and(|&b| b != WELCOME_TOPIC[0]));
                    if passes {
                        let _ = xsub.try_send(m);
                    }
                }
            }
        }
    }
    xsub.close_in_background();
    xpub.close_in_background();
}
