//! Interop with the real libzmq (through the `zmq` crate, system libzmq from
//! Debian's `libzmq3-dev`): every socket pair, with our socket on either side
//! and either side binding.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use dafka_zmtp::{Message, Options, Socket, SocketType};

/// One end of a pair: ours or libzmq's.
#[derive(Clone)]
enum Peer {
    Ours(Socket),
    Zmq(Arc<Mutex<zmq::Socket>>),
}

fn zmq_type(t: SocketType) -> zmq::SocketType {
    match t {
        SocketType::Req => zmq::REQ,
        SocketType::Rep => zmq::REP,
        SocketType::Dealer => zmq::DEALER,
        SocketType::Router => zmq::ROUTER,
        SocketType::Pub => zmq::PUB,
        SocketType::Sub => zmq::SUB,
        SocketType::Xpub => zmq::XPUB,
        SocketType::Xsub => zmq::XSUB,
        SocketType::Push => zmq::PUSH,
        SocketType::Pull => zmq::PULL,
        SocketType::Pair => zmq::PAIR,
    }
}

fn context() -> &'static zmq::Context {
    static CTX: std::sync::OnceLock<zmq::Context> = std::sync::OnceLock::new();
    CTX.get_or_init(zmq::Context::new)
}

impl Peer {
    fn new(ours: bool, t: SocketType, id: Option<&'static [u8]>) -> Peer {
        if ours {
            let opts = Options::default()
                .with_routing_id(id.map(Bytes::from_static))
                .with_linger(Some(Duration::ZERO))
                .with_router_mandatory(t == SocketType::Router);
            Peer::Ours(Socket::new(t, opts).unwrap())
        } else {
            let s = context().socket(zmq_type(t)).unwrap();
            s.set_linger(0).unwrap();
            s.set_rcvtimeo(10_000).unwrap();
            s.set_sndtimeo(10_000).unwrap();
            if let Some(id) = id {
                s.set_identity(id).unwrap();
            }
            if t == SocketType::Router {
                s.set_router_mandatory(true).unwrap();
            }
            Peer::Zmq(Arc::new(Mutex::new(s)))
        }
    }

    async fn bind(&self) -> String {
        match self {
            Peer::Ours(s) => s.bind("tcp://127.0.0.1:0").await.unwrap(),
            Peer::Zmq(z) => {
                let z = z.lock().unwrap();
                z.bind("tcp://127.0.0.1:*").unwrap();
                z.get_last_endpoint().unwrap().unwrap()
            }
        }
    }

    async fn connect(&self, ep: &str) {
        match self {
            Peer::Ours(s) => s.connect(ep).await.unwrap(),
            Peer::Zmq(z) => z.lock().unwrap().connect(ep).unwrap(),
        }
    }

    /// Send; `Err(())` if the peer is not routable yet (ROUTER mandatory).
    async fn try_send(&self, frames: &[&[u8]]) -> Result<(), ()> {
        match self {
            Peer::Ours(s) => {
                let m: Message = frames.iter().map(|f| Bytes::copy_from_slice(f)).collect();
                match s.send(m).await {
                    Ok(()) => Ok(()),
                    Err(dafka_zmtp::Error::HostUnreachable(_)) => Err(()),
                    Err(e) => panic!("send: {e}"),
                }
            }
            Peer::Zmq(z) => {
                let z = z.clone();
                let frames: Vec<Vec<u8>> = frames.iter().map(|f| f.to_vec()).collect();
                tokio::task::spawn_blocking(move || {
                    match z.lock().unwrap().send_multipart(frames, 0) {
                        Ok(()) => Ok(()),
                        Err(zmq::Error::EHOSTUNREACH) => Err(()),
                        Err(e) => panic!("zmq send: {e}"),
                    }
                })
                .await
                .unwrap()
            }
        }
    }

    async fn send(&self, frames: &[&[u8]]) {
        self.try_send(frames).await.expect("unroutable");
    }

    /// Send until routable (ROUTER to a peer whose handshake is pending).
    async fn send_when_routable(&self, frames: &[&[u8]]) {
        for _ in 0..1000 {
            if self.try_send(frames).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("peer never became routable");
    }

    async fn recv_timeout(&self, ms: u64) -> Option<Vec<Vec<u8>>> {
        match self {
            Peer::Ours(s) => tokio::time::timeout(Duration::from_millis(ms), s.recv())
                .await
                .ok()
                .map(|r| common::frames(&r.unwrap())),
            Peer::Zmq(z) => {
                let z = z.clone();
                tokio::task::spawn_blocking(move || {
                    let z = z.lock().unwrap();
                    z.set_rcvtimeo(ms as i32).unwrap();
                    let r = z.recv_multipart(0);
                    z.set_rcvtimeo(10_000).unwrap();
                    match r {
                        Ok(m) => Some(m),
                        Err(zmq::Error::EAGAIN) => None,
                        Err(e) => panic!("zmq recv: {e}"),
                    }
                })
                .await
                .unwrap()
            }
        }
    }

    async fn recv(&self) -> Vec<Vec<u8>> {
        self.recv_timeout(10_000).await.expect("recv timed out")
    }

    fn subscribe(&self, prefix: &[u8]) {
        match self {
            Peer::Ours(s) => s.subscribe(prefix).unwrap(),
            Peer::Zmq(z) => z.lock().unwrap().set_subscribe(prefix).unwrap(),
        }
    }

    fn unsubscribe(&self, prefix: &[u8]) {
        match self {
            Peer::Ours(s) => s.unsubscribe(prefix).unwrap(),
            Peer::Zmq(z) => z.lock().unwrap().set_unsubscribe(prefix).unwrap(),
        }
    }
}

fn v(items: &[&[u8]]) -> Vec<Vec<u8>> {
    items.iter().map(|i| i.to_vec()).collect()
}

/// Build a pair: `a` of type `ta` binds, `b` of type `tb` connects.
/// `a_ours` says which side is ours.
async fn setup(
    ta: SocketType,
    ida: Option<&'static [u8]>,
    tb: SocketType,
    idb: Option<&'static [u8]>,
    a_ours: bool,
) -> (Peer, Peer) {
    let a = Peer::new(a_ours, ta, ida);
    let b = Peer::new(!a_ours, tb, idb);
    let ep = a.bind().await;
    b.connect(&ep).await;
    (a, b)
}

/// Publish probes until `sub` gets one, then drain up to a marker.
async fn sync_sub(publisher: &Peer, sub: &Peer, topic: &[u8]) {
    let mut probe = topic.to_vec();
    probe.extend_from_slice(b"-probe");
    loop {
        publisher.send(&[&probe]).await;
        if sub.recv_timeout(30).await.is_some() {
            break;
        }
    }
    let mut marker = topic.to_vec();
    marker.extend_from_slice(b"-marker");
    publisher.send(&[&marker]).await;
    while sub.recv().await[0] != marker {}
}

async fn req_rep(a_ours: bool) {
    // REP binds, REQ connects.
    let (rep, req) = setup(SocketType::Rep, None, SocketType::Req, None, a_ours).await;
    for i in 0..3u8 {
        req.send(&[b"hello", &[i], b""]).await;
        assert_eq!(rep.recv().await, v(&[b"hello", &[i], b""]));
        rep.send(&[b"world"]).await;
        assert_eq!(req.recv().await, v(&[b"world"]));
    }
}

async fn req_router(a_ours: bool) {
    let (router, req) = setup(
        SocketType::Router,
        None,
        SocketType::Req,
        Some(b"R1"),
        a_ours,
    )
    .await;
    req.send(&[b"q"]).await;
    assert_eq!(router.recv().await, v(&[b"R1", b"", b"q"]));
    router.send(&[b"R1", b"", b"a"]).await;
    assert_eq!(req.recv().await, v(&[b"a"]));
}

async fn req_router_anonymous(a_ours: bool) {
    let (router, req) = setup(SocketType::Router, None, SocketType::Req, None, a_ours).await;
    req.send(&[b"q"]).await;
    let got = router.recv().await;
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].len(), 5, "0x00 + 32-bit generated id");
    assert_eq!(got[0][0], 0);
    let id = got[0].clone();
    router.send(&[&id, b"", b"a"]).await;
    assert_eq!(req.recv().await, v(&[b"a"]));
}

async fn dealer_rep(a_ours: bool) {
    let (rep, dealer) = setup(SocketType::Rep, None, SocketType::Dealer, None, a_ours).await;
    dealer.send(&[b"", b"x", b"y"]).await;
    assert_eq!(rep.recv().await, v(&[b"x", b"y"]));
    rep.send(&[b"z"]).await;
    assert_eq!(dealer.recv().await, v(&[b"", b"z"]));
}

async fn dealer_router(a_ours: bool) {
    let (router, dealer) = setup(
        SocketType::Router,
        None,
        SocketType::Dealer,
        Some(b"D"),
        a_ours,
    )
    .await;
    dealer.send(&[b"1", b"2"]).await;
    assert_eq!(router.recv().await, v(&[b"D", b"1", b"2"]));
    router.send(&[b"D", b"3"]).await;
    assert_eq!(dealer.recv().await, v(&[b"3"]));
}

async fn router_router(a_ours: bool) {
    let (server, client) = setup(
        SocketType::Router,
        Some(b"SRV"),
        SocketType::Router,
        Some(b"CLI"),
        a_ours,
    )
    .await;
    client.send_when_routable(&[b"SRV", b"hi"]).await;
    assert_eq!(server.recv().await, v(&[b"CLI", b"hi"]));
    server.send(&[b"CLI", b"yo"]).await;
    assert_eq!(client.recv().await, v(&[b"SRV", b"yo"]));
}

async fn pub_sub(a_ours: bool) {
    let (publisher, sub) = setup(SocketType::Pub, None, SocketType::Sub, None, a_ours).await;
    sub.subscribe(b"a");
    sync_sub(&publisher, &sub, b"a").await;
    publisher.send(&[b"b"]).await;
    publisher.send(&[b"a1", b"x"]).await;
    assert_eq!(sub.recv().await, v(&[b"a1", b"x"]));
    sub.unsubscribe(b"a");
    sub.subscribe(b"c");
    sync_sub(&publisher, &sub, b"c").await;
    publisher.send(&[b"a2"]).await;
    publisher.send(&[b"c1"]).await;
    assert_eq!(sub.recv().await, v(&[b"c1"]));
}

async fn xpub_xsub(a_ours: bool) {
    let (xpub, xsub) = setup(SocketType::Xpub, None, SocketType::Xsub, None, a_ours).await;
    xsub.send(&[b"\x01t"]).await;
    assert_eq!(xpub.recv().await, v(&[b"\x01t"]));
    xpub.send(&[b"u"]).await;
    xpub.send(&[b"t1"]).await;
    assert_eq!(xsub.recv().await, v(&[b"t1"]));
    xsub.send(&[b"\x00t"]).await;
    assert_eq!(xpub.recv().await, v(&[b"\x00t"]));
}

async fn pub_xsub(a_ours: bool) {
    let (publisher, xsub) = setup(SocketType::Pub, None, SocketType::Xsub, None, a_ours).await;
    xsub.send(&[b"\x01k"]).await;
    sync_sub(&publisher, &xsub, b"k").await;
    publisher.send(&[b"j"]).await;
    publisher.send(&[b"k2"]).await;
    assert_eq!(xsub.recv().await, v(&[b"k2"]));
}

async fn xpub_sub(a_ours: bool) {
    let (xpub, sub) = setup(SocketType::Xpub, None, SocketType::Sub, None, a_ours).await;
    sub.subscribe(b"s");
    assert_eq!(xpub.recv().await, v(&[b"\x01s"]));
    xpub.send(&[b"s1"]).await;
    assert_eq!(sub.recv().await, v(&[b"s1"]));
    sub.unsubscribe(b"s");
    assert_eq!(xpub.recv().await, v(&[b"\x00s"]));
}

async fn push_pull(a_ours: bool) {
    let (pull, push) = setup(SocketType::Pull, None, SocketType::Push, None, a_ours).await;
    let big = vec![0x5au8; 300 * 1024];
    push.send(&[b"", &big, b""]).await;
    assert_eq!(pull.recv().await, v(&[b"", &big, b""]));
    for i in 0..2000u32 {
        push.send(&[&i.to_be_bytes()]).await;
    }
    for i in 0..2000u32 {
        assert_eq!(pull.recv().await, v(&[&i.to_be_bytes()]));
    }
}

async fn pair_pair(a_ours: bool) {
    let (a, b) = setup(SocketType::Pair, None, SocketType::Pair, None, a_ours).await;
    b.send(&[b"1"]).await;
    assert_eq!(a.recv().await, v(&[b"1"]));
    a.send(&[b"2", b"3"]).await;
    assert_eq!(b.recv().await, v(&[b"2", b"3"]));
}

/// Heartbeats both ways (libzmq PINGs with a TTL, we PING too): traffic
/// keeps flowing and nobody drops the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_with_libzmq() {
    let ours = Socket::new(
        SocketType::Dealer,
        Options::default()
            .with_heartbeat_ivl(Some(Duration::from_millis(30)))
            .with_heartbeat_ttl(Some(Duration::from_millis(500)))
            .with_heartbeat_timeout(Some(Duration::from_millis(200)))
            .with_linger(Some(Duration::ZERO)),
    )
    .unwrap();
    let ep = ours.bind("tcp://127.0.0.1:0").await.unwrap();
    let z = context().socket(zmq::DEALER).unwrap();
    z.set_linger(0).unwrap();
    z.set_rcvtimeo(5000).unwrap();
    z.set_heartbeat_ivl(30).unwrap();
    z.set_heartbeat_ttl(500).unwrap();
    z.set_heartbeat_timeout(200).unwrap();
    z.connect(&ep).unwrap();
    let z = Peer::Zmq(Arc::new(Mutex::new(z)));
    let ours = Peer::Ours(ours);
    for round in 0..4u8 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        z.send(&[&[round]]).await;
        assert_eq!(ours.recv().await, v(&[&[round]]));
        ours.send(&[&[round, round]]).await;
        assert_eq!(z.recv().await, v(&[&[round, round]]));
    }
}

/// ipc:// with libzmq on both sides of a PUSH/PULL pair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipc_push_pull_with_libzmq() {
    for ours_binds in [true, false] {
        let ep = common::bind_endpoint("ipc");
        let pull = Peer::new(ours_binds, SocketType::Pull, None);
        let push = Peer::new(!ours_binds, SocketType::Push, None);
        match &pull {
            Peer::Ours(s) => {
                s.bind(&ep).await.unwrap();
            }
            Peer::Zmq(z) => z.lock().unwrap().bind(&ep).unwrap(),
        }
        push.connect(&ep).await;
        push.send(&[b"over", b"ipc"]).await;
        assert_eq!(pull.recv().await, v(&[b"over", b"ipc"]));
    }
}

macro_rules! both_roles {
    ($($name:ident),* $(,)?) => {
        mod ours_bind {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(true).await
                }
            )*
        }
        mod libzmq_binds {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(false).await
                }
            )*
        }
    };
}

both_roles!(
    req_rep,
    req_router,
    req_router_anonymous,
    dealer_rep,
    dealer_router,
    router_router,
    pub_sub,
    xpub_xsub,
    pub_xsub,
    xpub_sub,
    push_pull,
    pair_pair,
);
