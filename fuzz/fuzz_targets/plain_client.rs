//! A PLAIN client against arbitrary server bytes. PLAIN does not authenticate the server, so
//! a peer that follows the grammar may complete the handshake: the checks are the grammar,
//! the limits and the order (no message before `Ready`). See `handshake/mod.rs`.
#![no_main]

use bytes::Bytes;
use dafka_zmtp_proto::MechanismConfig;
use libfuzzer_sys::fuzz_target;

mod handshake;

fuzz_target!(|data: &[u8]| {
    let mechanism = MechanismConfig::PlainClient {
        username: Bytes::from_static(b"admin"),
        password: Bytes::from_static(b"secret"),
    };
    handshake::run(data, mechanism, "PLAIN", true, true);
});
