//! `dafka-bench`: one side of one benchmark (PUSH, PULL, REQ or REP) with one implementation,
//! or (`dafka-bench store`) the storage engine against the disk's limit.
//!
//! `benches/run.py` starts the two sides as separate processes over loopback TCP, repeats
//! every pairing, and writes `BENCHMARKS.md`. Each process prints exactly one JSON line on
//! stdout (its measurements, or `"ok":false` with the error) and exits by itself: every
//! loop is bounded by its count and by `--timeout`.

use std::io::Write as _;
use std::process::ExitCode;

mod backend;
mod cli;
mod dafka;
mod error;
mod report;
mod runner;
mod store;

use cli::{Command, RunArgs};
use error::BenchError;
use report::Report;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match cli::parse(&args) {
        Ok(Command::Help) => {
            println!("{}\n{}", cli::USAGE, dafka::USAGE);
            0
        }
        Ok(Command::Info) => {
            println!("{}", info().to_json());
            0
        }
        Ok(Command::Run(run)) => execute(&run),
        Ok(Command::Store(args)) => match store::run(&args) {
            Ok(()) => 0,
            Err(e) => {
                let mut line = Report::default();
                line.str("mode", "store")
                    .bool("ok", false)
                    .str("error", e.to_string());
                println!("{}", line.to_json());
                e.exit_code()
            }
        },
        Ok(Command::Dafka(args)) => {
            let (code, mut line) = match dafka::run(&args) {
                Ok(line) => (0, line),
                Err(e) => {
                    let mut line = Report::default();
                    line.bool("ok", false).str("error", e.to_string());
                    (e.exit_code(), line)
                }
            };
            line.str("mode", "dafka");
            println!("{}", line.to_json());
            code
        }
        Err(e) => {
            eprintln!("{e}\n{}", cli::USAGE);
            e.exit_code()
        }
    };
    let _ = std::io::stdout().flush();
    // Exit without waiting for runtime threads (a stdin reader may still be blocked).
    std::process::exit(code)
}

fn info() -> Report {
    let mut r = Report::default();
    r.str("backends", backend::NAMES.join(","))
        .str("libzmq_version", backend::libzmq::version());
    r
}

fn execute(run: &RunArgs) -> i32 {
    let mut head = Report::default();
    head.str("side", run.role.as_str())
        .str("impl", run.backend.as_str())
        .str("test", run.role.test())
        .int("size", run.size as u64)
        .int("count", run.count)
        .int("warmup", run.warmup);
    let (code, body) = match dispatch(run) {
        Ok(body) => (0, body),
        Err(e) => {
            let mut body = Report::default();
            body.bool("ok", false).str("error", e.to_string());
            (e.exit_code(), body)
        }
    };
    let mut line = head;
    line.extend(body);
    if code == 0 {
        line.bool("ok", true);
    }
    if let Some(kib) = report::peak_rss_kib() {
        line.int("peak_rss_kib", kib);
    }
    if let Some(cpu) = report::cpu_seconds() {
        line.float("cpu_s", cpu);
    }
    println!("{}", line.to_json());
    code
}

fn dispatch(run: &RunArgs) -> Result<Report, BenchError> {
    let mut builder = if run.workers == 0 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(run.workers);
        b
    };
    let rt = builder.enable_all().build()?;
    match run.backend.as_str() {
        "dafka" => rt.block_on(runner::run::<backend::dafka::Dafka>(run)),
        "raw" => rt.block_on(runner::run::<backend::raw::Raw>(run)),
        "libzmq" => rt.block_on(runner::run::<backend::libzmq::Libzmq>(run)),
        "zmqrs" => rt.block_on(runner::run::<backend::zmqrs::ZmqRs>(run)),
        other => Err(BenchError::Unavailable(other.to_owned())),
    }
}
