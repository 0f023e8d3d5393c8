/*!
The `prometheus_scrape` source: Prometheus targets scraped every interval,
their samples converted to OTLP metric points and appended, one collection
per target per scrape.

```text
 targets, targets_file ─▶ mod.rs         the set of targets; the file looked at once per interval
                          target.rs      one task per target: its offset, its ticks, up and scrape_*
                          fetch.rs       HTTP(S) GET, Accept OpenMetrics then text, gzip, body cap
                          parse/         the text format and OpenMetrics, bounded
                          convert.rs     families → OTLP metric points (job/instance → resource)
                          encode.rs      each point's event written from its labels: one batch
                          append.rs      the batch → one append, retried
```

Each target runs in its own task, its deadline its own: a slow or silent
target delays nothing but itself. A target's next scrape waits for its
previous append (a full log under `when_full = "block"`), so collections
never pile up in memory; the scrapes it missed meanwhile are not made up.

`internal_metrics` (`src/sources/internal_metrics/`) reads holdfast's own
registry through the same parser, conversion and append.
*/

pub(crate) mod append;
mod config;
pub(crate) mod convert;
pub(crate) mod encode;
mod fetch;
pub mod metrics;
pub mod parse;
mod target;
mod targets_file;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use config::ScrapeSettings;
pub(crate) use metrics::SCRAPE_DROP_REASONS;
pub(crate) use target::unix_nanos;
pub use target::SCOPE_NAME;

use crate::component::ComponentContext;
use convert::TargetLabels;
use target::{Shared, Target};
use targets_file::TargetsFile;

/// Runs the source until its `stop` is cancelled.
pub async fn run(ctx: ComponentContext, opts: ScrapeSettings) -> anyhow::Result<()> {
    let fetcher = fetch::Fetcher::new(&opts, &ctx.name)?;
    let shared = Arc::new(Shared {
        metrics: ctx.metrics.group::<metrics::ScrapeMetrics>(),
        ctx: ctx.clone(),
        fetcher,
        interval: opts.interval,
        limits: opts.limits,
    });
    let mut file = opts.targets_file.clone().map(TargetsFile::new);
    let mut last_file_error = None;
    let mut running: HashMap<String, (Target, CancellationToken)> = HashMap::new();
    let mut tasks = JoinSet::new();
    loop {
        if let Some(f) = file.as_mut() {
            match f.refresh() {
                Ok(changed) => {
                    if changed {
                        info!(source = %ctx.name, file = %f.path().display(), targets = f.targets().len(),
                            "read the targets file");
                    }
                    last_file_error = None;
                }
                Err(why) => {
                    if last_file_error.as_ref() != Some(&why) {
                        warn!(source = %ctx.name, file = %f.path().display(),
                            "the targets file is not usable, so the targets read before are kept: {why}; fix the file (Prometheus file_sd JSON)");
                    }
                    last_file_error = Some(why);
                }
            }
        }
        let wanted = targets(&ctx.name, &opts, file.as_ref());
        running.retain(|key, (t, stop)| {
            let keep = wanted.get(key) == Some(t);
            if !keep {
                stop.cancel();
            }
            keep
        });
        for (key, t) in wanted {
            if running.contains_key(&key) {
                continue;
            }
            let stop = ctx.stop.child_token();
            tasks.spawn(target::run(shared.clone(), t.clone(), stop.clone()));
            running.insert(key, (t, stop));
        }
        // Reap the tasks that ended; one that failed (the log closed)
        // ends the source, and the supervisor starts it again.
        while let Some(done) = tasks.try_join_next() {
            done??;
        }
        tokio::select! {
            _ = ctx.stop.cancelled() => break,
            _ = tokio::time::sleep(opts.interval), if file.is_some() => {}
            Some(done) = tasks.join_next() => { done??; }
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// Every target the source scrapes now, by a key naming its URL and
/// labels (a target whose labels change is started again).
fn targets(name: &str, o: &ScrapeSettings, file: Option<&TargetsFile>) -> HashMap<String, Target> {
    let from_file = file.into_iter().flat_map(|f| f.targets());
    let all = o
        .targets
        .iter()
        .map(|u| (u.clone(), Vec::new()))
        .chain(from_file.map(|t| (t.url.clone(), t.labels.clone())));
    let mut out = HashMap::new();
    for (url, file_labels) in all {
        let mut labels: Vec<(String, String)> = o.labels.clone();
        for (k, v) in file_labels {
            match labels.iter_mut().find(|(n, _)| *n == k) {
                Some(l) => l.1 = v,
                None => labels.push((k, v)),
            }
        }
        let mut take = |n: &str| {
            labels
                .iter()
                .position(|(k, _)| k == n)
                .map(|i| labels.remove(i).1)
        };
        let job = take("job").unwrap_or_else(|| name.to_string());
        let instance = take("instance").unwrap_or_else(|| instance_of(&url));
        let key = format!("{url} {labels:?} {job} {instance}");
        let target = Target {
            url,
            labels: TargetLabels {
                job,
                instance,
                labels,
                honor_labels: o.honor_labels,
                resource: Vec::new(),
            },
        };
        out.insert(key, target);
    }
    out
}

/// `host:port` of a URL, as Prometheus' `instance` label.
fn instance_of(url: &reqwest::Url) -> String {
    // An IPv6 host comes in its brackets.
    let host = url.host_str().unwrap_or_default();
    match url.port_or_known_default() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    }
}
