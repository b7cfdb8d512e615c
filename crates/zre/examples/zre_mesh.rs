//! How fast N nodes in one process find each other on loopback (beacons to 127.255.255.255).
//!
//! Usage: `zre_mesh N [PORT]` (default 20, port 5670 + pid % 1000). Prints the time from the
//! first node's start to the first ENTER anywhere, and until every node has seen all N-1
//! others, with the process's open file descriptors and resident memory at that moment.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use dafka_zre::{Event, Options, ZreNode};

fn proc_status(key: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .map(|l| l[key.len()..].trim().to_owned())
        .unwrap_or_default()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(20);
    let port: u16 = match args.next() {
        Some(p) => p.parse()?,
        None => 5670 + (std::process::id() % 1000) as u16,
    };
    let t0 = Instant::now();
    let mut nodes = Vec::new();
    for i in 0..n {
        nodes.push(ZreNode::start(Options::loopback(port).with_name(format!("n{i}"))).await?);
    }
    let started = t0.elapsed();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut handles = Vec::new();
    for (i, mut node) in nodes.into_iter().enumerate() {
        let tx = tx.clone();
        handles.push(tokio::spawn(async move {
            let mut seen = HashSet::new();
            while seen.len() < n - 1 {
                match node.recv().await {
                    Some(Event::Enter { peer, .. }) => {
                        seen.insert(peer);
                        let _ = tx.send((i, seen.len()));
                    }
                    Some(_) => {}
                    None => break,
                }
            }
            node
        }));
    }
    drop(tx);
    let mut first_enter = None;
    let mut complete = 0;
    let deadline = tokio::time::sleep(Duration::from_secs(60));
    tokio::pin!(deadline);
    while complete < n {
        tokio::select! {
            m = rx.recv() => match m {
                Some((_, count)) => {
                    first_enter.get_or_insert(t0.elapsed());
                    if count == n - 1 {
                        complete += 1;
                    }
                }
                None => break,
            },
            () = &mut deadline => break,
        }
    }
    let meshed = t0.elapsed();
    let fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0);
    println!(
        "nodes={n} started_all={started:?} first_enter={first_enter:?} full_mesh={meshed:?} \
         complete_nodes={complete} fds={fds} rss={}",
        proc_status("VmRSS:")
    );
    for h in handles {
        let mut node = h.await?;
        node.stop().await;
    }
    Ok(())
}
