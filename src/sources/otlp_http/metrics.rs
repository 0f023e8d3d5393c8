//! The OTLP receivers' own metric families (the `otlp_http` and `otlp`
//! sources share them; registered through the component contract, see
//! `src/metrics/groups.rs`), their label values, and the series each
//! receiver creates at 0.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use crate::metrics::{families, zero, SourceReasonLabels};

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

impl OtlpSourceMetrics {
    /// The series of the OTLP receiver `name`, at 0.
    pub fn declare(&self, name: &str) {
        for signal in SIGNALS {
            let labels = OtlpSignalLabels {
                source: name.to_string(),
                signal: signal.to_string(),
            };
            zero(&[&self.events, &self.bytes, &self.unknown_fields], &labels);
        }
        // The status is the server's answer, open-ended; the series an
        // alert on accepted traffic needs is each signal path's 200
        // (refusals are at 0 by reason just below).
        for path in OTLP_SIGNAL_PATHS {
            let labels = OtlpRequestLabels {
                source: name.to_string(),
                path: path.to_string(),
                status: "200".to_string(),
            };
            zero(&[&self.requests], &labels);
        }
        for reason in OTLP_REJECT_REASONS {
            let labels = OtlpReasonLabels {
                source: name.to_string(),
                reason: reason.to_string(),
            };
            zero(&[&self.rejected], &labels);
        }
    }

    /// The series of the gRPC listener of the `otlp` source `name`, at 0:
    /// each service method's `OK` (refusals are counted by reason in
    /// `declare`'s families).
    pub fn declare_grpc(&self, name: &str) {
        for method in OTLP_GRPC_METHODS {
            let labels = OtlpGrpcLabels {
                source: name.to_string(),
                method: method.to_string(),
                code: "OK".to_string(),
            };
            zero(&[&self.grpc_requests], &labels);
        }
    }
}
