//! NaCl boxes (X25519, XSalsa20-Poly1305): libsodium, the library libzmq's CURVE uses, for the
//! key agreement and the XSalsa20 stream, and OpenSSL's Poly1305 for the tags.
//!
//! This is the only module of the crate with `unsafe` code: each call hands libsodium or
//! OpenSSL pointers to fixed-size arrays or to one slice with its own length, and neither keeps
//! anything after it returns. Both are linked statically and built from the source they ship
//! (`libsodium-sys-stable`, and `openssl-sys` with `vendored`, that is `openssl-src`).
//! [`BoxKey`] construction runs `sodium_init` once, which picks the SSE2/AVX2 Salsa20 code for
//! this CPU; OpenSSL picks its Poly1305 code (scalar, AVX, AVX2, AVX-512 IFMA, NEON) the same
//! way. Why two libraries: per 64 KiB box libsodium's Poly1305 (SSE2) takes about 16 us and
//! OpenSSL's (AVX-512 IFMA here) about 5 us, with 12.5 us of Salsa20 either way, so a 64 KiB
//! box goes from about 29 us (`crypto_secretbox_detached`) to about 18 us.
//!
//! | Operation | Library call | Used for |
//! |---|---|---|
//! | [`public_key`] | `crypto_scalarmult_base` | a key pair's public half |
//! | [`BoxKey::precompute`] | `crypto_box_beforenm` (X25519 + HSalsa20) | `Box[..](A->B)`, once per key pair |
//! | [`BoxKey::secret`] | (the key itself) | `SecretBox[..](K)`, the server's cookie |
//! | [`BoxKey::seal_in_place`] | see below | every box |
//! | [`BoxKey::seal_append`] | see below, from the caller's bytes into the output | every CURVE MESSAGE |
//! | [`BoxKey::open_in_place`] | see below, then `crypto_verify_16` on the tags | every box |
//!
//! A box is NaCl's `crypto_secretbox` (= `crypto_box_afternm`), assembled here from its parts
//! exactly as libsodium's `crypto_secretbox_detached` does, and checked bit for bit against it
//! by the tests. With the 32-byte key `k` and the 24-byte nonce `n`:
//!
//! | Step | Call | Bytes |
//! |---|---|---|
//! | subkey | `crypto_core_hsalsa20(n[0x00..0x10], k)` | 32 |
//! | keystream block 0 | `crypto_stream_salsa20(64, n[0x10..0x18], subkey)` | 64: `[0x00..0x20]` one-time Poly1305 key, `[0x20..0x40]` XORed into message bytes `0x00..0x20` |
//! | rest of the stream | `crypto_stream_salsa20_xor_ic(n[0x10..0x18], ic = 1, subkey)` | XORed into message bytes `0x20..` |
//! | tag | OpenSSL `EVP_MAC` `"POLY1305"` keyed with block 0 `[0x00..0x20]` | 16, over the ciphertext |
//!
//! Opening computes the tag over the ciphertext first, compares it in constant time and only
//! then decrypts. The subkey and keystream block 0 are zeroed after use.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::c_int;
use std::ptr::NonNull;
use std::sync::{Once, OnceLock};

use bytes::BytesMut;
use libsodium_sys as sodium;
use openssl_sys as ossl;

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

    /// The HSalsa20 subkey of `nonce` and the first 64-byte Salsa20 block under it (the
    /// one-time Poly1305 key, then the keystream of message bytes 0..32), zeroed when dropped.
    fn first_block(&self, nonce: &[u8; 24]) -> FirstBlock {
        let mut block = FirstBlock {
            subkey: [0u8; 32],
            block0: [0u8; 64],
        };
        // SAFETY: out 32 bytes (crypto_core_hsalsa20_OUTPUTBYTES), in 16
        // (crypto_core_hsalsa20_INPUTBYTES, the nonce's first 16 bytes), k 32; c NULL selects
        // the standard "expand 32-byte k" constant.
        let rc = unsafe {
            sodium::crypto_core_hsalsa20(
                block.subkey.as_mut_ptr(),
                nonce.as_ptr(),
                self.0.as_ptr(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "HSalsa20 takes any key");
        // SAFETY: c is 64 writable bytes and clen says 64, n is the nonce's last 8 bytes
        // (crypto_stream_salsa20_NONCEBYTES), k the 32-byte subkey.
        let rc = unsafe {
            sodium::crypto_stream_salsa20(
                block.block0.as_mut_ptr(),
                block.block0.len() as u64,
                nonce[16..].as_ptr(),
                block.subkey.as_ptr(),
            )
        };
        assert_eq!(rc, 0, "Salsa20 produces 64 bytes of keystream");
        block
    }

    /// XORs the XSalsa20 keystream from byte 32 on into `buf` (encrypts or decrypts).
    fn xor_stream(first: &FirstBlock, nonce: &[u8; 24], buf: &mut [u8]) {
        let head = buf.len().min(32);
        let (head, tail) = buf.split_at_mut(head);
        for (b, k) in head.iter_mut().zip(&first.block0[32..]) {
            *b ^= k;
        }
        let ptr = tail.as_mut_ptr();
        // SAFETY: source and destination are the same `tail.len()` bytes (libsodium supports
        // c == m).
        unsafe { Self::xor_from_block1(first, nonce, ptr, ptr, tail.len()) }
    }

    /// XORs keystream blocks 1.. (message bytes 32..) over `len` bytes from `src` into `dst`.
    ///
    /// # Safety
    /// `src` must be readable and `dst` writable for `len` bytes; they are the same pointer
    /// or do not overlap.
    unsafe fn xor_from_block1(
        first: &FirstBlock,
        nonce: &[u8; 24],
        dst: *mut u8,
        src: *const u8,
        len: usize,
    ) {
        if len == 0 {
            return;
        }
        // SAFETY: c and m as the caller promises; n the nonce's last 8 bytes, k the 32-byte
        // subkey; ic = 1 starts at keystream block 1.
        let rc = unsafe {
            sodium::crypto_stream_salsa20_xor_ic(
                dst,
                src,
                len as u64,
                nonce[16..].as_ptr(),
                1,
                first.subkey.as_ptr(),
            )
        };
        assert_eq!(rc, 0, "Salsa20 encrypts any frame size");
    }

    /// Appends the encryption of `head ++ body` to `out` and returns its Poly1305 tag: the
    /// same bytes and tag as [`seal_in_place`](Self::seal_in_place) over a copy of
    /// `head ++ body`, without that copy (the keystream is XORed from the caller's bytes
    /// straight into `out`, one pass fewer over a large frame). `head` is at most 32 bytes
    /// (the CURVE MESSAGE flags byte).
    pub(crate) fn seal_append(
        &self,
        nonce: &[u8; 24],
        head: &[u8],
        body: &[u8],
        out: &mut BytesMut,
    ) -> [u8; TAG] {
        assert!(head.len() <= 32, "head within keystream block 0");
        let len = head.len() + body.len();
        let first = self.first_block(nonce);
        let at = out.len();
        // Message bytes 0..32 (block 0's second half of keystream): few, so a plain loop.
        let split = len.min(32);
        let mut start = [0u8; 32];
        for ((c, m), k) in start
            .iter_mut()
            .zip(head.iter().chain(body))
            .zip(&first.block0[32..])
        {
            *c = m ^ k;
        }
        out.reserve(len);
        out.extend_from_slice(&start[..split]);
        let rest = len - split;
        let spare = &mut out.spare_capacity_mut()[..rest];
        // SAFETY: `spare` is `rest` writable bytes of `out`'s spare capacity; the source is the
        // last `rest` bytes of `body` (message bytes 32.., since `head` is at most 32 bytes),
        // a caller's slice that cannot overlap `out`'s spare capacity. After the call all
        // `rest` bytes are written, so `out` may grow over them.
        unsafe {
            Self::xor_from_block1(
                &first,
                nonce,
                spare.as_mut_ptr().cast(),
                body[body.len() - rest..].as_ptr(),
                rest,
            );
            out.set_len(at + len);
        }
        poly1305(first.one_time_key(), &out[at..])
    }

    /// Encrypts `buf` in place and returns its Poly1305 tag (`crypto_secretbox_detached`).
    pub(crate) fn seal_in_place(&self, nonce: &[u8; 24], buf: &mut [u8]) -> [u8; TAG] {
        let first = self.first_block(nonce);
        Self::xor_stream(&first, nonce, buf);
        poly1305(first.one_time_key(), buf)
    }

    /// Checks `tag` over `buf` and, only if it matches, decrypts `buf` in place
    /// (`crypto_secretbox_open_detached`). `false` (and `buf` untouched) when the box does not
    /// open.
    #[must_use]
    pub(crate) fn open_in_place(&self, nonce: &[u8; 24], tag: &[u8; TAG], buf: &mut [u8]) -> bool {
        let first = self.first_block(nonce);
        let expected = poly1305(first.one_time_key(), buf);
        // SAFETY: both pointers are to 16-byte arrays (crypto_verify_16_BYTES).
        let equal = unsafe { sodium::crypto_verify_16(expected.as_ptr(), tag.as_ptr()) } == 0;
        if equal {
            Self::xor_stream(&first, nonce, buf);
        }
        equal
    }
}

/// A box's HSalsa20 subkey and first Salsa20 block ([`BoxKey::first_block`]).
struct FirstBlock {
    subkey: [u8; 32],
    block0: [u8; 64],
}

impl FirstBlock {
    fn one_time_key(&self) -> &[u8; 32] {
        self.block0[..32].try_into().expect("32 of 64 bytes")
    }
}

impl Drop for FirstBlock {
    fn drop(&mut self) {
        // SAFETY: 32 and 64 writable bytes.
        unsafe {
            sodium::sodium_memzero(self.subkey.as_mut_ptr().cast(), self.subkey.len());
            sodium::sodium_memzero(self.block0.as_mut_ptr().cast(), self.block0.len());
        }
    }
}

/// OpenSSL's Poly1305, fetched once per process from a library context of our own (so no
/// `openssl.cnf` and no provider another part of the process configured can change it).
struct OpensslPoly1305(NonNull<ossl::EVP_MAC>);

// SAFETY: an EVP_MAC is an immutable, reference-counted algorithm handle; OpenSSL documents
// fetched algorithms as usable from any thread.
unsafe impl Send for OpensslPoly1305 {}
// SAFETY: as above, nothing mutates it after the fetch.
unsafe impl Sync for OpensslPoly1305 {}

// OPENSSL_init_crypto(3), public since OpenSSL 1.1.0; `openssl-sys` binds only the libssl one.
unsafe extern "C" {
    fn OPENSSL_init_crypto(opts: u64, settings: *const ossl::OPENSSL_INIT_SETTINGS) -> c_int;
}
/// `OPENSSL_INIT_NO_ATEXIT` (include/openssl/crypto.h).
const OPENSSL_INIT_NO_ATEXIT: u64 = 0x0008_0000;

fn openssl_poly1305() -> &'static OpensslPoly1305 {
    static MAC: OnceLock<OpensslPoly1305> = OnceLock::new();
    MAC.get_or_init(|| {
        // SAFETY: a documented OpenSSL entry point; NULL settings. Without an atexit handler:
        // OPENSSL_cleanup would tear OpenSSL down under threads still sealing boxes while the
        // process exits (openssl-sys's own init passes the same flag).
        let rc = unsafe { OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, std::ptr::null()) };
        assert_eq!(rc, 1, "OpenSSL initialises");
        // SAFETY: no arguments; returns a new library context or NULL.
        let libctx = unsafe { ossl::OSSL_LIB_CTX_new() };
        assert!(!libctx.is_null(), "OpenSSL cannot create a library context");
        // SAFETY: libctx is live (it is never freed: the MAC below refers to it for the life
        // of the process) and the name is NUL-terminated.
        let provider = unsafe { ossl::OSSL_PROVIDER_load(libctx, c"default".as_ptr()) };
        assert!(
            !provider.is_null(),
            "OpenSSL's built-in default provider loads"
        );
        // SAFETY: libctx is live, the name is NUL-terminated, NULL properties = any.
        let mac = unsafe { ossl::EVP_MAC_fetch(libctx, c"POLY1305".as_ptr(), std::ptr::null()) };
        OpensslPoly1305(NonNull::new(mac).expect("OpenSSL's default provider has POLY1305"))
    })
}

/// One EVP_MAC_CTX per thread, keyed again for every tag (each key is used once).
struct MacCtx(NonNull<ossl::EVP_MAC_CTX>);

impl Drop for MacCtx {
    fn drop(&mut self) {
        // SAFETY: the context was made by EVP_MAC_CTX_new and is freed once, here.
        unsafe { ossl::EVP_MAC_CTX_free(self.0.as_ptr()) }
    }
}

thread_local! {
    static MAC_CTX: RefCell<Option<MacCtx>> = const { RefCell::new(None) };
}

/// The Poly1305 tag of `msg` under the one-time key `key`.
fn poly1305(key: &[u8; 32], msg: &[u8]) -> [u8; TAG] {
    MAC_CTX.with_borrow_mut(|slot| {
        let ctx = slot.get_or_insert_with(|| {
            // SAFETY: the MAC is a live fetched algorithm.
            let ctx = unsafe { ossl::EVP_MAC_CTX_new(openssl_poly1305().0.as_ptr()) };
            MacCtx(NonNull::new(ctx).expect("OpenSSL allocates a MAC context"))
        });
        let ctx = ctx.0.as_ptr();
        let mut tag = [0u8; TAG];
        let mut written = 0usize;
        // SAFETY: ctx is this thread's live context; the key is 32 bytes and keylen says so;
        // msg is one slice with its length; out is 16 writable bytes and outsize says so.
        // EVP_MAC_init with a key starts a new computation whatever the context did before,
        // and Poly1305's final step wipes the state. Each returns 1 on success; they fail only
        // if OpenSSL cannot allocate.
        unsafe {
            let ok = ossl::EVP_MAC_init(ctx, key.as_ptr(), key.len(), std::ptr::null()) == 1
                && ossl::EVP_MAC_update(ctx, msg.as_ptr(), msg.len()) == 1
                && ossl::EVP_MAC_final(ctx, tag.as_mut_ptr(), &mut written, tag.len()) == 1;
            assert!(ok && written == TAG, "OpenSSL Poly1305 failed");
        }
        tag
    })
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

    /// libsodium's `crypto_secretbox_detached`: the reference the assembled box must match.
    fn sodium_seal(key: &[u8; 32], nonce: &[u8; 24], buf: &mut [u8]) -> [u8; TAG] {
        let mut tag = [0u8; TAG];
        let ptr = buf.as_mut_ptr();
        // SAFETY: c == m, same length; mac 16, n 24, k 32 bytes.
        let rc = unsafe {
            sodium::crypto_secretbox_detached(
                ptr,
                tag.as_mut_ptr(),
                ptr,
                buf.len() as u64,
                nonce.as_ptr(),
                key.as_ptr(),
            )
        };
        assert_eq!(rc, 0);
        tag
    }

    /// libsodium's `crypto_secretbox_open_detached`.
    fn sodium_open(key: &[u8; 32], nonce: &[u8; 24], tag: &[u8; TAG], buf: &mut [u8]) -> bool {
        let ptr = buf.as_mut_ptr();
        // SAFETY: m == c, same length; mac 16, n 24, k 32 bytes.
        unsafe {
            sodium::crypto_secretbox_open_detached(
                ptr,
                ptr,
                tag.as_ptr(),
                buf.len() as u64,
                nonce.as_ptr(),
                key.as_ptr(),
            ) == 0
        }
    }

    /// Checks one message against libsodium both ways, and that a flipped bit of the tag or of
    /// the ciphertext is refused with the buffer left as it was.
    fn check_against_sodium(key: [u8; 32], nonce: [u8; 24], msg: &[u8], flip: usize) {
        init();
        let ours = BoxKey::secret(key);
        let mut ct = msg.to_vec();
        let tag = ours.seal_in_place(&nonce, &mut ct);
        let mut reference = msg.to_vec();
        let reference_tag = sodium_seal(&key, &nonce, &mut reference);
        assert_eq!(tag, reference_tag, "tag, {} bytes", msg.len());
        assert!(ct == reference, "ciphertext, {} bytes", msg.len());

        let mut opened = ct.clone();
        assert!(sodium_open(&key, &nonce, &tag, &mut opened));
        assert!(opened == msg, "libsodium opens our box");
        let mut opened = ct.clone();
        assert!(ours.open_in_place(&nonce, &tag, &mut opened));
        assert!(opened == msg, "we open libsodium's box");

        let mut bad_tag = tag;
        bad_tag[flip % TAG] ^= 1 << (flip % 8);
        let mut untouched = ct.clone();
        assert!(!ours.open_in_place(&nonce, &bad_tag, &mut untouched));
        assert!(untouched == ct, "a refused box is left as it was");
        if !ct.is_empty() {
            let mut tampered = ct.clone();
            tampered[flip % ct.len()] ^= 1 << (flip % 8);
            let before = tampered.clone();
            assert!(!ours.open_in_place(&nonce, &tag, &mut tampered));
            assert!(tampered == before, "a refused box is left as it was");
        }
        let mut other_nonce = nonce;
        other_nonce[flip % 24] ^= 1;
        let mut wrong = ct.clone();
        assert!(!ours.open_in_place(&other_nonce, &tag, &mut wrong));

        // Appended from a head and a body (every split a CURVE MESSAGE could make, and more),
        // after bytes already in the output, which stay as they were.
        for head_len in [0, 1, 2, 31, 32] {
            let head_len = head_len.min(msg.len());
            let (head, body) = msg.split_at(head_len);
            let mut out = bytes::BytesMut::from(&b"already"[..]);
            let appended_tag = ours.seal_append(&nonce, head, body, &mut out);
            assert_eq!(&out[..7], b"already");
            assert!(
                out[7..] == reference[..],
                "appended, head {head_len}, {} bytes",
                msg.len()
            );
            assert_eq!(appended_tag, reference_tag, "appended tag, head {head_len}");
        }
    }

    #[test]
    fn box_matches_libsodium_at_block_boundaries() {
        // Around the first block's 32 message bytes, Salsa20's 64-byte blocks and Poly1305's
        // 16-byte blocks, and the sizes OpenSSL's vector code switches at.
        for len in [
            0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 95, 96, 97, 127, 128, 129, 255, 256, 257,
            1023, 1024, 4096, 16383, 65536, 65567, 70000,
        ] {
            let msg: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let mut key = [0u8; 32];
            key[0] = len as u8;
            key[31] = 0x80;
            let mut nonce = [0x24u8; 24];
            nonce[23] = (len >> 8) as u8;
            check_against_sodium(key, nonce, &msg, len);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        #[test]
        fn box_matches_libsodium(
            key in proptest::array::uniform32(proptest::prelude::any::<u8>()),
            nonce in proptest::array::uniform24(proptest::prelude::any::<u8>()),
            msg in proptest::prop_oneof![
                proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
                proptest::collection::vec(proptest::prelude::any::<u8>(), 0..70000),
            ],
            flip in proptest::prelude::any::<usize>(),
        ) {
            check_against_sodium(key, nonce, &msg, flip);
        }
    }

    /// An `openssl.cnf` (`OPENSSL_CONF`) that configures providers, here only one that does not
    /// exist, leaves OpenSSL's default library context without Poly1305; boxes must not care,
    /// since the MAC comes from a library context of our own. Run in a child process, since
    /// OpenSSL initialises once per process.
    #[test]
    fn openssl_cnf_cannot_take_poly1305_away() {
        const CHILD: &str = "DAFKA_NACL_CONFIG_CHILD";
        if std::env::var_os(CHILD).is_some() {
            check_against_sodium([3; 32], [4; 24], &[5; 1000], 7);
            return;
        }
        let conf = std::env::temp_dir().join(format!("dafka-nacl-{}.cnf", std::process::id()));
        std::fs::write(
            &conf,
            "openssl_conf = openssl_init\nconfig_diagnostics = 1\n\n[openssl_init]\n\
             providers = provider_sect\n\n[provider_sect]\nnowhere = nowhere_sect\n\n\
             [nowhere_sect]\nactivate = 1\n",
        )
        .unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "nacl::tests::openssl_cnf_cannot_take_poly1305_away",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .env("OPENSSL_CONF", &conf)
            .output()
            .unwrap();
        std::fs::remove_file(&conf).unwrap();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "child: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn low_order_public_key_is_refused() {
        assert!(BoxKey::precompute(&[0u8; 32], &ALICE_SK).is_none());
        let mut one = [0u8; 32];
        one[0] = 1;
        assert!(BoxKey::precompute(&one, &ALICE_SK).is_none());
    }
}
