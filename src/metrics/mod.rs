/*!
Every metric holdfast exports, each family declared once.

Names follow Prometheus conventions: `holdfast_<what>_<unit>` with `_total`
on counters (prometheus-client appends it), few label values. A lost event is
counted once, with its reason, and never for something that will still be
retried. `docs/metrics.md` lists each metric; a test checks the two against
each other.

Two kinds live here:

* counters and gauges that components update as things happen, held in
  [`Metrics`]: each family is one `families!` line (handle, name, unit,
  help) in the file of the part that owns it ([`sources`], [`sinks`], and
  here the ones that belong to no single component);
* the log's figures, read from [`Log::stats`] at scrape time by
  [`LogCollector`] (in `log.rs`), so the log's hot path updates nothing for
  metrics.
*/

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::seglog::Log;

mod families;
mod log;
pub mod sinks;
pub mod sources;

use families::{families, Families};
pub use log::LogCollector;
pub use sinks::{SinkLabels, SinkMetrics, SinkReasonLabels, SinkStatusLabels};
pub use sources::{
    FileSourceMetrics, OtlpPathLabels, OtlpReasonLabels, OtlpRequestLabels, OtlpSignalLabels,
    OtlpSourceMetrics, SourceLabels, SourceMetrics,
};

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabels {
    /// `source:<name>`, `sink:<name>`, …
    pub component: String,
    pub reason: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabels {
    pub task: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `ok` or `failed`.
    pub result: String,
}

families! {
    /// The metrics components update, and the registry `/metrics` encodes.
    pub struct Metrics [registry: Registry] {
        pub sources: Arc<SourceMetrics>;
        /// The `otlp_http` sources' requests, events and rejections.
        pub otlp: Arc<OtlpSourceMetrics>;
        /// The `file` sources' files, lines, rotations and errors.
        pub file_sources: Arc<FileSourceMetrics>;
        pub sinks: Arc<SinkMetrics>;
        /// Every event lost for a reason other than log eviction (which the log
        /// counts per consumer): a full output directory, a record too large to
        /// store, …
        pub dropped: Family<DropLabels, Counter> = "holdfast_dropped_events",
            "Events lost for any reason other than log eviction, by component and reason";
        /// Supervised tasks restarted after a failure.
        pub task_restarts: Family<TaskLabels, Counter> = "holdfast_task_restarts",
            "Source and sink tasks restarted after a failure";
        /// SIGHUP reloads: `ok` (the new config runs) or `failed` (refused,
        /// the old one still runs).
        pub config_reloads: Family<ReloadLabels, Counter> = "holdfast_config_reloads",
            "Config reloads (SIGHUP), by result: ok, or failed (the previous config still runs)";
    }
}

impl Metrics {
    pub fn new(log: Option<Log>) -> Metrics {
        let mut metrics = Metrics::unregistered();
        // The registry holds clones of the handles, so it is filled apart
        // from the struct that owns it and put in place afterwards.
        let mut registry = Registry::default();
        metrics.register(&mut registry);

        if let Some(log) = log {
            registry.register_collector(Box::new(LogCollector { log }));
        }
        metrics.registry = registry;
        metrics
    }

    /// Counts `n` events lost by `component` for `reason`.
    pub fn drop_events(&self, component: &str, reason: &str, n: u64) {
        self.dropped
            .get_or_create(&DropLabels {
                component: component.to_string(),
                reason: reason.to_string(),
            })
            .inc_by(n);
    }

    /// Counts a config reload that ended with `result` (`ok`, `failed`);
    /// `n` = 0 only makes the series exist.
    pub fn count_reloads(&self, result: &str, n: u64) {
        self.config_reloads
            .get_or_create(&ReloadLabels {
                result: result.to_string(),
            })
            .inc_by(n);
    }

    /// The Prometheus text exposition (OpenMetrics flavour).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
