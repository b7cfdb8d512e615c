//! Greeting decoding: never panics; a decoded greeting re-encodes to one that decodes the same;
//! every strict prefix of an accepted greeting is "need more", and a refusal is decided by the
//! bytes up to offset 10.
#![no_main]

use bytes::BytesMut;
use dafka_zmtp_proto::{GREETING_LEN, Greeting};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match Greeting::decode(data) {
        Ok(Some(g)) => {
            assert!(data.len() >= GREETING_LEN);
            assert!(g.major >= 3);
            for cut in 0..GREETING_LEN {
                assert_eq!(Greeting::decode(&data[..cut]), Ok(None));
            }
            let mut wire = BytesMut::new();
            g.encode(&mut wire);
            assert_eq!(wire.len(), GREETING_LEN);
            assert_eq!(Greeting::decode(&wire), Ok(Some(g)));
        }
        Ok(None) => assert!(data.len() < GREETING_LEN),
        Err(e) => {
            let decided = data.len().min(11);
            assert_eq!(Greeting::decode(&data[..decided]), Err(e));
        }
    }
});
