/*!
The listener and its connections: HTTP/1.1 (keep-alive), optionally inside
TLS, in the slots of `src/sources/listen/` (`max_connections`, per peer,
and the idle eviction that keeps a slot from being held by a client that
says nothing).

Each connection's task owns its slot, marked busy while a request is
answered (so a request in flight is never evicted) and idle between
requests; bytes received count as activity. When `stop` is cancelled, the
accept loop closes the listener and then waits for every slot: that returns
only once each connection has finished the request it was serving (hyper's
graceful shutdown lets the response go out, then closes).
*/

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::auth::ClientSubject;
use super::handler;
use super::source::Source;
use crate::sources::listen::{ServerTls, Slot, Slots};

/// Serves until `stop` is cancelled and every connection has ended.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<ServerTls>,
    slots: Arc<Slots>,
    src: Arc<Source>,
    stop: CancellationToken,
) {
    let tls = tls.map(Arc::new);
    while let Some((slot, stream, peer)) = slots.accept(&listener, &stop).await {
        // Answers are small and written once: do not wait to coalesce.
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(
            stream,
            peer,
            tls.clone(),
            src.clone(),
            stop.clone(),
            slot,
        ));
    }
    // New connections are refused from here on; wait for the open ones.
    drop(listener);
    slots.drain().await;
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<Arc<ServerTls>>,
    src: Arc<Source>,
    stop: CancellationToken,
    slot: Slot,
) {
    let stream = slot.track(stream);
    match tls {
        None => http(stream, peer, None, src, stop, slot).await,
        Some(tls) => {
            let timeout = src.opts.listener.tls_handshake_timeout;
            match tls.handshake(stream, timeout, &slot).await {
                Ok((s, subject)) => http(s, peer, subject, src, stop, slot).await,
                Err(e) => {
                    debug!(source = %src.name, %peer, error = %e, "TLS connection not served")
                }
            }
        }
    }
}

async fn http<I>(
    io: I,
    peer: SocketAddr,
    subject: Option<String>,
    src: Arc<Source>,
    stop: CancellationToken,
    slot: Slot,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let s = src.clone();
    let subject = subject.map(|s| ClientSubject(Arc::from(s)));
    let slot = Arc::new(slot);
    let svc_slot = slot.clone();
    let svc = service_fn(move |mut req| {
        let s = s.clone();
        // A request in flight keeps its connection's slot.
        let busy = svc_slot.busy();
        if let Some(subject) = &subject {
            req.extensions_mut().insert(subject.clone());
        }
        async move {
            let resp = handler::handle(s, peer, req).await;
            drop(busy);
            Ok::<_, Infallible>(resp)
        }
    });
    // `header_read_timeout` also runs while a keep-alive connection waits
    // for its next request, so it closes idle connections too.
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(src.opts.header_timeout)
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    let ended = |r: Result<(), hyper::Error>| {
        if let Err(e) = r {
            debug!(source = %src.name, %peer, error = %e, "OTLP connection ended with an error");
        }
    };
    tokio::select! {
        r = conn.as_mut() => ended(r),
        _ = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            ended(conn.await);
        }
        // Idle (or it would not have been chosen): a request that started
        // in between still gets its answer.
        _ = slot.evicted() => {
            conn.as_mut().graceful_shutdown();
            ended(conn.await);
        }
    }
}
