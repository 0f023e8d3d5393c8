/*!
The `host_metrics` source: the machine's own figures (CPU, load, memory,
paging, pressure stalls, disks, file systems, network, thermal zones,
uptime, processes) read from `<root>/proc` and `<root>/sys` every
`interval`, under the OpenTelemetry system semantic conventions' names and
units (`docs/sources-host-metrics.md` lists each metric).

```text
 collector thread (one, for the source's life):     appender (this task):
   wait for the tick (or stop)                         take a collection,
   each collector → Points (collect/)       ─ channel ─▶ append it (retried
   → metric_points::collect: one batch        of one     while the log is full),
                                                          count it
```

One collection is one append, its points all stamped with the time it was
taken; cumulative sums start at boot time. The collectors run on their own
thread because `statvfs` of a hung network mount blocks, and must not
block the runtime; the thread is spawned once, not per interval. The
channel holds one collection: while the log refuses appends (`when_full =
"block"`), the thread waits with its collection in hand, and the ticks it
misses are skipped, not queued.

A collector whose files are absent (no PSI, no thermal zone, a container
without `/sys`) adds nothing, said once at debug level; one that fails
(permission, parse) is counted in `holdfast_host_metrics_errors_total`,
warned about once until it works again, and the others go on.
*/

mod collect;
mod config;
mod filter;
mod metrics;
mod points;

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::metrics::v1::{ResourceMetrics, ScopeMetrics};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prometheus_client::metrics::counter::Counter;
use tracing::{debug, error, info, warn};

use crate::append_retry::{self, Appended, Refusal, Retry};
use crate::backoff::Backoff;
use crate::component::ComponentContext;
use crate::metrics::SourceLabels;
use crate::seglog::LogError;
use crate::sources::metric_points::{self, Collected};
use collect::{Collector, Failure, Filters, Host};
use metrics::HostMetricsSourceMetrics;
use points::{kv, Attr, Points};

pub use config::DEFAULT_INTERVAL;

/// The instrumentation scope of every point.
pub const SCOPE_NAME: &str = "holdfast.sources.host_metrics";

/// Every `reason` of `holdfast_dropped_events_total` for a `host_metrics`
/// source: a collection larger than one append; one in hand when the
/// source stopped while the log was full, or failing.
pub const DROP_REASONS: &[&str] = &["too_large", "log_full", "log_error"];

/// A refused append is tried again after 50 ms, doubling up to 2 s.
const RETRY_BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
/// Full log or failing disk: retried until the source stops.
const RETRY: Retry = Retry {
    wait_for_room: None,
    retry: true,
    back_off_when_full: true,
};

/// What a `host_metrics` source runs with (validated settings).
#[derive(Debug, Clone)]
pub struct HostMetricsSettings {
    pub interval: Duration,
    /// In [`Collector::ALL`] order, each once.
    pub collectors: Vec<Collector>,
    /// Whether `collectors` was written (else all, and absent ones are
    /// expected).
    pub chosen: bool,
    /// Where `proc/` and `sys/` are.
    pub root: PathBuf,
    pub filters: Filters,
}

/// One collection on its way to the log: its batch, offered again as it
/// is (a clone of the encoded events) if the log refuses it.
struct Collection {
    collected: Collected,
}

/// Runs the source until `stop` is cancelled.
pub async fn run(ctx: ComponentContext, opts: HostMetricsSettings) -> anyhow::Result<()> {
    let name = ctx.name.clone();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Collection>(1);
    // Dropping `stop_tx` wakes the thread from its wait at once.
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let collecting = Collecting::new(&ctx, &opts);
    let thread = std::thread::Builder::new()
        .name(format!("host_metrics:{name}"))
        .spawn(move || collecting.run(stop_rx, tx))
        .with_context(|| format!("source {name}: starting the collector thread"))?;
    info!(source = %name, interval = ?opts.interval, root = %opts.root.display(),
        "host_metrics source collecting");

    let mut appender = Appender::new(&ctx);
    loop {
        let c = tokio::select! {
            _ = ctx.stop.cancelled() => None,
            c = rx.recv() => c,
        };
        let Some(c) = c else { break };
        appender.append(c, &ctx.stop).await;
    }
    // Stopping: a collection already handed over is appended (tried once,
    // the stop being cancelled), and the thread ends at once.
    drop(stop_tx);
    if let Ok(c) = rx.try_recv() {
        appender.append(c, &ctx.stop).await;
    }
    drop(rx);
    tokio::task::spawn_blocking(move || thread.join())
        .await?
        .map_err(|_| anyhow::anyhow!("source {name}: the collector thread panicked"))?;
    Ok(())
}

/// Appends collections and counts them (`holdfast_source_events_total`,
/// or `holdfast_dropped_events_total` with a reason).
struct Appender {
    name: String,
    component: String,
    log: crate::seglog::Log,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    events: Counter,
    bytes: Counter,
    backoff: Backoff,
}

impl Appender {
    fn new(ctx: &ComponentContext) -> Appender {
        let labels = SourceLabels {
            source: ctx.name.clone(),
        };
        Appender {
            name: ctx.name.clone(),
            component: format!("source:{}", ctx.name),
            log: ctx.log.clone(),
            metrics: ctx.metrics.clone(),
            events: ctx.metrics.sources.events.get_or_create(&labels).clone(),
            bytes: ctx.metrics.sources.bytes.get_or_create(&labels).clone(),
            backoff: RETRY_BACKOFF,
        }
    }

    /// Appends `c`, retrying a full or failing log until `stop`.
    async fn append(&mut self, c: Collection, stop: &tokio_util::sync::CancellationToken) {
        let name = &self.name;
        let n = c.collected.events;
        let batch = c.collected.batch;
        let mut warned = false;
        let appended = append_retry::append(
            &self.log,
            || batch.clone(),
            RETRY,
            &mut self.backoff,
            stop,
            |e, _| {
                if !warned {
                    warned = true;
                    match e {
                        LogError::Full { .. } => warn!(source = %name,
                            "the log is full (when_full = \"block\"): host metrics are not \
                             collected until sinks free space"),
                        e => error!(source = %name, error = %e,
                            "cannot append host metrics to the log; retrying"),
                    }
                }
            },
        )
        .await;
        let lost = match appended {
            Appended::Done(_) => {
                self.events.inc_by(n);
                self.bytes.inc_by(c.collected.bytes);
                None
            }
            Appended::GaveUp(Refusal::Full, _) => Some("log_full"),
            Appended::TooLarge(e) => {
                error!(source = %name, error = %e, points = n,
                    "a host metrics collection is too large for one append and is dropped; \
                     raise log.segment_size, or narrow the collectors or their filters");
                Some("too_large")
            }
            Appended::GaveUp(_, _) | Appended::Failed(_) => Some("log_error"),
        };
        if let Some(reason) = lost {
            self.metrics.drop_events(&self.component, reason, n);
        }
    }
}

/// The collector thread's state, kept between intervals.
struct Collecting {
    name: String,
    interval: Duration,
    collectors: Vec<Collector>,
    host: Host,
    points: Points,
    resource: Resource,
    scope: InstrumentationScope,
    /// Largest batch one append takes.
    max_append: usize,
    /// `holdfast_host_metrics_errors_total`, by collector.
    errors: Vec<Counter>,
    /// Per collector: its absence was said (once), it is failing (warned
    /// once until it works again).
    absent_said: Vec<bool>,
    failing: Vec<bool>,
    component: String,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
}

impl Collecting {
    fn new(ctx: &ComponentContext, opts: &HostMetricsSettings) -> Collecting {
        let group = ctx.metrics.group::<HostMetricsSourceMetrics>();
        let errors = opts
            .collectors
            .iter()
            .map(|c| {
                group
                    .errors
                    .get_or_create(&group.labels(&ctx.name, *c))
                    .clone()
            })
            .collect();
        let host_name = crate::host::host_name_under(&opts.root);
        // What one append may carry (see `seglog::Log::append`).
        let max_append = metric_points::max_append_bytes(&ctx.log);
        Collecting {
            name: ctx.name.clone(),
            interval: opts.interval,
            collectors: opts.collectors.clone(),
            host: Host::new(&opts.root, opts.filters.clone()),
            points: Points::default(),
            resource: Resource {
                attributes: vec![
                    kv("service.name", Attr::Str("holdfast")),
                    kv("service.instance.id", Attr::Str(&host_name)),
                    kv("host.name", Attr::Str(&host_name)),
                ],
                ..Default::default()
            },
            scope: InstrumentationScope {
                name: SCOPE_NAME.to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                ..Default::default()
            },
            max_append,
            errors,
            absent_said: vec![false; opts.collectors.len()],
            failing: vec![false; opts.collectors.len()],
            component: format!("source:{}", ctx.name),
            metrics: ctx.metrics.clone(),
        }
    }

    /// Collects at once, then every `interval` until `stop` is dropped or
    /// the appender is gone.
    fn run(mut self, stop: Receiver<()>, tx: tokio::sync::mpsc::Sender<Collection>) {
        let mut next = Instant::now();
        loop {
            let wait = next.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                match stop.recv_timeout(wait) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
            let c = self.collect_once();
            // Ticks missed (a slow collection, a full log) are skipped.
            next += self.interval;
            let now = Instant::now();
            if next <= now {
                let behind = now.duration_since(next).as_nanos() / self.interval.as_nanos();
                next += self.interval * (behind as u32 + 1);
            }
            if let Some(c) = c {
                if tx.blocking_send(c).is_err() {
                    return;
                }
            }
        }
    }

    fn collect_once(&mut self) -> Option<Collection> {
        let observed = unix_nanos(SystemTime::now());
        let boot = match self.host.boot_time() {
            Ok(s) => s.saturating_mul(1_000_000_000),
            Err(_) => 0,
        };
        self.points.begin(observed, boot);
        for (i, c) in self.collectors.iter().enumerate() {
            match self.host.collect(*c, &mut self.points) {
                Ok(()) => {
                    if std::mem::take(&mut self.failing[i]) {
                        info!(source = %self.name, collector = c.name(),
                            "host_metrics collector works again");
                    }
                }
                Err(Failure::Absent(path)) => {
                    if !std::mem::replace(&mut self.absent_said[i], true) {
                        debug!(source = %self.name, collector = c.name(), path = %path.display(),
                            "host_metrics: this machine has no such file; the collector reports nothing");
                    }
                }
                Err(e @ Failure::Broken { .. }) => {
                    self.errors[i].inc();
                    if !std::mem::replace(&mut self.failing[i], true) {
                        warn!(source = %self.name, collector = c.name(), error = %e,
                            "host_metrics collector failed; its metrics are missing until it \
                             works again (holdfast_host_metrics_errors_total counts each time); \
                             check the file's permissions, or remove the collector from \
                             collectors");
                    }
                }
            }
        }
        let points = self.points.count();
        if points == 0 {
            return None;
        }
        let request = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(self.resource.clone()),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(self.scope.clone()),
                    metrics: self.points.to_metrics(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        match metric_points::collect(request, &self.name, observed, self.max_append) {
            Ok(collected) => Some(Collection { collected }),
            Err(e) => {
                error!(source = %self.name, error = %e, points,
                    "a host metrics collection cannot be appended and is dropped; raise \
                     log.segment_size, or narrow the collectors or their filters");
                self.metrics
                    .drop_events(&self.component, "too_large", points as u64);
                None
            }
        }
    }
}

fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
