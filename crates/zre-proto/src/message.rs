//! The ZRE messages on the TCP mailbox, as zyre 2.0.1 and pyre put them on the wire.
//!
//! Each message is one ZeroMQ multipart message from a peer's DEALER to this node's ROUTER.
//! Frame 1 is the header; WHISPER and SHOUT add their content as further frames, zero-copy both
//! ways:
//!
//! ```text
//! frame 1: | 0xAA 0xA1 | id (1) | version (1) | sequence (2, big-endian) | fields ... |
//! frame 2..: content (WHISPER and SHOUT only)
//! ```
//!
//! The id comes before the version (the grammar of 36/ZRE and 43/ZRE, and what zyre sends; the
//! prose of 43/ZRE puts the version first). Version `0x02` is sent, because zyre and pyre
//! refuse any other; `0x03` (43/ZRE) is accepted too. Field types:
//!
//! | type | bytes |
//! |---|---|
//! | `string` | length (1 byte), then the bytes |
//! | `longstr` | length (`number-4`), then the bytes |
//! | `strings` | count (`number-4`), then each entry as a `longstr` |
//! | `dictionary` | count (`number-4`), then each entry as key (`string`) and value (`longstr`) |
//!
//! | id | command | fields | frames |
//! |---|---|---|---|
//! | `0x01` | HELLO | endpoint (`string`, `tcp://ip:port`), groups (`strings`), status (1), name (`string`), headers (`dictionary`) | 1 |
//! | `0x02` | WHISPER | none | 1 + content |
//! | `0x03` | SHOUT | group (`string`) | 1 + content |
//! | `0x04` | JOIN | group (`string`), status (1) | 1 |
//! | `0x05` | LEAVE | group (`string`), status (1) | 1 |
//! | `0x06` | PING | none | 1 |
//! | `0x07` | PING-OK | none | 1 |
//! | `0x08` | ELECT | group (`string`), challenger id (`string`, 32 hex) | 1 |
//! | `0x09` | LEADER | group (`string`), leader id (`string`, 32 hex) | 1 |
//! | `0x0A` | GOODBYE | none | 1 |
//!
//! ELECT, LEADER and GOODBYE are in no RFC; zyre sends them (leader contests, and leaving in
//! gossip mode). They are decoded so that their sequence numbers count.

use bytes::{BufMut, Bytes, BytesMut};
use dafka_wire::Reader;

use crate::ShortStr;
use crate::error::{DecodeError, LimitError, MalformedError};

/// The two bytes every frame 1 starts with.
pub const SIGNATURE: [u8; 2] = [0xAA, 0xA1];
/// The version byte this crate sends (zyre and pyre accept nothing else).
pub const VERSION: u8 = 0x02;
/// The version byte of 43/ZRE, accepted on receive.
pub const VERSION_V3: u8 = 0x03;

/// Limits checked while decoding, before anything is allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Most groups in one HELLO.
    pub max_groups: usize,
    /// Most headers in one HELLO.
    pub max_headers: usize,
    /// Longest `longstr` (a group in HELLO, a header value), in bytes.
    pub max_long_string: usize,
    /// Most content frames in one WHISPER or SHOUT.
    pub max_content_frames: usize,
    /// Most content bytes in one WHISPER or SHOUT, all frames together.
    pub max_content_bytes: usize,
}

impl Limits {
    /// Defaults: 1024 groups, 256 headers, 64 KiB strings, 1024 frames, 16 MiB of content.
    pub const DEFAULT: Limits = Limits {
        max_groups: 1024,
        max_headers: 256,
        max_long_string: 64 << 10,
        max_content_frames: 1024,
        max_content_bytes: 16 << 20,
    };

    /// With another group-count limit.
    pub const fn with_max_groups(mut self, n: usize) -> Self {
        self.max_groups = n;
        self
    }

    /// With another header-count limit.
    pub const fn with_max_headers(mut self, n: usize) -> Self {
        self.max_headers = n;
        self
    }

    /// With another `longstr` limit.
    pub const fn with_max_long_string(mut self, n: usize) -> Self {
        self.max_long_string = n;
        self
    }

    /// With another content frame-count limit.
    pub const fn with_max_content_frames(mut self, n: usize) -> Self {
        self.max_content_frames = n;
        self
    }

    /// With another content size limit.
    pub const fn with_max_content_bytes(mut self, n: usize) -> Self {
        self.max_content_bytes = n;
        self
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// HELLO: the first message on every connection.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hello {
    /// The sender's mailbox, `tcp://ip:port`.
    pub endpoint: ShortStr,
    /// The groups the sender is in.
    pub groups: Vec<String>,
    /// The sender's group status: a counter of its joins and leaves (wraps).
    pub status: u8,
    /// The sender's name.
    pub name: ShortStr,
    /// The sender's headers, in wire order (zyre sends them in hash order: never rely on it).
    /// Values longer than 4 GiB cannot be encoded.
    pub headers: Vec<(ShortStr, String)>,
}

/// The command and fields of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Body {
    /// `0x01` HELLO.
    Hello(Hello),
    /// `0x02` WHISPER: content for this node.
    Whisper {
        /// The content frames.
        content: Vec<Bytes>,
    },
    /// `0x03` SHOUT: content for a group.
    Shout {
        /// The group.
        group: ShortStr,
        /// The content frames.
        content: Vec<Bytes>,
    },
    /// `0x04` JOIN.
    Join {
        /// The group joined.
        group: ShortStr,
        /// The sender's status after joining.
        status: u8,
    },
    /// `0x05` LEAVE.
    Leave {
        /// The group left.
        group: ShortStr,
        /// The sender's status after leaving.
        status: u8,
    },
    /// `0x06` PING.
    Ping,
    /// `0x07` PING-OK.
    PingOk,
    /// `0x08` ELECT (zyre's leader contest).
    Elect {
        /// The contested group.
        group: ShortStr,
        /// The challenger's id (32 hex, as sent).
        challenger: ShortStr,
    },
    /// `0x09` LEADER (zyre's leader contest).
    Leader {
        /// The contested group.
        group: ShortStr,
        /// The leader's id (32 hex, as sent).
        leader: ShortStr,
    },
    /// `0x0A` GOODBYE (zyre, gossip mode): the sender is leaving.
    Goodbye,
}

impl Body {
    /// The id byte.
    pub const fn id(&self) -> u8 {
        match self {
            Body::Hello(_) => 0x01,
            Body::Whisper { .. } => 0x02,
            Body::Shout { .. } => 0x03,
            Body::Join { .. } => 0x04,
            Body::Leave { .. } => 0x05,
            Body::Ping => 0x06,
            Body::PingOk => 0x07,
            Body::Elect { .. } => 0x08,
            Body::Leader { .. } => 0x09,
            Body::Goodbye => 0x0A,
        }
    }

    /// The command's name, as the RFC and zyre write it.
    pub const fn name(&self) -> &'static str {
        kind_name(self.id())
    }
}

const fn kind_name(id: u8) -> &'static str {
    match id {
        0x01 => "HELLO",
        0x02 => "WHISPER",
        0x03 => "SHOUT",
        0x04 => "JOIN",
        0x05 => "LEAVE",
        0x06 => "PING",
        0x07 => "PING-OK",
        0x08 => "ELECT",
        0x09 => "LEADER",
        0x0A => "GOODBYE",
        _ => "unknown",
    }
}

/// One ZRE message: a sequence number and a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Counts the sender's messages on this connection: 1 for HELLO, then one more each.
    pub sequence: u16,
    /// The command.
    pub body: Body,
}

impl Message {
    /// Decodes one multipart message.
    pub fn decode(frames: &[Bytes], limits: &Limits) -> Result<Message, DecodeError> {
        let Some((header, content)) = frames.split_first() else {
            return Err(MalformedError::NoFrames.into());
        };
        let mut r = Reader::new(header.clone());
        let signature = r.array::<2>("signature")?;
        if signature != SIGNATURE {
            return Err(MalformedError::Signature(u16::from_be_bytes(signature)).into());
        }
        let id = r.u8("command id")?;
        if !(0x01..=0x0A).contains(&id) {
            return Err(MalformedError::UnknownId { id }.into());
        }
        let version = r.u8("version")?;
        if version != VERSION && version != VERSION_V3 {
            return Err(MalformedError::Version { version }.into());
        }
        let sequence = r.u16("sequence")?;
        if !matches!(id, 0x02 | 0x03) && !content.is_empty() {
            return Err(MalformedError::FrameCount {
                kind: kind_name(id),
                got: frames.len(),
            }
            .into());
        }
        let body = match id {
            0x01 => Body::Hello(decode_hello(&mut r, limits)?),
            0x02 => Body::Whisper {
                content: decode_content(content, limits)?,
            },
            0x03 => Body::Shout {
                group: short(&mut r, "group")?,
                content: decode_content(content, limits)?,
            },
            0x04 => Body::Join {
                group: short(&mut r, "group")?,
                status: r.u8("status")?,
            },
            0x05 => Body::Leave {
                group: short(&mut r, "group")?,
                status: r.u8("status")?,
            },
            0x06 => Body::Ping,
            0x07 => Body::PingOk,
            0x08 => Body::Elect {
                group: short(&mut r, "group")?,
                challenger: short(&mut r, "challenger id")?,
            },
            0x09 => Body::Leader {
                group: short(&mut r, "group")?,
                leader: short(&mut r, "leader id")?,
            },
            _ => Body::Goodbye,
        };
        r.finish(kind_name(id))?;
        Ok(Message { sequence, body })
    }

    /// The frames, with version byte `0x02`. Content frames are shared, not copied.
    ///
    /// # Panics
    ///
    /// If a HELLO header value or group is longer than `u32::MAX` bytes.
    pub fn to_frames(&self) -> Vec<Bytes> {
        let mut h = BytesMut::with_capacity(64);
        h.put_slice(&SIGNATURE);
        h.put_u8(self.body.id());
        h.put_u8(VERSION);
        h.put_u16(self.sequence);
        let mut frames = Vec::with_capacity(1);
        let mut content: &[Bytes] = &[];
        match &self.body {
            Body::Hello(hello) => encode_hello(hello, &mut h),
            Body::Whisper { content: c } => content = c,
            Body::Shout { group, content: c } => {
                group.put(&mut h);
                content = c;
            }
            Body::Join { group, status } | Body::Leave { group, status } => {
                group.put(&mut h);
                h.put_u8(*status);
            }
            Body::Elect {
                group,
                challenger: id,
            }
            | Body::Leader { group, leader: id } => {
                group.put(&mut h);
                id.put(&mut h);
            }
            Body::Ping | Body::PingOk | Body::Goodbye => {}
        }
        frames.push(h.freeze());
        frames.extend(content.iter().cloned());
        frames
    }
}

fn text(bytes: Bytes, what: &'static str) -> Result<String, MalformedError> {
    String::from_utf8(bytes.into()).map_err(|_| MalformedError::NotUtf8 { what })
}

fn short(r: &mut Reader, what: &'static str) -> Result<ShortStr, DecodeError> {
    let s = text(r.short_bytes(what)?, what)?;
    // At most 255 bytes: the length was one byte.
    Ok(ShortStr::new(s).unwrap_or_default())
}

fn long(r: &mut Reader, what: &'static str, limits: &Limits) -> Result<String, DecodeError> {
    let bytes = r.long_bytes(what)?;
    if bytes.len() > limits.max_long_string {
        return Err(LimitError::StringTooLong {
            what,
            len: bytes.len(),
            max: limits.max_long_string,
        }
        .into());
    }
    Ok(text(bytes, what)?)
}

/// Room for `count` entries of at least `min_len` bytes each: the announced count, capped by
/// what the rest of the frame could hold, so a lying count allocates nothing extra.
fn capacity(count: u32, min_len: usize, r: &Reader) -> usize {
    usize::try_from(count)
        .unwrap_or(usize::MAX)
        .min(r.remaining() / min_len)
}

fn decode_hello(r: &mut Reader, limits: &Limits) -> Result<Hello, DecodeError> {
    let endpoint = short(r, "endpoint")?;
    let count = r.u32("group count")?;
    if usize::try_from(count).map_or(true, |n| n > limits.max_groups) {
        return Err(LimitError::TooManyGroups {
            count,
            max: limits.max_groups,
        }
        .into());
    }
    let mut groups = Vec::with_capacity(capacity(count, 4, r));
    for _ in 0..count {
        groups.push(long(r, "group", limits)?);
    }
    let status = r.u8("status")?;
    let name = short(r, "name")?;
    let count = r.u32("header count")?;
    if usize::try_from(count).map_or(true, |n| n > limits.max_headers) {
        return Err(LimitError::TooManyHeaders {
            count,
            max: limits.max_headers,
        }
        .into());
    }
    let mut headers = Vec::with_capacity(capacity(count, 5, r));
    for _ in 0..count {
        let key = short(r, "header key")?;
        let value = long(r, "header value", limits)?;
        headers.push((key, value));
    }
    Ok(Hello {
        endpoint,
        groups,
        status,
        name,
        headers,
    })
}

fn put_long(h: &mut BytesMut, s: &str) {
    let len = u32::try_from(s.len()).expect("a ZRE longstr is at most 4 GiB");
    h.put_u32(len);
    h.put_slice(s.as_bytes());
}

fn encode_hello(hello: &Hello, h: &mut BytesMut) {
    hello.endpoint.put(h);
    let groups = u32::try_from(hello.groups.len()).expect("at most 2^32 groups");
    h.put_u32(groups);
    for g in &hello.groups {
        put_long(h, g);
    }
    h.put_u8(hello.status);
    hello.name.put(h);
    let headers = u32::try_from(hello.headers.len()).expect("at most 2^32 headers");
    h.put_u32(headers);
    for (k, v) in &hello.headers {
        k.put(h);
        put_long(h, v);
    }
}

fn decode_content(content: &[Bytes], limits: &Limits) -> Result<Vec<Bytes>, DecodeError> {
    if content.len() > limits.max_content_frames {
        return Err(LimitError::TooManyFrames {
            count: content.len(),
            max: limits.max_content_frames,
        }
        .into());
    }
    let len: usize = content.iter().map(Bytes::len).sum();
    if len > limits.max_content_bytes {
        return Err(LimitError::ContentTooLarge {
            len,
            max: limits.max_content_bytes,
        }
        .into());
    }
    Ok(content.to_vec())
}
