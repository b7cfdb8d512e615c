//! ZMTP framing: frame headers, the incremental frame decoder and the encoders.

use bytes::{Buf, Bytes, BytesMut};

use crate::error::{Error, LimitError, MalformedError, PeerError};
use crate::message::Message;

/// Flags bit 0: more frames of the same message follow.
pub const FLAG_MORE: u8 = 0x01;
/// Flags bit 1: the size field is 8 bytes (long frame).
pub const FLAG_LONG: u8 = 0x02;
/// Flags bit 2: the frame is a command, not a message part.
pub const FLAG_COMMAND: u8 = 0x04;
/// Flags bits 7-3: reserved.
const FLAG_RESERVED: u8 = 0xF8;

/// Largest body that takes a short (1-byte) size field.
const SHORT_MAX: usize = 0xFF;
/// Header length of a short frame: flags + 1-byte size.
const SHORT_HEADER: usize = 2;
/// Header length of a long frame: flags + 8-byte size.
const LONG_HEADER: usize = 9;

/// Bytes charged against [`Limits::max_message_size`] for each frame on top of its body: the
/// in-memory cost of one frame handle, so a flood of empty `MORE` frames is bounded as well.
pub const FRAME_OVERHEAD: u64 = 32;

/// Commands may always be this large, even when [`Limits::max_frame_size`] is smaller, so a
/// tight message limit cannot break the handshake (a READY with a few properties).
pub const COMMAND_SIZE_FLOOR: u64 = 64 << 10;

/// Size limits applied to incoming (and outgoing) frames and messages.
///
/// Checked as soon as a frame header arrives, before any of its body is buffered. The cost of a
/// message is the sum of its frame bodies plus [`FRAME_OVERHEAD`] bytes per frame.
/// Commands count against `max_frame_size` only, which for them is never below
/// [`COMMAND_SIZE_FLOOR`] (64 KiB).
///
/// `#[non_exhaustive]`: build it with [`Limits::new`] or from
/// [`Limits::default()`] with the `with_*` methods (or by assigning fields),
/// so that limits added later do not break callers.
///
/// ```
/// use dafka_zmtp_proto::Limits;
/// let l = Limits::default().with_max_frame_size(1 << 20);
/// assert_eq!(l.max_frame_size, 1 << 20);
/// assert_eq!(l.max_message_size, Limits::DEFAULT_MAX_MESSAGE_SIZE);
/// assert_eq!(Limits::new(10, 20).max_message_size, 20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Limits {
    /// Largest frame body accepted (default 64 MiB).
    pub max_frame_size: u64,
    /// Largest cumulative message cost accepted (default 256 MiB).
    pub max_message_size: u64,
}

impl Limits {
    /// Default `max_frame_size`: 64 MiB.
    pub const DEFAULT_MAX_FRAME_SIZE: u64 = 64 << 20;
    /// Default `max_message_size`: 256 MiB.
    pub const DEFAULT_MAX_MESSAGE_SIZE: u64 = 256 << 20;

    /// Limits of `max_frame_size` per frame body and `max_message_size` per
    /// message cost.
    pub const fn new(max_frame_size: u64, max_message_size: u64) -> Limits {
        Limits {
            max_frame_size,
            max_message_size,
        }
    }

    /// Sets [`max_frame_size`](Limits::max_frame_size).
    #[must_use]
    pub const fn with_max_frame_size(mut self, max_frame_size: u64) -> Limits {
        self.max_frame_size = max_frame_size;
        self
    }

    /// Sets [`max_message_size`](Limits::max_message_size).
    #[must_use]
    pub const fn with_max_message_size(mut self, max_message_size: u64) -> Limits {
        self.max_message_size = max_message_size;
        self
    }

    /// The cost of a message with `frames` frames of `bytes` body bytes in total.
    pub fn message_cost(frames: usize, bytes: usize) -> u64 {
        (bytes as u64).saturating_add((frames as u64).saturating_mul(FRAME_OVERHEAD))
    }

    /// The largest command frame body accepted: `max_frame_size`, but at least
    /// [`COMMAND_SIZE_FLOOR`].
    pub fn max_command_size(&self) -> u64 {
        self.max_frame_size.max(COMMAND_SIZE_FLOOR)
    }

    /// Checks an outgoing message against these limits.
    pub fn check_message(&self, msg: &Message) -> Result<(), LimitError> {
        let mut bytes = 0usize;
        for frame in msg.frames() {
            let size = frame.len() as u64;
            if size > self.max_frame_size {
                return Err(LimitError::FrameTooLarge {
                    size,
                    max: self.max_frame_size,
                });
            }
            bytes += frame.len();
        }
        let cost = Limits::message_cost(msg.len(), bytes);
        if cost > self.max_message_size {
            return Err(LimitError::MessageTooLarge {
                size: cost,
                max: self.max_message_size,
            });
        }
        Ok(())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_size: Limits::DEFAULT_MAX_FRAME_SIZE,
            max_message_size: Limits::DEFAULT_MAX_MESSAGE_SIZE,
        }
    }
}

/// One decoded frame.
///
/// A frame is a flags byte, a size and a body:
///
/// | Offset | Size      | Field | Meaning                                                       |
/// |-------:|----------:|-------|---------------------------------------------------------------|
/// | 0      | 1         | flags | bit 0 `0x01` MORE, bit 1 `0x02` LONG, bit 2 `0x04` COMMAND, bits 7-3 reserved (zero) |
/// | 1      | 1 or 8    | size  | body length: 1 byte if LONG is clear, else 8 bytes big-endian |
/// | 2 or 9 | size      | body  | message part, or command (see [`Command`](crate::Command))   |
///
/// The encoder uses a short (1-byte) size for bodies of 0-255 bytes and a long one otherwise; the
/// decoder accepts a long size for a small body too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A message part; `more` tells whether further parts of the same message follow.
    Message {
        /// The MORE flag.
        more: bool,
        /// The part's bytes.
        body: Bytes,
    },
    /// A command frame's body (name length, name, data): see [`Command::decode`](crate::Command::decode).
    Command(Bytes),
}

impl Frame {
    /// The frame body.
    pub fn body(&self) -> &Bytes {
        match self {
            Frame::Message { body, .. } | Frame::Command(body) => body,
        }
    }

    /// Appends header and body to `out`, choosing the short form for bodies of 0-255 bytes.
    pub fn encode(&self, out: &mut BytesMut) {
        let (flags, body) = match self {
            Frame::Message { more, body } => (if *more { FLAG_MORE } else { 0 }, body),
            Frame::Command(body) => (FLAG_COMMAND, body),
        };
        out.reserve(LONG_HEADER + body.len());
        put_header(out, flags, body.len());
        out.extend_from_slice(body);
    }
}

/// Appends a frame header for a body of `len` bytes; `flags` is `FLAG_MORE` and/or `FLAG_COMMAND`.
pub(crate) fn put_header(out: &mut BytesMut, flags: u8, len: usize) {
    // One append per header (each append checks capacity on its own); `extend_from_slice` is
    // inlined across crates where `BufMut::put_slice` is not (a call and a `memcpy` call per
    // two-byte header).
    if let Ok(short) = u8::try_from(len) {
        out.extend_from_slice(&[flags, short]);
    } else {
        let mut head = [0u8; LONG_HEADER];
        head[0] = flags | FLAG_LONG;
        head[1..].copy_from_slice(&(len as u64).to_be_bytes());
        out.extend_from_slice(&head);
    }
}

/// Header length the encoder uses for a body of `len` bytes.
pub(crate) fn header_len(len: usize) -> usize {
    if len <= SHORT_MAX {
        SHORT_HEADER
    } else {
        LONG_HEADER
    }
}

/// Appends every frame of `msg` to `out` (MORE on all but the last), reserving once.
///
/// Does not check limits; see [`Limits::check_message`]. An empty message appends nothing.
pub fn encode_message(msg: &Message, out: &mut BytesMut) {
    let frames = msg.frames();
    // Fast path: a single short frame is two header bytes and the body.
    if let [body] = frames
        && let Ok(len) = u8::try_from(body.len())
    {
        out.reserve(SHORT_HEADER + body.len());
        out.extend_from_slice(&[0, len]);
        out.extend_from_slice(body);
        return;
    }
    let total: usize = frames.iter().map(|f| header_len(f.len()) + f.len()).sum();
    out.reserve(total);
    let last = frames.len().saturating_sub(1);
    for (i, frame) in frames.iter().enumerate() {
        put_header(out, if i < last { FLAG_MORE } else { 0 }, frame.len());
        out.extend_from_slice(frame);
    }
}

/// Incremental frame decoder with limits checked before any body is buffered.
///
/// It also enforces multipart structure: a command frame may not arrive between the parts of a
/// message, and a message's cumulative cost is checked against
/// [`Limits::max_message_size`] at each part's header.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    limits: Limits,
    /// Whether the last message frame had MORE set.
    in_message: bool,
    /// Cost of the parts of the current message decoded so far.
    message_cost: u64,
}

impl FrameDecoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        FrameDecoder {
            limits,
            in_message: false,
            message_cost: 0,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Whether a multipart message is in progress (the last part had MORE set).
    pub fn in_message(&self) -> bool {
        self.in_message
    }

    /// Decodes one frame from the front of `buf`.
    ///
    /// `Ok(None)`: `buf` holds only part of a frame; it is left untouched (nothing is reserved:
    /// the caller reads more and calls again). `Ok(Some(frame))`: the frame's bytes were removed
    /// from `buf` and its body split off without copying. `Err`: the stream is corrupt, over a
    /// limit, or breaks multipart structure; the connection must be closed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, Error> {
        let Some(head) = self.decode_header(buf)? else {
            return Ok(None);
        };
        buf.advance(head.header_len);
        let body = buf.split_to(head.body_len).freeze();
        Ok(Some(match head.kind {
            FrameKind::Command => Frame::Command(body),
            FrameKind::Message { more } => Frame::Message { more, body },
        }))
    }

    /// Validates the frame at the front of `buf` and, when all of it is there, returns where its
    /// body lies; `buf` itself is not touched. Updates the multipart state exactly as
    /// [`decode`](Self::decode) does, so the caller must consume the frame it was told about.
    #[inline]
    pub(crate) fn decode_header(&mut self, buf: &[u8]) -> Result<Option<FrameHead>, Error> {
        // Fast path for the common case, a short message frame within the limits: the same
        // checks as `parse_header` (reserved bits and the command flag are zero, so no flag
        // rule applies), without building a `Result` of the cost. Anything else, including
        // every error, takes the general path.
        if let [flags, size, rest @ ..] = buf
            && flags & !FLAG_MORE == 0
        {
            let size = *size;
            let cost = self
                .message_cost
                .saturating_add(u64::from(size))
                .saturating_add(FRAME_OVERHEAD);
            if u64::from(size) <= self.limits.max_frame_size && cost <= self.limits.max_message_size
            {
                let body_len = usize::from(size);
                if rest.len() < body_len {
                    return Ok(None);
                }
                let more = flags & FLAG_MORE != 0;
                self.in_message = more;
                self.message_cost = if more { cost } else { 0 };
                return Ok(Some(FrameHead {
                    header_len: SHORT_HEADER,
                    body_len,
                    kind: FrameKind::Message { more },
                }));
            }
        }
        let Some((head, cost)) = self.parse_header(buf)? else {
            return Ok(None);
        };
        if buf.len() - head.header_len < head.body_len {
            return Ok(None);
        }
        if let FrameKind::Message { more } = head.kind {
            self.in_message = more;
            self.message_cost = if more { cost } else { 0 };
        }
        Ok(Some(head))
    }

    /// Checks the header at the front of `buf` against the flags rules and the limits; `Ok(None)`
    /// while the header is incomplete. Returns the frame's layout and the message cost so far.
    fn parse_header(&self, buf: &[u8]) -> Result<Option<(FrameHead, u64)>, Error> {
        let Some(&flags) = buf.first() else {
            return Ok(None);
        };
        // "Bits 7-3: Reserved. Bits 7-3 are reserved for future use and MUST be zero."
        if flags & FLAG_RESERVED != 0 {
            return Err(MalformedError::ReservedFlags { flags }.into());
        }
        let command = flags & FLAG_COMMAND != 0;
        let more = flags & FLAG_MORE != 0;
        // "A command is a single long or short frame."
        if command && more {
            return Err(MalformedError::CommandWithMore.into());
        }
        if command && self.in_message {
            return Err(PeerError::CommandInsideMessage.into());
        }
        let (header, size) = if flags & FLAG_LONG != 0 {
            let Some(raw) = buf.get(1..LONG_HEADER) else {
                return Ok(None);
            };
            let mut raw_size = [0u8; 8];
            raw_size.copy_from_slice(raw);
            let size = u64::from_be_bytes(raw_size);
            if size >> 63 != 0 {
                return Err(MalformedError::LongSizeTopBit { size }.into());
            }
            (LONG_HEADER, size)
        } else {
            let Some(&size) = buf.get(1) else {
                return Ok(None);
            };
            (SHORT_HEADER, u64::from(size))
        };
        let max = if command {
            self.limits.max_command_size()
        } else {
            self.limits.max_frame_size
        };
        if size > max {
            return Err(LimitError::FrameTooLarge { size, max }.into());
        }
        let cost = if command {
            0
        } else {
            let cost = self
                .message_cost
                .saturating_add(size)
                .saturating_add(FRAME_OVERHEAD);
            if cost > self.limits.max_message_size {
                return Err(LimitError::MessageTooLarge {
                    size: cost,
                    max: self.limits.max_message_size,
                }
                .into());
            }
            cost
        };
        // A size within the limits but beyond this platform's address space cannot be held.
        let Ok(body_len) = usize::try_from(size) else {
            return Err(LimitError::FrameTooLarge {
                size,
                max: usize::MAX as u64,
            }
            .into());
        };
        let kind = if command {
            FrameKind::Command
        } else {
            FrameKind::Message { more }
        };
        let head = FrameHead {
            header_len: header,
            body_len,
            kind,
        };
        Ok(Some((head, cost)))
    }

    /// Length of the whole frame (header and body) at the front of `buf` once its header has
    /// arrived and passed every check, including the limits; `None` otherwise.
    ///
    /// Lets a driver make room for a large frame in one step instead of growing its buffer
    /// chunk by chunk. Only call it after [`decode`](Self::decode) returned `Ok(None)`: the size
    /// is then known to be within [`Limits`]. The decoder's state is not changed.
    pub fn frame_len_hint(&self, buf: &[u8]) -> Option<usize> {
        match self.parse_header(buf) {
            Ok(Some((head, _))) => head.header_len.checked_add(head.body_len),
            _ => None,
        }
    }
}

/// Where one validated frame lies at the front of a buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameHead {
    /// Header bytes (2 or 9).
    pub(crate) header_len: usize,
    /// Body bytes after the header.
    pub(crate) body_len: usize,
    /// Message part or command.
    pub(crate) kind: FrameKind,
}

/// What a validated frame carries.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FrameKind {
    /// A message part.
    Message {
        /// The MORE flag.
        more: bool,
    },
    /// A command.
    Command,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(dec: &mut FrameDecoder, buf: &mut BytesMut) -> Result<Vec<Frame>, Error> {
        let mut out = Vec::new();
        while let Some(f) = dec.decode(buf)? {
            out.push(f);
        }
        Ok(out)
    }

    #[test]
    fn frame_len_hint_only_for_a_complete_header_within_limits() {
        let dec = FrameDecoder::new(Limits {
            max_frame_size: 4096,
            max_message_size: 1 << 20,
        });
        assert_eq!(dec.frame_len_hint(&[]), None);
        assert_eq!(dec.frame_len_hint(&[0x00]), None);
        assert_eq!(dec.frame_len_hint(&[0x00, 5, b'a']), Some(7));
        let mut long = vec![0x02];
        long.extend_from_slice(&3000u64.to_be_bytes()[..7]);
        assert_eq!(dec.frame_len_hint(&long), None);
        long.push(3000u64.to_be_bytes()[7]);
        assert_eq!(dec.frame_len_hint(&long), Some(3009));
        // Over the frame limit or malformed: no hint (decode reports the error).
        let mut huge = vec![0x02];
        huge.extend_from_slice(&5000u64.to_be_bytes());
        assert_eq!(dec.frame_len_hint(&huge), None);
        assert_eq!(dec.frame_len_hint(&[0x80, 1]), None);
    }

    #[test]
    fn short_and_long_vectors() {
        let cases: Vec<(Frame, Vec<u8>)> = vec![
            (
                Frame::Message {
                    more: false,
                    body: Bytes::new(),
                },
                vec![0x00, 0x00],
            ),
            (
                Frame::Message {
                    more: true,
                    body: Bytes::from_static(b"hi"),
                },
                vec![0x01, 0x02, b'h', b'i'],
            ),
            (
                Frame::Command(Bytes::from_static(b"\x04PING\x00\x00")),
                vec![0x04, 0x07, 4, b'P', b'I', b'N', b'G', 0, 0],
            ),
            (
                Frame::Message {
                    more: false,
                    body: Bytes::from(vec![7u8; 255]),
                },
                [vec![0x00, 0xFF], vec![7u8; 255]].concat(),
            ),
            (
                Frame::Message {
                    more: true,
                    body: Bytes::from(vec![7u8; 256]),
                },
                [vec![0x03, 0, 0, 0, 0, 0, 0, 1, 0], vec![7u8; 256]].concat(),
            ),
            (
                Frame::Command(Bytes::from(vec![1u8; 300])),
                [vec![0x06, 0, 0, 0, 0, 0, 0, 1, 44], vec![1u8; 300]].concat(),
            ),
        ];
        for (frame, wire) in cases {
            let mut out = BytesMut::new();
            frame.encode(&mut out);
            assert_eq!(&out[..], &wire[..], "{frame:?}");
            let mut dec = FrameDecoder::new(Limits::default());
            let mut buf = BytesMut::from(&wire[..]);
            assert_eq!(dec.decode(&mut buf), Ok(Some(frame)));
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn long_size_for_small_body_is_accepted() {
        let mut buf = BytesMut::from(&[0x02, 0, 0, 0, 0, 0, 0, 0, 1, b'x'][..]);
        let mut dec = FrameDecoder::new(Limits::default());
        assert_eq!(
            dec.decode(&mut buf),
            Ok(Some(Frame::Message {
                more: false,
                body: Bytes::from_static(b"x")
            }))
        );
    }

    #[test]
    fn every_split_of_a_stream_decodes_the_same() {
        let frames = vec![
            Frame::Message {
                more: true,
                body: Bytes::from_static(b"id"),
            },
            Frame::Message {
                more: true,
                body: Bytes::new(),
            },
            Frame::Message {
                more: false,
                body: Bytes::from(vec![9u8; 300]),
            },
            Frame::Command(Bytes::from_static(b"\x04PONG")),
        ];
        let mut wire = BytesMut::new();
        for f in &frames {
            f.encode(&mut wire);
        }
        for a in 0..=wire.len() {
            for b in a..=wire.len() {
                let mut dec = FrameDecoder::new(Limits::default());
                let mut buf = BytesMut::new();
                let mut got = Vec::new();
                for chunk in [&wire[..a], &wire[a..b], &wire[b..]] {
                    buf.extend_from_slice(chunk);
                    got.extend(decode_all(&mut dec, &mut buf).unwrap());
                }
                assert_eq!(got, frames, "split at {a},{b}");
                assert!(buf.is_empty());
            }
        }
    }

    #[test]
    fn partial_input_is_left_in_place() {
        let mut dec = FrameDecoder::new(Limits::default());
        for wire in [&[0x00][..], &[0x00, 0x03, b'a'], &[0x02, 0, 0, 0, 0]] {
            let mut buf = BytesMut::from(wire);
            assert_eq!(dec.decode(&mut buf), Ok(None));
            assert_eq!(&buf[..], wire);
        }
    }

    #[test]
    fn reserved_flags_and_command_more_are_malformed() {
        for flags in [0x08u8, 0x10, 0x20, 0x40, 0x80, 0xFF] {
            let mut buf = BytesMut::from(&[flags][..]);
            assert_eq!(
                FrameDecoder::new(Limits::default()).decode(&mut buf),
                Err(MalformedError::ReservedFlags { flags }.into())
            );
        }
        let mut buf = BytesMut::from(&[0x05][..]);
        assert_eq!(
            FrameDecoder::new(Limits::default()).decode(&mut buf),
            Err(MalformedError::CommandWithMore.into())
        );
    }

    #[test]
    fn long_size_with_top_bit_is_rejected() {
        let mut buf = BytesMut::from(&[0x02, 0x80, 0, 0, 0, 0, 0, 0, 0][..]);
        assert_eq!(
            FrameDecoder::new(Limits::default()).decode(&mut buf),
            Err(MalformedError::LongSizeTopBit {
                size: 0x8000_0000_0000_0000
            }
            .into())
        );
    }

    #[test]
    fn short_header_fast_path_agrees_with_the_general_checks() {
        // Every 2-byte header, with and without its body, under tight limits and in and out
        // of a multipart message: decode_header (fast path where it applies) must give what
        // parse_header (the general checks) gives, and leave the same multipart state.
        let limits = Limits {
            max_frame_size: 100,
            max_message_size: 200,
        };
        for in_message_cost in [None, Some(40u64), Some(150)] {
            for flags in 0..=u8::MAX {
                for size in [0u8, 1, 67, 99, 100, 101, 200, 255] {
                    for with_body in [false, true] {
                        let mut buf = vec![flags, size];
                        if with_body {
                            buf.resize(2 + usize::from(size), 0xAB);
                        }
                        let mut fast = FrameDecoder::new(limits);
                        if let Some(cost) = in_message_cost {
                            fast.in_message = true;
                            fast.message_cost = cost;
                        }
                        let mut general = fast.clone();
                        let got = fast
                            .decode_header(&buf)
                            .map(|h| h.map(|h| (h.header_len, h.body_len)));
                        let want = match general.parse_header(&buf) {
                            Ok(Some((head, cost)))
                                if buf.len() - head.header_len >= head.body_len =>
                            {
                                if let FrameKind::Message { more } = head.kind {
                                    general.in_message = more;
                                    general.message_cost = if more { cost } else { 0 };
                                }
                                Ok(Some((head.header_len, head.body_len)))
                            }
                            Ok(_) => Ok(None),
                            Err(e) => Err(e),
                        };
                        assert_eq!(got, want, "flags {flags:#04x} size {size} body {with_body}");
                        assert_eq!(
                            (fast.in_message, fast.message_cost),
                            (general.in_message, general.message_cost)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn oversized_frame_rejected_from_header_alone() {
        let limits = Limits {
            max_frame_size: 1000,
            max_message_size: 1 << 20,
        };
        // Only the 9 header bytes exist: the error comes before any body byte arrives.
        let mut buf = BytesMut::from(&[0x02, 0, 0, 0, 0, 0, 0, 0x03, 0xE9][..]);
        let cap = buf.capacity();
        assert_eq!(
            FrameDecoder::new(limits).decode(&mut buf),
            Err(LimitError::FrameTooLarge {
                size: 1001,
                max: 1000
            }
            .into())
        );
        assert_eq!(buf.capacity(), cap);
        // A 2^62-byte announcement never reserves anything either.
        let mut buf = BytesMut::from(&[0x02, 0x40, 0, 0, 0, 0, 0, 0, 0][..]);
        assert!(matches!(
            FrameDecoder::new(Limits::default()).decode(&mut buf),
            Err(Error::Limit(LimitError::FrameTooLarge { .. }))
        ));
        assert_eq!(buf.capacity(), 9);
    }

    #[test]
    fn message_limit_is_cumulative_and_counts_frames() {
        let limits = Limits {
            max_frame_size: 100,
            max_message_size: 3 * FRAME_OVERHEAD + 150,
        };
        let mut dec = FrameDecoder::new(limits);
        let mut buf = BytesMut::new();
        Frame::Message {
            more: true,
            body: Bytes::from(vec![0; 100]),
        }
        .encode(&mut buf);
        Frame::Message {
            more: true,
            body: Bytes::from(vec![0; 50]),
        }
        .encode(&mut buf);
        buf.extend_from_slice(&[0x00, 0x01]); // header of a third, 1-byte part: 1 byte too many
        assert!(dec.decode(&mut buf).unwrap().is_some());
        assert!(dec.decode(&mut buf).unwrap().is_some());
        assert_eq!(
            dec.decode(&mut buf),
            Err(LimitError::MessageTooLarge {
                size: 3 * FRAME_OVERHEAD + 151,
                max: 3 * FRAME_OVERHEAD + 150
            }
            .into())
        );
        // An endless run of empty MORE frames hits the limit too.
        let mut dec = FrameDecoder::new(Limits {
            max_frame_size: 10,
            max_message_size: 10 * FRAME_OVERHEAD,
        });
        let mut buf = BytesMut::from(&[0x01, 0x00].repeat(11)[..]);
        let got = decode_all(&mut dec, &mut buf);
        assert!(matches!(
            got,
            Err(Error::Limit(LimitError::MessageTooLarge { .. }))
        ));
    }

    #[test]
    fn cost_resets_after_the_last_part() {
        let mut dec = FrameDecoder::new(Limits {
            max_frame_size: 100,
            max_message_size: FRAME_OVERHEAD + 100,
        });
        let mut buf = BytesMut::new();
        for _ in 0..5 {
            encode_message(&Message::from(Bytes::from(vec![1u8; 100])), &mut buf);
        }
        assert_eq!(decode_all(&mut dec, &mut buf).unwrap().len(), 5);
    }

    #[test]
    fn commands_get_at_least_the_floor() {
        let limits = Limits {
            max_frame_size: 10,
            max_message_size: 100,
        };
        let mut buf = BytesMut::new();
        Frame::Command(Bytes::from(vec![1u8; 1000])).encode(&mut buf);
        assert!(matches!(
            FrameDecoder::new(limits).decode(&mut buf),
            Ok(Some(Frame::Command(_)))
        ));
        let mut buf = BytesMut::from(&[0x06, 0, 0, 0, 0, 0, 1, 0, 1][..]);
        assert_eq!(
            FrameDecoder::new(limits).decode(&mut buf),
            Err(LimitError::FrameTooLarge {
                size: COMMAND_SIZE_FLOOR + 1,
                max: COMMAND_SIZE_FLOOR
            }
            .into())
        );
    }

    #[test]
    fn command_inside_multipart_message_is_a_peer_error() {
        let mut buf = BytesMut::from(&[0x01, 0x00, 0x04, 0x01, 0x01][..]);
        let mut dec = FrameDecoder::new(Limits::default());
        assert!(dec.decode(&mut buf).unwrap().is_some());
        assert!(dec.in_message());
        assert_eq!(
            dec.decode(&mut buf),
            Err(PeerError::CommandInsideMessage.into())
        );
    }

    #[test]
    fn encode_message_sets_more_on_all_but_last() {
        let msg = Message::from(vec![
            Bytes::from_static(b"a"),
            Bytes::new(),
            Bytes::from_static(b"bc"),
        ]);
        let mut out = BytesMut::new();
        encode_message(&msg, &mut out);
        assert_eq!(&out[..], &[0x01, 1, b'a', 0x01, 0, 0x00, 2, b'b', b'c']);
        let mut out = BytesMut::new();
        encode_message(&Message::new(), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn check_message_limits() {
        let l = Limits {
            max_frame_size: 4,
            max_message_size: 2 * FRAME_OVERHEAD + 6,
        };
        let ok = Message::from(vec![Bytes::from_static(b"abcd"), Bytes::from_static(b"ef")]);
        assert_eq!(l.check_message(&ok), Ok(()));
        let big_frame = Message::from(&b"abcde"[..]);
        assert_eq!(
            l.check_message(&big_frame),
            Err(LimitError::FrameTooLarge { size: 5, max: 4 })
        );
        let big_msg = Message::from(vec![
            Bytes::from_static(b"abcd"),
            Bytes::from_static(b"efg"),
        ]);
        assert!(matches!(
            l.check_message(&big_msg),
            Err(LimitError::MessageTooLarge { .. })
        ));
    }
}
