//! Shared by the loopback tests: a beacon port per test and loopback options.

use std::net::UdpSocket;
use std::time::Duration;

use dafka_zre::Options;

/// A UDP port free right now on loopback; the nodes bind it with SO_REUSEADDR/SO_REUSEPORT.
/// One per test, so tests running at once do not see each other's nodes.
pub(crate) fn port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
}

/// Loopback options with this name, beaconing every 100 ms on `port`.
pub(crate) fn opts(port: u16, name: &str) -> Options {
    Options::loopback(port)
        .with_name(name)
        .with_interval(Duration::from_millis(100))
}
