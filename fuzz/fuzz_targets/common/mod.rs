//! Pieces the multipart-message targets share.

use bytes::Bytes;

/// Splits fuzz input into frames: each a 2-byte big-endian length and that many bytes (a short
/// last frame takes what is left).
pub fn split_frames(mut rest: &[u8]) -> Vec<Bytes> {
    let mut frames = Vec::new();
    while let [hi, lo, tail @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*hi, *lo])).min(tail.len());
        frames.push(Bytes::copy_from_slice(&tail[..len]));
        rest = &tail[len..];
    }
    frames
}
