//! The one socket option std, tokio and socket2 do not expose: `SO_RCVLOWAT`.
//!
//! A connection reading a large frame knows how many bytes are still to come.
//! Telling the kernel (`SO_RCVLOWAT`) lets it report the socket readable once
//! that many bytes are waiting instead of at every arriving segment: one
//! wake-up per large frame instead of several. On loopback with 256 KiB
//! messages this halves the receiver's context switches and takes about a
//! quarter off the sender's CPU time per message (the sender's CPU runs the
//! receiver's wake-ups), see BENCHMARKS.md.
//!
//! Linux reports a TCP socket readable below the mark anyway when the peer
//! closes or an error is pending, caps the mark at half the largest receive
//! buffer and grows the receive buffer to fit it, so a mark can delay a read
//! but never strand bytes that cannot arrive.

use std::io;
use std::os::fd::BorrowedFd;

/// Sets `SO_RCVLOWAT` on the socket `fd` to `bytes` (clamped to `c_int`).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[allow(unsafe_code)]
pub(crate) fn set_recv_lowat(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `fd` is borrowed, so it stays open for the call. SO_RCVLOWAT
    // reads exactly one `c_int` from the pointer, which points at `value`
    // (alive for the call), and `len` is that size. Nothing is retained.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            std::ptr::from_ref(&value).cast::<libc::c_void>(),
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Elsewhere the mark is left alone: reads happen at every arrival.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn set_recv_lowat(_fd: BorrowedFd<'_>, _bytes: usize) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn readable_only_once_the_mark_is_reached() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut writer = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut reader, _) = listener.accept().await.unwrap();
        // Loopback's MSS is about 64 KiB, and Linux reports a socket readable whatever the
        // mark while the receive window is under one MSS: move some megabytes first so the
        // window grows, as it does on any busy connection.
        let bulk = vec![7u8; 16 << 20];
        let (_, sent) = tokio::join!(
            async {
                let mut buf = vec![0u8; 1 << 20];
                let mut got = 0;
                while got < bulk.len() {
                    got += reader.read(&mut buf).await.unwrap();
                }
            },
            writer.write_all(&bulk)
        );
        sent.unwrap();
        set_recv_lowat(reader.as_fd(), 1000).unwrap();
        writer.write_all(&[7; 10]).await.unwrap();
        let early = tokio::time::timeout(Duration::from_millis(200), reader.readable()).await;
        assert!(early.is_err(), "readable with 10 of 1000 bytes waiting");
        writer.write_all(&[7; 990]).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), reader.readable())
            .await
            .expect("not readable with 1000 bytes waiting")
            .unwrap();
        // Lowering the mark below what is waiting reports it at once, and a
        // close is reported whatever the mark.
        set_recv_lowat(reader.as_fd(), 1 << 20).unwrap();
        let mut buf = [0u8; 600];
        assert_eq!(reader.try_read(&mut buf).unwrap(), 600);
        writer.shutdown().await.unwrap();
        drop(writer);
        tokio::time::timeout(Duration::from_secs(5), reader.readable())
            .await
            .expect("a closed peer must wake the reader")
            .unwrap();
    }
}
