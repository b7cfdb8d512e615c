//! `tcp://` and `ipc://`: listeners, connectors with reconnect.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dafka_zmtp_proto::PeerError;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::conn;
use crate::endpoint::tcp_string;
use crate::error::Error;
use crate::failures::FailureLog;
use crate::monitor::{ConnectionEnd, PeerId, SocketEvent};
use crate::pipe::Pipe;
use crate::socket::{Inner, Phase, Stop};

async fn resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    if host == "*" {
        return Ok(vec![SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port,
        )]);
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "host name did not resolve",
        ));
    }
    Ok(addrs)
}

/// Resolves when the socket leaves [`Phase::Running`].
async fn until_not_running(phase: &mut watch::Receiver<Phase>) {
    while *phase.borrow_and_update() == Phase::Running {
        if phase.changed().await.is_err() {
            return;
        }
    }
}

/// Resolves when the socket reaches [`Phase::Terminated`].
async fn until_terminated(phase: &mut watch::Receiver<Phase>) {
    while *phase.borrow_and_update() != Phase::Terminated {
        if phase.changed().await.is_err() {
            return;
        }
    }
}

pub(crate) async fn bind_tcp(
    inner: &Arc<Inner>,
    host: &str,
    port: u16,
    endpoint: &str,
) -> Result<String, Error> {
    let addrs = resolve(host, port).await?;
    let mut last_err = None;
    for addr in addrs {
        match TcpListener::bind(addr).await {
            Ok(listener) => {
                let local = tcp_string(listener.local_addr()?);
                let stop = Arc::new(Stop::default());
                inner.register_endpoint(
                    vec![endpoint.to_owned(), local.clone()],
                    None,
                    stop.clone(),
                );
                let task_inner = inner.clone();
                listening(inner, &local);
                inner.spawn(accept_loop(task_inner, listener, stop, local.clone()));
                return Ok(local);
            }
            Err(e) => last_err = Some(e),
        }
    }
    Err(match last_err {
        Some(e) => Error::from_bind(endpoint, e),
        None => Error::endpoint(endpoint, "host did not resolve"),
    })
}

/// Tell the monitor that `endpoint` is bound.
pub(crate) fn listening(inner: &Inner, endpoint: &str) {
    inner.events.emit(|| SocketEvent::Listening {
        endpoint: endpoint.to_owned(),
    });
}

/// The `max_connections` semaphore of one bound endpoint (`None`: unlimited).
fn connection_limit(inner: &Inner) -> Option<Arc<Semaphore>> {
    match inner.options.max_connections {
        0 => None,
        n => Some(Arc::new(Semaphore::new(n.min(Semaphore::MAX_PERMITS)))),
    }
}

/// Waits until `limit` allows one more accepted connection (not accepting
/// meanwhile: further peers wait in the kernel's backlog). `None`: the
/// listener is stopping.
async fn admit(
    inner: &Inner,
    limit: Option<&Arc<Semaphore>>,
    phase: &mut watch::Receiver<Phase>,
    stop: &Stop,
) -> Option<Option<OwnedSemaphorePermit>> {
    let Some(sem) = limit else {
        return Some(None);
    };
    if let Ok(permit) = sem.clone().try_acquire_owned() {
        return Some(Some(permit));
    }
    tracing::warn!(
        max_connections = inner.options.max_connections,
        "connection limit reached: not accepting until a connection ends"
    );
    tokio::select! {
        p = sem.clone().acquire_owned() => p.ok().map(Some),
        _ = until_not_running(phase) => None,
        _ = stop.wait() => None,
    }
}

/// What the accept loop needs from a bound listener: the next connection,
/// split into halves, with the peer's name for the logs.
trait Accept: Send + Sync + 'static {
    type Read: conn::StreamRead + 'static;
    type Write: tokio::io::AsyncWrite + Unpin + Send + 'static;

    fn accept_split(
        &self,
    ) -> impl Future<Output = io::Result<(Self::Read, Self::Write, String)>> + Send;
}

impl Accept for TcpListener {
    type Read = tokio::net::tcp::OwnedReadHalf;
    type Write = tokio::net::tcp::OwnedWriteHalf;

    async fn accept_split(&self) -> io::Result<(Self::Read, Self::Write, String)> {
        let (stream, addr) = self.accept().await?;
        let _ = stream.set_nodelay(true);
        let (rd, wr) = stream.into_split();
        Ok((rd, wr, addr.to_string()))
    }
}

/// A bound `ipc://` listener; its socket file goes away with it.
struct IpcListener {
    listener: UnixListener,
    path: PathBuf,
}

impl Accept for IpcListener {
    type Read = tokio::net::unix::OwnedReadHalf;
    type Write = tokio::net::unix::OwnedWriteHalf;

    async fn accept_split(&self) -> io::Result<(Self::Read, Self::Write, String)> {
        let (stream, _) = self.listener.accept().await?;
        let (rd, wr) = stream.into_split();
        Ok((rd, wr, format!("ipc://{}", self.path.display())))
    }
}

impl Drop for IpcListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Accept connections until the socket stops running or the endpoint is
/// unbound, one connection task each, at most `max_connections` at once.
async fn accept_loop<L: Accept>(inner: Arc<Inner>, listener: L, stop: Arc<Stop>, endpoint: String) {
    let mut phase = inner.phase();
    let limit = connection_limit(&inner);
    let failures = Arc::new(FailureLog::default());
    loop {
        let Some(permit) = admit(&inner, limit.as_ref(), &mut phase, &stop).await else {
            break;
        };
        tokio::select! {
            r = listener.accept_split() => match r {
                Ok((rd, wr, peer)) => {
                    failures.flush();
                    let id = inner.next_peer();
                    inner.events.emit(|| SocketEvent::Accepted {
                        endpoint: endpoint.clone(),
                        address: peer.clone(),
                        peer: id,
                    });
                    let conn_inner = inner.clone();
                    let conn_stop = stop.clone();
                    let failures = failures.clone();
                    inner.spawn_connection(async move {
                        let _permit = permit;
                        conn::run(conn_inner, rd, wr, None, id, &conn_stop, &peer, &failures).await;
                    });
                }
                Err(e) => {
                    // Typically EMFILE: back off briefly instead of spinning, and log at most
                    // FAILURES_LOGGED_PER_SECOND of them a second (it was 50 lines a second).
                    failures.log_accept(&e);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            _ = until_not_running(&mut phase) => break,
            _ = stop.wait() => break,
        }
    }
}

pub(crate) async fn bind_ipc(
    inner: &Arc<Inner>,
    path: &Path,
    endpoint: &str,
) -> Result<String, Error> {
    let listener = match UnixListener::bind(path) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            // A live listener answers; a stale file left by a dead process
            // does not and is replaced.
            if UnixStream::connect(path).await.is_ok() {
                return Err(Error::AddrInUse(endpoint.to_owned()));
            }
            // Only a socket file is ours to replace, never a regular file.
            let is_socket = std::fs::symlink_metadata(path)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()));
            if !is_socket {
                return Err(Error::AddrInUse(endpoint.to_owned()));
            }
            std::fs::remove_file(path)?;
            UnixListener::bind(path).map_err(|e| Error::from_bind(endpoint, e))?
        }
        Err(e) => return Err(Error::from_bind(endpoint, e)),
    };
    let local = format!("ipc://{}", path.display());
    let stop = Arc::new(Stop::default());
    inner.register_endpoint(vec![endpoint.to_owned(), local.clone()], None, stop.clone());
    let listener = IpcListener {
        listener,
        path: path.to_path_buf(),
    };
    listening(inner, &local);
    inner.spawn(accept_loop(inner.clone(), listener, stop, local.clone()));
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range_and_varies() {
        let max = Duration::from_millis(100);
        let samples: Vec<Duration> = (0..50).map(|_| jitter(max)).collect();
        assert!(samples.iter().all(|d| *d <= max));
        assert!(samples.iter().any(|d| *d != samples[0]));
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
        assert!(jitter(Duration::MAX) <= Duration::MAX);
    }
}

/// Where a connector connects to.
#[derive(Debug, Clone)]
enum Target {
    Tcp { host: String, port: u16 },
    Ipc(PathBuf),
}

pub(crate) fn connect_tcp(
    inner: &Arc<Inner>,
    host: String,
    port: u16,
    endpoint: &str,
) -> Result<(), Error> {
    start_connector(inner, Target::Tcp { host, port }, endpoint)
}

pub(crate) fn connect_ipc(inner: &Arc<Inner>, path: PathBuf, endpoint: &str) -> Result<(), Error> {
    start_connector(inner, Target::Ipc(path), endpoint)
}

fn start_connector(inner: &Arc<Inner>, target: Target, endpoint: &str) -> Result<(), Error> {
    let pipe = inner.add_connect_pipe()?;
    let stop = Arc::new(Stop::default());
    inner.register_endpoint(vec![endpoint.to_owned()], Some(pipe.id), stop.clone());
    let task_inner = inner.clone();
    inner.spawn_connection(connector(
        task_inner,
        pipe,
        target,
        stop,
        endpoint.to_owned(),
    ));
    Ok(())
}

/// A random duration in `0..=max` (reconnect jitter).
fn jitter(max: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(u64::from(std::process::id()));
    let r = h.finish();
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(r % nanos.saturating_add(1))
}

async fn connect_once(
    inner: &Inner,
    target: &Target,
) -> io::Result<(conn::BoxRead, conn::BoxWrite, String)> {
    let attempt = async {
        match target {
            Target::Tcp { host, port } => {
                let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
                for addr in resolve(host, *port).await? {
                    match TcpStream::connect(addr).await {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            let (r, w) = s.into_split();
                            return Ok((
                                Box::new(r) as conn::BoxRead,
                                Box::new(w) as conn::BoxWrite,
                                tcp_string(addr),
                            ));
                        }
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
            Target::Ipc(path) => {
                let s = UnixStream::connect(path).await?;
                let (r, w) = s.into_split();
                Ok((
                    Box::new(r) as conn::BoxRead,
                    Box::new(w) as conn::BoxWrite,
                    format!("ipc://{}", path.display()),
                ))
            }
        }
    };
    match inner.options.connect_timeout {
        Some(t) => tokio::time::timeout(t, attempt)
            .await
            .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into())),
        None => attempt.await,
    }
}

/// Connect, run the connection, reconnect with backoff; the pipe (and the
/// messages queued in it) survives across connections.
async fn connector(
    inner: Arc<Inner>,
    pipe: Arc<Pipe>,
    target: Target,
    stop: Arc<Stop>,
    endpoint: String,
) {
    let id = PeerId(pipe.id);
    let mut phase = inner.phase();
    let base = inner.options.reconnect_ivl;
    let mut ivl = base;
    let failures = FailureLog::default();
    loop {
        let ph = *phase.borrow_and_update();
        if ph == Phase::Terminated || (ph == Phase::Closing && pipe.is_empty()) || stop.is_stopped()
        {
            break;
        }
        let res = tokio::select! {
            r = connect_once(&inner, &target) => r,
            _ = until_terminated(&mut phase) => break,
            _ = stop.wait() => break,
        };
        match res {
            Ok((rd, wr, peer)) => {
                inner.events.emit(|| SocketEvent::Connected {
                    endpoint: endpoint.clone(),
                    address: peer.clone(),
                    peer: id,
                });
                let outcome = conn::run(
                    inner.clone(),
                    rd,
                    wr,
                    Some(pipe.clone()),
                    id,
                    &stop,
                    &peer,
                    &failures,
                )
                .await;
                if outcome.was_ready {
                    ivl = base;
                }
                match outcome.end {
                    ConnectionEnd::Closed => continue,
                    // libzmq reconnects after a timeout (the peer may just be
                    // slow or busy) but stops after a protocol error or a
                    // rejected handshake.
                    ConnectionEnd::Protocol(dafka_zmtp_proto::Error::Peer(
                        PeerError::HandshakeTimeout(_)
                        | PeerError::HeartbeatTimeout(_)
                        | PeerError::PingTtlExpired(_),
                    )) => {}
                    ConnectionEnd::Protocol(_) | ConnectionEnd::Rejected(_)
                        if !outcome.was_ready =>
                    {
                        tracing::warn!(peer, "handshake failed: not reconnecting");
                        break;
                    }
                    _ => {}
                }
            }
            Err(e) => tracing::debug!(?target, error = %e, "connect failed"),
        }
        let delay = ivl.saturating_add(jitter(ivl));
        if let Some(max) = inner.options.reconnect_ivl_max {
            ivl = ivl.saturating_mul(2).min(max.max(base));
        }
        inner.events.emit(|| SocketEvent::ConnectRetried {
            endpoint: endpoint.clone(),
            peer: id,
            delay,
        });
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = until_terminated(&mut phase) => break,
            _ = stop.wait() => break,
        }
    }
    inner.remove_pipe(pipe.id);
}
