//! A failing disk: `fdatasync` returns EIO through a fault-injecting wrapper around the
//! real filesystem. The store is poisoned: the failed batch and everything after it is
//! never acknowledged, every later append fails with the cause.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use dafka_store::{AppendError, AppendRecord, Config, DurabilityError, FsDir, RecordMeta, Store};

use common::{Probe, ProbedDir, append_one, block_on, key, read_all, value};

/// A store in `dir` whose `fdatasync` fails with EIO while the returned flag is set.
fn open_failing(dir: &std::path::Path) -> (Store, Arc<Probe>) {
    let probe = Arc::new(Probe::default());
    let disk = ProbedDir {
        inner: FsDir::new(dir).unwrap(),
        probe: probe.clone(),
    };
    (
        Store::open(Arc::new(disk), Config::default()).unwrap(),
        probe,
    )
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

    fail.fail_sync.store(true, Ordering::SeqCst);
    let v = value(1, 5, 30);
    let meta = RecordMeta::created(0);
    let rec = |offset| AppendRecord {
        partition: p,
        offset,
        meta: &meta,
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
    fail.fail_sync.store(false, Ordering::SeqCst);
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
    fail.fail_sync.store(true, Ordering::SeqCst);
    let mut tickets = Vec::new();
    for o in 1..200u64 {
        let v = value(1, o, 10);
        match store.append(&[AppendRecord {
            partition: p,
            offset: o,
            meta: &RecordMeta::created(0),
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
