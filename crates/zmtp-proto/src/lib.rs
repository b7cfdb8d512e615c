//! Sans-IO ZMTP 3.1 (the ZeroMQ Message Transport Protocol): no sockets, no runtime, no clock.
//!
//! Bytes and the current time go in; events, bytes to send and the next deadline come out.
//! The tokio driver (`dafka-zmtp`) owns the sockets and calls into [`Connection`].
//!
//! * [`Greeting`]: the 64-byte greeting ([`greeting`](Greeting) byte table).
//! * [`Frame`], [`FrameDecoder`], [`encode_message`]: framing with [`Limits`] checked before any
//!   body is buffered.
//! * [`Command`], [`Metadata`]: READY, ERROR, SUBSCRIBE, CANCEL, PING, PONG.
//! * [`Connection`]: greeting, security handshake (NULL, PLAIN, CURVE: [`MechanismConfig`]),
//!   socket-type check, traffic (boxed under CURVE), heartbeats, timeouts.
//! * [`Authenticator`]: the server's per-connection decision on a client's PLAIN credentials or
//!   CURVE public key and address (what ZAP decides in libzmq).
//! * [`CurveKeyPair`], [`z85_encode`], [`z85_decode_key`]: CURVE keys and their Z85 text.
//! * [`pattern`]: the socket patterns (load balancing, ROUTER identities, fan-out with
//!   subscriptions, fair queueing, PAIR, REQ/REP envelopes) over the driver's queues, and the
//!   subscription bytes.
//! * [`Error`]: typed by fault ([`MalformedError`], [`PeerError`], [`LimitError`],
//!   [`CallerError`]).
//!
//! ```
//! use std::time::Instant;
//! use bytes::BytesMut;
//! use dafka_zmtp_proto::{Config, Connection, Event, Message, SocketType};
//!
//! let now = Instant::now();
//! let mut dealer = Connection::new(Config::new(SocketType::Dealer), now);
//! let mut router = Connection::new(Config::new(SocketType::Router), now);
//! // Wire the two together in memory until both handshakes are done.
//! let (mut to_router, mut to_dealer) = (BytesMut::new(), BytesMut::new());
//! while !(dealer.is_ready() && router.is_ready()) {
//!     dealer.poll_transmit(&mut to_router);
//!     router.poll_transmit(&mut to_dealer);
//!     router.handle_input(&mut to_router, now)?;
//!     dealer.handle_input(&mut to_dealer, now)?;
//! }
//! assert!(matches!(router.poll_event(), Some(Event::Ready { peer_socket_type: SocketType::Dealer, .. })));
//! dealer.send_message(&Message::from(&b"hello"[..]), &mut to_router)?;
//! router.handle_input(&mut to_router, now)?;
//! assert_eq!(router.poll_event(), Some(Event::Message(Message::from(&b"hello"[..]))));
//! # Ok::<(), dafka_zmtp_proto::Error>(())
//! ```
//!
//! The wire format, and where this crate follows libzmq rather than the RFC text, is written up
//! in `docs/zmtp.md`.
//!
//! # Additions to and deviations from the driver contract (`zmtp-contract.md`)
//!
//! * [`Connection::new`] panics on an invalid [`Config`] (identity over 255 bytes, a property
//!   name that is empty, too long, uses characters outside `A-Z a-z 0-9 - _ . +`, or is
//!   `Socket-Type`/`Identity`). [`Connection::try_new`] and [`Config::validate`] return the
//!   [`CallerError`] instead; drivers that take properties from users should use them.
//! * [`Limits`]: a message's cost is its body bytes **plus [`FRAME_OVERHEAD`] (32) bytes per
//!   frame**, so a flood of empty frames is bounded too; the same rule applies when sending.
//!   Command frames are limited by `max_frame_size` but never below [`COMMAND_SIZE_FLOOR`]
//!   (64 KiB), so a tight limit cannot break the handshake. Until the handshake is complete
//!   every frame is limited to [`HANDSHAKE_FRAME_MAX`] (64 KiB) whatever the limits say.
//! * [`Metadata::insert`] and [`Command::encode`] return `Result<(), CallerError>`.
//! * [`Connection::send_command`] sends SUBSCRIBE/CANCEL to a ZMTP 3.0 peer as the
//!   `0x01`/`0x00` + prefix message, so the driver may always send commands.
//! * After any `Err` from [`Connection::handle_input`] or [`Connection::handle_timeout`], call
//!   [`Connection::poll_transmit`] once more and write the bytes (an ERROR command on a
//!   socket-type mismatch) before closing; later calls return [`CallerError::Closed`].
//! * An ERROR command from the peer is fatal at any time; a second READY and unknown commands
//!   after the handshake are ignored.
//! * Also available: [`Connection::is_closed`], [`Connection::peer_socket_type`],
//!   [`Connection::has_pending_transmit`], [`Config::new`], [`Heartbeat::new`].
// One module, `nacl`, calls libsodium; everything else is safe code.
#![deny(unsafe_code)]

mod auth;
mod command;
mod connection;
mod curve;
mod error;
mod frame;
mod greeting;
mod mechanism;
mod message;
mod nacl;
pub mod pattern;
mod plain;
mod socket_type;
mod z85;

pub use auth::{AuthDecision, AuthRequest, Authenticator, Credentials};
pub use command::{
    Command, MAX_PING_CONTEXT, Metadata, PROPERTY_IDENTITY, PROPERTY_RESOURCE, PROPERTY_SOCKET_TYPE,
};
pub use connection::{
    Config, Connection, DEFAULT_HANDSHAKE_TIMEOUT, Event, HANDSHAKE_FRAME_MAX, Heartbeat,
};
pub use curve::{CURVE_FLAG_COMMAND, CURVE_FLAG_MORE, CURVE_MESSAGE_OVERHEAD, CurveKeyPair};
pub use error::{CallerError, Error, LimitError, MalformedError, PeerError};
pub use frame::{
    COMMAND_SIZE_FLOOR, FLAG_COMMAND, FLAG_LONG, FLAG_MORE, FRAME_OVERHEAD, Frame, FrameDecoder,
    Limits, encode_message,
};
pub use greeting::{GREETING_LEN, Greeting, MECHANISM_LEN, VERSION};
pub use mechanism::MechanismConfig;
pub use message::Message;
pub use socket_type::{SocketType, UnknownSocketType};
pub use z85::{Z85Error, decode as z85_decode, decode_key as z85_decode_key, encode as z85_encode};
