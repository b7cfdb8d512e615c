//! Reading a segment in large chunks: each entry is handed out as a zero-copy slice of
//! the chunk it was read into (the one copy from the kernel into our buffer).

use std::io;

use bytes::Bytes;

use crate::file::{SegmentFile, read_exact_at};

pub(crate) struct ChunkReader<'a> {
    file: &'a dyn SegmentFile,
    /// File offset past which nothing is read (the segment's readable end).
    end: u64,
    chunk: Bytes,
    chunk_pos: u64,
    chunk_size: usize,
}

impl<'a> ChunkReader<'a> {
    pub(crate) fn new(file: &'a dyn SegmentFile, end: u64, chunk_size: usize) -> Self {
        ChunkReader {
            file,
            end,
            chunk: Bytes::new(),
            chunk_pos: 0,
            chunk_size,
        }
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
        let mut buf = vec![0u8; n];
        read_exact_at(self.file, &mut buf, pos)?;
        self.chunk = Bytes::from(buf);
        self.chunk_pos = pos;
        Ok(())
    }
}
