//! `dafka`: our own ZMTP sockets (`dafka_zmtp::Socket`) on tokio, default options.

use std::time::Instant;

use bytes::Bytes;
use dafka_zmtp::{Authenticator, MechanismConfig, Message, Options, Socket, SocketType};

use super::Backend;
use crate::cli::{Endpoint, Role};
use crate::error::BenchError;

/// One `dafka_zmtp` socket of the type the role needs.
pub(crate) struct Dafka {
    socket: Socket,
}

fn err(e: dafka_zmtp::Error) -> BenchError {
    BenchError::backend("dafka", e)
}

impl Backend for Dafka {
    type Msg = Message;

    async fn open(
        role: Role,
        endpoint: &Endpoint,
        _deadline: Instant,
        curve: bool,
    ) -> Result<Self, BenchError> {
        let kind = match role {
            Role::Push => SocketType::Push,
            Role::Pull => SocketType::Pull,
            Role::Req | Role::Handshake => SocketType::Req,
            Role::Rep => SocketType::Rep,
        };
        let mut options = Options::default();
        if curve {
            let (server, client) = super::curve_keys();
            options.mechanism = if role.binds() {
                MechanismConfig::CurveServer {
                    keypair: server,
                    authenticator: Authenticator::allow_all(),
                }
            } else {
                MechanismConfig::CurveClient {
                    keypair: client,
                    server_key: *server.public(),
                }
            };
        }
        let socket = Socket::new(kind, options).map_err(err)?;
        if role.binds() {
            socket.bind(&endpoint.zmq()).await.map_err(err)?;
        } else {
            // Connects (and reconnects) in the background; sends queue until it is up.
            socket.connect(&endpoint.zmq()).await.map_err(err)?;
        }
        Ok(Self { socket })
    }

    async fn send(&mut self, payload: &Bytes, _deadline: Instant) -> Result<(), BenchError> {
        self.socket
            .send(Message::from(payload.clone()))
            .await
            .map_err(err)
    }

    async fn flush(&mut self, _deadline: Instant) -> Result<(), BenchError> {
        Ok(())
    }

    async fn recv(&mut self, _deadline: Instant) -> Result<Message, BenchError> {
        self.socket.recv().await.map_err(err)
    }

    fn msg_len(msg: &Message) -> usize {
        msg.byte_len()
    }

    async fn reply(&mut self, msg: Message, _deadline: Instant) -> Result<(), BenchError> {
        self.socket.send(msg).await.map_err(err)
    }

    async fn close(self) -> Result<(), BenchError> {
        self.socket.close().await;
        Ok(())
    }
}
