//! A PLAIN server against arbitrary client bytes, with an authenticator that refuses every
//! client: nothing may reach the application. See `handshake/mod.rs` for the input and the
//! invariants.
#![no_main]

use dafka_zmtp_proto::{AuthDecision, Authenticator, MechanismConfig};
use libfuzzer_sys::fuzz_target;

mod handshake;

fuzz_target!(|data: &[u8]| {
    let authenticator = Authenticator::from_fn(|_| AuthDecision::Deny("fuzz".to_owned()));
    handshake::run(
        data,
        MechanismConfig::PlainServer { authenticator },
        "PLAIN",
        false,
        false,
    );
});
