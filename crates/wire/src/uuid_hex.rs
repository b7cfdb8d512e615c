//! 16-byte UUIDs as the 32 upper-case hexadecimal characters that ZRE and Dafka put on the
//! wire (czmq's `zuuid_str`): Dafka addresses, ZRE ELECT/LEADER ids, event peer ids.

/// Characters of a UUID in hex.
pub const UUID_HEX_LEN: usize = 32;

const HEX_DIGITS: &[u8; 16] = b"0123456789ABCDEF";

/// The 32 upper-case hex characters of `uuid`.
pub fn encode(uuid: &[u8; 16]) -> [u8; UUID_HEX_LEN] {
    let mut out = [0u8; UUID_HEX_LEN];
    // One lookup per byte (every RECORD a producer publishes carries its id).
    for (pair, &byte) in out.chunks_exact_mut(2).zip(uuid) {
        pair.copy_from_slice(&HEX_PAIR[usize::from(byte)]);
    }
    out
}

/// The two hex digits of each byte value.
const HEX_PAIR: [[u8; 2]; 256] = {
    let mut table = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = [HEX_DIGITS[i >> 4], HEX_DIGITS[i & 0x0F]];
        i += 1;
    }
    table
};

/// Parses exactly 32 upper-case hex characters. Lower case is refused: no reference peer sends
/// it, and accepting it would make decode -> encode change the bytes.
pub fn decode(text: &[u8]) -> Option<[u8; 16]> {
    let text: &[u8; UUID_HEX_LEN] = text.try_into().ok()?;
    let mut out = [0u8; 16];
    // Every digit is looked up and checked at once at the end (every RECORD carries one id).
    let mut bad = 0u8;
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        let (hi, lo) = (
            HEX_VALUE[usize::from(pair[0])],
            HEX_VALUE[usize::from(pair[1])],
        );
        bad |= hi | lo;
        *byte = (hi << 4) | (lo & 0x0F);
    }
    (bad & INVALID == 0).then_some(out)
}

/// Marks a byte that is not an upper-case hex digit in [`HEX_VALUE`].
const INVALID: u8 = 0x10;

/// The value of each upper-case hex digit; [`INVALID`] for every other byte.
const HEX_VALUE: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut i = 0;
    while i < 16 {
        table[HEX_DIGITS[i] as usize] = i as u8;
        i += 1;
    }
    table
};

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
        // Every byte that is not an upper-case hex digit, at every position.
        for bad in (0..=255u8).filter(|c| !HEX_DIGITS.contains(c)) {
            for at in 0..UUID_HEX_LEN {
                let mut t = *text;
                t[at] = bad;
                assert_eq!(decode(&t), None, "{bad:#04x} at {at}");
            }
        }
        // Every byte value, at every position, encodes as format!("{:02X}") and back.
        for v in 0..=255u8 {
            let uuid = [v; 16];
            assert_eq!(encode(&uuid), *format!("{v:02X}").repeat(16).as_bytes());
            assert_eq!(decode(&encode(&uuid)), Some(uuid));
        }
    }
}
