//! Helpers shared by the store's integration tests.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use dafka_store::{
    AppendRecord, Dir, PartitionId, PartitionKey, Record, RecordMeta, SegmentFile, Store,
};

/// The key of test partition `i` (topic "t<i % 3>", producer UUID derived from `i`).
pub fn key(i: u32) -> PartitionKey {
    let mut producer = [0u8; 16];
    producer[..4].copy_from_slice(&i.to_be_bytes());
    producer[15] = 0xEE;
    PartitionKey::new(format!("t{}", i % 3), producer)
}

/// The value of record `offset` of partition `p`, `len` bytes long (recognisable).
pub fn value(p: u32, offset: u64, len: usize) -> Vec<u8> {
    let seed = format!("p{p}o{offset}.");
    seed.bytes().cycle().take(len).collect()
}

/// The timestamp [`append_one`] gives record `offset`: `1000 + offset` ms, in microseconds.
pub fn stamp(offset: u64) -> i64 {
    (1_000 + offset as i64) * 1_000
}

/// Appends one record (created at [`stamp`]`(offset)`, no key, no headers) and waits for it.
pub fn append_one(store: &Store, id: PartitionId, offset: u64, value: &[u8]) {
    store
        .append(&[AppendRecord {
            partition: id,
            offset,
            meta: &RecordMeta::created(stamp(offset)),
            value,
        }])
        .expect("append")
        .wait(Duration::from_secs(10))
        .expect("durable");
}

/// Records to append, from (partition, offset, metadata, value) tuples.
pub fn records<'a>(
    planned: &'a [(PartitionId, u64, &'a RecordMeta, Vec<u8>)],
) -> Vec<AppendRecord<'a>> {
    planned
        .iter()
        .map(|(id, offset, meta, v)| AppendRecord {
            partition: *id,
            offset: *offset,
            meta,
            value: v,
        })
        .collect()
}

/// Every record of a partition from its low-water mark.
pub fn read_all(store: &Store, id: PartitionId) -> Vec<Record> {
    let mut out = Vec::new();
    let mut from = store.low_water(id).expect("known partition");
    let head = store.head(id).expect("known partition");
    while from < head {
        let batch = store.read(id, from, 1000, 1 << 20).expect("read");
        assert!(!batch.is_empty());
        from = batch.last().map(|r| r.offset + 1).unwrap_or(from);
        out.extend(batch);
    }
    out
}

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future to completion on this thread (no runtime: proves the ticket wakes).
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park_timeout(Duration::from_secs(5));
    }
}

/// What the files of a [`ProbedDir`] share: a switch making `fdatasync` fail with EIO, and
/// a count of the bytes they handed out to reads.
#[derive(Debug, Default)]
pub struct Probe {
    pub fail_sync: AtomicBool,
    pub read_bytes: AtomicU64,
}

/// A real directory (`FsDir`, `MemDir`) whose files report to a shared [`Probe`].
pub struct ProbedDir<D> {
    pub inner: D,
    pub probe: Arc<Probe>,
}

struct ProbedFile {
    inner: Arc<dyn SegmentFile>,
    probe: Arc<Probe>,
}

impl SegmentFile for ProbedFile {
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let n = self.inner.read_at(buf, pos)?;
        self.probe.read_bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn write_all_at(&self, data: &[u8], pos: u64) -> io::Result<()> {
        self.inner.write_all_at(data, pos)
    }
    fn sync_data(&self) -> io::Result<()> {
        if self.probe.fail_sync.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

impl<D> ProbedDir<D> {
    fn wrap(&self, file: Arc<dyn SegmentFile>) -> Arc<dyn SegmentFile> {
        Arc::new(ProbedFile {
            inner: file,
            probe: self.probe.clone(),
        })
    }
}

impl<D: Dir> Dir for ProbedDir<D> {
    fn list(&self) -> io::Result<Vec<String>> {
        self.inner.list()
    }
    fn open(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        Ok(self.wrap(self.inner.open(name)?))
    }
    fn create(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        Ok(self.wrap(self.inner.create(name)?))
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.inner.remove(name)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
}
