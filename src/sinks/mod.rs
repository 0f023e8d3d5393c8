/*!
Sinks: the log's consumers. Each sink reads from its own cursor, delivers,
and commits only what is finished, so a restart resumes exactly where
delivery stopped.

* [`file`](mod@file) — NDJSON files in a directory, for air-gapped devices and the
  default configuration (`file/config.rs`: its table).
* Network sinks, all run by one shared runtime:
  [`otlp_http`] (OTLP/HTTP, protobuf or JSON), [`otlp_grpc`] (OTLP/gRPC,
  an `Export` call per request), [`elasticsearch`] (the
  `_bulk` API), [`openobserve`] (its `_json` ingestion), [`nats`] (NATS
  JetStream: a message per event, each with its own publish ack),
  [`prometheus_remote_write`] (metric points as Prometheus remote write 1.0),
  [`mqtt`] (MQTT 5 or 3.1.1: a QoS 1 publish per event, each with its
  PUBACK).

What is here, kits first, then the components:

| where | what |
|-------|------|
| `delivery/` | the delivery kit every network sink runs on: the runtime, delivery tasks, retry policy and queue, adaptive limit, watermark, quarantining, and the seam a sink's transport implements (`delivery/mod.rs` has the map) |
| `http/` | the one HTTP transport of the HTTP sinks: the seam their API implements (build a request, read a 2xx body), the client (rustls, timeouts, gzip, credentials, bounded answers) and its options |
| `network_config/` | the keys every network sink shares (batching, retries, `auth`, `tls`, `headers`, `quarantine`): raw structs, check, description, machine checks, once; `NetworkSink` makes each a component `Sink` |
| `credentials.rs`, `client_tls.rs` | what transports read from files (TLS files, secrets); the HTTP client's rustls setup |
| `quarantine.rs`, `quarantine_options.rs` | durable storage of rejected events (the operator tools are in `src/cli/`), and what it is opened with |
| `document/`, `template.rs` | JSON documents, index/stream/subject names |
| `otlp_request/` | OTLP export requests rebuilt from stored events, grouped by resource and scope (protobuf, JSON): what `otlp_http`, `otlp_grpc` and `nats` send |
| `otlp_http/`, `elasticsearch/`, `openobserve/` | the three HTTP receiver APIs; each folder's `config.rs` its keys, check and description |
| `prometheus_remote_write/` | Prometheus remote write 1.0: OTLP points to series (names, units, labels), snappy protobuf requests, refused old samples found by halving |
| `nats/` | NATS JetStream: its own transport (a publish and an ack per event) |
| `mqtt/` | MQTT: its own transport (rumqttc's event loop, a publish and a PUBACK per event, resends after a reconnect) |
| `otlp_grpc/` | OTLP/gRPC: its own transport (tonic, one `Export` call per request, the status mapped onto the shared policy) |
| `file/` | NDJSON files; a sink of its own, not on the delivery kit |

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
pub mod mqtt;
pub mod nats;
pub(crate) mod network_config;
pub mod openobserve;
pub mod otlp_grpc;
pub mod otlp_http;
pub(crate) mod otlp_request;
pub mod prometheus_remote_write;
pub mod quarantine;
mod quarantine_options;
pub mod template;
#[cfg(test)]
pub(crate) mod test_events;

pub use credentials::{ClientCert, TlsFiles};
pub use delivery::options::DeliveryOptions;
pub use elasticsearch::ElasticsearchOptions;
pub use http::{Auth, Compression, Header, HeaderValueFrom, HttpOptions};
pub use mqtt::{MqttSinkOptions, Payload as MqttPayload};
pub use nats::{NatsCredentials, NatsEncoding, NatsOptions, StreamSpec};
pub use openobserve::OpenObserveOptions;
pub use otlp_grpc::OtlpGrpcSinkOptions;
pub use otlp_http::{OtlpEncoding, OtlpHttpSinkOptions};
pub use prometheus_remote_write::RemoteWriteOptions;
pub use quarantine_options::{QuarantineFull, QuarantineOptions};
pub use template::Template;

use crate::component::components;

components! {
    /// The kinds of sink, by `type`.
    enum SinkKind: Sink, SinkEnv, SINK_TYPES, declare_sink {
        /// `type = "file"`: NDJSON files on local disk.
        "file" => File(file::FileSinkOptions),
        /// `type = "otlp_http"`: OTLP/HTTP export.
        "otlp_http" => OtlpHttp(otlp_http::OtlpHttpSinkOptions),
        /// `type = "otlp_grpc"`: OTLP/gRPC export.
        "otlp_grpc" => OtlpGrpc(otlp_grpc::OtlpGrpcSinkOptions),
        /// `type = "elasticsearch"`: the `_bulk` API.
        "elasticsearch" => Elasticsearch(elasticsearch::ElasticsearchOptions),
        /// `type = "openobserve"`: OpenObserve's `_json` ingestion.
        "openobserve" => OpenObserve(openobserve::OpenObserveOptions),
        /// `type = "nats"`: NATS JetStream, an ack per event.
        "nats" => Nats(nats::NatsOptions),
        /// `type = "prometheus_remote_write"`: Prometheus remote write 1.0.
        "prometheus_remote_write" => PrometheusRemoteWrite(prometheus_remote_write::RemoteWriteOptions),
        /// `type = "mqtt"`: MQTT 5 or 3.1.1, a PUBACK per event.
        "mqtt" => Mqtt(mqtt::MqttSinkOptions),
    }
}
