//! Every distinct message captured from the reference nodes (tests/data/dafka/, extracted from
//! ../shared/vectors/dafka/ by scripts/extract_dafka_vectors.py) decodes to the fields the
//! capture's own decoder saw, and re-encodes to exactly the captured bytes.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use common::{data, hex, unhex, vectors};
use dafka_proto::{BEACON_TOPIC, BeaconMessage, Kind, Limits, Message, NodeId, subscription};

/// The fields of a decoded Dafka message, named as the capture's decoder names them.
fn fields_of(m: &Message) -> BTreeMap<String, String> {
    let mut f = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        f.insert(k.to_owned(), v);
    };
    match m {
        Message::Record(r) => {
            put("topic_prefix", r.topic.to_string());
            put("address", r.producer.to_string());
            put("subject", r.topic.to_string());
            put("sequence", r.sequence.to_string());
            put("content_hex", hex(&r.content));
        }
        Message::DirectRecord(d) => {
            put("topic_prefix", d.to.to_string());
            put("address", d.record.producer.to_string());
            put("subject", d.record.topic.to_string());
            put("sequence", d.record.sequence.to_string());
            put("content_hex", hex(&d.record.content));
        }
        Message::Fetch(x) => {
            put("topic_prefix", x.producer.to_string());
            put("address", x.sender.to_string());
            put("subject", x.topic.to_string());
            put("sequence", x.sequence.to_string());
            put("count", x.count.to_string());
        }
        Message::Ack(a) => {
            put("topic_prefix", a.producer.to_string());
            put("subject", a.topic.to_string());
            put("sequence", a.sequence.to_string());
        }
        Message::Head(h) => {
            put("topic_prefix", h.topic.to_string());
            put("address", h.producer.to_string());
            put("subject", h.topic.to_string());
            put("sequence", h.sequence.to_string());
        }
        Message::DirectHead(d) => {
            put("topic_prefix", d.to.to_string());
            put("address", d.head.producer.to_string());
            put("subject", d.head.topic.to_string());
            put("sequence", d.head.sequence.to_string());
        }
        Message::GetHeads(g) => {
            put("topic_prefix", g.topic.to_string());
            put("address", g.consumer.to_string());
        }
        Message::ConsumerHello(c) => {
            put("topic_prefix", c.store.to_string());
            put("address", c.consumer.to_string());
            let topics: Vec<String> = c.topics.iter().map(|t| t.to_string()).collect();
            put("subjects", topics.join(","));
        }
        Message::StoreHello(s) => {
            put("topic_prefix", s.consumer.to_string());
            put("address", s.store.to_string());
        }
        other => panic!("unexpected message {other:?}"),
    }
    f
}

fn beacon_fields(b: &BeaconMessage) -> BTreeMap<String, String> {
    let mut f = BTreeMap::new();
    match b {
        BeaconMessage::Node(n) => {
            f.insert("uuid".into(), n.node.to_string());
            f.insert("host".into(), n.host.clone());
            f.insert("port_decimal_string".into(), n.port.to_string());
        }
        BeaconMessage::Tower(t) => {
            f.insert("uuid".into(), t.node.to_string());
            f.insert("endpoint".into(), t.endpoint.clone());
        }
        BeaconMessage::Welcome => {}
        other => panic!("unexpected beacon {other:?}"),
    }
    f
}

#[test]
fn every_captured_message_decodes_and_reencodes_byte_for_byte() {
    let limits = Limits::DEFAULT;
    let mut kinds = BTreeSet::new();
    let vectors = vectors();
    assert_eq!(vectors.len(), 96);
    for v in &vectors {
        kinds.insert(v.kind.clone());
        match v.kind.as_str() {
            "welcome" | "node-beacon" | "tower-beacon" => {
                let b = BeaconMessage::decode(&v.frames, &limits)
                    .unwrap_or_else(|e| panic!("{}: {e}", v.kind));
                let expected = match &b {
                    BeaconMessage::Node(_) => "node-beacon",
                    BeaconMessage::Tower(_) => "tower-beacon",
                    _ => "welcome",
                };
                assert_eq!(expected, v.kind);
                assert_eq!(beacon_fields(&b), v.fields, "{}", v.kind);
                assert_eq!(b.to_frames(), v.frames, "{}", v.kind);
                // Beacons are no Dafka messages: the 'B' frame is not a command id.
                assert!(Message::decode(&v.frames, &limits).is_err());
            }
            _ => {
                let m = Message::decode(&v.frames, &limits)
                    .unwrap_or_else(|e| panic!("{}: {e}", v.kind));
                assert_eq!(m.kind().name(), v.kind);
                assert_eq!(fields_of(&m), v.fields, "{}", v.kind);
                assert_eq!(m.header_len(), v.frames[0].len(), "{}", v.kind);
                assert_eq!(m.to_frames(), v.frames, "{}", v.kind);
                // The content frame is shared with the received frame, not copied.
                if let (Some(content), Some(frame)) = (m.content(), v.frames.get(1)) {
                    assert_eq!(content.as_ptr(), frame.as_ptr());
                }
            }
        }
    }
    let all: BTreeSet<String> = [
        "welcome",
        "node-beacon",
        "tower-beacon",
        "RECORD",
        "DIRECT-RECORD",
        "FETCH",
        "ACK",
        "HEAD",
        "DIRECT-HEAD",
        "GET-HEADS",
        "CONSUMER-HELLO",
        "STORE-HELLO",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(kinds, all, "every kind is covered by a captured vector");
}

#[test]
fn captured_head_matches_the_documented_bytes() {
    // NOTES.md: HEAD of P on "golden", offset 2 = H golden 00 01 20 <P> 06 golden 00..02.
    let v = vectors()
        .into_iter()
        .find(|v| v.kind == "HEAD" && v.fields["sequence"] == "2")
        .unwrap();
    let mut expected = b"Hgolden\x00\x01\x20986108951EB145A1BFBDC5601975F614\x06golden".to_vec();
    expected.extend_from_slice(&2u64.to_be_bytes());
    assert_eq!(v.frames[0].as_ref(), &expected[..]);
}

#[test]
fn captured_subscriptions_are_what_the_helpers_build() {
    let mut checked = 0;
    for line in data("subscriptions.tsv").lines() {
        let mut cols = line.split('\t');
        let form = cols.next().unwrap();
        let prefix = Bytes::from(unhex(cols.next().unwrap()));
        let wire = unhex(cols.next().unwrap());
        // The wire form: a ZMTP 3.1 SUBSCRIBE command or the 0x01-prefixed message.
        let expected_wire: Vec<u8> = match form {
            "command" => [&b"\x09SUBSCRIBE"[..], &prefix].concat(),
            _ => [&[0x01][..], &prefix].concat(),
        };
        assert_eq!(wire, expected_wire);
        if prefix.as_ref() == BEACON_TOPIC {
            checked += 1;
            continue;
        }
        let kind = Kind::from_id(prefix[0]).unwrap();
        let built = if prefix.len() == 1 {
            subscription::all(kind)
        } else if let Some(id) = NodeId::from_hex(&prefix[1..]) {
            assert_eq!(subscription::parse_node(&prefix), Some((kind, id)));
            subscription::node(kind, &id)
        } else {
            let topic = dafka_proto::Topic::new(prefix.slice(1..)).unwrap();
            subscription::topic(kind, &topic)
        };
        assert_eq!(built, prefix);
        checked += 1;
    }
    assert_eq!(checked, 23);
}
