//! Records' metadata (timestamp, key, headers) through the store: every shape appended,
//! closed, reopened and read back as it was given; the limits that keep every record
//! readable; random metadata through segment rolls and a reopen.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dafka_store::format::MAX_HEADERS;
use dafka_store::{
    AppendError, AppendRecord, Config, Dir, FsDir, Header, MemDir, MetaParts, PartitionId, Record,
    RecordMeta, Store,
};
use proptest::prelude::*;

use common::{key, read_all, records, value};

const WAIT: Duration = Duration::from_secs(30);
const MIB: usize = 1 << 20;

/// Bytes of `len`, recognisable by `seed`.
fn bytes(seed: u8, len: usize) -> Bytes {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

/// Every shape of metadata, with the value each is appended with.
fn shapes() -> Vec<(RecordMeta, Vec<u8>)> {
    let t = 1_764_000_000_123_456;
    let metas = vec![
        RecordMeta::created(t),
        RecordMeta::log_append(t),
        RecordMeta::created(0),
        RecordMeta::created(-1),
        RecordMeta::created(i64::MIN),
        RecordMeta::log_append(i64::MAX),
        // An empty key is not an absent one.
        RecordMeta::from(MetaParts {
            key: Some(Bytes::new()),
            ..MetaParts::created(t)
        }),
        RecordMeta::from(MetaParts {
            key: Some(bytes(1, 16)),
            ..MetaParts::created(t)
        }),
        // A key of 1 MiB: with an empty value, exactly the default record limit.
        RecordMeta::from(MetaParts {
            key: Some(bytes(2, MIB)),
            ..MetaParts::created(t)
        }),
        // An empty header list is not an absent one.
        RecordMeta::from(MetaParts {
            headers: Some(Vec::new()),
            ..MetaParts::created(t)
        }),
        RecordMeta::from(MetaParts {
            headers: Some(vec![
                Header::new("null", None),
                Header::new("empty", Some(Bytes::new())),
                Header::new("", Some(bytes(3, 5))),
                Header::new("null", None), // names repeat, as Kafka allows
            ]),
            ..MetaParts::log_append(t)
        }),
        // A large header value, and the most headers a store keeps.
        RecordMeta::from(MetaParts {
            key: Some(Bytes::new()),
            headers: Some(vec![Header::new("large", Some(bytes(4, MIB / 2)))]),
            ..MetaParts::created(t)
        }),
        RecordMeta::from(MetaParts {
            headers: Some(
                (0..MAX_HEADERS)
                    .map(|i| Header::new(&format!("h{i}"), (i % 3 != 0).then(|| bytes(5, i % 7))))
                    .collect(),
            ),
            ..MetaParts::created(t)
        }),
    ];
    metas
        .into_iter()
        .enumerate()
        .map(|(i, meta)| {
            let room = MIB - meta.payload_len();
            (meta, value(1, i as u64, room.min(100 + i)))
        })
        .collect()
}

fn check_shapes(got: &[Record], want: &[(RecordMeta, Vec<u8>)]) {
    assert_eq!(got.len(), want.len());
    for (i, (r, (meta, v))) in got.iter().zip(want).enumerate() {
        assert_eq!(r.offset, i as u64);
        assert_eq!(&r.meta, meta, "record {i}");
        assert_eq!(&r.value[..], &v[..], "record {i}");
    }
}

/// Every shape appended (one batch of all, then one call each) and read back before and
/// after a reopen, on a real directory and in memory.
#[test]
fn every_shape_of_metadata_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs: Vec<Arc<dyn Dir>> = vec![
        Arc::new(FsDir::new(tmp.path()).unwrap()),
        Arc::new(MemDir::new()),
    ];
    let want = shapes();
    for dir in dirs {
        let store = Store::open(dir.clone(), Config::default()).unwrap();
        let p = store.declare(&key(1)).unwrap();
        let q = store.declare(&key(2)).unwrap();
        let records: Vec<AppendRecord<'_>> = (want.iter().enumerate())
            .map(|(i, (meta, v))| AppendRecord {
                partition: p,
                offset: i as u64,
                meta,
                value: v,
            })
            .collect();
        store.append(&records).unwrap().wait(WAIT).unwrap();
        for (i, (meta, v)) in want.iter().enumerate() {
            let r = AppendRecord {
                partition: q,
                offset: i as u64,
                meta,
                value: v,
            };
            store.append(&[r]).unwrap().wait(WAIT).unwrap();
        }
        check_shapes(&read_all(&store, p), &want);
        check_shapes(&read_all(&store, q), &want);
        store.close();
        let store = Store::open(dir, Config::default()).unwrap();
        assert!(store.recovery_report().damage.is_empty());
        assert_eq!(store.recovery_report().records, 2 * want.len() as u64);
        check_shapes(&read_all(&store, p), &want);
        check_shapes(&read_all(&store, q), &want);
        // One at a time too (each read starts at the index entry before it).
        for (i, (meta, v)) in want.iter().enumerate() {
            let one = store.read(q, i as u64, 1, 1).unwrap();
            assert_eq!(one.len(), 1);
            assert_eq!(one[0].offset, i as u64);
            assert_eq!((&one[0].meta, &one[0].value[..]), (meta, &v[..]));
        }
        store.close();
    }
}

/// The byte budget of a read counts keys and headers: a record with a large key weighs on
/// it as a large value does.
#[test]
fn a_reads_byte_budget_counts_metadata() {
    let store = Store::open(Arc::new(MemDir::new()), Config::default()).unwrap();
    let p = store.declare(&key(1)).unwrap();
    let heavy = RecordMeta::from(MetaParts {
        key: Some(bytes(9, 1000)),
        ..MetaParts::created(1)
    });
    let light = RecordMeta::created(1);
    let records: Vec<AppendRecord<'_>> = (0..10)
        .map(|o| AppendRecord {
            partition: p,
            offset: o,
            meta: if o % 2 == 0 { &heavy } else { &light },
            value: b"v",
        })
        .collect();
    store.append(&records).unwrap().wait(WAIT).unwrap();
    // Record 0 alone is over 900 bytes; records 1 (light) then 2 (heavy) follow.
    assert_eq!(store.read(p, 0, 100, 900).unwrap().len(), 1);
    assert_eq!(store.read(p, 1, 100, 900).unwrap().len(), 2);
    assert_eq!(store.read(p, 0, 100, 1 << 20).unwrap().len(), 10);
}

/// Refused: value, key and header bytes over the limit together; more headers than a store
/// keeps; a header name that is not UTF-8. Nothing of a refused call is stored.
#[test]
fn records_that_would_not_read_back_are_refused() {
    let mut config = Config::default();
    config.max_record_bytes = 100;
    let store = Store::open(Arc::new(MemDir::new()), config).unwrap();
    let p = store.declare(&key(1)).unwrap();
    let append = |meta: &RecordMeta, value: &[u8]| {
        store.append(&[
            AppendRecord {
                partition: p,
                offset: 0,
                meta: &RecordMeta::created(0),
                value: b"first",
            },
            AppendRecord {
                partition: p,
                offset: 1,
                meta,
                value,
            },
        ])
    };
    let sized = |key: usize, name: &str, header: usize| {
        RecordMeta::from(MetaParts {
            key: Some(bytes(1, key)),
            headers: Some(vec![Header::new(name, Some(bytes(2, header)))]),
            ..MetaParts::created(0)
        })
    };
    // 40 + 10 + 5 + 45 = 100: kept; one more byte anywhere: refused.
    assert!(matches!(
        append(&sized(41, "abcde", 10), &[0; 45]),
        Err(AppendError::RecordTooLarge {
            size: 101,
            max: 100
        })
    ));
    assert!(matches!(
        append(&sized(40, "abcdef", 10), &[0; 45]),
        Err(AppendError::RecordTooLarge { size: 101, .. })
    ));
    let many = RecordMeta::from(MetaParts {
        headers: Some(vec![Header::new("", None); MAX_HEADERS + 1]),
        ..MetaParts::created(0)
    });
    assert!(matches!(
        append(&many, b""),
        Err(AppendError::TooManyHeaders { count, max }) if count == MAX_HEADERS + 1 && max == MAX_HEADERS
    ));
    let not_utf8 = RecordMeta::from(MetaParts {
        headers: Some(vec![Header {
            name: Bytes::from_static(b"\xFF"),
            value: None,
        }]),
        ..MetaParts::created(0)
    });
    assert!(matches!(
        append(&not_utf8, b""),
        Err(AppendError::HeaderNameNotUtf8)
    ));
    assert_eq!(store.next_offset(p), Some(0), "nothing of a refused call");
    let kept = sized(40, "abcde", 10);
    append(&kept, &[0; 45]).unwrap().wait(WAIT).unwrap();
    assert_eq!(store.read(p, 1, 1, 1).unwrap()[0].meta, kept);
}

/// Metadata as a proptest draws it: timestamp, whose clock, key, headers.
fn meta_strategy() -> impl Strategy<Value = RecordMeta> {
    let key = prop::option::of(prop::collection::vec(any::<u8>(), 0..40));
    let header = (
        "[a-z\u{e9}]{0,6}",
        prop::option::of(prop::collection::vec(any::<u8>(), 0..30)),
    );
    let headers = prop::option::of(prop::collection::vec(header, 0..5));
    (any::<i64>(), any::<bool>(), key, headers).prop_map(|(ts, append_time, key, headers)| {
        let base = if append_time {
            MetaParts::log_append(ts)
        } else {
            MetaParts::created(ts)
        };
        RecordMeta::from(MetaParts {
            key: key.map(Bytes::from),
            headers: headers.map(|hs| {
                hs.into_iter()
                    .map(|(name, value)| Header::new(&name, value.map(Bytes::from)))
                    .collect()
            }),
            ..base
        })
    })
}

fn small_segments() -> Config {
    let mut config = Config::default();
    config.segment_bytes = 4096;
    config.max_record_bytes = 1024;
    config.index_interval_bytes = 256;
    config
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random metadata on two interleaved partitions, in random batches, through segment
    /// rolls and a reopen: every record reads back as appended, and `offset_for_time`
    /// answers as a scan of the records does.
    #[test]
    fn random_metadata_round_trips(
        drawn in prop::collection::vec((meta_strategy(), 0usize..200, any::<bool>()), 1..80),
        cuts in prop::collection::vec(1usize..6, 1..40),
        probes in prop::collection::vec(any::<i64>(), 4),
    ) {
        let dir = MemDir::new();
        let store = Store::open(Arc::new(dir.clone()), small_segments()).unwrap();
        let ids = [store.declare(&key(1)).unwrap(), store.declare(&key(2)).unwrap()];
        let mut heads = [0u64; 2];
        let planned: Vec<(PartitionId, u64, &RecordMeta, Vec<u8>)> = drawn
            .iter()
            .map(|(meta, len, second)| {
                let i = usize::from(*second);
                heads[i] += 1;
                (ids[i], heads[i] - 1, meta, value(i as u32, heads[i] - 1, *len))
            })
            .collect();
        let mut at = 0;
        let mut last = None;
        for cut in cuts.iter().cycle() {
            if at == planned.len() {
                break;
            }
            let end = (at + cut).min(planned.len());
            last = Some(store.append(&records(&planned[at..end])).unwrap());
            at = end;
        }
        last.unwrap().wait(WAIT).unwrap();
        let check = |store: &Store| {
            for id in ids {
                let want: Vec<_> = planned.iter().filter(|r| r.0 == id).collect();
                let got = read_all(store, id);
                prop_assert_eq!(got.len(), want.len());
                for (r, (_, offset, meta, v)) in got.iter().zip(&want) {
                    prop_assert_eq!(r.offset, *offset);
                    prop_assert_eq!(&r.meta, *meta);
                    prop_assert_eq!(&r.value[..], &v[..]);
                }
                let stamps: Vec<i64> = want.iter().map(|r| r.2.timestamp).collect();
                for &t in probes.iter().chain(&stamps) {
                    let first = stamps.iter().position(|&s| s >= t).map(|o| o as u64);
                    prop_assert_eq!(store.offset_for_time(id, t).unwrap(), first);
                }
            }
            Ok(())
        };
        check(&store)?;
        store.close();
        let store = Store::open(Arc::new(dir), small_segments()).unwrap();
        prop_assert!(store.recovery_report().damage.is_empty());
        check(&store)?;
    }
}
