//! Opening arbitrary bytes as a store directory: never panics, never serves a record
//! whose CRC does not match (every record served re-encodes, CRC included, to bytes that
//! are in the input: as a record of format version 2 with its metadata, or one of version
//! 1 when it reads as one), serves each partition's offsets in ascending order within its
//! low-water mark and head, answers `offset_for_time` as a scan of what it serves does, and
//! a recovered store accepts and serves a new record.
//!
//! Input: byte 0 bit 0 set: two segments, split at the offset in bytes 1-2; the first
//! is named as base 0, the second by the base its header claims (bytes 8-16).
#![no_main]

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use dafka_store::format::{encode_record, encode_record_v1, segment_file_name};
use dafka_store::{
    AppendRecord, Config, MemDir, ReadError, Record, RecordMeta, Store, TimestampType,
};
use libfuzzer_sys::fuzz_target;

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// Whether `r` of partition `id` is a record entry of the input, CRC included.
fn in_input(data: &[u8], id: u32, r: &Record) -> bool {
    let mut encoded = BytesMut::new();
    encode_record(&mut encoded, id, r.offset, &r.meta, &r.value);
    if contains(data, &encoded) {
        return true;
    }
    // A version 1 record: a log-append time in whole milliseconds, nothing else.
    let m = &r.meta;
    if m.timestamp_type() != TimestampType::LogAppendTime
        || m.key().is_some()
        || m.headers().is_some()
    {
        return false;
    }
    if m.timestamp == i64::MAX {
        // Saturated from a time past i64::MAX us: the millisecond field is not known.
        let mut fixed = vec![0x01];
        fixed.extend_from_slice(&id.to_be_bytes());
        fixed.extend_from_slice(&r.offset.to_be_bytes());
        return contains(data, &fixed) && contains(data, &r.value);
    }
    encoded.clear();
    let Ok(ms) = u64::try_from(m.timestamp / 1000) else {
        return false;
    };
    encode_record_v1(&mut encoded, id, r.offset, ms, &r.value);
    m.timestamp % 1000 == 0 && contains(data, &encoded)
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
        let mut stamps = Vec::new();
        while next < info.head {
            match store.read(info.id, next, 64, 1 << 16) {
                Ok(records) => {
                    assert!(!records.is_empty());
                    for r in records {
                        assert_eq!(r.offset, next, "ascending, contiguous");
                        assert!(
                            in_input(data, info.id.0, &r),
                            "served a record not in the input"
                        );
                        stamps.push((r.offset, r.meta.timestamp));
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
        // The time index agrees with the records served, for each of their timestamps.
        for &(_, t) in stamps.iter().take(16) {
            let first = stamps.iter().find(|&&(_, s)| s >= t).map(|&(o, _)| o);
            assert_eq!(
                store.offset_for_time(info.id, t).expect("time search"),
                first
            );
        }
    }
    if let Some(info) = store.partitions().first() {
        let ticket = store
            .append(&[AppendRecord {
                partition: info.id,
                offset: info.head,
                meta: &RecordMeta::created(1),
                value: b"after recovery",
            }])
            .expect("a recovered store accepts its head");
        ticket
            .wait(Duration::from_secs(10))
            .expect("in-memory write");
        let back = store
            .read(info.id, info.head, 1, 1 << 16)
            .expect("read back");
        assert_eq!(&back[0].value[..], b"after recovery");
    }
});
