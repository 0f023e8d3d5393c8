/*!
The `otlp` source: the Collector's `otlp` receiver, OTLP over gRPC and over
HTTP from one source, answering each call or request only once its records
are durable in the log.

```text
 gRPC client ── POST /opentelemetry.proto.collector.*.v1.*Service/Export ─▶ grpc_server.rs  HTTP/2, slots, TLS (h2)
                                                                          grpc_call.rs    route → content-type → token
                                                                                          → draining → read one message
 HTTP client ── POST /v1/{logs,traces,metrics} ─▶ otlp_http/server.rs ─┐                  (body.rs), unframe
                                                                       ▼
                      otlp_http/pipeline.rs: decompress → cost/ → decode → split → one append
 ◀── OK + Export*ServiceResponse, or grpc-status (grpc_status.rs) / the HTTP answer
```

One `otlp_http::source::Source` state serves both
listeners: the memory budget, the processing chain, the token and the
counters are the source's, whichever listener a request came through. So
everything `otlp_http` promises (see its module doc: all or nothing, the
bounds, faithfulness, draining) holds for gRPC calls too; what differs is
how an answer is written. `grpc_status.rs` holds the one table from the
shared refusals to gRPC codes.

# Settings

Shared at the top: `max_body_bytes` (the largest message), `request_timeout`,
`bearer_token_file`, `process`. Each listener has its own table, `grpc` and
`http`; no table runs both on their defaults (127.0.0.1:4317 and
127.0.0.1:4318), a table runs only the listeners written.
*/

mod config;
mod grpc_call;
mod grpc_calls;
mod grpc_server;
mod grpc_status;

use std::sync::Arc;

use anyhow::Context;
use tracing::info;

use crate::component::ComponentContext;
use crate::sources::listen::Slots;
use crate::sources::otlp_http::{auth, server, source};

pub use config::{GrpcListener, HttpListener, OtlpSourceSettings};

/// Runs the source until its `stop` is cancelled, then finishes the calls
/// and requests in flight and returns.
///
/// Fails at start if the token file, the TLS files or a listen address
/// cannot be used; each error names the setting to change.
pub(crate) async fn run(ctx: ComponentContext, opts: OtlpSourceSettings) -> anyhow::Result<()> {
    let name = ctx.name.clone();
    let stop = ctx.stop.clone();
    let Some(pipeline) = opts.pipeline() else {
        anyhow::bail!(
            "source {name} has neither a gRPC nor an HTTP listener; add [sources.{name}.grpc] \
             or [sources.{name}.http], or neither for both"
        );
    };
    let token = match &opts.bearer_token_file {
        Some(path) => Some(auth::Token::load(path).with_context(|| {
            format!("reading the bearer token of source {name} (sources.{name}.bearer_token_file)")
        })?),
        None => None,
    };
    let bind = |listen: std::net::SocketAddr, table: &'static str, what: &'static str| {
        let name = name.clone();
        async move {
            tokio::net::TcpListener::bind(listen).await.map_err(|e| {
                anyhow::anyhow!(
                    "source {name} cannot listen on {listen} for {what}: {e}; change \
                     sources.{name}.{table}.listen or stop what uses the port"
                )
            })
        }
    };
    // Everything that can fail is done before either listener serves.
    let grpc = match &opts.grpc {
        Some(g) => {
            let tls = g.listener.server_tls_h2(&name)?;
            let l = bind(g.listener.listen, "grpc", "OTLP/gRPC").await?;
            Some((g.clone(), tls, l))
        }
        None => None,
    };
    let http = match &opts.http {
        Some(h) => {
            let tls = h.listener.server_tls(&name)?;
            let l = bind(h.listener.listen, "http", "OTLP/HTTP").await?;
            Some((h.clone(), tls, l))
        }
        None => None,
    };
    let metrics = ctx.metrics.clone();
    let src = Arc::new(source::Source::new(ctx, pipeline, token));
    let grpc = async {
        if let Some((g, tls, l)) = grpc {
            let addr = l.local_addr().unwrap_or(g.listener.listen);
            info!(source = %name, %addr, tls = tls.is_some(), auth = src.token.is_some(),
                max_message_bytes = src.opts.max_body_bytes, "OTLP/gRPC listening");
            let slots = Slots::new(&name, &g.listener, &metrics);
            grpc_server::serve(l, tls, slots, src.clone(), g, stop.clone()).await;
        }
    };
    let http = async {
        if let Some((h, tls, l)) = http {
            let addr = l.local_addr().unwrap_or(h.listener.listen);
            info!(source = %name, %addr, tls = tls.is_some(), auth = src.token.is_some(),
                max_body_bytes = src.opts.max_body_bytes, "OTLP/HTTP listening");
            let slots = Slots::new(&name, &h.listener, &metrics);
            server::serve(l, tls, slots, src.clone(), stop.clone()).await;
        }
    };
    tokio::join!(grpc, http);
    info!(source = %name, "OTLP source stopped; every call and request in flight was answered");
    Ok(())
}
