/*!
Connection slots: at most `max_connections` connections at once, at most
`max_connections_per_peer` from one IP address, and no slot a client can
hold by saying nothing.

Each connection owns a [`Slot`] for as long as it is open; the source marks
it [`Busy`] while it works on what the client sent (parsing, appending,
answering) and idle while it waits for the client. When every slot is taken,
the next connection makes room by closing the connection that has been idle
longest, if that one has been idle for at least [`EVICTION_GRACE`]. Only
when every connection is busy or has just spoken does the new one wait (in
the kernel's backlog, as before). So idle connections never keep a sender
out, and yet a long-lived connection (a syslog relay that sends a message a
minute) is never closed while the listener has room: idle timeouts can stay
long.

A connection from a peer that already has `max_connections_per_peer` open
is closed at once. Both are counted in
`holdfast_listener_closed_connections_total{reason}`.
*/

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use tracing::{debug, warn};

use super::Listener;
use crate::metrics::{Metrics, SourceReasonLabels, LISTENER_CLOSE_REASONS};

/// How long a connection must have been idle before a new one may close it
/// to take its slot: longer than the pause between two requests or two
/// writes of a client that is working, short enough that a sender kept out
/// by idle connections waits about this long.
pub(crate) const EVICTION_GRACE: Duration = Duration::from_secs(1);

/// Why the listener closed a connection: the metric's `reason`, in the
/// order of [`LISTENER_CLOSE_REASONS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CloseReason {
    /// Its peer already had `max_connections_per_peer` open.
    PerPeerLimit,
    /// Idle longest when a new connection needed its slot.
    IdleEvicted,
    TlsHandshakeTimeout,
    /// A client that speaks no TLS, or without a valid certificate.
    TlsHandshakeFailed,
}

impl CloseReason {
    fn index(self) -> usize {
        self as usize
    }
}

/// The slots of one listener; shared by its accept loop and connections.
pub(crate) struct Slots {
    source: String,
    max: usize,
    per_peer: usize,
    /// Instants are kept as milliseconds since this, in atomics.
    epoch: Instant,
    table: Mutex<Table>,
    /// Woken when a slot is given back.
    freed: Notify,
    closed: [Counter; 4],
}

#[derive(Default)]
struct Table {
    next_id: u64,
    /// The open connections that hold a slot (an evicted one leaves at
    /// once, though its task may take a moment to end).
    open: HashMap<u64, (IpAddr, Arc<State>)>,
    /// Open connections by peer.
    peers: HashMap<IpAddr, usize>,
    /// Every [`Slot`] not yet dropped, evicted ones included: the drain at
    /// stop waits for this to reach zero.
    live: usize,
}

/// What the accept loop and the connection know of each other.
struct State {
    /// Pieces of work under way; the connection is idle at 0.
    busy: AtomicU32,
    /// When the connection last became idle or received bytes.
    idle_since_ms: AtomicU64,
    /// Cancelled when the slot is taken back.
    evict: CancellationToken,
}

/// What becomes of a new connection.
enum Admission {
    /// It has a slot: serve it.
    Serve(Slot),
    /// Closed at once (already counted).
    Refused,
    /// The source is stopping.
    Stopping,
}

impl Slots {
    pub(crate) fn new(source: &str, listener: &Listener, metrics: &Metrics) -> Arc<Slots> {
        let closed = LISTENER_CLOSE_REASONS.map(|reason| {
            metrics
                .sources
                .connections_closed
                .get_or_create(&SourceReasonLabels {
                    source: source.to_string(),
                    reason: reason.to_string(),
                })
                .clone()
        });
        Arc::new(Slots {
            source: source.to_string(),
            max: listener.max_connections.get(),
            per_peer: listener.max_connections_per_peer.get(),
            epoch: Instant::now(),
            table: Mutex::new(Table::default()),
            freed: Notify::new(),
            closed,
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn count(&self, reason: CloseReason) {
        self.closed[reason.index()].inc();
    }

    /// The next connection that gets a slot, as [`Slots::admit`] decides;
    /// `None` once `stop` is cancelled.
    pub(crate) async fn accept(
        self: &Arc<Self>,
        listener: &TcpListener,
        stop: &CancellationToken,
    ) -> Option<(Slot, TcpStream, SocketAddr)> {
        loop {
            let (stream, peer) = tokio::select! {
                _ = stop.cancelled() => return None,
                r = listener.accept() => match r {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of descriptors, most likely: back off briefly
                        // rather than spin.
                        warn!(source = %self.source, error = %e,
                            "accepting a connection failed (out of file descriptors?); trying again");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            match self.admit(peer.ip(), stop).await {
                Admission::Serve(slot) => return Some((slot, stream, peer)),
                Admission::Refused => continue,
                Admission::Stopping => return None,
            }
        }
    }

    /// A slot for a new connection from `peer`: at once if one is free,
    /// by closing the connection idle longest if that one has been idle
    /// for [`EVICTION_GRACE`], or once one of those happens.
    async fn admit(self: &Arc<Self>, peer: IpAddr, stop: &CancellationToken) -> Admission {
        loop {
            let freed = self.freed.notified();
            let wait = match self.try_admit(peer) {
                Ok(a) => return a,
                Err(wait) => wait,
            };
            tokio::select! {
                _ = stop.cancelled() => return Admission::Stopping,
                _ = freed => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// An admission, or how long to wait before trying again.
    fn try_admit(self: &Arc<Self>, peer: IpAddr) -> Result<Admission, Duration> {
        let peer = canonical(peer);
        let now = self.now_ms();
        let grace = EVICTION_GRACE.as_millis() as u64;
        let mut t = self.table();
        if t.peers.get(&peer).copied().unwrap_or(0) >= self.per_peer {
            drop(t);
            self.count(CloseReason::PerPeerLimit);
            debug!(source = %self.source, %peer, "connection closed: max_connections_per_peer reached");
            return Ok(Admission::Refused);
        }
        if t.open.len() >= self.max {
            let idlest = t
                .open
                .iter()
                .filter(|(_, (_, s))| s.busy.load(Ordering::Acquire) == 0)
                .map(|(id, (_, s))| (s.idle_since_ms.load(Ordering::Acquire), *id))
                .min();
            match idlest {
                Some((since, id)) if now.saturating_sub(since) >= grace => {
                    if let Some((old_peer, state)) = remove(&mut t, id) {
                        state.evict.cancel();
                        self.count(CloseReason::IdleEvicted);
                        debug!(source = %self.source, peer = %old_peer, idle_ms = now - since,
                            "idle connection closed to make room for a new one (max_connections reached)");
                    }
                }
                // Every connection is at work: wait for one to end or
                // to have been idle long enough.
                Some((since, _)) => return Err(Duration::from_millis(grace - (now - since))),
                None => return Err(EVICTION_GRACE / 4),
            }
        }
        let id = t.next_id;
        t.next_id += 1;
        let state = Arc::new(State {
            busy: AtomicU32::new(0),
            idle_since_ms: AtomicU64::new(now),
            evict: CancellationToken::new(),
        });
        t.open.insert(id, (peer, state.clone()));
        *t.peers.entry(peer).or_insert(0) += 1;
        t.live += 1;
        Ok(Admission::Serve(Slot {
            slots: self.clone(),
            id,
            state,
        }))
    }

    /// Once the accept loop stopped: ends the connections that are not
    /// watching the source's stop themselves (those still in their TLS
    /// handshake, which would otherwise hold the stop for up to
    /// `tls_handshake_timeout`), and waits until every connection has
    /// ended.
    pub(crate) async fn drain(&self) {
        for (_, state) in self.table().open.values() {
            state.evict.cancel();
        }
        loop {
            let freed = self.freed.notified();
            if self.table().live == 0 {
                return;
            }
            freed.await;
        }
    }
}

fn remove(t: &mut Table, id: u64) -> Option<(IpAddr, Arc<State>)> {
    let (peer, state) = t.open.remove(&id)?;
    if let Some(n) = t.peers.get_mut(&peer) {
        *n -= 1;
        if *n == 0 {
            t.peers.remove(&peer);
        }
    }
    Some((peer, state))
}

/// An IPv4 peer on a dual-stack socket is the same peer as over IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// A connection's place; dropping it gives the place back.
pub(crate) struct Slot {
    slots: Arc<Slots>,
    id: u64,
    state: Arc<State>,
}

impl Slot {
    /// Marks the connection at work until the guard is dropped: it cannot
    /// be evicted meanwhile.
    pub(crate) fn busy(&self) -> Busy {
        self.state.busy.fetch_add(1, Ordering::AcqRel);
        Busy {
            slots: self.slots.clone(),
            state: self.state.clone(),
        }
    }

    /// Completes when the slot was taken back for a new connection: the
    /// connection should end (keeping what it has read).
    pub(crate) fn evicted(&self) -> WaitForCancellationFuture<'_> {
        self.state.evict.cancelled()
    }

    /// Counts the connection as closed by the listener for `reason`.
    pub(crate) fn closed(&self, reason: CloseReason) {
        self.slots.count(reason);
    }

    /// Wraps the connection's stream so that bytes received count as
    /// activity.
    pub(crate) fn track<IO>(&self, io: IO) -> Tracked<IO> {
        Tracked {
            io,
            slots: self.slots.clone(),
            state: self.state.clone(),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = self.slots.table();
        remove(&mut t, self.id);
        t.live -= 1;
        drop(t);
        self.slots.freed.notify_waiters();
    }
}

/// See [`Slot::busy`].
pub(crate) struct Busy {
    slots: Arc<Slots>,
    state: Arc<State>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        // Idle from now, not from before the work: the grace starts here.
        let now = self.slots.now_ms();
        self.state.idle_since_ms.store(now, Ordering::Release);
        self.state.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A stream whose reads mark its connection active (see [`Slot::track`]).
pub(crate) struct Tracked<IO> {
    io: IO,
    slots: Arc<Slots>,
    state: Arc<State>,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Tracked<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let now = self.slots.now_ms();
            self.state.idle_since_ms.store(now, Ordering::Release);
        }
        r
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Tracked<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroUsize;

    fn slots(max: usize, per_peer: usize) -> Arc<Slots> {
        let l = Listener {
            listen: "127.0.0.1:0".parse().unwrap(),
            max_connections: NonZeroUsize::new(max).unwrap(),
            max_connections_per_peer: NonZeroUsize::new(per_peer).unwrap(),
            tls_handshake_timeout: Duration::from_secs(1),
            tls: None,
        };
        Slots::new("s", &l, &Metrics::new(None))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn serve(a: Result<Admission, Duration>) -> Slot {
        match a {
            Ok(Admission::Serve(s)) => s,
            _ => panic!("not admitted"),
        }
    }

    #[test]
    fn a_full_listener_closes_the_connection_idle_longest() {
        let s = slots(2, 2);
        let a = serve(s.try_admit(ip("10.0.0.1")));
        std::thread::sleep(Duration::from_millis(10));
        let b = serve(s.try_admit(ip("10.0.0.2")));
        // Both just arrived: nothing to evict yet.
        assert!(s.try_admit(ip("10.0.0.3")).is_err());
        let _work = b.busy();
        std::thread::sleep(EVICTION_GRACE);
        let c = serve(s.try_admit(ip("10.0.0.3")));
        assert!(a.state.evict.is_cancelled(), "the idle one makes room");
        assert!(!b.state.evict.is_cancelled(), "a busy one is never evicted");
        assert_eq!(s.closed[CloseReason::IdleEvicted.index()].get(), 1);
        // The evicted slot still counts as live until its task ends.
        drop((a, c));
        assert_eq!(s.table().live, 1);
    }

    #[test]
    fn a_peer_past_its_limit_is_refused() {
        let s = slots(8, 2);
        let _a = serve(s.try_admit(ip("10.0.0.1")));
        let b = serve(s.try_admit(ip("::ffff:10.0.0.1")));
        assert!(matches!(
            s.try_admit(ip("10.0.0.1")),
            Ok(Admission::Refused)
        ));
        let _c = serve(s.try_admit(ip("10.0.0.2")));
        drop(b);
        let _d = serve(s.try_admit(ip("10.0.0.1")));
        assert_eq!(s.closed[CloseReason::PerPeerLimit.index()].get(), 1);
    }
}
