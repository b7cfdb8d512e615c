//! One ZMTP connection over a byte stream (TCP or Unix socket): the task
//! that owns the stream, a read buffer, a write buffer and the sans-IO
//! [`Connection`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, BytesMut};
use dafka_zmtp_proto::{Command, Config, Connection, Event, Heartbeat, MechanismConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::Message;
use crate::inproc::announced_identity;
use crate::pipe::{Out, Pipe};
use crate::socket::{AttachError, Inner, Link, Phase};

/// Read in chunks of this size.
const READ_CHUNK: usize = 64 * 1024;
/// Stop draining the outgoing queue into the write buffer beyond this size.
const WRITE_BUDGET: usize = 256 * 1024;

/// The read half of any stream transport.
pub(crate) type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// The write half of any stream transport.
pub(crate) type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// How a connection ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnEnd {
    #[error("peer closed the connection")]
    PeerClosed,
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol error: {0}")]
    Protocol(#[from] dafka_zmtp_proto::Error),
    #[error("rejected after handshake: {0}")]
    Rejected(#[from] AttachError),
    #[error("socket closed")]
    Closed,
}

/// Summary returned to the connector (decides whether to reconnect).
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) end: ConnEnd,
    /// The handshake completed.
    pub(crate) was_ready: bool,
}

pub(crate) fn config(inner: &Inner) -> Config {
    let o = &inner.options;
    let heartbeat = o.heartbeat_ivl.map(|interval| Heartbeat {
        interval,
        ttl: o.heartbeat_ttl.unwrap_or_default(),
        timeout: o.heartbeat_timeout.unwrap_or(interval),
    });
    Config {
        socket_type: inner.socket_type,
        identity: announced_identity(inner),
        properties: o.properties.clone(),
        limits: o.limits,
        mechanism: MechanismConfig::Null,
        as_server: false,
        heartbeat,
        handshake_timeout: o.handshake_timeout,
    }
}

/// Drive one connection until it ends. `connect_pipe` is the persistent pipe
/// of a connecting socket; a bound socket gets a fresh pipe at handshake.
pub(crate) async fn run<R, W>(
    inner: Arc<Inner>,
    mut rd: R,
    mut wr: W,
    connect_pipe: Option<Arc<Pipe>>,
    peer: &str,
) -> Outcome
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let connect_side = connect_pipe.is_some();
    let mut conn = match Connection::try_new(config(&inner), now()) {
        Ok(c) => c,
        Err(e) => {
            // Options are validated by bind/connect; this is a safety net.
            tracing::error!(peer, error = %e, "invalid socket options");
            return Outcome {
                end: ConnEnd::Protocol(e.into()),
                was_ready: false,
            };
        }
    };
    let mut rbuf = BytesMut::with_capacity(READ_CHUNK);
    let mut wbuf = BytesMut::with_capacity(READ_CHUNK);
    let mut local: VecDeque<Out> = VecDeque::new();
    let mut link: Option<Link> = None;
    let mut batch: Vec<(u64, Message)> = Vec::new();
    let mut phase = inner.phase();
    let mut deadline = conn.poll_timeout();
    let sleep = tokio::time::sleep_until(to_tokio(deadline));
    tokio::pin!(sleep);

    let end = 'conn: loop {
        // Surface what the last input produced.
        while let Some(ev) = conn.poll_event() {
            match ev {
                Event::Ready {
                    peer_socket_type,
                    peer_identity,
                    ..
                } => match inner.attach(connect_pipe.as_ref(), peer_socket_type, &peer_identity) {
                    Ok(l) => {
                        tracing::debug!(
                            peer,
                            peer_type = peer_socket_type.as_str(),
                            "handshake complete"
                        );
                        link = Some(l);
                    }
                    Err(e) => break 'conn ConnEnd::Rejected(e),
                },
                Event::Message(m) => {
                    if let Some(l) = &link {
                        inner.on_message(l, m, &mut batch);
                    }
                }
                Event::Subscribe(p) => {
                    if let Some(l) = &link {
                        inner.on_subscription(l, p, true);
                    }
                }
                Event::Cancel(p) => {
                    if let Some(l) = &link {
                        inner.on_subscription(l, p, false);
                    }
                }
                _ => {}
            }
        }
        inner.inbound.push_batch(&mut batch);

        // Everything pending goes into one write buffer.
        conn.poll_transmit(&mut wbuf);
        if let Some(l) = &link {
            fill(&inner, &mut conn, l, &mut local, &mut wbuf);
        }

        let next = conn.poll_timeout();
        if next != deadline {
            deadline = next;
            sleep.as_mut().reset(to_tokio(deadline));
        }

        let ph = *phase.borrow_and_update();
        match ph {
            Phase::Terminated => break ConnEnd::Closed,
            Phase::Closing
                if wbuf.is_empty()
                    && local.is_empty()
                    && link
                        .as_ref()
                        .map(|l| &l.pipe)
                        .or(connect_pipe.as_ref())
                        .is_none_or(|p| p.is_empty()) =>
            {
                break ConnEnd::Closed;
            }
            _ => {}
        }
        // Keep reading while closing: a lingering handshake must complete.
        let reading = inner.inbound.has_space();
        if rbuf.capacity() - rbuf.len() < READ_CHUNK / 4 {
            rbuf.reserve(READ_CHUNK);
        }
        let can_fill = link.is_some() && local.is_empty() && wbuf.len() < WRITE_BUDGET;

        tokio::select! {
            biased;
            r = wr.write(&wbuf), if !wbuf.is_empty() => match r {
                Ok(0) => break ConnEnd::Io(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => wbuf.advance(n),
                Err(e) => break ConnEnd::Io(e),
            },
            r = rd.read_buf(&mut rbuf), if reading => match r {
                Ok(0) => break ConnEnd::PeerClosed,
                Ok(_) => {
                    if let Err(e) = conn.handle_input(&mut rbuf, now()) {
                        break ConnEnd::Protocol(e);
                    }
                }
                Err(e) => break ConnEnd::Io(e),
            },
            _ = inner.inbound.wait_space(), if !reading => {}
            _ = wake(link.as_ref()), if can_fill => {}
            _ = &mut sleep, if deadline.is_some() => {
                if let Err(e) = conn.handle_timeout(now()) {
                    break ConnEnd::Protocol(e);
                }
            }
            _ = phase.changed() => {}
        }
    };

    // A failing connection may have queued an ERROR command: best effort.
    if matches!(end, ConnEnd::Protocol(_) | ConnEnd::Rejected(_)) {
        conn.poll_transmit(&mut wbuf);
        if !wbuf.is_empty() {
            let _ =
                tokio::time::timeout(std::time::Duration::from_millis(100), wr.write_all(&wbuf))
                    .await;
        }
    }
    let was_ready = link.is_some();
    if let Some(l) = &link {
        inner.detach(l, connect_side, local);
    }
    match &end {
        ConnEnd::Protocol(e) => {
            tracing::warn!(peer, error = %e, "closing connection: protocol error")
        }
        ConnEnd::Rejected(e) => tracing::warn!(peer, error = %e, "closing connection"),
        ConnEnd::Io(e) => tracing::debug!(peer, error = %e, "connection I/O error"),
        ConnEnd::PeerClosed => tracing::debug!(peer, "peer closed the connection"),
        ConnEnd::Closed => {}
    }
    Outcome { end, was_ready }
}

async fn wake(link: Option<&Link>) {
    match link {
        Some(l) => l.pipe.wake.notified().await,
        None => std::future::pending().await,
    }
}

/// The current time on tokio's clock (so paused test time drives timeouts).
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

fn to_tokio(deadline: Option<Instant>) -> tokio::time::Instant {
    match deadline {
        Some(d) => tokio::time::Instant::from_std(d),
        // Far future; the branch is disabled anyway.
        None => tokio::time::Instant::now() + std::time::Duration::from_secs(86400 * 365),
    }
}

/// Encode queued items into `wbuf` until the budget is reached.
fn fill(
    inner: &Inner,
    conn: &mut Connection,
    link: &Link,
    local: &mut VecDeque<Out>,
    wbuf: &mut BytesMut,
) {
    while wbuf.len() < WRITE_BUDGET {
        if local.is_empty() {
            if link.pipe.take_all(local) {
                inner.send_space.notify_waiters();
            }
            if local.is_empty() {
                break;
            }
        }
        let Some(item) = local.pop_front() else {
            break;
        };
        let res = match item {
            Out::Msg(m) => conn.send_message(&m, wbuf),
            // To a ZMTP 3.0 peer the connection sends these as 0x01/0x00 messages.
            Out::Sub(p) => conn.send_command(&Command::Subscribe(p), wbuf),
            Out::Cancel(p) => conn.send_command(&Command::Cancel(p), wbuf),
        };
        if let Err(e) = res {
            tracing::warn!(error = %e, "dropping an outgoing message");
        }
    }
}
