//! Server-side authentication: the decision ZAP (27/ZAP) takes in libzmq, as a hook called
//! once per connection with the client's credentials and address.
//!
//! libzmq asks a ZAP handler over an inproc socket; here the server mechanism calls an
//! [`Authenticator`] directly when the client's credentials are known (PLAIN: on HELLO; CURVE:
//! on INITIATE, after the vouch proved the client holds the secret key of the public key it
//! presents). A refusal sends `ERROR` with the ZAP status code `400` as reason, as libzmq does,
//! and fails the connection with [`PeerError::AuthenticationRefused`](crate::PeerError); the
//! decision and its reason are logged either way.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

/// What the client presented, per mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Credentials<'a> {
    /// PLAIN: the username and password from the client's HELLO.
    Plain {
        /// The username (0-255 bytes).
        username: &'a [u8],
        /// The password (0-255 bytes).
        password: &'a [u8],
    },
    /// CURVE: the client's long-term public key, proven by the vouch.
    Curve {
        /// The 32-byte public key (Z85: [`crate::z85_encode`]).
        public_key: &'a [u8; 32],
    },
}

/// One authentication request: who connects, from where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthRequest<'a> {
    /// The peer's address as the driver reported it ([`Config::peer_address`](crate::Config)),
    /// e.g. `127.0.0.1:40000`; empty when unknown.
    pub address: &'a str,
    /// The client's credentials.
    pub credentials: Credentials<'a>,
}

/// The authenticator's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthDecision {
    /// Let the client in.
    Allow,
    /// Refuse it; the reason is logged (it is not sent: the client gets ZAP status `400`).
    Deny(String),
}

type AuthFn = dyn Fn(&AuthRequest<'_>) -> AuthDecision + Send + Sync;

/// Decides per connection whether a client may complete the handshake.
///
/// Cheap to clone (shared). Two authenticators compare equal only when they are clones of one.
#[derive(Clone)]
pub struct Authenticator(Arc<AuthFn>);

impl Authenticator {
    /// An authenticator calling `f` for every client.
    pub fn from_fn(f: impl Fn(&AuthRequest<'_>) -> AuthDecision + Send + Sync + 'static) -> Self {
        Authenticator(Arc::new(f))
    }

    /// Lets every client in (libzmq's behaviour when no ZAP handler is installed: for CURVE
    /// this still requires the client to know the server's public key).
    pub fn allow_all() -> Self {
        Authenticator::from_fn(|_| AuthDecision::Allow)
    }

    /// CURVE: lets in the clients whose public key is in `keys`; refuses PLAIN.
    pub fn curve_keys(keys: impl IntoIterator<Item = [u8; 32]>) -> Self {
        let keys: HashSet<[u8; 32]> = keys.into_iter().collect();
        Authenticator::from_fn(move |req| match req.credentials {
            Credentials::Curve { public_key } if keys.contains(public_key) => AuthDecision::Allow,
            Credentials::Curve { .. } => AuthDecision::Deny("public key not allowed".to_owned()),
            _ => AuthDecision::Deny("not a CURVE client".to_owned()),
        })
    }

    /// PLAIN: lets in the clients whose username and password match one of `credentials`;
    /// refuses CURVE.
    pub fn plain_credentials(credentials: impl IntoIterator<Item = (Bytes, Bytes)>) -> Self {
        let creds: Vec<(Bytes, Bytes)> = credentials.into_iter().collect();
        Authenticator::from_fn(move |req| match req.credentials {
            Credentials::Plain { username, password } => {
                match creds.iter().find(|(u, _)| u == username) {
                    Some((_, p)) if constant_time_eq(p, password) => AuthDecision::Allow,
                    Some(_) => AuthDecision::Deny("wrong password".to_owned()),
                    None => AuthDecision::Deny("unknown username".to_owned()),
                }
            }
            _ => AuthDecision::Deny("not a PLAIN client".to_owned()),
        })
    }

    /// Asks for a decision.
    pub fn decide(&self, req: &AuthRequest<'_>) -> AuthDecision {
        (self.0)(req)
    }
}

/// Compares without an early exit on the first differing byte (the length still shows).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Authenticator(..)")
    }
}

impl PartialEq for Authenticator {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Authenticator {}

impl std::hash::Hash for Authenticator {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.0) as *const () as usize).hash(state);
    }
}

/// Runs the authenticator and logs the decision when it allows (`info`). A refusal is not
/// logged here: it returns the client (Z85 public key or PLAIN username) and the reason, the
/// handshake fails with [`PeerError::AuthenticationRefused`](crate::PeerError), and the
/// driver logs that once (`warn`, rate-limited per listener, else `debug`).
pub(crate) fn authenticate(
    auth: &Authenticator,
    mechanism: &'static str,
    req: &AuthRequest<'_>,
) -> Result<(), (String, String)> {
    let who = match req.credentials {
        Credentials::Plain { username, .. } => String::from_utf8_lossy(username).into_owned(),
        Credentials::Curve { public_key } => crate::z85::encode(public_key),
    };
    match auth.decide(req) {
        AuthDecision::Allow => {
            tracing::info!(mechanism, peer = req.address, client = ?who, "authentication allowed");
            Ok(())
        }
        AuthDecision::Deny(reason) => Err((who, reason)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_decide_on_their_own_kind_only() {
        let key = [7u8; 32];
        let keys = Authenticator::curve_keys([key]);
        let req = |credentials| AuthRequest {
            address: "127.0.0.1:1",
            credentials,
        };
        assert_eq!(
            keys.decide(&req(Credentials::Curve { public_key: &key })),
            AuthDecision::Allow
        );
        assert!(matches!(
            keys.decide(&req(Credentials::Curve {
                public_key: &[8u8; 32]
            })),
            AuthDecision::Deny(_)
        ));
        let plain = Authenticator::plain_credentials([(
            Bytes::from_static(b"admin"),
            Bytes::from_static(b"secret"),
        )]);
        let creds = |u: &'static [u8], p: &'static [u8]| {
            req(Credentials::Plain {
                username: u,
                password: p,
            })
        };
        assert_eq!(
            plain.decide(&creds(b"admin", b"secret")),
            AuthDecision::Allow
        );
        assert!(matches!(
            plain.decide(&creds(b"admin", b"secreT")),
            AuthDecision::Deny(_)
        ));
        assert!(matches!(
            plain.decide(&creds(b"admin", b"secret!")),
            AuthDecision::Deny(_)
        ));
        assert!(matches!(
            plain.decide(&creds(b"root", b"secret")),
            AuthDecision::Deny(_)
        ));
        assert!(matches!(
            plain.decide(&req(Credentials::Curve { public_key: &key })),
            AuthDecision::Deny(_)
        ));
    }
}
