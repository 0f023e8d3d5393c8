/*!
The listener and its connections: HTTP/1.1 (keep-alive), optionally inside
TLS, at most `max_connections` at once.

`permits` holds one permit per open connection; the connection's task owns
its permit and drops it when the connection ends. So when `stop` is
cancelled, the accept loop closes the listener and then takes back every
permit: that returns only once each connection has finished the request it
was serving (hyper's graceful shutdown lets the response go out, then
closes).
*/

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::handler::{self, Source};
use crate::api::accept_with_permit;

/// Serves until `stop` is cancelled and every connection has ended.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    src: Arc<Source>,
    stop: CancellationToken,
) {
    let max = src.opts.listener.max_connections.get();
    let permits = Arc::new(Semaphore::new(max));
    let accept_failed = |e: &io::Error| warn!(source = %src.name, error = %e, "OTLP accept failed");
    while let Some((permit, stream, peer)) =
        accept_with_permit(&listener, &permits, &stop, accept_failed).await
    {
        // Answers are small and written once: do not wait to coalesce.
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(
            stream,
            peer,
            tls.clone(),
            src.clone(),
            stop.clone(),
            permit,
        ));
    }
    // New connections are refused from here on; wait for the open ones.
    drop(listener);
    let _ = permits.acquire_many(max as u32).await;
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    src: Arc<Source>,
    stop: CancellationToken,
    _permit: OwnedSemaphorePermit,
) {
    match tls {
        None => http(stream, peer, src, stop).await,
        Some(acceptor) => {
            // The handshake counts against the header timeout: a client
            // that connects and says nothing is dropped as quickly.
            match tokio::time::timeout(src.opts.header_timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => http(tls, peer, src, stop).await,
                Ok(Err(e)) => debug!(source = %src.name, %peer, error = %e, "TLS handshake failed"),
                Err(_) => debug!(source = %src.name, %peer, "TLS handshake timed out"),
            }
        }
    }
}

async fn http<I>(io: I, peer: SocketAddr, src: Arc<Source>, stop: CancellationToken)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let s = src.clone();
    let svc = service_fn(move |req| {
        let s = s.clone();
        async move { Ok::<_, Infallible>(handler::handle(s, peer, req).await) }
    });
    // `header_read_timeout` also runs while a keep-alive connection waits
    // for its next request, so it closes idle connections too.
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(src.opts.header_timeout)
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => if let Err(e) = r {
            debug!(source = %src.name, %peer, error = %e, "OTLP connection ended with an error");
        },
        _ = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            if let Err(e) = conn.await {
                debug!(source = %src.name, %peer, error = %e, "OTLP connection ended with an error");
            }
        }
    }
}
