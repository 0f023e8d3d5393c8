/*!
The TCP listener (optionally TLS, RFC 5425) and its connections, at most
`max_connections` at once (a semaphore: each connection's task owns its
permit; more wait in the kernel's backlog).

A connection reads, frames and appends in turn: everything one read
brought is one batch (split at `batch_bytes`), and the next read starts
only once that batch is durable. So a full log under `when_full = "block"`
stops the reads, and TCP flow control stops the sender. A connection that
sends nothing for `idle_timeout` (a half-open one, a stuck sender) is
closed; a TLS handshake must finish within it too.

On stop, the listener closes, each connection appends what it has read and
returns; `serve` returns once every connection has.
*/

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::append::{now_ns, Appender, WhenNoRoom};
use super::framing::{Frame, Framer};
use super::mapping::{Message, Pending};
use super::SyslogSourceSettings;
use crate::api::accept_with_permit;
use crate::registry::ComponentContext;

/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 64 << 10;

/// Serves `listener` (with `tls` if set) until the source's stop.
pub(super) async fn serve(
    ctx: ComponentContext,
    opts: SyslogSourceSettings,
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    appender: Arc<Appender>,
) -> anyhow::Result<()> {
    let name = &ctx.name;
    let addr = listener.local_addr().unwrap_or(opts.listener.listen);
    info!(source = %name, %addr, tls = tls.is_some(), "syslog source listening on TCP");
    let max = opts.listener.max_connections.get();
    let permits = Arc::new(Semaphore::new(max));
    let stop = ctx.stop.clone();
    let accept_failed = |e: &io::Error| warn!(source = %name, error = %e, "syslog accept failed");
    let opts = Arc::new(opts);
    while let Some((permit, stream, peer)) =
        accept_with_permit(&listener, &permits, &stop, accept_failed).await
    {
        let conn = Connection {
            peer,
            opts: opts.clone(),
            appender: appender.clone(),
            stop: stop.clone(),
            _permit: permit,
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => conn.run(stream).await,
                Some(acceptor) => {
                    let hs = tokio::time::timeout(conn.opts.idle_timeout, acceptor.accept(stream));
                    match hs.await {
                        Ok(Ok(s)) => conn.run(s).await,
                        Ok(Err(e)) => conn.failed("tls", &e.to_string()),
                        Err(_) => conn.failed("tls", "the TLS handshake timed out"),
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = permits.acquire_many(max as u32).await;
    info!(source = %name, "syslog source stopped; every connection's messages were appended");
    Ok(())
}

struct Connection {
    peer: SocketAddr,
    opts: Arc<SyslogSourceSettings>,
    appender: Arc<Appender>,
    stop: CancellationToken,
    /// Dropped when the connection ends: frees a place for the next one.
    _permit: OwnedSemaphorePermit,
}

impl Connection {
    fn failed(&self, reason: &str, why: &str) {
        debug!(source = %self.appender.name, peer = %self.peer, reason, why, "syslog connection ended early");
        self.appender.connection_error(reason);
    }

    fn push(&self, pending: &mut Pending, f: Frame) {
        pending.push(Message {
            bytes: &f.bytes,
            peer: self.peer.ip(),
            original_len: f.original_len,
            observed_ns: now_ns(),
        });
    }

    async fn run<S: AsyncRead + Unpin>(self, mut io: S) {
        let mut framer = Framer::new(self.opts.max_message_size);
        let mut pending = self.appender.pending();
        let wait = WhenNoRoom::Wait;
        loop {
            let mut broken = false;
            loop {
                match framer.next_frame() {
                    Ok(Some(f)) => self.push(&mut pending, f),
                    Ok(None) => break,
                    Err(e) => {
                        self.failed("bad_frame", &e.to_string());
                        if let Some(rest) = framer.rest() {
                            self.push(&mut pending, rest);
                        }
                        broken = true;
                        break;
                    }
                }
                if pending.bytes() >= self.appender.batch_bytes {
                    self.appender.flush(&mut pending, wait, &self.stop).await;
                }
            }
            // Durable before the next read: the sender goes as fast as the log.
            self.appender.flush(&mut pending, wait, &self.stop).await;
            if broken || self.stop.is_cancelled() {
                return;
            }
            framer.buffer().reserve(READ_CHUNK);
            let read = tokio::select! {
                _ = self.stop.cancelled() => None,
                r = tokio::time::timeout(self.opts.idle_timeout, io.read_buf(framer.buffer())) => Some(r),
            };
            match read {
                Some(Ok(Ok(n))) if n > 0 => continue,
                Some(Ok(Ok(_))) => {}
                Some(Ok(Err(e))) => self.failed("read", &e.to_string()),
                Some(Err(_)) => self.failed("idle_timeout", "nothing received within idle_timeout"),
                None => {}
            }
            // The end of the stream (or of our patience): what is left is
            // the last message.
            if let Some(f) = framer.finish() {
                self.push(&mut pending, f);
            }
            self.appender.flush(&mut pending, wait, &self.stop).await;
            return;
        }
    }
}
