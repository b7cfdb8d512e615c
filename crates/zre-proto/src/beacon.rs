//! UDP beacons.
//!
//! ```text
//! version 1 (22 bytes, what zyre and pyre send):
//! | 'Z' 'R' 'E' | 0x01 | UUID (16) | mailbox port (2, big-endian) |
//! version 3 (54 bytes, 43/ZRE with CURVE; zyre sends it only in CURVE mode):
//! | 'Z' 'R' 'E' | 0x03 | UUID (16) | mailbox port (2, big-endian) | CURVE public key (32) |
//! ```
//!
//! Port 0 means the sender is leaving (43/ZRE: "if the port is zero, this indicates the peer is
//! disconnecting from the network").

use bytes::Bytes;
use dafka_wire::Reader;

use crate::Uuid;
use crate::error::BeaconError;

/// The three bytes every beacon starts with: `Z R E`.
pub const BEACON_PROTOCOL: [u8; 3] = [0x5A, 0x52, 0x45];
/// Version byte of the 22-byte beacon.
pub const BEACON_V1: u8 = 0x01;
/// Version byte of the 54-byte CURVE beacon.
pub const BEACON_V3: u8 = 0x03;
/// Size of a version-1 beacon.
pub const BEACON_V1_LEN: usize = 22;
/// Size of a version-3 beacon.
pub const BEACON_V3_LEN: usize = 54;

/// One beacon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Beacon {
    /// The sender.
    pub uuid: Uuid,
    /// Its ROUTER mailbox port; 0 when it is leaving.
    pub port: u16,
    /// The sender's CURVE public key (version-3 beacons only).
    pub curve_key: Option<[u8; 32]>,
}

impl Beacon {
    /// A version-1 beacon.
    pub const fn new(uuid: Uuid, port: u16) -> Self {
        Beacon {
            uuid,
            port,
            curve_key: None,
        }
    }

    /// Decodes one UDP payload. 43/ZRE: "a valid beacon SHALL use a recognized header and a body
    /// of the correct size": a version byte that does not match the size is refused.
    pub fn decode(payload: &[u8]) -> Result<Self, BeaconError> {
        let len = payload.len();
        if len != BEACON_V1_LEN && len != BEACON_V3_LEN {
            return Err(BeaconError::Size { len });
        }
        let mut r = Reader::new(Bytes::copy_from_slice(payload));
        // The size was checked above, so no read below can run short.
        let short = |_| BeaconError::Size { len };
        if r.array::<3>("beacon protocol").map_err(short)? != BEACON_PROTOCOL {
            return Err(BeaconError::Protocol);
        }
        let version = r.u8("beacon version").map_err(short)?;
        match (version, len) {
            (BEACON_V1, BEACON_V1_LEN) | (BEACON_V3, BEACON_V3_LEN) => {}
            _ => return Err(BeaconError::Version { version, len }),
        }
        let uuid = Uuid::from_bytes(r.array("beacon uuid").map_err(short)?);
        let port = r.u16("beacon port").map_err(short)?;
        let curve_key = match version {
            BEACON_V3 => Some(r.array("beacon CURVE key").map_err(short)?),
            _ => None,
        };
        r.finish("beacon").map_err(short)?;
        Ok(Beacon {
            uuid,
            port,
            curve_key,
        })
    }

    /// The wire bytes: 22 without a key, 54 with one.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(BEACON_V3_LEN);
        out.extend_from_slice(&BEACON_PROTOCOL);
        out.push(if self.curve_key.is_some() {
            BEACON_V3
        } else {
            BEACON_V1
        });
        out.extend_from_slice(self.uuid.as_bytes());
        out.extend_from_slice(&self.port.to_be_bytes());
        if let Some(key) = &self.curve_key {
            out.extend_from_slice(key);
        }
        out
    }
}
