//! The record metadata of META-RECORD and DIRECT-META-RECORDS (timestamps, then extras: key,
//! headers, flags), decoded from arbitrary bytes behind a valid header, with small limits.
//!
//! Input: byte 0 picks the kind (even: META-RECORD, one record; odd: DIRECT-META-RECORDS of
//! 1 + byte 0 / 2 % 8 records), byte 1 sets `max_headers`; the rest follows the header's
//! sequence field as the metadata. Invariants: no panic; what decodes re-encodes to exactly
//! the input frames and decodes equal again; one metadata per record; header lists (their
//! allocated capacity included) within `max_headers`; header names UTF-8.
#![no_main]

use bytes::{BufMut, Bytes, BytesMut};
use dafka_proto::{Limits, Message};
use libfuzzer_sys::fuzz_target;

/// The producer id (32 upper-case hex) the headers carry.
const PRODUCER: &[u8; 32] = b"986108951EB145A1BFBDC5601975F614";

fuzz_target!(|data: &[u8]| {
    let [kind, max_headers, rest @ ..] = data else {
        return;
    };
    let limits = Limits::DEFAULT.with_max_headers(usize::from(*max_headers));
    let (records, mut header) = if kind % 2 == 0 {
        let mut h = BytesMut::from(&b"Tt\x00\x01"[..]);
        h.put_u8(0x20);
        h.put_slice(PRODUCER);
        (1, h)
    } else {
        let mut h = BytesMut::from(&b"V"[..]);
        h.put_slice(PRODUCER);
        h.put_slice(b"\x00\x01\x20");
        h.put_slice(PRODUCER);
        (1 + usize::from(kind / 2 % 8), h)
    };
    header.put_slice(b"\x01t");
    header.put_u64(7);
    header.put_slice(rest);
    let mut frames = vec![header.freeze()];
    frames.extend((0..records).map(|i| Bytes::from(vec![b'v'; i])));
    let Ok(m) = Message::decode(&frames, &limits) else {
        return;
    };
    assert_eq!(m.to_frames(), frames, "re-encoding changed the bytes");
    assert_eq!(m.header_len(), frames[0].len());
    assert_eq!(Message::decode(&m.to_frames(), &limits).as_ref(), Ok(&m));
    let metas = match &m {
        Message::MetaRecord(r) => vec![r.meta.clone()],
        Message::DirectMetaRecords(r) => {
            assert_eq!(r.metas.len(), r.run.contents.len());
            r.metas.clone()
        }
        other => panic!("decoded as {:?}", other.kind()),
    };
    for meta in metas {
        if let Some(headers) = meta.headers() {
            assert!(headers.len() <= limits.max_headers);
            let names_ok = headers.clone().all(|h| std::str::from_utf8(h.name).is_ok());
            assert!(names_ok);
        }
        // Taken apart and built again, the metadata is the same bytes (a canonical encoding),
        // and its size is what its parts say.
        let parts = meta.parts();
        let size = dafka_proto::record::payload_len(parts.key.as_deref(), parts.headers.as_deref());
        assert_eq!(meta.payload_len(), size);
        assert_eq!(dafka_proto::RecordMeta::from(parts), meta);
    }
});
