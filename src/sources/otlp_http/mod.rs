/*!
The `otlp_http` source: an OTLP/HTTP receiver that answers 200 only once a
request's records are durable in the log.

```text
 client ── POST /v1/{logs,traces,metrics} ──▶ server.rs   listener, connection permits, TLS
                                               handler.rs route → auth → draining? → headers
                                               body.rs    read with caps, deadline, memory budget
                                               pipeline.rs, shared with the `otlp` source's gRPC:
                                                 decode.rs  decompress (capped)
                                                 cost/      bound what decoding allocates, reserve it
                                                 decode.rs  protobuf | json/
                                                 split.rs   one request → one Batch of Envelopes
                                                 Log::append_timeout  (durable under fsync policy)
        ◀── 200 Export*ServiceResponse ─────── response.rs (or a google.rpc.Status and a status code)
```

`source.rs` holds what the connections of one source share (settings,
budget, token, chain, counters).

# Contract

* `POST /v1/logs`, `/v1/traces`, `/v1/metrics` with `Content-Type:
  application/x-protobuf` (also `application/protobuf`) or
  `application/json` (the OTLP/JSON mapping), and `Content-Encoding: gzip`,
  `deflate` (zlib or raw) or `identity`.
* **200** with an empty `Export*ServiceResponse`, in the request's encoding,
  only after [`Log::append_timeout`] returned: the records are durable under
  the log's fsync policy. One request is one [`Batch`](crate::seglog::Batch)
  and one append, so a request is all or nothing: no error path leaves part
  of a request in the log.
* Errors carry a `google.rpc.Status` in the request's encoding (plain text
  when the encoding is unknown) and a message that says what to change:
  400 undecodable body, 401 missing or wrong bearer token, 404/405 wrong path
  or method, 408 body not received within `request_timeout`, 413 body over
  `max_body_bytes` (by `Content-Length`, while streaming, and after
  decompression) or that would take more memory to decode than the budget
  has (see Bounds), 415 other content types or encodings, 429 too many bodies
  in memory at once, 503 log full (`when_full = "block"`), log unwritable, or
  shutting down. 429 and 503 carry `Retry-After`: SDKs retry them. Nothing a
  client should retry is ever a 500.
* Each log record, span and metric data point becomes one
  [`Envelope`](crate::event::Envelope) with a fresh random
  [`EventId`](crate::event::EventId), its resource, scope and both schema
  URLs; a metric keeps name, description, unit, metadata, temporality and
  monotonicity around its single point. An OTLP sink can rebuild an
  equivalent request. In format 2 (`split.rs`) what the records share is
  stored once in the batch's context, and the random ids are derived from
  one random seed per request and each record's index in it.

# Faithfulness

Protobuf is decoded with prost. JSON is decoded by our own strict decoder
(`json/`), never by the serde derive of `opentelemetry-proto`, which drops
snake_case keys and duplicate keys without a word: a request answered 200
would then have lost records. The strict decoder rejects (400) the
snake_case spelling of a known key, duplicate keys, two members of one
oneof, numbers it cannot represent exactly and ids of the wrong length; and
the number of records is counted a second time on the raw JSON tree and again
after splitting, so a mismatch can never be acknowledged. Other unknown keys
are ignored as the OTLP spec requires (a newer client's fields must not cost
it the batch) and counted in `holdfast_otlp_unknown_fields_total`.

# Bounds

Connections are capped by `max_connections` (a semaphore; more wait in the
kernel's backlog). Headers must arrive within `header_timeout`, which also
closes idle keep-alive connections; the whole request, body included, within
`request_timeout`. Bodies are capped by `max_body_bytes` before and after
decompression, and decompression is streamed with a hard stop one byte past
the cap, so a gzip bomb costs one buffer. Bodies held in memory at once,
compressed and decompressed, are bounded by a budget of
`max(64 MiB, 2 × max_body_bytes + 1 MiB)`, and so is what decoding them
allocates: one pass over the decompressed body (`cost/`) bounds it before
anything is decoded, and the request reserves the bound beside its body
until it is answered. A request whose bound cannot fit the budget even alone
gets 413; requests beyond the budget wait until their deadline (2 s at
most), then get 429.

# Shutdown

While the daemon drains ([`Phase::Draining`]) new requests get 503 with
`Retry-After`. When `stop` is cancelled the listener closes, keep-alive
connections close after their current request, and [`run`] returns once
every in-flight request has been answered: 200 after a durable append, or an
error.
*/

pub(crate) mod auth;
pub(crate) mod body;
pub(crate) mod config;
pub(crate) mod cost;
pub(crate) mod decode;
pub(crate) mod handler;
mod json;
pub mod metrics;
pub(crate) mod pipeline;
pub(crate) mod response;
pub(crate) mod server;
pub(crate) mod source;
pub(crate) mod split;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::api::Health;
#[cfg(doc)]
use crate::api::Phase;
use crate::component::ComponentContext;
use crate::metrics::Metrics;
use crate::seglog::Log;

pub use crate::sources::listen::{Listener, TlsSettings};
pub use config::OtlpHttpSourceSettings;
pub use decode::data_points;

/// How long an append waits for space in a full log (`when_full = "block"`)
/// before the request is answered 503: short, so the client backs off and
/// retries rather than hangs.
pub const APPEND_WAIT: Duration = Duration::from_secs(1);

/// Runs the source named `name` until `stop` is cancelled, then finishes
/// the requests in flight and returns.
///
/// Fails at start if the token file, the TLS files or the listen address
/// cannot be used; each error names the setting to change.
pub async fn run(
    name: String,
    opts: OtlpHttpSourceSettings,
    log: Log,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let ctx = ComponentContext {
        name,
        log,
        metrics,
        health,
        stop,
    };
    run_with(ctx, opts).await
}

/// [`run`] with the bundle the daemon hands every component.
pub(crate) async fn run_with(
    ctx: ComponentContext,
    opts: OtlpHttpSourceSettings,
) -> anyhow::Result<()> {
    let name = ctx.name.clone();
    let stop = ctx.stop.clone();
    let token = match &opts.bearer_token_file {
        Some(path) => Some(auth::Token::load(path).with_context(|| {
            format!("reading the bearer token of source {name} (sources.{name}.bearer_token_file)")
        })?),
        None => None,
    };
    let tls = opts.listener.server_tls(&name)?;
    let listen = opts.listener.listen;
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        anyhow::anyhow!(
            "source {name} cannot listen on {listen} for OTLP/HTTP: {e}; change \
                 sources.{name}.listen or stop what uses the port"
        )
    })?;
    let addr = listener.local_addr().unwrap_or(listen);
    info!(
        source = %name,
        %addr,
        tls = tls.is_some(),
        auth = token.is_some(),
        max_body_bytes = opts.max_body_bytes,
        "OTLP/HTTP source listening"
    );
    let slots = crate::sources::listen::Slots::new(&name, &opts.listener, &ctx.metrics);
    let src = Arc::new(source::Source::new(ctx, opts, token));
    server::serve(listener, tls, slots, src, stop).await;
    info!(source = %name, "OTLP/HTTP source stopped; every request in flight was answered");
    Ok(())
}
