/*!
The gRPC listener's connections: HTTP/2 (optionally inside TLS with ALPN
`h2`), in the slots of `src/sources/listen/` like the HTTP listener's.

A connection carries up to `max_concurrent_streams` calls at once; each
call marks the slot busy while it is answered, so a connection with a call
open is never evicted, and one without is idle (pings and other bytes
received count as activity). A call refused for its token closes its
connection, as on OTLP/HTTP. Keep-alive pings close a connection whose
peer stopped answering; a call whose message never comes is answered
`DEADLINE_EXCEEDED` at `request_timeout`. When `stop` is cancelled, the
listener closes and each connection sends GOAWAY, finishes the calls it
has, then closes.
*/

use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::config::GrpcListener;
use super::grpc_call::{self, Listener};
use super::grpc_calls::Calls;
use crate::sources::listen::{ServerTls, Slot, Slots};
use crate::sources::otlp_http::auth::ClientSubject;
use crate::sources::otlp_http::source::Source;

/// HTTP/2 flow control: how many bytes of DATA a client may send on one
/// stream, and on its whole connection, before the server has read them,
/// and the largest frame it may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Flow {
    window: u32,
    frame: u32,
}

/// What h2 holds for a call that has not read it yet is outside the
/// source's memory budget (which counts what calls have read), so the
/// listener's connections share one more budget between them: each gets
/// `budget ÷ max_connections` (256 KiB with the defaults) for its window
/// and the frame it may be reading (h2 reads a frame whole before flow
/// control counts it) (docs/sources-otlp.md, "Bounds").
///
/// The frame: up to 64 KiB, so that an export up to that size from a
/// client that honours SETTINGS_MAX_FRAME_SIZE (h2, as in tonic and hyper;
/// gRPC's C core) arrives as one frame, which h2 hands over as one buffer:
/// no frames to join for the decoder (a copy of the whole message) and
/// fewer to read and parse. The window: the rest, between HTTP/2's
/// initial 64 KiB and 1 MiB (hyper's default, past which a larger window
/// gains nothing on a LAN); the stream window is the same, since a call
/// can never use more than its connection's anyway. A 26 KB export fits
/// many times over; a window is given back (WINDOW_UPDATE) as calls read.
fn flow(budget_bytes: usize, max_connections: usize) -> Flow {
    const MIN_WINDOW: usize = 65_535;
    const MAX_WINDOW: usize = 1 << 20;
    // HTTP/2's smallest SETTINGS_MAX_FRAME_SIZE, and ours at most.
    const MIN_FRAME: usize = 16 << 10;
    const MAX_FRAME: usize = 64 << 10;
    let share = budget_bytes / max_connections.max(1);
    let frame = share.saturating_sub(MIN_WINDOW).clamp(MIN_FRAME, MAX_FRAME);
    let window = share.saturating_sub(frame).clamp(MIN_WINDOW, MAX_WINDOW);
    Flow {
        window: window as u32,
        frame: frame as u32,
    }
}

/// Everything a gRPC connection needs.
struct Conn {
    src: Arc<Source>,
    settings: Arc<GrpcListener>,
    call: Arc<Listener>,
    stop: CancellationToken,
}

/// Serves until `stop` is cancelled and every connection has ended.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<ServerTls>,
    slots: Arc<Slots>,
    src: Arc<Source>,
    settings: GrpcListener,
    stop: CancellationToken,
) {
    let tls = tls.map(Arc::new);
    let call = Arc::new(Listener::new(&src, settings.listener.clone()));
    let settings = Arc::new(settings);
    while let Some((slot, stream, peer)) = slots.accept(&listener, &stop).await {
        let _ = stream.set_nodelay(true);
        let conn = Conn {
            src: src.clone(),
            settings: settings.clone(),
            call: call.clone(),
            stop: stop.clone(),
        };
        tokio::spawn(connection(stream, peer, tls.clone(), conn, slot));
    }
    drop(listener);
    slots.drain().await;
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<Arc<ServerTls>>,
    conn: Conn,
    slot: Slot,
) {
    let stream = slot.track(stream);
    match tls {
        None => h2(stream, peer, None, conn, slot).await,
        Some(tls) => {
            let timeout = conn.settings.listener.tls_handshake_timeout;
            match tls.handshake(stream, timeout, &slot).await {
                Ok((s, subject)) => h2(s, peer, subject, conn, slot).await,
                Err(e) => {
                    debug!(source = %conn.src.name, %peer, error = %e, "TLS connection not served")
                }
            }
        }
    }
}

async fn h2<I>(io: I, peer: SocketAddr, subject: Option<String>, conn: Conn, slot: Slot)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Conn {
        src,
        settings,
        call,
        stop,
    } = conn;
    let subject = subject.map(|s| ClientSubject(Arc::from(s)));
    let slot = Arc::new(slot);
    let svc_slot = slot.clone();
    let (s, c) = (src.clone(), call.clone());
    // Cancelled by a call whose answer asks the connection to close.
    let bye = CancellationToken::new();
    let svc_bye = bye.clone();
    let svc = service_fn(move |mut req| {
        let (s, c, bye) = (s.clone(), c.clone(), svc_bye.clone());
        // A call in flight keeps its connection's slot.
        let busy = svc_slot.busy();
        if let Some(subject) = &subject {
            req.extensions_mut().insert(subject.clone());
        }
        async move {
            let (resp, close) = grpc_call::handle(s, c, peer, req).await;
            if close {
                bye.cancel();
            }
            drop(busy);
            Ok::<_, Infallible>(resp)
        }
    });
    let g = &settings;
    let flow = flow(src.budget.bytes(), g.listener.max_connections.get());
    let calls = Calls::default();
    let mut inline = calls.inline();
    let conn = http2::Builder::new(calls)
        .timer(TokioTimer::new())
        // No gRPC client reads it: one header less to encode per answer.
        .auto_date_header(false)
        .max_concurrent_streams(g.max_concurrent_streams)
        .initial_stream_window_size(flow.window)
        .initial_connection_window_size(flow.window)
        .max_frame_size(flow.frame)
        .keep_alive_interval(Some(g.keepalive_interval))
        .keep_alive_timeout(g.keepalive_timeout)
        .max_header_list_size(g.max_header_list_size)
        .serve_connection(TokioIo::new(io), svc);
    let ended = |r: Result<(), hyper::Error>| {
        if let Err(e) = r {
            debug!(source = %src.name, %peer, error = %e, "OTLP/gRPC connection ended with an error");
        }
    };
    // Each asks for a graceful close: GOAWAY, the calls in flight finish.
    // `bye`: a call's answer asked for it (and still goes out). Eviction
    // chooses only idle connections; a call that started in between
    // finishes.
    let closing = async {
        tokio::select! {
            biased;
            _ = stop.cancelled() => {}
            _ = bye.cancelled() => {}
            _ = slot.evicted() => {}
        }
    };
    let r = {
        let mut conn = pin!(conn);
        let mut closing = pin!(closing);
        let mut closed = false;
        poll_fn(|cx| {
            if !closed && closing.as_mut().poll(cx).is_ready() {
                closed = true;
                conn.as_mut().graceful_shutdown();
            }
            // The inline call is polled after the connection, which hands
            // it over and delivers its frames; once it has ended, the
            // connection again, to send its answer in this same turn.
            loop {
                if let Poll::Ready(r) = conn.as_mut().poll(cx) {
                    return Poll::Ready(r);
                }
                if !inline.poll_call(cx) {
                    return Poll::Pending;
                }
            }
        })
        .await
    };
    ended(r);
    inline.finish().await;
}

#[cfg(test)]
mod tests {
    use super::{flow, Flow};

    #[test]
    fn the_windows_and_frames_of_all_connections_add_up_to_one_budget_at_most() {
        // The defaults: a 64 MiB budget, 256 connections.
        let f = flow(64 << 20, 256);
        assert_eq!(
            f,
            Flow {
                window: 192 << 10,
                frame: 64 << 10
            }
        );
        assert!(256 * (f.window + f.frame) as usize <= 64 << 20);
        // Never below HTTP/2's initial window and smallest frame, never
        // above 1 MiB and 64 KiB.
        let small = flow(64 << 20, 100_000);
        assert_eq!((small.window, small.frame), (65_535, 16 << 10));
        assert_eq!(
            flow(1 << 30, 1),
            Flow {
                window: 1 << 20,
                frame: 64 << 10
            }
        );
        assert_eq!(
            flow(64 << 20, 0),
            Flow {
                window: 1 << 20,
                frame: 64 << 10
            }
        );
        // Between, the frame grows before the window does.
        let mid = flow(100 << 10, 1);
        assert_eq!((mid.window, mid.frame), (65_535, (100 << 10) - 65_535));
    }
}
