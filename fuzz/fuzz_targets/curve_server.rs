//! A CURVE server (which lets in any client key) against arbitrary client bytes: completing
//! the handshake takes boxes made with a short-term key for which the server's cookie was
//! issued, so nothing from the input may reach the application. See `handshake/mod.rs`.
#![no_main]

use dafka_zmtp_proto::{Authenticator, CurveKeyPair, MechanismConfig};
use libfuzzer_sys::fuzz_target;

mod handshake;

fuzz_target!(|data: &[u8]| {
    let mechanism = MechanismConfig::CurveServer {
        keypair: CurveKeyPair::from_secret([0x11; 32]),
        authenticator: Authenticator::allow_all(),
    };
    handshake::run(data, mechanism, "CURVE", false, false);
});
