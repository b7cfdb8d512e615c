//! Two `Connection`s wired to each other in memory under a virtual clock.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use dafka_zmtp_proto::{
    CallerError, Command, Config, Connection, Error, Event, FRAME_OVERHEAD, Heartbeat, LimitError,
    Limits, Message, PeerError, SocketType,
};

/// One side: its state machine, the bytes in flight towards it, the events it produced.
struct Side {
    conn: Connection,
    inbox: BytesMut,
    events: Vec<Event>,
    error: Option<Error>,
}

impl Side {
    fn new(config: Config, now: Instant) -> Self {
        Side {
            conn: Connection::new(config, now),
            inbox: BytesMut::new(),
            events: Vec::new(),
            error: None,
        }
    }

    fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }
}

struct Pair {
    now: Instant,
    a: Side,
    b: Side,
    /// Deliver at most this many bytes per `handle_input` call (exercises every split).
    chunk: usize,
}

impl Pair {
    fn new(a: Config, b: Config) -> Self {
        let now = Instant::now();
        Pair {
            now,
            a: Side::new(a, now),
            b: Side::new(b, now),
            chunk: usize::MAX,
        }
    }

    fn at(&self, offset: Duration) -> Instant {
        self.now + offset
    }

    /// Moves bytes both ways until nothing moves.
    fn run(&mut self) {
        loop {
            let moved_ab = step(&mut self.a, &mut self.b, self.now, self.chunk);
            let moved_ba = step(&mut self.b, &mut self.a, self.now, self.chunk);
            if !moved_ab && !moved_ba {
                break;
            }
        }
    }

    fn send(&mut self, from_a: bool, msg: &Message) {
        let (from, to) = if from_a {
            (&mut self.a, &mut self.b)
        } else {
            (&mut self.b, &mut self.a)
        };
        from.conn.send_message(msg, &mut to.inbox).unwrap();
        self.run();
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        for side in [&mut self.a, &mut self.b] {
            if side.error.is_none()
                && let Err(e) = side.conn.handle_timeout(self.now)
            {
                side.error = Some(e);
            }
        }
        self.run();
    }
}

/// Transmits `from`'s pending bytes into `to`'s inbox and lets `to` consume them in chunks.
fn step(from: &mut Side, to: &mut Side, now: Instant, chunk: usize) -> bool {
    from.conn.poll_transmit(&mut to.inbox);
    if to.inbox.is_empty() || to.error.is_some() {
        return false;
    }
    let before = to.inbox.len();
    let mut staged = to.inbox.split();
    while !staged.is_empty() {
        let n = chunk.min(staged.len());
        to.inbox.extend_from_slice(&staged.split_to(n));
        if let Err(e) = to.conn.handle_input(&mut to.inbox, now) {
            to.error = Some(e);
            break;
        }
        while let Some(ev) = to.conn.poll_event() {
            to.events.push(ev);
        }
    }
    to.inbox.len() != before || to.error.is_some()
}

fn dealer(identity: &'static [u8]) -> Config {
    let mut c = Config::new(SocketType::Dealer);
    c.identity = Bytes::from_static(identity);
    c
}

fn ready_of(events: &[Event]) -> (SocketType, Bytes) {
    match events.first() {
        Some(Event::Ready {
            peer_socket_type,
            peer_identity,
            ..
        }) => (*peer_socket_type, peer_identity.clone()),
        other => panic!("expected Ready first, got {other:?}"),
    }
}

#[test]
fn handshake_dealer_router() {
    let mut router = Config::new(SocketType::Router);
    router.properties = vec![("x-app".into(), Bytes::from_static(b"demo"))];
    let mut p = Pair::new(dealer(b"d1"), router);
    assert!(!p.a.conn.is_ready());
    p.run();
    assert!(p.a.conn.is_ready() && p.b.conn.is_ready());
    assert_eq!(p.a.conn.peer_version(), Some((3, 1)));
    assert_eq!(p.b.conn.peer_socket_type(), Some(SocketType::Dealer));
    let a_events = p.a.take_events();
    assert_eq!(ready_of(&a_events), (SocketType::Router, Bytes::new()));
    let Some(Event::Ready { peer_metadata, .. }) = a_events.first() else {
        panic!("no ready")
    };
    assert_eq!(
        peer_metadata.get("X-App").map(|v| &v[..]),
        Some(&b"demo"[..])
    );
    assert!(peer_metadata.iter().any(|(n, _)| n == "X-app"));
    let b_events = p.b.take_events();
    assert_eq!(
        ready_of(&b_events),
        (SocketType::Dealer, Bytes::from_static(b"d1"))
    );
    assert_eq!(a_events.len(), 1);
    assert_eq!(b_events.len(), 1);
}

#[test]
fn messages_both_ways_at_every_chunk_size() {
    for chunk in [1, 2, 3, 7, 64, 65, usize::MAX] {
        let mut p = Pair::new(dealer(b""), Config::new(SocketType::Dealer));
        p.chunk = chunk;
        p.run();
        p.a.take_events();
        p.b.take_events();
        let msgs = [
            Message::from(&b"hello"[..]),
            Message::from(vec![
                Bytes::new(),
                Bytes::from(vec![7u8; 300]),
                Bytes::new(),
            ]),
            Message::from(vec![Bytes::from_static(b"x"); 9]),
        ];
        for m in &msgs {
            p.send(true, m);
            p.send(false, m);
        }
        let want: Vec<Event> = msgs.iter().cloned().map(Event::Message).collect();
        assert_eq!(p.a.take_events(), want, "chunk {chunk}");
        assert_eq!(p.b.take_events(), want, "chunk {chunk}");
        assert!(p.a.inbox.is_empty() && p.b.inbox.is_empty());
    }
}

#[test]
fn many_messages_in_one_buffer() {
    let mut p = Pair::new(Config::new(SocketType::Push), Config::new(SocketType::Pull));
    p.run();
    p.b.take_events();
    let mut wire = BytesMut::new();
    for i in 0..1000u32 {
        let m = Message::from(Bytes::from(i.to_be_bytes().to_vec()));
        p.a.conn.send_message(&m, &mut wire).unwrap();
    }
    p.b.conn.handle_input(&mut wire, p.now).unwrap();
    assert!(wire.is_empty());
    for i in 0..1000u32 {
        assert_eq!(
            p.b.conn.poll_event(),
            Some(Event::Message(Message::from(Bytes::from(
                i.to_be_bytes().to_vec()
            ))))
        );
    }
    assert_eq!(p.b.conn.poll_event(), None);
}

#[test]
fn subscribe_and_cancel_commands() {
    let mut p = Pair::new(Config::new(SocketType::Sub), Config::new(SocketType::Xpub));
    p.run();
    p.b.take_events();
    let mut out = BytesMut::new();
    p.a.conn
        .send_command(&Command::Subscribe(Bytes::from_static(b"topic")), &mut out)
        .unwrap();
    p.a.conn
        .send_command(&Command::Cancel(Bytes::from_static(b"topic")), &mut out)
        .unwrap();
    p.a.conn
        .send_command(&Command::Subscribe(Bytes::new()), &mut out)
        .unwrap();
    p.b.inbox.extend_from_slice(&out);
    p.run();
    assert_eq!(
        p.b.take_events(),
        vec![
            Event::Subscribe(Bytes::from_static(b"topic")),
            Event::Cancel(Bytes::from_static(b"topic")),
            Event::Subscribe(Bytes::new()),
        ]
    );
    // The 3.0 form (what an XSUB forwards) arrives as a plain message.
    p.send(true, &Message::from(&b"\x01news"[..]));
    assert_eq!(
        p.b.take_events(),
        vec![Event::Message(Message::from(&b"\x01news"[..]))]
    );
}

#[test]
fn ping_is_answered_and_never_surfaces() {
    let mut a = Config::new(SocketType::Pair);
    a.heartbeat = Some(Heartbeat {
        interval: Duration::from_secs(1),
        ttl: Duration::from_secs(3),
        timeout: Duration::from_secs(2),
    });
    let mut p = Pair::new(a, Config::new(SocketType::Pair));
    let t0 = p.now;
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    p.run();
    p.a.take_events();
    p.b.take_events();
    assert_eq!(p.a.conn.poll_timeout(), Some(at(1000)));
    // Intercept the PING to check its bytes: TTL 3 s = 30 deciseconds, empty context.
    p.a.conn.handle_timeout(at(1000)).unwrap();
    let mut ping = BytesMut::new();
    p.a.conn.poll_transmit(&mut ping);
    assert_eq!(&ping[..], b"\x04\x07\x04PING\x00\x1e");
    // Next PING at 2 s; the heartbeat timeout (3 s) is armed behind it.
    assert_eq!(p.a.conn.poll_timeout(), Some(at(2000)));
    p.a.conn.handle_timeout(at(1500)).unwrap();
    p.now += Duration::from_secs(1);
    p.b.conn.handle_input(&mut ping, p.now).unwrap();
    assert_eq!(p.b.conn.poll_event(), None);
    let mut pong = BytesMut::new();
    p.b.conn.poll_transmit(&mut pong);
    assert_eq!(&pong[..], b"\x04\x05\x04PONG");
    p.a.conn.handle_input(&mut pong, p.now).unwrap();
    assert_eq!(p.a.conn.poll_event(), None);
    // The PONG was traffic: the heartbeat timeout is disarmed; at 3 s nothing fails.
    assert_eq!(p.a.conn.poll_timeout(), Some(at(2000)));
    p.a.conn.handle_timeout(at(2000)).unwrap();
    let mut ping2 = BytesMut::new();
    p.a.conn.poll_transmit(&mut ping2);
    p.b.inbox.extend_from_slice(&ping2);
    p.now = at(2000);
    p.run();
    assert_eq!(p.a.conn.poll_timeout(), Some(at(3000)));
    assert_eq!(p.a.conn.handle_timeout(at(3000)), Ok(()));
    // Many heartbeat rounds later both sides are alive and nothing surfaced.
    for _ in 0..20 {
        p.advance(Duration::from_millis(500));
    }
    assert!(
        p.a.error.is_none() && p.b.error.is_none(),
        "{:?}",
        p.a.error
    );
    assert!(p.a.events.is_empty() && p.b.events.is_empty());
    // Messages still flow.
    p.send(true, &Message::from(&b"after"[..]));
    assert_eq!(p.b.take_events().len(), 1);
}

#[test]
fn ping_context_is_echoed() {
    let mut p = Pair::new(Config::new(SocketType::Pair), Config::new(SocketType::Pair));
    p.run();
    let mut out = BytesMut::new();
    let ping = Command::Ping {
        ttl_deciseconds: 0,
        context: Bytes::from_static(b"0123456789abcdef"),
    };
    p.a.conn.send_command(&ping, &mut out).unwrap();
    p.b.conn.handle_input(&mut out, p.now).unwrap();
    let mut pong = BytesMut::new();
    p.b.conn.poll_transmit(&mut pong);
    assert_eq!(&pong[..], b"\x04\x15\x04PONG0123456789abcdef");
}

#[test]
fn heartbeat_timeout_closes_a_silent_peer() {
    let mut a = Config::new(SocketType::Req);
    a.heartbeat = Some(Heartbeat::new(Duration::from_secs(1)));
    let mut p = Pair::new(a, Config::new(SocketType::Rep));
    p.run();
    // b goes silent: a's bytes never reach it, so it never answers.
    let t1 = p.at(Duration::from_secs(1));
    p.a.conn.handle_timeout(t1).unwrap();
    let mut sent = BytesMut::new();
    p.a.conn.poll_transmit(&mut sent);
    assert!(!sent.is_empty());
    // Calling handle_input again without new bytes is not liveness.
    let mut empty = BytesMut::new();
    p.a.conn.handle_input(&mut empty, t1).unwrap();
    let t2 = p.at(Duration::from_millis(1999));
    assert!(p.a.conn.poll_timeout().unwrap() > t2);
    p.a.conn.handle_timeout(t2).unwrap();
    let t3 = p.at(Duration::from_secs(2));
    assert_eq!(
        p.a.conn.handle_timeout(t3),
        Err(PeerError::HeartbeatTimeout(Duration::from_secs(1)).into())
    );
    assert!(p.a.conn.is_closed());
    assert_eq!(p.a.conn.poll_timeout(), None);
    assert_eq!(
        p.a.conn.handle_input(&mut BytesMut::from(&b"x"[..]), t3),
        Err(CallerError::Closed.into())
    );
    assert!(matches!(
        p.a.conn
            .send_message(&Message::from(&b"x"[..]), &mut BytesMut::new()),
        Err(Error::Caller(CallerError::Closed))
    ));
}

#[test]
fn peer_ping_ttl_expires() {
    let mut p = Pair::new(Config::new(SocketType::Pair), Config::new(SocketType::Pair));
    p.run();
    let mut out = BytesMut::new();
    let ping = Command::Ping {
        ttl_deciseconds: 15,
        context: Bytes::new(),
    };
    p.a.conn.send_command(&ping, &mut out).unwrap();
    p.b.conn.handle_input(&mut out, p.now).unwrap();
    assert_eq!(
        p.b.conn.poll_timeout(),
        Some(p.at(Duration::from_millis(1500)))
    );
    // Traffic before the TTL cancels it ...
    p.a.conn
        .send_message(&Message::from(&b"alive"[..]), &mut out)
        .unwrap();
    p.b.conn
        .handle_input(&mut out, p.at(Duration::from_secs(1)))
        .unwrap();
    assert_eq!(p.b.conn.poll_timeout(), None);
    // ... a second PING re-arms it, and silence then kills the connection.
    p.a.conn.send_command(&ping, &mut out).unwrap();
    p.b.conn
        .handle_input(&mut out, p.at(Duration::from_secs(2)))
        .unwrap();
    assert_eq!(
        p.b.conn.handle_timeout(p.at(Duration::from_millis(3500))),
        Err(PeerError::PingTtlExpired(Duration::from_millis(1500)).into())
    );
}

#[test]
fn handshake_timeout() {
    let mut c = Config::new(SocketType::Dealer);
    c.handshake_timeout = Some(Duration::from_secs(5));
    let now = Instant::now();
    let mut conn = Connection::new(c, now);
    assert_eq!(conn.poll_timeout(), Some(now + Duration::from_secs(5)));
    conn.handle_timeout(now + Duration::from_secs(4)).unwrap();
    // Half a greeting does not help.
    let mut half = BytesMut::from(&[0xFFu8, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 1][..]);
    conn.handle_input(&mut half, now + Duration::from_secs(4))
        .unwrap();
    assert_eq!(
        conn.handle_timeout(now + Duration::from_secs(5)),
        Err(PeerError::HandshakeTimeout(Duration::from_secs(5)).into())
    );
    assert!(conn.is_closed());
    // No timeout configured: no deadline at all.
    let mut c = Config::new(SocketType::Dealer);
    c.handshake_timeout = None;
    assert_eq!(Connection::new(c, now).poll_timeout(), None);
}

#[test]
fn handshake_timeout_is_cancelled_by_ready() {
    let mut p = Pair::new(Config::new(SocketType::Pub), Config::new(SocketType::Sub));
    p.run();
    assert_eq!(p.a.conn.poll_timeout(), None);
    p.advance(Duration::from_secs(3600));
    assert!(p.a.error.is_none() && p.b.error.is_none());
}

#[test]
fn socket_type_mismatch_sends_error_and_closes() {
    let mut p = Pair::new(Config::new(SocketType::Pub), Config::new(SocketType::Pub));
    // Deliver the greetings and READYs by hand to look at the ERROR.
    let mut to_b = BytesMut::new();
    p.a.conn.poll_transmit(&mut to_b);
    let mut to_a = BytesMut::new();
    p.b.conn.poll_transmit(&mut to_a);
    p.b.conn.handle_input(&mut to_b, p.now).unwrap(); // greeting only so far
    p.b.conn.poll_transmit(&mut to_a); // b's READY
    // Greeting + READY of b: a refuses b's Socket-Type.
    assert_eq!(
        p.a.conn.handle_input(&mut to_a, p.now),
        Err(PeerError::IncompatibleSocketType {
            ours: "PUB",
            theirs: "PUB"
        }
        .into())
    );
    assert_eq!(
        p.a.conn.handle_input(&mut to_a, p.now),
        Err(CallerError::Closed.into())
    );
    let mut a_out = BytesMut::new();
    p.a.conn.poll_transmit(&mut a_out);
    // a's READY was queued before the failure; its ERROR follows it.
    to_b.extend_from_slice(&a_out);
    assert_eq!(
        p.b.conn.handle_input(&mut to_b, p.now),
        Err(PeerError::IncompatibleSocketType {
            ours: "PUB",
            theirs: "PUB"
        }
        .into())
    );
    let mut b_out = BytesMut::new();
    p.b.conn.poll_transmit(&mut b_out);
    assert!(b_out.ends_with(b"\x05ERROR\x1binvalid Socket-Type for PUB"));
}

#[test]
fn peer_error_command_is_fatal() {
    let mut p = Pair::new(Config::new(SocketType::Pub), Config::new(SocketType::Pub));
    p.run();
    assert!(matches!(
        p.a.error,
        Some(Error::Peer(PeerError::IncompatibleSocketType { .. }))
    ));
    // Whoever read the other's READY first failed first; the ERROR it sent reaches the other
    // unless the other had already failed by its own check. Either way both are closed.
    assert!(p.a.conn.is_closed() && p.b.conn.is_closed());
}

#[test]
fn oversized_message_rejected_before_body_arrives() {
    let mut small = Config::new(SocketType::Pull);
    small.limits = Limits::new(1024, 4096);
    let mut p = Pair::new(Config::new(SocketType::Push), small);
    p.run();
    p.b.take_events();
    let mut wire = BytesMut::new();
    let big = Message::from(Bytes::from(vec![0u8; 1 << 20]));
    p.a.conn.send_message(&big, &mut wire).unwrap();
    // Only the 9-byte header has arrived: b refuses at once and keeps nothing more.
    let mut head = BytesMut::from(&wire[..9]);
    let cap = head.capacity();
    assert_eq!(
        p.b.conn.handle_input(&mut head, p.now),
        Err(LimitError::FrameTooLarge {
            size: 1 << 20,
            max: 1024
        }
        .into())
    );
    assert_eq!(head.capacity(), cap);
    assert_eq!(p.b.conn.poll_event(), None);
}

/// `recv_limits` bound what the peer sends, from the header, while `limits` still let us send
/// large messages: a publisher that hears only subscriptions.
#[test]
fn recv_limits_bound_the_peer_only() {
    let mut publisher = Config::new(SocketType::Pub);
    publisher.recv_limits = Some(Limits::new(1024, 1024 + FRAME_OVERHEAD));
    let mut p = Pair::new(publisher, Config::new(SocketType::Sub));
    p.run();
    assert_eq!(
        p.a.conn.recv_limits(),
        Limits::new(1024, 1024 + FRAME_OVERHEAD)
    );
    assert_eq!(p.a.conn.limits(), Limits::default());
    // We send 1 MiB: `limits` allow it.
    let big = Message::from(Bytes::from(vec![7u8; 1 << 20]));
    p.send(true, &big);
    assert!(p.b.take_events().contains(&Event::Message(big.clone())));
    // A subscription and a 1 KiB message come in; a frame one byte larger is refused from its
    // 9-byte header, before any of its body.
    let mut wire = BytesMut::new();
    p.b.conn
        .send_command(&Command::Subscribe(Bytes::from_static(b"topic")), &mut wire)
        .unwrap();
    p.b.conn
        .send_message(&Message::from(Bytes::from(vec![1u8; 1024])), &mut wire)
        .unwrap();
    p.a.conn.handle_input(&mut wire, p.now).unwrap();
    assert!(wire.is_empty());
    p.b.conn
        .send_message(&Message::from(Bytes::from(vec![1u8; 1025])), &mut wire)
        .unwrap();
    wire.truncate(9);
    assert_eq!(
        p.a.conn.handle_input(&mut wire, p.now),
        Err(LimitError::FrameTooLarge {
            size: 1025,
            max: 1024
        }
        .into())
    );
}

/// What a driver needs to time a unit that stops arriving and to count the memory a peer
/// makes it hold: the units decoded so far and the bytes of an incomplete multipart message.
#[test]
fn units_decoded_and_partial_message_cost() {
    let mut p = Pair::new(Config::new(SocketType::Push), Config::new(SocketType::Pull));
    p.run();
    // The greeting and READY.
    assert_eq!(p.b.conn.units_decoded(), 2);
    assert_eq!(p.b.conn.partial_message_cost(), 0);
    let mut wire = BytesMut::new();
    let msg = Message::from(vec![Bytes::from(vec![1u8; 300]), Bytes::from(vec![2u8; 5])]);
    p.a.conn.send_message(&msg, &mut wire).unwrap();
    // The first part and one byte of the second: one part held, no unit more.
    let first = 9 + 300;
    let mut input = BytesMut::from(&wire[..first + 1]);
    p.b.conn.handle_input(&mut input, p.now).unwrap();
    assert_eq!(input.len(), 1);
    assert_eq!(p.b.conn.partial_message_cost(), 300 + FRAME_OVERHEAD);
    assert_eq!(p.b.conn.units_decoded(), 2);
    input.extend_from_slice(&wire[first + 1..]);
    p.b.conn.handle_input(&mut input, p.now).unwrap();
    assert!(input.is_empty());
    assert_eq!(p.b.conn.partial_message_cost(), 0);
    assert_eq!(p.b.conn.units_decoded(), 3);
    // A command counts as a unit too.
    p.a.conn
        .send_command(
            &Command::Ping {
                ttl_deciseconds: 0,
                context: Bytes::new(),
            },
            &mut input,
        )
        .unwrap();
    p.b.conn.handle_input(&mut input, p.now).unwrap();
    assert_eq!(p.b.conn.units_decoded(), 4);
}

#[test]
fn oversized_multipart_message_rejected() {
    let mut small = Config::new(SocketType::Pull);
    small.limits = Limits::new(1024, 3 * 1024);
    let mut p = Pair::new(Config::new(SocketType::Push), small);
    p.run();
    p.b.take_events();
    let part = Bytes::from(vec![1u8; 1024]);
    p.send(true, &Message::from(vec![part.clone(), part.clone()]));
    assert_eq!(p.b.take_events().len(), 1);
    p.send(true, &Message::from(vec![part.clone(); 3]));
    assert!(p.b.events.is_empty(), "partial message never surfaces");
    assert!(matches!(
        p.b.error,
        Some(Error::Limit(LimitError::MessageTooLarge { .. }))
    ));
}

#[test]
fn sending_checks_limits_and_state() {
    let mut c = Config::new(SocketType::Push);
    c.limits = Limits::new(10, FRAME_OVERHEAD + 10);
    let mut p = Pair::new(c, Config::new(SocketType::Pull));
    let mut out = BytesMut::new();
    let msg = Message::from(&b"hi"[..]);
    assert_eq!(
        p.a.conn.send_message(&msg, &mut out),
        Err(CallerError::NotReady.into())
    );
    p.run();
    assert_eq!(
        p.a.conn.send_message(&Message::new(), &mut out),
        Err(CallerError::EmptyMessage.into())
    );
    assert_eq!(
        p.a.conn
            .send_message(&Message::from(&[0u8; 11][..]), &mut out),
        Err(LimitError::FrameTooLarge { size: 11, max: 10 }.into())
    );
    assert!(matches!(
        p.a.conn.send_message(
            &Message::from(vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]),
            &mut out
        ),
        Err(Error::Limit(LimitError::MessageTooLarge { .. }))
    ));
    assert!(out.is_empty());
    assert_eq!(
        p.a.conn
            .send_command(&Command::Ready(Default::default()), &mut out),
        Err(CallerError::HandshakeCommand("READY").into())
    );
    assert_eq!(
        p.a.conn.send_command(
            &Command::Error {
                reason: Bytes::new()
            },
            &mut out
        ),
        Err(CallerError::HandshakeCommand("ERROR").into())
    );
    assert_eq!(
        p.a.conn.send_command(
            &Command::Pong {
                context: Bytes::from(vec![0; 17])
            },
            &mut out
        ),
        Err(CallerError::ContextTooLong(17).into())
    );
    assert!(out.is_empty());
}

#[test]
fn unknown_and_repeated_ready_commands_are_ignored_after_handshake() {
    let mut p = Pair::new(Config::new(SocketType::Pair), Config::new(SocketType::Pair));
    p.run();
    p.b.take_events();
    let mut out = BytesMut::new();
    let unknown = Command::Unknown {
        name: Bytes::from_static(b"X-FUTURE"),
        data: Bytes::from_static(b"\x00\x01"),
    };
    p.a.conn.send_command(&unknown, &mut out).unwrap();
    // A second READY, written by hand.
    out.extend_from_slice(b"\x04\x06\x05READY");
    p.a.conn
        .send_message(&Message::from(&b"m"[..]), &mut out)
        .unwrap();
    p.b.conn.handle_input(&mut out, p.now).unwrap();
    assert_eq!(
        p.b.conn.poll_event(),
        Some(Event::Message(Message::from(&b"m"[..])))
    );
    assert_eq!(p.b.conn.poll_event(), None);
}

#[test]
fn connection_pending_bytes_precede_messages() {
    // b becomes ready while its READY is still pending; send_message must put it first.
    let mut a = Connection::new(Config::new(SocketType::Push), Instant::now());
    let mut b = Connection::new(Config::new(SocketType::Pull), Instant::now());
    let now = Instant::now();
    let mut a_out = BytesMut::new();
    a.poll_transmit(&mut a_out);
    let mut b_out = BytesMut::new();
    b.poll_transmit(&mut b_out);
    a.handle_input(&mut b_out, now).unwrap();
    a.poll_transmit(&mut a_out); // greeting + READY of a
    b.handle_input(&mut a_out, now).unwrap();
    assert!(b.is_ready());
    assert!(b.has_pending_transmit());
    let mut wire = BytesMut::new();
    // b is a PULL: messages still may be sent on the wire by the protocol.
    b.send_message(&Message::from(&b"m"[..]), &mut wire)
        .unwrap();
    a.handle_input(&mut wire, now).unwrap();
    assert!(matches!(a.poll_event(), Some(Event::Ready { .. })));
    assert_eq!(
        a.poll_event(),
        Some(Event::Message(Message::from(&b"m"[..])))
    );
}

#[test]
fn try_new_rejects_invalid_configs() {
    let now = Instant::now();
    let mut c = Config::new(SocketType::Router);
    c.identity = Bytes::from(vec![1u8; 256]);
    assert_eq!(
        Connection::try_new(c.clone(), now).err(),
        Some(CallerError::IdentityTooLong(256))
    );
    c.identity = Bytes::new();
    c.properties = vec![("Socket-type".into(), Bytes::new())];
    assert!(matches!(
        c.validate(),
        Err(CallerError::ReservedProperty(_))
    ));
    c.properties = vec![("bad name".into(), Bytes::new())];
    assert!(matches!(
        Connection::try_new(c, now),
        Err(CallerError::InvalidPropertyName(_))
    ));
}

#[test]
fn public_types_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<Connection>();
    check::<Message>();
    check::<Event>();
    check::<Error>();
    check::<Config>();
}

#[test]
fn handle_input_into_hands_messages_to_the_caller_in_order() {
    for chunk in [1, 2, 3, 7, 64, usize::MAX] {
        let mut p = Pair::new(Config::new(SocketType::Pub), Config::new(SocketType::Sub));
        p.run();
        p.a.take_events();
        p.b.take_events();
        let msgs = [
            Message::from(&b"one"[..]),
            Message::from(vec![Bytes::from_static(b"t"), Bytes::from(vec![9u8; 300])]),
            Message::from(&b""[..]),
        ];
        // The SUB side subscribes (a command, still an event at the PUB), then messages go
        // to the SUB side through the sink.
        p.b.conn
            .send_command(
                &Command::Subscribe(Bytes::from_static(b"t")),
                &mut p.a.inbox,
            )
            .unwrap();
        let mut wire = BytesMut::new();
        for m in &msgs {
            p.a.conn.send_message(m, &mut wire).unwrap();
        }
        let mut got = Vec::new();
        let mut inbox = BytesMut::new();
        while !wire.is_empty() {
            let n = chunk.min(wire.len());
            inbox.extend_from_slice(&wire.split_to(n));
            p.b.conn
                .handle_input_into(&mut inbox, p.now, usize::MAX, |m| got.push(m))
                .unwrap();
            assert!(p.b.conn.poll_event().is_none());
        }
        assert!(inbox.is_empty());
        assert_eq!(got, msgs, "chunk {chunk}");
        // The PUB side still sees the SUBSCRIBE as an event.
        p.a.conn
            .handle_input_into(&mut p.a.inbox, p.now, usize::MAX, |_| {
                panic!("no message expected")
            })
            .unwrap();
        assert!(matches!(p.a.conn.poll_event(), Some(Event::Subscribe(s)) if s == "t"));
    }
}

#[test]
fn handle_input_into_queues_messages_that_complete_the_handshake_read() {
    let mut p = Pair::new(dealer(b""), Config::new(SocketType::Dealer));
    // B sees A's greeting and answers with its own greeting and READY; A completes its
    // handshake; then A's READY and a message reach B in one read.
    let mut greeting = BytesMut::new();
    p.a.conn.poll_transmit(&mut greeting);
    p.b.conn.handle_input(&mut greeting, p.now).unwrap();
    p.b.conn.poll_transmit(&mut p.a.inbox);
    p.a.conn.handle_input(&mut p.a.inbox, p.now).unwrap();
    assert!(p.a.conn.is_ready() && !p.b.conn.is_ready());
    assert!(matches!(p.a.conn.poll_event(), Some(Event::Ready { .. })));
    p.a.conn.poll_transmit(&mut p.b.inbox);
    let msg = Message::from(&b"early"[..]);
    p.a.conn.send_message(&msg, &mut p.b.inbox).unwrap();
    let mut sunk = 0;
    p.b.conn
        .handle_input_into(&mut p.b.inbox, p.now, usize::MAX, |_| sunk += 1)
        .unwrap();
    assert_eq!(sunk, 0);
    assert!(matches!(p.b.conn.poll_event(), Some(Event::Ready { .. })));
    assert_eq!(p.b.conn.poll_event(), Some(Event::Message(msg)));
}

#[test]
fn handle_input_into_stops_after_max_messages_and_resumes() {
    let mut p = Pair::new(dealer(b""), Config::new(SocketType::Dealer));
    p.run();
    p.a.take_events();
    p.b.take_events();
    let msgs: Vec<Message> = (0..10u8)
        .map(|i| {
            if i % 3 == 0 {
                Message::from(vec![Bytes::from(vec![i]), Bytes::from(vec![i; 200])])
            } else {
                Message::from(Bytes::from(vec![i; usize::from(i)]))
            }
        })
        .collect();
    let mut wire = BytesMut::new();
    for m in &msgs {
        p.a.conn.send_message(m, &mut wire).unwrap();
    }
    let total = wire.len();
    let mut got = Vec::new();
    // A cap of 0 decodes nothing and leaves every byte in place.
    let n =
        p.b.conn
            .handle_input_into(&mut wire, p.now, 0, |m| got.push(m))
            .unwrap();
    assert_eq!((n, wire.len()), (0, total));
    // Then 4, 4 and the last 2, without new bytes in between.
    for want in [4, 4, 2] {
        let n =
            p.b.conn
                .handle_input_into(&mut wire, p.now, 4, |m| got.push(m))
                .unwrap();
        assert_eq!(n, want);
    }
    assert!(wire.is_empty());
    assert_eq!(got, msgs);
}
