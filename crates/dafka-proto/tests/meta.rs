//! META-RECORD and DIRECT-META-RECORDS against the reference's captured RECORD and
//! DIRECT-RECORD: the same header with the metadata after it, and the value-only forms a
//! reference peer receives are the captured bytes exactly. Plus the byte example of
//! `docs/dafka.md`.

mod common;

use bytes::Bytes;
use dafka_proto::message::{DirectMetaRecords, MetaRecord};
use dafka_proto::record::{Header, MetaParts, RecordMeta, TimestampType};
use dafka_proto::{DirectRecords, Limits, Message, Topic};

use common::{P1, S1_WRITER, find, id, unhex};

const T0: i64 = 1_764_000_000_000_000;

fn decode(frames: &[Bytes]) -> Message {
    Message::decode(frames, &Limits::DEFAULT).unwrap()
}

#[test]
fn a_meta_record_is_the_captured_record_with_id_t_and_the_timestamp_after_it() {
    let captured = find("RECORD", &[("sequence", "3")]).frames;
    let Message::Record(record) = decode(&captured) else {
        panic!()
    };
    let meta = MetaRecord {
        record: record.clone(),
        meta: RecordMeta::created(T0),
    };
    let frames = Message::MetaRecord(meta.clone()).to_frames();
    let mut header = captured[0].to_vec();
    header[0] = b'T';
    header.extend_from_slice(&T0.to_be_bytes());
    assert_eq!(frames[0], header, "8 bytes more than RECORD, nothing else");
    assert_eq!(frames[1], captured[1]);
    assert_eq!(decode(&frames), Message::MetaRecord(meta));
    // What a reference consumer gets instead: the captured RECORD, byte for byte.
    assert_eq!(Message::Record(record).to_frames(), captured);
}

#[test]
fn direct_meta_records_are_the_captured_header_with_timestamps_then_extras() {
    let captured: Vec<Vec<Bytes>> = (0..3)
        .map(|s| {
            find(
                "DIRECT-RECORD",
                &[("topic_prefix", S1_WRITER), ("sequence", &s.to_string())],
            )
            .frames
        })
        .collect();
    let records: Vec<_> = captured
        .iter()
        .map(|f| match decode(f) {
            Message::DirectRecord(d) => d,
            other => panic!("{other:?}"),
        })
        .collect();
    let metas = vec![
        RecordMeta::created(T0),
        RecordMeta::from(MetaParts {
            key: Some(Bytes::new()),
            ..MetaParts::created(T0 + 1)
        }),
        RecordMeta::log_append(T0 + 2),
    ];
    let run = DirectMetaRecords {
        run: DirectRecords {
            to: records[0].to,
            producer: records[0].record.producer,
            topic: records[0].record.topic.clone(),
            first: 0,
            contents: records.iter().map(|d| d.record.content.clone()).collect(),
        },
        metas: metas.clone(),
    };
    let frames = Message::DirectMetaRecords(run.clone()).to_frames();
    let mut header = captured[0][0].to_vec();
    header[0] = b'V';
    for t in 0..3 {
        header.extend_from_slice(&(T0 + t).to_be_bytes());
    }
    // Extras for each: none (00), an empty key, a log-append time.
    header.extend_from_slice(&[0x00, 0x01, 0, 0, 0, 0, 0x04]);
    assert_eq!(frames[0], header);
    assert_eq!(
        &frames[1..],
        &[&captured[0][1], &captured[1][1], &captured[2][1]]
    );
    assert_eq!(decode(&frames), Message::DirectMetaRecords(run));
}

#[test]
fn the_documented_example_is_what_goes_on_the_wire() {
    let meta = MetaRecord {
        record: dafka_proto::Record {
            producer: id(P1),
            topic: Topic::try_from("t").unwrap(),
            sequence: 7,
            content: Bytes::from_static(b"v"),
        },
        meta: RecordMeta::from(MetaParts {
            key: Some(Bytes::from_static(b"k1")),
            headers: Some(vec![Header::new("id", Some(Bytes::from_static(b"7")))]),
            ..MetaParts::created(T0)
        }),
    };
    let expected = unhex(
        &format!(
            "5474 0001 20{} 0174 0000000000000007 0006445941624000 03 000000026b31 00000001 \
             000000026964 0000000137",
            hex_of(P1)
        )
        .replace(' ', ""),
    );
    let frames = Message::MetaRecord(meta.clone()).to_frames();
    assert_eq!(frames[0], expected);
    assert_eq!(decode(&frames), Message::MetaRecord(meta));
}

#[test]
fn a_run_without_extras_is_refused_when_it_carries_them() {
    // One encoding per message: extras where no record needs them are malformed, so what
    // decodes re-encodes to the same bytes (the fuzz target's invariant).
    let mut frames = Message::MetaRecord(MetaRecord {
        record: dafka_proto::Record {
            producer: id(P1),
            topic: Topic::try_from("t").unwrap(),
            sequence: 0,
            content: Bytes::new(),
        },
        meta: RecordMeta::created(0),
    })
    .to_frames();
    let mut header = frames[0].to_vec();
    header.push(0x00);
    frames[0] = Bytes::from(header);
    assert!(Message::decode(&frames, &Limits::DEFAULT).is_err());
    assert_eq!(TimestampType::LogAppendTime.code(), 1);
}

fn hex_of(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}
