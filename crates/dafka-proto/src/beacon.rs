//! Discovery through towers: node beacons, tower beacons and the tower's welcome.
//!
//! A node's beacon PUB connects to each tower's XSUB (default port 5556) and its beacon SUB
//! (subscribed to `"B"` and `"W"`) to each tower's XPUB (5557). Every frame is text:
//!
//! | message | sent by | frames |
//! |---|---|---|
//! | node beacon | node beacon PUB -> tower XSUB | `"B"` (`0x42`), UUID (32 upper-case hex), host, port (decimal) |
//! | tower beacon | tower XPUB -> node beacon SUBs | `"B"`, UUID, `"tcp://host:port"` |
//! | welcome | tower XPUB -> each new subscriber | `"W"` (`0x57`), one frame |
//!
//! The tower turns each node beacon into a tower beacon. The reference substitutes the
//! connection's address when the host is empty and its own first interface for `127.0.0.1`, so
//! nodes always send their host explicitly.

use bytes::Bytes;

use crate::error::{DecodeError, LimitError, MalformedError};
use crate::id::NodeId;
use crate::message::Limits;

/// First frame of every beacon, and the beacon SUB's subscription.
pub const BEACON_TOPIC: &[u8] = b"B";

/// The tower's welcome (a single frame), and the beacon SUB's other subscription.
pub const WELCOME_TOPIC: &[u8] = b"W";

/// What a node announces to the towers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeBeacon {
    /// The node.
    pub node: NodeId,
    /// The host other nodes reach its publisher at (always sent: see the module docs).
    pub host: String,
    /// The publisher's port.
    pub port: u16,
}

/// What a tower forwards to every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TowerBeacon {
    /// The node.
    pub node: NodeId,
    /// Its publisher's endpoint, `tcp://host:port`.
    pub endpoint: String,
}

impl TowerBeacon {
    /// The tower beacon for a node beacon: endpoint `tcp://host:port`, with an IPv6 host in
    /// brackets.
    pub fn from_node(beacon: &NodeBeacon) -> Self {
        let endpoint = if beacon.host.contains(':') {
            format!("tcp://[{}]:{}", beacon.host, beacon.port)
        } else {
            format!("tcp://{}:{}", beacon.host, beacon.port)
        };
        TowerBeacon {
            node: beacon.node,
            endpoint,
        }
    }
}

/// Any message on the beacon sockets.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BeaconMessage {
    /// A node beacon (4 frames), as the tower's XSUB receives it.
    Node(NodeBeacon),
    /// A tower beacon (3 frames), as a node's beacon SUB receives it.
    Tower(TowerBeacon),
    /// The tower's welcome: the node's beacon SUB is connected.
    Welcome,
}

impl BeaconMessage {
    /// The frames of the ZeroMQ multipart message.
    pub fn to_frames(&self) -> Vec<Bytes> {
        let topic = Bytes::from_static(BEACON_TOPIC);
        match self {
            BeaconMessage::Node(b) => vec![
                topic,
                Bytes::copy_from_slice(&b.node.to_hex()),
                Bytes::copy_from_slice(b.host.as_bytes()),
                Bytes::from(b.port.to_string()),
            ],
            BeaconMessage::Tower(b) => vec![
                topic,
                Bytes::copy_from_slice(&b.node.to_hex()),
                Bytes::copy_from_slice(b.endpoint.as_bytes()),
            ],
            BeaconMessage::Welcome => vec![Bytes::from_static(WELCOME_TOPIC)],
        }
    }

    /// Decodes one message received on a beacon socket.
    pub fn decode(frames: &[Bytes], limits: &Limits) -> Result<Self, DecodeError> {
        let Some(first) = frames.first() else {
            return Err(MalformedError::NoFrames.into());
        };
        if first.as_ref() == WELCOME_TOPIC {
            return match frames.len() {
                1 => Ok(BeaconMessage::Welcome),
                got => Err(frame_count("welcome", 1, got)),
            };
        }
        if first.as_ref() != BEACON_TOPIC {
            return Err(MalformedError::UnknownBeacon { len: first.len() }.into());
        }
        match frames {
            [_, node, host, port] => Ok(BeaconMessage::Node(NodeBeacon {
                node: NodeId::decode(node, "beacon UUID")?,
                host: text(host, "host", limits)?,
                port: decimal_port(port)?,
            })),
            [_, node, endpoint] => Ok(BeaconMessage::Tower(TowerBeacon {
                node: NodeId::decode(node, "beacon UUID")?,
                endpoint: text(endpoint, "endpoint", limits)?,
            })),
            _ => Err(frame_count("beacon", 4, frames.len())),
        }
    }
}

fn frame_count(kind: &'static str, expected: usize, got: usize) -> DecodeError {
    MalformedError::FrameCount {
        kind,
        expected,
        got,
    }
    .into()
}

fn text(frame: &Bytes, what: &'static str, limits: &Limits) -> Result<String, DecodeError> {
    if frame.len() > limits.max_endpoint {
        return Err(LimitError::BeaconFieldTooLong {
            what,
            len: frame.len(),
            max: limits.max_endpoint,
        }
        .into());
    }
    match std::str::from_utf8(frame) {
        Ok(s) => Ok(s.to_owned()),
        Err(_) => Err(MalformedError::NotUtf8 { what }.into()),
    }
}

/// The port as the reference prints it (`%d`): 1 to 5 digits, no sign, no leading zero.
fn decimal_port(frame: &[u8]) -> Result<u16, DecodeError> {
    let bad = || {
        DecodeError::from(MalformedError::Port {
            text: String::from_utf8_lossy(&frame[..frame.len().min(16)]).into_owned(),
        })
    };
    let digits_only = !frame.is_empty() && frame.len() <= 5 && frame.iter().all(u8::is_ascii_digit);
    if !digits_only || (frame.len() > 1 && frame[0] == b'0') {
        return Err(bad());
    }
    let value = frame.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
    u16::try_from(value).map_err(|_| bad())
}
