//! Sans-IO ZRE (36/ZRE, 43/ZRE) as zyre 2.0.1 and pyre speak it: beacon and message codecs,
//! and the peer table with its timers as a state machine. No sockets, no runtime, no clock:
//! the driver passes beacons, mailbox messages and the current time in, and takes beacons,
//! connections, frames, events and the next deadline out.
//!
//! * [`Beacon`]: the 22-byte UDP beacon (`Z R E 0x01`, UUID, port) and the 54-byte CURVE form
//!   of 43/ZRE (sent and required in CURVE mode, ignored otherwise).
//! * [`Curve`]: CURVE mode (43/ZRE version 3): key in beacons and `X-PUBLICKEY`, no downgrade,
//!   optional allow-list or authenticator ([`curve`]).
//! * [`Message`] with its [`Body`]: HELLO, WHISPER, SHOUT, JOIN, LEAVE, PING, PING-OK, and
//!   zyre's ELECT, LEADER, GOODBYE; version 2 sent, 3 accepted (byte tables in [`message`]
//!   and `docs/zre.md`).
//! * [`Node`]: peers by UUID, sequence checks, groups, evasive/silent/expired timers, events.
//! * Errors typed by fault: [`BeaconError`], [`DecodeError`] ([`MalformedError`],
//!   [`LimitError`]), [`PeerError`], [`CallerError`].
//!
//! ```
//! use bytes::Bytes;
//! use dafka_zre_proto::{Body, Limits, Message, ShortStr};
//!
//! let join = Message { sequence: 6, body: Body::Join { group: ShortStr::new("LATE")?, status: 3 } };
//! let frames = join.to_frames();
//! assert_eq!(&frames[0][..], b"\xAA\xA1\x04\x02\x00\x06\x04LATE\x03");
//! assert_eq!(Message::decode(&frames, &Limits::DEFAULT)?, join);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod beacon;
pub mod curve;
mod error;
pub mod gossip;
pub mod message;
pub mod node;
mod types;

pub use beacon::{BEACON_V1_LEN, BEACON_V3_LEN, Beacon};
pub use curve::{Curve, X_PUBLICKEY};
pub use error::{
    BeaconError, CallerError, DecodeError, LimitError, MalformedError, PeerError, StringError,
};
pub use message::{Body, Hello, Limits, Message, VERSION};
pub use node::{Config, Event, HELLO_ANSWERS, LEAVE_CHECK, Node, Output};
pub use types::{IDENTITY_PREFIX, MAX_SHORT_STR, ParseUuidError, ShortStr, Uuid};
