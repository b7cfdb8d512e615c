//! Command-line parsing (hand-rolled: the harness has a handful of flags).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::BenchError;
use crate::store::StoreArgs;

/// Which side of which test this process plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// PUSH: connects and sends `warmup + count` messages.
    Push,
    /// PULL: binds, receives `warmup + count` messages and measures throughput.
    Pull,
    /// REQ: connects and measures `count` round trips after `warmup` ones.
    Req,
    /// REP: binds and echoes `warmup + count` requests.
    Rep,
    /// A REQ per round trip: connects a new socket, one round trip, closes; measures
    /// handshakes (connections set up) per second against a `rep` with the same count.
    Handshake,
}

impl Role {
    /// The name used on the command line and in the JSON output.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Push => "push",
            Self::Pull => "pull",
            Self::Req => "req",
            Self::Rep => "rep",
            Self::Handshake => "handshake",
        }
    }

    /// The test this role belongs to.
    pub(crate) fn test(self) -> &'static str {
        match self {
            Self::Push | Self::Pull => "pushpull",
            Self::Req | Self::Rep => "reqrep",
            Self::Handshake => "handshake",
        }
    }

    /// Whether this side binds (the receiving / replying side does) or connects.
    pub(crate) fn binds(self) -> bool {
        matches!(self, Self::Pull | Self::Rep)
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "push" => Some(Self::Push),
            "pull" => Some(Self::Pull),
            "req" => Some(Self::Req),
            "rep" => Some(Self::Rep),
            "handshake" => Some(Self::Handshake),
            _ => None,
        }
    }
}

/// A parsed `tcp://HOST:PORT` endpoint, restricted to loopback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// The socket address (always a loopback address).
    pub(crate) addr: SocketAddr,
}

impl Endpoint {
    /// Parses `tcp://127.0.0.1:PORT`, `tcp://[::1]:PORT` or `tcp://localhost:PORT`.
    /// Anything that is not loopback is refused: the harness never leaves the machine.
    pub(crate) fn parse(s: &str) -> Result<Self, BenchError> {
        let rest = s
            .strip_prefix("tcp://")
            .ok_or_else(|| BenchError::Usage(format!("endpoint `{s}` must start with tcp://")))?;
        let rest = match rest.strip_prefix("localhost:") {
            Some(port) => format!("127.0.0.1:{port}"),
            None => rest.to_owned(),
        };
        let addr: SocketAddr = rest
            .parse()
            .map_err(|_| BenchError::Usage(format!("endpoint `{s}` is not tcp://IP:PORT")))?;
        let loopback = match addr.ip() {
            IpAddr::V4(ip) => ip.is_loopback(),
            IpAddr::V6(ip) => ip.is_loopback(),
        };
        if !loopback {
            return Err(BenchError::Usage(format!(
                "endpoint `{s}` is not a loopback address; the harness only runs on loopback"
            )));
        }
        if addr.port() == 0 {
            return Err(BenchError::Usage(format!(
                "endpoint `{s}` needs an explicit port (the connecting side must know it)"
            )));
        }
        Ok(Self { addr })
    }

    /// The endpoint in ZeroMQ syntax, e.g. `tcp://127.0.0.1:5555` or `tcp://[::1]:5555`.
    pub(crate) fn zmq(&self) -> String {
        format!("tcp://{}", self.addr)
    }
}

/// Everything one benchmark process needs to know.
#[derive(Debug, Clone)]
pub(crate) struct RunArgs {
    /// Which side of which test.
    pub(crate) role: Role,
    /// Backend name (`raw`, `libzmq`, `zmqrs`, ...).
    pub(crate) backend: String,
    /// Where to bind or connect.
    pub(crate) endpoint: Endpoint,
    /// Message body size in bytes.
    pub(crate) size: usize,
    /// Measured messages (PUSH/PULL) or round trips (REQ/REP).
    pub(crate) count: u64,
    /// Messages or round trips before measuring starts.
    pub(crate) warmup: u64,
    /// Hard bound on the whole run, connection set-up included.
    pub(crate) timeout: Duration,
    /// After the last send, keep the socket open until stdin reaches EOF (bounded by `timeout`),
    /// so queued messages are delivered whatever the backend's close semantics.
    pub(crate) hold: bool,
    /// Tokio worker threads for async backends; 0 runs them on the current thread.
    pub(crate) workers: usize,
    /// CURVE on the connection (the binding side is the server).
    pub(crate) curve: bool,
}

/// Largest message size accepted (the biggest benchmark size is 256 KiB).
pub(crate) const MAX_SIZE: usize = 16 * 1024 * 1024;
/// Largest count accepted (REQ keeps one latency sample per round trip).
pub(crate) const MAX_COUNT: u64 = 100_000_000;

/// A parsed command line.
#[derive(Debug, Clone)]
pub(crate) enum Command {
    /// Run one side of one test.
    Run(RunArgs),
    /// Print the backends and library versions of this build as JSON.
    Info,
    /// Measure the storage engine against the disk (`dafka-bench store`).
    Store(StoreArgs),
    /// One process of the end-to-end Dafka benchmark (`dafka-bench dafka`).
    Dafka(crate::dafka::DafkaArgs),
    /// Print usage.
    Help,
}

/// The usage text.
pub(crate) const USAGE: &str = "\
usage: dafka-bench <push|pull|req|rep> --impl NAME --endpoint tcp://127.0.0.1:PORT
                   --size BYTES --count N [--warmup N] [--timeout SECS] [--hold] [--workers N]
       dafka-bench info
       dafka-bench store --dir DIR [--seconds S] [--sizes 100,1024] [--partitions 1,16,1000]
                         [--memory-seconds N] [--no-cases]
PULL and REP bind, PUSH and REQ connect. Each process prints one JSON line on stdout
(`store` prints one per measurement).";

fn parse_list<T: std::str::FromStr>(flag: &str, value: &str) -> Result<Vec<T>, BenchError> {
    value.split(',').map(|v| parse_num(flag, v)).collect()
}

fn parse_store(args: &[String]) -> Result<Command, BenchError> {
    let mut out = StoreArgs {
        dir: PathBuf::new(),
        seconds: 3.0,
        sizes: vec![100, 1024],
        partitions: vec![1, 16, 1000],
        memory_seconds: 0,
        cases: true,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--no-cases" {
            out.cases = false;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| BenchError::Usage(format!("{flag} needs a value")))?;
        match flag.as_str() {
            "--dir" => out.dir = PathBuf::from(value),
            "--seconds" => out.seconds = parse_num(flag, value)?,
            "--sizes" => out.sizes = parse_list(flag, value)?,
            "--partitions" => out.partitions = parse_list(flag, value)?,
            "--memory-seconds" => out.memory_seconds = parse_num(flag, value)?,
            _ => return Err(BenchError::Usage(format!("unknown flag `{flag}`"))),
        }
    }
    if out.dir.as_os_str().is_empty() {
        return Err(BenchError::Usage("--dir is required".into()));
    }
    if !(out.seconds > 0.0 && out.seconds <= 3600.0)
        || out.sizes.iter().any(|&s| s == 0 || s > MAX_SIZE)
        || out.partitions.iter().any(|&p| p == 0 || p > 1_000_000)
    {
        return Err(BenchError::Usage(
            "--seconds in (0, 3600], sizes in 1..=16 MiB, partitions in 1..=1000000".into(),
        ));
    }
    Ok(Command::Store(out))
}

fn parse_num<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, BenchError> {
    value
        .parse()
        .map_err(|_| BenchError::Usage(format!("{flag} expects a number, got `{value}`")))
}

/// Parses the arguments after the program name.
pub(crate) fn parse(args: &[String]) -> Result<Command, BenchError> {
    let Some(first) = args.first() else {
        return Err(BenchError::Usage("missing subcommand".into()));
    };
    match first.as_str() {
        "info" => return Ok(Command::Info),
        "store" => return parse_store(&args[1..]),
        "dafka" => return crate::dafka::parse(&args[1..]).map(Command::Dafka),
        "help" | "-h" | "--help" => return Ok(Command::Help),
        _ => {}
    }
    let role = Role::parse(first)
        .ok_or_else(|| BenchError::Usage(format!("unknown subcommand `{first}`")))?;
    let mut backend = None;
    let mut endpoint = None;
    let mut size = None;
    let mut count = None;
    let mut warmup = 0u64;
    let mut timeout_secs = 60.0f64;
    let mut hold = false;
    let mut curve = false;
    let mut workers = 0usize;
    let mut it = args.iter().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--hold" {
            hold = true;
            continue;
        }
        if flag == "--curve" {
            curve = true;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| BenchError::Usage(format!("{flag} needs a value")))?;
        match flag.as_str() {
            "--impl" => backend = Some(value.clone()),
            "--endpoint" => endpoint = Some(Endpoint::parse(value)?),
            "--size" => size = Some(parse_num::<usize>(flag, value)?),
            "--count" => count = Some(parse_num::<u64>(flag, value)?),
            "--warmup" => warmup = parse_num(flag, value)?,
            "--timeout" => timeout_secs = parse_num(flag, value)?,
            "--workers" => workers = parse_num(flag, value)?,
            _ => return Err(BenchError::Usage(format!("unknown flag `{flag}`"))),
        }
    }
    let backend = backend.ok_or_else(|| BenchError::Usage("--impl is required".into()))?;
    let endpoint = endpoint.ok_or_else(|| BenchError::Usage("--endpoint is required".into()))?;
    let size = size.ok_or_else(|| BenchError::Usage("--size is required".into()))?;
    let count = count.ok_or_else(|| BenchError::Usage("--count is required".into()))?;
    if size > MAX_SIZE {
        return Err(BenchError::Usage(format!("--size must be <= {MAX_SIZE}")));
    }
    if count == 0 || count > MAX_COUNT || warmup > MAX_COUNT {
        return Err(BenchError::Usage(format!(
            "--count must be in 1..={MAX_COUNT} and --warmup <= {MAX_COUNT}"
        )));
    }
    if !(timeout_secs > 0.0 && timeout_secs <= 3600.0) {
        return Err(BenchError::Usage(
            "--timeout must be in (0, 3600] seconds".into(),
        ));
    }
    if workers > 64 {
        return Err(BenchError::Usage("--workers must be <= 64".into()));
    }
    Ok(Command::Run(RunArgs {
        role,
        backend,
        endpoint,
        size,
        count,
        warmup,
        timeout: Duration::from_secs_f64(timeout_secs),
        hold,
        workers,
        curve,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn parses_a_full_push_command() {
        let cmd = parse(&args(
            "push --impl raw --endpoint tcp://127.0.0.1:5555 --size 128 --count 10 --warmup 2 --hold",
        ))
        .unwrap();
        let Command::Run(run) = cmd else {
            panic!("expected a run command");
        };
        assert_eq!(run.role, Role::Push);
        assert_eq!(run.backend, "raw");
        assert_eq!(run.endpoint.zmq(), "tcp://127.0.0.1:5555");
        assert_eq!((run.size, run.count, run.warmup), (128, 10, 2));
        assert!(run.hold);
        assert!(!run.role.binds());
    }

    #[test]
    fn parses_curve_and_the_handshake_role() {
        let Command::Run(run) = parse(&args(
            "handshake --impl dafka --endpoint tcp://127.0.0.1:5555 --size 1 --count 10 --curve",
        ))
        .unwrap() else {
            panic!("expected a run command");
        };
        assert_eq!((run.role, run.role.test()), (Role::Handshake, "handshake"));
        assert!(run.curve && !run.role.binds());
        let Command::Run(run) = parse(&args(
            "rep --impl libzmq --endpoint tcp://127.0.0.1:5555 --size 1 --count 10",
        ))
        .unwrap() else {
            panic!("expected a run command");
        };
        assert!(!run.curve);
    }

    #[test]
    fn refuses_non_loopback_endpoints() {
        for ep in [
            "tcp://10.0.0.1:5555",
            "tcp://0.0.0.0:5555",
            "tcp://[2001:db8::1]:1",
        ] {
            assert!(
                matches!(Endpoint::parse(ep), Err(BenchError::Usage(_))),
                "{ep}"
            );
        }
        assert_eq!(
            Endpoint::parse("tcp://[::1]:7").unwrap().zmq(),
            "tcp://[::1]:7"
        );
        assert_eq!(
            Endpoint::parse("tcp://localhost:7").unwrap().zmq(),
            "tcp://127.0.0.1:7"
        );
        assert!(Endpoint::parse("tcp://127.0.0.1:0").is_err());
        assert!(Endpoint::parse("ipc:///tmp/x").is_err());
    }

    #[test]
    fn rejects_missing_and_unknown_flags() {
        assert!(parse(&args("pull --impl raw --size 1 --count 1")).is_err());
        assert!(parse(&args("pull --bogus 1")).is_err());
        assert!(parse(&args("dance")).is_err());
        assert!(parse(&[]).is_err());
        assert!(
            parse(&args(
                "pull --impl raw --endpoint tcp://127.0.0.1:1 --size 1 --count 0"
            ))
            .is_err()
        );
        assert!(matches!(parse(&args("info")), Ok(Command::Info)));
    }

    #[test]
    fn parses_the_store_mode() {
        let Ok(Command::Store(s)) = parse(&args(
            "store --dir /tmp/x --seconds 0.5 --sizes 100 --partitions 1,16 --memory-seconds 9",
        )) else {
            panic!("expected a store command");
        };
        assert_eq!(s.dir, PathBuf::from("/tmp/x"));
        assert_eq!((s.seconds, s.memory_seconds), (0.5, 9));
        assert_eq!((s.sizes, s.partitions), (vec![100], vec![1, 16]));
        assert!(s.cases);
        let Ok(Command::Store(s)) = parse(&args("store --dir x --no-cases")) else {
            panic!("expected a store command");
        };
        assert!(!s.cases);
        assert!(parse(&args("store --seconds 1")).is_err());
        assert!(parse(&args("store --dir x --partitions 0")).is_err());
    }
}
