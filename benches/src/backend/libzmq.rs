//! `libzmq`: the C library (Debian's libzmq 4.3.x) through the `zmq` crate, default options.
//!
//! Its calls block, so each one is given a short `ZMQ_RCVTIMEO`/`ZMQ_SNDTIMEO` and retried
//! until the run's deadline: a dead peer ends the run instead of hanging it.

use std::time::Instant;

use bytes::Bytes;

use super::{Backend, expired};
use crate::cli::{Endpoint, Role};
use crate::error::BenchError;

/// How long one blocking call waits before the deadline is checked again.
const POLL_MS: i32 = 200;
/// How long closing waits for unsent messages (`ZMQ_LINGER`).
const LINGER_MS: i32 = 2000;

/// A libzmq socket and the context that owns its I/O thread.
pub(crate) struct Libzmq {
    // Field order matters: the socket must close before the context terminates.
    socket: zmq::Socket,
    _ctx: zmq::Context,
}

fn err(e: zmq::Error) -> BenchError {
    BenchError::backend("libzmq", e)
}

/// The version of the libzmq this binary is linked against, e.g. `4.3.4`.
pub(crate) fn version() -> String {
    let (major, minor, patch) = zmq::version();
    format!("{major}.{minor}.{patch}")
}

impl Libzmq {
    /// Sends `body`, retrying while libzmq reports EAGAIN, until `deadline`.
    fn send_retrying(
        &self,
        body: &[u8],
        deadline: Instant,
        what: &'static str,
    ) -> Result<(), BenchError> {
        loop {
            match self.socket.send(body, 0) {
                Ok(()) => return Ok(()),
                Err(zmq::Error::EAGAIN) if !expired(deadline) => {}
                Err(zmq::Error::EAGAIN) => return Err(BenchError::Timeout(what)),
                Err(e) => return Err(err(e)),
            }
        }
    }
}

impl Backend for Libzmq {
    type Msg = zmq::Message;

    async fn open(
        role: Role,
        endpoint: &Endpoint,
        _deadline: Instant,
        curve: bool,
    ) -> Result<Self, BenchError> {
        // One context (one I/O thread) per process, as applications have: the handshake
        // benchmark opens a socket per connection.
        static CTX: std::sync::OnceLock<zmq::Context> = std::sync::OnceLock::new();
        let ctx = CTX.get_or_init(zmq::Context::new).clone();
        let kind = match role {
            Role::Push => zmq::PUSH,
            Role::Pull => zmq::PULL,
            Role::Req | Role::Handshake => zmq::REQ,
            Role::Rep => zmq::REP,
        };
        let socket = ctx.socket(kind).map_err(err)?;
        if curve {
            let (server, client) = super::curve_keys();
            let z85 = |k: &[u8; 32]| dafka_zmtp::z85_encode(k);
            if role.binds() {
                socket.set_curve_server(true).map_err(err)?;
                socket
                    .set_curve_secretkey(z85(server.secret()).as_bytes())
                    .map_err(err)?;
            } else {
                socket
                    .set_curve_serverkey(z85(server.public()).as_bytes())
                    .map_err(err)?;
                socket
                    .set_curve_publickey(z85(client.public()).as_bytes())
                    .map_err(err)?;
                socket
                    .set_curve_secretkey(z85(client.secret()).as_bytes())
                    .map_err(err)?;
            }
        }
        socket.set_rcvtimeo(POLL_MS).map_err(err)?;
        socket.set_sndtimeo(POLL_MS).map_err(err)?;
        socket.set_linger(LINGER_MS).map_err(err)?;
        if role.binds() {
            socket.bind(&endpoint.zmq()).map_err(err)?;
        } else {
            // libzmq connects (and reconnects) in the background; the first send waits for it.
            socket.connect(&endpoint.zmq()).map_err(err)?;
        }
        Ok(Self { socket, _ctx: ctx })
    }

    async fn send(&mut self, payload: &Bytes, deadline: Instant) -> Result<(), BenchError> {
        self.send_retrying(payload, deadline, "sending")
    }

    async fn flush(&mut self, _deadline: Instant) -> Result<(), BenchError> {
        Ok(())
    }

    async fn recv(&mut self, deadline: Instant) -> Result<zmq::Message, BenchError> {
        loop {
            match self.socket.recv_msg(0) {
                Ok(msg) => return Ok(msg),
                Err(zmq::Error::EAGAIN) if !expired(deadline) => {}
                Err(zmq::Error::EAGAIN) => return Err(BenchError::Timeout("receiving")),
                Err(e) => return Err(err(e)),
            }
        }
    }

    fn msg_len(msg: &zmq::Message) -> usize {
        msg.len()
    }

    async fn reply(&mut self, msg: zmq::Message, deadline: Instant) -> Result<(), BenchError> {
        // Sending from a slice copies the body (as `zmq_send` does); that keeps `msg` for a
        // retry after EAGAIN, which a consumed `zmq_msg_t` would not allow.
        self.send_retrying(&msg, deadline, "replying")
    }

    async fn close(self) -> Result<(), BenchError> {
        // Dropping closes the socket (lingering up to LINGER_MS) and then terminates the context.
        drop(self);
        Ok(())
    }
}
