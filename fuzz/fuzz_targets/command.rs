//! Command and metadata decoding from an arbitrary frame body.
//!
//! Invariants: no panic; anything that decodes is valid to encode, and decode(encode(x)) == x;
//! the same for the body read as READY metadata.
#![no_main]

use bytes::{Bytes, BytesMut};
use dafka_zmtp_proto::{Command, Frame, FrameDecoder, Limits, Metadata};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let body = Bytes::copy_from_slice(data);
    if let Ok(cmd) = Command::decode(body.clone()) {
        let mut wire = BytesMut::new();
        cmd.encode(&mut wire)
            .expect("a decoded command is encodable");
        assert_eq!(
            wire.len(),
            cmd.body_len() + if cmd.body_len() > 255 { 9 } else { 2 }
        );
        let Ok(Some(Frame::Command(again))) =
            FrameDecoder::new(Limits::default()).decode(&mut wire)
        else {
            panic!("encoded command is not one command frame");
        };
        assert!(wire.is_empty());
        assert_eq!(again.len(), cmd.body_len());
        assert_eq!(Command::decode(again), Ok(cmd));
    }
    if let Ok(meta) = Metadata::decode(body) {
        let mut wire = BytesMut::new();
        meta.encode(&mut wire);
        assert_eq!(wire.len(), meta.encoded_len());
        assert_eq!(&wire[..], data, "metadata encoding is canonical");
        let again = Metadata::decode(wire.freeze()).expect("re-encoded metadata decodes");
        assert_eq!(again, meta);
    }
});
