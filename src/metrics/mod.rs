/*!
Every metric holdfast exports, each family declared once.

Names follow Prometheus conventions: `holdfast_<what>_<unit>` with `_total`
on counters (prometheus-client appends it), few label values. A lost event is
counted once, with its reason, and never for something that will still be
retried. `docs/metrics.md` lists each metric; a test checks the two against
each other.

Two kinds live here:

* counters and gauges that components update as things happen, held in
  [`Metrics`]: each family is one `families!` entry (its doc comment is
  the help, then handle and served name) in the file of the part that
  owns it: [`sources`] and [`sinks`] for what every source or sink moves,
  here the ones that belong to no single component, and a component
  type's own in its folder, registered as a group (`groups.rs`,
  [`Metrics::group`]);
* the log's figures, read from [`Log::stats`] at scrape time by
  [`LogCollector`] (in `log.rs`), so the log's hot path updates nothing for
  metrics, and the process's (`process.rs`), read from `/proc/self`.

Every counter a configured source or sink can move is there at 0 from start
(`zero.rs`), so `increase(...) > 0` fires on the first event. A sink is
labelled `sink` and a source `source` in every family. `/metrics` serves
OpenMetrics to scrapers that ask for it and the classic text format to the
rest (`classic.rs`).
*/

use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::seglog::Log;

mod classic;
mod families;
mod groups;
mod log;
mod process;
pub mod sinks;
pub mod sources;
mod zero;

pub use classic::Format;
pub(crate) use families::families;
pub use families::{register_family, Families};
use groups::Groups;
pub use log::LogCollector;
use process::ProcessCollector;
pub use sinks::{SinkLabels, SinkMetrics, SinkReasonLabels, SinkStatusLabels};
pub use sources::{
    ProcessedLabels, SourceLabels, SourceMetrics, SourceReasonLabels, LISTENER_CLOSE_REASONS,
};
pub use zero::zero;

/// The component a series is about: `source="<name>"` or `sink="<name>"`,
/// the same label names as every other family, so `sum by (sink)` works
/// alike on all of them. Only the one that is set is encoded.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct ComponentLabels {
    pub source: String,
    pub sink: String,
}

impl ComponentLabels {
    /// The labels of a task or component named `source:<name>` or
    /// `sink:<name>` (how the daemon names them); any other name gets
    /// neither label.
    pub fn of(component: &str) -> ComponentLabels {
        let mut labels = ComponentLabels::default();
        match component.split_once(':') {
            Some(("source", name)) => labels.source = name.to_string(),
            Some(("sink", name)) => labels.sink = name.to_string(),
            _ => {}
        }
        labels
    }
}

impl EncodeLabelSet for ComponentLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let set: Vec<(&str, &str)> = [("source", &self.source), ("sink", &self.sink)]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k, v.as_str()))
            .collect();
        set.encode(encoder)
    }
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DropLabels {
    #[prometheus(flatten)]
    pub component: ComponentLabels,
    pub reason: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
    pub commit: String,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `ok` or `failed`.
    pub result: String,
}

families! {
    /// The metrics components update, and the registry `/metrics` encodes.
    /// A component type's own families are a group in its folder, reached
    /// with [`Metrics::group`].
    pub struct Metrics [registry: Mutex<Registry>, groups: Groups] {
        pub sources: Arc<SourceMetrics>;
        pub sinks: Arc<SinkMetrics>;
        // Every event lost for a reason other than log eviction (which the log counts per
        // consumer): a full output directory, a record too large to store, …
        /// Events lost for any reason other than log eviction, by source or sink and reason
        pub dropped: Family<DropLabels, Counter> = "holdfast_dropped_events";
        /// Source and sink tasks restarted after a failure
        pub task_restarts: Family<ComponentLabels, Counter> = "holdfast_task_restarts";
        /// Configuration reloads, by result (ok, failed: the old configuration kept running)
        pub config_reloads: Family<ReloadLabels, Counter> = "holdfast_config_reloads";
        /// The running build: its version and git commit (value always 1)
        pub build_info: Family<BuildLabels, Gauge> = "holdfast_build_info";
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
        registry.register_collector(Box::new(ProcessCollector));
        metrics.registry = Mutex::new(registry);
        metrics
            .build_info
            .get_or_create(&BuildLabels::current())
            .set(1);
        metrics
    }

    /// A sample in every family, the groups' too, so that each is encoded.
    #[cfg(test)]
    pub(crate) fn touch_every_family_and_group(&self) {
        self.touch_every_family();
        self.groups.touch_every_family();
    }

    /// The group of families `T` that a component type owns (declared in
    /// its folder with `families!`), registered on first use.
    pub fn group<T: Families + Send + Sync + 'static>(&self) -> Arc<T> {
        self.groups.get(&self.registry)
    }

    /// Counts `n` events lost by `component` (`source:<name>` or
    /// `sink:<name>`) for `reason`.
    pub fn drop_events(&self, component: &str, reason: &str, n: u64) {
        self.dropped
            .get_or_create(&DropLabels::of(component, reason))
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

    /// The exposition in OpenMetrics, prometheus-client's own format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        prometheus_client::encoding::text::encode(&mut out, &registry)?;
        Ok(out)
    }

    /// The exposition in `format`.
    pub fn encode_as(&self, format: Format) -> Result<String, std::fmt::Error> {
        let openmetrics = self.encode()?;
        Ok(match format {
            Format::OpenMetrics => openmetrics,
            Format::Classic => classic::to_classic(&openmetrics),
        })
    }
}

impl DropLabels {
    pub fn of(component: &str, reason: &str) -> DropLabels {
        DropLabels {
            component: ComponentLabels::of(component),
            reason: reason.to_string(),
        }
    }
}

impl BuildLabels {
    /// This binary's version, and the commit `build.rs` found (`unknown`
    /// outside a git checkout).
    pub(crate) fn current() -> BuildLabels {
        BuildLabels {
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: env!("HOLDFAST_GIT_COMMIT").to_string(),
        }
    }
}
