//! ZMTP commands and READY metadata.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{CallerError, MalformedError};
use crate::frame::{FLAG_COMMAND, put_header};
use dafka_wire::Reader;

const READY: &[u8] = b"READY";
const ERROR: &[u8] = b"ERROR";
const SUBSCRIBE: &[u8] = b"SUBSCRIBE";
const CANCEL: &[u8] = b"CANCEL";
const PING: &[u8] = b"PING";
const PONG: &[u8] = b"PONG";

/// Largest PING/PONG context: "ping-context = 0*16OCTET".
pub const MAX_PING_CONTEXT: usize = 16;

/// Canonical property name for the socket type.
pub const PROPERTY_SOCKET_TYPE: &str = "Socket-Type";
/// Canonical property name for the identity (routing id).
pub const PROPERTY_IDENTITY: &str = "Identity";
/// Canonical property name for the resource.
pub const PROPERTY_RESOURCE: &str = "Resource";

/// Ordered READY properties (the connection metadata).
///
/// Each property on the wire:
///
/// | Size | Field |
/// |-----:|-------|
/// | 1    | name length *n* (1-255) |
/// | *n*  | name (`A-Z a-z 0-9 - _ . +`) |
/// | 4    | value length *v*, big-endian (0 to 2^31-1) |
/// | *v*  | value (opaque bytes) |
///
/// > The name SHALL be 1 to 255 characters. Zero-sized names are not valid. The case (upper or
/// > lower) of the name SHALL NOT be significant. (37/ZMTP, NULL mechanism)
///
/// Lookups ignore case. [`Metadata::insert`] stores the well-known names in their canonical
/// spelling (`Socket-Type`, `Identity`, `Resource`, `X-...`) because libzmq compares them
/// case-sensitively. Decoding keeps whatever the peer sent (names need only be non-empty UTF-8),
/// including duplicates; [`Metadata::get`] returns the first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    props: Vec<(String, Bytes)>,
}

impl Metadata {
    /// No properties.
    pub fn new() -> Self {
        Metadata::default()
    }

    /// The value of the first property called `name`, ignoring case.
    pub fn get(&self, name: &str) -> Option<&Bytes> {
        self.props
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Sets `name` to `value`, replacing a property of the same name (ignoring case) or appending.
    ///
    /// The name must be 1-255 characters of `A-Z a-z 0-9 - _ . +` and the value at most 2^31-1
    /// bytes. Well-known names are stored in canonical spelling.
    pub fn insert(&mut self, name: &str, value: impl Into<Bytes>) -> Result<(), CallerError> {
        let value = value.into();
        validate_property_name(name)?;
        if value.len() > i32::MAX as usize {
            return Err(CallerError::PropertyValueTooLong(value.len()));
        }
        let name = canonical_name(name);
        match self
            .props
            .iter_mut()
            .find(|(n, _)| n.eq_ignore_ascii_case(&name))
        {
            Some(slot) => slot.1 = value,
            None => self.props.push((name, value)),
        }
        Ok(())
    }

    /// The properties in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Bytes)> {
        self.props.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// Number of properties.
    pub fn len(&self) -> usize {
        self.props.len()
    }

    /// Whether there are no properties.
    pub fn is_empty(&self) -> bool {
        self.props.is_empty()
    }

    /// Length of the encoded properties in bytes.
    pub fn encoded_len(&self) -> usize {
        self.props
            .iter()
            .map(|(n, v)| 1 + n.len() + 4 + v.len())
            .sum()
    }

    /// Appends the encoded properties to `out`.
    ///
    /// Names longer than 255 bytes cannot exist here: [`Metadata::insert`] refuses them and
    /// decoded names come from a 1-byte length.
    pub fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        for (name, value) in &self.props {
            out.put_u8(name.len() as u8);
            out.put_slice(name.as_bytes());
            out.put_u32(value.len() as u32);
            out.put_slice(value);
        }
    }

    /// Decodes properties filling all of `data`.
    pub fn decode(data: Bytes) -> Result<Self, MalformedError> {
        let mut r = Reader::new(data);
        let mut props = Vec::new();
        while r.remaining() > 0 {
            let name_len = r.u8("property name length")?;
            if name_len == 0 {
                return Err(MalformedError::EmptyPropertyName);
            }
            let name = r.take(usize::from(name_len), "property name")?;
            let name = String::from_utf8(name.to_vec())
                .map_err(|_| MalformedError::PropertyNameNotUtf8)?;
            let value_len = r.u32("property value length")?;
            let value = r.take(value_len as usize, "property value")?;
            props.push((name, value));
        }
        Ok(Metadata { props })
    }
}

/// Appends a READY command frame carrying `metadata` (READY has nothing to validate).
pub(crate) fn put_ready(metadata: &Metadata, out: &mut BytesMut) {
    let len = 1 + READY.len() + metadata.encoded_len();
    out.reserve(9 + len);
    put_header(out, FLAG_COMMAND, len);
    out.put_u8(READY.len() as u8);
    out.put_slice(READY);
    metadata.encode(out);
}

fn validate_property_name(name: &str) -> Result<(), CallerError> {
    // "name-char = ALPHA | DIGIT | "-" | "_" | "." | "+""
    let ok = (1..=255).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'+'));
    if ok {
        Ok(())
    } else {
        Err(CallerError::InvalidPropertyName(name.to_owned()))
    }
}

/// The canonical spelling of a property name: `Socket-Type`, `Identity`, `Resource`, `X-...`.
fn canonical_name(name: &str) -> String {
    for known in [PROPERTY_SOCKET_TYPE, PROPERTY_IDENTITY, PROPERTY_RESOURCE] {
        if name.eq_ignore_ascii_case(known) {
            return known.to_owned();
        }
    }
    match name.get(..2) {
        Some(prefix) if prefix.eq_ignore_ascii_case("x-") => format!("X-{}", &name[2..]),
        _ => name.to_owned(),
    }
}

/// A ZMTP command.
///
/// A command is one frame with the COMMAND flag (`0x04`, or `0x06` when long) whose body is:
///
/// | Offset | Size | Field       |
/// |-------:|-----:|-------------|
/// | 0      | 1    | name length *n* (1-255) |
/// | 1      | *n*  | name (ASCII, e.g. `READY`) |
/// | 1+*n*  | rest | command data |
///
/// The data of each command this crate knows:
///
/// | Command     | Data layout |
/// |-------------|-------------|
/// | `READY`     | metadata: zero or more properties (see [`Metadata`]) |
/// | `ERROR`     | 1-byte reason length *r* (0-255), *r* bytes of reason |
/// | `SUBSCRIBE` | the subscription prefix (all remaining bytes, may be empty) |
/// | `CANCEL`    | the subscription prefix (all remaining bytes, may be empty) |
/// | `PING`      | 2-byte TTL in deciseconds, big-endian; then 0-16 bytes of context |
/// | `PONG`      | 0-16 bytes of context (the PING's, echoed) |
///
/// All reads are bounds-checked against the frame body and trailing bytes are rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Command {
    /// `READY`: ends the NULL handshake and carries the connection metadata.
    Ready(Metadata),
    /// `ERROR`: a fatal handshake error; the reason is at most 255 bytes.
    Error {
        /// Why the peer gave up.
        reason: Bytes,
    },
    /// `SUBSCRIBE` (ZMTP 3.1): add a subscription prefix.
    Subscribe(Bytes),
    /// `CANCEL` (ZMTP 3.1): remove one instance of a subscription prefix.
    Cancel(Bytes),
    /// `PING`: heartbeat request.
    Ping {
        /// How long the peer may wait for traffic before closing, in tenths of a second (0: no TTL).
        ttl_deciseconds: u16,
        /// Up to 16 bytes to be echoed in the PONG.
        context: Bytes,
    },
    /// `PONG`: heartbeat reply.
    Pong {
        /// The PING's context.
        context: Bytes,
    },
    /// Any other command; ignored after the handshake.
    Unknown {
        /// The command name (1-255 bytes).
        name: Bytes,
        /// Everything after the name.
        data: Bytes,
    },
}

impl Command {
    /// The command name as sent on the wire.
    pub fn name(&self) -> &[u8] {
        match self {
            Command::Ready(_) => READY,
            Command::Error { .. } => ERROR,
            Command::Subscribe(_) => SUBSCRIBE,
            Command::Cancel(_) => CANCEL,
            Command::Ping { .. } => PING,
            Command::Pong { .. } => PONG,
            Command::Unknown { name, .. } => name,
        }
    }

    /// Decodes a command frame body (as in [`Frame::Command`](crate::Frame::Command)).
    pub fn decode(body: Bytes) -> Result<Command, MalformedError> {
        let mut r = Reader::new(body);
        let name_len = r.u8("command name length")?;
        if name_len == 0 {
            return Err(MalformedError::EmptyCommandName);
        }
        let name = r.take(usize::from(name_len), "command name")?;
        let cmd = match &name[..] {
            READY => Command::Ready(Metadata::decode(r.rest())?),
            ERROR => {
                let len = r.u8("ERROR reason length")?;
                let reason = r.take(usize::from(len), "ERROR reason")?;
                r.finish("ERROR command")?;
                Command::Error { reason }
            }
            SUBSCRIBE => Command::Subscribe(r.rest()),
            CANCEL => Command::Cancel(r.rest()),
            PING => {
                let ttl_deciseconds = r.u16("PING ttl")?;
                let context = r.rest();
                check_context("PING", &context)?;
                Command::Ping {
                    ttl_deciseconds,
                    context,
                }
            }
            PONG => {
                let context = r.rest();
                check_context("PONG", &context)?;
                Command::Pong { context }
            }
            _ => Command::Unknown {
                name,
                data: r.rest(),
            },
        };
        Ok(cmd)
    }

    /// Length of the command frame body (name length byte, name, data).
    pub fn body_len(&self) -> usize {
        1 + self.name().len()
            + match self {
                Command::Ready(m) => m.encoded_len(),
                Command::Error { reason } => 1 + reason.len(),
                Command::Subscribe(s) | Command::Cancel(s) => s.len(),
                Command::Ping { context, .. } => 2 + context.len(),
                Command::Pong { context } => context.len(),
                Command::Unknown { data, .. } => data.len(),
            }
    }

    /// Checks that the command can be encoded: name 1-255 bytes, ERROR reason at most 255
    /// bytes, PING/PONG context at most 16 bytes.
    pub fn validate(&self) -> Result<(), CallerError> {
        match self {
            Command::Error { reason } if reason.len() > 255 => {
                Err(CallerError::ErrorReasonTooLong(reason.len()))
            }
            Command::Ping { context, .. } | Command::Pong { context }
                if context.len() > MAX_PING_CONTEXT =>
            {
                Err(CallerError::ContextTooLong(context.len()))
            }
            Command::Unknown { name, .. } if name.is_empty() || name.len() > 255 => {
                Err(CallerError::InvalidCommandName(name.len()))
            }
            _ => Ok(()),
        }
    }

    /// Appends the whole command frame (header and body) to `out`; nothing is written on error.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), CallerError> {
        self.validate()?;
        let len = self.body_len();
        out.reserve(9 + len);
        put_header(out, FLAG_COMMAND, len);
        self.put_body(out);
        Ok(())
    }

    /// Appends the command frame's body (name length, name, data) without a frame header: the
    /// plaintext of a CURVE MESSAGE box carrying a command. Call [`Command::validate`] first.
    pub(crate) fn put_body(&self, out: &mut BytesMut) {
        let name = self.name();
        out.put_u8(name.len() as u8);
        out.put_slice(name);
        match self {
            Command::Ready(m) => m.encode(out),
            Command::Error { reason } => {
                out.put_u8(reason.len() as u8);
                out.put_slice(reason);
            }
            Command::Subscribe(s) | Command::Cancel(s) => out.put_slice(s),
            Command::Ping {
                ttl_deciseconds,
                context,
            } => {
                out.put_u16(*ttl_deciseconds);
                out.put_slice(context);
            }
            Command::Pong { context } => out.put_slice(context),
            Command::Unknown { data, .. } => out.put_slice(data),
        }
    }
}

/// "ping-context = 0*16OCTET"; a PONG's context "MUST NOT exceed 16 octets".
fn check_context(command: &'static str, context: &[u8]) -> Result<(), MalformedError> {
    if context.len() > MAX_PING_CONTEXT {
        Err(MalformedError::ContextTooLong {
            command,
            len: context.len(),
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{Frame, FrameDecoder, Limits};

    fn encode(cmd: &Command) -> Vec<u8> {
        let mut out = BytesMut::new();
        cmd.encode(&mut out).unwrap();
        out.to_vec()
    }

    fn decode_frame(wire: &[u8]) -> Command {
        let mut buf = BytesMut::from(wire);
        let Some(Frame::Command(body)) = FrameDecoder::new(Limits::default())
            .decode(&mut buf)
            .unwrap()
        else {
            panic!("not a command frame");
        };
        assert!(buf.is_empty());
        Command::decode(body).unwrap()
    }

    /// READY as a libzmq 4.3.5 DEALER sends it (no routing id set: empty Identity).
    const LIBZMQ_DEALER_READY: &[u8] = b"\x04\x29\x05READY\
        \x0bSocket-Type\x00\x00\x00\x06DEALER\
        \x08Identity\x00\x00\x00\x00";

    #[test]
    fn libzmq_dealer_ready() {
        let mut m = Metadata::new();
        m.insert("Socket-Type", Bytes::from_static(b"DEALER"))
            .unwrap();
        m.insert("Identity", Bytes::new()).unwrap();
        let cmd = Command::Ready(m);
        assert_eq!(encode(&cmd), LIBZMQ_DEALER_READY);
        assert_eq!(decode_frame(LIBZMQ_DEALER_READY), cmd);
    }

    #[test]
    fn libzmq_ready_with_identity_and_app_property() {
        // zmq_setsockopt(ROUTING_ID, "peer1") and ZMQ_METADATA "X-App:demo" on a REQ.
        let wire: &[u8] = b"\x04\x39\x05READY\
            \x0bSocket-Type\x00\x00\x00\x03REQ\
            \x08Identity\x00\x00\x00\x05peer1\
            \x05X-App\x00\x00\x00\x04demo";
        let Command::Ready(m) = decode_frame(wire) else {
            panic!("not READY")
        };
        assert_eq!(m.get("socket-type").map(|v| &v[..]), Some(&b"REQ"[..]));
        assert_eq!(m.get("IDENTITY").map(|v| &v[..]), Some(&b"peer1"[..]));
        assert_eq!(m.get("x-app").map(|v| &v[..]), Some(&b"demo"[..]));
        assert_eq!(m.get("Resource"), None);
        assert_eq!(encode(&Command::Ready(m)), wire);
    }

    #[test]
    fn insert_canonicalises_and_replaces() {
        let mut m = Metadata::new();
        m.insert("socket-type", Bytes::from_static(b"PUB")).unwrap();
        m.insert("x-colour", Bytes::from_static(b"red")).unwrap();
        m.insert("RESOURCE", Bytes::from_static(b"/a")).unwrap();
        m.insert("SOCKET-TYPE", Bytes::from_static(b"XPUB"))
            .unwrap();
        let names: Vec<_> = m.iter().map(|(n, _)| n.to_owned()).collect();
        assert_eq!(names, ["Socket-Type", "X-colour", "Resource"]);
        assert_eq!(m.get("Socket-Type").map(|v| &v[..]), Some(&b"XPUB"[..]));
        assert_eq!(m.len(), 3);
        for bad in ["", "a b", "ü", &"a".repeat(256)] {
            assert!(matches!(
                m.insert(bad, Bytes::new()),
                Err(CallerError::InvalidPropertyName(_))
            ));
        }
        assert!(m.insert(&"a".repeat(255), Bytes::new()).is_ok());
    }

    #[test]
    fn command_vectors() {
        let cases: Vec<(Command, &[u8])> = vec![
            (
                Command::Error {
                    reason: Bytes::from_static(b"no"),
                },
                b"\x04\x09\x05ERROR\x02no",
            ),
            (
                Command::Subscribe(Bytes::from_static(b"A")),
                b"\x04\x0b\x09SUBSCRIBEA",
            ),
            (Command::Subscribe(Bytes::new()), b"\x04\x0a\x09SUBSCRIBE"),
            (
                Command::Cancel(Bytes::from_static(b"topic")),
                b"\x04\x0c\x06CANCELtopic",
            ),
            (
                Command::Ping {
                    ttl_deciseconds: 0x0102,
                    context: Bytes::from_static(b"ctx"),
                },
                b"\x04\x0a\x04PING\x01\x02ctx",
            ),
            (
                Command::Ping {
                    ttl_deciseconds: 0,
                    context: Bytes::new(),
                },
                b"\x04\x07\x04PING\x00\x00",
            ),
            (
                Command::Pong {
                    context: Bytes::from_static(b"ctx"),
                },
                b"\x04\x08\x04PONGctx",
            ),
            (
                Command::Unknown {
                    name: Bytes::from_static(b"HELLO"),
                    data: Bytes::from_static(b"\x00\x01"),
                },
                b"\x04\x08\x05HELLO\x00\x01",
            ),
            (Command::Ready(Metadata::new()), b"\x04\x06\x05READY"),
        ];
        for (cmd, wire) in cases {
            assert_eq!(encode(&cmd), wire, "{cmd:?}");
            assert_eq!(decode_frame(wire), cmd);
            assert_eq!(cmd.body_len() + 2, wire.len());
        }
    }

    #[test]
    fn long_ready_uses_a_long_frame() {
        let mut m = Metadata::new();
        m.insert("X-Big", Bytes::from(vec![b'v'; 300])).unwrap();
        let wire = encode(&Command::Ready(m.clone()));
        assert_eq!(wire[0], 0x06);
        assert_eq!(&wire[1..9], &(6u64 + 1 + 5 + 4 + 300).to_be_bytes());
        assert_eq!(decode_frame(&wire), Command::Ready(m));
    }

    #[test]
    fn malformed_bodies() {
        let bad: Vec<(&[u8], MalformedError)> = vec![
            (
                b"",
                MalformedError::Truncated {
                    what: "command name length",
                    needed: 1,
                    available: 0,
                },
            ),
            (b"\x00", MalformedError::EmptyCommandName),
            (
                b"\x06READY",
                MalformedError::Truncated {
                    what: "command name",
                    needed: 6,
                    available: 5,
                },
            ),
            (b"\x05READY\x00", MalformedError::EmptyPropertyName),
            // The value length points past the body: it must not read into anything else.
            (
                b"\x05READY\x01A\x00\x00\x00\x05abc",
                MalformedError::Truncated {
                    what: "property value",
                    needed: 5,
                    available: 3,
                },
            ),
            (
                b"\x05READY\x01A\x00\x00",
                MalformedError::Truncated {
                    what: "property value length",
                    needed: 4,
                    available: 2,
                },
            ),
            (
                b"\x05READY\x01\xff\x00\x00\x00\x00",
                MalformedError::PropertyNameNotUtf8,
            ),
            (
                b"\x05ERROR\x03ab",
                MalformedError::Truncated {
                    what: "ERROR reason",
                    needed: 3,
                    available: 2,
                },
            ),
            (
                b"\x05ERROR\x01abc",
                MalformedError::TrailingBytes {
                    what: "ERROR command",
                    count: 2,
                },
            ),
            (
                b"\x04PING\x00",
                MalformedError::Truncated {
                    what: "PING ttl",
                    needed: 2,
                    available: 1,
                },
            ),
            (
                b"\x04PING\x00\x00aaaaaaaaaaaaaaaaa",
                MalformedError::ContextTooLong {
                    command: "PING",
                    len: 17,
                },
            ),
            (
                b"\x04PONGaaaaaaaaaaaaaaaaa",
                MalformedError::ContextTooLong {
                    command: "PONG",
                    len: 17,
                },
            ),
        ];
        for (body, err) in bad {
            assert_eq!(
                Command::decode(Bytes::from_static(body)),
                Err(err),
                "{body:?}"
            );
        }
    }

    #[test]
    fn encode_refuses_invalid_commands_without_writing() {
        let bad = [
            Command::Error {
                reason: Bytes::from(vec![b'x'; 256]),
            },
            Command::Ping {
                ttl_deciseconds: 1,
                context: Bytes::from(vec![0; 17]),
            },
            Command::Pong {
                context: Bytes::from(vec![0; 17]),
            },
            Command::Unknown {
                name: Bytes::new(),
                data: Bytes::new(),
            },
            Command::Unknown {
                name: Bytes::from(vec![b'A'; 256]),
                data: Bytes::new(),
            },
        ];
        for cmd in bad {
            let mut out = BytesMut::new();
            assert!(cmd.encode(&mut out).is_err(), "{cmd:?}");
            assert!(out.is_empty());
        }
    }

    #[test]
    fn decoded_fields_share_the_frame_buffer() {
        let body = Bytes::from_static(b"\x09SUBSCRIBEtopic");
        let Command::Subscribe(topic) = Command::decode(body.clone()).unwrap() else {
            panic!("not SUBSCRIBE")
        };
        assert_eq!(topic.as_ptr(), body[10..].as_ptr());
    }
}
