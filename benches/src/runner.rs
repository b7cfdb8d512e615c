//! The four test loops, generic over [`Backend`]. Every loop is bounded by its count and by
//! the run's deadline, so a process exits by itself even when its peer dies.

use std::time::{Duration, Instant};

use bytes::Bytes;
use std::io::Read as _;

use crate::backend::Backend;
use crate::cli::{Role, RunArgs};
use crate::error::BenchError;
use crate::report::{self, Report};

/// Runs one side of one test with backend `B` and returns the fields of its report.
pub(crate) async fn run<B: Backend>(args: &RunArgs) -> Result<Report, BenchError> {
    let start = Instant::now();
    let deadline = start + args.timeout;
    let tokio_deadline = tokio::time::Instant::from_std(deadline);
    if args.role == Role::Handshake {
        return tokio::time::timeout_at(tokio_deadline, handshakes::<B>(args, deadline))
            .await
            .map_err(|_| BenchError::Timeout("waiting for the peer"))?;
    }
    let mut sock = tokio::time::timeout_at(
        tokio_deadline,
        B::open(args.role, &args.endpoint, deadline, args.curve),
    )
    .await
    .map_err(|_| BenchError::Timeout("opening the socket"))??;
    let measured = tokio::time::timeout_at(tokio_deadline, async {
        match args.role {
            Role::Push => push(&mut sock, args, deadline).await,
            Role::Pull => pull(&mut sock, args, deadline).await,
            Role::Req => req(&mut sock, args, deadline).await,
            Role::Rep => rep(&mut sock, args, deadline).await,
            Role::Handshake => unreachable!("handled above"),
        }
    })
    .await
    .map_err(|_| BenchError::Timeout("waiting for the peer"))?;
    let mut report = measured?;
    if args.hold {
        let released = hold_until_stdin_eof(deadline).await;
        report.bool("hold_released", released);
    }
    // Closing may block on delivery; bound it too, but a slow close is not a failed run.
    let closed = tokio::time::timeout(Duration::from_secs(5), sock.close()).await;
    report.bool("closed_cleanly", matches!(closed, Ok(Ok(()))));
    Ok(report)
}

/// The body every sender uses: `size` bytes of a fixed pattern.
pub(crate) fn payload(size: usize) -> Bytes {
    (0..size)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// Sends `body` `n` times.
async fn send_n<B: Backend>(
    sock: &mut B,
    body: &Bytes,
    n: u64,
    deadline: Instant,
) -> Result<(), BenchError> {
    for _ in 0..n {
        sock.send(body, deadline).await?;
    }
    Ok(())
}

/// One request and its reply.
async fn round_trip<B: Backend>(
    sock: &mut B,
    body: &Bytes,
    deadline: Instant,
) -> Result<B::Msg, BenchError> {
    sock.send(body, deadline).await?;
    sock.flush(deadline).await?;
    sock.recv(deadline).await
}

async fn push<B: Backend>(
    sock: &mut B,
    args: &RunArgs,
    deadline: Instant,
) -> Result<Report, BenchError> {
    let body = payload(args.size);
    send_n(sock, &body, args.warmup, deadline).await?;
    let t0 = Instant::now();
    send_n(sock, &body, args.count, deadline).await?;
    sock.flush(deadline).await?;
    let elapsed = t0.elapsed().as_secs_f64();
    let mut r = Report::default();
    r.int("sent", args.warmup + args.count)
        .float("elapsed_s", elapsed)
        .float("send_msgs_per_s", args.count as f64 / elapsed);
    Ok(r)
}

async fn pull<B: Backend>(
    sock: &mut B,
    args: &RunArgs,
    deadline: Instant,
) -> Result<Report, BenchError> {
    let check = |len: usize| {
        if len == args.size {
            Ok(())
        } else {
            Err(BenchError::Peer(format!(
                "got a {len}-byte message, expected {}",
                args.size
            )))
        }
    };
    // The clock starts at the first measured message (the one after the warm-up) and stops
    // at the last one, so connection set-up and warm-up are excluded; `count - 1` intervals
    // lie in between.
    for _ in 0..=args.warmup {
        check(B::msg_len(&sock.recv(deadline).await?))?;
    }
    let t0 = Instant::now();
    for _ in 1..args.count {
        check(B::msg_len(&sock.recv(deadline).await?))?;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let intervals = (args.count - 1) as f64;
    let msgs_per_s = if args.count > 1 {
        intervals / elapsed
    } else {
        f64::NAN
    };
    let mut r = Report::default();
    r.int("received", args.warmup + args.count)
        .float("elapsed_s", elapsed)
        .float("msgs_per_s", msgs_per_s)
        .float("mb_per_s", msgs_per_s * args.size as f64 / 1e6);
    Ok(r)
}

async fn req<B: Backend>(
    sock: &mut B,
    args: &RunArgs,
    deadline: Instant,
) -> Result<Report, BenchError> {
    let body = payload(args.size);
    for _ in 0..args.warmup {
        round_trip(sock, &body, deadline).await?;
    }
    // Reserve up front for typical runs (so the loop does not reallocate), not for huge counts.
    let capacity = usize::try_from(args.count).map_or(1 << 20, |c| c.min(1 << 20));
    let mut samples = Vec::with_capacity(capacity);
    let t_all = Instant::now();
    for _ in 0..args.count {
        let t0 = Instant::now();
        let reply = round_trip(sock, &body, deadline).await?;
        samples.push(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
        if B::msg_len(&reply) != args.size {
            return Err(BenchError::Peer(format!(
                "reply of {} bytes, expected {}",
                B::msg_len(&reply),
                args.size
            )));
        }
    }
    let elapsed = t_all.elapsed().as_secs_f64();
    let lat =
        report::summarize(&mut samples).ok_or(BenchError::Timeout("measuring round trips"))?;
    let mut r = Report::default();
    r.float("elapsed_s", elapsed)
        .float("round_trips_per_s", args.count as f64 / elapsed)
        .float("p50_us", lat.p50_us)
        .float("p99_us", lat.p99_us)
        .float("mean_us", lat.mean_us)
        .float("min_us", lat.min_us)
        .float("max_us", lat.max_us);
    Ok(r)
}

/// `warmup + count` connections, each a new REQ socket with one round trip, then closed; the
/// rate counts the `count` measured ones (connect, greeting, security handshake, one round
/// trip, close).
async fn handshakes<B: Backend>(args: &RunArgs, deadline: Instant) -> Result<Report, BenchError> {
    let body = payload(args.size);
    let one = async || -> Result<(), BenchError> {
        let mut sock = B::open(Role::Req, &args.endpoint, deadline, args.curve).await?;
        round_trip(&mut sock, &body, deadline).await?;
        sock.close().await
    };
    for _ in 0..args.warmup {
        one().await?;
    }
    let t0 = Instant::now();
    for _ in 0..args.count {
        one().await?;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let mut r = Report::default();
    r.float("elapsed_s", elapsed)
        .float("handshakes_per_s", args.count as f64 / elapsed);
    Ok(r)
}

async fn rep<B: Backend>(
    sock: &mut B,
    args: &RunArgs,
    deadline: Instant,
) -> Result<Report, BenchError> {
    let total = args.warmup + args.count;
    for _ in 0..total {
        let msg = sock.recv(deadline).await?;
        sock.reply(msg, deadline).await?;
        sock.flush(deadline).await?;
    }
    let mut r = Report::default();
    r.int("echoed", total);
    Ok(r)
}

/// Waits until stdin reaches EOF (the orchestrator closes it once the peer has finished),
/// or until `deadline`. Returns whether EOF was seen.
async fn hold_until_stdin_eof(deadline: Instant) -> bool {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    // A plain thread: a blocked read must not keep the runtime from shutting down.
    let spawned = std::thread::Builder::new()
        .name("stdin-eof".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = [0u8; 256];
            while matches!(stdin.read(&mut buf), Ok(1..)) {}
            let _ = tx.send(());
        });
    if spawned.is_err() {
        return false;
    }
    matches!(
        tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), rx).await,
        Ok(Ok(()))
    )
}
