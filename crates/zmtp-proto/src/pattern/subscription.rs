//! The subscription bytes of 29/PUBSUB, in one place.
//!
//! A subscription travels as a SUBSCRIBE or CANCEL command (ZMTP 3.1), or as a one-frame message
//! (ZMTP 3.0 peers, XSUB sockets, and what an XPUB hands up to its application):
//!
//! | byte 0 | bytes 1.. |
//! | --- | --- |
//! | `0x01` subscribe, `0x00` cancel | the prefix |

use bytes::{BufMut, Bytes, BytesMut};

use crate::Message;

/// First byte of a subscription message: subscribe.
pub const SUBSCRIBE_FLAG: u8 = 0x01;
/// First byte of a subscription message: cancel.
pub const CANCEL_FLAG: u8 = 0x00;

/// A subscription or its cancellation, with its prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    /// `0x01 + prefix`.
    Subscribe(Bytes),
    /// `0x00 + prefix`.
    Cancel(Bytes),
}

impl Subscription {
    /// `Subscribe(prefix)` or `Cancel(prefix)`.
    pub fn new(subscribe: bool, prefix: Bytes) -> Self {
        if subscribe {
            Subscription::Subscribe(prefix)
        } else {
            Subscription::Cancel(prefix)
        }
    }

    /// The prefix.
    #[inline]
    pub fn prefix(&self) -> &Bytes {
        match self {
            Subscription::Subscribe(p) | Subscription::Cancel(p) => p,
        }
    }

    /// Whether this subscribes (rather than cancels).
    #[inline]
    pub fn is_subscribe(&self) -> bool {
        matches!(self, Subscription::Subscribe(_))
    }

    /// The first byte of its message form.
    pub fn flag(&self) -> u8 {
        if self.is_subscribe() {
            SUBSCRIBE_FLAG
        } else {
            CANCEL_FLAG
        }
    }

    /// The frame `flag + prefix`.
    pub fn encode(&self) -> Bytes {
        encode(self.is_subscribe(), self.prefix())
    }

    /// The one-frame message `flag + prefix`.
    pub fn to_message(&self) -> Message {
        Message::from(self.encode())
    }

    /// Reads a frame `flag + prefix` (the prefix a slice of `frame`, no copy). `None` for an
    /// empty frame or another first byte.
    #[inline]
    pub fn decode(frame: &Bytes) -> Option<Subscription> {
        let (subscribe, _) = parse(frame)?;
        Some(Subscription::new(subscribe, frame.slice(1..)))
    }

    /// Reads a one-frame subscription message ([`is_message`](Self::is_message)).
    #[inline]
    pub fn from_message(msg: &Message) -> Option<Subscription> {
        match msg.frames() {
            [frame] => Subscription::decode(frame),
            _ => None,
        }
    }

    /// Whether `msg` is one frame starting with `0x01` or `0x00`.
    #[inline]
    pub fn is_message(msg: &Message) -> bool {
        matches!(msg.frames(), [frame] if parse(frame).is_some())
    }
}

/// The frame `0x01 + prefix` (`subscribe`) or `0x00 + prefix`.
pub fn encode(subscribe: bool, prefix: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(prefix.len() + 1);
    b.put_u8(if subscribe {
        SUBSCRIBE_FLAG
    } else {
        CANCEL_FLAG
    });
    b.put_slice(prefix);
    b.freeze()
}

/// Reads `flag + prefix`: `(true, prefix)` for a subscribe, `(false, prefix)` for a cancel,
/// `None` for an empty frame or another first byte.
#[inline]
pub fn parse(frame: &[u8]) -> Option<(bool, &[u8])> {
    match frame.split_first() {
        Some((&SUBSCRIBE_FLAG, prefix)) => Some((true, prefix)),
        Some((&CANCEL_FLAG, prefix)) => Some((false, prefix)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_and_parse_agree() {
        assert_eq!(&encode(true, b"ab")[..], b"\x01ab");
        assert_eq!(&encode(false, b"")[..], b"\x00");
        assert_eq!(parse(b"\x01ab"), Some((true, &b"ab"[..])));
        assert_eq!(parse(b"\x00"), Some((false, &b""[..])));
        assert_eq!(parse(b""), None);
        assert_eq!(parse(b"\x02ab"), None);
        let s = Subscription::Cancel(Bytes::from_static(b"t"));
        assert_eq!(Subscription::decode(&s.encode()), Some(s.clone()));
        assert_eq!(Subscription::from_message(&s.to_message()), Some(s));
    }

    #[test]
    fn only_one_frame_messages_are_subscriptions() {
        let two: Message = [Bytes::from_static(b"\x01a"), Bytes::new()]
            .into_iter()
            .collect();
        assert!(!Subscription::is_message(&two));
        assert_eq!(Subscription::from_message(&two), None);
        assert!(Subscription::is_message(&Message::from(&b"\x00"[..])));
        assert!(!Subscription::is_message(&Message::from(&b"x"[..])));
        assert!(!Subscription::is_message(&Message::from(&b""[..])));
    }
}
