//! PLAIN (24/ZMTP-PLAIN): a username and password in clear, checked by the server.
//!
//! It authenticates but does not encrypt: use it on trusted networks only (see
//! `docs/security.md`). The handshake:
//!
//! ```text
//! C: HELLO  username password      S: WELCOME               (or ERROR "400")
//! C: INITIATE metadata             S: READY metadata
//! ```
//!
//! | Command    | Data layout |
//! |------------|-------------|
//! | `HELLO`    | 1-byte username length *u*, *u* bytes; 1-byte password length *p*, *p* bytes |
//! | `WELCOME`  | empty |
//! | `INITIATE` | metadata, as READY's (see [`Metadata`]) |
//! | `READY`    | metadata |

use bytes::{Bytes, BytesMut};

use crate::auth::{AuthRequest, Authenticator, Credentials, authenticate};
use crate::command::Metadata;
use crate::error::{Error, MalformedError};
use crate::mechanism::{
    ClientStep, HELLO, INITIATE, Mechanism, READY, ServerStep, WELCOME, parse_command, put_command,
    refuse, unexpected,
};

/// The PLAIN client: sends its credentials, then its metadata.
pub(crate) struct PlainClient {
    pub(crate) username: Bytes,
    pub(crate) password: Bytes,
    state: ClientStep,
    local: Metadata,
}

impl PlainClient {
    pub(crate) fn new(username: Bytes, password: Bytes) -> Self {
        PlainClient {
            username,
            password,
            state: ClientStep::Welcome,
            local: Metadata::new(),
        }
    }
}

impl Mechanism for PlainClient {
    fn name(&self) -> &'static str {
        "PLAIN"
    }

    fn as_server(&self) -> bool {
        false
    }

    fn expecting(&self) -> &'static str {
        self.state.expecting()
    }

    fn start(&mut self, local: &Metadata, out: &mut BytesMut) {
        self.local = local.clone();
        // "hello = command-size %d5 "HELLO" username password"; each is 0-255 octets behind a
        // 1-byte length (lengths are checked by MechanismConfig::validate).
        put_command(
            out,
            HELLO,
            &[
                &[self.username.len() as u8],
                &self.username,
                &[self.password.len() as u8],
                &self.password,
            ],
        );
    }

    fn on_command(&mut self, body: Bytes, out: &mut BytesMut) -> Result<Option<Metadata>, Error> {
        let (name, r) = parse_command(body)?;
        match (self.state, &name[..]) {
            (ClientStep::Welcome, WELCOME) => {
                // "welcome = command-size %d7 "WELCOME"": no data.
                r.finish("PLAIN WELCOME").map_err(MalformedError::from)?;
                let mut meta = BytesMut::new();
                self.local.encode(&mut meta);
                put_command(out, INITIATE, &[&meta]);
                self.state = ClientStep::Ready;
                Ok(None)
            }
            (ClientStep::Ready, READY) => {
                let meta = Metadata::decode(r.rest())?;
                self.state = ClientStep::Done;
                Ok(Some(meta))
            }
            _ => Err(unexpected(self.expecting(), &name)),
        }
    }
}

/// The PLAIN server: asks the authenticator about the client's credentials.
pub(crate) struct PlainServer {
    authenticator: Authenticator,
    address: String,
    state: ServerStep,
    local: Metadata,
}

impl PlainServer {
    pub(crate) fn new(authenticator: Authenticator, address: String) -> Self {
        PlainServer {
            authenticator,
            address,
            state: ServerStep::Hello,
            local: Metadata::new(),
        }
    }
}

impl Mechanism for PlainServer {
    fn name(&self) -> &'static str {
        "PLAIN"
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
        let (name, mut r) = parse_command(body)?;
        match (self.state, &name[..]) {
            (ServerStep::Hello, HELLO) => {
                let username = r
                    .short_bytes("PLAIN username")
                    .map_err(MalformedError::from)?;
                let password = r
                    .short_bytes("PLAIN password")
                    .map_err(MalformedError::from)?;
                r.finish("PLAIN HELLO").map_err(MalformedError::from)?;
                let req = AuthRequest {
                    address: &self.address,
                    credentials: Credentials::Plain {
                        username: &username,
                        password: &password,
                    },
                };
                if let Err(refusal) = authenticate(&self.authenticator, "PLAIN", &req) {
                    return Err(refuse("PLAIN", refusal, out));
                }
                put_command(out, WELCOME, &[]);
                self.state = ServerStep::Initiate;
                Ok(None)
            }
            (ServerStep::Initiate, INITIATE) => {
                let meta = Metadata::decode(r.rest())?;
                let mut ours = BytesMut::new();
                self.local.encode(&mut ours);
                put_command(out, READY, &[&ours]);
                self.state = ServerStep::Done;
                Ok(Some(meta))
            }
            _ => Err(unexpected(self.expecting(), &name)),
        }
    }
}
