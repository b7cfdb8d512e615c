//! ZeroMQ socket types and the ZMTP 3.1 compatibility matrix.

use std::fmt;
use std::str::FromStr;

/// A ZeroMQ socket type, as announced in the READY command's `Socket-Type` property.
///
/// The draft socket types of the RFC (CLIENT, SERVER, RADIO, DISH, SCATTER, GATHER, PEER, CHANNEL)
/// are not implemented; a peer announcing one is refused as an unknown type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SocketType {
    /// REQ: strict request/reply client.
    Req,
    /// REP: strict request/reply server.
    Rep,
    /// DEALER: asynchronous request/reply, round-robin.
    Dealer,
    /// ROUTER: asynchronous request/reply, addressed by identity.
    Router,
    /// PUB: publisher.
    Pub,
    /// SUB: subscriber.
    Sub,
    /// XPUB: publisher that sees subscriptions.
    Xpub,
    /// XSUB: subscriber that sends subscriptions as messages.
    Xsub,
    /// PUSH: pipeline sender.
    Push,
    /// PULL: pipeline receiver.
    Pull,
    /// PAIR: exclusive pair.
    Pair,
}

impl SocketType {
    /// Every socket type, in declaration order.
    pub const ALL: [SocketType; 11] = [
        SocketType::Req,
        SocketType::Rep,
        SocketType::Dealer,
        SocketType::Router,
        SocketType::Pub,
        SocketType::Sub,
        SocketType::Xpub,
        SocketType::Xsub,
        SocketType::Push,
        SocketType::Pull,
        SocketType::Pair,
    ];

    /// The canonical upper-case name sent in `Socket-Type` (`"REQ"`, `"DEALER"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            SocketType::Req => "REQ",
            SocketType::Rep => "REP",
            SocketType::Dealer => "DEALER",
            SocketType::Router => "ROUTER",
            SocketType::Pub => "PUB",
            SocketType::Sub => "SUB",
            SocketType::Xpub => "XPUB",
            SocketType::Xsub => "XSUB",
            SocketType::Push => "PUSH",
            SocketType::Pull => "PULL",
            SocketType::Pair => "PAIR",
        }
    }

    /// Whether a socket of type `self` may talk to a peer of type `peer` (the ZMTP 3.1 matrix).
    ///
    /// | Socket | Valid peers          |
    /// |--------|----------------------|
    /// | REQ    | REP, ROUTER          |
    /// | REP    | REQ, DEALER          |
    /// | DEALER | REP, DEALER, ROUTER  |
    /// | ROUTER | REQ, DEALER, ROUTER  |
    /// | PUB    | SUB, XSUB            |
    /// | SUB    | PUB, XPUB            |
    /// | XPUB   | SUB, XSUB            |
    /// | XSUB   | PUB, XPUB            |
    /// | PUSH   | PULL                 |
    /// | PULL   | PUSH                 |
    /// | PAIR   | PAIR                 |
    ///
    /// The relation is symmetric.
    pub fn is_compatible(self, peer: SocketType) -> bool {
        use SocketType::*;
        matches!(
            (self, peer),
            (Req, Rep | Router)
                | (Rep, Req | Dealer)
                | (Dealer, Rep | Dealer | Router)
                | (Router, Req | Dealer | Router)
                | (Pub | Xpub, Sub | Xsub)
                | (Sub | Xsub, Pub | Xpub)
                | (Push, Pull)
                | (Pull, Push)
                | (Pair, Pair)
        )
    }
}

impl fmt::Display for SocketType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The string is not one of the eleven socket type names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown socket type {0:?}")]
pub struct UnknownSocketType(pub String);

impl FromStr for SocketType {
    type Err = UnknownSocketType;

    /// Parses a socket type name in any letter case (`"dealer"`, `"Dealer"`, `"DEALER"`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SocketType::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownSocketType(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_in_any_case() {
        for t in SocketType::ALL {
            assert_eq!(t.as_str().parse::<SocketType>(), Ok(t));
            assert_eq!(t.as_str().to_lowercase().parse::<SocketType>(), Ok(t));
            assert_eq!(t.to_string(), t.as_str());
        }
        assert!("CLIENT".parse::<SocketType>().is_err());
        assert!("".parse::<SocketType>().is_err());
    }

    #[test]
    fn matrix_is_symmetric_and_matches_the_rfc() {
        use SocketType::*;
        let valid: &[(SocketType, &[SocketType])] = &[
            (Req, &[Rep, Router]),
            (Rep, &[Req, Dealer]),
            (Dealer, &[Rep, Dealer, Router]),
            (Router, &[Req, Dealer, Router]),
            (Pub, &[Sub, Xsub]),
            (Sub, &[Pub, Xpub]),
            (Xpub, &[Sub, Xsub]),
            (Xsub, &[Pub, Xpub]),
            (Push, &[Pull]),
            (Pull, &[Push]),
            (Pair, &[Pair]),
        ];
        for &(ours, peers) in valid {
            for theirs in SocketType::ALL {
                assert_eq!(
                    ours.is_compatible(theirs),
                    peers.contains(&theirs),
                    "{ours} vs {theirs}"
                );
                assert_eq!(ours.is_compatible(theirs), theirs.is_compatible(ours));
            }
        }
    }
}
