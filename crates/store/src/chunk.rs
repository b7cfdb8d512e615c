//! Reading a segment in large chunks: each entry is handed out as a zero-copy slice of
//! the chunk it was read into (the one copy from the kernel into our buffer).

use std::collections::VecDeque;
use std::io;
use std::sync::{Mutex, PoisonError};

use bytes::{Bytes, BytesMut};

use crate::file::{SegmentFile, read_exact_at};

/// The chunks readers read last, kept to be read again and then read into again.
///
/// A store answers a FETCH a few hundred records at a time, far less than a chunk: each
/// answer used to read a new 256 KiB chunk from where the last one stopped, so every byte
/// came from the kernel about twice, into fresh zeroed memory (a `memset` and page faults
/// per read: about a tenth of a store's CPU serving 100 B records). Now a read that starts
/// inside a kept chunk of the same segment takes it as it is (a reference count), and a chunk
/// no record refers to any more is read into again, already written, with no zeroing.
///
/// A kept chunk holds bytes below the segment's readable end when it was read, which never
/// change while the store is open (segments are only appended to, and a segment's name,
/// from its base position in the log, is never used again); reopening a store starts empty.
#[derive(Debug, Default)]
pub(crate) struct ChunkPool {
    kept: Mutex<VecDeque<Kept>>,
}

#[derive(Debug)]
struct Kept {
    segment: String,
    pos: u64,
    chunk: Bytes,
}

impl ChunkPool {
    /// Chunks kept at most (the oldest goes first): 2 MiB of 256 KiB chunks.
    const KEPT: usize = 8;
    /// Smaller chunks (a single entry's) are not worth keeping.
    const MIN_KEPT: usize = 64 << 10;

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Kept>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A kept chunk of `segment` that holds `[pos, pos + len)`, and where it starts.
    fn find(&self, segment: &str, pos: u64, len: usize) -> Option<(u64, Bytes)> {
        let kept = self.lock();
        let k = kept.iter().rev().find(|k| {
            k.segment == segment
                && k.pos <= pos
                && pos.saturating_add(len as u64) <= k.pos + k.chunk.len() as u64
        })?;
        Some((k.pos, k.chunk.clone()))
    }

    /// A kept chunk no record refers to any more, `n` bytes long, its bytes whatever it last
    /// held; `None` if there is none.
    fn take(&self, n: usize) -> Option<BytesMut> {
        let mut kept = self.lock();
        let at = kept.iter().position(|k| k.chunk.is_unique())?;
        let mut buf = kept.remove(at)?.chunk.try_into_mut().ok()?;
        drop(kept);
        if buf.len() >= n {
            buf.truncate(n);
        } else {
            // Only the part past what the chunk held is zeroed (usually none).
            buf.resize(n, 0);
        }
        Some(buf)
    }

    fn give(&self, segment: &str, pos: u64, chunk: Bytes) {
        if chunk.len() < Self::MIN_KEPT {
            return;
        }
        let mut kept = self.lock();
        // Already kept (the reader took it from here): moved to the back.
        if let Some(at) = kept
            .iter()
            .position(|k| k.pos == pos && k.chunk.as_ptr() == chunk.as_ptr())
        {
            let k = kept.remove(at).expect("found");
            kept.push_back(k);
            return;
        }
        if kept.len() == Self::KEPT {
            kept.pop_front();
        }
        kept.push_back(Kept {
            segment: segment.to_owned(),
            pos,
            chunk,
        });
    }
}

pub(crate) struct ChunkReader<'a> {
    file: &'a dyn SegmentFile,
    /// File offset past which nothing is read (the segment's readable end).
    end: u64,
    chunk: Bytes,
    chunk_pos: u64,
    chunk_size: usize,
    /// The pool and the segment's name in it.
    pool: Option<(&'a ChunkPool, &'a str)>,
}

impl<'a> ChunkReader<'a> {
    pub(crate) fn new(file: &'a dyn SegmentFile, end: u64, chunk_size: usize) -> Self {
        ChunkReader {
            file,
            end,
            chunk: Bytes::new(),
            chunk_pos: 0,
            chunk_size,
            pool: None,
        }
    }

    /// Like [`new`](Self::new), its chunks taken from and given back to `pool`, where the
    /// segment `file` is called `segment`.
    pub(crate) fn pooled(
        file: &'a dyn SegmentFile,
        segment: &'a str,
        end: u64,
        chunk_size: usize,
        pool: &'a ChunkPool,
    ) -> Self {
        let mut reader = Self::new(file, end, chunk_size);
        reader.pool = Some((pool, segment));
        reader
    }

    pub(crate) fn end(&self) -> u64 {
        self.end
    }

    /// The bytes `[pos, pos + len)`, or `None` if they run past the end.
    pub(crate) fn get(&mut self, pos: u64, len: usize) -> io::Result<Option<Bytes>> {
        Ok(self
            .range(pos, len)?
            .map(|(start, end)| self.chunk.slice(start..end)))
    }

    /// Like [`get`](Self::get), borrowed (no reference count taken on the chunk).
    pub(crate) fn peek(&mut self, pos: u64, len: usize) -> io::Result<Option<&[u8]>> {
        Ok(self
            .range(pos, len)?
            .map(|(start, end)| &self.chunk[start..end]))
    }

    /// The current chunk: [`range`](Self::range) says where in it the bytes asked for
    /// are, so that they can be looked at borrowed and only the part handed out sliced.
    pub(crate) fn chunk(&self) -> &Bytes {
        &self.chunk
    }

    /// Makes `[pos, pos + len)` part of the chunk; returns where it is in the chunk, or
    /// `None` if it runs past the end.
    /// Inlined: the read loop calls it twice per entry, and it almost always finds the
    /// bytes in the current chunk.
    #[inline]
    pub(crate) fn range(&mut self, pos: u64, len: usize) -> io::Result<Option<(usize, usize)>> {
        let Some(stop) = pos.checked_add(len as u64) else {
            return Ok(None);
        };
        if stop > self.end {
            return Ok(None);
        }
        let chunk_end = self.chunk_pos + self.chunk.len() as u64;
        if pos < self.chunk_pos || stop > chunk_end {
            self.load(pos, len)?;
        }
        let start = (pos - self.chunk_pos) as usize;
        Ok(Some((start, start + len)))
    }

    /// Reads a new chunk starting at `pos`, at least `len` bytes long (`pos + len` is
    /// within `end`).
    #[cold]
    fn load(&mut self, pos: u64, len: usize) -> io::Result<()> {
        // `len` is bounded by `end - pos`, i.e. by the file's length.
        let n = (self.chunk_size.max(len) as u64).min(self.end - pos) as usize;
        let old = std::mem::take(&mut self.chunk);
        let mut buf = match self.pool {
            Some((pool, segment)) => {
                pool.give(segment, self.chunk_pos, old);
                if let Some((at, chunk)) = pool.find(segment, pos, len) {
                    self.chunk = chunk;
                    self.chunk_pos = at;
                    return Ok(());
                }
                pool.take(n).unwrap_or_else(|| BytesMut::zeroed(n))
            }
            None => BytesMut::zeroed(n),
        };
        read_exact_at(self.file, &mut buf, pos)?;
        self.chunk = buf.freeze();
        self.chunk_pos = pos;
        Ok(())
    }
}

impl Drop for ChunkReader<'_> {
    fn drop(&mut self) {
        if let Some((pool, segment)) = self.pool {
            pool.give(segment, self.chunk_pos, std::mem::take(&mut self.chunk));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::MemFile;

    const CHUNK: usize = 64 << 10;

    fn file(len: usize, seed: u8) -> MemFile {
        let f = MemFile::default();
        let bytes: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect();
        f.replace(bytes);
        f
    }

    #[test]
    fn a_chunk_nothing_refers_to_is_read_into_again() {
        let pool = ChunkPool::default();
        let a = file(3 * CHUNK, 1);
        let first_ptr = {
            let mut r = ChunkReader::pooled(&a, "a", 3 * CHUNK as u64, CHUNK, &pool);
            let got = r.get(10, 100).unwrap().unwrap();
            assert_eq!(&got[..], &a.contents()[10..110]);
            r.chunk().as_ptr()
        };
        // Every slice gone: the next read lands in the same memory, with the right bytes.
        let b = file(3 * CHUNK, 2);
        let mut r = ChunkReader::pooled(&b, "b", 3 * CHUNK as u64, CHUNK, &pool);
        let got = r.get(CHUNK as u64, 5000).unwrap().unwrap();
        assert_eq!(&got[..], &b.contents()[CHUNK..CHUNK + 5000]);
        assert_eq!(r.chunk().as_ptr(), first_ptr);
    }

    #[test]
    fn a_chunk_a_record_still_holds_is_never_overwritten() {
        let pool = ChunkPool::default();
        let a = file(4 * CHUNK, 3);
        let mut held = Vec::new();
        {
            let mut r = ChunkReader::pooled(&a, "a", 4 * CHUNK as u64, CHUNK, &pool);
            for i in 0..4 {
                held.push(r.get((i * CHUNK + 7) as u64, 300).unwrap().unwrap());
            }
        }
        let b = file(4 * CHUNK, 4);
        for _ in 0..3 {
            let mut r = ChunkReader::pooled(&b, "b", 4 * CHUNK as u64, CHUNK, &pool);
            for i in 0..4 {
                let got = r.get((i * CHUNK) as u64, 1000).unwrap().unwrap();
                assert_eq!(&got[..], &b.contents()[i * CHUNK..i * CHUNK + 1000]);
            }
        }
        for (i, h) in held.iter().enumerate() {
            assert_eq!(&h[..], &a.contents()[i * CHUNK + 7..i * CHUNK + 307]);
        }
    }

    #[test]
    fn a_shorter_kept_chunk_grows_to_the_size_asked() {
        let pool = ChunkPool::default();
        let a = file(CHUNK + 100, 5);
        {
            let mut r = ChunkReader::pooled(&a, "a", (CHUNK + 100) as u64, CHUNK, &pool);
            r.get(0, 10).unwrap().unwrap();
            // The segment's last chunk is 100 bytes: not kept; the first one is.
            r.get(CHUNK as u64 + 50, 50).unwrap().unwrap();
        }
        let b = file(4 * CHUNK, 6);
        let mut r = ChunkReader::pooled(&b, "b", 4 * CHUNK as u64, 2 * CHUNK, &pool);
        let got = r.get(0, 2 * CHUNK).unwrap().unwrap();
        assert_eq!(&got[..], &b.contents()[..2 * CHUNK]);
    }

    #[test]
    fn a_read_that_starts_inside_a_kept_chunk_of_its_segment_reads_nothing_again() {
        let pool = ChunkPool::default();
        let a = file(3 * CHUNK, 7);
        let (kept, held) = {
            let mut r = ChunkReader::pooled(&a, "a", 3 * CHUNK as u64, CHUNK, &pool);
            let held = r.get(100, 1000).unwrap().unwrap();
            (r.chunk().as_ptr(), held)
        };
        // The records of the last read are still held (being sent): the next read of the same
        // segment shares their chunk.
        let mut r = ChunkReader::pooled(&a, "a", 3 * CHUNK as u64, CHUNK, &pool);
        let got = r.get(1100, 2000).unwrap().unwrap();
        assert_eq!(&got[..], &a.contents()[1100..3100]);
        assert_eq!(r.chunk().as_ptr(), kept);
        drop(r);
        // Another segment with the same positions does not.
        let b = file(3 * CHUNK, 8);
        let mut r = ChunkReader::pooled(&b, "b", 3 * CHUNK as u64, CHUNK, &pool);
        let got = r.get(1100, 2000).unwrap().unwrap();
        assert_eq!(&got[..], &b.contents()[1100..3100]);
        assert_ne!(r.chunk().as_ptr(), kept);
        assert_eq!(&held[..], &a.contents()[100..1100]);
    }
}
