//! The files behind the store: a small trait pair, with the real `std::fs`
//! implementation ([`FsDir`]) and an in-memory one ([`MemDir`], for tests and fuzzing).
//!
//! Tests wrap either to inject faults (an `EIO` from `fdatasync`, a short write); the
//! engine sees nothing but these traits.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::OpenError;

/// One segment file, shared by the writer thread and readers.
pub trait SegmentFile: Send + Sync + 'static {
    /// Current length in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Reads up to `buf.len()` bytes at `pos`; returns how many were read (0 at the end).
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize>;
    /// Writes all of `data` at `pos`.
    fn write_all_at(&self, data: &[u8], pos: u64) -> io::Result<()>;
    /// `fdatasync`: the written data (and the length) are on stable storage when it returns.
    fn sync_data(&self) -> io::Result<()>;
    /// Truncates (or extends with zeros) to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
}

/// The directory holding a store's segment files.
pub trait Dir: Send + Sync + 'static {
    /// Names of every file in the directory (not only segments).
    fn list(&self) -> io::Result<Vec<String>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>>;
    /// Creates a new, empty file; fails if it exists.
    fn create(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>>;
    /// Removes a file (readers that still hold it keep reading it).
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Makes file creations and removals durable (`fsync` of the directory).
    fn sync(&self) -> io::Result<()>;
}

/// Reads exactly `buf.len()` bytes at `pos`, or fails with `UnexpectedEof`.
pub(crate) fn read_exact_at(file: &dyn SegmentFile, buf: &mut [u8], pos: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], pos + done as u64) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A directory on a real filesystem.
#[derive(Debug, Clone)]
pub struct FsDir {
    path: PathBuf,
}

impl FsDir {
    /// Uses `path`, creating it (and its parents) if needed.
    pub fn new(path: impl AsRef<Path>) -> io::Result<Self> {
        std::fs::create_dir_all(path.as_ref())?;
        Ok(FsDir {
            path: path.as_ref().to_owned(),
        })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Locks the directory for one store: an exclusive `flock` on its `store.lock` file,
    /// which names the holder's pid. Fails at once with [`OpenError::Locked`] when another
    /// store (of this process or another) holds it; the lock goes with the process, so a
    /// killed store leaves nothing to clean up.
    pub fn lock(&self) -> Result<DirLock, OpenError> {
        let path = self.path.join(LOCK_FILE);
        let io = |op| {
            let file = path.display().to_string();
            move |source| OpenError::Io { op, file, source }
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io("open"))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(OpenError::Locked {
                    dir: self.path.display().to_string(),
                    holder: text.trim().parse().ok(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io("flock")(e)),
        }
        file.set_len(0).map_err(io("truncate"))?;
        FileExt::write_all_at(&file, format!("{}\n", std::process::id()).as_bytes(), 0)
            .map_err(io("write"))?;
        Ok(DirLock { _file: file })
    }
}

/// The lock file of a store directory (`store.lock`).
pub const LOCK_FILE: &str = "store.lock";

/// A store directory's lock ([`FsDir::lock`]), released when dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl SegmentFile for File {
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, pos)
    }
    fn write_all_at(&self, data: &[u8], pos: u64) -> io::Result<()> {
        FileExt::write_all_at(self, data, pos)
    }
    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }
}

impl Dir for FsDir {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.path)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }
    fn open(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.path.join(name))?;
        Ok(Arc::new(file))
    }
    fn create(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(self.path.join(name))?;
        Ok(Arc::new(file))
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.path.join(name))
    }
    fn sync(&self) -> io::Result<()> {
        File::open(&self.path)?.sync_all()
    }
}

/// An in-memory directory: every write is "durable" at once. Cloning shares the files,
/// so a test can close a store and reopen the same bytes, or damage them in between.
#[derive(Debug, Clone, Default)]
pub struct MemDir {
    files: Arc<Mutex<BTreeMap<String, Arc<MemFile>>>>,
}

/// A file of a [`MemDir`].
#[derive(Debug, Default)]
pub struct MemFile {
    data: Mutex<Vec<u8>>,
}

impl MemFile {
    /// A copy of the file's bytes.
    pub fn contents(&self) -> Vec<u8> {
        self.data
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
    /// Replaces the file's bytes.
    pub fn replace(&self, bytes: Vec<u8>) {
        *self.data.lock().unwrap_or_else(PoisonError::into_inner) = bytes;
    }
}

impl MemDir {
    /// An empty directory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates or replaces `name` with `bytes` (to build a directory from raw bytes).
    pub fn insert(&self, name: &str, bytes: Vec<u8>) {
        self.lock().insert(
            name.to_owned(),
            Arc::new(MemFile {
                data: Mutex::new(bytes),
            }),
        );
    }

    /// The file called `name`, if any.
    pub fn file(&self, name: &str) -> Option<Arc<MemFile>> {
        self.lock().get(name).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<MemFile>>> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SegmentFile for MemFile {
    fn size(&self) -> io::Result<u64> {
        Ok(self
            .data
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len() as u64)
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let data = self.data.lock().unwrap_or_else(PoisonError::into_inner);
        let start = usize::try_from(pos).unwrap_or(usize::MAX).min(data.len());
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }
    fn write_all_at(&self, bytes: &[u8], pos: u64) -> io::Result<()> {
        let mut data = self.data.lock().unwrap_or_else(PoisonError::into_inner);
        let start =
            usize::try_from(pos).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let end = start + bytes.len();
        if data.len() < end {
            data.resize(end, 0);
        }
        data[start..end].copy_from_slice(bytes);
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        self.data
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .resize(len, 0);
        Ok(())
    }
}

impl Dir for MemDir {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.lock().keys().cloned().collect())
    }
    fn open(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        match self.lock().get(name) {
            Some(file) => Ok(file.clone()),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }
    fn create(&self, name: &str) -> io::Result<Arc<dyn SegmentFile>> {
        let mut files = self.lock();
        if files.contains_key(name) {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        let file = Arc::new(MemFile::default());
        files.insert(name.to_owned(), file.clone());
        Ok(file)
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        match self.lock().remove(name) {
            Some(_) => Ok(()),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }
    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}
