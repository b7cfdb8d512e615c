//! Test-only helpers shared by the tests of several dafka crates (a dev-dependency only, never
//! published): hex of the captured vectors, their `key=value;…` field column, a small
//! seeded generator for reproducible lossy networks and crash points, the hand-written bytes of
//! a raw ZMTP peer ([`zmtp`]), the memory of this process ([`proc_status_kib`]) and free
//! loopback ports outside the ephemeral range ([`free_tcp_port`]).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::BTreeMap;

/// A free loopback port below the kernel's ephemeral range: a port the kernel hands out for
/// `127.0.0.1:0` is free only until an outgoing connection takes it as its source port (or a
/// client connecting before the server binds it connects to itself). tests/ports.py does the
/// same for the Python tests.
pub fn free_tcp_port() -> u16 {
    const LOWEST: u64 = 10_000;
    let top = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32_768);
    assert!(
        top > LOWEST + 100,
        "the ephemeral port range starts at {top}: no room below it"
    );
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    // Seeded by process and time so that tests running at once rarely try the same ports.
    let mut rng = Rng(u64::from(std::process::id()) << 32 | nanos | 1);
    for _ in 0..200 {
        let port = u16::try_from(LOWEST + rng.below(top - LOWEST)).unwrap();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port below {top} after 200 tries");
}

/// The bytes of lowercase or uppercase hex `s` (panics on odd length or a non-hex digit: the
/// input is a test's own data).
pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Lowercase hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The fields column of a captured-vector row: `key=value` pairs separated by `;` (empty
/// pairs skipped; panics on a pair without `=`).
pub fn fields(column: &str) -> BTreeMap<String, String> {
    column
        .split(';')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

/// A small deterministic generator (xorshift64): reproducible runs from a seed, no
/// cryptographic randomness needed. The seed must not be zero.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with a chance of `percent` in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A field of `/proc/self/status` that counts kilobytes (`VmRSS`, `VmData`, ...), or `None`
/// where there is no such file or field (not Linux).
///
/// `VmRSS` is the resident memory the issue reports speak of; `VmData` (private writable
/// mappings, where every heap allocation lands, touched or not) moves only with this process's
/// own allocations. Memory tests read one before and after and compare.
pub fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Hand-written wire bytes of a raw ZMTP 3.1 peer, independent of the protocol crate's
/// encoders (RFC 37), for tests that play a peer over a bare socket.
pub mod zmtp {
    /// A ZMTP 3.1 greeting announcing `mechanism` (as-server clear).
    pub fn greeting(mechanism: &[u8]) -> Vec<u8> {
        let mut g = vec![0xFFu8];
        g.extend_from_slice(&[0; 8]);
        g.push(0x7F);
        g.extend_from_slice(&[3, 1]);
        let mut mech = mechanism.to_vec();
        mech.resize(20, 0);
        g.extend_from_slice(&mech);
        g.push(0);
        g.extend_from_slice(&[0; 31]);
        g
    }

    /// A READY command frame carrying `properties` (name, value) in order.
    pub fn ready_with(properties: &[(&str, &[u8])]) -> Vec<u8> {
        let mut body = vec![5u8];
        body.extend_from_slice(b"READY");
        for (name, value) in properties {
            body.push(name.len() as u8);
            body.extend_from_slice(name.as_bytes());
            body.extend_from_slice(&(value.len() as u32).to_be_bytes());
            body.extend_from_slice(value);
        }
        let mut out = vec![0x04, body.len() as u8];
        out.extend_from_slice(&body);
        out
    }

    /// A READY announcing only `Socket-Type`.
    pub fn ready(socket_type: &str) -> Vec<u8> {
        ready_with(&[("Socket-Type", socket_type.as_bytes())])
    }

    /// NULL greeting followed by a READY announcing `socket_type`.
    pub fn handshake(socket_type: &str) -> Vec<u8> {
        let mut v = greeting(b"NULL");
        v.extend_from_slice(&ready(socket_type));
        v
    }

    /// The header of a long (8-byte size) message frame announcing `len` body bytes.
    pub fn long_header(len: u64) -> Vec<u8> {
        let mut h = vec![0x02];
        h.extend_from_slice(&len.to_be_bytes());
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        assert_eq!(unhex("00aAff10"), vec![0x00, 0xaa, 0xff, 0x10]);
        assert_eq!(hex(&[0x00, 0xaa, 0xff, 0x10]), "00aaff10");
    }

    #[test]
    fn fields_split_pairs() {
        let f = fields("a=1;;b=x=y");
        assert_eq!(f.len(), 2);
        assert_eq!(f["a"], "1");
        assert_eq!(f["b"], "x=y");
    }

    #[test]
    fn rng_is_xorshift64() {
        // First outputs of xorshift64 (13, 7, 17) from seed 1.
        let mut r = Rng(1);
        assert_eq!(r.next(), 0x4082_2041);
        assert_eq!(r.next(), 0x1000_4106_0c01_1441);
    }

    #[test]
    fn proc_status_reads_kilobytes() {
        if cfg!(target_os = "linux") {
            assert!(proc_status_kib("VmRSS").is_some_and(|k| k > 0));
        }
        assert_eq!(proc_status_kib("NoSuchField"), None);
    }
}
