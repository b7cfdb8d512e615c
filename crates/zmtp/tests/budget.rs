//! The bytes unauthenticated peers hold in incomplete frames and messages share one
//! process-wide budget (issue 21, item 3): a stranger that would pass it is closed, the others
//! keep theirs, and authenticated (CURVE) peers are not counted. The budget is process-wide, so
//! this binary holds this one test.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use dafka_zmtp::{Authenticator, CurveKeyPair, MechanismConfig, Message, Socket, SocketType};

/// The budget's total once it has not moved for 200 ms.
async fn settled_held() -> usize {
    let mut last = dafka_zmtp::unauthenticated_held();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = dafka_zmtp::unauthenticated_held();
        if now == last {
            return now;
        }
        last = now;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_share_one_budget_and_authenticated_peers_are_not_counted() {
    const MIB: usize = 1 << 20;
    dafka_zmtp::set_unauthenticated_budget(4 * MIB);
    let pull = Socket::new(SocketType::Pull, linger0()).unwrap();
    let ep = pull.bind("tcp://127.0.0.1:0").await.unwrap();
    let addr = addr_of(&ep);
    let base = dafka_zmtp::unauthenticated_held();
    // Two strangers hold 1.5 MiB each of a 16 MiB frame: within the 4 MiB.
    let mut first = raw_peer(addr, "PUSH", &partial_frame(16 << 20, 3 * MIB / 2)).await;
    let mut second = raw_peer(addr, "PUSH", &partial_frame(16 << 20, 3 * MIB / 2)).await;
    // (The last bytes of each may stay in the kernel below the receive low-water mark: not
    // ours to count.)
    let held = settled_held().await - base;
    assert!((MIB..=3 * MIB + 4096).contains(&held), "{held}");
    // A third would take the process past it: closed, the others keep theirs.
    let mut third = raw_peer(addr, "PUSH", &partial_frame(16 << 20, 8 * MIB)).await;
    assert!(
        closed_within(&mut third, Duration::from_secs(3)).await,
        "a stranger past the budget must be closed"
    );
    assert!(!closed_within(&mut first, Duration::from_millis(200)).await);
    assert!(!closed_within(&mut second, Duration::from_millis(200)).await);
    let held = dafka_zmtp::unauthenticated_held() - base;
    assert!(held < 4 * MIB, "{held}");
    // Small messages from a stranger still pass.
    let push = Socket::new(SocketType::Push, linger0()).unwrap();
    push.connect(&ep).await.unwrap();
    send(&push, msg(&[b"small"])).await;
    assert_eq!(frames(&recv(&pull).await), vec![b"small".to_vec()]);

    // An authenticated peer (CURVE) is not counted: 8 MiB messages pass while strangers hold
    // most of the budget.
    let server_keys = CurveKeyPair::generate();
    let client_keys = CurveKeyPair::generate();
    let secure = Socket::new(
        SocketType::Pull,
        linger0().with_mechanism(MechanismConfig::CurveServer {
            keypair: server_keys.clone(),
            authenticator: Authenticator::curve_keys([*client_keys.public()]),
        }),
    )
    .unwrap();
    let secure_ep = secure.bind("tcp://127.0.0.1:0").await.unwrap();
    let client = Socket::new(
        SocketType::Push,
        linger0().with_mechanism(MechanismConfig::CurveClient {
            keypair: client_keys,
            server_key: *server_keys.public(),
        }),
    )
    .unwrap();
    client.connect(&secure_ep).await.unwrap();
    for i in 0..3u8 {
        send(&client, Message::from(Bytes::from(vec![i; 8 * MIB]))).await;
        let m = tokio::time::timeout(Duration::from_secs(10), secure.recv())
            .await
            .expect("an authenticated peer's large message never came")
            .unwrap();
        assert_eq!(m.frames()[0].len(), 8 * MIB);
    }
    // The strangers leave: their bytes go back to the budget.
    drop((first, second));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while dafka_zmtp::unauthenticated_held() > base && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(dafka_zmtp::unauthenticated_held(), base);
    client.close().await;
    secure.close().await;
    push.close().await;
    pull.close().await;
    dafka_zmtp::set_unauthenticated_budget(dafka_zmtp::DEFAULT_UNAUTHENTICATED_BUDGET);
}
