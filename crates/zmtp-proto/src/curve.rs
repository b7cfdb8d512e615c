//! CURVE (25/ZMTP-CURVE over 26/CurveZMQ): X25519 key agreement and XSalsa20-Poly1305 boxes
//! (NaCl `crypto_box`, from libsodium and OpenSSL's Poly1305 through `crate::nacl`), as libzmq
//! speaks it.
//!
//! Keys: the client knows the server's long-term public key `S`; each side also has a
//! long-term key pair (`C`/`c`, `S`/`s`) and makes a short-term one per connection (`C'`/`c'`,
//! `S'`/`s'`). `Box[x](A->B)` is `crypto_box` of `x` from secret `a` to public `B`: a 16-byte
//! Poly1305 tag, then the ciphertext (as long as `x`).
//!
//! ```text
//! C: HELLO    C', Box[64 zeros](C'->S)
//! S: WELCOME  Box[S' + cookie](S->C')          cookie = nonce + SecretBox[C' + s'](K)
//! C: INITIATE cookie, Box[C + vouch + metadata](C'->S')   vouch = Box[C' + S](C->S')
//! S: READY    Box[metadata](S'->C')                        (or ERROR "400")
//! both: MESSAGE Box[flags + frame](C'->S' or S'->C'), one per frame or command
//! ```
//!
//! Command bodies (after the frame header; `nonce8` is a big-endian counter):
//!
//! | Command    | Size | Layout |
//! |------------|-----:|--------|
//! | `HELLO`    | 200  | `05 "HELLO"`, version `01 00`, 72 zero bytes, `C'` (32), nonce8, box (80) with nonce `"CurveZMQHELLO---"` + nonce8 |
//! | `WELCOME`  | 168  | `07 "WELCOME"`, nonce16, box (144) with nonce `"WELCOME-"` + nonce16 |
//! | `INITIATE` | 257+ | `08 "INITIATE"`, cookie (96), nonce8, box (128 + metadata + 16) with nonce `"CurveZMQINITIATE"` + nonce8 |
//! | `READY`    | 30+  | `05 "READY"`, nonce8, box (metadata + 16) with nonce `"CurveZMQREADY---"` + nonce8 |
//! | `MESSAGE`  | 33+  | `07 "MESSAGE"`, nonce8, box (1 + frame + 16) with nonce `"CurveZMQMESSAGEC"` (client) or `"...S"` (server) + nonce8 |
//!
//! Cookie: nonce16, then `SecretBox[C' + s'](K)` (80) with nonce `"COOKIE--"` + nonce16; `K`
//! is a random key of this connection. Vouch (inside INITIATE): nonce16, then
//! `Box[C' + S](C->S')` (80) with nonce `"VOUCH---"` + nonce16.
//!
//! MESSAGE's first plaintext byte holds the flags `0x01` MORE and `0x02` COMMAND (NOTES.md:
//! libzmq's bits, not ZMTP's frame flags); each frame, and each command after the handshake
//! (PING, SUBSCRIBE, ...), is its own MESSAGE. libzmq sends the MESSAGE as a plain data frame
//! (flags `0x00`); either frame kind is accepted. Short nonces start at 1 on each side (the
//! client's HELLO is 1, its INITIATE 2; the server's READY is 1), continue through MESSAGEs,
//! and must strictly increase: anything else is a replay or a reordering and closes the
//! connection.

use bytes::{Buf, Bytes, BytesMut};

use crate::auth::{AuthRequest, Authenticator, Credentials, authenticate};
use crate::command::Metadata;
use crate::error::{Error, MalformedError, PeerError};
use crate::frame::put_header;
use crate::mechanism::{
    ClientStep, HELLO, INITIATE, Mechanism, READY, ServerStep, WELCOME, parse_command, put_command,
    refuse, unexpected,
};
use crate::nacl::{BoxKey, TAG};

const MESSAGE: &[u8] = b"MESSAGE";
/// `07 "MESSAGE"` + nonce8 + tag + flags: what a MESSAGE adds to a frame.
pub const CURVE_MESSAGE_OVERHEAD: usize = 8 + 8 + TAG + 1;
/// MESSAGE plaintext flag: more frames follow.
pub const CURVE_FLAG_MORE: u8 = 0x01;
/// MESSAGE plaintext flag: the frame is a command.
pub const CURVE_FLAG_COMMAND: u8 = 0x02;

const HELLO_NONCE: &[u8; 16] = b"CurveZMQHELLO---";
const WELCOME_NONCE: &[u8; 8] = b"WELCOME-";
const COOKIE_NONCE: &[u8; 8] = b"COOKIE--";
const VOUCH_NONCE: &[u8; 8] = b"VOUCH---";
const INITIATE_NONCE: &[u8; 16] = b"CurveZMQINITIATE";
const READY_NONCE: &[u8; 16] = b"CurveZMQREADY---";
const MESSAGE_NONCE_CLIENT: &[u8; 16] = b"CurveZMQMESSAGEC";
const MESSAGE_NONCE_SERVER: &[u8; 16] = b"CurveZMQMESSAGES";

/// A long-term CURVE key pair. The secret half never leaves this value except through
/// [`CurveKeyPair::secret`]; `Debug` shows only the public half.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CurveKeyPair {
    public: [u8; 32],
    secret: [u8; 32],
}

impl CurveKeyPair {
    /// A fresh key pair from the operating system's random source.
    pub fn generate() -> Self {
        CurveKeyPair::from_secret(random())
    }

    /// The key pair of a secret key (its public key is derived).
    pub fn from_secret(secret: [u8; 32]) -> Self {
        let public = crate::nacl::public_key(&secret);
        CurveKeyPair { public, secret }
    }

    /// The public key (give it to peers; Z85 with [`crate::z85_encode`]).
    pub fn public(&self) -> &[u8; 32] {
        &self.public
    }

    /// The secret key (keep it).
    pub fn secret(&self) -> &[u8; 32] {
        &self.secret
    }
}

impl std::fmt::Debug for CurveKeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CurveKeyPair")
            .field("public", &crate::z85::encode(&self.public))
            .finish_non_exhaustive()
    }
}

/// `N` bytes from the operating system's random source.
fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // The OS source fails only on a misconfigured system (no /dev/urandom, no getrandom(2)):
    // a key or nonce must never be made without it.
    getrandom::fill(&mut b).expect("the operating system's random source failed");
    b
}

/// The key of `Box[..](secret's owner -> public's owner)`. A low-order `public` (no shared
/// secret) is refused as a box of `what` that does not open.
fn salsa_box(public: &[u8; 32], secret: &[u8; 32], what: &'static str) -> Result<BoxKey, Error> {
    BoxKey::precompute(public, secret).ok_or_else(|| PeerError::CurveBox { what }.into())
}

fn nonce24(prefix: &[u8], suffix: &[u8]) -> [u8; 24] {
    let mut n = [0u8; 24];
    n[..prefix.len()].copy_from_slice(prefix);
    n[prefix.len()..].copy_from_slice(suffix);
    n
}

/// Appends `Box[plaintext]`: the tag, then the ciphertext.
fn seal(key: &BoxKey, nonce: &[u8; 24], plaintext: &[u8], out: &mut BytesMut) {
    let at = out.len();
    out.extend_from_slice(&[0u8; TAG]);
    out.extend_from_slice(plaintext);
    seal_in_place(key, nonce, &mut out[at..]);
}

/// Encrypts `buf[TAG..]` in place and writes the tag into `buf[..TAG]`.
fn seal_in_place(key: &BoxKey, nonce: &[u8; 24], buf: &mut [u8]) {
    let (tag_at, body) = buf.split_at_mut(TAG);
    tag_at.copy_from_slice(&key.seal_in_place(nonce, body));
}

/// Opens `Box[x]` (tag then ciphertext) into `x`.
fn open(
    key: &BoxKey,
    nonce: &[u8; 24],
    boxed: &[u8],
    what: &'static str,
) -> Result<Vec<u8>, Error> {
    let Some((tag, ct)) = boxed.split_first_chunk::<TAG>() else {
        return Err(PeerError::CurveBox { what }.into());
    };
    let mut plain = ct.to_vec();
    if !key.open_in_place(nonce, tag, &mut plain) {
        return Err(PeerError::CurveBox { what }.into());
    }
    Ok(plain)
}

/// Checks a handshake command's data size before reading it.
fn check_size(
    command: &'static str,
    data: usize,
    name_len: usize,
    ok: bool,
    expected: &'static str,
) -> Result<(), Error> {
    if ok {
        Ok(())
    } else {
        Err(MalformedError::CommandSize {
            command,
            size: 1 + name_len + data,
            expected,
        }
        .into())
    }
}

/// A box's short nonce must be above the last one accepted from the peer.
fn check_nonce(got: u64, last: u64) -> Result<(), Error> {
    if got > last {
        Ok(())
    } else {
        Err(PeerError::CurveNonce { got, last }.into())
    }
}

/// Boxes and unboxes traffic once a CURVE handshake is complete.
pub(crate) struct Cipher {
    key: BoxKey,
    send_prefix: &'static [u8; 16],
    recv_prefix: &'static [u8; 16],
    next_nonce: u64,
    peer_nonce: u64,
}

impl Cipher {
    /// Appends a MESSAGE frame boxing `body` with `flags` ([`CURVE_FLAG_MORE`],
    /// [`CURVE_FLAG_COMMAND`]).
    pub(crate) fn seal_frame(&mut self, flags: u8, body: &[u8], out: &mut BytesMut) {
        let nonce = self.next_nonce;
        self.next_nonce += 1;
        let len = CURVE_MESSAGE_OVERHEAD + body.len();
        out.reserve(9 + len);
        // libzmq sends MESSAGE as a data frame without MORE.
        put_header(out, 0x00, len);
        out.extend_from_slice(&[7]);
        out.extend_from_slice(MESSAGE);
        out.extend_from_slice(&nonce.to_be_bytes());
        let at = out.len();
        out.extend_from_slice(&[0u8; TAG]);
        // Encrypted from `body` straight into `out`: a 64 KiB frame is not copied first.
        let tag = self.key.seal_append(
            &nonce24(self.send_prefix, &nonce.to_be_bytes()),
            &[flags],
            body,
            out,
        );
        out[at..at + TAG].copy_from_slice(&tag);
    }

    /// Opens a MESSAGE frame body, in place, into its flags and the frame it carries.
    ///
    /// | Offset | Size | Field |
    /// |---:|---:|---|
    /// | 0 | 8 | `07 "MESSAGE"` |
    /// | 8 | 8 | nonce (big-endian) |
    /// | 16 | 16 | Poly1305 tag |
    /// | 32 | 1 | flags (boxed) |
    /// | 33 | rest | frame (boxed) |
    pub(crate) fn open_frame(&mut self, mut body: BytesMut) -> Result<(u8, Bytes), Error> {
        if body.get(..8) != Some(b"\x07MESSAGE") {
            return Err(MalformedError::NotCurveMessage.into());
        }
        if body.len() < CURVE_MESSAGE_OVERHEAD {
            return Err(MalformedError::CommandSize {
                command: "MESSAGE",
                size: body.len(),
                expected: "at least 33 bytes",
            }
            .into());
        }
        let mut nonce8 = [0u8; 8];
        nonce8.copy_from_slice(&body[8..16]);
        let nonce = u64::from_be_bytes(nonce8);
        // "The nonce MUST be strictly greater than the nonce of the previous MESSAGE": a
        // replayed or reordered box closes the connection before it is even opened.
        check_nonce(nonce, self.peer_nonce)?;
        let mut tag = [0u8; TAG];
        tag.copy_from_slice(&body[16..32]);
        if !self
            .key
            .open_in_place(&nonce24(self.recv_prefix, &nonce8), &tag, &mut body[32..])
        {
            return Err(PeerError::CurveBox { what: "MESSAGE" }.into());
        }
        // Only a box that opened moves the nonce on (a forged one must not).
        self.peer_nonce = nonce;
        body.advance(32);
        let mut frame = body.freeze();
        let flags = frame.split_to(1)[0];
        if flags & !(CURVE_FLAG_MORE | CURVE_FLAG_COMMAND) != 0 {
            return Err(MalformedError::CurveFlags(flags).into());
        }
        Ok((flags, frame))
    }
}

/// The CURVE client.
pub(crate) struct CurveClient {
    keypair: CurveKeyPair,
    server_key: [u8; 32],
    /// Our short-term key pair `C'`/`c'`.
    short: CurveKeyPair,
    /// `Box(S, c')`: the HELLO box and the WELCOME box (computed once for both).
    hello: BoxKey,
    /// `Box(S', c')` once WELCOME arrived.
    session: Option<BoxKey>,
    next_nonce: u64,
    peer_nonce: u64,
    state: ClientStep,
    local: Metadata,
}

/// What an INITIATE carries. An honest client fills it from its handshake; tests fill it
/// with hostile values (a vouch sealed with another key, naming another `C'` or `S`, a cookie
/// from another connection).
struct Initiate<'a> {
    /// The cookie from WELCOME, echoed (96 bytes).
    cookie: &'a [u8],
    nonce: u64,
    /// `Box(S', c')`: seals the INITIATE box.
    session: &'a BoxKey,
    /// `C`, the long-term key the client presents.
    client_key: &'a [u8; 32],
    /// `Box(S', c)`: seals the vouch.
    vouch_key: &'a BoxKey,
    /// The vouch's plaintext, `C' + S`.
    vouch: &'a [u8; 64],
    metadata: &'a Metadata,
}

impl Initiate<'_> {
    /// Appends the INITIATE command frame: cookie, nonce8, `Box[C + vouch + metadata](C'->S')`
    /// with vouch = nonce16 + `Box[C' + S](C->S')`.
    fn put(&self, out: &mut BytesMut) {
        let vouch_nonce: [u8; 16] = random();
        let mut plain = BytesMut::with_capacity(32 + 96 + self.metadata.encoded_len());
        plain.extend_from_slice(self.client_key);
        plain.extend_from_slice(&vouch_nonce);
        seal(
            self.vouch_key,
            &nonce24(VOUCH_NONCE, &vouch_nonce),
            self.vouch,
            &mut plain,
        );
        self.metadata.encode(&mut plain);
        let nonce = self.nonce.to_be_bytes();
        let mut boxed = BytesMut::with_capacity(TAG + plain.len());
        seal(
            self.session,
            &nonce24(INITIATE_NONCE, &nonce),
            &plain,
            &mut boxed,
        );
        put_command(out, INITIATE, &[self.cookie, &nonce, &boxed]);
    }
}

impl CurveClient {
    /// Call only with a `server_key` that [`crate::MechanismConfig::validate`] accepted.
    pub(crate) fn new(keypair: CurveKeyPair, server_key: [u8; 32]) -> Self {
        let short = CurveKeyPair::generate();
        // A fresh c' times S is the identity only when S has low order, which
        // MechanismConfig::validate refuses before any connection is made.
        let hello = BoxKey::precompute(&server_key, short.secret())
            .expect("MechanismConfig::validate refuses a low-order CURVE server key");
        CurveClient {
            keypair,
            server_key,
            hello,
            short,
            session: None,
            next_nonce: 1,
            peer_nonce: 0,
            state: ClientStep::Welcome,
            local: Metadata::new(),
        }
    }

    fn take_nonce(&mut self) -> u64 {
        let n = self.next_nonce;
        self.next_nonce += 1;
        n
    }

    /// Opens WELCOME `Box[S' + cookie](S->C')`: the server's short-term key `S'` and the
    /// cookie (96 bytes) to echo in INITIATE.
    fn open_welcome(&self, mut r: dafka_wire::Reader) -> Result<([u8; 32], Vec<u8>), Error> {
        check_size(
            "WELCOME",
            r.remaining(),
            7,
            r.remaining() == 160,
            "168 bytes",
        )?;
        let nonce16: [u8; 16] = r.array("WELCOME nonce").map_err(MalformedError::from)?;
        let boxed = r.rest();
        // Opens only if the server holds the secret key of the public key we were given.
        let mut plain = open(
            &self.hello,
            &nonce24(WELCOME_NONCE, &nonce16),
            &boxed,
            "WELCOME",
        )?;
        let cookie = plain.split_off(32);
        let mut server_short = [0u8; 32];
        server_short.copy_from_slice(&plain);
        Ok((server_short, cookie))
    }

    fn on_welcome(&mut self, r: dafka_wire::Reader, out: &mut BytesMut) -> Result<(), Error> {
        let (server_short, cookie) = self.open_welcome(r)?;
        let session = salsa_box(&server_short, self.short.secret(), "WELCOME")?;
        let mut vouch = [0u8; 64];
        vouch[..32].copy_from_slice(self.short.public());
        vouch[32..].copy_from_slice(&self.server_key);
        let initiate = Initiate {
            cookie: &cookie,
            nonce: self.take_nonce(),
            session: &session,
            client_key: self.keypair.public(),
            vouch_key: &salsa_box(&server_short, self.keypair.secret(), "WELCOME")?,
            vouch: &vouch,
            metadata: &self.local,
        };
        initiate.put(out);
        self.session = Some(session);
        self.state = ClientStep::Ready;
        Ok(())
    }

    fn on_ready(&mut self, mut r: dafka_wire::Reader) -> Result<Metadata, Error> {
        check_size(
            "READY",
            r.remaining(),
            5,
            r.remaining() >= 24,
            "at least 30 bytes",
        )?;
        let nonce = r.u64("READY nonce").map_err(MalformedError::from)?;
        check_nonce(nonce, self.peer_nonce)?;
        let boxed = r.rest();
        let Some(session) = &self.session else {
            return Err(unexpected("WELCOME", READY));
        };
        let plain = open(
            session,
            &nonce24(READY_NONCE, &nonce.to_be_bytes()),
            &boxed,
            "READY",
        )?;
        self.peer_nonce = nonce;
        self.state = ClientStep::Done;
        Ok(Metadata::decode(Bytes::from(plain))?)
    }
}

impl Mechanism for CurveClient {
    fn name(&self) -> &'static str {
        "CURVE"
    }

    fn as_server(&self) -> bool {
        false
    }

    fn expecting(&self) -> &'static str {
        self.state.expecting()
    }

    fn start(&mut self, local: &Metadata, out: &mut BytesMut) {
        self.local = local.clone();
        let nonce = self.take_nonce().to_be_bytes();
        let mut boxed = BytesMut::with_capacity(80);
        // "The signature box SHALL contain 64 zero bytes": proof that we know S, sent padded
        // so that HELLO is as large as WELCOME (no amplification).
        seal(
            &self.hello,
            &nonce24(HELLO_NONCE, &nonce),
            &[0u8; 64],
            &mut boxed,
        );
        put_command(
            out,
            HELLO,
            &[
                &[0x01, 0x00],
                &[0u8; 72],
                self.short.public(),
                &nonce,
                &boxed,
            ],
        );
    }

    fn on_command(&mut self, body: Bytes, out: &mut BytesMut) -> Result<Option<Metadata>, Error> {
        let (name, r) = parse_command(body)?;
        match (self.state, &name[..]) {
            (ClientStep::Welcome, WELCOME) => {
                self.on_welcome(r, out)?;
                Ok(None)
            }
            (ClientStep::Ready, READY) => self.on_ready(r).map(Some),
            _ => Err(unexpected(self.expecting(), &name)),
        }
    }

    fn take_cipher(&mut self) -> Option<Cipher> {
        let key = self.session.take()?;
        Some(Cipher {
            key,
            send_prefix: MESSAGE_NONCE_CLIENT,
            recv_prefix: MESSAGE_NONCE_SERVER,
            next_nonce: self.next_nonce,
            peer_nonce: self.peer_nonce,
        })
    }
}

/// What the server keeps between HELLO and INITIATE.
struct ServerSession {
    client_short: [u8; 32],
    short: CurveKeyPair,
    cookie_key: [u8; 32],
}

/// The CURVE server.
pub(crate) struct CurveServer {
    keypair: CurveKeyPair,
    authenticator: Authenticator,
    address: String,
    session: Option<ServerSession>,
    key: Option<BoxKey>,
    next_nonce: u64,
    peer_nonce: u64,
    state: ServerStep,
    local: Metadata,
    /// The client's long-term key, once its INITIATE was vouched for and allowed.
    client_key: Option<[u8; 32]>,
}

impl CurveServer {
    pub(crate) fn new(
        keypair: CurveKeyPair,
        authenticator: Authenticator,
        address: String,
    ) -> Self {
        CurveServer {
            keypair,
            authenticator,
            address,
            session: None,
            key: None,
            next_nonce: 1,
            peer_nonce: 0,
            state: ServerStep::Hello,
            local: Metadata::new(),
            client_key: None,
        }
    }

    fn on_hello(&mut self, mut r: dafka_wire::Reader, out: &mut BytesMut) -> Result<(), Error> {
        check_size("HELLO", r.remaining(), 5, r.remaining() == 194, "200 bytes")?;
        let [major, minor]: [u8; 2] = r.array("HELLO version").map_err(MalformedError::from)?;
        // "version = %x1 %x0"
        if (major, minor) != (0x01, 0x00) {
            return Err(MalformedError::CurveVersion { major, minor }.into());
        }
        let _padding = r.take(72, "HELLO padding").map_err(MalformedError::from)?;
        let client_short: [u8; 32] = r.array("HELLO C'").map_err(MalformedError::from)?;
        let nonce = r.u64("HELLO nonce").map_err(MalformedError::from)?;
        let boxed = r.rest();
        // Box(C', s) opens the HELLO and seals the WELCOME: one X25519 for both.
        let long_box = salsa_box(&client_short, self.keypair.secret(), "HELLO")?;
        let plain = open(
            &long_box,
            &nonce24(HELLO_NONCE, &nonce.to_be_bytes()),
            &boxed,
            "HELLO",
        )?;
        if plain.iter().any(|&b| b != 0) {
            return Err(PeerError::CurveMismatch("HELLO signature").into());
        }
        self.peer_nonce = nonce;

        let short = CurveKeyPair::generate();
        let cookie_key: [u8; 32] = random();
        // cookie = nonce16 + SecretBox[C' + s'](K)
        let cookie_nonce: [u8; 16] = random();
        let mut cookie_plain = [0u8; 64];
        cookie_plain[..32].copy_from_slice(&client_short);
        cookie_plain[32..].copy_from_slice(short.secret());
        let mut welcome_plain = BytesMut::with_capacity(128 + TAG);
        welcome_plain.extend_from_slice(short.public());
        welcome_plain.extend_from_slice(&cookie_nonce);
        seal(
            &BoxKey::secret(cookie_key),
            &nonce24(COOKIE_NONCE, &cookie_nonce),
            &cookie_plain,
            &mut welcome_plain,
        );
        let welcome_nonce: [u8; 16] = random();
        let mut boxed = BytesMut::with_capacity(144);
        seal(
            &long_box,
            &nonce24(WELCOME_NONCE, &welcome_nonce),
            &welcome_plain,
            &mut boxed,
        );
        put_command(out, WELCOME, &[&welcome_nonce, &boxed]);
        self.session = Some(ServerSession {
            client_short,
            short,
            cookie_key,
        });
        self.state = ServerStep::Initiate;
        Ok(())
    }

    fn on_initiate(
        &mut self,
        mut r: dafka_wire::Reader,
        out: &mut BytesMut,
    ) -> Result<Metadata, Error> {
        check_size(
            "INITIATE",
            r.remaining(),
            8,
            r.remaining() >= 248,
            "at least 257 bytes",
        )?;
        let Some(session) = self.session.take() else {
            return Err(unexpected("HELLO", INITIATE));
        };
        let cookie_nonce: [u8; 16] = r.array("cookie nonce").map_err(MalformedError::from)?;
        let cookie_box = r.take(80, "cookie box").map_err(MalformedError::from)?;
        let cookie = open(
            &BoxKey::secret(session.cookie_key),
            &nonce24(COOKIE_NONCE, &cookie_nonce),
            &cookie_box,
            "cookie",
        )?;
        if cookie[..32] != session.client_short || cookie[32..] != session.short.secret()[..] {
            return Err(PeerError::CurveMismatch("cookie").into());
        }
        let nonce = r.u64("INITIATE nonce").map_err(MalformedError::from)?;
        check_nonce(nonce, self.peer_nonce)?;
        let key = salsa_box(&session.client_short, session.short.secret(), "INITIATE")?;
        let plain = open(
            &key,
            &nonce24(INITIATE_NONCE, &nonce.to_be_bytes()),
            &r.rest(),
            "INITIATE",
        )?;
        self.peer_nonce = nonce;
        let mut p = dafka_wire::Reader::new(Bytes::from(plain));
        let client_key: [u8; 32] = p.array("INITIATE C").map_err(MalformedError::from)?;
        let vouch_nonce: [u8; 16] = p.array("vouch nonce").map_err(MalformedError::from)?;
        let vouch_box = p.take(80, "vouch box").map_err(MalformedError::from)?;
        // The vouch proves that the holder of C made C' for this server: it opens only with
        // c, and names this C' and this S.
        let vouch = open(
            &salsa_box(&client_key, session.short.secret(), "vouch")?,
            &nonce24(VOUCH_NONCE, &vouch_nonce),
            &vouch_box,
            "vouch",
        )?;
        if vouch[..32] != session.client_short || vouch[32..] != self.keypair.public()[..] {
            return Err(PeerError::CurveMismatch("vouch").into());
        }
        let peer = Metadata::decode(p.rest())?;
        let req = AuthRequest {
            address: &self.address,
            credentials: Credentials::Curve {
                public_key: &client_key,
            },
        };
        if let Err(refusal) = authenticate(&self.authenticator, "CURVE", &req) {
            return Err(refuse("CURVE", refusal, out));
        }
        let mut meta = BytesMut::with_capacity(self.local.encoded_len());
        self.local.encode(&mut meta);
        let ours = self.next_nonce;
        self.next_nonce += 1;
        let mut boxed = BytesMut::with_capacity(TAG + meta.len());
        seal(
            &key,
            &nonce24(READY_NONCE, &ours.to_be_bytes()),
            &meta,
            &mut boxed,
        );
        put_command(out, READY, &[&ours.to_be_bytes(), &boxed]);
        self.key = Some(key);
        self.client_key = Some(client_key);
        self.state = ServerStep::Done;
        Ok(peer)
    }
}

impl Mechanism for CurveServer {
    fn name(&self) -> &'static str {
        "CURVE"
    }

    fn as_server(&self) -> bool {
        true
    }

    fn expecting(&self) -> &'static str {
        self.state.expecting()
    }

    fn start(&mut self, local: &Metadata, _out: &mut BytesMut) {
        // The server speaks only when the client's HELLO has arrived.
        self.local = local.clone();
    }

    fn on_command(&mut self, body: Bytes, out: &mut BytesMut) -> Result<Option<Metadata>, Error> {
        let (name, r) = parse_command(body)?;
        match (self.state, &name[..]) {
            (ServerStep::Hello, HELLO) => {
                self.on_hello(r, out)?;
                Ok(None)
            }
            (ServerStep::Initiate, INITIATE) => self.on_initiate(r, out).map(Some),
            _ => Err(unexpected(self.expecting(), &name)),
        }
    }

    fn take_cipher(&mut self) -> Option<Cipher> {
        let key = self.key.take()?;
        Some(Cipher {
            key,
            send_prefix: MESSAGE_NONCE_SERVER,
            recv_prefix: MESSAGE_NONCE_CLIENT,
            next_nonce: self.next_nonce,
            peer_nonce: self.peer_nonce,
        })
    }

    fn curve_client_key(&self) -> Option<[u8; 32]> {
        self.client_key
    }
}

/// Hostile INITIATEs against the server's cookie and vouch checks: a client that does not
/// hold `c` for the `C` it presents, or replays what another connection sent, must get no
/// READY, no metadata and no cipher.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FrameDecoder, Limits};

    /// The body of the single command frame in `out`.
    fn body(out: &mut BytesMut) -> Bytes {
        let frame = FrameDecoder::new(Limits::default())
            .decode(out)
            .unwrap()
            .expect("a whole frame");
        assert!(out.is_empty(), "one frame only");
        frame.body().clone()
    }

    /// One connection up to WELCOME: the client (for its keys and the WELCOME it opened) and
    /// the server waiting for INITIATE.
    struct Half {
        client: CurveClient,
        server: CurveServer,
        server_short: [u8; 32],
        cookie: Vec<u8>,
    }

    impl Half {
        fn new(client: &CurveKeyPair, server: &CurveKeyPair, auth: Authenticator) -> Half {
            let mut c = CurveClient::new(client.clone(), *server.public());
            let mut s = CurveServer::new(server.clone(), auth, "127.0.0.1:40000".to_owned());
            let mut out = BytesMut::new();
            c.start(&Metadata::new(), &mut out);
            s.start(&Metadata::new(), &mut BytesMut::new());
            assert_eq!(s.on_command(body(&mut out), &mut out).unwrap(), None);
            let (_, r) = parse_command(body(&mut out)).unwrap();
            let (server_short, cookie) = c.open_welcome(r).unwrap();
            Half {
                client: c,
                server: s,
                server_short,
                cookie,
            }
        }

        /// The vouch an honest client sends: `C' + S`.
        fn honest_vouch(&self) -> [u8; 64] {
            let mut v = [0u8; 64];
            v[..32].copy_from_slice(self.client.short.public());
            v[32..].copy_from_slice(&self.client.server_key);
            v
        }

        /// Sends an INITIATE with this cookie and vouch (sealed with `vouch_secret`) and
        /// returns the server's answer and what it queued.
        fn initiate(
            &mut self,
            cookie: &[u8],
            vouch_secret: &[u8; 32],
            vouch: &[u8; 64],
        ) -> (Result<Option<Metadata>, Error>, BytesMut) {
            let mut out = BytesMut::new();
            Initiate {
                cookie,
                nonce: self.client.take_nonce(),
                session: &BoxKey::precompute(&self.server_short, self.client.short.secret())
                    .unwrap(),
                client_key: self.client.keypair.public(),
                vouch_key: &BoxKey::precompute(&self.server_short, vouch_secret).unwrap(),
                vouch,
                metadata: &Metadata::new(),
            }
            .put(&mut out);
            let answer = self.server.on_command(body(&mut out), &mut out);
            (answer, out)
        }

        /// The server refused with `expected`: nothing queued (no READY), no cipher, and the
        /// handshake cannot be resumed.
        fn assert_refused(
            &mut self,
            (answer, out): (Result<Option<Metadata>, Error>, BytesMut),
            expected: PeerError,
        ) {
            assert_eq!(answer, Err(expected.into()));
            assert!(out.is_empty(), "nothing sent: {out:?}");
            assert!(self.server.take_cipher().is_none());
            assert!(self.server.session.is_none());
        }
    }

    fn allow(client: &CurveKeyPair) -> Authenticator {
        Authenticator::curve_keys([*client.public()])
    }

    #[test]
    fn honest_initiate_gets_ready() {
        // The harness itself: the same INITIATE, honestly made, is accepted.
        let (client, server) = (CurveKeyPair::generate(), CurveKeyPair::generate());
        let mut h = Half::new(&client, &server, allow(&client));
        let (cookie, vouch) = (h.cookie.clone(), h.honest_vouch());
        let (answer, mut out) = h.initiate(&cookie, client.secret(), &vouch);
        assert_eq!(answer, Ok(Some(Metadata::new())));
        let (name, _) = parse_command(body(&mut out)).unwrap();
        assert_eq!(&name[..], READY);
        assert!(h.server.take_cipher().is_some());
    }

    #[test]
    fn vouch_forged_without_the_presented_keys_secret_is_refused() {
        // The attacker presents the allowed C but holds only its own secret: the vouch is
        // Box[C' + S](attacker->S'), which does not open with C.
        let (victim, server) = (CurveKeyPair::generate(), CurveKeyPair::generate());
        let mut h = Half::new(&victim, &server, allow(&victim));
        let (cookie, vouch) = (h.cookie.clone(), h.honest_vouch());
        let attacker = CurveKeyPair::generate();
        let answer = h.initiate(&cookie, attacker.secret(), &vouch);
        h.assert_refused(answer, PeerError::CurveBox { what: "vouch" });
    }

    #[test]
    fn vouch_naming_another_short_term_key_is_refused() {
        // A genuine vouch of C, but for another connection's C' (replayed from it).
        let (client, server) = (CurveKeyPair::generate(), CurveKeyPair::generate());
        let mut h = Half::new(&client, &server, allow(&client));
        let cookie = h.cookie.clone();
        let mut vouch = h.honest_vouch();
        vouch[..32].copy_from_slice(CurveKeyPair::generate().public());
        let answer = h.initiate(&cookie, client.secret(), &vouch);
        h.assert_refused(answer, PeerError::CurveMismatch("vouch"));
    }

    #[test]
    fn vouch_naming_another_server_is_refused() {
        // A genuine vouch of C and this C', but made for another server S.
        let (client, server) = (CurveKeyPair::generate(), CurveKeyPair::generate());
        let mut h = Half::new(&client, &server, allow(&client));
        let cookie = h.cookie.clone();
        let mut vouch = h.honest_vouch();
        vouch[32..].copy_from_slice(CurveKeyPair::generate().public());
        let answer = h.initiate(&cookie, client.secret(), &vouch);
        h.assert_refused(answer, PeerError::CurveMismatch("vouch"));
    }

    #[test]
    fn cookie_from_another_connection_is_refused() {
        // Same client, same server, two connections: the second echoes the first's cookie.
        let (client, server) = (CurveKeyPair::generate(), CurveKeyPair::generate());
        let first = Half::new(&client, &server, allow(&client));
        let mut h = Half::new(&client, &server, allow(&client));
        let vouch = h.honest_vouch();
        let answer = h.initiate(&first.cookie, client.secret(), &vouch);
        h.assert_refused(answer, PeerError::CurveBox { what: "cookie" });
    }

    #[test]
    fn tampered_cookie_is_refused() {
        // One bit flipped anywhere in the cookie (its nonce, tag or ciphertext).
        let (client, server) = (CurveKeyPair::generate(), CurveKeyPair::generate());
        for at in 0..96 {
            let mut h = Half::new(&client, &server, allow(&client));
            let (mut cookie, vouch) = (h.cookie.clone(), h.honest_vouch());
            cookie[at] ^= 0x01;
            let answer = h.initiate(&cookie, client.secret(), &vouch);
            h.assert_refused(answer, PeerError::CurveBox { what: "cookie" });
        }
    }

    #[test]
    fn cookie_naming_another_connection_is_refused() {
        // A cookie sealed with this connection's K but naming another C' (only the server
        // can make one; the content check stands behind the box).
        let (client, server) = (CurveKeyPair::generate(), CurveKeyPair::generate());
        let mut h = Half::new(&client, &server, allow(&client));
        let session = h.server.session.as_ref().unwrap();
        let mut plain = [0u8; 64];
        plain[..32].copy_from_slice(CurveKeyPair::generate().public());
        plain[32..].copy_from_slice(session.short.secret());
        let nonce: [u8; 16] = random();
        let mut cookie = BytesMut::from(&nonce[..]);
        seal(
            &BoxKey::secret(session.cookie_key),
            &nonce24(COOKIE_NONCE, &nonce),
            &plain,
            &mut cookie,
        );
        let vouch = h.honest_vouch();
        let answer = h.initiate(&cookie, client.secret(), &vouch);
        h.assert_refused(answer, PeerError::CurveMismatch("cookie"));
    }
}
