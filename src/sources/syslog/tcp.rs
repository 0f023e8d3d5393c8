/*!
The TCP listener (optionally TLS, RFC 5425) and its connections, in the
slots of `src/sources/listen/` (`max_connections`, per peer, and the idle
eviction that keeps a slot from being held by a client that says nothing).

A connection reads, frames and appends in turn: everything one read
brought is one batch (split at `batch_bytes`), and the next read starts
only once that batch is durable. So a full log under `when_full = "block"`
stops the reads, and TCP flow control stops the sender. Its slot is busy
from a read's return to the next read, so a connection waiting on the log
is never evicted; while it waits for the sender it is idle. A connection
that sends nothing for `idle_timeout` (a half-open one, a stuck sender) is
closed; so is an idle one whose slot a new connection needs, and a TLS
handshake must finish within `tls_handshake_timeout`.

What a connection holds (its batch, and its read buffer past a small base)
comes out of one budget for the whole source, `max_buffer_size`
(`memory.rs`): a connection that finds none appends what it has and waits
for room before it reads again, and its sender waits with it.

On stop, the listener closes, each connection appends what it has read and
returns; `serve` returns once every connection has.
*/

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::append::{now_ns, Appender, WhenNoRoom};
use super::framing::{Frame, Framer};
use super::mapping::{Message, Pending};
use super::memory::Memory;
use super::metrics::SyslogSourceMetrics;
use super::SyslogSourceSettings;
use crate::component::ComponentContext;
use crate::metrics::SourceLabels;
use crate::sources::budget::Budget;
use crate::sources::listen::{HandshakeError, ServerTls, Slot, Slots};

/// Serves `listener` (with `tls` if set) until the source's stop.
pub(super) async fn serve(
    ctx: ComponentContext,
    opts: SyslogSourceSettings,
    listener: TcpListener,
    tls: Option<ServerTls>,
    appender: Arc<Appender>,
) -> anyhow::Result<()> {
    let name = &ctx.name;
    let addr = listener.local_addr().unwrap_or(opts.listener.listen);
    info!(source = %name, %addr, tls = tls.is_some(), "syslog source listening on TCP");
    let slots = Slots::new(name, &opts.listener, &ctx.metrics);
    let stop = ctx.stop.clone();
    let opts = Arc::new(opts);
    let tls = tls.map(Arc::new);
    let budget = Budget::with_bytes(opts.max_buffer_size);
    let waits = ctx
        .metrics
        .group::<SyslogSourceMetrics>()
        .budget_waits
        .get_or_create(&SourceLabels {
            source: name.clone(),
        })
        .clone();
    while let Some((slot, stream, peer)) = slots.accept(&listener, &stop).await {
        let memory = Memory::new(
            budget.empty(),
            waits.clone(),
            opts.max_message_size,
            Framer::initial_capacity(opts.max_message_size),
        );
        let conn = Connection {
            peer,
            opts: opts.clone(),
            appender: appender.clone(),
            stop: stop.clone(),
            slot,
            client_subject: None,
        };
        tokio::spawn(conn.start(stream, tls.clone(), memory));
    }
    drop(listener);
    slots.drain().await;
    info!(source = %name, "syslog source stopped; every connection's messages were appended");
    Ok(())
}

struct Connection {
    peer: SocketAddr,
    opts: Arc<SyslogSourceSettings>,
    appender: Arc<Appender>,
    stop: CancellationToken,
    /// Dropped when the connection ends: frees a place for the next one.
    slot: Slot,
    /// The subject of the client's verified certificate.
    client_subject: Option<String>,
}

impl Connection {
    async fn start(mut self, stream: TcpStream, tls: Option<Arc<ServerTls>>, memory: Memory) {
        let Some(tls) = tls else {
            return self.run(stream, memory).await;
        };
        let timeout = self.opts.listener.tls_handshake_timeout;
        match tls.handshake(stream, timeout, &self.slot).await {
            Ok((s, subject)) => {
                self.client_subject = subject;
                self.run(s, memory).await
            }
            // Its slot was needed: counted by the listener, not a failure.
            Err(e @ HandshakeError::Evicted) => debug!(source = %self.appender.name,
                peer = %self.peer, "{e}"),
            Err(e) => self.failed("tls", &e.to_string()),
        }
    }

    fn failed(&self, reason: &str, why: &str) {
        debug!(source = %self.appender.name, peer = %self.peer, reason, why, "syslog connection ended early");
        self.appender.connection_error(reason);
    }

    /// Adds `f` to the batch once the budget has room for it, appending
    /// the batch first if it has not.
    async fn push(&self, pending: &mut Pending, memory: &mut Memory, f: Frame) {
        if !memory.room_for_event(pending.bytes(), f.bytes.len()) {
            self.appender
                .flush(pending, WhenNoRoom::Wait, &self.stop)
                .await;
            // Stopping: the message is kept all the same (the last append
            // takes it or counts it lost).
            memory.wait_for_event(f.bytes.len(), &self.stop).await;
        }
        pending.push(Message {
            bytes: &f.bytes,
            peer: self.peer.ip(),
            client_subject: self.client_subject.as_deref(),
            original_len: f.original_len,
            observed_ns: now_ns(),
        });
    }

    async fn run<S: AsyncRead + Unpin>(self, mut io: S, mut memory: Memory) {
        let mut framer = Framer::new(self.opts.max_message_size);
        let mut pending = self.appender.pending();
        let wait = WhenNoRoom::Wait;
        loop {
            let busy = self.slot.busy();
            let mut broken = false;
            loop {
                match framer.next_frame() {
                    Ok(Some(f)) => self.push(&mut pending, &mut memory, f).await,
                    Ok(None) => break,
                    Err(e) => {
                        self.failed("bad_frame", &e.to_string());
                        if let Some(rest) = framer.rest() {
                            self.push(&mut pending, &mut memory, rest).await;
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
            let pinned = framer.holds_head();
            if !memory
                .room_to_read(framer.buffer(), pinned, &self.stop)
                .await
            {
                return;
            }
            drop(busy);
            let read = tokio::select! {
                _ = self.stop.cancelled() => None,
                // Counted by the listener (`idle_evicted`).
                _ = self.slot.evicted() => None,
                r = tokio::time::timeout(self.opts.idle_timeout, io.read_buf(framer.buffer())) => Some(r),
            };
            let _busy = self.slot.busy();
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
                self.push(&mut pending, &mut memory, f).await;
            }
            self.appender.flush(&mut pending, wait, &self.stop).await;
            return;
        }
    }
}
