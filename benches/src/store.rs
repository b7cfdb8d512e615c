//! `dafka-bench store`: the storage engine against the disk's own limit, in one run.
//!
//! For each record size and partition count, three times over: the engine appends (sync
//! policy `always`) for `--seconds`, one record per `append` call round-robin over the
//! partitions, while a waiter thread timestamps every acknowledged batch; then the raw
//! limit: plain `write` + `fdatasync` of the same number of bytes per batch as the engine
//! wrote, in a fresh file, for the same time. The medians are reported. After the single-partition cases the partition is
//! read back sequentially (from the page cache). With `--memory-seconds`, a final run
//! appends 1 KiB records to 16 partitions under size retention and samples the RSS
//! every second. Every measurement is one JSON line on stdout.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dafka_store::{
    AppendRecord, Config, PartitionId, PartitionKey, RecordMeta, Retention, Store, Ticket,
};

use crate::error::BenchError;
use crate::report::{self, Report};

/// What `dafka-bench store` measures.
#[derive(Debug, Clone)]
pub(crate) struct StoreArgs {
    /// Parent directory of the stores and raw files (on the disk to measure).
    pub(crate) dir: PathBuf,
    /// Seconds of appending per case.
    pub(crate) seconds: f64,
    /// Record sizes.
    pub(crate) sizes: Vec<usize>,
    /// Partition counts.
    pub(crate) partitions: Vec<u32>,
    /// Length of the memory-over-time run (0: skip it).
    pub(crate) memory_seconds: u64,
    /// Whether to run the throughput cases (`--no-cases`: only the memory run).
    pub(crate) cases: bool,
}

/// Engine and raw runs per case (medians reported).
const REPS: usize = 3;

/// One record in this many has its append time taken for the latency figures.
const SAMPLE_EVERY: u64 = 16;

fn key(p: u32) -> PartitionKey {
    let mut producer = [0u8; 16];
    producer[12..].copy_from_slice(&p.to_be_bytes());
    PartitionKey::new("bench", producer)
}

fn store_err(e: impl std::fmt::Display) -> BenchError {
    BenchError::backend("dafka-store", e)
}

/// Runs every case, printing one JSON line each.
pub(crate) fn run(args: &StoreArgs) -> Result<(), BenchError> {
    std::fs::create_dir_all(&args.dir)?;
    let sizes: &[usize] = if args.cases { &args.sizes } else { &[] };
    for &size in sizes {
        for &partitions in &args.partitions {
            // Engine and raw runs alternate, REPS times each, and the medians are kept:
            // single runs on a shared, virtualised disk swing both ways.
            let mut runs = Vec::new();
            let mut raws = Vec::new();
            let mut last = None;
            for _ in 0..REPS {
                if let Some((store, _)) = last.take() {
                    Store::close(store);
                }
                let dir = args.dir.join(format!("engine-{size}-{partitions}"));
                let _ = std::fs::remove_dir_all(&dir);
                let (line, store, ids) = engine(&dir, size, partitions, args.seconds)?;
                raws.push(raw(&args.dir, line.batch_bytes, args.seconds)?);
                runs.push(line);
                last = Some((store, ids));
            }
            runs.sort_by(|a, b| a.disk_bytes_per_s.total_cmp(&b.disk_bytes_per_s));
            raws.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (line, raw) = (&runs[runs.len() / 2], raws[raws.len() / 2]);
            let mut r = line.report.clone();
            r.int("reps", REPS as u64)
                .float("raw_bytes_per_s", raw.0)
                .float("raw_batches_per_s", raw.1)
                .float(
                    "ratio_to_raw",
                    line.disk_bytes_per_s / raw.0.max(f64::MIN_POSITIVE),
                );
            println!("{}", r.to_json());
            if let Some((store, ids)) = last {
                if partitions == 1 {
                    println!("{}", read(&store, ids[0], size)?.to_json());
                }
                store.close();
            }
            let _ = std::fs::remove_dir_all(args.dir.join(format!("engine-{size}-{partitions}")));
        }
    }
    if args.memory_seconds > 0 {
        memory(&args.dir.join("memory"), args.memory_seconds)?;
    }
    Ok(())
}

struct EngineLine {
    report: Report,
    batch_bytes: usize,
    disk_bytes_per_s: f64,
}

/// The metadata of every record appended: a value-only record with a create time (no key,
/// no headers), the smallest on disk.
static VALUE_ONLY: RecordMeta = RecordMeta::created(0);

/// Appends `value` as the next record of partition `ids[*p]`, then moves `*p` on to the next
/// partition (round robin).
fn append_round_robin(
    store: &Store,
    ids: &[PartitionId],
    heads: &mut [u64],
    p: &mut usize,
    value: &[u8],
) -> Result<Ticket, BenchError> {
    let ticket = store
        .append(&[AppendRecord {
            partition: ids[*p],
            offset: heads[*p],
            meta: &VALUE_ONLY,
            value,
        }])
        .map_err(store_err)?;
    heads[*p] += 1;
    *p = (*p + 1) % ids.len();
    Ok(ticket)
}

fn open(dir: &Path, config: Config) -> Result<Store, BenchError> {
    Store::open_path(dir, config).map_err(store_err)
}

fn engine(
    dir: &Path,
    size: usize,
    partitions: u32,
    seconds: f64,
) -> Result<(EngineLine, Store, Vec<PartitionId>), BenchError> {
    let store = open(dir, Config::default())?;
    let ids: Vec<PartitionId> = (0..partitions)
        .map(|p| store.declare(&key(p)))
        .collect::<Result<_, _>>()
        .map_err(store_err)?;
    let value = vec![0xA5u8; size];
    let mut heads = vec![0u64; ids.len()];

    // The waiter timestamps each acknowledged batch as soon as it is acknowledged.
    let stop = Arc::new(AtomicBool::new(false));
    let waiter = {
        let store = store.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut acked = vec![Instant::now()]; // batch 0: nothing
            let mut last = store.durable_batch();
            while !stop.load(Ordering::Acquire) {
                let d = store.wait_durable_after(last, Duration::from_millis(50));
                let now = Instant::now();
                while (acked.len() as u64) <= d {
                    acked.push(now);
                }
                last = d;
            }
            acked
        })
    };

    let stats0 = store.stats();
    let cpu0 = report::cpu_seconds();
    let start = Instant::now();
    let limit = Duration::from_secs_f64(seconds);
    let mut samples: Vec<(u64, Instant)> = Vec::new();
    let mut count = 0u64;
    let mut last = None;
    let mut p = 0usize;
    while start.elapsed() < limit {
        for _ in 0..256 {
            let ticket = append_round_robin(&store, &ids, &mut heads, &mut p, &value)?;
            count += 1;
            if count.is_multiple_of(SAMPLE_EVERY) {
                samples.push((ticket.batch(), Instant::now()));
            }
            last = Some(ticket);
        }
    }
    if let Some(t) = last {
        t.wait(Duration::from_secs(60)).map_err(store_err)?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = report::cpu_seconds().zip(cpu0).map(|(a, b)| a - b);
    let stats = store.stats();
    let final_batch = store.durable_batch();
    while store.durable_batch() < final_batch {
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(60)); // let the waiter stamp the last batch
    stop.store(true, Ordering::Release);
    let acked = waiter
        .join()
        .map_err(|_| BenchError::Peer("the waiter thread panicked".into()))?;
    let mut lat_ns: Vec<u64> = samples
        .iter()
        .filter_map(|(batch, at)| {
            acked
                .get(*batch as usize)
                .map(|done| done.saturating_duration_since(*at).as_nanos() as u64)
        })
        .collect();
    let latency = report::summarize(&mut lat_ns);
    let batches = stats.batches - stats0.batches;
    let disk_bytes = stats.bytes_written - stats0.bytes_written;
    let disk_bytes_per_s = disk_bytes as f64 / elapsed;
    let mut r = Report::default();
    r.str("mode", "engine")
        .str("sync", "always")
        .int("size", size as u64)
        .int("partitions", u64::from(partitions))
        .int("records", count)
        .float("seconds", elapsed)
        .float("records_per_s", count as f64 / elapsed)
        .float(
            "payload_mb_per_s",
            (count * size as u64) as f64 / elapsed / 1e6,
        )
        .float("disk_bytes_per_s", disk_bytes_per_s)
        .int("batches", batches)
        .float("records_per_batch", count as f64 / batches.max(1) as f64)
        .int("mean_batch_bytes", disk_bytes / batches.max(1));
    if let Some(l) = latency {
        r.float("ack_p50_us", l.p50_us)
            .float("ack_p99_us", l.p99_us);
    }
    if let Some(cpu) = cpu {
        r.float("cpu_ns_per_record", cpu * 1e9 / count as f64);
    }
    let batch_bytes = (disk_bytes / batches.max(1)) as usize;
    Ok((
        EngineLine {
            report: r,
            batch_bytes,
            disk_bytes_per_s,
        },
        store,
        ids,
    ))
}

/// The disk's limit: `write` + `fdatasync` of `batch` bytes, repeated for `seconds`.
/// Returns (bytes/s, batches/s).
fn raw(parent: &Path, batch: usize, seconds: f64) -> Result<(f64, f64), BenchError> {
    let path = parent.join("raw.log");
    let _ = std::fs::remove_file(&path);
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)?;
    let buf = vec![0x5Au8; batch.max(1)];
    let start = Instant::now();
    let limit = Duration::from_secs_f64(seconds);
    let mut pos = 0u64;
    let mut n = 0u64;
    while start.elapsed() < limit {
        file.write_all_at(&buf, pos)?;
        file.sync_data()?;
        pos += buf.len() as u64;
        n += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok((pos as f64 / elapsed, n as f64 / elapsed))
}

/// Sequential read of one partition, start to end (from the page cache: just written).
fn read(store: &Store, id: PartitionId, size: usize) -> Result<Report, BenchError> {
    let head = store.head(id).unwrap_or(0);
    let start = Instant::now();
    let mut next = 0;
    let mut bytes = 0u64;
    while next < head {
        let records = store.read(id, next, 1 << 20, 8 << 20).map_err(store_err)?;
        for r in &records {
            bytes += r.value.len() as u64;
        }
        next = records.last().map_or(head, |r| r.offset + 1);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut r = Report::default();
    r.str("mode", "read")
        .int("size", size as u64)
        .int("records", head)
        .float("seconds", elapsed)
        .float("gb_per_s", bytes as f64 / elapsed / 1e9)
        .float("records_per_s", head as f64 / elapsed);
    Ok(r)
}

/// Records per second of the memory run: it measures memory, not speed, so it does not
/// hog a shared disk (about 100 MB/s of 1 KiB records).
const MEMORY_RATE: f64 = 100_000.0;

/// Appends 1 KiB records to 16 partitions for `seconds` under 1 GiB size retention, at
/// [`MEMORY_RATE`], printing the RSS every second.
fn memory(dir: &Path, seconds: u64) -> Result<(), BenchError> {
    let _ = std::fs::remove_dir_all(dir);
    let mut config = Config::default();
    config.segment_bytes = 64 << 20;
    config.retention = Retention {
        max_age: None,
        max_bytes: Some(1 << 30),
    };
    let store = open(dir, config)?;
    let ids: Vec<PartitionId> = (0..16)
        .map(|p| store.declare(&key(p)))
        .collect::<Result<_, _>>()
        .map_err(store_err)?;
    let value = vec![0x3Cu8; 1024];
    let mut heads = vec![0u64; ids.len()];
    let start = Instant::now();
    let mut next_sample = Duration::ZERO;
    let mut p = 0;
    let mut last = None;
    while start.elapsed() < Duration::from_secs(seconds) {
        if start.elapsed() >= next_sample {
            let stats = store.stats();
            let mut r = Report::default();
            r.str("mode", "memory")
                .float("t_s", start.elapsed().as_secs_f64())
                .int("rss_kib", report::rss_kib().unwrap_or(0))
                .int("records", stats.records)
                .int("segments_dropped", stats.segments_dropped);
            println!("{}", r.to_json());
            next_sample += Duration::from_secs(1);
        }
        let due = start.elapsed().as_secs_f64() * MEMORY_RATE;
        let sent = heads.iter().sum::<u64>() as f64;
        if sent > due {
            std::thread::sleep(Duration::from_secs_f64((sent - due) / MEMORY_RATE));
        }
        for _ in 0..256 {
            let ticket = append_round_robin(&store, &ids, &mut heads, &mut p, &value)?;
            last = Some(ticket);
        }
    }
    if let Some(t) = last {
        t.wait(Duration::from_secs(60)).map_err(store_err)?;
    }
    store.close();
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
