/*!
The local HTTP API: `/metrics` (Prometheus text: OpenMetrics when asked
for, else the classic format), `/healthz` (the process
is alive and its main loop turns) and `/readyz` (the log is recovered and
sources accept input; 503 while starting, while draining, and while a
source fails and is being restarted).

It binds to 127.0.0.1 unless configured otherwise and serves GET only. Every
connection is bounded: a semaphore caps how many are open, and a request
must arrive within a header timeout ([`accept_with_permit`]). The sources
that listen on the network have their own slots (`src/sources/listen/`).
*/

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ACCEPT, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::metrics::{Format, Metrics};

/// Connections the API serves at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 64;
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// What `/readyz` answers, shared with the daemon's lifecycle.
#[derive(Debug, Default)]
pub struct Health {
    phase: AtomicU8,
    /// Sources whose task failed and has not yet run for a while since its
    /// restart, with the failure: "ready" promises that sources accept
    /// input, which a source that cannot bind or read its token does not.
    failing: Mutex<BTreeMap<String, String>>,
    /// Tasks still running but making no progress (a `file` source's
    /// tailer thread stuck in a system call), with why.
    stuck: Mutex<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Starting = 0,
    Ready = 1,
    Draining = 2,
}

impl Health {
    pub fn set(&self, p: Phase) {
        self.phase.store(p as u8, Ordering::Release);
    }

    /// Marks the task `name` as failing with `error` (`/readyz` answers 503).
    pub fn set_failing(&self, name: &str, error: String) {
        self.failing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), error);
    }

    /// The task `name` runs again.
    pub fn clear_failing(&self, name: &str) {
        self.failing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    /// Marks the task `name` as stuck, `why` (`/readyz` answers 503).
    pub fn set_stuck(&self, name: &str, why: String) {
        self.stuck
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), why);
    }

    /// The task `name` makes progress again.
    pub fn clear_stuck(&self, name: &str) {
        self.stuck
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    /// Stuck tasks and why, by name.
    pub fn stuck(&self) -> Vec<(String, String)> {
        let stuck = self.stuck.lock().unwrap_or_else(|p| p.into_inner());
        stuck.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Failing tasks and their errors, by name.
    pub fn failing(&self) -> Vec<(String, String)> {
        let failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        failing
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            1 => Phase::Ready,
            2 => Phase::Draining,
            _ => Phase::Starting,
        }
    }
}

/// Binds the API listener; a clear error if the address is taken.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot listen on {addr} for the API (/metrics, /healthz, /readyz): {e}; change [api] listen or stop what uses the port"
        )
    })
}

/// Serves until `stop` is cancelled; connections in progress are finished.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    stop: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let accept_failed = |e: &io::Error| warn!(error = %e, "API accept failed");
    while let Some((permit, stream, peer)) =
        accept_with_permit(&listener, &permits, &stop, accept_failed).await
    {
        let metrics = metrics.clone();
        let health = health.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let svc = service_fn(move |req| {
                let r = route(req, &metrics, &health);
                async move { Ok::<_, Infallible>(r) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => if let Err(e) = r {
                    debug!(%peer, error = %e, "API connection ended with an error");
                },
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}

/// The next connection, once a permit is free (at most one connection per
/// permit); `None` once `stop` is cancelled. A failed accept is reported
/// with `accept_failed` and retried after a pause.
pub(crate) async fn accept_with_permit(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
    stop: &CancellationToken,
    accept_failed: impl Fn(&io::Error),
) -> Option<(OwnedSemaphorePermit, TcpStream, SocketAddr)> {
    loop {
        let permit = tokio::select! {
            _ = stop.cancelled() => return None,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return None,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => return None,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors, most likely: back off briefly
                    // rather than spin.
                    accept_failed(&e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        return Some((permit, stream, peer));
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        "text/plain; charset=utf-8".parse().expect("static header"),
    );
    r
}

/// `/metrics` in the format the scraper asked for.
fn metrics_response(metrics: &Metrics, format: Format) -> Response<Full<Bytes>> {
    match metrics.encode_as(format) {
        Ok(body) => {
            let mut r = text(StatusCode::OK, body);
            r.headers_mut().insert(
                CONTENT_TYPE,
                format.content_type().parse().expect("static header"),
            );
            r
        }
        Err(_) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "could not encode metrics\n",
        ),
    }
}

fn route(req: Request<Incoming>, metrics: &Metrics, health: &Health) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics, /healthz or /readyz\n",
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed: use GET\n",
        );
        r.headers_mut()
            .insert(ALLOW, "GET, HEAD".parse().expect("static header"));
        return r;
    }
    match path {
        "/metrics" => {
            let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
            metrics_response(metrics, Format::negotiate(accept))
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        _ => match health.phase() {
            Phase::Ready => {
                let failing = health.failing();
                let stuck = health.stuck();
                if failing.is_empty() && stuck.is_empty() {
                    text(StatusCode::OK, "ready\n")
                } else {
                    let what: Vec<String> = failing
                        .iter()
                        .map(|(task, error)| {
                            format!("{task} is failing and being restarted: {error}\n")
                        })
                        .chain(
                            stuck
                                .iter()
                                .map(|(task, why)| format!("{task} is stuck: {why}\n")),
                        )
                        .collect();
                    text(StatusCode::SERVICE_UNAVAILABLE, what.concat())
                }
            }
            Phase::Starting => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "starting: recovering the log\n",
            ),
            Phase::Draining => text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n"),
        },
    }
}
