/*!
Sources: where events come from. Each source turns its input into
[`Envelope`](crate::event::Envelope)s and appends them to the log, and
acknowledges its input (a file checkpoint, an HTTP response) only after the
append is durable.

* [`file`](mod@file) — tails files through rotation, truncation, crashes and bad lines,
  without losing or repeating a line.
* [`otlp_http`] — an OTLP/HTTP receiver (protobuf and JSON) that answers 200
  only once a request's records are durable.
* [`otlp`] — OTLP over gRPC and HTTP from one source (the Collector's `otlp`
  receiver shape), through `otlp_http`'s pipeline: `OK` only once a call's
  records are durable.
* [`journald`] — the systemd journal through sd-journal, its cursor
  checkpointed only after the append is durable, each entry once.
* [`syslog`] — RFC 5424 and RFC 3164 over TCP (TLS) or UDP; TCP is read only
  as fast as appends complete.
* [`prometheus_scrape`] — Prometheus targets (text format, OpenMetrics)
  scraped every interval, one append per target per scrape.
* [`internal_metrics`] — holdfast's own metrics, through the same parser,
  appended every interval.
* [`host_metrics`] — the machine's CPU, memory, disks, file systems, network
  and more from `/proc` and `/sys`, one append per collection.
* [`mqtt`] — topic filters on an MQTT broker (5 or 3.1.1), each message
  acknowledged (PUBACK, PUBREC) only once durable.

Each source's folder holds its own table (`config.rs`: raw keys, check,
description); the list below names the types. [`listen`] is what the
sources that listen on TCP share (address, connection cap, TLS); `raw`
declares the raw structs of their tables; [`budget`] is the memory budget
`otlp_http` and `syslog` reserve from; `metric_points` is the one batch of
a collection of metric points the metric sources append.
*/

/// Whether sources append format-2 events: each event only its own fields,
/// what a batch's events share once in the batch's context
/// ([`Batch::set_context`](crate::seglog::Batch::set_context), see
/// `event/stored.rs`). Format-2 events are meaningless without their
/// context, so this is on only because the log's writer stores contexts;
/// off, sources append whole format-1 envelopes (as earlier versions did).
/// Readers (the file source's recovery, sinks, `dump`) read both.
pub const WRITE_FORMAT_2: bool = true;

pub(crate) mod budget;
pub mod file;
pub mod host_metrics;
pub mod internal_metrics;
pub mod journald;
pub mod listen;
pub(crate) mod metric_points;
pub mod mqtt;
pub mod otlp;
pub mod otlp_http;
pub mod prometheus_scrape;
pub(crate) mod raw;
pub mod syslog;

use crate::component::{components, Processing};

components! {
    /// The kinds of source, by `type`.
    enum SourceKind: Source, SourceEnv, SOURCE_TYPES, declare_source {
        /// `type = "file"`: tail log files.
        "file" => File(file::FileSourceOptions),
        /// `type = "otlp_http"`: an OTLP/HTTP receiver.
        "otlp_http" => OtlpHttp(otlp_http::OtlpHttpSourceSettings),
        /// `type = "journald"`: read the systemd journal.
        "journald" => Journald(journald::JournaldOptions),
        /// `type = "syslog"`: RFC 5424/3164 over TCP (TLS) or UDP.
        "syslog" => Syslog(syslog::SyslogSourceSettings),
        /// `type = "otlp"`: OTLP over gRPC and HTTP (the Collector's `otlp` receiver).
        "otlp" => Otlp(otlp::OtlpSourceSettings),
        /// `type = "prometheus_scrape"`: scrape Prometheus targets.
        "prometheus_scrape" => PrometheusScrape(prometheus_scrape::ScrapeSettings),
        /// `type = "internal_metrics"`: holdfast's own metrics.
        "internal_metrics" => InternalMetrics(internal_metrics::InternalMetricsSettings),
        /// `type = "host_metrics"`: the machine's CPU, memory, disks, network… from /proc and /sys.
        "host_metrics" => HostMetrics(host_metrics::HostMetricsSettings),
        /// `type = "mqtt"`: subscribe to an MQTT broker, acknowledging what is durable.
        "mqtt" => Mqtt(mqtt::MqttSourceSettings),
    }
}

impl SourceKind {
    /// The source's processing chain, for `holdfast check --sample`;
    /// `None` when its type runs none.
    pub fn processing(&self) -> Option<Processing<'_>> {
        self.component().processing()
    }
}
