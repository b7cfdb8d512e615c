//! Every ZRE message and beacon captured from zyre 2.0.1 (tests/data/zre/) decodes to the fields
//! the capture's own decoder saw, and re-encodes to exactly the captured bytes.

mod common;

use std::collections::BTreeMap;

use bytes::Bytes;
use common::{messages, rows, unhex};
use dafka_zre_proto::{Beacon, Body, Limits, Message, Uuid};

fn fields_of(m: &Message) -> BTreeMap<String, String> {
    let mut f = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        f.insert(k.to_owned(), v);
    };
    put("sequence", m.sequence.to_string());
    let content = |c: &[Bytes]| {
        c.iter()
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
            .collect::<Vec<_>>()
            .join(",")
    };
    match &m.body {
        Body::Hello(h) => {
            put("endpoint", h.endpoint.to_string());
            put("status", h.status.to_string());
            put("name_field", h.name.to_string());
            put("groups", h.groups.join(","));
            let headers: Vec<String> = h.headers.iter().map(|(k, v)| format!("{k}:{v}")).collect();
            put("headers", headers.join(","));
        }
        Body::Whisper { content: c } => put("content", content(c)),
        Body::Shout { group, content: c } => {
            put("group", group.to_string());
            put("content", content(c));
        }
        Body::Join { group, status } | Body::Leave { group, status } => {
            put("group", group.to_string());
            put("status", status.to_string());
        }
        Body::Elect { group, challenger } => {
            put("group", group.to_string());
            put("challenger_id", challenger.to_string());
        }
        Body::Leader { group, leader } => {
            put("group", group.to_string());
            put("leader_id", leader.to_string());
        }
        _ => {}
    }
    f
}

#[test]
fn every_captured_message_decodes_and_reencodes() {
    let all = messages();
    assert_eq!(all.len(), 22);
    let mut kinds = std::collections::BTreeSet::new();
    for v in &all {
        let m = Message::decode(&v.frames, &Limits::DEFAULT)
            .unwrap_or_else(|e| panic!("{} at {} ms: {e}", v.kind, v.t_ms));
        assert_eq!(m.body.name(), v.kind);
        assert_eq!(fields_of(&m), v.fields, "{} at {} ms", v.kind, v.t_ms);
        assert_eq!(
            m.to_frames(),
            v.frames,
            "{} at {} ms re-encoded",
            v.kind,
            v.t_ms
        );
        kinds.insert(v.kind.clone());
    }
    // All ten commands zyre sends are covered by the captures.
    assert_eq!(kinds.len(), 10, "{kinds:?}");
}

#[test]
fn version_3_is_accepted_and_2_is_sent() {
    let v = &messages()[0];
    let mut header = v.frames[0].to_vec();
    assert_eq!(header[3], 0x02);
    header[3] = 0x03;
    let m = Message::decode(&[Bytes::from(header)], &Limits::DEFAULT).unwrap();
    assert_eq!(m.to_frames(), v.frames);
}

#[test]
fn every_captured_beacon_decodes_and_reencodes() {
    let all = rows("beacons.tsv");
    assert_eq!(all.len(), 24);
    let mut leaving = 0;
    for r in &all {
        let payload = unhex(&r[3]);
        let b = Beacon::decode(&payload).unwrap();
        assert_eq!(b.uuid, r[4].parse::<Uuid>().unwrap());
        assert_eq!(b.port.to_string(), r[5]);
        assert_eq!(b.curve_key, None);
        assert_eq!(b.encode(), payload);
        leaving += usize::from(b.port == 0);
    }
    // Both nodes said goodbye with a port-0 beacon.
    assert_eq!(leaving, 2);
}

#[test]
fn curve_beacon_of_43_zre() {
    let mut payload = unhex(&rows("beacons.tsv")[0][3]);
    payload[3] = 0x03;
    payload.extend(0x40..0x60u8);
    assert_eq!(payload.len(), 54);
    let b = Beacon::decode(&payload).unwrap();
    assert_eq!(b.port, 49152);
    assert_eq!(b.curve_key.unwrap()[31], 0x5F);
    assert_eq!(b.encode(), payload);
}
