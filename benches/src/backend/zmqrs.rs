//! `zmqrs`: zmq.rs (crate `zeromq`), the pure-Rust ZeroMQ, on the tokio runtime, default options.

use std::time::{Duration, Instant};

use bytes::Bytes;
use zeromq::{Socket as _, SocketRecv as _, SocketSend as _, ZmqMessage};

use super::{Backend, expired};
use crate::cli::{Endpoint, Role};
use crate::error::BenchError;

/// One zmq.rs socket of the type the role needs.
pub(crate) enum ZmqRs {
    /// PUSH side.
    Push(zeromq::PushSocket),
    /// PULL side.
    Pull(zeromq::PullSocket),
    /// REQ side.
    Req(zeromq::ReqSocket),
    /// REP side.
    Rep(zeromq::RepSocket),
}

fn err(e: zeromq::ZmqError) -> BenchError {
    BenchError::backend("zmqrs", e)
}

async fn attach<S: zeromq::Socket>(
    mut socket: S,
    role: Role,
    endpoint: &str,
    deadline: Instant,
) -> Result<S, BenchError> {
    if role.binds() {
        socket.bind(endpoint).await.map_err(err)?;
        return Ok(socket);
    }
    // zmq.rs fails a connect whose listener is not up yet; retry until the deadline.
    loop {
        match socket.connect(endpoint).await {
            Ok(()) => return Ok(socket),
            Err(e) if expired(deadline) => return Err(err(e)),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

impl Backend for ZmqRs {
    type Msg = ZmqMessage;

    async fn open(
        role: Role,
        endpoint: &Endpoint,
        deadline: Instant,
        curve: bool,
    ) -> Result<Self, BenchError> {
        if curve {
            return Err(super::no_curve("zmqrs"));
        }
        let ep = endpoint.zmq();
        Ok(match role {
            Role::Push => Self::Push(attach(zeromq::PushSocket::new(), role, &ep, deadline).await?),
            Role::Pull => Self::Pull(attach(zeromq::PullSocket::new(), role, &ep, deadline).await?),
            Role::Req | Role::Handshake => {
                Self::Req(attach(zeromq::ReqSocket::new(), role, &ep, deadline).await?)
            }
            Role::Rep => Self::Rep(attach(zeromq::RepSocket::new(), role, &ep, deadline).await?),
        })
    }

    async fn send(&mut self, payload: &Bytes, deadline: Instant) -> Result<(), BenchError> {
        self.reply(ZmqMessage::from(payload.clone()), deadline)
            .await
    }

    async fn flush(&mut self, _deadline: Instant) -> Result<(), BenchError> {
        Ok(())
    }

    async fn recv(&mut self, _deadline: Instant) -> Result<ZmqMessage, BenchError> {
        match self {
            Self::Pull(s) => s.recv().await.map_err(err),
            Self::Req(s) => s.recv().await.map_err(err),
            Self::Rep(s) => s.recv().await.map_err(err),
            Self::Push(_) => Err(BenchError::Usage("a PUSH socket cannot receive".into())),
        }
    }

    fn msg_len(msg: &ZmqMessage) -> usize {
        msg.iter().map(Bytes::len).sum()
    }

    async fn reply(&mut self, msg: ZmqMessage, _deadline: Instant) -> Result<(), BenchError> {
        match self {
            Self::Push(s) => s.send(msg).await.map_err(err),
            Self::Req(s) => s.send(msg).await.map_err(err),
            Self::Rep(s) => s.send(msg).await.map_err(err),
            Self::Pull(_) => Err(BenchError::Usage("a PULL socket cannot send".into())),
        }
    }

    async fn close(self) -> Result<(), BenchError> {
        let errors = match self {
            Self::Push(s) => s.close().await,
            Self::Pull(s) => s.close().await,
            Self::Req(s) => s.close().await,
            Self::Rep(s) => s.close().await,
        };
        match errors.into_iter().next() {
            None => Ok(()),
            Some(e) => Err(err(e)),
        }
    }
}
