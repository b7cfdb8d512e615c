//! 16-byte UUIDs as the 32 upper-case hexadecimal characters that ZRE and Dafka put on the
//! wire (czmq's `zuuid_str`): Dafka addresses, ZRE ELECT/LEADER ids, event peer ids.

/// Characters of a UUID in hex.
pub const UUID_HEX_LEN: usize = 32;

const HEX_DIGITS: &[u8; 16] = b"0123456789ABCDEF";

/// The 32 upper-case hex characters of `uuid`.
pub fn encode(uuid: &[u8; 16]) -> [u8; UUID_HEX_LEN] {
    let mut out = [0u8; UUID_HEX_LEN];
    for (pair, byte) in out.chunks_exact_mut(2).zip(uuid) {
        pair[0] = HEX_DIGITS[usize::from(byte >> 4)];
        pair[1] = HEX_DIGITS[usize::from(byte & 0x0F)];
    }
    out
}

/// Parses exactly 32 upper-case hex characters. Lower case is refused: no reference peer sends
/// it, and accepting it would make decode -> encode change the bytes.
pub fn decode(text: &[u8]) -> Option<[u8; 16]> {
    if text.len() != UUID_HEX_LEN {
        return None;
    }
    let mut out = [0u8; 16];
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *byte = (upper_hex_value(pair[0])? << 4) | upper_hex_value(pair[1])?;
    }
    Some(out)
}

fn upper_hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let text = b"986108951EB145A1BFBDC5601975F614";
        let uuid = decode(text).unwrap();
        assert_eq!(uuid[0], 0x98);
        assert_eq!(uuid[15], 0x14);
        assert_eq!(&encode(&uuid), text);
        assert_eq!(decode(b"986108951eb145a1bfbdc5601975f614"), None);
        assert_eq!(decode(b"986108951EB145A1BFBDC5601975F61"), None);
        assert_eq!(decode(b"986108951EB145A1BFBDC5601975F6140"), None);
        assert_eq!(decode(b"986108951EB145A1BFBDC5601975F61G"), None);
    }
}
