//! The families sources update: every source's events and bytes, what the
//! listening sources share, and what the `otlp_http` sources count of their
//! own.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use super::families::families;

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: String,
}

/// A source and why it refused or lost something (the `reason` values of
/// each family are listed below, next to it).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceReasonLabels {
    pub source: String,
    pub reason: String,
}

/// `holdfast_processed_events_total`: what a source's processing chain
/// (`src/process/`) did, per rule.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProcessedLabels {
    pub source: String,
    /// The step's `name` (default `<type>_<index>`).
    pub rule: String,
    /// `unparsed`, `dropped`, `sampled_out` or `redacted`.
    pub outcome: String,
}

families! {
    /// Per-source counters.
    pub struct SourceMetrics {
        /// Events a source appended to the log (acknowledged to its input)
        pub events: Family<SourceLabels, Counter> = "holdfast_source_events";
        /// Payload bytes a source appended to the log
        pub bytes: Family<SourceLabels, Counter> = "holdfast_source_bytes";
        /// Events a processing rule marked unparsed, dropped, sampled out or redacted, by source
        /// and rule
        pub processed: Family<ProcessedLabels, Counter> = "holdfast_processed_events";
        /// Connections a listening source (otlp_http, syslog over TCP) closed to protect its
        /// slots, by reason (per_peer_limit, idle_evicted, tls_handshake_timeout,
        /// tls_handshake_failed)
        pub connections_closed: Family<SourceReasonLabels, Counter> = "holdfast_listener_closed_connections";
    }
}

/// Every `reason` of `holdfast_listener_closed_connections_total`: why
/// `src/sources/listen/` closed a connection (`slots.rs`, `tls.rs`).
pub const LISTENER_CLOSE_REASONS: [&str; 4] = [
    "per_peer_limit",
    "idle_evicted",
    "tls_handshake_timeout",
    "tls_handshake_failed",
];

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OtlpRequestLabels {
    pub source: String,
    /// `/v1/logs`, `/v1/traces`, `/v1/metrics`, or `other`.
    pub path: String,
    /// The HTTP status code, like `200` or `503`.
    pub status: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OtlpSignalLabels {
    pub source: String,
    /// `logs`, `traces` or `metrics`.
    pub signal: String,
}

/// The labels of `holdfast_otlp_rejected_requests_total`.
pub type OtlpReasonLabels = SourceReasonLabels;

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OtlpPathLabels {
    pub source: String,
    pub path: String,
}

/// The labels of `holdfast_otlp_grpc_requests_total`.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OtlpGrpcLabels {
    pub source: String,
    /// The service method, like
    /// `/opentelemetry.proto.collector.logs.v1.LogsService/Export`, or `other`.
    pub method: String,
    /// The gRPC status code's name, like `OK` or `RESOURCE_EXHAUSTED`.
    pub code: String,
}

/// The `method` values of `holdfast_otlp_grpc_requests_total` that carry a
/// signal (the fourth, `other`, is any other path).
pub const OTLP_GRPC_METHODS: [&str; 3] = [
    "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
    "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
];

/// Every `signal` of the `otlp_http` sources' families.
pub const SIGNALS: [&str; 3] = ["logs", "traces", "metrics"];
/// The `path` values of `holdfast_otlp_requests_total` that carry a signal
/// (the fourth, `other`, is any other path).
pub const OTLP_SIGNAL_PATHS: [&str; 3] = ["/v1/logs", "/v1/traces", "/v1/metrics"];
/// Every `reason` of `holdfast_otlp_rejected_requests_total`: what
/// `src/sources/otlp_http/response.rs` names its refusals.
#[rustfmt::skip]
pub const OTLP_REJECT_REASONS: [&str; 17] = [
    "not_found", "method", "unauthorized", "draining", "content_type", "content_encoding",
    "too_large", "events_too_large", "decoded_too_large", "timeout", "body_read", "decompress",
    "decode", "busy", "log_full", "log_error", "internal",
];

families! {
    /// What the `otlp_http` sources count, per source.
    pub struct OtlpSourceMetrics {
        /// Time from an OTLP/HTTP request's head to its answer, by path
        pub duration: Family<OtlpPathLabels, Histogram> = "holdfast_otlp_request_duration_seconds"
            with Family::new_with_constructor(|| {
                Histogram::new([
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0,
                ])
            });
        /// OTLP/HTTP requests answered, by path and status code
        pub requests: Family<OtlpRequestLabels, Counter> = "holdfast_otlp_requests";
        /// Log records, spans and metric data points an OTLP/HTTP source appended, by signal
        pub events: Family<OtlpSignalLabels, Counter> = "holdfast_otlp_accepted_events";
        /// Request body bytes (decompressed) of the requests an OTLP/HTTP source accepted, by
        /// signal
        pub bytes: Family<OtlpSignalLabels, Counter> = "holdfast_otlp_accepted_bytes";
        // Requests answered with anything but 200, by reason (`decode`, `too_large`, `log_full`,
        // `draining`, …; see docs/sources-otlp-http.md).
        /// OTLP/HTTP requests not accepted, by reason
        pub rejected: Family<OtlpReasonLabels, Counter> = "holdfast_otlp_rejected_requests";
        /// Unknown OTLP/JSON keys (fields of a newer OTLP release, or misspelt) ignored in
        /// accepted requests, by signal
        pub unknown_fields: Family<OtlpSignalLabels, Counter> = "holdfast_otlp_unknown_fields";
        /// OTLP/gRPC calls answered by an otlp source's gRPC listener, by method and gRPC code
        pub grpc_requests: Family<OtlpGrpcLabels, Counter> = "holdfast_otlp_grpc_requests";
    }
}
