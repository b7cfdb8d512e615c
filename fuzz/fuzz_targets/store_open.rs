//! Opening arbitrary bytes as a store directory: never panics, never serves a record
//! whose CRC does not match (every record served re-encodes, CRC included, to bytes that
//! are in the input), serves each partition's offsets in ascending order within its
//! low-water mark and head, and a recovered store accepts and serves a new record.
//!
//! Input: byte 0 bit 0 set: two segments, split at the offset in bytes 1-2; the first
//! is named as base 0, the second by the base its header claims (bytes 8-16).
#![no_main]

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use dafka_store::format::{encode_record, segment_file_name};
use dafka_store::{AppendRecord, Config, MemDir, ReadError, Store};
use libfuzzer_sys::fuzz_target;

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

fuzz_target!(|data: &[u8]| {
    let dir = MemDir::new();
    let (first, second) = match data {
        [flags, a, b, rest @ ..] if flags & 1 == 1 => {
            let at = usize::from(u16::from_be_bytes([*a, *b])).min(rest.len());
            rest.split_at(at)
        }
        _ => (data, &[][..]),
    };
    dir.insert(&segment_file_name(0), first.to_vec());
    if !second.is_empty() {
        let base = match second.get(8..16) {
            Some(b) => u64::from_be_bytes(b.try_into().unwrap_or([0; 8])),
            None => first.len() as u64,
        };
        dir.insert(&segment_file_name(base), second.to_vec());
    }
    let mut config = Config::default();
    config.max_record_bytes = 1 << 16;
    config.segment_bytes = 1 << 20;
    let Ok(store) = Store::open(Arc::new(dir), config) else {
        return;
    };
    for info in store.partitions() {
        assert!(info.low_water <= info.head);
        let mut next = info.low_water;
        while next < info.head {
            match store.read(info.id, next, 64, 1 << 16) {
                Ok(records) => {
                    assert!(!records.is_empty());
                    for r in records {
                        assert_eq!(r.offset, next, "ascending, contiguous");
                        let mut encoded = BytesMut::new();
                        encode_record(&mut encoded, info.id.0, r.offset, r.timestamp_ms, &r.value);
                        assert!(contains(data, &encoded), "served a record not in the input");
                        next += 1;
                    }
                }
                Err(ReadError::Lost { from, to }) => {
                    assert!(from == next && to > from && to <= info.head);
                    next = to;
                }
                Err(e) => panic!("unexpected read error {e}"),
            }
        }
    }
    if let Some(info) = store.partitions().first() {
        let ticket = store
            .append(&[AppendRecord {
                partition: info.id,
                offset: info.head,
                timestamp_ms: 1,
                value: b"after recovery",
            }])
            .expect("a recovered store accepts its head");
        ticket.wait(Duration::from_secs(10)).expect("in-memory write");
        let back = store.read(info.id, info.head, 1, 1 << 16).expect("read back");
        assert_eq!(&back[0].value[..], b"after recovery");
    }
});
