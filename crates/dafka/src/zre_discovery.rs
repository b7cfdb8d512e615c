//! Dafka without towers: nodes find each other through ZRE (`dafka-zre`).
//!
//! Selected by a `towers` value `zre://CLUSTER` ([`ZreCluster::parse`]). Each Dafka node
//! (each of a store's two) then runs a ZRE node whose UUID is the Dafka node id, announcing
//! its publisher in the HELLO header [`PUBLISHER_HEADER`] (`X-DAFKA=tcp://ip:port`, the
//! `X-NAME` style of the ZRE extension protocols) and joining the ZRE group `CLUSTER`. A peer
//! that announces the header and joins the group is connected to exactly as a peer a tower
//! announced; it is disconnected when it leaves the group or ZRE reports its EXIT (its port-0
//! beacon, or the expired timeout): ZRE's liveness replaces the towers' 4 s beacon silence.
//!
//! The publisher binds to the ZRE interface's address, so what the header announces is what
//! peers on that interface reach.
//!
//! With the cluster's keys ([`ClusterKeys`]), the ZRE node runs in CURVE mode (43/ZRE
//! version 3) with the member's key pair, and the cluster's authenticator both guards its
//! mailbox and decides which beacons and HELLOs it heeds: nodes whose member key is not
//! allowed are neither connected to nor heard, and nothing of the discovery (names, groups,
//! publisher endpoints) travels in clear. ZRE's CURVE mode takes no known endpoints, so
//! `known=` is refused with keys.
//!
//! | `towers` form | meaning |
//! |---|---|
//! | `zre://CLUSTER` | beacons on the first up, non-loopback IPv4 interface with a broadcast address (zyre's choice), UDP port 5670 |
//! | `zre://CLUSTER?interface=eth0&port=5670&interval=0.5` | the interface by name or address, another beacon port, another beacon interval in seconds |
//! | `...&multicast=225.25.25.25`, `...&ipv6=1` | beacons to a multicast group, over IPv6 (`ff02::1`) |
//! | `...&known=tcp://10.0.0.5:41000&beacons=0` | no UDP: a known ZRE mailbox (a gossip hub, repeatable) |

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use dafka_proto::NodeId;
use dafka_zre::{Event, Options, ZreNode};

use crate::error::Error;
use crate::security::ClusterKeys;

/// The HELLO header a Dafka node announces its publisher in.
pub const PUBLISHER_HEADER: &str = "X-DAFKA";

/// The `towers` prefix that selects ZRE discovery.
pub const SCHEME: &str = "zre://";

/// Where and how a node finds its cluster over ZRE.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZreCluster {
    /// The ZRE group every node of the cluster joins.
    pub cluster: String,
    /// Interface name or address (`None`: zyre's choice).
    pub interface: Option<String>,
    /// Beacon UDP port (5670).
    pub port: u16,
    /// Beacon interval (1 s).
    pub interval: Duration,
    /// Beacons to this multicast group rather than broadcast.
    pub multicast: Option<IpAddr>,
    /// Over IPv6.
    pub ipv6: bool,
    /// UDP beacons at all (yes).
    pub beacons: bool,
    /// ZRE mailboxes to find without beacons.
    pub known: Vec<String>,
}

impl ZreCluster {
    /// The cluster a `towers` value names, if it starts with `zre://`: `Ok(None)` for any
    /// other value (towers), an error for a malformed `zre://` one.
    pub fn parse(towers: &str) -> Result<Option<ZreCluster>, Error> {
        let Some(rest) = towers.trim().strip_prefix(SCHEME) else {
            return Ok(None);
        };
        let bad = |reason| Error::Endpoint {
            endpoint: towers.to_owned(),
            reason,
        };
        let (cluster, query) = rest.split_once('?').unwrap_or((rest, ""));
        if cluster.is_empty() || cluster.len() > 255 {
            return Err(bad("zre://CLUSTER needs a cluster name of 1 to 255 bytes"));
        }
        let mut c = ZreCluster {
            cluster: cluster.to_owned(),
            interface: None,
            port: dafka_zre::DEFAULT_PORT,
            interval: Duration::from_secs(1),
            multicast: None,
            ipv6: false,
            beacons: true,
            known: Vec::new(),
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').ok_or(bad("option without `=`"))?;
            let flag = || match value {
                "1" | "true" | "yes" => Ok(true),
                "0" | "false" | "no" => Ok(false),
                _ => Err(bad("a flag is 1/0, true/false or yes/no")),
            };
            match key {
                "interface" => c.interface = Some(value.to_owned()),
                "port" => c.port = value.parse().map_err(|_| bad("port is not 0..=65535"))?,
                "interval" => {
                    c.interval = value
                        .parse::<f64>()
                        .ok()
                        .and_then(|s| Duration::try_from_secs_f64(s).ok())
                        .filter(|d| !d.is_zero())
                        .ok_or(bad("interval is a positive number of seconds"))?;
                }
                "multicast" => {
                    c.multicast = Some(value.parse().map_err(|_| bad("multicast is no IP"))?);
                }
                "ipv6" => c.ipv6 = flag()?,
                "beacons" => c.beacons = flag()?,
                "known" => c.known.push(value.to_owned()),
                _ => return Err(bad("unknown zre:// option")),
            }
        }
        Ok(Some(c))
    }

    /// The ZRE node's options (the UUID is the Dafka node id).
    fn options(&self, id: NodeId) -> Result<Options, Error> {
        let mut o = match &self.interface {
            Some(i) => Options::interface(i, self.port, self.ipv6),
            None => Options::default_interface(self.port),
        }?
        .with_uuid(*id.as_bytes())
        .with_interval(self.interval);
        if let Some(g) = self.multicast {
            o = o.with_multicast(g)?;
        }
        if !self.beacons {
            o = o.without_beacons();
        }
        for k in &self.known {
            o = o.with_known_endpoint(k.clone());
        }
        Ok(o)
    }

    /// The address the publisher binds to: the ZRE interface's.
    pub(crate) fn host(&self, id: NodeId) -> Result<String, Error> {
        Ok(self.options(id)?.ip.to_string())
    }
}

/// A peer's publisher appeared or went away.
#[derive(Debug)]
pub(crate) enum Change {
    Up(NodeId, String),
    Down(NodeId),
}

/// A running ZRE node for one Dafka node.
pub(crate) struct ZreDiscovery {
    node: ZreNode,
    table: Table,
}

/// Which ZRE peers are Dafka nodes of the cluster: ZRE events in, publisher changes out.
struct Table {
    cluster: String,
    /// Peers that said HELLO with a publisher header, and whether they are in the cluster.
    announced: HashMap<NodeId, (String, bool)>,
}

impl ZreDiscovery {
    /// Starts beaconing `publisher` (`tcp://ip:port`) to `cluster`, in ZRE's CURVE mode with
    /// `keys`.
    pub(crate) async fn start(
        cluster: &ZreCluster,
        id: NodeId,
        publisher: &str,
        keys: Option<&ClusterKeys>,
    ) -> Result<Self, Error> {
        let mut options = cluster
            .options(id)?
            .with_header(PUBLISHER_HEADER, publisher);
        if let Some(keys) = keys {
            options = options
                .with_curve(keys.member.clone())
                .with_curve_authenticator(keys.authenticator.clone());
        }
        let node = ZreNode::start(options).await?;
        node.join(&cluster.cluster).await?;
        Ok(ZreDiscovery {
            node,
            table: Table::new(&cluster.cluster),
        })
    }

    /// The next change of the cluster's publishers; `None` once the ZRE node has stopped.
    /// Cancel-safe.
    pub(crate) async fn next(&mut self) -> Option<Change> {
        loop {
            let event = self.node.recv().await?;
            if let Some(change) = self.table.on_event(event) {
                return Some(change);
            }
        }
    }

    /// Leaves politely (a port-0 beacon).
    pub(crate) async fn close(mut self) {
        self.node.stop().await;
    }
}

impl Table {
    fn new(cluster: &str) -> Self {
        Table {
            cluster: cluster.to_owned(),
            announced: HashMap::new(),
        }
    }

    fn on_event(&mut self, event: Event) -> Option<Change> {
        let id = |peer: dafka_zre::PeerId| NodeId::from_bytes(*peer.as_bytes());
        match event {
            Event::Enter { peer, headers, .. } => {
                let publisher = headers
                    .into_iter()
                    .find(|(k, _)| k == PUBLISHER_HEADER)
                    .map(|(_, v)| v)?;
                self.announced.insert(id(peer), (publisher, false));
                None
            }
            Event::Join { peer, group, .. } if group == self.cluster => {
                let (publisher, member) = self.announced.get_mut(&id(peer))?;
                *member = true;
                Some(Change::Up(id(peer), publisher.clone()))
            }
            Event::Leave { peer, group, .. } if group == self.cluster => {
                let (_, member) = self.announced.get_mut(&id(peer))?;
                std::mem::replace(member, false).then(|| Change::Down(id(peer)))
            }
            Event::Exit { peer, .. } => {
                let (_, member) = self.announced.remove(&id(peer))?;
                member.then(|| Change::Down(id(peer)))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_forms() {
        assert_eq!(ZreCluster::parse("tcp://127.0.0.1:5556").unwrap(), None);
        let c = ZreCluster::parse("zre://prod").unwrap().unwrap();
        assert_eq!(
            (c.cluster.as_str(), c.interface, c.port, c.interval),
            ("prod", None, 5670, Duration::from_secs(1))
        );
        let c = ZreCluster::parse(
            "zre://c?interface=eth0&port=6000&interval=0.25&multicast=225.25.25.25&ipv6=0\
             &beacons=no&known=tcp://10.0.0.5:41000&known=tcp://10.0.0.6:41000",
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.interface.as_deref(), Some("eth0"));
        assert_eq!((c.port, c.interval), (6000, Duration::from_millis(250)));
        assert_eq!(c.multicast, Some("225.25.25.25".parse().unwrap()));
        assert!(!c.ipv6 && !c.beacons);
        assert_eq!(c.known.len(), 2);
        for bad in [
            "zre://",
            "zre://c?port=70000",
            "zre://c?interval=0",
            "zre://c?ipv6=maybe",
            "zre://c?what=1",
            "zre://c?port",
        ] {
            assert!(ZreCluster::parse(bad).is_err(), "{bad}");
        }
    }

    fn enter(peer: [u8; 16], publisher: Option<&str>) -> Event {
        let headers = publisher
            .map(|p| vec![(PUBLISHER_HEADER.to_owned(), p.to_owned())])
            .unwrap_or_default();
        Event::Enter {
            peer: dafka_zre::PeerId::from_bytes(peer),
            name: "n".into(),
            headers,
            address: "tcp://127.0.0.1:1".into(),
        }
    }

    fn group(peer: [u8; 16], group: &str, join: bool) -> Event {
        let peer = dafka_zre::PeerId::from_bytes(peer);
        let (name, group) = ("n".to_owned(), group.to_owned());
        if join {
            Event::Join { peer, name, group }
        } else {
            Event::Leave { peer, name, group }
        }
    }

    #[test]
    fn peers_count_once_they_announce_a_publisher_and_join_the_cluster() {
        let mut table = Table::new("c");
        let (a, b) = ([1u8; 16], [2u8; 16]);
        let id = NodeId::from_bytes(a);
        assert!(table.on_event(enter(a, Some("tcp://10.0.0.1:9"))).is_none());
        assert!(table.on_event(enter(b, None)).is_none());
        // Another group, or a peer without the header: nothing.
        assert!(table.on_event(group(a, "other", true)).is_none());
        assert!(table.on_event(group(b, "c", true)).is_none());
        assert!(matches!(
            table.on_event(group(a, "c", true)),
            Some(Change::Up(n, e)) if n == id && e == "tcp://10.0.0.1:9"
        ));
        assert!(matches!(table.on_event(group(a, "c", false)), Some(Change::Down(n)) if n == id));
        assert!(table.on_event(group(a, "c", false)).is_none());
        assert!(table.on_event(group(a, "c", true)).is_some());
        let exit = Event::Exit {
            peer: dafka_zre::PeerId::from_bytes(a),
            name: "n".into(),
        };
        assert!(matches!(table.on_event(exit.clone()), Some(Change::Down(n)) if n == id));
        assert!(table.on_event(exit).is_none());
    }
}
