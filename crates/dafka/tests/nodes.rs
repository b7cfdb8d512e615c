//! The nodes over real loopback TCP (127.0.0.1, ports 0): a tower, producers and consumers.
//! Tests that need a store (flush acknowledged by `min_acks` stores, "earliest" from a store)
//! belong with the store node.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
mod support;

use dafka_node::{
    ConsumerNode, ConsumerOptions, Error, NodeConfig, NodeId, ProducerNode, TowerAddress,
};
use dafka_proto::{BeaconMessage, Limits, Message, Record, Topic};
use dafka_zmtp::{Options, Socket, SocketType};
use support::{
    PATIENCE, announce, check_exactly_once, collect, fast, producer_options, tower, until,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_to_consumers_exactly_once_in_order() {
    let (tower, towers) = tower().await;
    let mut producers = Vec::new();
    for _ in 0..2 {
        producers.push(
            ProducerNode::start("orders", fast(&towers), producer_options())
                .await
                .unwrap(),
        );
    }
    let mut consumers = Vec::new();
    // The second holds at most 16 records unpolled: it stops reading and resumes as polled.
    for max_buffered in [100_000, 16] {
        let mut options = ConsumerOptions::default()
            .with_max_buffered(max_buffered)
            .with_fetch_retry(Duration::from_millis(50), Duration::from_millis(400));
        for p in &producers {
            options = options.with_start_offset("orders", p.partition(), 0);
        }
        consumers.push(
            ConsumerNode::start(&["orders"], fast(&towers), options)
                .await
                .unwrap(),
        );
    }
    // Some records go out before anyone is connected (recovered by HEAD -> FETCH), the rest
    // while the mesh forms and after.
    let mut sent = BTreeMap::new();
    for (i, p) in producers.iter().enumerate() {
        let values: Vec<Bytes> = (0..300)
            .map(|n| Bytes::from(format!("p{i}-r{n:04}")))
            .collect();
        let first = p.send_many(values[..100].iter().cloned()).await.unwrap();
        assert_eq!(first, 0);
        sent.insert(p.partition(), values);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for p in &producers {
        let values = &sent[&p.partition()];
        for (n, v) in values[100..].iter().enumerate() {
            assert_eq!(p.send(v.clone()).await.unwrap(), 100 + n as u64);
        }
    }
    for c in &consumers {
        let got = collect(c, 600).await;
        check_exactly_once(&got, &sent);
        // Nothing more comes: no duplicates.
        assert!(
            c.poll(10, Duration::from_millis(300))
                .await
                .unwrap()
                .is_empty()
        );
        let positions: HashSet<(NodeId, u64)> = c
            .positions()
            .iter()
            .map(|p| (p.partition, p.next))
            .collect();
        let expected: HashSet<(NodeId, u64)> =
            producers.iter().map(|p| (p.partition(), 300)).collect();
        assert_eq!(positions, expected);
    }
    for c in consumers {
        c.close().await;
    }
    for p in producers {
        p.close().await;
    }
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_consumer_gets_a_contiguous_run_from_its_first_record() {
    let (tower, towers) = tower().await;
    let producer = ProducerNode::start("ticks", fast(&towers), producer_options())
        .await
        .unwrap();
    let consumer = ConsumerNode::start(&["ticks"], fast(&towers), ConsumerOptions::default())
        .await
        .unwrap();
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut n = 0u64;
    while got.len() < 50 && tokio::time::Instant::now() < deadline {
        producer.send(Bytes::from(n.to_string())).await.unwrap();
        n += 1;
        got.extend(consumer.poll(100, Duration::from_millis(10)).await.unwrap());
    }
    got.extend(
        consumer
            .poll(usize::MAX, Duration::from_millis(300))
            .await
            .unwrap(),
    );
    assert!(got.len() >= 50, "got {}", got.len());
    // A batch closes at max_records, not at the timeout.
    producer.send(Bytes::from(n.to_string())).await.unwrap();
    let started = tokio::time::Instant::now();
    got.extend(consumer.poll(1, Duration::from_secs(3600)).await.unwrap());
    assert!(started.elapsed() < PATIENCE);
    let first = got[0].offset;
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.offset, first + i as u64);
        assert_eq!(r.value, Bytes::from(r.offset.to_string()));
        assert_eq!(r.partition, producer.partition());
    }
    consumer.close().await;
    producer.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_match_exactly() {
    let (tower, towers) = tower().await;
    let hello = ProducerNode::start("hello", fast(&towers), producer_options())
        .await
        .unwrap();
    let hello2 = ProducerNode::start("hello2", fast(&towers), producer_options())
        .await
        .unwrap();
    let consumer = ConsumerNode::start(
        &["hello"],
        fast(&towers),
        ConsumerOptions::default()
            .with_start_offset("hello", hello.partition(), 0)
            .with_start_offset("hello2", hello2.partition(), 0),
    )
    .await
    .unwrap();
    for n in 0..20u32 {
        hello.send(Bytes::from(format!("a{n}"))).await.unwrap();
        hello2.send(Bytes::from(format!("b{n}"))).await.unwrap();
    }
    let got = collect(&consumer, 20).await;
    assert_eq!(got.len(), 20);
    // The HEADs of hello2 keep coming; none of its records gets through.
    let more = consumer
        .poll(100, Duration::from_millis(500))
        .await
        .unwrap();
    assert!(more.is_empty());
    assert!(got.iter().all(|r| r.topic.as_bytes() == b"hello"));
    // After subscribing to hello2, its records come, from the explicit start at 0.
    consumer.subscribe("hello2").unwrap();
    let got = collect(&consumer, 20).await;
    assert_eq!(got.len(), 20);
    assert!(got.iter().all(|r| r.topic.as_bytes() == b"hello2"));
    // Unsubscribed from hello: its records stop, its position is forgotten.
    consumer.unsubscribe("hello").unwrap();
    for n in 20..30u32 {
        hello.send(Bytes::from(format!("a{n}"))).await.unwrap();
        hello2.send(Bytes::from(format!("b{n}"))).await.unwrap();
    }
    let got = collect(&consumer, 10).await;
    let offsets: Vec<u64> = got.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (20..30).collect::<Vec<_>>());
    assert!(got.iter().all(|r| r.topic.as_bytes() == b"hello2"));
    assert!(
        consumer
            .poll(100, Duration::from_millis(500))
            .await
            .unwrap()
            .is_empty()
    );
    let positions = consumer.positions();
    assert_eq!(positions.len(), 1);
    assert_eq!(
        (positions[0].partition, positions[0].next),
        (hello2.partition(), 30)
    );
    consumer.close().await;
    hello.close().await;
    hello2.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_do_not_stop_a_consumer() {
    let (tower, towers) = tower().await;
    let consumer = ConsumerNode::start(&["t"], fast(&towers), ConsumerOptions::default())
        .await
        .unwrap();
    // A raw peer: a PUB the consumer connects to once the tower announces it.
    let rogue = Socket::new(SocketType::Pub, Options::default()).unwrap();
    let endpoint = rogue.bind("tcp://127.0.0.1:0").await.unwrap();
    let port: u16 = endpoint.rsplit(':').next().unwrap().parse().unwrap();
    let rogue_id: NodeId = "00112233445566778899AABBCCDDEEFF".parse().unwrap();
    let beacon = announce(&towers, rogue_id, port).await;
    let record = |sequence: u64| {
        Message::Record(Record {
            producer: rogue_id,
            topic: Topic::try_from("t").unwrap(),
            sequence,
            content: Bytes::from(format!("ok{sequence}")),
        })
        .to_frames()
    };
    let garbage: Vec<Vec<Bytes>> = vec![
        vec![Bytes::from_static(b"Mt\x00\x01")], // fields cut
        vec![Bytes::from_static(b"Mt\x00\x02garbage"), Bytes::new()], // bad version
        vec![Bytes::from_static(b"Mt\x00\x01\x20zz")], // bad address
    ];
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut seq = 0;
    while got.is_empty() && tokio::time::Instant::now() < deadline {
        for g in &garbage {
            rogue.try_send(g.clone().into()).unwrap();
        }
        rogue.try_send(record(seq).into()).unwrap();
        seq += 1;
        got = consumer.poll(1, Duration::from_millis(100)).await.unwrap();
    }
    assert!(
        !got.is_empty(),
        "the consumer never got the rogue's good record"
    );
    // The garbage sent before the good record on the same connection came first.
    assert!(
        consumer.stats().malformed() >= 3,
        "{}",
        consumer.stats().malformed()
    );
    // It keeps working: the following records arrive in order.
    let first = got[0].offset;
    for _ in 0..5 {
        for g in &garbage {
            rogue.try_send(g.clone().into()).unwrap();
        }
        rogue.try_send(record(seq).into()).unwrap();
        seq += 1;
    }
    let more = collect(&consumer, (seq - first - 1) as usize).await;
    let offsets: Vec<u64> = more.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (first + 1..seq).collect::<Vec<_>>());
    beacon.close().await;
    rogue.close().await;
    consumer.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tower_forwards_beacons_and_welcomes() {
    let (tower, towers) = tower().await;
    let listener = Socket::new(SocketType::Sub, Options::default()).unwrap();
    listener.subscribe(b"B").unwrap();
    listener.subscribe(b"W").unwrap();
    listener.connect(&towers[0].publ).await.unwrap();
    let welcome = tokio::time::timeout(PATIENCE, listener.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        BeaconMessage::decode(welcome.frames(), &Limits::DEFAULT).unwrap(),
        BeaconMessage::Welcome
    );
    let node: NodeId = "986108951EB145A1BFBDC5601975F614".parse().unwrap();
    let beacon = announce(&towers, node, 49154).await;
    // Garbage on the XSUB first: the tower drops it and keeps forwarding.
    let bad = Socket::new(SocketType::Pub, Options::default()).unwrap();
    bad.connect(&towers[0].sub).await.unwrap();
    let mut forwarded = None;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while (forwarded.is_none() || tower.stats().malformed() == 0)
        && tokio::time::Instant::now() < deadline
    {
        bad.try_send(vec![Bytes::from_static(b"B"), Bytes::from_static(b"x")].into())
            .unwrap();
        bad.try_send(
            vec![
                Bytes::from_static(b"B"),
                Bytes::from_static(b"986108951EB145A1BFBDC5601975F614"),
                Bytes::new(),
                Bytes::from_static(b"1"),
            ]
            .into(),
        )
        .unwrap();
        if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(100), listener.recv()).await {
            forwarded.get_or_insert(m);
        }
    }
    let m = forwarded.expect("no tower beacon");
    // The exact bytes the reference tower sends (tests/data/dafka/messages.tsv, tower-beacon).
    assert_eq!(m.frames()[0], &b"B"[..]);
    assert_eq!(m.frames()[1], &b"986108951EB145A1BFBDC5601975F614"[..]);
    assert_eq!(m.frames()[2], &b"tcp://127.0.0.1:49154"[..]);
    assert_eq!(m.frames().len(), 3);
    assert!(tower.stats().malformed() >= 1);
    beacon.close().await;
    bad.close().await;
    listener.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_beacon_goes_out_at_once() {
    let (tower, towers) = tower().await;
    let listener = Socket::new(SocketType::Sub, Options::default()).unwrap();
    listener.subscribe(b"B").unwrap();
    listener.connect(&towers[0].publ).await.unwrap();
    // Let the tower's XSUB subscription path form before the node starts.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let producer = ProducerNode::start(
        "t",
        NodeConfig::new(towers.clone())
            .with_beacon_interval(Duration::from_secs(3600))
            .with_peer_timeout(Duration::from_secs(7200)),
        producer_options(),
    )
    .await
    .unwrap();
    let m = tokio::time::timeout(PATIENCE, listener.recv())
        .await
        .unwrap()
        .unwrap();
    let BeaconMessage::Tower(b) = BeaconMessage::decode(m.frames(), &Limits::DEFAULT).unwrap()
    else {
        panic!("not a tower beacon");
    };
    assert_eq!(b.node, producer.partition());
    assert_eq!(
        b.endpoint,
        format!("tcp://127.0.0.1:{}", producer.publisher_port())
    );
    producer.close().await;
    listener.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_towers() {
    let (t1, mut towers) = tower().await;
    let (t2, towers2) = tower().await;
    towers.extend(towers2);
    // The producer knows both towers, the consumer only the second.
    let producer = ProducerNode::start("x", fast(&towers), producer_options())
        .await
        .unwrap();
    let consumer = ConsumerNode::start(
        &["x"],
        fast(&towers[1..]),
        ConsumerOptions::default().with_start_offset("x", producer.partition(), 0),
    )
    .await
    .unwrap();
    producer.send(Bytes::from_static(b"v")).await.unwrap();
    let got = collect(&consumer, 1).await;
    assert_eq!(got.len(), 1);
    consumer.close().await;
    producer.close().await;
    t1.close().await;
    t2.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_times_out_on_a_full_buffer_and_flush_waits_for_stores() {
    let (tower, towers) = tower().await;
    let producer = ProducerNode::start(
        "t",
        fast(&towers),
        producer_options()
            .with_max_unacked_records(3)
            .with_send_timeout(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    assert_eq!(
        producer
            .send_many((0..3).map(|i| Bytes::from(vec![i])))
            .await
            .unwrap(),
        0
    );
    let started = tokio::time::Instant::now();
    match producer.send(Bytes::from_static(b"x")).await {
        Err(Error::SendTimeout { records: 3, .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(200));
    // No store: nothing is acknowledged.
    match producer.flush(Some(Duration::from_millis(100))).await {
        Err(Error::FlushTimeout { unacked: 3, .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(producer.next_offset(), 3);
    producer.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_dropped_mid_wait_loses_no_record() {
    let (tower, towers) = tower().await;
    let producer = ProducerNode::start("c", fast(&towers), producer_options())
        .await
        .unwrap();
    let consumer = ConsumerNode::start(
        &["c"],
        fast(&towers),
        ConsumerOptions::default()
            .with_start_offset("c", producer.partition(), 0)
            .with_fetch_retry(Duration::from_millis(50), Duration::from_millis(400)),
    )
    .await
    .unwrap();
    let values: Vec<Bytes> = (0..10u8).map(|i| Bytes::from(vec![i])).collect();
    producer.send_many(values.iter().cloned()).await.unwrap();
    // Wait for the ten to reach the consumer's queue without taking them.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while consumer.positions().first().map(|p| p.next) != Some(10) {
        assert!(tokio::time::Instant::now() < deadline, "records never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A poll wanting more than there is waits; it is dropped (as a losing `select!` branch,
    // a cancelled asyncio task or Ctrl-C drop it) while the ten are queued.
    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        consumer.poll(1000, Duration::from_secs(3600)),
    )
    .await;
    assert!(dropped.is_err(), "the poll returned: {dropped:?}");
    // Cancelled repeatedly, mid-wait each time, still nothing is lost.
    for _ in 0..5 {
        tokio::select! {
            r = consumer.poll(1000, Duration::from_secs(3600)) => panic!("{r:?}"),
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
    let got = consumer
        .poll(1000, Duration::from_millis(300))
        .await
        .unwrap();
    let got: Vec<Bytes> = got.into_iter().map(|r| r.value).collect();
    assert_eq!(got, values);
    consumer.close().await;
    producer.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_peers_are_dropped() {
    let (tower, towers) = tower().await;
    let consumer = ConsumerNode::start(
        &["t"],
        NodeConfig::new(towers.clone())
            .with_beacon_interval(Duration::from_millis(100))
            .with_peer_timeout(Duration::from_millis(400)),
        ConsumerOptions::default(),
    )
    .await
    .unwrap();
    let peer: NodeId = "00112233445566778899AABBCCDDEEFF".parse().unwrap();
    let beacon = announce(&towers, peer, 9).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
    assert!(
        consumer.stats().wait_peers(left(), |n| n == 1).await,
        "peer never learnt"
    );
    beacon.close().await;
    assert!(
        consumer.stats().wait_peers(left(), |n| n == 0).await,
        "silent peer kept"
    );
    consumer.close().await;
    tower.close().await;
}

#[test]
fn towers_string() {
    let t = TowerAddress::parse_list("tcp://127.0.0.1:5556, tcp://[::1]:7000").unwrap();
    assert_eq!(
        t[0],
        TowerAddress::new("tcp://127.0.0.1:5556", "tcp://127.0.0.1:5557")
    );
    assert_eq!(
        t[1],
        TowerAddress::new("tcp://[::1]:7000", "tcp://[::1]:7001")
    );
    assert!(TowerAddress::parse_list("udp://x:1").is_err());
    assert!(TowerAddress::parse_list("tcp://h:65535").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_send_queues_for_the_task_in_offset_order_and_hands_back_on_full() {
    let (tower, towers) = tower().await;
    // Beacons every 5 s and a HEAD every 3 s: little else wakes the producer's task, so a
    // record queued by `try_send` arrives within 0.5 s each time only if `try_send` wakes it.
    let slow = NodeConfig::new(towers.clone())
        .with_beacon_interval(Duration::from_secs(5))
        .with_peer_timeout(Duration::from_secs(60));
    let producer = ProducerNode::start(
        "q",
        slow.clone(),
        producer_options()
            .with_head_interval(Duration::from_secs(3))
            .with_max_unacked_records(40),
    )
    .await
    .unwrap();
    let consumer = ConsumerNode::start(
        &["q"],
        slow,
        ConsumerOptions::default()
            .with_start_offset("q", producer.partition(), 0)
            .with_fetch_retry(Duration::from_millis(50), Duration::from_millis(400)),
    )
    .await
    .unwrap();
    let values: Vec<Bytes> = (0..40u8).map(|i| Bytes::from(vec![i; 3])).collect();
    // The first beacons go out at once: wait for the consumer's subscription to reach the
    // producer (records published before that reach it only after the next HEAD).
    assert!(until(|| producer.live_readers() == 1).await);
    // try_send and send interleaved: one offset sequence, one order on the wire.
    for (i, v) in values[..10].iter().enumerate() {
        assert_eq!(producer.try_send(v.clone()).unwrap().unwrap(), i as u64);
    }
    assert_eq!(producer.send(values[10].clone()).await.unwrap(), 10);
    let got = collect(&consumer, 11).await;
    let offsets: Vec<u64> = got.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (0..11).collect::<Vec<_>>());
    // Alone, each queued record reaches the consumer well before the next beacon.
    for (i, v) in values[11..16].iter().enumerate() {
        let started = tokio::time::Instant::now();
        assert_eq!(
            producer.try_send(v.clone()).unwrap().unwrap(),
            11 + i as u64
        );
        let got = consumer.poll(1, Duration::from_secs(4)).await.unwrap();
        assert_eq!(got.len(), 1, "record {} never came", 11 + i);
        assert_eq!(got[0].value, *v);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "record {} took {:?}",
            11 + i,
            started.elapsed()
        );
    }
    for (i, v) in values[16..].iter().enumerate() {
        assert_eq!(
            producer.try_send(v.clone()).unwrap().unwrap(),
            16 + i as u64
        );
    }
    // No store: the 40 stay unacknowledged and the next is handed back.
    let extra = Bytes::from_static(b"extra");
    assert_eq!(producer.try_send(extra.clone()).unwrap(), Err(extra.into()));
    assert_eq!(producer.next_offset(), 40);
    let rest: Vec<Bytes> = collect(&consumer, 24)
        .await
        .into_iter()
        .map(|r| r.value)
        .collect();
    assert_eq!(rest, values[16..]);
    consumer.close().await;
    producer.close().await;
    tower.close().await;
}

/// One thread: the producer's task cannot run between the `try_send`s and the drop, so the
/// records are still queued when it learns it is stopped.
#[tokio::test(flavor = "current_thread")]
async fn records_queued_by_try_send_go_out_when_the_producer_is_dropped() {
    let (tower, towers) = tower().await;
    let producer = ProducerNode::start("d", fast(&towers), producer_options())
        .await
        .unwrap();
    let consumer = ConsumerNode::start(
        &["d"],
        fast(&towers),
        ConsumerOptions::default()
            .with_start_offset("d", producer.partition(), 0)
            .with_fetch_retry(Duration::from_millis(50), Duration::from_millis(400)),
    )
    .await
    .unwrap();
    // Wait for the consumer's subscription to reach the producer.
    assert!(until(|| producer.live_readers() == 1).await);
    let values: Vec<Bytes> = (0..5u8).map(|i| Bytes::from(vec![i; 4])).collect();
    for (i, v) in values.iter().enumerate() {
        assert_eq!(producer.try_send(v.clone()).unwrap().unwrap(), i as u64);
    }
    drop(producer);
    let got: Vec<Bytes> = collect(&consumer, values.len())
        .await
        .into_iter()
        .map(|r| r.value)
        .collect();
    assert_eq!(got, values);
    consumer.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_producer_announces_its_head_as_close_does() {
    // A producer dropped without `close` (a Python object collected, a task aborted) must say
    // where its partition ends, as `close` does: a consumer or store that lost the last
    // RECORDs otherwise never FETCHes them (no HEAD comes any more from a node that is gone).
    let (tower, towers) = tower().await;
    let producer = ProducerNode::start(
        "dh",
        fast(&towers),
        // No periodic HEAD within the test: only the one announced at the end can come.
        dafka_node::ProducerOptions::default().with_head_interval(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    let heads = Socket::new(SocketType::Sub, Options::default()).unwrap();
    heads.subscribe(b"H").unwrap();
    heads
        .connect(&format!("tcp://127.0.0.1:{}", producer.publisher_port()))
        .await
        .unwrap();
    // Let the subscription reach the producer's publisher.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..3u8 {
        producer.try_send(Bytes::from(vec![i; 4])).unwrap().unwrap();
    }
    drop(producer);
    let m = tokio::time::timeout(PATIENCE, heads.recv())
        .await
        .expect("no HEAD from the dropped producer")
        .unwrap();
    let Message::Head(h) = Message::decode(m.frames(), &Limits::DEFAULT).unwrap() else {
        panic!("not a HEAD");
    };
    assert_eq!((h.topic.as_bytes(), h.sequence), (&b"dh"[..], 2));
    heads.close().await;
    tower.close().await;
}

/// Issue 22: `dafka.Consumer(["x"], towers="tcp://127.0.0.1:5999")` with nothing there polled
/// empty batches for ever. With `connect_timeout` a producer and a consumer say that no tower
/// answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_whose_towers_never_answer_say_so_after_connect_timeout() {
    // Nothing listens on port 1 (nor 2) of loopback.
    let dead = NodeConfig::from_towers("tcp://127.0.0.1:1")
        .unwrap()
        .with_connect_timeout(Some(Duration::from_millis(300)));
    let consumer = ConsumerNode::start(&["x"], dead.clone(), ConsumerOptions::default())
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    // One long poll ends when the towers' time is up, not at its own timeout.
    match consumer.poll(10, Duration::from_secs(20)).await {
        Err(e @ Error::NoTower { .. }) => assert_eq!(
            e.to_string(),
            "no tower answered within 0.3 s at tcp://127.0.0.1:1 (is a tower running there? \
             each towers endpoint names a tower's SUB port)"
        ),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!consumer.stats().tower_answered());
    consumer.close().await;

    let producer = ProducerNode::start("x", dead, producer_options())
        .await
        .unwrap();
    assert_eq!(
        producer.send(Bytes::from_static(b"early")).await.unwrap(),
        0
    );
    match producer.flush(Some(Duration::from_secs(20))).await {
        Err(Error::NoTower { waited, .. }) => assert_eq!(waited, Duration::from_millis(300)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        producer.send(Bytes::from_static(b"late")).await,
        Err(Error::NoTower { .. })
    ));
    assert!(matches!(
        producer.try_send(Bytes::from_static(b"late")),
        Err(Error::NoTower { .. })
    ));
    producer.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_timeout_does_not_apply_once_a_tower_answered() {
    let (tower, towers) = tower().await;
    let config = fast(&towers).with_connect_timeout(Some(Duration::from_millis(200)));
    let consumer = ConsumerNode::start(&["t"], config.clone(), ConsumerOptions::default())
        .await
        .unwrap();
    let producer = ProducerNode::start("t", config, producer_options())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(consumer.stats().tower_answered());
    assert!(producer.stats().tower_answered());
    assert!(
        consumer
            .poll(10, Duration::from_millis(100))
            .await
            .unwrap()
            .is_empty()
    );
    producer.send(Bytes::from_static(b"v")).await.unwrap();
    // No store: the flush runs out of its own time, not the towers'.
    assert!(matches!(
        producer.flush(Some(Duration::from_millis(100))).await,
        Err(Error::FlushTimeout { unacked: 1, .. })
    ));
    consumer.close().await;
    producer.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_host_is_refused_it_is_what_peers_connect_to() {
    let towers = TowerAddress::parse_list("tcp://127.0.0.1:1").unwrap();
    for host in ["0.0.0.0", "::", "[::]", "*", ""] {
        let config = NodeConfig::new(towers.clone()).with_host(host);
        match ProducerNode::start("t", config, producer_options()).await {
            Err(e @ Error::Caller(_)) => assert!(e.to_string().contains("announces"), "{e}"),
            other => panic!("{host}: {other:?}"),
        }
    }
    let config = NodeConfig::new(towers).with_bind(Some(String::new()));
    assert!(matches!(
        ProducerNode::start("t", config, producer_options()).await,
        Err(Error::Caller(_))
    ));
}

/// Issue 22: no way to set the address a node announces (docs/spark.md tells users to start
/// stores "with a routable host"). `host` is announced; `bind`, when set, is where it listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_is_announced_and_bind_is_where_the_publisher_listens() {
    let (tower, towers) = tower().await;
    let watcher = Socket::new(
        SocketType::Sub,
        Options::default().with_linger(Some(Duration::ZERO)),
    )
    .unwrap();
    watcher.subscribe(b"B").unwrap();
    watcher.connect(&towers[0].publ).await.unwrap();
    let producer = ProducerNode::start(
        "t",
        fast(&towers)
            .with_host("127.0.0.2")
            .with_bind(Some("127.0.0.1".to_owned())),
        producer_options(),
    )
    .await
    .unwrap();
    let port = producer.publisher_port();
    let endpoint = tokio::time::timeout(PATIENCE, async {
        loop {
            let m = watcher.recv().await.unwrap();
            if let Ok(BeaconMessage::Tower(b)) = BeaconMessage::decode(m.frames(), &Limits::DEFAULT)
            {
                return b.endpoint;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(endpoint, format!("tcp://127.0.0.2:{port}"));
    // It listens on the bound address: a SUB there completes its handshake.
    let probe = Socket::new(
        SocketType::Sub,
        Options::default().with_linger(Some(Duration::ZERO)),
    )
    .unwrap();
    let mut events = probe.monitor(16);
    probe
        .connect(&format!("tcp://127.0.0.1:{port}"))
        .await
        .unwrap();
    tokio::time::timeout(PATIENCE, async {
        while !matches!(
            events.recv().await,
            Some(dafka_zmtp::SocketEvent::HandshakeSucceeded { .. })
        ) {}
    })
    .await
    .unwrap();
    probe.close().await;
    watcher.close().await;
    producer.close().await;
    tower.close().await;
}

/// `NodeConfig::local_inproc` (off by default): a producer and a consumer of one process
/// reach each other through the publisher's inproc alias, records flow exactly once, and the
/// alias is gone from the process's map once the producer closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_of_one_process_use_inproc_aliases_when_asked() {
    let (tower, towers) = tower().await;
    let local = fast(&towers).with_local_inproc(true);
    let producer = ProducerNode::start("local", local.clone(), producer_options())
        .await
        .unwrap();
    let endpoint = format!("tcp://127.0.0.1:{}", producer.publisher_port());
    let alias = dafka_zmtp::local::alias_of(&endpoint).expect("the publisher's alias");
    assert!(alias.starts_with("inproc://dafka-publisher-"), "{alias}");
    let consumer = ConsumerNode::start(
        &["local"],
        local,
        ConsumerOptions::default().with_start_offset("local", producer.partition(), 0),
    )
    .await
    .unwrap();
    assert!(until(|| producer.live_readers() == 1).await);
    let values: Vec<Bytes> = (0..100u8).map(|i| Bytes::from(vec![i; 8])).collect();
    producer.send_many(values.iter().cloned()).await.unwrap();
    let got = collect(&consumer, values.len()).await;
    check_exactly_once(&got, &BTreeMap::from([(producer.partition(), values)]));
    producer.close().await;
    assert_eq!(dafka_zmtp::local::alias_of(&endpoint), None);
    // Without the setting, nothing is registered.
    let tcp = ProducerNode::start("local", fast(&towers), producer_options())
        .await
        .unwrap();
    let endpoint = format!("tcp://127.0.0.1:{}", tcp.publisher_port());
    assert_eq!(dafka_zmtp::local::alias_of(&endpoint), None);
    tcp.close().await;
    consumer.close().await;
    tower.close().await;
}
