//! CURVE mode (43/ZRE version 3), as zyre runs it when given a certificate.
//!
//! A node in CURVE mode has one CURVE key pair. It announces the public key in every beacon
//! (the 54-byte version-3 form) and in its HELLO, as the header `X-PUBLICKEY` (the key's 40
//! Z85 characters). Its ROUTER mailbox is a CURVE server with that key pair; each DEALER it
//! opens is a CURVE client with the same pair, the peer's public key as server key.
//!
//! ```text
//! beacon, version 3 (54 bytes):
//! | 'Z' 'R' 'E' (5A 52 45) | 0x03 | UUID (16) | mailbox port (2, big-endian) | public key (32) |
//! HELLO header: "X-PUBLICKEY" = Z85 of the public key (40 characters)
//! ```
//!
//! What the node (this crate's [`crate::Node`]) does in CURVE mode, where plain mode differs:
//!
//! * Beacons without a key (22-byte, version 1) are ignored: no downgrade to plaintext.
//! * A beacon whose key is not on the allow-list (when there is one), or that the
//!   authenticator (when there is one) refuses, is ignored, and so is a
//!   beacon from a known peer carrying another key than the one it was first seen with
//!   (including a port-0 "leaving" beacon).
//! * A beacon with a ready peer's UUID and key (both public) cannot move or remove it: one
//!   naming another endpoint is ignored; one with port 0 makes the node PING the peer, which
//!   is dropped only if nothing comes from it within [`crate::node::LEAVE_CHECK`] (1 s).
//! * One waiting UUID per key: a beacon for an unknown UUID whose key another entry still
//!   waiting for its HELLO has is ignored; a HELLO authenticated with that key drops the
//!   key's waiting entries under other UUIDs. Ready peers may share a key pair.
//! * The mailbox tells the node, with each message, the key its connection authenticated with
//!   ([`crate::Node::handle_authenticated_message`]). A HELLO must carry `X-PUBLICKEY` (valid
//!   Z85 of 32 bytes, on the allow-list if any) equal to that key; the peer is then reached
//!   with it. Any message from a known peer authenticated with another key than the peer's
//!   (a node claiming another's UUID) is ignored, before it can cause a restart or EXIT.
//! * Known endpoints and gossip carry no keys: [`crate::Config`] refuses CURVE without beacons
//!   or as a gossip hub, [`crate::Node::connect_endpoint`] does nothing, and gossip received
//!   from a peer is ignored.
//!
//! The beacon itself is not authenticated (UDP, no signature): anyone on the link can send a
//! version-3 beacon with any key. A forged one only makes this node open a CURVE connection
//! that fails its handshake unless the far end holds the secret key of the announced public
//! key; the mailbox's CURVE server refuses clients that do not know this node's public key
//! (and, with an allow-list, clients whose key is not on it).

use dafka_zmtp_proto::{AuthDecision, AuthRequest, Authenticator, Credentials};

/// The HELLO header carrying the sender's CURVE public key in Z85 (zyre's name).
pub const X_PUBLICKEY: &str = "X-PUBLICKEY";

/// A node's CURVE settings: its public key and the optional authenticator deciding on peer
/// keys (an allow-list is one). The secret key stays with the driver (the state machine never
/// needs it).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Curve {
    /// This node's CURVE public key (announced in beacons and HELLO).
    pub public_key: [u8; 32],
    /// Decides which peer keys are talked to (an allow-list, a Dafka cluster's authenticator);
    /// `None` lets every key in (any node that knows this node's public key, which its beacons
    /// announce, can then connect). The driver makes the same one the mailbox's authenticator,
    /// so beacons and connections (whose keys HELLOs must carry) are judged alike. It is
    /// asked with `Credentials::Curve` and an `ip:port` address (see [`Curve::allows`]).
    pub authenticator: Option<Authenticator>,
}

impl Curve {
    /// CURVE mode with this public key and no allow-list.
    pub fn new(public_key: [u8; 32]) -> Self {
        Curve {
            public_key,
            authenticator: None,
        }
    }

    /// With an authenticator deciding which peer keys are talked to (replacing any earlier one
    /// or allow-list).
    pub fn with_authenticator(mut self, authenticator: Authenticator) -> Self {
        self.authenticator = Some(authenticator);
        self
    }

    /// With an allow-list of peer public keys ([`Authenticator::curve_keys`], replacing any
    /// earlier authenticator): peers with other keys are ignored.
    pub fn with_allowed(self, keys: impl IntoIterator<Item = [u8; 32]>) -> Self {
        self.with_authenticator(Authenticator::curve_keys(keys))
    }

    /// Whether a peer with this key, at `address`, may be talked to. `address` has the form
    /// the mailbox's authenticator sees a client's in (`ip:port`, `[ip6]:port`): for a
    /// beacon, its source address and the mailbox port it announces. A HELLO is not judged
    /// again: its key must be the one the mailbox admitted at the handshake.
    pub fn allows(&self, key: &[u8; 32], address: &str) -> bool {
        self.authenticator.as_ref().is_none_or(|auth| {
            let req = AuthRequest {
                address,
                credentials: Credentials::Curve { public_key: key },
            };
            auth.decide(&req) == AuthDecision::Allow
        })
    }

    /// The `X-PUBLICKEY` header value: the public key in Z85.
    pub fn header_value(&self) -> String {
        dafka_zmtp_proto::z85_encode(&self.public_key)
    }
}

/// The key in an `X-PUBLICKEY` header value, if it is valid Z85 of 32 bytes.
pub fn parse_header(value: &str) -> Option<[u8; 32]> {
    dafka_zmtp_proto::z85_decode_key(value).ok()
}
