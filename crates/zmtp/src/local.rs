//! Sockets of this process reachable without TCP: a TCP endpoint, as announced to peers, ->
//! the `inproc://` name the same socket is also bound to.
//!
//! A node that announces `tcp://127.0.0.1:5000` (a ZRE mailbox, a Dafka publisher) also binds
//! an inproc name and registers it here with [`LocalAlias::bind`]; a socket of the same process
//! about to connect to `tcp://127.0.0.1:5000` asks [`alias_of`] and connects to the inproc name
//! instead. Messages then pass between the two sockets' pipes as they are: no TCP connection,
//! no descriptor, no system call, no framing or copy. Peers in other processes still connect
//! over TCP. ZRE nodes use it always (outside CURVE mode); Dafka nodes only with
//! `NodeConfig::local_inproc`, which is off by default (a race it shows is not found yet).
//!
//! An inproc pipe has no handshake, so no security mechanism: only sockets without one
//! (NULL) may register or use an alias, which the callers check.
//!
//! The map remembers its process: a forked child starts with an empty one (the parent's
//! sockets do not run there). An alias is removed when its [`LocalAlias`] is dropped, so a
//! TCP port reused later by another process is not mistaken for a socket of this one.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::{Error, Socket};

type Map = (u32, BTreeMap<String, String>);

fn map() -> MutexGuard<'static, Map> {
    static LOCAL: Mutex<Map> = Mutex::new((0, BTreeMap::new()));
    let mut local = LOCAL.lock().unwrap_or_else(PoisonError::into_inner);
    let pid = std::process::id();
    if local.0 != pid {
        *local = (pid, BTreeMap::new());
    }
    local
}

/// The inproc name a socket of this process announced as `endpoint` is also bound to.
pub fn alias_of(endpoint: &str) -> Option<String> {
    map().1.get(endpoint).cloned()
}

/// `socket`'s inproc alias for the TCP endpoint it announces; removed from the map when
/// dropped (the socket itself stays bound until it closes).
#[derive(Debug)]
pub struct LocalAlias {
    endpoint: String,
    name: String,
}

impl LocalAlias {
    /// Binds `socket` to `inproc://{name}` as well and registers it for `endpoint`. `name`
    /// must be unique in the process (a node id in it does that).
    pub async fn bind(socket: &Socket, endpoint: &str, name: &str) -> Result<LocalAlias, Error> {
        let name = format!("inproc://{name}");
        socket.bind(&name).await?;
        map().1.insert(endpoint.to_owned(), name.clone());
        Ok(LocalAlias {
            endpoint: endpoint.to_owned(),
            name,
        })
    }

    /// The inproc name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for LocalAlias {
    fn drop(&mut self) {
        let mut local = map();
        // Only ours: a later alias for the same endpoint (the port reused) stays.
        if local.1.get(&self.endpoint) == Some(&self.name) {
            local.1.remove(&self.endpoint);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Options, SocketType};

    #[tokio::test]
    async fn an_alias_maps_the_endpoint_until_it_is_dropped() {
        let pull = Socket::new(SocketType::Pull, Options::default()).unwrap();
        let endpoint = "tcp://127.0.0.1:1";
        assert_eq!(alias_of(endpoint), None);
        let alias = LocalAlias::bind(&pull, endpoint, "local-test-a")
            .await
            .unwrap();
        assert_eq!(alias.name(), "inproc://local-test-a");
        assert_eq!(alias_of(endpoint).as_deref(), Some("inproc://local-test-a"));
        // Reached through the alias.
        let push = Socket::new(SocketType::Push, Options::default()).unwrap();
        push.connect(alias.name()).await.unwrap();
        push.send(vec![bytes::Bytes::from_static(b"hi")].into())
            .await
            .unwrap();
        let got = pull.recv().await.unwrap();
        assert_eq!(got.frames()[0], bytes::Bytes::from_static(b"hi"));
        // A newer alias for the same endpoint survives the older one's drop.
        let other = Socket::new(SocketType::Pull, Options::default()).unwrap();
        let newer = LocalAlias::bind(&other, endpoint, "local-test-b")
            .await
            .unwrap();
        drop(alias);
        assert_eq!(alias_of(endpoint).as_deref(), Some("inproc://local-test-b"));
        drop(newer);
        assert_eq!(alias_of(endpoint), None);
    }
}
