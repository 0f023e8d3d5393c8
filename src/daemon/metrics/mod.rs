//! The registry the daemon serves: the families every component shares,
//! then each component type's own (`Source::register_families`), sources
//! before sinks, in the order of the lists of kinds, whatever is
//! configured, so `/metrics` lists them alike on every start.

use crate::metrics::Metrics;
use crate::seglog::Log;
use crate::sinks::SinkKind;
use crate::sources::SourceKind;

/// Every family the daemon serves, with the log's figures when `log` is given.
pub fn assemble(log: Option<Log>) -> Metrics {
    let metrics = Metrics::new(log);
    SourceKind::register_families(&metrics);
    SinkKind::register_families(&metrics);
    metrics
}

#[cfg(test)]
mod tests;
