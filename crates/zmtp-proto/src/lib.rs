//! Sans-IO ZMTP 3.1: no sockets, no runtime, no clock.
#![forbid(unsafe_code)]

mod error;
mod frame;
mod greeting;
mod message;

mod socket_type;

pub use error::{CallerError, Error, LimitError, MalformedError, PeerError};
pub use frame::{
    FLAG_COMMAND, FLAG_LONG, FLAG_MORE, FRAME_OVERHEAD, Frame, FrameDecoder, Limits, encode_message,
};
pub use greeting::{GREETING_LEN, Greeting, MECHANISM_LEN, VERSION};
pub use message::Message;
pub use socket_type::{SocketType, UnknownSocketType};
