//! CURVE for a Dafka cluster (`docs/security.md`).
//!
//! Every socket a node or tower binds (a node's publisher, the tower's XSUB and XPUB) is a
//! CURVE server with the cluster's key pair; every socket a node connects (its subscriber to
//! other nodes, its beacon sockets to the towers) is a CURVE client with the node's own key
//! pair and the cluster's public key. So a process without the cluster's public key cannot
//! even complete a handshake, and one whose own key is not allowed is refused: it sees no
//! beacon, no record, and can publish nothing. The cluster key pair is shared by the members
//! (all of them are trusted alike); each member's own key says who it is.

use dafka_zmtp::{Authenticator, CurveKeyPair, MechanismConfig};

/// The keys of one cluster member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterKeys {
    /// The cluster's key pair, the same on every member: bound sockets serve with it.
    pub cluster: CurveKeyPair,
    /// This member's own key pair, presented by its connecting sockets.
    pub member: CurveKeyPair,
    /// Decides which members' public keys may connect to this member's bound sockets.
    pub authenticator: Authenticator,
}

impl ClusterKeys {
    /// Keys letting in exactly the members whose public keys are in `allowed`.
    pub fn new(
        cluster: CurveKeyPair,
        member: CurveKeyPair,
        allowed: impl IntoIterator<Item = [u8; 32]>,
    ) -> Self {
        ClusterKeys {
            cluster,
            member,
            authenticator: Authenticator::curve_keys(allowed),
        }
    }

    /// The mechanism of a bound socket.
    pub(crate) fn server(&self) -> MechanismConfig {
        MechanismConfig::CurveServer {
            keypair: self.cluster.clone(),
            authenticator: self.authenticator.clone(),
        }
    }

    /// The mechanism of a connecting socket.
    pub(crate) fn client(&self) -> MechanismConfig {
        MechanismConfig::CurveClient {
            keypair: self.member.clone(),
            server_key: *self.cluster.public(),
        }
    }
}

/// (server, client) mechanisms: CURVE with `keys`, NULL without.
pub(crate) fn mechanisms(keys: Option<&ClusterKeys>) -> (MechanismConfig, MechanismConfig) {
    keys.map_or((MechanismConfig::Null, MechanismConfig::Null), |k| {
        (k.server(), k.client())
    })
}
