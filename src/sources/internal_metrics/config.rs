//! `[sources.<name>]` with `type = "internal_metrics"`: its one key, its
//! check and its line in `holdfast check`.

use std::fmt::{self, Write};
use std::time::Duration;

use crate::checking::units::{format_duration, Dur};
use crate::checking::{Checker, Env, NamedTable};
use crate::component::{ComponentContext, Run, Source, SourceEnv};
use crate::metrics::Metrics;
use crate::sources::prometheus_scrape::SCRAPE_DROP_REASONS;
use crate::sources::raw::raw_source;

/// `type = "internal_metrics"`: holdfast's own metrics, appended.
#[derive(Debug, Clone)]
pub struct InternalMetricsSettings {
    pub interval: Duration,
}

const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);

raw_source! {
    /// `[sources.<name>]` with `type = "internal_metrics"`, as written.
    struct RawInternalMetricsSource {
        /// Default `"30s"`; at least 1s.
        interval: Dur,
    }
}

impl Source for InternalMetricsSettings {
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, _env: &SourceEnv<'_>) -> Option<Self> {
        let raw: RawInternalMetricsSource = cx.deserialize(&t.key, t.value)?;
        let key = format!("{}.interval", t.key);
        let mut interval = cx.duration(
            &key,
            raw.interval.as_ref(),
            DEFAULT_INTERVAL,
            Some("holdfast would collect its metrics without pause"),
        );
        if interval < Duration::from_secs(1) {
            cx.error(
                raw.interval.as_ref().map(|v| v.span()),
                &key,
                format!(
                    "{} is too short: every collection appends all of holdfast's series; set \
                     it to 1s or more (default 30s)",
                    format_duration(interval)
                ),
            );
            interval = DEFAULT_INTERVAL;
        }
        Some(InternalMetricsSettings { interval })
    }

    fn describe(&self, out: &mut String) -> fmt::Result {
        writeln!(
            out,
            "    appends holdfast's own metrics every {} (job=\"holdfast\", instance = this host)",
            format_duration(self.interval)
        )
    }

    fn declare_metrics(&self, name: &str, metrics: &Metrics) {
        metrics.declare_source_drops(name, SCRAPE_DROP_REASONS);
    }

    fn run(&self, ctx: &ComponentContext) -> Run {
        Box::pin(super::run(ctx.clone(), self.clone()))
    }

    fn check_environment(&self, _name: &str, _env: &mut Env<'_>) {}
}

#[cfg(test)]
mod tests {

    fn errors(source: &str) -> Vec<(String, String)> {
        let text = format!(
            "[sources.s]\ntype = \"internal_metrics\"\n{source}\n\n[sinks.out]\ntype = \"file\"\ninputs = [\"s\"]\npath = \"/tmp/x\"\n"
        );
        crate::config::error_messages(&text)
    }

    #[test]
    fn the_interval_is_checked() {
        assert_eq!(errors(""), []);
        assert_eq!(errors("interval = \"10s\""), []);
        let e = errors("interval = \"100ms\"");
        assert!(
            e.iter()
                .any(|(k, m)| k == "sources.s.interval" && m.contains("1s or more")),
            "{e:?}"
        );
        let e = errors("targets = []");
        assert!(e.iter().any(|(k, _)| k.starts_with("sources.s")), "{e:?}");
    }
}
