//! `raw`: the same bytes over plain tokio TCP, the physical limit the others are held against.
//!
//! Each message is its body behind a length prefix, mirroring ZMTP's short and long frames:
//!
//! | body length      | bytes on the wire                         |
//! |------------------|-------------------------------------------|
//! | `0..=0xFE`       | `len: u8`, body                           |
//! | `0xFF..`         | `0xFF`, `len: u64` big-endian, body       |
//!
//! The sender batches about 256 KiB per vectored write: small bodies are copied into one
//! buffer, bodies of 4 KiB and more are queued as they are. The receiver reads at least
//! 256 KiB at a time (or the rest of a large message) and splits messages out without copying.
//! While the rest of a large message is at least 64 KiB, the receiver sets `SO_RCVLOWAT` to it
//! (as dafka's connections do), so the kernel wakes it once per message rather than per segment.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{Backend, expired};
use crate::cli::{Endpoint, MAX_SIZE, Role};
use crate::error::BenchError;

/// Marker byte announcing an 8-byte length.
const LONG: u8 = 0xFF;
/// Bytes gathered before the sender writes them out.
const BATCH: usize = 256 * 1024;
/// Bodies at least this large are not copied into the batch but written beside it.
const ZERO_COPY: usize = 4 * 1024;
/// Free space the receiver makes before each read.
const READ_CHUNK: usize = 256 * 1024;
/// Smallest receive low-water mark the receiver sets; below it, the kernel default (1).
const LOWAT_MIN: usize = 64 * 1024;

/// Sets `SO_RCVLOWAT` on `stream`.
#[allow(unsafe_code)]
fn set_recv_lowat(stream: &TcpStream, bytes: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor belongs to `stream`, borrowed for the call; SO_RCVLOWAT reads
    // one `c_int` from the pointer (to `value`, alive for the call) and keeps nothing.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            std::ptr::from_ref(&value).cast::<libc::c_void>(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Appends the length prefix of a `len`-byte body to `out`.
fn put_header(out: &mut BytesMut, len: usize) {
    match u8::try_from(len) {
        Ok(short) if short != LONG => out.extend_from_slice(&[short]),
        _ => {
            out.extend_from_slice(&[LONG]);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
}

/// Splits one whole message off the front of `buf`, or returns `Ok(None)` if more bytes are
/// needed. Lengths above [`MAX_SIZE`] are refused before anything is reserved for them.
fn take_message(buf: &mut BytesMut) -> Result<Option<Bytes>, BenchError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let (header, len) = if first == LONG {
        let Some(raw) = buf.get(1..9) else {
            return Ok(None);
        };
        let mut be = [0u8; 8];
        be.copy_from_slice(raw);
        let len = u64::from_be_bytes(be);
        match usize::try_from(len) {
            Ok(len) if len <= MAX_SIZE => (9, len),
            _ => {
                return Err(BenchError::Peer(format!(
                    "raw frame of {len} bytes is too large"
                )));
            }
        }
    } else {
        (1, usize::from(first))
    };
    if buf.len() < header + len {
        return Ok(None);
    }
    buf.advance(header);
    Ok(Some(buf.split_to(len).freeze()))
}

/// Outgoing bytes not yet written: small messages copied into `cur`, large bodies kept as
/// their own `Bytes`, all written with vectored writes.
#[derive(Debug, Default)]
struct Outbox {
    chunks: VecDeque<Bytes>,
    cur: BytesMut,
    queued: usize,
}

impl Outbox {
    fn push(&mut self, body: &Bytes) {
        put_header(&mut self.cur, body.len());
        if body.len() >= ZERO_COPY {
            self.chunks.push_back(self.cur.split().freeze());
            self.chunks.push_back(body.clone());
        } else {
            self.cur.extend_from_slice(body);
        }
        self.queued += body.len() + 9;
    }

    async fn write_to(&mut self, stream: &mut TcpStream) -> Result<(), BenchError> {
        if !self.cur.is_empty() {
            self.chunks.push_back(self.cur.split().freeze());
        }
        while !self.chunks.is_empty() {
            let written = {
                let slices: Vec<IoSlice<'_>> = self
                    .chunks
                    .iter()
                    .take(64)
                    .map(|c| IoSlice::new(c))
                    .collect();
                stream.write_vectored(&slices).await?
            };
            if written == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into());
            }
            let mut left = written;
            while let Some(front) = self.chunks.front_mut() {
                if left < front.len() {
                    front.advance(left);
                    break;
                }
                left -= front.len();
                self.chunks.pop_front();
            }
        }
        self.queued = 0;
        Ok(())
    }
}

/// A raw TCP connection with a write batch and a read buffer.
#[derive(Debug)]
pub(crate) struct Raw {
    stream: TcpStream,
    out: Outbox,
    inbuf: BytesMut,
    /// REQ and REP flush every message; PUSH batches.
    flush_each: bool,
    /// The receive low-water mark currently set on `stream`.
    lowat: usize,
}

impl Raw {
    async fn write_out(&mut self) -> Result<(), BenchError> {
        self.out.write_to(&mut self.stream).await
    }

    async fn send_bytes(&mut self, body: &Bytes) -> Result<(), BenchError> {
        self.out.push(body);
        if self.flush_each || self.out.queued >= BATCH {
            self.write_out().await?;
        }
        Ok(())
    }
}

/// How many more bytes `buf` must hold before the message at its front is complete
/// (at least one, so an empty or partial header asks for a read too).
fn missing(buf: &[u8]) -> usize {
    match buf.first() {
        Some(&LONG) => match buf.get(1..9) {
            Some(raw) => {
                let mut be = [0u8; 8];
                be.copy_from_slice(raw);
                // Capped: the length is checked against MAX_SIZE before it is trusted.
                let len = usize::try_from(u64::from_be_bytes(be)).unwrap_or(MAX_SIZE);
                (9 + len.min(MAX_SIZE)).saturating_sub(buf.len()).max(1)
            }
            None => 9 - buf.len(),
        },
        Some(&short) => (1 + usize::from(short)).saturating_sub(buf.len()).max(1),
        None => 1,
    }
}

async fn connect_retrying(endpoint: &Endpoint, deadline: Instant) -> Result<TcpStream, BenchError> {
    loop {
        match TcpStream::connect(endpoint.addr).await {
            Ok(s) => return Ok(s),
            Err(e) if expired(deadline) => return Err(e.into()),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
}

impl Backend for Raw {
    type Msg = Bytes;

    async fn open(
        role: Role,
        endpoint: &Endpoint,
        deadline: Instant,
        curve: bool,
    ) -> Result<Self, BenchError> {
        if curve {
            return Err(super::no_curve("raw"));
        }
        let stream = if role.binds() {
            let listener = TcpListener::bind(endpoint.addr).await?;
            listener.accept().await?.0
        } else {
            connect_retrying(endpoint, deadline).await?
        };
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            out: Outbox::default(),
            inbuf: BytesMut::with_capacity(2 * READ_CHUNK),
            flush_each: matches!(role, Role::Req | Role::Rep | Role::Handshake),
            lowat: 1,
        })
    }

    async fn send(&mut self, payload: &Bytes, _deadline: Instant) -> Result<(), BenchError> {
        self.send_bytes(payload).await
    }

    async fn flush(&mut self, _deadline: Instant) -> Result<(), BenchError> {
        self.write_out().await
    }

    async fn recv(&mut self, _deadline: Instant) -> Result<Bytes, BenchError> {
        loop {
            if let Some(msg) = take_message(&mut self.inbuf)? {
                return Ok(msg);
            }
            // Room for the rest of the current message (bounded by MAX_SIZE) or a read chunk, whichever is larger, so one read can complete a large message.
            let miss = missing(&self.inbuf);
            let lowat = if miss >= LOWAT_MIN {
                miss.min(1 << 20)
            } else {
                1
            };
            if lowat != self.lowat {
                set_recv_lowat(&self.stream, lowat)?;
                self.lowat = lowat;
            }
            let want = miss.max(READ_CHUNK);
            if self.inbuf.capacity() - self.inbuf.len() < want {
                self.inbuf.reserve(want);
            }
            if self.stream.read_buf(&mut self.inbuf).await? == 0 {
                return Err(BenchError::Peer("connection closed mid-test".into()));
            }
        }
    }

    fn msg_len(msg: &Bytes) -> usize {
        msg.len()
    }

    async fn reply(&mut self, msg: Bytes, _deadline: Instant) -> Result<(), BenchError> {
        self.send_bytes(&msg).await
    }

    async fn close(mut self) -> Result<(), BenchError> {
        self.write_out().await?;
        self.stream.shutdown().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_prefixes_round_trip() {
        let mut buf = BytesMut::new();
        for len in [0usize, 1, 254, 255, 256, 70_000] {
            put_header(&mut buf, len);
            buf.extend(std::iter::repeat_n(7u8, len));
        }
        assert_eq!(&buf[..1], &[0]);
        for len in [0usize, 1, 254, 255, 256, 70_000] {
            let msg = take_message(&mut buf).unwrap().unwrap();
            assert_eq!(msg.len(), len);
        }
        assert!(take_message(&mut buf).unwrap().is_none());
    }

    #[test]
    fn missing_counts_the_rest_of_the_front_message() {
        assert_eq!(missing(&[]), 1);
        assert_eq!(missing(&[3, 1]), 2);
        assert_eq!(missing(&[0]), 1);
        assert_eq!(missing(&[LONG, 0]), 7);
        let mut long = vec![LONG];
        long.extend_from_slice(&1000u64.to_be_bytes());
        assert_eq!(missing(&long), 1000);
        let mut huge = vec![LONG];
        huge.extend_from_slice(&u64::MAX.to_be_bytes());
        assert_eq!(missing(&huge), MAX_SIZE);
    }

    #[test]
    fn partial_input_waits_and_oversize_is_refused() {
        let mut buf = BytesMut::from(&[LONG, 0, 0][..]);
        assert!(take_message(&mut buf).unwrap().is_none());
        let mut buf = BytesMut::from(&[5u8, 1, 2][..]);
        assert!(take_message(&mut buf).unwrap().is_none());
        assert_eq!(buf.len(), 3);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[LONG]);
        buf.extend_from_slice(&u64::MAX.to_be_bytes());
        assert!(matches!(take_message(&mut buf), Err(BenchError::Peer(_))));
    }
}
