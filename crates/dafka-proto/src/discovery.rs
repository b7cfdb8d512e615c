//! The discovery state machine: which peers a node's subscriber is connected to, and when its
//! beacon goes out.
//!
//! * A peer is learnt from a tower beacon ([`Discovery::handle_beacon`]) or from ZRE
//!   ([`Discovery::handle_zre_peer`]): the subscriber connects to its publisher
//!   ([`Action::Connect`]). A beacon of a known peer refreshes it; the same id at a new endpoint
//!   disconnects the old endpoint and connects the new one. The node's own id is ignored.
//! * At most [`DiscoveryConfig::max_peers`] peers; further ones are refused
//!   ([`DiscoveryError::TooManyPeers`]), as are endpoints other than `tcp://host:port`
//!   ([`DiscoveryError::BadEndpoint`]).
//! * The node beacons at once, every [`DiscoveryConfig::beacon_interval`], when a tower's XSUB
//!   subscribes to its beacons ([`Discovery::handle_tower_subscribed`]), and soon after a tower
//!   announces a peer it did not know: at once, or [`ANSWER_BEACON_GAP`] after the last beacon
//!   (a node meeting many peers at once beacons a few times, not once per peer).
//! * Every beacon interval, peers a tower has not announced for
//!   [`DiscoveryConfig::peer_timeout`] are disconnected. Peers found through ZRE are never
//!   expired: they go when ZRE says so ([`Discovery::handle_zre_gone`]).
//!
//! Time is passed in; the driver calls [`Discovery::handle_timeout`] at
//! [`Discovery::poll_timeout`] and, after every call, executes what [`Discovery::poll_action`]
//! returns. A connect that fails is reported with [`Discovery::handle_connect_failed`].

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::error::{CallerError, DiscoveryError};
use crate::id::NodeId;

/// Least time between a beacon and the one that answers a newcomer (see the module docs).
pub const ANSWER_BEACON_GAP: Duration = Duration::from_millis(100);

/// `tcp://host:port` split into host (IPv6 still in brackets) and port; `None` for any other
/// form.
pub fn split_tcp(endpoint: &str) -> Option<(&str, u16)> {
    let rest = endpoint.strip_prefix("tcp://")?;
    let (host, port) = rest.rsplit_once(':')?;
    if host.is_empty() {
        return None;
    }
    Some((host, port.parse().ok()?))
}

/// Settings of a [`Discovery`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiscoveryConfig {
    /// Interval between beacons, and between looks for silent peers (the reference: 1 s).
    pub beacon_interval: Duration,
    /// A peer no tower announced for this long is disconnected (the reference: 4 s).
    pub peer_timeout: Duration,
    /// Most peers connected at once.
    pub max_peers: usize,
}

impl DiscoveryConfig {
    /// Defaults: beacons every second, peers dropped after 4 s of silence, 4096 peers.
    pub fn new() -> Self {
        DiscoveryConfig {
            beacon_interval: Duration::from_secs(1),
            peer_timeout: Duration::from_secs(4),
            max_peers: 4096,
        }
    }

    /// Whether the settings make sense: the interval positive and shorter than the timeout.
    pub fn validate(&self) -> Result<(), CallerError> {
        if self.beacon_interval.is_zero() || self.peer_timeout <= self.beacon_interval {
            return Err(CallerError::Config(
                "beacon_interval must be positive and shorter than peer_timeout",
            ));
        }
        Ok(())
    }
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig::new()
    }
}

/// Why a peer's endpoint is disconnected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
    /// No tower announced it for [`DiscoveryConfig::peer_timeout`].
    Silent,
    /// ZRE said it is gone.
    Gone,
    /// It was announced at another endpoint.
    Moved,
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Connect the subscriber to `node`'s publisher at `endpoint`; report a failure with
    /// [`Discovery::handle_connect_failed`].
    Connect {
        /// The peer.
        node: NodeId,
        /// Its publisher, `tcp://host:port`.
        endpoint: String,
    },
    /// Disconnect the subscriber from `endpoint`, `node`'s publisher.
    Disconnect {
        /// The peer.
        node: NodeId,
        /// The endpoint it was connected to.
        endpoint: String,
        /// Why.
        cause: Cause,
    },
    /// Send the node's beacon to the towers.
    SendBeacon,
}

#[derive(Debug)]
struct Peer {
    endpoint: String,
    seen: Instant,
    /// Found through ZRE: it goes when ZRE says so, not after a beacon silence.
    by_zre: bool,
}

/// A newcomer answer that moved the next beacon, withdrawn if its connect fails.
#[derive(Debug, Clone, Copy)]
struct Answer {
    node: NodeId,
    /// The next beacon before the answer moved it.
    before: Instant,
    /// The next beacon the answer set.
    set: Instant,
}

/// The discovery state machine. See the [module docs](self).
#[derive(Debug)]
pub struct Discovery {
    config: DiscoveryConfig,
    id: NodeId,
    peers: HashMap<NodeId, Peer>,
    next_beacon: Instant,
    /// When the last beacon went out.
    last_beacon: Option<Instant>,
    /// When silent peers are looked for next (every beacon interval).
    next_sweep: Instant,
    /// The answer of the last connect, until the next input.
    answer: Option<Answer>,
    actions: VecDeque<Action>,
}

impl Discovery {
    /// The discovery of node `id`, started at `now` (its first beacon is due at once), or the
    /// reason the configuration is invalid.
    pub fn new(config: DiscoveryConfig, id: NodeId, now: Instant) -> Result<Self, CallerError> {
        config.validate()?;
        Ok(Discovery {
            config,
            id,
            peers: HashMap::new(),
            next_beacon: now,
            last_beacon: None,
            next_sweep: now,
            answer: None,
            actions: VecDeque::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &DiscoveryConfig {
        &self.config
    }

    /// Peers connected now.
    pub fn peers(&self) -> usize {
        self.peers.len()
    }

    /// A tower announced `node`'s publisher at `endpoint`.
    pub fn handle_beacon(
        &mut self,
        node: NodeId,
        endpoint: &str,
        now: Instant,
    ) -> Result<(), DiscoveryError> {
        self.learn(node, endpoint, now, false)
    }

    /// ZRE announced `node`'s publisher at `endpoint` (it joined the cluster's group).
    pub fn handle_zre_peer(
        &mut self,
        node: NodeId,
        endpoint: &str,
        now: Instant,
    ) -> Result<(), DiscoveryError> {
        self.learn(node, endpoint, now, true)
    }

    /// ZRE says `node` is gone (EXIT, or it left the cluster's group).
    pub fn handle_zre_gone(&mut self, node: NodeId) {
        self.answer = None;
        if let Some(peer) = self.peers.remove(&node) {
            self.disconnect(node, peer.endpoint, Cause::Gone);
        }
    }

    /// The connect to `node`'s publisher at `endpoint` that [`Action::Connect`] asked for
    /// failed: the peer is dropped (its next announcement tries again).
    pub fn handle_connect_failed(&mut self, node: NodeId, endpoint: &str) {
        if self
            .peers
            .get(&node)
            .is_some_and(|p| p.endpoint == endpoint)
        {
            self.peers.remove(&node);
        }
        if let Some(a) = self.answer.take()
            && a.node == node
            && self.next_beacon == a.set
        {
            self.next_beacon = a.before;
        }
    }

    /// A tower's XSUB subscribed to the node's beacons: beacon now, not one interval later
    /// (a beacon sent before that subscription arrived was lost).
    pub fn handle_tower_subscribed(&mut self, now: Instant) {
        self.answer = None;
        self.send_beacon(now);
    }

    /// The time given by [`poll_timeout`](Self::poll_timeout) came (or any time: nothing
    /// happens before its time).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.answer = None;
        if now >= self.next_beacon {
            self.send_beacon(now);
        }
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + self.config.beacon_interval;
        let timeout = self.config.peer_timeout;
        let silent: Vec<NodeId> = self
            .peers
            .iter()
            .filter(|(_, p)| !p.by_zre && now.duration_since(p.seen) >= timeout)
            .map(|(id, _)| *id)
            .collect();
        for node in silent {
            if let Some(peer) = self.peers.remove(&node) {
                self.disconnect(node, peer.endpoint, Cause::Silent);
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due next: the next beacon, or the next
    /// look for silent peers if there are peers. Always some time.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.peers.is_empty() {
            Some(self.next_beacon)
        } else {
            Some(self.next_beacon.min(self.next_sweep))
        }
    }

    /// The next thing for the driver to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    fn send_beacon(&mut self, now: Instant) {
        self.actions.push_back(Action::SendBeacon);
        self.next_beacon = now + self.config.beacon_interval;
        self.last_beacon = Some(now);
    }

    fn disconnect(&mut self, node: NodeId, endpoint: String, cause: Cause) {
        self.actions.push_back(Action::Disconnect {
            node,
            endpoint,
            cause,
        });
    }

    /// Connects to `node`'s publisher at `endpoint` (announced by ZRE when `by_zre`), or
    /// refreshes it.
    fn learn(
        &mut self,
        node: NodeId,
        endpoint: &str,
        now: Instant,
        by_zre: bool,
    ) -> Result<(), DiscoveryError> {
        self.answer = None;
        if node == self.id {
            return Ok(());
        }
        if let Some(peer) = self.peers.get_mut(&node) {
            peer.seen = now;
            peer.by_zre |= by_zre;
            if peer.endpoint == endpoint {
                return Ok(());
            }
            // Same id, new endpoint: the old one is gone.
            let old = std::mem::take(&mut peer.endpoint);
            self.disconnect(node, old, Cause::Moved);
        } else if self.peers.len() >= self.config.max_peers {
            return Err(DiscoveryError::TooManyPeers {
                node,
                max: self.config.max_peers,
            });
        }
        if split_tcp(endpoint).is_none() {
            self.peers.remove(&node);
            return Err(DiscoveryError::BadEndpoint {
                node,
                endpoint: endpoint.to_owned(),
            });
        }
        self.actions.push_back(Action::Connect {
            node,
            endpoint: endpoint.to_owned(),
        });
        if !by_zre {
            self.answer_newcomer(node, now);
        }
        self.peers.insert(
            node,
            Peer {
                endpoint: endpoint.to_owned(),
                seen: now,
                by_zre,
            },
        );
        Ok(())
    }

    /// A tower announced a peer new to us: beacon soon, so that it hears of us too (at once,
    /// or [`ANSWER_BEACON_GAP`] after the last beacon).
    fn answer_newcomer(&mut self, node: NodeId, now: Instant) {
        let soon = self
            .last_beacon
            .map_or(now, |last| (last + ANSWER_BEACON_GAP).max(now));
        let before = self.next_beacon;
        self.next_beacon = before.min(soon);
        self.answer = Some(Answer {
            node,
            before,
            set: self.next_beacon,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_endpoints() {
        assert_eq!(split_tcp("tcp://127.0.0.1:5556"), Some(("127.0.0.1", 5556)));
        assert_eq!(split_tcp("tcp://[::1]:0"), Some(("[::1]", 0)));
        assert_eq!(split_tcp("tcp://:5556"), None);
        assert_eq!(split_tcp("tcp://h:70000"), None);
        assert_eq!(split_tcp("ipc:///x"), None);
    }
}
