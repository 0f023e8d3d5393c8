/*!
Sinks: the log's consumers. Each sink reads from its own cursor, delivers,
and commits only what is finished, so a restart resumes exactly where
delivery stopped.

* [`file`](mod@file) — NDJSON files in a directory, for air-gapped devices and the
  default configuration (`file/config.rs`: its table).
* Network sinks, all run by one shared runtime:
  [`otlp_http`] (OTLP/HTTP, protobuf or JSON), [`elasticsearch`] (the
  `_bulk` API), [`openobserve`] (its `_json` ingestion), [`nats`] (NATS
  JetStream: a message per event, each with its own publish ack).

A network sink, piece by piece (one concept per file):

| file | concept |
|------|---------|
| `runtime.rs` | the consumer, batching by events/bytes/time, delivery tasks up to the limit, the window, commits, the replay inbox |
| `watermark.rs` | the contiguous-completion watermark: the cursor moves only to the lowest unfinished event |
| `deliver.rs` | one batch on its way: send, classify, hand back what needs resending (same ids), split on 413, quarantine |
| `retry_queue.rs` | events waiting to be sent again (not-before times, drawn ahead of new reads), the probe and the backoff reset after an outage |
| `limit.rs` | adaptive concurrency: additive increase, multiplicative decrease of the requests in flight on pushback and rising latency |
| `retry.rs` | the retry policy: per-event verdicts for every outcome, backoff with full jitter, `Retry-After` |
| `protocol.rs` | the seam each receiver API implements: build a request, read a 2xx body |
| `otlp_http/`, `elasticsearch/`, `openobserve/` | the three receiver APIs; each folder's `config.rs` its keys, check and description |
| `network_config/` | the keys every network sink shares (batching, retries, `auth`, `tls`, `quarantine`): raw structs, check, description, machine checks, once; `NetworkSink` makes each a registry sink |
| `document.rs`, `template.rs`, `keys.rs` | JSON documents, index/stream names, idempotency keys |
| `http.rs` | the HTTP client: rustls, timeouts, gzip, credentials from files |
| `quarantine.rs` | durable storage of rejected events (the operator tools are in `src/cli/`) |
| `options.rs` | the options every network sink shares |

An event is finished when the receiver accepted it (or already had it), or
when it is durably in the quarantine; the cursor never passes an event that
is not finished (`DESIGN.md` promises 6-8). `docs/sinks.md` describes the
behaviour for operators.
*/

mod client_tls;
mod credentials;
mod delivery;
pub mod document;
pub mod elasticsearch;
pub mod file;
mod http;
pub mod nats;
mod network_config;
pub mod openobserve;
pub mod otlp_http;
pub mod quarantine;
mod quarantine_options;
pub mod template;
#[cfg(test)]
pub(crate) mod test_events;

pub use credentials::{ClientCert, TlsFiles};
pub use delivery::options::DeliveryOptions;
pub use elasticsearch::ElasticsearchOptions;
pub use http::{Auth, Compression, Header, HeaderValueFrom, HttpOptions};
pub use nats::{NatsCredentials, NatsEncoding, NatsOptions, StreamSpec};
pub use openobserve::OpenObserveOptions;
pub use otlp_http::{OtlpEncoding, OtlpHttpSinkOptions};
pub use quarantine_options::{QuarantineFull, QuarantineOptions};
pub use template::Template;
