//! ZRE UDP beacon decoding from arbitrary input (a whole datagram), then the beacon handed to
//! a CURVE-mode node (43/ZRE version 3).
//!
//! Invariants: no panic; a datagram decodes only when it is 22 bytes (`ZRE 0x01`) or 54
//! bytes (`ZRE 0x03`, 43/ZRE CURVE beacons), and a decoded beacon re-encodes to exactly the
//! datagram. A CURVE node with an allow-list acts (connects to a new peer) only on a
//! version-3 beacon whose key is on the list: never on a 22-byte one (no downgrade).
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use dafka_zre_proto::{Beacon, Config, Curve, Node, Output, ShortStr, Uuid};
use libfuzzer_sys::fuzz_target;

/// The one key the node allows.
const ALLOWED: [u8; 32] = [0x33; 32];

fuzz_target!(|data: &[u8]| {
    let Ok(b) = Beacon::decode(data) else {
        return;
    };
    assert!(data.len() == 22 || data.len() == 54);
    assert_eq!(b.encode(), data, "beacon re-encoding changed the bytes");

    let now = Instant::now();
    let cfg = Config::new(Uuid::from_bytes([0xEE; 16]))
        .with_curve(Some(Curve::new([0x11; 32]).with_allowed([ALLOWED])));
    let Ok(mut node) = Node::new(cfg) else {
        return;
    };
    let endpoint = ShortStr::new("tcp://127.0.0.1:5000").unwrap_or_default();
    if node.start(endpoint, 5000, now).is_err() {
        return;
    }
    while node.poll_output().is_some() {}
    let _ = node.handle_beacon(&b, IpAddr::V4(Ipv4Addr::LOCALHOST), now);
    while let Some(out) = node.poll_output() {
        if let Output::Connect { server_key, .. } = out {
            assert_eq!(data.len(), 54, "a CURVE node acted on a 22-byte beacon");
            assert_eq!(
                server_key,
                Some(ALLOWED),
                "connected with a key not allowed"
            );
        }
    }
});
