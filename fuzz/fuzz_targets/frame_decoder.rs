//! Frame decoding from arbitrary bytes, split into arbitrary chunks, with arbitrary small limits.
//!
//! Input: byte 0 sets `max_frame_size` (x8), byte 1 `max_message_size` (x64), byte 2 the chunk
//! size; the rest is the stream. Invariants: no panic; every frame and every message stays
//! within the limits; decoding never grows the buffer (no memory is reserved from an announced
//! length); what stays undecoded is less than one frame within the limits; the decoded frames
//! re-encode to a stream that decodes to the same frames.
#![no_main]

use bytes::BytesMut;
use dafka_zmtp_proto::{FRAME_OVERHEAD, Frame, FrameDecoder, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [a, b, c, stream @ ..] = data else {
        return;
    };
    let limits = Limits::new(u64::from(*a) * 8, u64::from(*b) * 64);
    let chunk = usize::from(*c) + 1;
    let mut dec = FrameDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    let mut cost = 0u64;
    'feed: for piece in stream.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            let capacity = buf.capacity();
            let decoded = dec.decode(&mut buf);
            assert!(buf.capacity() <= capacity, "decode grew the buffer");
            match decoded {
                Ok(Some(frame)) => {
                    match &frame {
                        Frame::Message { more, body } => {
                            assert!(body.len() as u64 <= limits.max_frame_size);
                            cost += body.len() as u64 + FRAME_OVERHEAD;
                            assert!(cost <= limits.max_message_size);
                            if !more {
                                cost = 0;
                            }
                        }
                        Frame::Command(body) => {
                            assert!(body.len() as u64 <= limits.max_command_size());
                        }
                    }
                    frames.push(frame);
                }
                Ok(None) => {
                    // At most a long header and one body within the limits are waiting.
                    let largest = limits.max_frame_size.max(limits.max_command_size());
                    assert!(buf.len() as u64 <= 9 + largest);
                    break;
                }
                Err(_) => break 'feed,
            }
        }
    }
    let mut wire = BytesMut::new();
    for f in &frames {
        f.encode(&mut wire);
    }
    let mut again = FrameDecoder::new(limits);
    for f in &frames {
        assert_eq!(again.decode(&mut wire).as_ref(), Ok(&Some(f.clone())));
    }
    assert!(wire.is_empty());
});
