/*!
The `internal_metrics` source: holdfast's own metrics (what `/metrics`
serves) appended to the log every interval as OTLP metric points, so a
device nobody can scrape still sends its dropped, evicted and quarantined
counts up its uplink.

Each interval the registry is encoded as OpenMetrics text (its lock held
only while encoding), read back with the `prometheus_scrape` source's
parser and converted the same way, then appended as one collection:
`holdfast_log_evicted_events_total` becomes the monotonic Sum
`holdfast_log_evicted_events`, which the `prometheus_remote_write` sink
names `holdfast_log_evicted_events_total` again. The resource is
`service.name = "holdfast"`, `service.instance.id` and `host.name` the
host name, so the series land as `job="holdfast"`, `instance="<host>"`.
*/

mod config;

pub use config::InternalMetricsSettings;

use tokio::time::MissedTickBehavior;
use tracing::warn;

use crate::component::ComponentContext;
use crate::sources::prometheus_scrape::append::{append, encoder, Outcome};
use crate::sources::prometheus_scrape::convert::{Builder, StartTimes, TargetLabels};
use crate::sources::prometheus_scrape::parse::{self, Format, Limits};

/// The scope of every point an `internal_metrics` source appends.
pub const SCOPE_NAME: &str = "holdfast.sources.internal_metrics";

/// Runs the source until its `stop` is cancelled.
pub async fn run(ctx: ComponentContext, opts: InternalMetricsSettings) -> anyhow::Result<()> {
    let host = crate::host::host_name();
    let target = TargetLabels {
        job: "holdfast".to_string(),
        instance: host.clone(),
        labels: Vec::new(),
        honor_labels: true,
        resource: vec![("host.name".to_string(), host)],
    };
    // holdfast's own registry: bounded by what holdfast registers, not by
    // anything outside; the limits only guard against a bug.
    let limits = Limits {
        max_samples: 1_000_000,
        ..Limits::default()
    };
    let mut starts = StartTimes::default();
    let mut ticks = tokio::time::interval(opts.interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = ctx.stop.cancelled() => return Ok(()),
            _ = ticks.tick() => {}
        }
        let time = crate::sources::prometheus_scrape::unix_nanos();
        let text = ctx.metrics.encode()?;
        let exposition = match parse::parse(&text, Format::OpenMetrics, &limits) {
            Ok(e) => e,
            Err(e) => {
                // holdfast's own encoder wrote it: a bug, reported, and the
                // next interval tries again.
                warn!(source = %ctx.name, error = %e,
                    "holdfast's own metrics did not parse, so this interval's are not appended; please report this as a bug");
                continue;
            }
        };
        let mut b = Builder::new(&target, encoder(&ctx, SCOPE_NAME));
        b.exposition(exposition, time, &mut starts);
        if append(&ctx, b.finish(), time, "holdfast's own metrics").await? == Outcome::Stopped {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    /// Every family holdfast registers, each with a sample, reads back
    /// through the scrape parser without an error.
    #[test]
    fn holdfast_s_own_exposition_parses() {
        let m = Metrics::new(None);
        m.touch_every_family_and_group();
        let text = m.encode().unwrap();
        let e = parse::parse(&text, Format::OpenMetrics, &Limits::default())
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let evicted = e
            .families
            .iter()
            .find(|f| f.name == "holdfast_dropped_events")
            .expect("holdfast_dropped_events");
        assert_eq!(evicted.kind, parse::Kind::Counter);
        assert!(evicted.samples.iter().all(|s| s.suffix == "_total"));
    }
}
