//! Crash test: a child process (this binary, asked through the environment) appends
//! with `always` and prints every head it was told is durable; the parent kills it
//! with SIGKILL at random moments, many times, and after each kill reopens the store:
//! every record reported durable is there, intact, in order.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dafka_store::{AppendRecord, Config, PartitionKey, RecordMeta, Store};
use dafka_testkit::Rng;

const CHILD_ENV: &str = "DAFKA_STORE_CRASH_CHILD_DIR";
const PARTITIONS: u32 = 5;
const ROUNDS: usize = 40;

fn key(p: u32) -> PartitionKey {
    let mut producer = [0x5A; 16];
    producer[..4].copy_from_slice(&p.to_be_bytes());
    PartitionKey::new(format!("crash{}", p % 2), producer)
}

/// Record `offset` of partition `p`: its length and bytes follow from both.
fn value(p: u32, offset: u64) -> Vec<u8> {
    let len = ((offset * 31 + u64::from(p) * 7) % 300) as usize;
    (0..len)
        .map(|i| (i as u64 ^ offset ^ u64::from(p) << 4) as u8)
        .collect()
}

fn small_segments() -> Config {
    let mut config = Config::default();
    config.segment_bytes = 64 << 10;
    config.max_record_bytes = 4096;
    config
}

/// The child: appends batches of random partitions forever, printing
/// `DURABLE <partition> <head>` once each batch's ticket is honoured.
fn child(dir: &Path) {
    let store = Store::open_path(dir, small_segments()).expect("child open");
    let ids: Vec<_> = (0..PARTITIONS)
        .map(|p| store.declare(&key(p)).expect("declare"))
        .collect();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let mut rng = Rng((seed ^ u64::from(std::process::id())) | 1);
    let stdout = std::io::stdout();
    loop {
        let n = 1 + rng.below(20) as usize;
        let mut values = Vec::with_capacity(n);
        for _ in 0..n {
            let p = rng.below(u64::from(PARTITIONS)) as u32;
            let offset = store.next_offset(ids[p as usize]).expect("declared")
                + values.iter().filter(|(q, _, _)| *q == p).count() as u64;
            values.push((p, offset, value(p, offset)));
        }
        let meta = RecordMeta::created(1);
        let records: Vec<AppendRecord<'_>> = values
            .iter()
            .map(|(p, offset, v)| AppendRecord {
                partition: ids[*p as usize],
                offset: *offset,
                meta: &meta,
                value: v,
            })
            .collect();
        let ticket = store.append(&records).expect("append");
        ticket.wait(Duration::from_secs(30)).expect("durable");
        let mut heads = BTreeMap::new();
        for (p, offset, _) in &values {
            heads.insert(*p, offset + 1);
        }
        let mut out = stdout.lock();
        for (p, head) in heads {
            writeln!(out, "DURABLE {p} {head}").expect("stdout");
        }
        out.flush().expect("stdout");
    }
}

fn parent() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("current_exe");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut reported = BTreeMap::<u32, u64>::new();
    let started = Instant::now();
    let mut truncated_total = 0;
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .env(CHILD_ENV, tmp.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("piped");
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            // Only whole lines count: a line cut by the kill was not reported.
            while reader.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
                if line.ends_with(b"\n") {
                    lines.push(String::from_utf8_lossy(&line).trim().to_owned());
                }
                line.clear();
            }
            lines
        });
        std::thread::sleep(Duration::from_millis(30 + rng.below(150)));
        child.kill().expect("SIGKILL"); // Child::kill is SIGKILL on Unix
        child.wait().expect("reap");
        for line in reader.join().expect("reader") {
            let mut parts = line.split(' ');
            if parts.next() == Some("DURABLE") {
                let p: u32 = parts
                    .next()
                    .and_then(|s| s.parse().ok())
                    .expect("partition");
                let head: u64 = parts.next().and_then(|s| s.parse().ok()).expect("head");
                let e = reported.entry(p).or_insert(0);
                *e = (*e).max(head);
            }
        }

        let store = Store::open_path(tmp.path(), small_segments()).expect("reopen");
        let report = store.recovery_report().clone();
        assert!(report.damage.is_empty(), "round {round}: {report:?}");
        truncated_total += report.truncated_bytes;
        for (&p, &head) in &reported {
            let id = store.lookup(&key(p)).expect("declared partition survives");
            let stored = store.head(id).expect("known");
            assert!(
                stored >= head,
                "round {round}: partition {p} reported durable up to {head}, store has {stored}"
            );
            let mut next = 0;
            while next < stored {
                let records = store.read(id, next, 10_000, 1 << 22).expect("read");
                for r in records {
                    assert_eq!(r.offset, next, "round {round}: partition {p} in order");
                    assert_eq!(r.value, value(p, r.offset), "round {round}: intact");
                    next += 1;
                }
            }
        }
        store.close();
    }
    let total: u64 = reported.values().sum();
    assert!(total > 0, "the child made records durable");
    println!(
        "crash: {ROUNDS} SIGKILLs in {:.1} s, {total} records reported durable, all found intact; \
         {truncated_total} torn bytes truncated in all",
        started.elapsed().as_secs_f64()
    );
}

fn main() {
    match std::env::var_os(CHILD_ENV) {
        Some(dir) => child(Path::new(&dir)),
        None => parent(),
    }
}
