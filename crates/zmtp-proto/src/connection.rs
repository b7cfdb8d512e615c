//! The per-connection state machine: greeting, security handshake, traffic, heartbeats.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::command::{Command, Metadata, PROPERTY_IDENTITY, PROPERTY_SOCKET_TYPE};
use crate::curve::{CURVE_FLAG_COMMAND, CURVE_FLAG_MORE, CURVE_MESSAGE_OVERHEAD, Cipher};
use crate::error::{CallerError, Error, LimitError, PeerError};
use crate::frame::{
    FLAG_MORE, FRAME_OVERHEAD, Frame, FrameDecoder, FrameHead, FrameKind, Limits, encode_message,
    put_header,
};
use crate::greeting::{GREETING_LEN, Greeting};
use crate::mechanism::{Mechanism, MechanismConfig};
use crate::message::Message;
use crate::socket_type::SocketType;

/// Default [`Config::handshake_timeout`]: 30 s, as libzmq's `ZMQ_HANDSHAKE_IVL`.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest identity libzmq accepts (its routing ids are at most 255 bytes).
const MAX_IDENTITY: usize = 255;

/// Largest frame accepted before the handshake is complete: 64 KiB, whatever
/// [`Limits`] say. A READY from libzmq is tens of bytes; this leaves room for
/// many `X-` properties, while a peer that never completes its handshake
/// cannot make us buffer a 64 MiB "READY".
pub const HANDSHAKE_FRAME_MAX: u64 = crate::frame::COMMAND_SIZE_FLOOR;

/// The failure an ERROR command from the peer causes.
fn error_command(reason: &[u8]) -> Error {
    PeerError::ErrorCommand {
        reason: String::from_utf8_lossy(reason).into_owned(),
    }
    .into()
}

/// The limits in force during the handshake: commands up to
/// [`HANDSHAKE_FRAME_MAX`], message frames (refused then anyway) no larger.
fn handshake_limits(limits: Limits) -> Limits {
    Limits {
        max_frame_size: limits.max_frame_size.min(HANDSHAKE_FRAME_MAX),
        max_message_size: limits
            .max_message_size
            .min(HANDSHAKE_FRAME_MAX + FRAME_OVERHEAD),
    }
}

/// The outer frame limits under CURVE: a frame of `max_frame_size` grows by
/// [`CURVE_MESSAGE_OVERHEAD`] in its box, and every box is a message of one frame.
fn boxed_limits(limits: Limits) -> Limits {
    let frame = limits
        .max_frame_size
        .saturating_add(CURVE_MESSAGE_OVERHEAD as u64);
    Limits {
        max_frame_size: frame,
        max_message_size: frame.saturating_add(FRAME_OVERHEAD),
    }
}

/// Appends `cmd` (already validated) as a command frame, or boxed in a MESSAGE under CURVE.
fn encode_command(cipher: Option<&mut Cipher>, cmd: &Command, out: &mut BytesMut) {
    match cipher {
        None => {
            let _ = cmd.encode(out);
        }
        Some(cipher) => {
            let mut body = BytesMut::with_capacity(cmd.body_len());
            cmd.put_body(&mut body);
            cipher.seal_frame(CURVE_FLAG_COMMAND, &body, out);
        }
    }
}

/// Heartbeat settings (ZMTP 3.1 PING/PONG).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Heartbeat {
    /// Send a PING this often once the handshake is complete. Zero disables heartbeats.
    pub interval: Duration,
    /// TTL announced in our PINGs: the peer may close if it hears nothing from us for this long.
    /// Sent in deciseconds, saturating at 6553.5 s; zero means no TTL.
    pub ttl: Duration,
    /// Close with [`PeerError::HeartbeatTimeout`] when nothing arrives for this long after a PING.
    /// Zero disables the check.
    pub timeout: Duration,
}

impl Heartbeat {
    /// PING every `interval`, no TTL, time out after one `interval` of silence (libzmq's defaults
    /// for `ZMQ_HEARTBEAT_TTL` and `ZMQ_HEARTBEAT_TIMEOUT`).
    pub fn new(interval: Duration) -> Self {
        Heartbeat {
            interval,
            ttl: Duration::ZERO,
            timeout: interval,
        }
    }

    /// The TTL field sent in PING: tenths of a second, saturating at `u16::MAX`.
    pub fn ttl_deciseconds(&self) -> u16 {
        u16::try_from(self.ttl.as_millis() / 100).unwrap_or(u16::MAX)
    }
}

/// Settings of one [`Connection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Our socket type, sent as `Socket-Type` and checked against the peer's.
    pub socket_type: SocketType,
    /// Our routing id, sent as `Identity` (at most 255 bytes). Like libzmq, the property is sent
    /// (possibly empty) by REQ, DEALER and ROUTER, and by other types only when non-empty.
    pub identity: Bytes,
    /// Extra READY properties (`X-*`, `Resource`); names 1-255 of `A-Z a-z 0-9 - _ . +`,
    /// not `Socket-Type` or `Identity`. Sent in canonical spelling.
    pub properties: Vec<(String, Bytes)>,
    /// Frame and message size limits for both directions (unless `recv_limits` is set).
    pub limits: Limits,
    /// Limits for what the peer sends only, when they should differ from `limits` (which then
    /// bound only what we send): a socket whose input is small by its role (a publisher hears
    /// only subscriptions) refuses a large frame from its header, while it still sends large
    /// messages. `None` (the default): `limits` both ways.
    pub recv_limits: Option<Limits>,
    /// The security mechanism and our role in it (NULL, PLAIN or CURVE client or server).
    pub mechanism: MechanismConfig,
    /// The peer's address as the driver knows it (`127.0.0.1:40000`, an IPC path), handed to
    /// the server's [`Authenticator`](crate::Authenticator); empty when unknown.
    pub peer_address: String,
    /// Heartbeats; `None` (the default) sends no PINGs (PINGs from the peer are still answered).
    pub heartbeat: Option<Heartbeat>,
    /// Close with [`PeerError::HandshakeTimeout`] if the handshake takes longer; default 30 s.
    pub handshake_timeout: Option<Duration>,
}

impl Config {
    /// Defaults for `socket_type`: no identity or properties, default limits, NULL, no
    /// heartbeats, 30 s handshake timeout.
    pub fn new(socket_type: SocketType) -> Self {
        Config {
            socket_type,
            identity: Bytes::new(),
            properties: Vec::new(),
            limits: Limits::default(),
            recv_limits: None,
            mechanism: MechanismConfig::Null,
            peer_address: String::new(),
            heartbeat: None,
            handshake_timeout: Some(DEFAULT_HANDSHAKE_TIMEOUT),
        }
    }

    /// Checks the identity and properties; [`Connection::try_new`] fails exactly when this does.
    pub fn validate(&self) -> Result<(), CallerError> {
        self.mechanism.validate()?;
        self.local_metadata().map(drop)
    }

    /// The READY metadata this configuration announces (`Socket-Type`,
    /// `Identity` when sent, the extra properties); fails as
    /// [`validate`](Config::validate) does.
    pub fn metadata(&self) -> Result<Metadata, CallerError> {
        self.local_metadata()
    }

    /// The READY metadata we send: Socket-Type, Identity (when libzmq would send it), properties.
    fn local_metadata(&self) -> Result<Metadata, CallerError> {
        if self.identity.len() > MAX_IDENTITY {
            return Err(CallerError::IdentityTooLong(self.identity.len()));
        }
        let mut m = Metadata::new();
        m.insert(
            PROPERTY_SOCKET_TYPE,
            Bytes::from_static(self.socket_type.as_str().as_bytes()),
        )?;
        let sends_identity = matches!(
            self.socket_type,
            SocketType::Req | SocketType::Dealer | SocketType::Router
        );
        if sends_identity || !self.identity.is_empty() {
            m.insert(PROPERTY_IDENTITY, self.identity.clone())?;
        }
        for (name, value) in &self.properties {
            if name.eq_ignore_ascii_case(PROPERTY_SOCKET_TYPE)
                || name.eq_ignore_ascii_case(PROPERTY_IDENTITY)
            {
                return Err(CallerError::ReservedProperty(name.clone()));
            }
            m.insert(name, value.clone())?;
        }
        Ok(m)
    }
}

/// What a [`Connection`] tells its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The handshake is complete; messages may flow both ways.
    Ready {
        /// The peer's socket type (already checked compatible with ours).
        peer_socket_type: SocketType,
        /// The peer's `Identity` property (empty when absent).
        peer_identity: Bytes,
        /// All of the peer's READY properties.
        peer_metadata: Metadata,
    },
    /// A complete message.
    Message(Message),
    /// A SUBSCRIBE command (ZMTP 3.1 peers). 3.0 peers and XSUBs send `0x01 + prefix` messages
    /// instead, which arrive as [`Event::Message`].
    Subscribe(Bytes),
    /// A CANCEL command (ZMTP 3.1 peers); 3.0 peers send `0x00 + prefix` messages.
    Cancel(Bytes),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the peer's greeting.
    Greeting,
    /// Greeting accepted; the mechanism's handshake runs.
    Handshake,
    /// Traffic.
    Ready,
    /// A fatal error happened; only `poll_transmit` (to flush an ERROR) is still useful.
    Closed,
}

/// One ZMTP connection, sans-IO.
///
/// The driver owns the socket, a read buffer and a write buffer, and loops:
///
/// 1. after reading into the read buffer, call [`handle_input`](Self::handle_input), then drain
///    [`poll_event`](Self::poll_event);
/// 2. call [`poll_transmit`](Self::poll_transmit) and write what it appended (greeting,
///    handshake, PONG, PING; also after an error, for the ERROR command);
/// 3. encode outgoing traffic with [`send_message`](Self::send_message) /
///    [`send_command`](Self::send_command), which first flush pending control bytes into the same
///    buffer so order on the wire is always right;
/// 4. sleep until [`poll_timeout`](Self::poll_timeout) and call
///    [`handle_timeout`](Self::handle_timeout) then.
///
/// Any `Err` from `handle_input` or `handle_timeout` means: log it, flush `poll_transmit`, close.
pub struct Connection {
    socket_type: SocketType,
    /// What we send is checked against these.
    limits: Limits,
    /// What the peer sends is checked against these.
    recv_limits: Limits,
    heartbeat: Option<Heartbeat>,
    handshake_timeout: Option<Duration>,
    local_metadata: Metadata,
    mechanism: Box<dyn Mechanism + Send + Sync>,
    /// CURVE: boxes and unboxes every frame once the handshake is complete.
    cipher: Option<Cipher>,
    state: State,
    decoder: FrameDecoder,
    /// Parts of the message being received.
    partial: Message,
    /// Body bytes of `partial` (kept, so that neither the driver's look at it after every
    /// read nor the cost check of every boxed part is linear in the parts).
    partial_bytes: usize,
    events: VecDeque<Event>,
    /// Units (greeting, commands, whole messages) decoded so far: a driver tells by it whether
    /// the bytes it still holds belong to a unit that was already there (see
    /// [`Connection::units_decoded`]).
    units: u64,
    /// Scratch list of the frames found by one pass of `consume_ready` (kept for its capacity).
    heads: Vec<FrameHead>,
    /// Control bytes not yet handed to the driver.
    pending: BytesMut,
    peer_version: Option<(u8, u8)>,
    peer_socket_type: Option<SocketType>,
    /// Bytes left unconsumed in the driver's buffer by the last `handle_input` call, to tell new
    /// bytes (liveness) from a repeated call.
    unconsumed: usize,
    handshake_deadline: Option<Instant>,
    next_ping: Option<Instant>,
    /// We sent a PING: traffic must arrive before this.
    heartbeat_deadline: Option<Instant>,
    /// The peer's PING announced a TTL: traffic must arrive before this.
    ttl_deadline: Option<(Instant, Duration)>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("socket_type", &self.socket_type)
            .field("mechanism", &self.mechanism.name())
            .field("state", &self.state)
            .field("peer_version", &self.peer_version)
            .field("peer_socket_type", &self.peer_socket_type)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// A connection that has just been established; queues our 64-byte greeting at once.
    ///
    /// # Panics
    ///
    /// If the config is invalid (see [`Config::validate`]); use [`Connection::try_new`] to get
    /// the error instead.
    pub fn new(config: Config, now: Instant) -> Self {
        match Connection::try_new(config, now) {
            Ok(c) => c,
            Err(e) => panic!("invalid dafka_zmtp_proto::Config: {e}"),
        }
    }

    /// Like [`Connection::new`], but returns [`CallerError`] for an invalid config.
    pub fn try_new(config: Config, now: Instant) -> Result<Self, CallerError> {
        config.mechanism.validate()?;
        let local_metadata = config.local_metadata()?;
        let mechanism = config.mechanism.build(&config.peer_address);
        let mut pending = BytesMut::with_capacity(GREETING_LEN + 64);
        // NOTES.md: send all 64 bytes at once; never wait for the peer's greeting first.
        Greeting::new(mechanism.name(), mechanism.as_server()).encode(&mut pending);
        let recv_limits = config.recv_limits.unwrap_or(config.limits);
        Ok(Connection {
            socket_type: config.socket_type,
            limits: config.limits,
            recv_limits,
            heartbeat: config.heartbeat.filter(|h| !h.interval.is_zero()),
            handshake_timeout: config.handshake_timeout,
            local_metadata,
            mechanism,
            cipher: None,
            state: State::Greeting,
            decoder: FrameDecoder::new(handshake_limits(recv_limits)),
            partial: Message::new(),
            partial_bytes: 0,
            units: 0,
            events: VecDeque::new(),
            heads: Vec::new(),
            pending,
            peer_version: None,
            peer_socket_type: None,
            unconsumed: 0,
            handshake_deadline: config.handshake_timeout.map(|t| now + t),
            next_ping: None,
            heartbeat_deadline: None,
            ttl_deadline: None,
        })
    }

    /// Our socket type.
    pub fn socket_type(&self) -> SocketType {
        self.socket_type
    }

    /// The limits in force for what we send.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The limits in force for what the peer sends ([`Config::recv_limits`], else
    /// [`Config::limits`]).
    pub fn recv_limits(&self) -> Limits {
        self.recv_limits
    }

    /// The cost ([`Limits::message_cost`]: bodies plus [`FRAME_OVERHEAD`] per part) of the
    /// parts of a multipart message received so far, while the message is incomplete (its last
    /// part has not arrived); 0 between messages. With the partial frame a driver holds in its
    /// read buffer, this is the memory a peer makes us hold. Constant time.
    pub fn partial_message_cost(&self) -> u64 {
        Limits::message_cost(self.partial.len(), self.partial_bytes)
    }

    /// How many units (the greeting, commands, whole messages) have been decoded: when it has
    /// not moved since the driver last looked, the bytes it still holds (its partial frame,
    /// [`partial_message_cost`](Self::partial_message_cost)) belong to the same unit as then.
    /// A driver times a unit that stops arriving by it.
    pub fn units_decoded(&self) -> u64 {
        self.units
    }

    /// Whether the handshake is complete (and the connection has not failed).
    pub fn is_ready(&self) -> bool {
        self.state == State::Ready
    }

    /// On a CURVE server whose handshake is complete: the client's long-term public key, which
    /// it proved it holds and the authenticator allowed (libzmq's `User-Id` for CURVE is its
    /// Z85). `None` before that, on clients and with NULL or PLAIN.
    pub fn curve_client_key(&self) -> Option<[u8; 32]> {
        match self.state {
            State::Ready => self.mechanism.curve_client_key(),
            _ => None,
        }
    }

    /// Whether a fatal error happened; the driver must close the connection.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// The peer's ZMTP version `(major, minor)` once its greeting arrived; `(3, 0)` peers take
    /// subscriptions as `0x01`/`0x00` messages rather than commands.
    pub fn peer_version(&self) -> Option<(u8, u8)> {
        self.peer_version
    }

    /// The peer's socket type once the handshake is complete.
    pub fn peer_socket_type(&self) -> Option<SocketType> {
        self.peer_socket_type
    }

    /// Consumes every complete unit (greeting, frame) at the front of `buf`, leaving a partial
    /// one in place; events become available through [`poll_event`](Self::poll_event).
    ///
    /// Call it after each read. New bytes count as liveness for heartbeats. On `Err` the
    /// connection is dead: flush [`poll_transmit`](Self::poll_transmit) (it may hold an ERROR
    /// command) and close. Complete messages decoded before the error stay available through
    /// [`poll_event`](Self::poll_event); a partial message is dropped. Nothing is ever reserved in `buf` from a size the peer announced.
    pub fn handle_input(&mut self, buf: &mut BytesMut, now: Instant) -> Result<(), Error> {
        self.handle_input_with(buf, now, usize::MAX, |events, msg| {
            events.push_back(Event::Message(msg));
        })
    }

    /// Like [`handle_input`](Self::handle_input), but every complete message decoded once the
    /// handshake is complete goes to `on_message`, in order, instead of the event queue; other
    /// events ([`Event::Ready`], [`Event::Subscribe`], [`Event::Cancel`]) are still queued for
    /// [`poll_event`](Self::poll_event). Decoding stops after `max_messages` messages: the
    /// frames after them stay in `buf`, undecoded, for a later call (with or without new bytes).
    /// Returns how many messages went to `on_message`.
    ///
    /// Saves a driver that attached to the connection already the detour of each message
    /// through the event queue, and lets it decode no more messages than it has room for. A
    /// message that completes in the same call as the handshake is still queued behind
    /// [`Event::Ready`] (and not counted), so a driver that only acts on messages after it saw
    /// `Ready` misses none. Messages and queued events are not ordered against each other.
    pub fn handle_input_into(
        &mut self,
        buf: &mut BytesMut,
        now: Instant,
        max_messages: usize,
        mut on_message: impl FnMut(Message),
    ) -> Result<usize, Error> {
        if self.state == State::Ready {
            let mut n = 0;
            self.handle_input_with(buf, now, max_messages, |_, msg| {
                n += 1;
                on_message(msg);
            })?;
            Ok(n)
        } else {
            self.handle_input(buf, now)?;
            Ok(0)
        }
    }

    fn handle_input_with<S>(
        &mut self,
        buf: &mut BytesMut,
        now: Instant,
        max_messages: usize,
        sink: S,
    ) -> Result<(), Error>
    where
        S: FnMut(&mut VecDeque<Event>, Message),
    {
        if self.state == State::Closed {
            return Err(CallerError::Closed.into());
        }
        if buf.len() != self.unconsumed {
            // "a peer SHOULD treat any incoming traffic as a sign of liveness"
            self.heartbeat_deadline = None;
            self.ttl_deadline = None;
        }
        let mut result = self.consume_handshake(buf, now);
        if result.is_ok() && self.state == State::Ready {
            result = if self.cipher.is_some() {
                self.consume_boxed(buf, now, max_messages, sink)
            } else {
                self.consume_ready(buf, now, max_messages, sink)
            };
        }
        self.unconsumed = buf.len();
        if result.is_err() {
            self.fail();
        }
        result
    }

    /// Consumes the greeting and the handshake commands at the front of `buf`; returns once
    /// more bytes are needed or the connection is ready.
    fn consume_handshake(&mut self, buf: &mut BytesMut, now: Instant) -> Result<(), Error> {
        loop {
            match self.state {
                State::Greeting => {
                    let Some(greeting) = Greeting::decode(buf)? else {
                        return Ok(());
                    };
                    buf.advance(GREETING_LEN);
                    self.units += 1;
                    self.on_greeting(&greeting)?;
                }
                State::Handshake => {
                    let Some(frame) = self.decoder.decode(buf)? else {
                        return Ok(());
                    };
                    self.units += 1;
                    self.on_handshake_frame(frame, now)?;
                }
                // (`handle_input_with` refuses a closed connection before this runs.)
                State::Ready | State::Closed => return Ok(()),
            }
        }
    }

    /// Decodes every complete frame at the front of `buf` (up to the end of the `max_messages`th
    /// message; the rest stays in `buf`) in one pass: the headers are checked
    /// first (limits included, before any body is touched), then the complete frames are split
    /// off as one shared chunk and each body is a slice of it (one split instead of one per
    /// frame). Frames are acted on in order; an error stops at the frame that caused it, after
    /// the frames before it were handled, exactly as decoding one frame at a time would.
    fn consume_ready<S>(
        &mut self,
        buf: &mut BytesMut,
        now: Instant,
        max_messages: usize,
        mut sink: S,
    ) -> Result<(), Error>
    where
        S: FnMut(&mut VecDeque<Event>, Message),
    {
        // Always stored empty (`drain` below empties it).
        let mut heads = std::mem::take(&mut self.heads);
        let mut end = 0usize;
        let mut failure = None;
        let mut messages = 0usize;
        while messages < max_messages
            && let Some(rest) = buf.get(end..)
        {
            match self.decoder.decode_header(rest) {
                Ok(Some(head)) => {
                    end += head.header_len + head.body_len;
                    if matches!(head.kind, FrameKind::Message { more: false }) {
                        messages += 1;
                    }
                    heads.push(head);
                }
                Ok(None) => break,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let chunk = buf.split_to(end).freeze();
        // Whole messages and commands: what the frames complete (a MORE part completes none).
        self.units += heads
            .iter()
            .filter(|h| !matches!(h.kind, FrameKind::Message { more: true }))
            .count() as u64;
        let mut pos = 0usize;
        let mut result = Ok(());
        for head in heads.drain(..) {
            let start = pos + head.header_len;
            pos = start + head.body_len;
            let body = chunk.slice(start..pos);
            match head.kind {
                FrameKind::Message { more: false } if self.partial.is_empty() => {
                    // A single-frame message: no detour through `partial`.
                    sink(&mut self.events, Message::from(body));
                }
                FrameKind::Message { more } => {
                    self.partial_bytes += body.len();
                    self.partial.push(body);
                    if !more {
                        self.partial_bytes = 0;
                        let msg = std::mem::take(&mut self.partial);
                        sink(&mut self.events, msg);
                    }
                }
                FrameKind::Command => {
                    if let Err(e) = Command::decode(body)
                        .map_err(Error::from)
                        .and_then(|c| self.on_command(c, now))
                    {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        self.heads = heads;
        result?;
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Length of the whole frame at the front of `buf` (header and body) once its header has
    /// arrived and passed the size limits; `None` before the handshake, while the header is
    /// incomplete, or when the frame is invalid (`handle_input` reports that).
    ///
    /// A driver may use it to make room for a large frame in one step after `handle_input` left
    /// it partial; the size has then been checked against [`Limits`].
    pub fn frame_len_hint(&self, buf: &[u8]) -> Option<usize> {
        match self.state {
            State::Handshake | State::Ready => self.decoder.frame_len_hint(buf),
            State::Greeting | State::Closed => None,
        }
    }

    fn on_greeting(&mut self, greeting: &Greeting) -> Result<(), Error> {
        let ours = Greeting::new(self.mechanism.name(), false).mechanism;
        // "If the peer's mechanism does not exactly match the mechanism it sent, it MUST close
        // the connection." The whole 20-byte field is compared, padding included, as libzmq does.
        if greeting.mechanism != ours {
            return Err(PeerError::MechanismMismatch {
                ours: self.mechanism.name().to_owned(),
                theirs: String::from_utf8_lossy(greeting.mechanism_name()).into_owned(),
            }
            .into());
        }
        self.peer_version = Some((greeting.major, greeting.minor));
        self.mechanism
            .start(&self.local_metadata, &mut self.pending);
        self.state = State::Handshake;
        Ok(())
    }

    fn on_handshake_frame(&mut self, frame: Frame, now: Instant) -> Result<(), Error> {
        let body = match frame {
            Frame::Command(body) => body,
            Frame::Message { .. } => {
                return Err(PeerError::UnexpectedDuringHandshake {
                    expected: self.mechanism.expecting(),
                    got: "a message frame".to_owned(),
                }
                .into());
            }
        };
        // "A peer SHALL treat an incoming ERROR command as fatal", in the handshake too, for
        // every mechanism.
        if body.get(..6) == Some(b"\x05ERROR")
            && let Command::Error { reason } = Command::decode(body.clone())?
        {
            return Err(error_command(&reason));
        }
        if let Some(peer) = self.mechanism.on_command(body, &mut self.pending)? {
            self.on_peer_ready(peer, now)?;
        }
        Ok(())
    }

    /// Validates the peer's metadata; on a bad Socket-Type queues an ERROR and fails.
    fn on_peer_ready(&mut self, peer: Metadata, now: Instant) -> Result<(), Error> {
        let peer_type = match self.check_peer_socket_type(&peer) {
            Ok(t) => t,
            Err(e) => {
                // "If the peer's socket type is not valid, the peer SHALL send an ERROR command
                // and close the connection." (libzmq itself just closes.)
                let reason = Bytes::from(format!("invalid Socket-Type for {}", self.socket_type));
                // Cannot fail: the reason is far below 255 bytes.
                let _ = Command::Error { reason }.encode(&mut self.pending);
                return Err(e.into());
            }
        };
        let peer_identity = peer.get(PROPERTY_IDENTITY).cloned().unwrap_or_default();
        self.state = State::Ready;
        self.cipher = self.mechanism.take_cipher();
        // The full limits apply from now on (no message is in progress: the
        // handshake consists of single command frames). Under CURVE each frame
        // arrives in its own MESSAGE box, CURVE_MESSAGE_OVERHEAD bytes larger;
        // the inner message's size is checked as boxes open.
        self.decoder = FrameDecoder::new(match self.cipher {
            None => self.recv_limits,
            Some(_) => boxed_limits(self.recv_limits),
        });
        self.peer_socket_type = Some(peer_type);
        self.handshake_deadline = None;
        self.next_ping = self.heartbeat.map(|h| now + h.interval);
        self.events.push_back(Event::Ready {
            peer_socket_type: peer_type,
            peer_identity,
            peer_metadata: peer,
        });
        Ok(())
    }

    fn check_peer_socket_type(&self, peer: &Metadata) -> Result<SocketType, PeerError> {
        let raw = peer
            .get(PROPERTY_SOCKET_TYPE)
            .ok_or(PeerError::MissingSocketType)?;
        let name = String::from_utf8_lossy(raw);
        let theirs: SocketType = name
            .parse()
            .map_err(|_| PeerError::UnknownSocketType(name.clone().into_owned()))?;
        if !self.socket_type.is_compatible(theirs) {
            return Err(PeerError::IncompatibleSocketType {
                ours: self.socket_type.as_str(),
                theirs: theirs.as_str(),
            });
        }
        Ok(theirs)
    }

    /// A command after the handshake.
    fn on_command(&mut self, cmd: Command, now: Instant) -> Result<(), Error> {
        match cmd {
            Command::Ping {
                ttl_deciseconds,
                context,
            } => {
                // "When a peer receives a PING command it SHALL respond with a PONG command
                // that echoes the ping-context, which may be empty"
                self.queue_command(&Command::Pong { context });
                // "If it receives a PING command with a non-zero TTL, and receives no further
                // traffic within that TTL" the connection is dead.
                if ttl_deciseconds > 0 && self.ttl_deadline.is_none() {
                    let ttl = Duration::from_millis(u64::from(ttl_deciseconds) * 100);
                    self.ttl_deadline = Some((now + ttl, ttl));
                }
            }
            Command::Pong { .. } => {}
            Command::Subscribe(prefix) => self.events.push_back(Event::Subscribe(prefix)),
            Command::Cancel(prefix) => self.events.push_back(Event::Cancel(prefix)),
            // "A peer SHALL treat an incoming ERROR command as fatal".
            Command::Error { reason } => return Err(error_command(&reason)),
            // A repeated READY, and unknown commands, are ignored (as libzmq does).
            Command::Ready(_) | Command::Unknown { .. } => {}
        }
        Ok(())
    }

    /// Queues a command (validated by the caller) for [`poll_transmit`](Self::poll_transmit):
    /// boxed under CURVE.
    fn queue_command(&mut self, cmd: &Command) {
        encode_command(self.cipher.as_mut(), cmd, &mut self.pending);
    }

    /// [`consume_ready`](Self::consume_ready) under CURVE: every frame is a MESSAGE box; open
    /// each (its nonce checked first), then act on the frame inside as on a clear one. The
    /// inner message's cost is checked against [`Limits`] frame by frame.
    fn consume_boxed<S>(
        &mut self,
        buf: &mut BytesMut,
        now: Instant,
        max_messages: usize,
        mut sink: S,
    ) -> Result<(), Error>
    where
        S: FnMut(&mut VecDeque<Event>, Message),
    {
        let mut messages = 0usize;
        while messages < max_messages {
            let Some(head) = self.decoder.decode_header(buf)? else {
                return Ok(());
            };
            // The box is opened in place: split off as a `BytesMut` of its own, not shared.
            let mut body = buf.split_to(head.header_len + head.body_len);
            body.advance(head.header_len);
            let Some(cipher) = self.cipher.as_mut() else {
                return Ok(());
            };
            let (flags, inner) = cipher.open_frame(body)?;
            if flags & (CURVE_FLAG_COMMAND | CURVE_FLAG_MORE) != CURVE_FLAG_MORE {
                self.units += 1;
            }
            if flags & CURVE_FLAG_COMMAND != 0 {
                if !self.partial.is_empty() {
                    return Err(PeerError::CommandInsideMessage.into());
                }
                let cmd = Command::decode(inner)?;
                self.on_command(cmd, now)?;
                continue;
            }
            let cost =
                Limits::message_cost(self.partial.len() + 1, self.partial_bytes + inner.len());
            if cost > self.recv_limits.max_message_size {
                return Err(LimitError::MessageTooLarge {
                    size: cost,
                    max: self.recv_limits.max_message_size,
                }
                .into());
            }
            self.partial_bytes += inner.len();
            self.partial.push(inner);
            if flags & CURVE_FLAG_MORE == 0 {
                self.partial_bytes = 0;
                let msg = std::mem::take(&mut self.partial);
                sink(&mut self.events, msg);
                messages += 1;
            }
        }
        Ok(())
    }

    fn fail(&mut self) {
        self.state = State::Closed;
        self.partial = Message::new();
        self.partial_bytes = 0;
        self.handshake_deadline = None;
        self.next_ping = None;
        self.heartbeat_deadline = None;
        self.ttl_deadline = None;
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Appends every pending control byte (greeting, handshake commands, PONG, PING, ERROR) to
    /// `out`.
    pub fn poll_transmit(&mut self, out: &mut BytesMut) {
        if !self.pending.is_empty() {
            out.extend_from_slice(&self.pending);
            self.pending.clear();
        }
    }

    /// Whether [`poll_transmit`](Self::poll_transmit) has bytes to hand out.
    pub fn has_pending_transmit(&self) -> bool {
        !self.pending.is_empty()
    }

    fn check_can_send(&self) -> Result<(), CallerError> {
        match self.state {
            State::Ready => Ok(()),
            State::Closed => Err(CallerError::Closed),
            State::Greeting | State::Handshake => Err(CallerError::NotReady),
        }
    }

    /// Encodes a whole message into `out` (after any pending control bytes).
    ///
    /// Fails with [`CallerError::NotReady`] before the handshake, [`CallerError::EmptyMessage`]
    /// for a message without frames, and [`Error::Limit`] when a frame or the message exceeds
    /// [`Limits`]; nothing is written then.
    pub fn send_message(&mut self, msg: &Message, out: &mut BytesMut) -> Result<(), Error> {
        self.prepare_send(msg, out)?;
        match &mut self.cipher {
            None => encode_message(msg, out),
            Some(cipher) => {
                // "Each frame is its own MESSAGE" (NOTES.md), MORE inside the box.
                let last = msg.len().saturating_sub(1);
                for (i, frame) in msg.iter().enumerate() {
                    let flags = if i < last { CURVE_FLAG_MORE } else { 0 };
                    cipher.seal_frame(flags, frame, out);
                }
            }
        }
        Ok(())
    }

    /// The checks every outgoing message passes, then the pending control bytes into `out`.
    fn prepare_send(&mut self, msg: &Message, out: &mut BytesMut) -> Result<(), Error> {
        self.check_can_send()?;
        if msg.is_empty() {
            return Err(CallerError::EmptyMessage.into());
        }
        self.limits.check_message(msg)?;
        self.poll_transmit(out);
        Ok(())
    }

    /// Like [`send_message`](Self::send_message), but frame bodies longer than `copy_max` bytes
    /// are not copied: whenever one is reached, the bytes encoded so far are moved from `out`
    /// to the back of `parts`, followed by (a reference-counted clone of) the body itself.
    ///
    /// The bytes to put on the wire are then every element of `parts` in order, followed by
    /// `out`, which suits a vectored write. Checks and errors are those of `send_message`;
    /// nothing is appended on error.
    pub fn send_message_parts(
        &mut self,
        msg: &Message,
        out: &mut BytesMut,
        parts: &mut VecDeque<Bytes>,
        copy_max: usize,
    ) -> Result<(), Error> {
        // Boxed frames are ciphertext made here: nothing to share with the caller.
        if self.cipher.is_some() || msg.frames().iter().all(|f| f.len() <= copy_max) {
            return self.send_message(msg, out);
        }
        self.prepare_send(msg, out)?;
        let frames = msg.frames();
        let last = frames.len().saturating_sub(1);
        for (i, frame) in frames.iter().enumerate() {
            put_header(out, if i < last { FLAG_MORE } else { 0 }, frame.len());
            if frame.len() > copy_max {
                parts.push_back(out.split().freeze());
                parts.push_back(frame.clone());
            } else {
                out.extend_from_slice(frame);
            }
        }
        Ok(())
    }

    /// Encodes a command into `out` (after any pending control bytes): SUBSCRIBE, CANCEL, PING,
    /// PONG or an unknown command. READY and ERROR belong to the handshake and are refused.
    ///
    /// To a ZMTP 3.0 peer ([`peer_version`](Self::peer_version) `(3, 0)`), which has no
    /// SUBSCRIBE/CANCEL commands, SUBSCRIBE and CANCEL are sent as the single-frame message
    /// `0x01 + prefix` / `0x00 + prefix` instead.
    pub fn send_command(&mut self, cmd: &Command, out: &mut BytesMut) -> Result<(), Error> {
        self.check_can_send()?;
        if let Command::Ready(_) | Command::Error { .. } = cmd {
            let name = if matches!(cmd, Command::Ready(_)) {
                "READY"
            } else {
                "ERROR"
            };
            return Err(CallerError::HandshakeCommand(name).into());
        }
        cmd.validate()?;
        let legacy = self.peer_version == Some((3, 0));
        match cmd {
            Command::Subscribe(prefix) | Command::Cancel(prefix) if legacy => {
                let body = crate::pattern::encode(matches!(cmd, Command::Subscribe(_)), prefix);
                self.poll_transmit(out);
                if let Some(cipher) = &mut self.cipher {
                    cipher.seal_frame(0, &body, out);
                } else {
                    out.reserve(9 + body.len());
                    put_header(out, 0, body.len());
                    out.put_slice(&body);
                }
            }
            _ => {
                self.poll_transmit(out);
                encode_command(self.cipher.as_mut(), cmd, out);
            }
        }
        Ok(())
    }

    /// The next instant [`handle_timeout`](Self::handle_timeout) must be called at, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.handshake_deadline,
            self.next_ping,
            self.heartbeat_deadline,
            self.ttl_deadline.map(|(d, _)| d),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Handles expired timers: fails on handshake or heartbeat timeout, queues a PING when one
    /// is due (then call [`poll_transmit`](Self::poll_transmit)). Does nothing once closed.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Error> {
        let result = self.expire(now);
        if result.is_err() {
            self.fail();
        }
        result
    }

    fn expire(&mut self, now: Instant) -> Result<(), Error> {
        if let (Some(deadline), Some(timeout)) = (self.handshake_deadline, self.handshake_timeout)
            && now >= deadline
        {
            return Err(PeerError::HandshakeTimeout(timeout).into());
        }
        if let (Some(deadline), Some(h)) = (self.heartbeat_deadline, self.heartbeat)
            && now >= deadline
        {
            return Err(PeerError::HeartbeatTimeout(h.timeout).into());
        }
        if let Some((deadline, ttl)) = self.ttl_deadline
            && now >= deadline
        {
            return Err(PeerError::PingTtlExpired(ttl).into());
        }
        if let (Some(due), Some(h)) = (self.next_ping, self.heartbeat)
            && now >= due
        {
            let ping = Command::Ping {
                ttl_deciseconds: h.ttl_deciseconds(),
                context: Bytes::new(),
            };
            self.queue_command(&ping);
            self.next_ping = Some(now + h.interval);
            if self.heartbeat_deadline.is_none() && !h.timeout.is_zero() {
                self.heartbeat_deadline = Some(now + h.timeout);
            }
        }
        Ok(())
    }
}
