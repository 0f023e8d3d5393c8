//! The families sources update: every source's events and bytes, and what
//! the `file` and `otlp_http` sources count of their own.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::families::families;

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: String,
}

families! {
    /// Per-source counters.
    pub struct SourceMetrics {
        /// Events appended to the log (acknowledged).
        pub events: Family<SourceLabels, Counter> = "holdfast_source_events",
            "Events a source appended to the log (acknowledged to its input)";
        /// Payload bytes of those events.
        pub bytes: Family<SourceLabels, Counter> = "holdfast_source", Bytes,
            "Payload bytes a source appended to the log";
    }
}

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

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OtlpReasonLabels {
    pub source: String,
    pub reason: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OtlpPathLabels {
    pub source: String,
    pub path: String,
}

/// Every `signal` of the `otlp_http` sources' families.
pub const SIGNALS: [&str; 3] = ["logs", "traces", "metrics"];
/// Every `reason` of `holdfast_otlp_rejected_requests_total`: what
/// `src/sources/otlp_http/response.rs` names its refusals.
pub const OTLP_REJECT_REASONS: [&str; 16] = [
    "not_found",
    "method",
    "unauthorized",
    "draining",
    "content_type",
    "content_encoding",
    "too_large",
    "events_too_large",
    "timeout",
    "body_read",
    "decompress",
    "decode",
    "busy",
    "log_full",
    "log_error",
    "internal",
];

families! {
    /// What the `otlp_http` sources count, per source.
    pub struct OtlpSourceMetrics {
        /// Requests answered, by path and status.
        pub requests: Family<OtlpRequestLabels, Counter> = "holdfast_otlp_requests",
            "OTLP/HTTP requests answered, by path and status code";
        /// Events (log records, spans, metric data points) appended, by signal.
        pub events: Family<OtlpSignalLabels, Counter> = "holdfast_otlp_accepted_events",
            "Log records, spans and metric data points an OTLP/HTTP source appended, by signal";
        /// Request body bytes (after decompression) of accepted requests, by signal.
        pub bytes: Family<OtlpSignalLabels, Counter> = "holdfast_otlp_accepted", Bytes,
            "Request body bytes (decompressed) of the requests an OTLP/HTTP source accepted, by signal";
        /// Requests answered with anything but 200, by reason (`decode`,
        /// `too_large`, `log_full`, `draining`, …; see docs/sources-otlp-http.md).
        pub rejected: Family<OtlpReasonLabels, Counter> = "holdfast_otlp_rejected_requests",
            "OTLP/HTTP requests not accepted, by reason";
        /// Time from a request's head to its answer, by path.
        pub duration: Family<OtlpPathLabels, Histogram> = "holdfast_otlp_request_duration", Seconds,
            "Time from an OTLP/HTTP request's head to its answer, by path"
            with Family::new_with_constructor(|| {
                Histogram::new([
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0,
                ])
            });
    }
}

families! {
    /// Per-source figures of `file` sources (`src/sources/file/`).
    pub struct FileSourceMetrics {
        /// Files currently matched by the globs and followed.
        pub files_watched: Family<SourceLabels, Gauge> = "holdfast_file_source_files_watched",
            "Files a file source follows (matched by its globs)";
        /// Of those, files holding an open descriptor.
        pub files_open: Family<SourceLabels, Gauge> = "holdfast_file_source_open_files",
            "Files a file source holds open";
        /// Lines read (before multiline joining).
        pub lines: Family<SourceLabels, Counter> = "holdfast_file_source_lines",
            "Lines a file source read (before multiline joining)";
        /// Bytes read from files.
        pub bytes: Family<SourceLabels, Counter> = "holdfast_file_source_read", Bytes,
            "Bytes a file source read from files";
        /// Lines (or multiline events) cut at `max_line_bytes`.
        pub lines_truncated: Family<SourceLabels, Counter> = "holdfast_file_source_truncated_lines",
            "Lines (or multiline events) cut at max_line_bytes and marked log.record.truncated";
        /// Lines with invalid UTF-8, kept with U+FFFD replacements.
        pub lines_invalid_utf8: Family<SourceLabels, Counter> = "holdfast_file_source_invalid_utf8_lines",
            "Lines with invalid UTF-8, kept lossily and marked log.record.invalid_utf8";
        /// Files renamed, or deleted or moved out of the globs, while followed.
        pub rotations: Family<SourceLabels, Counter> = "holdfast_file_source_rotations",
            "Followed files renamed, deleted or moved out of the globs";
        /// Files truncated in place (copytruncate): a new generation began.
        pub truncations: Family<SourceLabels, Counter> = "holdfast_file_source_truncations",
            "Followed files truncated in place (copytruncate); each starts a new generation";
        /// Failed opens and reads of matched files.
        pub read_errors: Family<SourceLabels, Counter> = "holdfast_file_source_read_errors",
            "Failed opens and reads of matched files";
        /// Checkpoints that could not be written, or were found damaged.
        pub checkpoint_errors: Family<SourceLabels, Counter> = "holdfast_file_source_checkpoint_errors",
            "File source checkpoints that failed to write or were found damaged";
    }
}
