//! ZRE UDP beacon decoding from arbitrary input (a whole datagram).
//!
//! Invariants: no panic; a datagram decodes only when it is 22 bytes (`ZRE 0x01`) or 54
//! bytes (`ZRE 0x03`, 43/ZRE CURVE beacons), and a decoded beacon re-encodes to exactly the
//! datagram.
#![no_main]

use dafka_zre_proto::Beacon;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(b) = Beacon::decode(data) {
        assert!(data.len() == 22 || data.len() == 54);
        assert_eq!(b.encode(), data, "beacon re-encoding changed the bytes");
    }
});
