//! The `host_metrics` sources' own metric family (registered through the
//! component contract, see `src/metrics/groups.rs`) and the series each
//! `host_metrics` source creates at 0.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::collect::Collector;
use crate::metrics::{families, zero};

/// A `host_metrics` source and one of its collectors.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CollectorLabels {
    pub source: String,
    pub collector: String,
}

families! {
    /// Per-source figures of `host_metrics` sources (`src/sources/host_metrics/`).
    pub struct HostMetricsSourceMetrics {
        /// Collections in which a host_metrics collector could not read or parse its files (its metrics are missing from that collection), by collector
        pub errors: Family<CollectorLabels, Counter> = "holdfast_host_metrics_errors";
    }
}

impl HostMetricsSourceMetrics {
    /// The series of the source `name` for each of its `collectors`, at 0.
    pub fn declare(&self, name: &str, collectors: &[Collector]) {
        for c in collectors {
            zero(&[&self.errors], &self.labels(name, *c));
        }
    }

    pub fn labels(&self, name: &str, c: Collector) -> CollectorLabels {
        CollectorLabels {
            source: name.to_string(),
            collector: c.name().to_string(),
        }
    }
}
