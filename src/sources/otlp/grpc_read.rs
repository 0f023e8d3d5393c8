/*!
A gRPC connection's reads, in one socket read per burst of frames.

h2 reads its frames through a buffer that starts at 8 KiB and grows only to
the frame it is decoding, so a call of 26 KB (two 16 KiB DATA frames after
its HEADERS) took about four `recvfrom`s, where hyper's HTTP/1.1 reader,
whose buffer grows with what it reads, takes one (issue 29's bench:
3.9 against 1.1 per request). [`ReadAhead`] reads up to [`READ_AHEAD`]
bytes from the socket whenever h2 asks for fewer and hands them over from
memory; a read shorter than asked also tells tokio the socket is drained,
so no read ends in `EAGAIN` either.

The buffer is held only while it has bytes h2 has not taken: a connection
waiting for its next call holds none. It adds at most `READ_AHEAD` per connection to what
h2 holds, and changes nothing in what a connection may send before the
server reads (HTTP/2 flow control, `docs/sources-otlp.md`).
*/

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How much one socket read may take: two of h2's default 16 KiB frames and
/// the frames around them. Below glibc's 64 KiB threshold at which a free
/// consolidates the allocator's small chunks.
pub(crate) const READ_AHEAD: usize = 32 << 10;

/// A connection's I/O with reads taken [`READ_AHEAD`] bytes at a time;
/// writes go straight through (vectored, as h2 writes).
pub(crate) struct ReadAhead<I> {
    io: I,
    /// Read from the socket, not yet handed to h2; empty (no allocation)
    /// between bursts.
    ahead: BytesMut,
}

impl<I> ReadAhead<I> {
    pub(crate) fn new(io: I) -> ReadAhead<I> {
        ReadAhead {
            io,
            ahead: BytesMut::new(),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for ReadAhead<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if me.ahead.is_empty() {
            // A reader asking for as much as a read-ahead would take gets
            // the bytes straight, without the copy.
            if out.remaining() >= READ_AHEAD {
                return Pin::new(&mut me.io).poll_read(cx, out);
            }
            me.ahead.reserve(READ_AHEAD);
            let read = tokio_util::io::poll_read_buf(Pin::new(&mut me.io), cx, &mut me.ahead);
            match read {
                Poll::Ready(Ok(n)) if n > 0 => {}
                other => {
                    // Waiting for bytes, or at the end of the stream (which
                    // the reader sees as a read of 0): nothing held.
                    me.ahead = BytesMut::new();
                    return other.map_ok(|_| ());
                }
            }
        }
        let n = out.remaining().min(me.ahead.len());
        out.put_slice(&me.ahead[..n]);
        me.ahead.advance(n);
        if me.ahead.is_empty() {
            // Nothing held while the connection waits for its next call.
            me.ahead = BytesMut::new();
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for ReadAhead<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn small_reads_are_served_from_one_large_read_in_order() {
        let (mut a, b) = tokio::io::duplex(1 << 20);
        let sent: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        a.write_all(&sent).await.unwrap();
        drop(a);
        let mut r = ReadAhead::new(b);
        let mut got = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            let n = r.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(got, sent);
        assert!(r.ahead.is_empty() && r.ahead.capacity() == 0);
    }

    #[tokio::test]
    async fn writes_go_through() {
        let (a, mut b) = tokio::io::duplex(1024);
        let mut w = ReadAhead::new(a);
        w.write_all(b"frames").await.unwrap();
        w.flush().await.unwrap();
        let mut got = [0u8; 6];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"frames");
    }
}
