//! The `prometheus_scrape` sources' own metric families (registered through
//! the component contract, see `src/metrics/groups.rs`), the results they
//! count by, and the series each source creates at 0.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::metrics::{families, zero, SourceLabels};

/// The labels of `holdfast_scrape_scrapes_total`.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScrapeResultLabels {
    pub source: String,
    pub result: String,
}

/// Every `result` of `holdfast_scrape_scrapes_total`: `ok`, or why a
/// scrape failed (`up` = 0 was appended for it).
pub const SCRAPE_RESULTS: [&str; 10] = [
    "ok",
    "timeout",
    "connect",
    "http_status",
    "read",
    "body_too_large",
    "malformed",
    "too_many_samples",
    "too_many_labels",
    "label_too_long",
];

/// Every `reason` a `prometheus_scrape` or `internal_metrics` source drops
/// a collection's points for.
pub const SCRAPE_DROP_REASONS: &[&str] = &["log_full", "log_error", "too_large"];

families! {
    /// Per-source figures of `prometheus_scrape` sources (`src/sources/prometheus_scrape/`).
    pub struct ScrapeMetrics {
        /// Scrapes of a prometheus_scrape source's targets, by result (ok, or why up was 0)
        pub scrapes: Family<ScrapeResultLabels, Counter> = "holdfast_scrape_scrapes";
        /// Data points a prometheus_scrape source appended (its synthetic up and scrape_* series included)
        pub samples: Family<SourceLabels, Counter> = "holdfast_scrape_samples";
    }
}

impl ScrapeMetrics {
    /// The series of the source `name`, at 0.
    pub fn declare(&self, name: &str) {
        zero(
            &[&self.samples],
            &SourceLabels {
                source: name.to_string(),
            },
        );
        for result in SCRAPE_RESULTS {
            zero(&[&self.scrapes], &self.labels(name, result));
        }
    }

    pub fn labels(&self, name: &str, result: &str) -> ScrapeResultLabels {
        ScrapeResultLabels {
            source: name.to_string(),
            result: result.to_string(),
        }
    }
}
