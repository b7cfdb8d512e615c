//! A failing disk: `fdatasync` returns EIO through a fault-injecting wrapper around the
//! real filesystem. The store is poisoned: the failed batch and everything after it is
//! never acknowledged, every later append fails with the cause.

mod common;

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dafka_store::{
    AppendError, AppendRecord, Config, Dir, DurabilityError, FsDir, SegmentFile, Store,
};

use common::{append_one, block_on, key, read_all, value};

/// The real directory, with `fdatasync` failing with EIO while `fail` is set.
struct FailingDisk {
    inner: FsDir,
    fail: Arc<AtomicBool>,
}

struct FailingFile {
    inner: Arc<dyn SegmentFile>,
    fail: Arc<AtomicBool>,
}

impl SegmentFile for FailingFile {
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        self.inner.read_at(buf, pos)
    }
    fn write_all_at(&self, data: &[u8], pos: u64) -> io::Result<()> {
        self.inner.write_all_at(data, pos)
    }
    fn sync_data(&self) -> io::Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

impl FailingDisk {
    fn wrap(&self, file: Arc<dyn SegmentFile>) -> Arc<dyn SegmentFile> {
        Arc::new(FailingFile {
            inner: file,
            fail: self.fail.clone(),
        })
    }
}

/// A store in `dir` whose `fdatasync` fails with EIO while the returned flag is set.
fn open_failing(dir: &std::path::Path) -> (Store, Arc<AtomicBool>) {
    let fail = Arc::new(AtomicBool::new(false));
    let disk = FailingDisk {
        inner: FsDir::new(dir).unwrap(),
        fail: fail.clone(),
    };
    (
        Store::open(Arc::new(disk), Config::default()).unwrap(),
        fail,
    )
}

impl Dir for FailingDisk {
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

#[test]
fn eio_on_fsync_poisons_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, fail) = open_failing(tmp.path());
    let p = store.declare(&key(1)).unwrap();
    for o in 0..5 {
        append_one(&store, p, o, &value(1, o, 30));
    }
    assert!(store.poisoned().is_none());

    fail.store(true, Ordering::SeqCst);
    let v = value(1, 5, 30);
    let rec = |offset| AppendRecord {
        partition: p,
        offset,
        timestamp_ms: 0,
        value: &v,
    };
    let failed = store.append(&[rec(5)]).unwrap();
    let err = failed.wait(Duration::from_secs(10)).unwrap_err();
    assert!(matches!(&err, DurabilityError::Poisoned(cause)
        if cause.op == "fdatasync" && cause.source.raw_os_error() == Some(libc::EIO)));
    // The future form reports the same.
    assert!(matches!(
        block_on(failed.clone()),
        Err(DurabilityError::Poisoned(_))
    ));
    // Nothing after the failure is acknowledged, nor served.
    assert_eq!(store.head(p), Some(5));
    assert_eq!(read_all(&store, p).len(), 5);
    // Every later append and declaration fails, even once the disk "recovers" (the
    // kernel may have dropped the dirty pages: a retry would acknowledge lost data).
    fail.store(false, Ordering::SeqCst);
    let later = store.append(&[rec(6)]);
    assert!(matches!(later, Err(AppendError::Poisoned(ref cause)) if cause.op == "fdatasync"));
    assert!(later.unwrap_err().to_string().contains("poisoned"));
    assert!(matches!(
        store.declare(&key(2)),
        Err(AppendError::Poisoned(_))
    ));
    store.close();

    // What was acknowledged is there after reopening.
    let store = Store::open_path(tmp.path(), Config::default()).unwrap();
    let all = read_all(&store, p);
    assert!(all.len() >= 5);
    for r in all.iter().take(5) {
        assert_eq!(r.value, value(1, r.offset, 30));
    }
}

#[test]
fn appends_queued_behind_a_failed_sync_are_not_acknowledged() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, fail) = open_failing(tmp.path());
    let p = store.declare(&key(1)).unwrap();
    append_one(&store, p, 0, b"ok");
    fail.store(true, Ordering::SeqCst);
    let mut tickets = Vec::new();
    for o in 1..200u64 {
        let v = value(1, o, 10);
        match store.append(&[AppendRecord {
            partition: p,
            offset: o,
            timestamp_ms: 0,
            value: &v,
        }]) {
            Ok(t) => tickets.push(t),
            Err(e) => {
                assert!(matches!(e, AppendError::Poisoned(_)));
                break;
            }
        }
    }
    assert!(!tickets.is_empty());
    for t in tickets {
        assert!(matches!(
            t.wait(Duration::from_secs(10)),
            Err(DurabilityError::Poisoned(_))
        ));
    }
    assert_eq!(store.head(p), Some(1));
}
