//! `dafka-bench dafka <store|producer|consumer>`: one process of the end-to-end Dafka
//! benchmark (producer -> store with `sync="always"` -> consumer, over loopback TCP).
//!
//! `benches/dafka_e2e.py` starts the store (with a tower in the same process) first, reads
//! the `towers` string from its first JSON line, then a consumer and a producer; later a
//! second consumer catches up from the store alone. Every process prints one final JSON line
//! with its figures and peak RSS and exits by itself (bounded by `--timeout`).
//!
//! * store: `{"role":"store","towers":..}` at once, then, when stdin closes,
//!   `{"ok":true,"peak_rss_kib":..,"cpu_s":..}`.
//! * producer: waits for a store (one record sent and flushed), sends `--records` values of
//!   `--size` bytes with `send_many` in chunks of `--batch` (1: `send` in a loop), flushes,
//!   and reports records/s and MB/s until the last acknowledgement, and the acknowledgement
//!   latency of the last record of every chunk (p50/p99).
//! * consumer: "earliest" on the topic; polls batches until `--records` records arrived in
//!   order, reports records/s from its first record to its last.

use std::io::{BufRead as _, Write as _};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dafka_node::{
    ConsumerNode, ConsumerOptions, Header, NodeConfig, OffsetReset, ProducerNode, ProducerOptions,
    ProducerRecord, StoreNode, StoreOptions, SyncPolicy, Tower, TowerAddress, TowerConfig,
};

use crate::error::BenchError;
use crate::report::{Report, cpu_seconds, peak_rss_kib, summarize};

const TOPIC: &str = "bench";

/// The command line of `dafka-bench dafka`.
#[derive(Debug, Clone)]
pub(crate) struct DafkaArgs {
    role: String,
    towers: String,
    dir: PathBuf,
    sync: SyncPolicy,
    records: u64,
    size: usize,
    batch: usize,
    timeout: Duration,
    /// Producer: send for this long instead of `records` (the memory run).
    seconds: Option<f64>,
    /// Consumer: stop once no record came for this long after the first (the memory run).
    idle: Option<f64>,
    /// Store: drop the oldest segments past this many MiB (the memory run).
    retention_mib: Option<u64>,
    /// Producer: most records unacknowledged (default: the node's).
    max_unacked: Option<usize>,
    /// Producer: each record with a 16-byte key and two headers (`--keyed 1`).
    keyed: bool,
}

pub(crate) const USAGE: &str = "\
       dafka-bench dafka store --dir DIR [--sync always|never] [--retention-mib M] [--timeout SECS]
       dafka-bench dafka producer --towers T (--records N | --seconds S) --size BYTES [--batch N] [--keyed 0|1]
       dafka-bench dafka consumer --towers T (--records N | --idle SECS) [--timeout SECS]";

fn bad(msg: impl Into<String>) -> BenchError {
    BenchError::Usage(msg.into())
}

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, BenchError> {
    v.parse()
        .map_err(|_| bad(format!("{flag} expects a number, got `{v}`")))
}

/// Parses the arguments after `dafka`.
pub(crate) fn parse(args: &[String]) -> Result<DafkaArgs, BenchError> {
    let role = args.first().cloned().unwrap_or_default();
    if !matches!(role.as_str(), "store" | "producer" | "consumer") {
        return Err(bad(format!("unknown dafka role `{role}`")));
    }
    let mut out = DafkaArgs {
        role,
        towers: String::new(),
        dir: PathBuf::new(),
        sync: SyncPolicy::Always,
        records: 0,
        size: 100,
        batch: 10_000,
        timeout: Duration::from_secs(120),
        seconds: None,
        idle: None,
        retention_mib: None,
        max_unacked: None,
        keyed: false,
    };
    let mut it = args[1..].iter();
    while let Some(flag) = it.next() {
        let v = it
            .next()
            .ok_or_else(|| bad(format!("{flag} needs a value")))?;
        match flag.as_str() {
            "--towers" => out.towers = v.clone(),
            "--dir" => out.dir = PathBuf::from(v),
            "--sync" => {
                out.sync = match v.as_str() {
                    "always" => SyncPolicy::Always,
                    "never" => SyncPolicy::Never,
                    _ => return Err(bad("--sync is always or never")),
                }
            }
            "--records" => out.records = num(flag, v)?,
            "--size" => out.size = num(flag, v)?,
            "--batch" => out.batch = num(flag, v)?,
            "--timeout" => out.timeout = Duration::from_secs_f64(num(flag, v)?),
            "--seconds" => out.seconds = Some(num(flag, v)?),
            "--idle" => out.idle = Some(num(flag, v)?),
            "--retention-mib" => out.retention_mib = Some(num(flag, v)?),
            "--max-unacked" => out.max_unacked = Some(num(flag, v)?),
            "--keyed" => out.keyed = num::<u8>(flag, v)? != 0,
            _ => return Err(bad(format!("unknown flag `{flag}`"))),
        }
    }
    if out.batch == 0 || out.size == 0 || out.size > crate::cli::MAX_SIZE {
        return Err(bad("--batch >= 1 and --size in 1..=16 MiB"));
    }
    if out.towers.split(',').any(|t| !is_loopback(t.trim())) && out.role != "store" {
        return Err(bad("--towers must be loopback tcp:// endpoints"));
    }
    Ok(out)
}

fn is_loopback(t: &str) -> bool {
    t.starts_with("tcp://127.") || t.starts_with("tcp://[::1]:")
}

fn node_error(e: dafka_node::Error) -> BenchError {
    BenchError::backend("dafka", e)
}

/// Runs one role; its final JSON line is printed by the caller.
pub(crate) fn run(args: &DafkaArgs) -> Result<Report, BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let deadline = args.timeout;
    runtime.block_on(async {
        let work = async {
            match args.role.as_str() {
                "store" => store(args).await,
                "producer" => producer(args).await,
                _ => consumer(args).await,
            }
        };
        tokio::time::timeout(deadline, work)
            .await
            .map_err(|_| BenchError::Timeout("running the dafka role"))?
    })
}

fn finish(mut r: Report) -> Report {
    r.bool("ok", true);
    if let Some(kib) = peak_rss_kib() {
        r.int("peak_rss_kib", kib);
    }
    if let Some(cpu) = cpu_seconds() {
        r.float("cpu_s", cpu);
    }
    r
}

async fn store(args: &DafkaArgs) -> Result<Report, BenchError> {
    let tower = Tower::start(TowerConfig::new("tcp://127.0.0.1:0"))
        .await
        .map_err(node_error)?;
    let towers = vec![tower.address().clone()];
    let mut engine = dafka_store::Config::with_sync(args.sync);
    if let Some(mib) = args.retention_mib {
        engine.segment_bytes = (mib << 20) / 4;
        engine.retention.max_bytes = Some(mib << 20);
    }
    let store = StoreNode::open(
        args.dir.clone(),
        NodeConfig::new(towers),
        StoreOptions::with_sync(args.sync).with_engine(engine),
    )
    .await
    .map_err(node_error)?;
    let mut first = Report::default();
    first.str("role", "store").str("towers", tower.towers());
    println!("{}", first.to_json());
    std::io::stdout().flush()?;
    // Run until the harness closes stdin (the timeout bounds it).
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
            line.clear();
        }
    })
    .await
    .map_err(|e| BenchError::Io(std::io::Error::other(e)))?;
    let mut r = Report::default();
    r.str("role", "store");
    let r = finish(r);
    store.close().await;
    tower.close().await;
    Ok(r)
}

fn towers(args: &DafkaArgs) -> Result<Vec<TowerAddress>, BenchError> {
    TowerAddress::parse_list(&args.towers).map_err(node_error)
}

async fn producer(args: &DafkaArgs) -> Result<Report, BenchError> {
    let producer = ProducerNode::start(
        TOPIC,
        NodeConfig::new(towers(args)?),
        match args.max_unacked {
            Some(n) => ProducerOptions::default().with_max_unacked_records(n),
            None => ProducerOptions::default(),
        },
    )
    .await
    .map_err(node_error)?;
    // Wait for a store: the first record is acknowledged.
    producer
        .send(Bytes::from(vec![0u8; args.size]))
        .await
        .map_err(node_error)?;
    producer
        .flush(Some(Duration::from_secs(30)))
        .await
        .map_err(node_error)?;
    let value = Bytes::from(vec![7u8; args.size]);
    // The keyed shape: a 16-byte key (a UUID's bytes) and two headers (a trace id, a schema
    // id), the same for every record as the value is; the header names are constants, as in
    // most programs (`Header::from_static`: cloning the record copies no name).
    let record = ProducerRecord {
        value: value.clone(),
        key: args.keyed.then(|| Bytes::from_static(b"0123456789abcdef")),
        headers: args.keyed.then(|| {
            vec![
                Header::from_static("trace-id", Some(Bytes::from_static(b"4bf92f3577b34da6"))),
                Header::from_static("schema", Some(Bytes::from_static(b"v1.2"))),
            ]
        }),
        timestamp: None,
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Instant)>();
    let start = Instant::now();
    let send = async {
        let until = args.seconds.map(|s| start + Duration::from_secs_f64(s));
        let mut left = if until.is_some() {
            u64::MAX
        } else {
            args.records
        };
        let mut sent = 0u64;
        while left > 0 && until.is_none_or(|u| Instant::now() < u) {
            let n = (args.batch as u64).min(left);
            let first = if args.batch == 1 {
                producer.send(record.clone()).await
            } else {
                producer
                    .send_many(std::iter::repeat_n(record.clone(), n as usize))
                    .await
            }
            .map_err(node_error)?;
            left -= n;
            sent += n;
            // Sample one record in every 100 for the acknowledgement latency.
            if args.batch >= 100 || (first % 100 == 0) {
                let _ = tx.send((first + n, Instant::now()));
            }
        }
        drop(tx);
        producer.flush(None).await.map_err(node_error)?;
        Ok::<_, BenchError>((sent, start.elapsed()))
    };
    let sample = async {
        let mut samples = Vec::new();
        while let Some((end, sent)) = rx.recv().await {
            producer.wait_acknowledged(end).await.map_err(node_error)?;
            samples.push(u64::try_from(sent.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
        Ok::<_, BenchError>(samples)
    };
    let ((sent, elapsed), mut samples) = tokio::try_join!(send, sample)?;
    let secs = elapsed.as_secs_f64();
    let rate = sent as f64 / secs;
    let mut r = Report::default();
    r.str("role", "producer")
        .int("records", sent)
        .int("size", args.size as u64)
        .int("batch", args.batch as u64)
        .int("keyed", u64::from(args.keyed))
        .float("secs", secs)
        .float("records_per_s", rate)
        .float("mb_per_s", rate * args.size as f64 / 1e6)
        .int("ack_samples", samples.len() as u64);
    if let Some(l) = summarize(&mut samples) {
        r.float("ack_p50_us", l.p50_us)
            .float("ack_p99_us", l.p99_us);
    }
    let r = finish(r);
    producer.close().await;
    Ok(r)
}

async fn consumer(args: &DafkaArgs) -> Result<Report, BenchError> {
    let consumer = ConsumerNode::start(
        &[TOPIC],
        NodeConfig::new(towers(args)?),
        ConsumerOptions::default().with_offset_reset(OffsetReset::Earliest),
    )
    .await
    .map_err(node_error)?;
    let mut got = 0u64;
    let mut bytes = 0u64;
    let mut next = 0u64;
    let mut first = None;
    let mut skipped = 0u64;
    let mut last = Instant::now();
    let idle = args.idle.map(Duration::from_secs_f64);
    let deadline = Instant::now() + args.timeout.saturating_sub(Duration::from_secs(1));
    while idle.is_some() || got < args.records {
        if idle.is_some_and(|i| first.is_some() && last.elapsed() >= i) {
            break;
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Peer(format!(
                "{got} of {} records arrived before the timeout (next offset {next})",
                args.records
            )));
        }
        let batch = consumer
            .poll(100_000, Duration::from_millis(100))
            .await
            .map_err(node_error)?;
        if batch.is_empty() {
            continue;
        }
        first.get_or_insert_with(Instant::now);
        last = Instant::now();
        for record in &batch {
            // In order, without gaps; only the memory run (--idle), where the consumer may
            // fall behind the store's retention, may skip ahead to a low-water mark.
            if record.offset > next && idle.is_some() {
                skipped += record.offset - next;
                next = record.offset;
            }
            if record.offset != next {
                return Err(BenchError::Peer(format!(
                    "offset {} where {next} was expected",
                    record.offset
                )));
            }
            next += 1;
            bytes += record.value.len() as u64;
        }
        got += batch.len() as u64;
    }
    let secs = first.map_or(0.0, |t| last.duration_since(t).as_secs_f64());
    let mut r = Report::default();
    r.str("role", "consumer")
        .int("records", got)
        .int("skipped", skipped)
        .float("secs", secs)
        .float("records_per_s", got as f64 / secs.max(1e-9))
        .float("mb_per_s", bytes as f64 / secs.max(1e-9) / 1e6);
    let r = finish(r);
    consumer.close().await;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_roles_and_refuses_other_hosts() {
        let p = parse(&args(
            "producer --towers tcp://127.0.0.1:5556 --records 10 --size 1024 --batch 1",
        ))
        .unwrap();
        assert_eq!((p.records, p.size, p.batch), (10, 1024, 1));
        assert!(parse(&args("consumer --towers tcp://10.0.0.1:5556 --records 1")).is_err());
        assert!(parse(&args("producer --towers tcp://127.0.0.1:1 --batch 0")).is_err());
        assert!(parse(&args("tower")).is_err());
        let s = parse(&args("store --dir /tmp/x --sync never --retention-mib 64")).unwrap();
        assert_eq!(s.retention_mib, Some(64));
    }
}
