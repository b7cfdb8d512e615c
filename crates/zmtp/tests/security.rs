//! CURVE and PLAIN through the driver, against libzmq (the `zmq` crate) on each side, and the
//! refusals: a refused client is closed while the server keeps serving the others.

use std::time::Duration;

use bytes::Bytes;
use dafka_zmtp::{
    Authenticator, CurveKeyPair, MechanismConfig, Message, Options, Socket, SocketType, z85_encode,
};

fn opts(mechanism: MechanismConfig) -> Options {
    Options::default()
        .with_linger(Some(Duration::ZERO))
        .with_mechanism(mechanism)
}

fn context() -> &'static zmq::Context {
    static CTX: std::sync::OnceLock<zmq::Context> = std::sync::OnceLock::new();
    CTX.get_or_init(zmq::Context::new)
}

fn zmq_socket(t: zmq::SocketType) -> zmq::Socket {
    let s = context().socket(t).unwrap();
    s.set_linger(0).unwrap();
    s.set_rcvtimeo(10_000).unwrap();
    s.set_sndtimeo(10_000).unwrap();
    s
}

fn zmq_curve_client(s: &zmq::Socket, keys: &CurveKeyPair, server: &[u8; 32]) {
    s.set_curve_serverkey(z85_encode(server).as_bytes())
        .unwrap();
    s.set_curve_publickey(z85_encode(keys.public()).as_bytes())
        .unwrap();
    s.set_curve_secretkey(z85_encode(keys.secret()).as_bytes())
        .unwrap();
}

/// A libzmq REQ asks through CURVE, blocking; `None` when no answer came within `wait`.
async fn libzmq_request(
    ep: String,
    keys: CurveKeyPair,
    server: [u8; 32],
    wait: i32,
) -> Option<Vec<Vec<u8>>> {
    tokio::task::spawn_blocking(move || {
        let s = zmq_socket(zmq::REQ);
        s.set_rcvtimeo(wait).unwrap();
        zmq_curve_client(&s, &keys, &server);
        s.connect(&ep).unwrap();
        s.send_multipart([&b"ping"[..], &[0xAB; 70_000][..]], 0)
            .unwrap();
        s.recv_multipart(0).ok()
    })
    .await
    .unwrap()
}

/// Our REP answers every request with the request itself.
fn echo(rep: Socket) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok(m) = rep.recv().await {
            if rep.send(m).await.is_err() {
                break;
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_curve_server_serves_libzmq_clients_and_refuses_unknown_keys() {
    assert!(zmq::has("curve").unwrap_or(false), "libzmq without CURVE");
    let server_keys = CurveKeyPair::generate();
    let allowed = CurveKeyPair::generate();
    let stranger = CurveKeyPair::generate();
    let rep = Socket::new(
        SocketType::Rep,
        opts(MechanismConfig::CurveServer {
            keypair: server_keys.clone(),
            authenticator: Authenticator::curve_keys([*allowed.public()]),
        }),
    )
    .unwrap();
    let ep = rep.bind("tcp://127.0.0.1:0").await.unwrap();
    let task = echo(rep);
    let server = *server_keys.public();
    let reply = libzmq_request(ep.clone(), allowed.clone(), server, 10_000).await;
    assert_eq!(
        reply,
        Some(vec![b"ping".to_vec(), vec![0xAB; 70_000]]),
        "an allowed key is served"
    );
    // Key not on the list: refused (ERROR 400), no answer.
    assert_eq!(
        libzmq_request(ep.clone(), stranger, server, 500).await,
        None
    );
    // Wrong server key: the HELLO box does not open, no answer.
    let wrong = *CurveKeyPair::generate().public();
    assert_eq!(
        libzmq_request(ep.clone(), allowed.clone(), wrong, 500).await,
        None
    );
    // The server keeps serving the others.
    assert!(libzmq_request(ep, allowed, server, 10_000).await.is_some());
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_curve_client_talks_to_a_libzmq_server() {
    let server_keys = CurveKeyPair::generate();
    let ours = CurveKeyPair::generate();
    let sk = server_keys.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let peer = tokio::task::spawn_blocking(move || {
        let s = zmq_socket(zmq::ROUTER);
        s.set_curve_server(true).unwrap();
        s.set_curve_secretkey(z85_encode(sk.secret()).as_bytes())
            .unwrap();
        s.bind("tcp://127.0.0.1:*").unwrap();
        tx.send(s.get_last_endpoint().unwrap().unwrap()).unwrap();
        let mut got = s.recv_multipart(0).unwrap();
        got.push(b"back".to_vec());
        s.send_multipart(got, 0).unwrap();
        // Linger 0 would drop the reply with the socket.
        s.set_linger(5000).unwrap();
    });
    let ep = rx.recv().unwrap();
    let dealer = Socket::new(
        SocketType::Dealer,
        opts(MechanismConfig::CurveClient {
            keypair: ours,
            server_key: *server_keys.public(),
        }),
    )
    .unwrap();
    dealer.connect(&ep).await.unwrap();
    let msg: Message = [Bytes::from_static(b"a"), Bytes::from(vec![7u8; 100_000])]
        .into_iter()
        .collect();
    dealer.send(msg).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), dealer.recv())
        .await
        .unwrap()
        .unwrap();
    let frames: Vec<Vec<u8>> = got.frames().iter().map(|f| f.to_vec()).collect();
    assert_eq!(
        frames,
        vec![b"a".to_vec(), vec![7u8; 100_000], b"back".to_vec()]
    );
    peer.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_with_libzmq_both_ways_and_a_wrong_password_refused() {
    let rep = Socket::new(
        SocketType::Rep,
        opts(MechanismConfig::PlainServer {
            authenticator: Authenticator::plain_credentials([(
                Bytes::from_static(b"admin"),
                Bytes::from_static(b"secret"),
            )]),
        }),
    )
    .unwrap();
    let ep = rep.bind("tcp://127.0.0.1:0").await.unwrap();
    let task = echo(rep);
    let ask = |password: &'static str, wait: i32| {
        let ep = ep.clone();
        tokio::task::spawn_blocking(move || {
            let s = zmq_socket(zmq::REQ);
            s.set_rcvtimeo(wait).unwrap();
            s.set_plain_username(Some("admin")).unwrap();
            s.set_plain_password(Some(password)).unwrap();
            s.connect(&ep).unwrap();
            s.send("hi", 0).unwrap();
            s.recv_bytes(0).ok()
        })
    };
    assert_eq!(ask("guess", 500).await.unwrap(), None);
    assert_eq!(ask("secret", 10_000).await.unwrap(), Some(b"hi".to_vec()));
    task.abort();

    // Our PLAIN client to libzmq's PLAIN server, which needs a ZAP handler (27/ZAP): one that
    // lets "u"/"p" in.
    let (tx, rx) = std::sync::mpsc::channel();
    let peer = tokio::task::spawn_blocking(move || {
        let zap = zmq_socket(zmq::REP);
        zap.bind("inproc://zeromq.zap.01").unwrap();
        let s = zmq_socket(zmq::PULL);
        s.set_plain_server(true).unwrap();
        s.bind("tcp://127.0.0.1:*").unwrap();
        tx.send(s.get_last_endpoint().unwrap().unwrap()).unwrap();
        // ZAP request: version, request id, domain, address, identity, mechanism, credentials.
        let req = zap.recv_multipart(0).unwrap();
        assert_eq!(&req[5], b"PLAIN");
        assert_eq!((&req[6][..], &req[7][..]), (&b"u"[..], &b"p"[..]));
        let id = req[1].clone();
        zap.send_multipart([&b"1.0"[..], &id, b"200", b"OK", b"u", b""], 0)
            .unwrap();
        s.recv_bytes(0).unwrap()
    });
    let ep = rx.recv().unwrap();
    let push = Socket::new(
        SocketType::Push,
        opts(MechanismConfig::PlainClient {
            username: Bytes::from_static(b"u"),
            password: Bytes::from_static(b"p"),
        }),
    )
    .unwrap();
    push.connect(&ep).await.unwrap();
    push.send(Message::from(&b"plain"[..])).await.unwrap();
    assert_eq!(peer.await.unwrap(), b"plain".to_vec());
}

/// What a hostile client (holding an allowed key) does after a valid request.
#[derive(Debug, Clone, Copy)]
enum Attack {
    /// Sends the same boxes again.
    Replay,
    /// Sends its second request's boxes, then the first's.
    Reorder,
    /// Flips one bit of a box.
    Tamper,
}

/// Runs a CURVE client, sans-IO over a raw TCP stream so that it can misbehave, against `ep`;
/// returns once the server closed the connection (panics if it stays open 5 s).
async fn hostile_client(ep: &str, keys: CurveKeyPair, server: [u8; 32], attack: Attack) {
    use dafka_zmtp_proto::{Config, Connection};
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let addr = ep.strip_prefix("tcp://").unwrap();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut config = Config::new(SocketType::Req);
    config.mechanism = MechanismConfig::CurveClient {
        keypair: keys,
        server_key: server,
    };
    let mut conn = Connection::new(config, Instant::now());
    let (mut out, mut inbuf) = (bytes::BytesMut::new(), bytes::BytesMut::new());
    while !conn.is_ready() {
        conn.poll_transmit(&mut out);
        stream.write_all(&out).await.unwrap();
        out.clear();
        assert!(
            stream.read_buf(&mut inbuf).await.unwrap() > 0,
            "closed in the handshake"
        );
        conn.handle_input(&mut inbuf, Instant::now()).unwrap();
    }
    let request = |body: &'static [u8]| -> Message {
        [Bytes::new(), Bytes::from_static(body)]
            .into_iter()
            .collect()
    };
    let (mut first, mut second) = (bytes::BytesMut::new(), bytes::BytesMut::new());
    conn.send_message(&request(b"one"), &mut first).unwrap();
    conn.send_message(&request(b"two"), &mut second).unwrap();
    match attack {
        Attack::Replay => {
            stream.write_all(&first).await.unwrap();
            stream.write_all(&first).await.unwrap();
        }
        Attack::Reorder => {
            stream.write_all(&second).await.unwrap();
            stream.write_all(&first).await.unwrap();
        }
        Attack::Tamper => {
            let last = first.len() - 1;
            first[last] ^= 0x01;
            stream.write_all(&first).await.unwrap();
        }
    }
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        let mut sink = Vec::new();
        loop {
            match stream.read_buf(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "{attack:?}: the server kept the connection open"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_reordered_and_tampered_boxes_close_only_their_connection() {
    let server_keys = CurveKeyPair::generate();
    let client = CurveKeyPair::generate();
    let rep = Socket::new(
        SocketType::Rep,
        opts(MechanismConfig::CurveServer {
            keypair: server_keys.clone(),
            authenticator: Authenticator::curve_keys([*client.public()]),
        }),
    )
    .unwrap();
    let ep = rep.bind("tcp://127.0.0.1:0").await.unwrap();
    let task = echo(rep);
    let server = *server_keys.public();
    for attack in [Attack::Replay, Attack::Reorder, Attack::Tamper] {
        hostile_client(&ep, client.clone(), server, attack).await;
    }
    // The server keeps serving a well-behaved client with the same key.
    assert!(libzmq_request(ep, client, server, 10_000).await.is_some());
    task.abort();
}

/// `router_peer_key`: each message a CURVE ROUTER receives names, after the routing id, the
/// key its connection authenticated with, whatever routing id the client claims; two clients
/// claiming one routing id (handover) are still told apart. A NULL ROUTER gives an empty frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_peer_key_names_the_authenticated_key_of_each_message() {
    let server_keys = CurveKeyPair::generate();
    let alice = CurveKeyPair::generate();
    let mallory = CurveKeyPair::generate();
    let router = Socket::new(
        SocketType::Router,
        opts(MechanismConfig::CurveServer {
            keypair: server_keys.clone(),
            authenticator: Authenticator::allow_all(),
        })
        .with_router_handover(true)
        .with_router_peer_key(true),
    )
    .unwrap();
    let ep = router.bind("tcp://127.0.0.1:0").await.unwrap();
    let dealer = |keys: &CurveKeyPair| {
        Socket::new(
            SocketType::Dealer,
            opts(MechanismConfig::CurveClient {
                keypair: keys.clone(),
                server_key: *server_keys.public(),
            })
            .with_routing_id(Some(Bytes::from_static(b"same-id"))),
        )
        .unwrap()
    };
    let a = dealer(&alice);
    a.connect(&ep).await.unwrap();
    a.send(Message::from(vec![Bytes::from_static(b"from alice")]))
        .await
        .unwrap();
    let got = wait(&router).await;
    assert_eq!(got.frames()[0], &b"same-id"[..]);
    assert_eq!(got.frames()[1], &alice.public()[..]);
    assert_eq!(got.frames()[2], &b"from alice"[..]);
    // Mallory claims Alice's routing id: handover, yet her message names her own key.
    let m = dealer(&mallory);
    m.connect(&ep).await.unwrap();
    m.send(Message::from(vec![Bytes::from_static(b"from mallory")]))
        .await
        .unwrap();
    let got = wait(&router).await;
    assert_eq!(got.frames()[0], &b"same-id"[..]);
    assert_eq!(got.frames()[1], &mallory.public()[..]);
    assert_eq!(got.frames()[2], &b"from mallory"[..]);
    // A libzmq client's key, as libzmq's User-Id would give it.
    let zkeys = CurveKeyPair::generate();
    let (zep, zk, zs) = (ep.clone(), zkeys.clone(), *server_keys.public());
    let sent = tokio::task::spawn_blocking(move || {
        let s = zmq_socket(zmq::DEALER);
        zmq_curve_client(&s, &zk, &zs);
        s.set_identity(b"libzmq").unwrap();
        s.connect(&zep).unwrap();
        s.send(&b"from libzmq"[..], 0).unwrap();
        s
    });
    let got = wait(&router).await;
    assert_eq!(got.frames()[0], &b"libzmq"[..]);
    assert_eq!(got.frames()[1], &zkeys.public()[..]);
    drop(sent.await.unwrap());
    // Sending is unchanged: [routing id, body].
    router
        .send(Message::from(vec![
            Bytes::from_static(b"same-id"),
            Bytes::from_static(b"reply"),
        ]))
        .await
        .unwrap();
    assert_eq!(wait(&m).await.frames(), &[Bytes::from_static(b"reply")]);

    let plain = Socket::new(
        SocketType::Router,
        opts(MechanismConfig::Null).with_router_peer_key(true),
    )
    .unwrap();
    let pep = plain.bind("tcp://127.0.0.1:0").await.unwrap();
    let d = Socket::new(
        SocketType::Dealer,
        opts(MechanismConfig::Null).with_routing_id(Some(Bytes::from_static(b"n"))),
    )
    .unwrap();
    d.connect(&pep).await.unwrap();
    d.send(Message::from(vec![Bytes::from_static(b"x")]))
        .await
        .unwrap();
    let got = wait(&plain).await;
    assert_eq!(got.frames().len(), 3);
    assert!(got.frames()[1].is_empty());
}

async fn wait(s: &Socket) -> Message {
    tokio::time::timeout(Duration::from_secs(10), s.recv())
        .await
        .unwrap()
        .unwrap()
}
