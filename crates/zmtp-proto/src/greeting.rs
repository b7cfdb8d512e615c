//! The 64-byte ZMTP 3 greeting.

use bytes::{BufMut, BytesMut};

use crate::error::PeerError;

/// Length of the greeting in bytes.
pub const GREETING_LEN: usize = 64;
/// Length of the mechanism field in bytes.
pub const MECHANISM_LEN: usize = 20;

const SIGNATURE_START: u8 = 0xFF;
const SIGNATURE_END: u8 = 0x7F;
/// libzmq sends `00 00 00 00 00 00 00 01` as padding (a ZMTP 1.0 peer reads it as a one-byte
/// identity frame); the RFC asks for zeros and forbids interpreting it. We send libzmq's bytes.
const PADDING: [u8; 8] = [0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01];
const FILLER_LEN: usize = 31;

/// Our protocol version: ZMTP 3.1.
pub const VERSION: (u8, u8) = (0x03, 0x01);

/// A decoded (or to-be-sent) greeting. Padding and filler carry no meaning and are not kept.
///
/// | Offset | Size | Field        | Sent by us                          | Checked on receipt                         |
/// |-------:|-----:|--------------|-------------------------------------|--------------------------------------------|
/// | 0      | 1    | signature    | `0xFF`                              | must be `0xFF`                             |
/// | 1      | 8    | padding      | `00 00 00 00 00 00 00 01` (libzmq's bytes) | ignored                             |
/// | 9      | 1    | signature    | `0x7F`                              | only bit 0 (set: ZMTP 2+, clear: ZMTP 1.0) |
/// | 10     | 1    | major        | `0x03`                              | must be `>= 3`                             |
/// | 11     | 1    | minor        | `0x01`                              | recorded                                   |
/// | 12     | 20   | mechanism    | ASCII name, NUL padded (`NULL`)     | must equal ours exactly (checked by [`Connection`](crate::Connection)) |
/// | 32     | 1    | as-server    | `0x00`/`0x01`                       | recorded, not checked for NULL             |
/// | 33     | 31   | filler       | zeros                               | ignored                                    |
///
/// Decoding is incremental: [`Greeting::decode`] looks at however many bytes have arrived and
/// rejects a non-ZMTP-3 peer as soon as the deciding byte is there (byte 0, byte 9 or byte 10),
/// so a ZMTP 1.0 peer that never sends 64 bytes is still refused at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Greeting {
    /// Major version (`3` for ZMTP 3.x).
    pub major: u8,
    /// Minor version (`0` for ZMTP 3.0, `1` for 3.1).
    pub minor: u8,
    /// The mechanism name, NUL padded to 20 bytes.
    pub mechanism: [u8; MECHANISM_LEN],
    /// The as-server flag (meaningless, and zero, for NULL).
    pub as_server: bool,
}

impl Greeting {
    /// A ZMTP 3.1 greeting for `mechanism` (at most 20 ASCII bytes; longer names are truncated).
    pub fn new(mechanism: &str, as_server: bool) -> Self {
        let mut name = [0u8; MECHANISM_LEN];
        for (dst, src) in name.iter_mut().zip(mechanism.bytes()) {
            *dst = src;
        }
        Greeting {
            major: VERSION.0,
            minor: VERSION.1,
            mechanism: name,
            as_server,
        }
    }

    /// The mechanism name without its NUL padding.
    pub fn mechanism_name(&self) -> &[u8] {
        let end = self
            .mechanism
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |i| i + 1);
        &self.mechanism[..end]
    }

    /// Appends the 64 greeting bytes to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        out.reserve(GREETING_LEN);
        out.put_u8(SIGNATURE_START);
        out.put_slice(&PADDING);
        out.put_u8(SIGNATURE_END);
        out.put_u8(self.major);
        out.put_u8(self.minor);
        out.put_slice(&self.mechanism);
        out.put_u8(u8::from(self.as_server));
        out.put_bytes(0, FILLER_LEN);
    }

    /// Decodes a greeting from the start of `buf`, which may hold any prefix of it.
    ///
    /// Returns `Ok(None)` while fewer than 64 bytes are there and nothing seen so far is wrong,
    /// `Ok(Some(_))` once all 64 are (the caller then consumes [`GREETING_LEN`] bytes), and an
    /// error as soon as a deciding byte shows the peer is not a ZMTP 3.x peer.
    pub fn decode(buf: &[u8]) -> Result<Option<Greeting>, PeerError> {
        // "signature = %xFF padding %x7F" -- anything else is ZMTP 1.0 or not ZeroMQ at all.
        if let Some(&byte0) = buf.first()
            && byte0 != SIGNATURE_START
        {
            return Err(PeerError::NotZmtp3 { byte0, byte9: 0 });
        }
        // NOTES.md: libzmq checks only bit 0 of byte 9; a ZMTP 1.0 peer has it clear.
        if let Some(&byte9) = buf.get(9)
            && byte9 & 0x01 == 0
        {
            return Err(PeerError::NotZmtp3 {
                byte0: SIGNATURE_START,
                byte9,
            });
        }
        // "A ZMTP peer MUST accept higher protocol versions as valid." We cannot downgrade to
        // ZMTP 2.0 (major 1) and do not try; "If a peer cannot downgrade its protocol to match
        // its peer, it MUST close the connection."
        if let Some(&major) = buf.get(10)
            && major < 3
        {
            return Err(PeerError::UnsupportedVersion { major });
        }
        let Some(g) = buf.get(..GREETING_LEN) else {
            return Ok(None);
        };
        let mut mechanism = [0u8; MECHANISM_LEN];
        mechanism.copy_from_slice(&g[12..12 + MECHANISM_LEN]);
        Ok(Some(Greeting {
            major: g[10],
            minor: g[11],
            mechanism,
            as_server: g[32] != 0,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a libzmq 4.3.5 socket (any type, NULL mechanism, not a CURVE/PLAIN server) sends.
    pub(crate) const LIBZMQ_GREETING: [u8; 64] = [
        0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x7f, // signature
        0x03, 0x01, // version 3.1
        b'N', b'U', b'L', b'L', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,    // mechanism
        0x00, // as-server
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, // filler
    ];

    #[test]
    fn encodes_libzmq_bytes() {
        let mut out = BytesMut::new();
        Greeting::new("NULL", false).encode(&mut out);
        assert_eq!(&out[..], &LIBZMQ_GREETING[..]);
    }

    #[test]
    fn decodes_libzmq_greeting_at_every_split() {
        let want = Greeting::new("NULL", false);
        for cut in 0..GREETING_LEN {
            assert_eq!(
                Greeting::decode(&LIBZMQ_GREETING[..cut]),
                Ok(None),
                "cut {cut}"
            );
        }
        assert_eq!(Greeting::decode(&LIBZMQ_GREETING), Ok(Some(want)));
        assert_eq!(want.mechanism_name(), b"NULL");
        // Trailing bytes (the first frame) are not looked at.
        let mut more = LIBZMQ_GREETING.to_vec();
        more.extend_from_slice(&[0x04, 0x00]);
        assert_eq!(Greeting::decode(&more), Ok(Some(want)));
    }

    #[test]
    fn ignores_padding_and_all_but_bit_0_of_byte_9() {
        let mut g = LIBZMQ_GREETING;
        g[1..9].copy_from_slice(&[0xAA; 8]);
        g[9] = 0x01;
        g[40] = 0x55;
        assert!(matches!(Greeting::decode(&g), Ok(Some(_))));
    }

    #[test]
    fn accepts_3_0_and_future_versions() {
        let mut g = LIBZMQ_GREETING;
        g[11] = 0;
        assert_eq!(Greeting::decode(&g).unwrap().unwrap().minor, 0);
        g[10] = 4;
        g[11] = 7;
        let d = Greeting::decode(&g).unwrap().unwrap();
        assert_eq!((d.major, d.minor), (4, 7));
    }

    #[test]
    fn rejects_zmtp_1_and_2_early() {
        // ZMTP 1.0: a short frame "05 00 hello" -- refused on the very first byte.
        assert_eq!(
            Greeting::decode(&[0x05]),
            Err(PeerError::NotZmtp3 {
                byte0: 0x05,
                byte9: 0
            })
        );
        // ZMTP 1.0 long identity: FF + 8-byte length + flags 0x00 -- refused at byte 9.
        let zmtp1 = [0xff, 0, 0, 0, 0, 0, 0, 0, 0x20, 0x00];
        assert_eq!(Greeting::decode(&zmtp1[..9]), Ok(None));
        assert_eq!(
            Greeting::decode(&zmtp1),
            Err(PeerError::NotZmtp3 {
                byte0: 0xff,
                byte9: 0x00
            })
        );
        // ZMTP 2.0 (major 1) -- refused at byte 10 without waiting for the rest.
        let mut zmtp2 = LIBZMQ_GREETING;
        zmtp2[10] = 0x01;
        assert_eq!(
            Greeting::decode(&zmtp2[..11]),
            Err(PeerError::UnsupportedVersion { major: 1 })
        );
    }

    #[test]
    fn mechanism_name_trims_padding_only() {
        let g = Greeting::new("CURVE", true);
        assert_eq!(g.mechanism_name(), b"CURVE");
        assert_eq!(Greeting::new("", false).mechanism_name(), b"");
        let long = Greeting::new("ABCDEFGHIJKLMNOPQRSTUVWXYZ", false);
        assert_eq!(long.mechanism_name(), b"ABCDEFGHIJKLMNOPQRST");
    }
}
