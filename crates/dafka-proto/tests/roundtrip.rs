//! Property tests: every message and beacon survives encode -> decode unchanged, and arbitrary
//! frames never panic the decoders; whatever decodes re-encodes to the same bytes.

use bytes::Bytes;
use dafka_proto::{
    Ack, BeaconMessage, CommittedQuery, ConsumerHello, DirectCommitted, DirectHead, DirectLowWater,
    DirectMissing, DirectRecord, DirectRecords, Fetch, GetHeads, GroupHeartbeat, GroupOffset, Head,
    HeadsEnd, HeadsQuery, Limits, Message, NodeBeacon, NodeId, OffsetCommit, Record, RefusalReason,
    StoreAck, StoreHello, StoreRefusal, Topic, TowerBeacon,
    group::GroupName,
    message::{
        DirectGroups, DirectMetaRecords, DirectTimeOffset, DirectTopics, GroupsQuery, MetaRecord,
        TimeQuery, TopicsQuery,
    },
    record::{Header, MetaParts, RecordMeta, TimestampType},
};
use proptest::prelude::*;

fn node_id() -> impl Strategy<Value = NodeId> {
    any::<[u8; 16]>().prop_map(NodeId::from_bytes)
}

fn topic() -> impl Strategy<Value = Topic> {
    prop::collection::vec(1u8..=255, 0..=255).prop_map(|v| Topic::new(v).unwrap())
}

fn group_name() -> impl Strategy<Value = GroupName> {
    prop::collection::vec(1u8..=255, 1..=255).prop_map(|v| GroupName::new(v).unwrap())
}

fn group_offset() -> impl Strategy<Value = GroupOffset> {
    (topic(), node_id(), any::<u64>()).prop_map(|(topic, partition, offset)| GroupOffset {
        topic,
        partition,
        offset,
    })
}

fn content() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..512).prop_map(Bytes::from)
}

fn record() -> impl Strategy<Value = Record> {
    (node_id(), topic(), any::<u64>(), content()).prop_map(
        |(producer, topic, sequence, content)| Record {
            producer,
            topic,
            sequence,
            content,
        },
    )
}

/// Any metadata: value-only create-time records half the time (no extras), else any mix of
/// key (empty or not), headers (null, empty or any values) and log-append time.
fn meta() -> impl Strategy<Value = RecordMeta> {
    let header = (".{0,12}", prop::option::of(content()))
        .prop_map(|(name, value): (String, _)| Header::new(&name, value));
    prop_oneof![
        any::<i64>().prop_map(RecordMeta::created),
        (
            any::<i64>(),
            any::<bool>(),
            prop::option::of(content()),
            prop::option::of(prop::collection::vec(header, 0..4)),
        )
            .prop_map(|(timestamp, log_append, key, headers)| RecordMeta::from(
                MetaParts {
                    timestamp,
                    timestamp_type: if log_append {
                        TimestampType::LogAppendTime
                    } else {
                        TimestampType::CreateTime
                    },
                    key,
                    headers,
                }
            )),
    ]
}

fn head() -> impl Strategy<Value = Head> {
    (node_id(), topic(), any::<u64>()).prop_map(|(producer, topic, sequence)| Head {
        producer,
        topic,
        sequence,
    })
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        record().prop_map(Message::Record),
        (node_id(), record()).prop_map(|(to, record)| DirectRecord { to, record }.into()),
        (node_id(), node_id(), topic(), any::<u64>(), any::<u32>()).prop_map(
            |(producer, sender, topic, sequence, count)| Fetch {
                producer,
                sender,
                topic,
                sequence,
                count
            }
            .into()
        ),
        (node_id(), topic(), any::<u64>()).prop_map(|(producer, topic, sequence)| Ack {
            producer,
            topic,
            sequence
        }
        .into()),
        head().prop_map(Message::Head),
        (node_id(), head()).prop_map(|(to, head)| DirectHead { to, head }.into()),
        (node_id(), head()).prop_map(|(to, low)| DirectLowWater { to, low }.into()),
        head().prop_map(|h| HeadsQuery {
            consumer: h.producer,
            topic: h.topic,
            query: h.sequence
        }
        .into()),
        (node_id(), head()).prop_map(|(to, h)| HeadsEnd {
            to,
            store: h.producer,
            topic: h.topic,
            query: h.sequence
        }
        .into()),
        (node_id(), head()).prop_map(|(store, h)| StoreAck {
            store,
            ack: Ack {
                producer: h.producer,
                topic: h.topic,
                sequence: h.sequence
            }
        }
        .into()),
        (topic(), node_id()).prop_map(|(topic, consumer)| GetHeads { topic, consumer }.into()),
        (
            prop::collection::vec(1u8..=255, 1..=255),
            node_id(),
            any::<bool>()
        )
            .prop_map(|(name, member, leaving)| GroupHeartbeat {
                group: GroupName::new(name).unwrap(),
                member,
                leaving
            }
            .into()),
        (
            group_name(),
            node_id(),
            any::<u64>(),
            any::<bool>(),
            prop::collection::vec(group_offset(), 1..8)
        )
            .prop_map(|(group, member, request, seek, offsets)| OffsetCommit {
                group,
                member,
                request,
                seek,
                offsets
            }
            .into()),
        (
            group_name(),
            node_id(),
            any::<u64>(),
            prop::collection::vec((topic(), node_id()), 0..8)
        )
            .prop_map(|(group, member, request, partitions)| CommittedQuery {
                group,
                member,
                request,
                partitions
            }
            .into()),
        (
            node_id(),
            node_id(),
            any::<u64>(),
            group_name(),
            prop::collection::vec(group_offset(), 0..8)
        )
            .prop_map(|(to, store, request, group, offsets)| DirectCommitted {
                to,
                store,
                request,
                group,
                offsets
            }
            .into()),
        (node_id(), node_id(), prop::collection::vec(topic(), 0..8)).prop_map(
            |(store, consumer, topics)| ConsumerHello {
                store,
                consumer,
                topics
            }
            .into()
        ),
        (node_id(), node_id()).prop_map(|(consumer, store)| StoreHello { consumer, store }.into()),
        (node_id(), head(), prop::collection::vec(content(), 1..8)).prop_map(
            |(to, h, contents)| DirectRecords {
                to,
                producer: h.producer,
                topic: h.topic,
                // Any first offset whose run still fits below 2^64.
                first: h.sequence.min(u64::MAX - contents.len() as u64 + 1),
                contents,
            }
            .into()
        ),
        (record(), meta()).prop_map(|(record, meta)| MetaRecord { record, meta }.into()),
        (head(), any::<i64>()).prop_map(|(h, time)| TimeQuery {
            consumer: h.producer,
            topic: h.topic,
            query: h.sequence,
            time,
        }
        .into()),
        (node_id(), head(), any::<u64>()).prop_map(|(to, h, end)| DirectTimeOffset {
            to,
            producer: h.producer,
            topic: h.topic,
            offset: h.sequence,
            end,
        }
        .into()),
        (node_id(), any::<u64>())
            .prop_map(|(consumer, query)| TopicsQuery { consumer, query }.into()),
        (
            node_id(),
            node_id(),
            any::<u64>(),
            prop::collection::vec(topic(), 0..8)
        )
            .prop_map(|(to, store, query, topics)| DirectTopics {
                to,
                store,
                query,
                topics
            }
            .into()),
        (node_id(), any::<u64>())
            .prop_map(|(consumer, query)| GroupsQuery { consumer, query }.into()),
        (
            node_id(),
            node_id(),
            any::<u64>(),
            prop::collection::vec(group_name(), 0..8)
        )
            .prop_map(|(to, store, query, groups)| DirectGroups {
                to,
                store,
                query,
                groups
            }
            .into()),
        (
            node_id(),
            head(),
            prop::collection::vec((content(), meta()), 1..8)
        )
            .prop_map(|(to, h, records)| {
                let (contents, metas): (Vec<_>, Vec<_>) = records.into_iter().unzip();
                DirectMetaRecords {
                    run: DirectRecords {
                        to,
                        producer: h.producer,
                        topic: h.topic,
                        first: h.sequence.min(u64::MAX - contents.len() as u64 + 1),
                        contents,
                    },
                    metas,
                }
                .into()
            }),
        (
            node_id(),
            head(),
            any::<u8>(),
            prop::collection::vec(any::<u8>(), 0..=255)
        )
            .prop_map(|(store, h, code, detail)| StoreRefusal {
                producer: h.producer,
                store,
                topic: h.topic,
                sequence: h.sequence,
                reason: RefusalReason::from_code(code),
                detail: Bytes::from(detail),
            }
            .into()),
        (node_id(), node_id(), head(), 1..=u64::MAX).prop_map(|(to, store, h, n)| {
            let from = h.sequence.min(u64::MAX - 1);
            DirectMissing {
                to,
                store,
                producer: h.producer,
                topic: h.topic,
                from,
                to_offset: from.saturating_add(n),
            }
            .into()
        }),
    ]
}

fn beacon() -> impl Strategy<Value = BeaconMessage> {
    prop_oneof![
        Just(BeaconMessage::Welcome),
        (node_id(), "[a-z0-9.:-]{0,64}", any::<u16>())
            .prop_map(|(node, host, port)| BeaconMessage::Node(NodeBeacon { node, host, port })),
        (node_id(), "tcp://[a-z0-9.]{1,32}:[0-9]{1,5}")
            .prop_map(|(node, endpoint)| BeaconMessage::Tower(TowerBeacon { node, endpoint })),
    ]
}

/// Arbitrary frames that often look like Dafka: a real id byte and a NUL-terminated prefix.
fn frames() -> impl Strategy<Value = Vec<Bytes>> {
    let id = prop::sample::select(b"MDFKHEGWLBNXTVYZSCJx".to_vec());
    let frame1 = (id, prop::collection::vec(any::<u8>(), 0..120)).prop_map(|(id, rest)| {
        let mut f = vec![id];
        f.extend(rest);
        Bytes::from(f)
    });
    (frame1, prop::collection::vec(content(), 0..4)).prop_map(|(first, rest)| {
        let mut frames = vec![first];
        frames.extend(rest);
        frames
    })
}

proptest! {
    #[test]
    fn messages_round_trip(m in message()) {
        let frames = m.to_frames();
        match &m {
            Message::DirectRecords(d)
            | Message::DirectMetaRecords(DirectMetaRecords { run: d, .. }) => {
                prop_assert_eq!(frames.len(), 1 + d.contents.len())
            }
            _ => prop_assert_eq!(frames.len(), m.kind().frames()),
        }
        prop_assert_eq!(frames[0].len(), m.header_len());
        // Taking the message, into a shared buffer after another's header: the same frames.
        let mut buf = bytes::BytesMut::from(&b"before"[..]);
        prop_assert_eq!(m.clone().into_frames_in(&mut buf), frames.clone());
        if let Message::MetaRecord(r) = &m {
            // Borrowed (a producer's fast path): the same bytes.
            let r = r.as_ref();
            prop_assert_eq!(r.header_len(), m.header_len());
            let mut out = Vec::new();
            r.frames_with(&mut buf, &mut out);
            prop_assert_eq!(out, frames.clone());
        }
        prop_assert_eq!(Message::decode(&frames, &Limits::DEFAULT), Ok(m));
    }

    #[test]
    fn beacons_round_trip(b in beacon()) {
        prop_assert_eq!(BeaconMessage::decode(&b.to_frames(), &Limits::DEFAULT), Ok(b));
    }

    /// Valid messages with one byte of frame 1 changed, or frame 1 cut short: whatever still
    /// decodes re-encodes to the same bytes; nothing panics.
    #[test]
    fn damaged_messages_decode_to_what_they_encode(
        m in message(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let mut frames = m.to_frames();
        let mut header = frames[0].to_vec();
        let i = at.index(header.len());
        if cut {
            header.truncate(i);
        } else {
            header[i] = byte;
        }
        frames[0] = Bytes::from(header);
        let decoded = Message::decode(&frames, &Limits::DEFAULT);
        // Taking the frames (the node's receive path): the same outcome.
        prop_assert_eq!(&Message::decode_taking(&mut frames.clone(), &Limits::DEFAULT), &decoded);
        if let Ok(decoded) = decoded {
            prop_assert_eq!(decoded.to_frames(), frames);
        } else {
            prop_assert!(cut || header_changed(&m, &frames));
        }
    }

    #[test]
    fn arbitrary_frames_decode_to_what_they_encode(frames in frames()) {
        let limits = Limits::DEFAULT.with_max_content(256).with_max_topics(4);
        let decoded = Message::decode(&frames, &limits);
        prop_assert_eq!(&Message::decode_taking(&mut frames.clone(), &limits), &decoded);
        if let Ok(m) = decoded {
            prop_assert_eq!(m.to_frames(), frames.clone());
            if let Some(content) = m.content() {
                prop_assert!(content.len() <= 256);
            }
            if let Message::DirectRecords(d) = &m {
                prop_assert!(d.contents.iter().all(|c| c.len() <= 256));
                prop_assert!(d.first.checked_add(d.contents.len() as u64 - 1).is_some());
            }
            if let Message::ConsumerHello(c) = &m {
                prop_assert!(c.topics.len() <= 4);
            }
            if let Message::DirectMetaRecords(d) = &m {
                prop_assert_eq!(d.metas.len(), d.run.contents.len());
            }
        }
        if let Ok(b) = BeaconMessage::decode(&frames, &limits) {
            prop_assert_eq!(b.to_frames(), frames);
        }
    }
}

fn header_changed(m: &Message, frames: &[Bytes]) -> bool {
    m.to_frames()[0] != frames[0]
}
