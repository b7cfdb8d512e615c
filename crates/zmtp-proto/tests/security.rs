//! PLAIN and CURVE handshakes and CURVE traffic, two `Connection`s in memory: golden bytes,
//! successful handshakes, and every refusal (wrong password, wrong server key, key not
//! allowed, NULL client to a CURVE server, replayed, reordered and tampered boxes).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use dafka_testkit::hex;
use dafka_zmtp_proto::{
    AuthDecision, Authenticator, CallerError, Command, Config, Connection, Credentials,
    CurveKeyPair, Error, Event, Heartbeat, MalformedError, MechanismConfig, Message, PeerError,
    SocketType, z85_decode_key,
};

/// libzmq's test key pairs (`tests/testutil_security.cpp`), Z85 secret keys.
const CLIENT_SECRET: &str = "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs";
const CLIENT_PUBLIC: &str = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
const SERVER_SECRET: &str = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6";
const SERVER_PUBLIC: &str = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";

fn client_keys() -> CurveKeyPair {
    CurveKeyPair::from_secret(z85_decode_key(CLIENT_SECRET).unwrap())
}

fn server_keys() -> CurveKeyPair {
    CurveKeyPair::from_secret(z85_decode_key(SERVER_SECRET).unwrap())
}

fn config(socket_type: SocketType, mechanism: MechanismConfig) -> Config {
    let mut c = Config::new(socket_type);
    c.mechanism = mechanism;
    c.peer_address = "127.0.0.1:40000".to_owned();
    c
}

fn curve_client(server_key: [u8; 32]) -> Config {
    config(
        SocketType::Dealer,
        MechanismConfig::CurveClient {
            keypair: client_keys(),
            server_key,
        },
    )
}

fn curve_server(authenticator: Authenticator) -> Config {
    config(
        SocketType::Router,
        MechanismConfig::CurveServer {
            keypair: server_keys(),
            authenticator,
        },
    )
}

fn plain_client(password: &'static [u8]) -> Config {
    config(
        SocketType::Dealer,
        MechanismConfig::PlainClient {
            username: Bytes::from_static(b"admin"),
            password: Bytes::from_static(password),
        },
    )
}

fn plain_server() -> Config {
    config(
        SocketType::Router,
        MechanismConfig::PlainServer {
            authenticator: Authenticator::plain_credentials([(
                Bytes::from_static(b"admin"),
                Bytes::from_static(b"secret"),
            )]),
        },
    )
}

/// A client and a server, the bytes each has sent the other, and the first error of each.
struct Link {
    now: Instant,
    client: Connection,
    server: Connection,
    to_server: BytesMut,
    to_client: BytesMut,
    client_err: Option<Error>,
    server_err: Option<Error>,
}

impl Link {
    fn new(client: Config, server: Config) -> Self {
        let now = Instant::now();
        Link {
            now,
            client: Connection::new(client, now),
            server: Connection::new(server, now),
            to_server: BytesMut::new(),
            to_client: BytesMut::new(),
            client_err: None,
            server_err: None,
        }
    }

    /// Moves bytes both ways until nothing moves or one side failed.
    fn run(&mut self) {
        for _ in 0..20 {
            self.client.poll_transmit(&mut self.to_server);
            self.server.poll_transmit(&mut self.to_client);
            if self.server_err.is_none()
                && !self.to_server.is_empty()
                && let Err(e) = self.server.handle_input(&mut self.to_server, self.now)
            {
                self.server_err = Some(e);
                self.server.poll_transmit(&mut self.to_client);
            }
            if self.client_err.is_none()
                && !self.to_client.is_empty()
                && let Err(e) = self.client.handle_input(&mut self.to_client, self.now)
            {
                self.client_err = Some(e);
                self.client.poll_transmit(&mut self.to_server);
            }
        }
    }

    fn ready(&mut self) {
        self.run();
        assert_eq!(self.client_err, None);
        assert_eq!(self.server_err, None);
        assert!(self.client.is_ready() && self.server.is_ready());
        assert!(matches!(
            self.client.poll_event(),
            Some(Event::Ready { .. })
        ));
        assert!(matches!(
            self.server.poll_event(),
            Some(Event::Ready { .. })
        ));
    }

    /// The bytes the client sends for `msg`, not yet delivered.
    fn client_sends(&mut self, msg: &Message) -> BytesMut {
        let mut out = BytesMut::new();
        self.client.send_message(msg, &mut out).unwrap();
        out
    }

    fn server_receives(&mut self, bytes: &[u8]) -> Result<Vec<Event>, Error> {
        let mut buf = BytesMut::from(bytes);
        self.server.handle_input(&mut buf, self.now)?;
        Ok(std::iter::from_fn(|| self.server.poll_event()).collect())
    }
}

/// (address, public key or username) of each request an authenticator saw.
type Seen = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// Records every authentication request an authenticator sees, and decides with `allow`.
fn recording(allow: impl Fn(&[u8]) -> bool + Send + Sync + 'static) -> (Authenticator, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let auth = Authenticator::from_fn(move |req| {
        let who = match req.credentials {
            Credentials::Curve { public_key } => public_key.to_vec(),
            Credentials::Plain { username, .. } => username.to_vec(),
            _ => Vec::new(),
        };
        let ok = allow(&who);
        log.lock().unwrap().push((req.address.to_owned(), who));
        if ok {
            AuthDecision::Allow
        } else {
            AuthDecision::Deny("not on the list".to_owned())
        }
    });
    (auth, seen)
}

// ---------------------------------------------------------------- PLAIN

#[test]
fn plain_golden_bytes() {
    let now = Instant::now();
    let mut client = Connection::new(plain_client(b"secret"), now);
    let mut server = Connection::new(plain_server(), now);
    let mut c_out = BytesMut::new();
    client.poll_transmit(&mut c_out);
    // Greeting: mechanism "PLAIN", as-server 0 (byte 32).
    assert_eq!(&c_out[12..17], b"PLAIN");
    assert_eq!(c_out[32], 0);
    let mut s_out = BytesMut::new();
    server.poll_transmit(&mut s_out);
    assert_eq!(s_out[32], 1, "the PLAIN server sets as-server");
    // Nothing after the greeting until the peer's greeting arrived.
    assert_eq!(c_out.len(), 64);
    client.handle_input(&mut s_out, now).unwrap();
    let mut hello = BytesMut::new();
    client.poll_transmit(&mut hello);
    // HELLO: 04 19, 05 "HELLO", 05 "admin", 06 "secret".
    assert_eq!(
        hex(&hello),
        "041305".to_owned() + &hex(b"HELLO") + "05" + &hex(b"admin") + "06" + &hex(b"secret")
    );
    let mut s_in = c_out;
    s_in.extend_from_slice(&hello);
    server.handle_input(&mut s_in, now).unwrap();
    let mut welcome = BytesMut::new();
    server.poll_transmit(&mut welcome);
    // WELCOME with no data: 04 08 07 "WELCOME" (the greeting went out before).
    assert_eq!(hex(&welcome), "040807".to_owned() + &hex(b"WELCOME"));
    let mut c_in = welcome;
    client.handle_input(&mut c_in, now).unwrap();
    let mut initiate = BytesMut::new();
    client.poll_transmit(&mut initiate);
    // INITIATE carries the metadata READY would: Socket-Type DEALER, empty Identity.
    let meta = "0b".to_owned()
        + &hex(b"Socket-Type")
        + "00000006"
        + &hex(b"DEALER")
        + "08"
        + &hex(b"Identity")
        + "00000000";
    assert_eq!(
        hex(&initiate),
        format!("04{:02x}08", 9 + meta.len() / 2) + &hex(b"INITIATE") + &meta
    );
}

#[test]
fn plain_handshake_and_traffic() {
    let mut link = Link::new(plain_client(b"secret"), plain_server());
    link.ready();
    let msg = Message::from(&b"over PLAIN"[..]);
    let bytes = link.client_sends(&msg);
    // PLAIN does not encrypt: the message is a clear frame.
    assert_eq!(&bytes[..], b"\x00\x0aover PLAIN");
    assert_eq!(
        link.server_receives(&bytes).unwrap(),
        vec![Event::Message(msg)]
    );
}

#[test]
fn plain_wrong_password_is_refused_with_error_400() {
    let mut link = Link::new(plain_client(b"guess"), plain_server());
    link.run();
    assert!(matches!(
        link.server_err,
        Some(Error::Peer(PeerError::AuthenticationRefused { mechanism: "PLAIN", ref client, ref reason })) if reason == "wrong password" && client == "admin"
    ));
    assert_eq!(
        link.client_err,
        Some(Error::Peer(PeerError::ErrorCommand {
            reason: "400".to_owned()
        }))
    );
    assert!(link.server.is_closed() && link.client.is_closed());
}

#[test]
fn plain_credentials_over_255_bytes_are_a_caller_error() {
    let mut c = plain_client(b"x");
    c.mechanism = MechanismConfig::PlainClient {
        username: Bytes::from(vec![b'u'; 256]),
        password: Bytes::new(),
    };
    assert!(Connection::try_new(c, Instant::now()).is_err());
}

#[test]
fn plain_client_to_null_server_is_a_mechanism_mismatch() {
    let mut link = Link::new(plain_client(b"secret"), Config::new(SocketType::Router));
    link.run();
    assert!(matches!(
        link.server_err,
        Some(Error::Peer(PeerError::MechanismMismatch { .. }))
    ));
}

// ---------------------------------------------------------------- CURVE

#[test]
fn libzmq_key_pairs_derive_their_public_keys() {
    assert_eq!(
        client_keys().public(),
        &z85_decode_key(CLIENT_PUBLIC).unwrap()
    );
    assert_eq!(
        server_keys().public(),
        &z85_decode_key(SERVER_PUBLIC).unwrap()
    );
    let fresh = CurveKeyPair::generate();
    assert_eq!(CurveKeyPair::from_secret(*fresh.secret()), fresh);
    assert_ne!(CurveKeyPair::generate(), fresh);
}

#[test]
fn curve_handshake_bytes_have_the_rfc_layout() {
    let now = Instant::now();
    let mut client = Connection::new(curve_client(*server_keys().public()), now);
    let mut server = Connection::new(curve_server(Authenticator::allow_all()), now);
    let (mut c_out, mut s_out) = (BytesMut::new(), BytesMut::new());
    client.poll_transmit(&mut c_out);
    server.poll_transmit(&mut s_out);
    assert_eq!(&c_out[12..17], b"CURVE");
    assert_eq!((c_out[32], s_out[32]), (0, 1));
    client.handle_input(&mut s_out, now).unwrap();
    let mut hello = BytesMut::new();
    client.poll_transmit(&mut hello);
    // HELLO: command frame of 200 bytes: 05 "HELLO", version 1.0, 72 zeros, C', nonce 1, box.
    assert_eq!(hello.len(), 2 + 200);
    assert_eq!(
        hex(&hello[..10]),
        "04c805".to_owned() + &hex(b"HELLO") + "0100"
    );
    assert!(hello[10..82].iter().all(|&b| b == 0));
    assert_eq!(hex(&hello[114..122]), "0000000000000001");
    let mut s_in = c_out;
    s_in.extend_from_slice(&hello);
    server.handle_input(&mut s_in, now).unwrap();
    let mut welcome = BytesMut::new();
    server.poll_transmit(&mut welcome);
    // WELCOME: 168 bytes: 07 "WELCOME", nonce16, box of 144.
    let welcome = &welcome[..];
    assert_eq!(welcome.len(), 2 + 168);
    assert_eq!(hex(&welcome[..10]), "04a807".to_owned() + &hex(b"WELCOME"));
    let mut c_in = BytesMut::from(welcome);
    client.handle_input(&mut c_in, now).unwrap();
    let mut initiate = BytesMut::new();
    client.poll_transmit(&mut initiate);
    // INITIATE: 08 "INITIATE", cookie 96, nonce 2, box of C (32) + vouch (96) + metadata + tag.
    let meta_len = 1 + 11 + 4 + 6 + 1 + 8 + 4;
    // Over 255 bytes: a long frame header (06 + 8-byte size).
    let body_len = 9 + 96 + 8 + 16 + 128 + meta_len;
    assert_eq!(hex(&initiate[..9]), format!("06{body_len:016x}"));
    assert_eq!(initiate.len(), 9 + body_len);
    assert_eq!(hex(&initiate[9..18]), "08".to_owned() + &hex(b"INITIATE"));
    assert_eq!(hex(&initiate[114..122]), "0000000000000002");
    let mut s_in = initiate;
    server.handle_input(&mut s_in, now).unwrap();
    let mut ready = BytesMut::new();
    server.poll_transmit(&mut ready);
    // READY: 05 "READY", nonce 1, box of the server's metadata (Socket-Type ROUTER, Identity).
    assert_eq!(ready.len(), 2 + 6 + 8 + 16 + meta_len);
    assert_eq!(
        hex(&ready[2..16]),
        "05".to_owned() + &hex(b"READY") + "0000000000000001"
    );
    let mut c_in = ready;
    client.handle_input(&mut c_in, now).unwrap();
    assert!(client.is_ready() && server.is_ready());
}

#[test]
fn curve_traffic_is_boxed_both_ways() {
    let (auth, seen) = recording(|_| true);
    let mut link = Link::new(curve_client(*server_keys().public()), curve_server(auth));
    link.ready();
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(
            "127.0.0.1:40000".to_owned(),
            client_keys().public().to_vec()
        )]
    );
    let msg = Message::from(vec![
        Bytes::from_static(b"first part in clear"),
        Bytes::new(),
        Bytes::from(vec![0x5a; 70_000]),
    ]);
    let bytes = link.client_sends(&msg);
    // Each frame is its own MESSAGE (07 "MESSAGE", nonce 3, 4, 5 after HELLO and INITIATE),
    // sent as a data frame; the plaintext appears nowhere.
    assert_eq!(
        hex(&bytes[..18]),
        "0034".to_owned() + &hex(b"\x07MESSAGE") + "0000000000000003"
    );
    assert!(!bytes.windows(19).any(|w| w == b"first part in clear"));
    assert_eq!(bytes.len(), (2 + 33 + 19) + (2 + 33) + (9 + 33 + 70_000));
    assert_eq!(
        link.server_receives(&bytes).unwrap(),
        vec![Event::Message(msg.clone())]
    );
    // Server to client: nonce prefix "...MESSAGES", nonces from 2 (READY was 1).
    let mut out = BytesMut::new();
    link.server.send_message(&msg, &mut out).unwrap();
    assert_eq!(hex(&out[10..18]), "0000000000000002");
    link.client.handle_input(&mut out, link.now).unwrap();
    assert_eq!(link.client.poll_event(), Some(Event::Message(msg)));
}

#[test]
fn curve_commands_and_heartbeats_travel_inside_boxes() {
    let mut client = curve_client(*server_keys().public());
    client.heartbeat = Some(Heartbeat::new(Duration::from_secs(1)));
    let mut link = Link::new(client, curve_server(Authenticator::allow_all()));
    link.ready();
    // SUBSCRIBE is a command inside a box (flag 0x02), not a clear command frame.
    let mut out = BytesMut::new();
    link.client
        .send_command(&Command::Subscribe(Bytes::from_static(b"topic")), &mut out)
        .unwrap();
    assert_eq!(
        out[0], 0x00,
        "boxed commands travel as data frames, as libzmq sends them"
    );
    assert!(!out.windows(9).any(|w| w == b"SUBSCRIBE"));
    assert_eq!(
        link.server_receives(&out).unwrap(),
        vec![Event::Subscribe(Bytes::from_static(b"topic"))]
    );
    // A PING is due after 1 s; the server answers with a boxed PONG; the client's heartbeat
    // deadline is cleared by it.
    link.now += Duration::from_secs(1);
    link.client.handle_timeout(link.now).unwrap();
    let mut ping = BytesMut::new();
    link.client.poll_transmit(&mut ping);
    assert_eq!(&ping[2..10], b"\x07MESSAGE");
    assert!(!ping.windows(4).any(|w| w == b"PING"));
    link.server_receives(&ping).unwrap();
    let mut pong = BytesMut::new();
    link.server.poll_transmit(&mut pong);
    assert_eq!(&pong[2..10], b"\x07MESSAGE");
    link.client.handle_input(&mut pong, link.now).unwrap();
    link.now += Duration::from_millis(1500);
    link.client.handle_timeout(link.now).unwrap();
    assert!(link.client.is_ready(), "the boxed PONG counted as traffic");
}

#[test]
fn curve_wrong_server_key_is_refused() {
    let impostor = CurveKeyPair::generate();
    let mut link = Link::new(
        curve_client(*impostor.public()),
        curve_server(Authenticator::allow_all()),
    );
    link.run();
    assert_eq!(
        link.server_err,
        Some(Error::Peer(PeerError::CurveBox { what: "HELLO" }))
    );
    assert!(!link.client.is_ready());
}

/// Low-order X25519 points: with any of them the shared secret is all zeros.
const LOW_ORDER: [[u8; 32]; 2] = [[0u8; 32], {
    let mut one = [0u8; 32];
    one[0] = 0x01;
    one
}];

#[test]
fn curve_low_order_server_key_is_a_caller_error() {
    for key in LOW_ORDER {
        let c = curve_client(key);
        assert_eq!(c.mechanism.validate(), Err(CallerError::CurveWeakServerKey));
        assert!(Connection::try_new(c, Instant::now()).is_err());
    }
    assert_eq!(
        curve_client(*server_keys().public()).mechanism.validate(),
        Ok(())
    );
}

/// A HELLO whose C' is a low-order point is refused like any box that does not open (no
/// panic on that network input); `nacl`'s unit tests check that libsodium refuses the key.
#[test]
fn curve_hello_with_a_low_order_short_key_is_refused() {
    let now = Instant::now();
    let mut client = Connection::new(curve_client(*server_keys().public()), now);
    let (mut greeting, mut hello) = (BytesMut::new(), BytesMut::new());
    client.poll_transmit(&mut greeting);
    let mut server_greeting = BytesMut::new();
    let mut probe = Connection::new(curve_server(Authenticator::allow_all()), now);
    probe.poll_transmit(&mut server_greeting);
    client.handle_input(&mut server_greeting, now).unwrap();
    client.poll_transmit(&mut hello);
    for key in LOW_ORDER {
        let mut server = Connection::new(curve_server(Authenticator::allow_all()), now);
        let mut s_in = greeting.clone();
        let mut forged = hello.clone();
        // C' sits after the 2-byte header, 06 "HELLO", the version and 72 bytes of padding.
        forged[82..114].copy_from_slice(&key);
        s_in.extend_from_slice(&forged);
        assert_eq!(
            server.handle_input(&mut s_in, now),
            Err(Error::Peer(PeerError::CurveBox { what: "HELLO" }))
        );
    }
}

#[test]
fn curve_key_not_allowed_is_refused_and_logged_with_the_key() {
    let other = CurveKeyPair::generate();
    let allowed = *other.public();
    let (auth, seen) = recording(move |k| k == allowed);
    let mut link = Link::new(curve_client(*server_keys().public()), curve_server(auth));
    link.run();
    assert!(matches!(
        link.server_err,
        Some(Error::Peer(PeerError::AuthenticationRefused {
            mechanism: "CURVE",
            ..
        }))
    ));
    assert_eq!(
        link.client_err,
        Some(Error::Peer(PeerError::ErrorCommand {
            reason: "400".to_owned()
        }))
    );
    assert_eq!(seen.lock().unwrap()[0].1, client_keys().public().to_vec());
    // The allow-list form refuses the same way.
    let mut link = Link::new(
        curve_client(*server_keys().public()),
        curve_server(Authenticator::curve_keys([allowed])),
    );
    link.run();
    assert!(matches!(
        link.server_err,
        Some(Error::Peer(PeerError::AuthenticationRefused { .. }))
    ));
}

#[test]
fn null_client_to_curve_server_is_refused() {
    let mut link = Link::new(
        Config::new(SocketType::Dealer),
        curve_server(Authenticator::allow_all()),
    );
    link.run();
    assert!(matches!(
        link.server_err,
        Some(Error::Peer(PeerError::MechanismMismatch { .. }))
    ));
    assert!(!link.server.is_ready());
}

#[test]
fn curve_replayed_message_is_refused() {
    let mut link = Link::new(
        curve_client(*server_keys().public()),
        curve_server(Authenticator::allow_all()),
    );
    link.ready();
    let bytes = link.client_sends(&Message::from(&b"pay 100"[..]));
    assert_eq!(link.server_receives(&bytes).unwrap().len(), 1);
    assert_eq!(
        link.server_receives(&bytes).unwrap_err(),
        Error::Peer(PeerError::CurveNonce { got: 3, last: 3 })
    );
    assert!(link.server.is_closed());
}

#[test]
fn curve_reordered_messages_are_refused() {
    let mut link = Link::new(
        curve_client(*server_keys().public()),
        curve_server(Authenticator::allow_all()),
    );
    link.ready();
    let first = link.client_sends(&Message::from(&b"one"[..]));
    let second = link.client_sends(&Message::from(&b"two"[..]));
    assert_eq!(
        link.server_receives(&second).unwrap(),
        vec![Event::Message(Message::from(&b"two"[..]))]
    );
    assert_eq!(
        link.server_receives(&first).unwrap_err(),
        Error::Peer(PeerError::CurveNonce { got: 3, last: 4 })
    );
}

#[test]
fn curve_tampered_box_is_refused_and_does_not_advance_the_nonce() {
    for at in [2 + 16, 2 + 16 + 16, 2 + 40] {
        let mut link = Link::new(
            curve_client(*server_keys().public()),
            curve_server(Authenticator::allow_all()),
        );
        link.ready();
        let mut bytes = link.client_sends(&Message::from(&[0x42u8; 40][..]));
        bytes[at] ^= 0x01;
        assert_eq!(
            link.server_receives(&bytes).unwrap_err(),
            Error::Peer(PeerError::CurveBox { what: "MESSAGE" }),
            "byte {at} flipped"
        );
    }
}

#[test]
fn curve_clear_frame_after_handshake_is_refused() {
    let mut link = Link::new(
        curve_client(*server_keys().public()),
        curve_server(Authenticator::allow_all()),
    );
    link.ready();
    assert_eq!(
        link.server_receives(b"\x00\x05hello").unwrap_err(),
        Error::Malformed(MalformedError::NotCurveMessage)
    );
}

#[test]
fn curve_message_over_the_limit_is_refused_before_it_is_buffered() {
    let mut server = curve_server(Authenticator::allow_all());
    server.limits = server.limits.with_max_frame_size(1000);
    let mut link = Link::new(curve_client(*server_keys().public()), server);
    link.ready();
    // A box announcing 1000 + 33 + 1 bytes: refused from its header alone.
    let mut header = vec![0x02];
    header.extend_from_slice(&(1000u64 + 33 + 1).to_be_bytes());
    assert!(matches!(
        link.server_receives(&header).unwrap_err(),
        Error::Limit(_)
    ));
}
