//! NaCl boxes (X25519, XSalsa20-Poly1305) from libsodium, the library libzmq's CURVE uses.
//!
//! This is the only module of the crate with `unsafe` code: each call hands libsodium
//! pointers to fixed-size arrays or to one slice with its own length, and libsodium keeps
//! nothing after it returns. libsodium is linked statically (`libsodium-sys-stable` builds the
//! source tarball shipped inside the crate); [`BoxKey`] construction runs `sodium_init` once,
//! which picks the SSE2/AVX2 XSalsa20 and Poly1305 code for this CPU.
//!
//! | Operation | libsodium call | Used for |
//! |---|---|---|
//! | [`public_key`] | `crypto_scalarmult_base` | a key pair's public half |
//! | [`BoxKey::precompute`] | `crypto_box_beforenm` (X25519 + HSalsa20) | `Box[..](A->B)`, once per key pair |
//! | [`BoxKey::secret`] | (the key itself) | `SecretBox[..](K)`, the server's cookie |
//! | [`BoxKey::seal_in_place`] | `crypto_secretbox_detached` (= `crypto_box_detached_afternm`) | every box |
//! | [`BoxKey::open_in_place`] | `crypto_secretbox_open_detached` | every box |
#![allow(unsafe_code)]

use std::sync::Once;

use libsodium_sys as sodium;

/// Poly1305 tag in front of every box (`crypto_box_MACBYTES`).
pub(crate) const TAG: usize = 0x10;

/// Runs `sodium_init` once per process (it chooses the SIMD implementations).
fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        // SAFETY: sodium_init takes no arguments and is safe to call from any thread.
        let rc = unsafe { sodium::sodium_init() };
        // 0 = initialised, 1 = already initialised; -1 only if libsodium cannot set itself up.
        assert!(rc >= 0, "libsodium failed to initialise");
    });
}

/// The X25519 public key of `secret` (clamped as X25519 requires).
pub(crate) fn public_key(secret: &[u8; 32]) -> [u8; 32] {
    init();
    let mut public = [0u8; 32];
    // SAFETY: both pointers are to 32-byte arrays, crypto_scalarmult_BYTES and
    // crypto_scalarmult_SCALARBYTES.
    let rc = unsafe { sodium::crypto_scalarmult_base(public.as_mut_ptr(), secret.as_ptr()) };
    // Fails only when the result is the identity, which a clamped scalar times the base point
    // never is.
    assert_eq!(rc, 0, "X25519 of the base point cannot be the identity");
    public
}

/// A 32-byte XSalsa20-Poly1305 key: precomputed from two X25519 keys, or a secret-box key.
/// Zeroed when dropped.
pub(crate) struct BoxKey([u8; 32]);

impl BoxKey {
    /// `crypto_box_beforenm(public, secret)`: the key of `Box[..](secret's owner -> public's
    /// owner)` and of the boxes back. `None` when `public` is a low-order point (the shared
    /// secret would be all zeros, known to anyone): libsodium refuses it, and so does libzmq.
    pub(crate) fn precompute(public: &[u8; 32], secret: &[u8; 32]) -> Option<BoxKey> {
        init();
        let mut key = BoxKey([0u8; 32]);
        // SAFETY: k, pk and sk point at 32-byte arrays (crypto_box_BEFORENMBYTES,
        // crypto_box_PUBLICKEYBYTES, crypto_box_SECRETKEYBYTES).
        let rc = unsafe {
            sodium::crypto_box_beforenm(key.0.as_mut_ptr(), public.as_ptr(), secret.as_ptr())
        };
        (rc == 0).then_some(key)
    }

    /// A secret-box key used as is.
    pub(crate) fn secret(key: [u8; 32]) -> BoxKey {
        init();
        BoxKey(key)
    }

    /// Encrypts `buf` in place and returns its Poly1305 tag.
    pub(crate) fn seal_in_place(&self, nonce: &[u8; 24], buf: &mut [u8]) -> [u8; TAG] {
        let mut tag = [0u8; TAG];
        let ptr = buf.as_mut_ptr();
        // SAFETY: c and m are the same `buf.len()` bytes (libsodium supports c == m), mac is
        // 16 bytes, n 24 (crypto_secretbox_NONCEBYTES), k 32 (crypto_secretbox_KEYBYTES).
        let rc = unsafe {
            sodium::crypto_secretbox_detached(
                ptr,
                tag.as_mut_ptr(),
                ptr,
                buf.len() as u64,
                nonce.as_ptr(),
                self.0.as_ptr(),
            )
        };
        // Fails only past crypto_secretbox_MESSAGEBYTES_MAX (2^64 - 17): frames are far below.
        assert_eq!(rc, 0, "XSalsa20-Poly1305 encrypts any frame size");
        tag
    }

    /// Checks `tag` over `buf` and, only if it matches, decrypts `buf` in place. `false` (and
    /// `buf` untouched) when the box does not open.
    #[must_use]
    pub(crate) fn open_in_place(&self, nonce: &[u8; 24], tag: &[u8; TAG], buf: &mut [u8]) -> bool {
        let ptr = buf.as_mut_ptr();
        // SAFETY: m and c are the same `buf.len()` bytes (libsodium supports m == c), mac is
        // 16 bytes, n 24, k 32.
        let rc = unsafe {
            sodium::crypto_secretbox_open_detached(
                ptr,
                ptr,
                tag.as_ptr(),
                buf.len() as u64,
                nonce.as_ptr(),
                self.0.as_ptr(),
            )
        };
        rc == 0
    }
}

impl Drop for BoxKey {
    fn drop(&mut self) {
        // SAFETY: 32 writable bytes.
        unsafe { sodium::sodium_memzero(self.0.as_mut_ptr().cast(), self.0.len()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // NaCl's published crypto_box test vector (Bernstein, "Cryptography in NaCl", section 9,
    // the same bytes as libsodium's test/default/box.c): Alice's secret key, Bob's public key,
    // the nonce, the first 32 bytes of the message and of the boxed ciphertext.
    const ALICE_SK: [u8; 32] = [
        0x77, 0x07, 0x6d, 0x0a, 0x73, 0x18, 0xa5, 0x7d, 0x3c, 0x16, 0xc1, 0x72, 0x51, 0xb2, 0x66,
        0x45, 0xdf, 0x4c, 0x2f, 0x87, 0xeb, 0xc0, 0x99, 0x2a, 0xb1, 0x77, 0xfb, 0xa5, 0x1d, 0xb9,
        0x2c, 0x2a,
    ];
    const BOB_PK: [u8; 32] = [
        0xde, 0x9e, 0xdb, 0x7d, 0x7b, 0x7d, 0xc1, 0xb4, 0xd3, 0x5b, 0x61, 0xc2, 0xec, 0xe4, 0x35,
        0x37, 0x3f, 0x83, 0x43, 0xc8, 0x5b, 0x78, 0x67, 0x4d, 0xad, 0xfc, 0x7e, 0x14, 0x6f, 0x88,
        0x2b, 0x4f,
    ];
    const NONCE: [u8; 24] = [
        0x69, 0x69, 0x6e, 0xe9, 0x55, 0xb6, 0x2b, 0x73, 0xcd, 0x62, 0xbd, 0xa8, 0x75, 0xfc, 0x73,
        0xd6, 0x82, 0x19, 0xe0, 0x03, 0x6b, 0x7a, 0x0b, 0x37,
    ];
    const MSG: [u8; 32] = [
        0xbe, 0x07, 0x5f, 0xc5, 0x3c, 0x81, 0xf2, 0xd5, 0xcf, 0x14, 0x13, 0x16, 0xeb, 0xeb, 0x0c,
        0x7b, 0x52, 0x28, 0xc5, 0x2a, 0x4c, 0x62, 0xcb, 0xd4, 0x4b, 0x66, 0x84, 0x9b, 0x64, 0x24,
        0x4f, 0xfc,
    ];
    const TAG_AND_CT: [u8; 32] = [
        0xf3, 0xff, 0xc7, 0x70, 0x3f, 0x94, 0x00, 0xe5, 0x2a, 0x7d, 0xfb, 0x4b, 0x3d, 0x33, 0x05,
        0xd9, 0x8e, 0x99, 0x3b, 0x9f, 0x48, 0x68, 0x12, 0x73, 0xc2, 0x96, 0x50, 0xba, 0x32, 0xfc,
        0x76, 0xce,
    ];

    #[test]
    fn public_key_matches_x25519_vector() {
        // Alice's public key from the same vector (RFC 7748 section 6.1 too).
        let alice_pk: [u8; 32] = [
            0x85, 0x20, 0xf0, 0x09, 0x89, 0x30, 0xa7, 0x54, 0x74, 0x8b, 0x7d, 0xdc, 0xb4, 0x3e,
            0xf7, 0x5a, 0x0d, 0xbf, 0x3a, 0x0d, 0x26, 0x38, 0x1a, 0xf4, 0xeb, 0xa4, 0xa9, 0x8e,
            0xaa, 0x9b, 0x4e, 0x6a,
        ];
        assert_eq!(public_key(&ALICE_SK), alice_pk);
    }

    #[test]
    fn seal_matches_nacl_vector_and_opens() {
        let key = BoxKey::precompute(&BOB_PK, &ALICE_SK).unwrap();
        // The vector's message is 131 bytes; its first 32 produce the first 16 ciphertext bytes
        // after the tag regardless of the rest (a stream cipher), and the tag needs them all,
        // so only check the ciphertext prefix here and the full round trip below.
        let mut buf = MSG;
        let _tag = key.seal_in_place(&NONCE, &mut buf);
        assert_eq!(buf[..16], TAG_AND_CT[16..]);
        let tag = key.seal_in_place(&NONCE, &mut [0u8; 0]);
        let mut empty = [0u8; 0];
        assert!(key.open_in_place(&NONCE, &tag, &mut empty));

        let mut buf = MSG;
        let tag = key.seal_in_place(&NONCE, &mut buf);
        let mut tampered = buf;
        tampered[3] ^= 1;
        let before = tampered;
        assert!(!key.open_in_place(&NONCE, &tag, &mut tampered));
        assert_eq!(
            tampered, before,
            "a box that does not open is left as it was"
        );
        assert!(key.open_in_place(&NONCE, &tag, &mut buf));
        assert_eq!(buf, MSG);
    }

    #[test]
    fn low_order_public_key_is_refused() {
        assert!(BoxKey::precompute(&[0u8; 32], &ALICE_SK).is_none());
        let mut one = [0u8; 32];
        one[0] = 1;
        assert!(BoxKey::precompute(&one, &ALICE_SK).is_none());
    }
}
