//! A CURVE client against arbitrary server bytes: WELCOME and READY must open with the
//! secret key of the server key we expect (and our short-term key, new per connection), so
//! nothing from the input may reach the application. See `handshake/mod.rs`.
#![no_main]

use dafka_zmtp_proto::{CurveKeyPair, MechanismConfig};
use libfuzzer_sys::fuzz_target;

mod handshake;

fuzz_target!(|data: &[u8]| {
    let mechanism = MechanismConfig::CurveClient {
        keypair: CurveKeyPair::from_secret([0x22; 32]),
        server_key: *CurveKeyPair::from_secret([0x11; 32]).public(),
    };
    handshake::run(data, mechanism, "CURVE", true, false);
});
