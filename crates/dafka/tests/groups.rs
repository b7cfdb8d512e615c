//! Consumer groups over real loopback TCP: members share the partitions of their topics, a
//! member that joins takes a share, one that closes gives its share up at once, and every
//! record is read once while the group is stable.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use dafka_node::{
    ConsumerNode, ConsumerOptions, GroupOptions, NodeId, OffsetReset, ProducerNode, Topic,
};
use support::{PATIENCE, fast, producer_options, store_with, tower, until};

const SESSION: Duration = Duration::from_secs(2);

async fn member(towers: &[dafka_node::TowerAddress]) -> ConsumerNode {
    ConsumerNode::start(
        &["shared"],
        fast(towers),
        ConsumerOptions::default()
            .with_offset_reset(OffsetReset::Earliest)
            .with_group(
                GroupOptions::new("billing")
                    .with_session_timeout(SESSION)
                    .with_auto_commit(Some(Duration::from_millis(300))),
            ),
    )
    .await
    .unwrap()
}

/// A member whose queue holds at most `max_buffered` records.
async fn member_buffering(
    towers: &[dafka_node::TowerAddress],
    max_buffered: usize,
) -> ConsumerNode {
    ConsumerNode::start(
        &["shared"],
        fast(towers),
        ConsumerOptions::default()
            .with_offset_reset(OffsetReset::Earliest)
            .with_max_buffered(max_buffered)
            .with_group(GroupOptions::new("billing").with_session_timeout(SESSION)),
    )
    .await
    .unwrap()
}

/// Twelve producers of topic "shared" (twelve partitions), `records` records each, stored.
async fn twelve_partitions(towers: &[dafka_node::TowerAddress], records: u32) -> Vec<ProducerNode> {
    let mut producers = Vec::new();
    for p in 0..12u32 {
        let producer = ProducerNode::start("shared", fast(towers), producer_options())
            .await
            .unwrap();
        producer
            .send_many((0..records).map(|i| Bytes::from(format!("{p}-{i}"))))
            .await
            .unwrap();
        producers.push(producer);
    }
    for p in &producers {
        p.flush(Some(PATIENCE)).await.unwrap();
    }
    producers
}

/// Every partition owned by exactly one member, and the members' loads.
fn loads(members: &[&ConsumerNode]) -> (Vec<usize>, bool) {
    let mut seen = BTreeSet::new();
    let mut once = true;
    let loads = members
        .iter()
        .map(|m| {
            let owned = m.assignment();
            for p in &owned {
                once &= seen.insert(p.clone());
            }
            owned.len()
        })
        .collect();
    (loads, once && seen.len() == 12)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_twelve_partitions_a_fourth_takes_a_share_a_closed_ones_move() {
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), &towers, dafka_store::Config::default()).await;
    // Twelve partitions: twelve producers of topic "shared", five records each.
    let producers = twelve_partitions(&towers, 5).await;
    // A node listening to every group's heartbeats, in no group (what `dafka groups` runs).
    let observer = ConsumerNode::start(
        &[],
        fast(&towers),
        ConsumerOptions::default().with_offset_reset(OffsetReset::Assigned),
    )
    .await
    .unwrap();
    observer.observe_groups(SESSION).unwrap();
    let (a, b, c) = (
        member(&towers).await,
        member(&towers).await,
        member(&towers).await,
    );
    assert!(
        until(|| loads(&[&a, &b, &c]) == (vec![4, 4, 4], true)).await,
        "not shared 4/4/4: {:?}",
        loads(&[&a, &b, &c])
    );
    assert_eq!(a.group_members().len(), 3);
    let heard = || {
        observer
            .observed_groups()
            .into_iter()
            .map(|(g, members)| (g.to_string(), members))
            .collect::<Vec<_>>()
    };
    let mut ids = vec![a.id(), b.id(), c.id()];
    ids.sort();
    assert!(
        until(|| heard() == vec![("billing".to_owned(), ids.clone())]).await,
        "{:?}",
        heard()
    );
    // Each member reads its partitions, and only those: every record once.
    let mut got: BTreeMap<(Topic, NodeId), Vec<u64>> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while got.values().map(Vec::len).sum::<usize>() < 60 && tokio::time::Instant::now() < deadline {
        for m in [&a, &b, &c] {
            for r in m.poll(100, Duration::from_millis(50)).await.unwrap() {
                assert!(
                    m.assignment().contains(&(r.topic.clone(), r.partition)),
                    "a record of a partition the member does not own"
                );
                got.entry((r.topic, r.partition))
                    .or_default()
                    .push(r.offset);
            }
        }
    }
    assert_eq!(got.len(), 12, "{got:?}");
    assert!(got.values().all(|o| *o == vec![0, 1, 2, 3, 4]), "{got:?}");
    // A fourth joins and takes a share.
    let d = member(&towers).await;
    assert!(
        until(|| loads(&[&a, &b, &c, &d]) == (vec![3, 3, 3, 3], true)).await,
        "not shared 3/3/3/3: {:?}",
        loads(&[&a, &b, &c, &d])
    );
    // One closes: its share moves to the others within the session timeout.
    let closed_at = tokio::time::Instant::now();
    b.close().await;
    assert!(
        until(|| loads(&[&a, &c, &d]) == (vec![4, 4, 4], true)).await,
        "not shared 4/4/4 after a close: {:?}",
        loads(&[&a, &c, &d])
    );
    assert!(closed_at.elapsed() < SESSION, "{:?}", closed_at.elapsed());
    let mut ids = vec![a.id(), c.id(), d.id()];
    ids.sort();
    assert!(
        until(|| heard() == vec![("billing".to_owned(), ids.clone())]).await,
        "the closed member left the observer's view too: {:?}",
        heard()
    );
    observer.close().await;
    for m in [a, c, d] {
        m.close().await;
    }
    for p in producers {
        p.close().await;
    }
    store.close().await;
    tower.close().await;
}

/// A member that stops without closing (its node dropped, as a crash: no leaving heartbeat,
/// no last commit): after the session timeout the other takes its partitions over from their
/// last commit. Every record is read at least once, and only records after that commit
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_members_partitions_resume_from_its_last_commit() {
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), &towers, dafka_store::Config::default()).await;
    let mut producers = Vec::new();
    for _ in 0..4 {
        producers.push(
            ProducerNode::start("shared", fast(&towers), producer_options())
                .await
                .unwrap(),
        );
    }
    let send = |round: u32| {
        let producers = &producers;
        async move {
            for (p, producer) in producers.iter().enumerate() {
                let values = (0..5u32).map(move |i| Bytes::from(format!("{p}-{round}-{i}")));
                producer.send_many(values).await.unwrap();
                producer.flush(Some(PATIENCE)).await.unwrap();
            }
        }
    };
    send(0).await;
    let (a, b) = (member(&towers).await, member(&towers).await);
    let shared = |m: &[&ConsumerNode]| {
        let owned: Vec<usize> = m.iter().map(|m| m.assignment().len()).collect();
        owned.iter().sum::<usize>() == 4 && owned.iter().all(|n| *n == 4 / m.len())
    };
    assert!(until(|| shared(&[&a, &b])).await);
    let mut seen: Vec<(NodeId, u64)> = Vec::new();
    fn read(
        seen: &mut Vec<(NodeId, u64)>,
        m: &ConsumerNode,
        records: Vec<dafka_node::ConsumerRecord>,
    ) {
        for r in records {
            assert!(m.assignment().contains(&(r.topic.clone(), r.partition)));
            seen.push((r.partition, r.offset));
        }
    }
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while seen.len() < 20 && tokio::time::Instant::now() < deadline {
        for m in [&a, &b] {
            let got = m.poll(100, Duration::from_millis(50)).await.unwrap();
            read(&mut seen, m, got);
        }
    }
    assert_eq!(seen.len(), 20);
    // Polling again says the first round was processed (what auto-commit commits: records of
    // earlier polls, never those the application may still be working on); B's auto-commit
    // (every 300 ms) then has it. Then B reads part of a second round and crashes.
    for m in [&a, &b] {
        assert!(
            m.poll(1, Duration::from_millis(10))
                .await
                .unwrap()
                .is_empty()
        );
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let b_parts: BTreeSet<NodeId> = b.assignment().into_iter().map(|(_, p)| p).collect();
    send(1).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut b_late = 0;
    while b_late < 3 && tokio::time::Instant::now() < deadline {
        let got = b.poll(3 - b_late, Duration::from_millis(50)).await.unwrap();
        b_late += got.len();
        read(&mut seen, &b, got);
    }
    drop(b);
    // A takes B's partitions after the session timeout and reads what B did not commit.
    assert!(until(|| shared(&[&a])).await, "{:?}", a.assignment());
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let all = |seen: &[(NodeId, u64)]| seen.iter().collect::<BTreeSet<_>>().len() == 40;
    while !all(&seen) && tokio::time::Instant::now() < deadline {
        let got = a.poll(100, Duration::from_millis(50)).await.unwrap();
        read(&mut seen, &a, got);
    }
    assert!(all(&seen), "every record read at least once");
    let mut count: BTreeMap<(NodeId, u64), usize> = BTreeMap::new();
    for r in &seen {
        *count.entry(*r).or_default() += 1;
    }
    let twice: Vec<&(NodeId, u64)> = count
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| k)
        .collect();
    assert!(
        twice.iter().all(|(p, o)| b_parts.contains(p) && *o >= 5),
        "only B's uncommitted records twice: {twice:?}"
    );
    assert!(twice.len() <= 3, "{twice:?}");
    a.close().await;
    for p in producers {
        p.close().await;
    }
    store.close().await;
    tower.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_group_settings_are_refused_at_the_start() {
    let (tower, towers) = tower().await;
    let start = |group: GroupOptions| {
        ConsumerNode::start(
            &["t"],
            fast(&towers),
            ConsumerOptions::default().with_group(group),
        )
    };
    for bad in [
        GroupOptions::new(""),
        GroupOptions::new("x".repeat(256)),
        GroupOptions::new("g").with_auto_commit(Some(Duration::ZERO)),
    ] {
        let err = start(bad).await.unwrap_err();
        assert!(
            matches!(
                err,
                dafka_node::Error::GroupName(_) | dafka_node::Error::Caller(_)
            ),
            "{err}"
        );
    }
    tower.close().await;
}

/// A member whose application is behind (it does not poll: its queue is full, so its node
/// reads nothing, heartbeats included) for three session timeouts: it keeps its share and
/// takes no other member's (it does not drop the others for a silence it could not hear);
/// the other keeps it (its heartbeats go out from the timer). Polling again, it reads its
/// own partitions only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_application_is_behind_keeps_its_share_and_no_more() {
    let (tower, towers) = tower().await;
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), &towers, dafka_store::Config::default()).await;
    let producers = twelve_partitions(&towers, 20).await;
    let slow = member_buffering(&towers, 8).await;
    let other = member(&towers).await;
    assert!(
        until(|| loads(&[&slow, &other]) == (vec![6, 6], true)).await,
        "not shared 6/6: {:?}",
        loads(&[&slow, &other])
    );
    let mine = slow.assignment();
    // Its queue fills (6 partitions of 20 records, room for 8) and it stops reading.
    let behind = tokio::time::Instant::now();
    while behind.elapsed() < 3 * SESSION {
        other.poll(100, Duration::from_millis(50)).await.unwrap();
        assert_eq!(
            slow.group_members().len(),
            2,
            "the slow member dropped the other after {:?}",
            behind.elapsed()
        );
        assert_eq!(slow.assignment(), mine, "the slow member's share changed");
        assert_eq!(other.assignment().len(), 6, "{:?}", other.assignment());
    }
    assert_eq!(other.group_members().len(), 2);
    let mut got: BTreeMap<(Topic, NodeId), Vec<u64>> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while got.values().map(Vec::len).sum::<usize>() < 6 * 20
        && tokio::time::Instant::now() < deadline
    {
        for r in slow.poll(100, Duration::from_millis(50)).await.unwrap() {
            assert!(
                mine.contains(&(r.topic.clone(), r.partition)),
                "another's record"
            );
            got.entry((r.topic, r.partition))
                .or_default()
                .push(r.offset);
        }
    }
    let every: Vec<u64> = (0..20).collect();
    assert!(
        got.len() == 6 && got.values().all(|o| *o == every),
        "each of its partitions once, in order: {got:?}"
    );
    // Listening again: the other stays in its view (its heartbeats read, the time deaf not
    // counted against it).
    let back = tokio::time::Instant::now();
    while back.elapsed() < SESSION {
        assert_eq!(slow.group_members().len(), 2, "the other was dropped");
        slow.poll(100, Duration::from_millis(100)).await.unwrap();
    }
    for m in [slow, other] {
        m.close().await;
    }
    for p in producers {
        p.close().await;
    }
    store.close().await;
    tower.close().await;
}
