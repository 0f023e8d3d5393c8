//! One target's loop: every interval (from an offset of its own within
//! the interval, as Prometheus spreads its targets), one scrape → one
//! collection (the target's samples and its `up`,
//! `scrape_duration_seconds`, `scrape_samples_scraped`) → one append.
//!
//! A failed scrape (no answer in time, refused, an HTTP error, a body over
//! its bounds, an exposition that does not parse) appends `up` = 0 with
//! the two `scrape_*` series and none of the target's samples, counts the
//! reason (`holdfast_scrape_scrapes_total{result}`) and logs it.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::append::{append, encoder, Outcome};
use super::convert::{Builder, StartTimes, TargetLabels};
use super::fetch::Fetcher;
use super::metrics::ScrapeMetrics;
use super::parse::{self, Limits};
use crate::component::ComponentContext;
use crate::metrics::SourceLabels;

/// The scope of every point a `prometheus_scrape` source appends.
pub const SCOPE_NAME: &str = "holdfast.sources.prometheus_scrape";

/// A target: where, and the labels its series get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub url: reqwest::Url,
    pub labels: TargetLabels,
}

/// What every target of a source shares.
pub struct Shared {
    pub ctx: ComponentContext,
    pub fetcher: Fetcher,
    pub interval: Duration,
    pub limits: Limits,
    pub metrics: Arc<ScrapeMetrics>,
}

/// Scrapes `target` until `stop`.
pub async fn run(
    shared: Arc<Shared>,
    target: Target,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let offset = offset(&shared.ctx.name, target.url.as_str(), shared.interval);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + offset, shared.interval);
    // A scrape whose append waited (a full log) does not make up for the
    // ticks it missed: the next scrape is the next tick.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut starts = StartTimes::default();
    // The last scrape's result: a target down for a day logs once when it
    // goes down (and again if the reason changes), once when it is back.
    let mut last = "ok";
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = ticks.tick() => {}
        }
        let (outcome, result) = scrape(&shared, &target, &mut starts, last).await?;
        if result == "ok" && last != "ok" {
            info!(source = %shared.ctx.name, target = %target.url, "target is up again");
        }
        last = result;
        if outcome == Outcome::Stopped {
            return Ok(());
        }
    }
}

/// One scrape and its append, and its result (`ok` or why `up` = 0);
/// `last` is the previous one's.
async fn scrape(
    shared: &Shared,
    target: &Target,
    starts: &mut StartTimes,
    last: &'static str,
) -> anyhow::Result<(Outcome, &'static str)> {
    let ctx = &shared.ctx;
    let began = Instant::now();
    let time = unix_nanos();
    let fetched = shared.fetcher.fetch(&target.url).await;
    let mut b = Builder::new(&target.labels, encoder(ctx, SCOPE_NAME));
    // The exposition borrows the body: the body outlives it.
    let parsed = match &fetched {
        Ok((body, format)) => {
            parse::parse(body, *format, &shared.limits).map_err(|e| (e.reason(), e.to_string()))
        }
        Err(e) => Err((e.reason(), e.to_string())),
    };
    let (up, samples, result) = match parsed {
        Ok(exposition) => {
            let n = exposition.samples;
            b.exposition(exposition, time, starts);
            (1.0, n, "ok")
        }
        Err((reason, why)) => {
            if reason != last {
                warn!(source = %ctx.name, target = %target.url, reason,
                    "scrape failed, up = 0 (said once until the reason changes; holdfast_scrape_scrapes_total counts each): {why}");
            } else {
                debug!(source = %ctx.name, target = %target.url, reason, "scrape failed, up = 0: {why}");
            }
            (0.0, 0, reason)
        }
    };
    let took = began.elapsed().as_secs_f64();
    b.synthetic("up", "", up, time);
    b.synthetic("scrape_duration_seconds", "s", took, time);
    b.synthetic("scrape_samples_scraped", "", samples as f64, time);
    shared
        .metrics
        .scrapes
        .get_or_create(&shared.metrics.labels(&ctx.name, result))
        .inc();
    let outcome = append(ctx, b.finish(), unix_nanos(), target.url.as_str()).await?;
    if let Outcome::Appended(points) = outcome {
        shared
            .metrics
            .samples
            .get_or_create(&SourceLabels {
                source: ctx.name.clone(),
            })
            .inc_by(points);
        debug!(source = %ctx.name, target = %target.url, points, "scrape appended");
    }
    Ok((outcome, result))
}

/// Where in each interval a target is scraped: fixed per source and
/// target, so targets are spread and each keeps its rhythm across
/// restarts (as Prometheus hashes its targets).
fn offset(source: &str, url: &str, interval: Duration) -> Duration {
    let h = xxhash_rust::xxh3::xxh3_64(format!("{source}\0{url}").as_bytes());
    let ns = interval.as_nanos().max(1) as u64;
    Duration::from_nanos(h % ns)
}

pub(crate) fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_within_the_interval_and_differ_per_target() {
        let i = Duration::from_secs(15);
        let a = offset("s", "http://a:1/metrics", i);
        let b = offset("s", "http://b:1/metrics", i);
        assert!(a < i && b < i);
        assert_ne!(a, b);
        assert_eq!(a, offset("s", "http://a:1/metrics", i));
    }
}
