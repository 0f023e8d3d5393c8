//! Supervised tasks: a source or sink that fails (returns an error or
//! panics) is logged with its name and started again after a backoff, and
//! never takes the others down.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::api::Health;
use crate::backoff::Backoff;
use crate::component::{ComponentContext, Run};
use crate::metrics::{ComponentLabels, Metrics};

/// A failed task starts again after 1 s, doubling up to 60 s.
const RESTART_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
/// A task that ran this long before failing starts again from the first backoff.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// A restarted task that has run this long is taken to work again.
const SETTLED: Duration = Duration::from_secs(1);

/// Runs `make()` until it returns `Ok` after `stop` was cancelled, restarting
/// it with exponential backoff whenever it fails; with `health`, while the
/// task fails (from a failure until a restart has run for `SETTLED`) it is
/// listed there, so `/readyz` says so.
pub fn spawn_watched<F, Fut>(
    name: String,
    metrics: Arc<Metrics>,
    health: Option<Arc<Health>>,
    stop: CancellationToken,
    make: F,
) -> JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    tokio::spawn(async move {
        let mut backoff = RESTART_BACKOFF;
        let mut failing = false;
        loop {
            let started = Instant::now();
            let mut task = tokio::spawn(make());
            let outcome = match (&health, failing) {
                (Some(h), true) => tokio::select! {
                    o = &mut task => o,
                    _ = tokio::time::sleep(SETTLED) => {
                        h.clear_failing(&name);
                        failing = false;
                        task.await
                    }
                },
                _ => task.await,
            };
            if stop.is_cancelled() {
                if let Ok(Err(e)) = &outcome {
                    error!(task = %name, error = format!("{e:#}"), "task failed while stopping");
                }
                return;
            }
            let why = match outcome {
                Ok(Ok(())) => {
                    error!(task = %name, "task ended on its own; starting it again");
                    "it ended on its own".to_string()
                }
                Ok(Err(e)) => {
                    error!(task = %name, error = format!("{e:#}"), "task failed; starting it again in {:?}", backoff.current());
                    format!("{e:#}")
                }
                Err(e) => {
                    error!(task = %name, error = %e, "task panicked; starting it again in {:?}", backoff.current());
                    format!("it panicked: {e}")
                }
            };
            if let Some(h) = &health {
                h.set_failing(&name, why);
                failing = true;
            }
            if started.elapsed() >= HEALTHY_RUN {
                backoff.reset();
            }
            metrics
                .task_restarts
                .get_or_create(&ComponentLabels::of(&name))
                .inc();
            tokio::select! {
                _ = tokio::time::sleep(backoff.current()) => {}
                _ = stop.cancelled() => return,
            }
            backoff.grow();
            info!(task = %name, "restarting task");
        }
    })
}

/// Runs a component under the supervisor, with its context; a `watched`
/// one is listed in `/readyz` while it fails.
pub fn spawn_component(
    task: String,
    ctx: ComponentContext,
    watched: bool,
    run: impl Fn(&ComponentContext) -> Run + Send + 'static,
) -> JoinHandle<()> {
    let health = watched.then(|| ctx.health.clone());
    spawn_watched(
        task,
        ctx.metrics.clone(),
        health,
        ctx.stop.clone(),
        move || run(&ctx),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A task that fails its first `failures` runs with `why`, then runs
    /// until `stop`; `runs` counts its starts.
    fn flaky(
        runs: &Arc<AtomicU32>,
        stop: &CancellationToken,
        failures: u32,
        why: &'static str,
    ) -> impl Fn() -> Run + Send + 'static {
        let (r, s) = (runs.clone(), stop.clone());
        move || {
            let (r, s) = (r.clone(), s.clone());
            Box::pin(async move {
                if r.fetch_add(1, Ordering::SeqCst) < failures {
                    anyhow::bail!(why);
                }
                s.cancelled().await;
                Ok(())
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_task_is_restarted_until_stopped() {
        let metrics = Arc::new(Metrics::new(None));
        let stop = CancellationToken::new();
        let runs = Arc::new(AtomicU32::new(0));
        let make = flaky(&runs, &stop, 3, "boom");
        let h = spawn_watched("t".into(), metrics.clone(), None, stop.clone(), make);
        while runs.load(Ordering::SeqCst) < 4 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop.cancel();
        h.await.unwrap();
        let restarts = metrics
            .task_restarts
            .get_or_create(&ComponentLabels::of("t"))
            .get();
        assert_eq!(restarts, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watched_task_is_listed_as_failing_until_a_restart_settles() {
        let metrics = Arc::new(Metrics::new(None));
        let health = Arc::new(Health::default());
        let stop = CancellationToken::new();
        let runs = Arc::new(AtomicU32::new(0));
        let make = flaky(&runs, &stop, 2, "cannot bind");
        let h = spawn_watched(
            "source:t".into(),
            metrics,
            Some(health.clone()),
            stop.clone(),
            make,
        );
        while runs.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        let failing = health.failing();
        assert_eq!(failing.len(), 1);
        assert!(failing[0].1.contains("cannot bind"), "{failing:?}");
        // Second run fails too; the third runs, and settles after SETTLED.
        while runs.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(health.failing().len(), 1, "not settled yet");
        tokio::time::sleep(SETTLED + Duration::from_millis(10)).await;
        assert!(health.failing().is_empty());
        stop.cancel();
        h.await.unwrap();
    }
}
